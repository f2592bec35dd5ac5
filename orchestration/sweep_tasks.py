"""The hyperparameter sweep's worker tasks in a pipeline's train DAG: plan the candidates (a parent
MLflow run, one train-job argument list each, of every family of ``sweep.families``, for dynamic
task mapping) and pick the best of them on the validation days once they have trained. The
sequence and its arguments are :mod:`orchestration.training_sequence`'s, the decisions
:mod:`jobs.selection.sweep`'s."""

from __future__ import annotations

from typing import Any

from airflow.sdk import task
from airflow.sdk.exceptions import AirflowFailException

from jobs.config.pipelines import Pipeline
from orchestration.pipelines import config_of
from orchestration.training_sequence import SWEEP_PARAMS

__all__ = ["SWEEP_PARAMS", "plan_sweep", "select_candidate"]


def plan_sweep(pipeline: Pipeline, run_date: Any, started_by: Any, training_id: Any = None) -> Any:
    """One train-job argument list per candidate (:func:`orchestration.training_sequence.plan_candidates`
    over the DAG's params), each a child of a new parent MLflow run, all of the training ``training_id``."""

    @task(task_id="plan_sweep")
    def plan(run_date: str, started_by: str, training_id: str | None = None,
             params: dict[str, Any] | None = None) -> list[list[str]]:
        from orchestration.training_sequence import plan_candidates

        planned = plan_candidates(config_of(pipeline), run_date, started_by, training_id, params)
        for args in planned:
            print(f"sweep candidate {args[3]}")
        parent = planned[0][planned[0].index("--parent-run-id") + 1]
        print(f"{len(planned)} candidates under MLflow run {parent}")
        return planned

    return plan(run_date=run_date, started_by=started_by, training_id=training_id)


def select_candidate(pipeline: Pipeline, candidate_args: Any) -> Any:
    """The finished candidate run with the best validation promotion metric (its run id)."""

    @task(task_id="select_candidate")
    def select(candidate_args: list[list[str]]) -> str:
        from jobs.errors import DataError
        from orchestration.training_sequence import choose_candidate

        config = config_of(pipeline)
        try:
            best = choose_candidate(config, candidate_args)
        except DataError as err:  # a retry chooses among the same runs
            raise AirflowFailException(f"pipeline {pipeline.name}: {err}") from err
        print(f"best of {len(candidate_args)} candidates on the validation days: {best['name']} "
              f"({best['family']}, run {best['run_id']}, validation {best['metric']} {best['score']})")
        return best["run_id"]

    return select(candidate_args=candidate_args)

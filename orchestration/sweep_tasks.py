"""The hyperparameter sweep's worker tasks in a pipeline's train DAG: plan the candidates (a parent
MLflow run, one train-job argument list each, of every family of ``sweep.families``, for dynamic
task mapping) and pick the best of them on the validation days once they have trained. The
decisions live in :mod:`jobs.selection.sweep`."""

from __future__ import annotations

from typing import Any

from airflow.sdk import task

from jobs.config.pipelines import Pipeline
from orchestration.pipelines import config_of

# The sweep's DAG params: each empty keeps ``sweep.<name>`` of the config.
SWEEP_PARAMS = {"sweep_size": "size", "sweep_learning_rates": "learning_rate", "sweep_widths": "width",
                "sweep_depths": "depth", "sweep_epochs": "epochs"}


def plan_sweep(pipeline: Pipeline, run_date: Any, started_by: Any, training_id: Any = None) -> Any:
    """One train-job argument list per candidate (:func:`jobs.selection.sweep.candidates` over the DAG's
    params), each a child of a new parent MLflow run, all of the training ``training_id``."""

    @task(task_id="plan_sweep")
    def plan(run_date: str, started_by: str, training_id: str | None = None,
             params: dict[str, Any] | None = None) -> list[list[str]]:
        from jobs.config import override_json
        from jobs.selection.sweep import candidate_args, candidates, open_parent

        params = params or {}
        config = config_of(pipeline)
        train = config.train
        base = {"learning_rate": params.get("learning_rate") or train.learning_rate,
                "epochs": params.get("epochs") or train.epochs, "hyperparameters": dict(train.hyperparameters)}
        found = candidates(config.sweep, base, {key: params.get(name) for name, key in SWEEP_PARAMS.items()})
        parent = open_parent(config, run_date, found, started_by, training_id or None)
        common = ["--overrides", override_json(params), "--started-by", started_by]
        for candidate in found:
            print(f"sweep candidate {candidate['name']}")
        print(f"{len(found)} candidates under MLflow run {parent}")
        return [["--run-date", run_date, "--candidate-name", c["name"], *common,
                 *candidate_args(c, parent, training_id or None)] for c in found]

    return plan(run_date=run_date, started_by=started_by, training_id=training_id)


def select_candidate(pipeline: Pipeline, candidate_args: Any) -> Any:
    """The finished candidate run with the best validation promotion metric (its run id)."""

    @task(task_id="select_candidate")
    def select(candidate_args: list[list[str]]) -> str:
        from jobs.selection.sweep import best_candidate

        config = config_of(pipeline)
        first = candidate_args[0]
        best = best_candidate(config, first[first.index("--parent-run-id") + 1])
        print(f"best of {len(candidate_args)} candidates on the validation days: {best['name']} "
              f"({best['family']}, run {best['run_id']}, validation {config.train.promotion_metric} "
              f"{best['score']})")
        return best["run_id"]

    return select(candidate_args=candidate_args)

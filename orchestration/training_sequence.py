"""The training sequence, written once: which jobs a training runs, in which order, with which
arguments: the baselines, the sweep's candidates, the choice among them on the validation days,
and the promotion of the one chosen. The train DAG's tasks (:mod:`orchestration.dags.train`,
:mod:`orchestration.sweep_tasks`) and the replay (:mod:`orchestration.replay.engine`) both plan
with it; each adds only where the jobs run (``--run-date`` as a template, the config and lake options).

Values may be strings or, in the DAG, templates and other tasks' outputs: the lists are built the
same way either way."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.config import PipelineConfig, TrainSpec

# The sweep's DAG params: each empty keeps ``sweep.<name>`` of the config.
SWEEP_PARAMS = {"sweep_size": "size", "sweep_learning_rates": "learning_rate", "sweep_widths": "width",
                "sweep_depths": "depth", "sweep_epochs": "epochs"}


def baselines_args(started_by: Any, training_id: Any, overrides: Any) -> list[Any]:
    """The baselines job's options (after ``--run-date``): the window's ``overrides`` (JSON), who or what
    started the run, and the training the baselines belong to."""
    return ["--overrides", overrides, "--started-by", started_by, "--training-id", training_id]


def sweep_base(train: TrainSpec, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """What every MLP candidate starts from: the run's params over ``train.*``."""
    params = params or {}
    return {"learning_rate": params.get("learning_rate") or train.learning_rate,
            "epochs": params.get("epochs") or train.epochs, "hyperparameters": dict(train.hyperparameters)}


def plan_candidates(config: PipelineConfig, run_date: str, started_by: str, training_id: str | None,
                    params: dict[str, Any] | None = None) -> list[list[str]]:
    """One train-job argument list per candidate of the sweep (:func:`jobs.selection.sweep.candidates`
    over ``params``, a DAG run's params: none keeps the config's), each a child of a new parent MLflow
    run, all of the training ``training_id``; the candidate's name is the list's fourth item."""
    from jobs.config import override_json
    from jobs.selection.sweep import candidate_args, candidates, open_parent

    params = params or {}
    found = candidates(config.sweep, sweep_base(config.train, params),
                       {key: params.get(name) for name, key in SWEEP_PARAMS.items()})
    parent = open_parent(config, run_date, found, started_by, training_id or None)
    common = ["--overrides", override_json(params), "--started-by", started_by]
    return [["--run-date", run_date, "--candidate-name", c["name"], *common,
             *candidate_args(c, parent, training_id or None)] for c in found]


def choose_candidate(config: PipelineConfig, candidate_lists: list[list[str]]) -> dict[str, Any]:
    """The finished candidate of the planned sweep with the best validation promotion metric
    (:func:`jobs.selection.sweep.best_candidate`): its ``run_id``, ``name``, ``family``, ``score``."""
    from jobs.selection.sweep import best_candidate

    first = candidate_lists[0]
    return best_candidate(config, first[first.index("--parent-run-id") + 1])


def promotion_args(candidate_run: Any, started_by: Any, trigger: Any, overrides: Any) -> list[Any]:
    """The promotion job's options (after ``--run-date``): the run's ``overrides`` (JSON), who and what
    started it, and the chosen candidate's run."""
    return ["--overrides", overrides, "--started-by", started_by, "--trigger", trigger,
            "--candidate-run", candidate_run]

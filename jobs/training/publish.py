"""The training's MLflow side on the driver: the run (new, or the one an interrupted attempt left),
and after the ranks are done the registered version, its drift baseline, the champion gate, the
version's tags and the training summary in the lake."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs.timings import phase

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.config import PipelineConfig
    from jobs.lake.layout import Lake
    from jobs.model.tabular import Preprocessor

log = logging.getLogger("jobs.training.job")


@dataclass(frozen=True)
class TrainingRun:
    """The MLflow run a training logs to, and where its checkpoints go."""

    run_id: str
    experiment_id: str
    checkpoint_dir: str


def open_run(lake: Lake, run_date: dt.date, experiment: str, params: dict[str, Any], pre: Preprocessor,
             epochs: int, tags: dict[str, str] | None = None) -> TrainingRun:
    """The run to log to: the one an earlier attempt of this very training (same parameters and
    preprocessor) opened and did not finish, resumed from its checkpoints; else a new run with
    ``params`` logged (and the git commit as MLflow's source tag) and ``tags`` set."""
    from jobs.lake.layout import CHECKPOINT_RUN
    from jobs.lake.storage import write_json
    from jobs.tracking import client, ensure_experiment, run_link
    from jobs.training.checkpoints import checkpointed_epochs, resumable_run
    from jobs.training.lifecycle import OWNER_TAG, fail_stale_runs, owner_tag

    mlflow_client = client()
    experiment_id = ensure_experiment(experiment)
    fail_stale_runs(mlflow_client, experiment_id)  # runs a killed attempt left RUNNING
    # Everything that shapes the training: an attempt resumes only a checkpoint of the same inputs.
    key = hashlib.sha256(json.dumps({**params, "preprocessor": pre.to_json()}, default=str,
                                    sort_keys=True).encode()).hexdigest()[:16]
    checkpoint_dir = lake.checkpoint("training", run_date, key)
    run_id = resumable_run(mlflow_client, checkpoint_dir)
    if run_id:
        log.info("resuming MLflow run %s after epoch %s of %s (checkpoint %s)", run_id,
                 checkpointed_epochs(checkpoint_dir), epochs, checkpoint_dir)
    else:
        # the owner from the start: a run left RUNNING by a fault before its first param still has
        # one, so the next training start can end it (fail_stale_runs)
        run = mlflow_client.create_run(experiment_id, run_name=f"train-{run_date}",
                                       tags={"run_date": str(run_date), **(tags or {}), OWNER_TAG: owner_tag()})
        run_id = run.info.run_id
        for name, value in params.items():
            mlflow_client.log_param(run_id, name, str(value))
        if "git_commit" in params:
            mlflow_client.set_tag(run_id, "mlflow.source.git.commit", params["git_commit"].removesuffix("-dirty"))
        write_json(f"{checkpoint_dir}/{CHECKPOINT_RUN}", {"run_id": run_id})
    mlflow_client.set_tag(run_id, OWNER_TAG, owner_tag())  # who runs it now: see fail_stale_runs
    log.info("MLflow run: %s", run_link(experiment_id, run_id))
    return TrainingRun(run_id, experiment_id, checkpoint_dir)


def days_span(partition_dirs: list[str]) -> str:
    """``first..last`` of the days of some partition folders, or ``none``."""
    from jobs.lake.layout import partition_day

    days = sorted(d for d in (partition_day(path.rstrip("/").rsplit("/", 1)[-1]) for path in partition_dirs) if d)
    return f"{days[0]}..{days[-1]}" if days else "none"


def publish(
    spark: SparkSession, lake: Lake, config: PipelineConfig, run_date: dt.date, run: TrainingRun,
    result: dict[str, Any], bins_of_features: dict[str, Any], holdout_dirs: list[str], windows: tuple[str, str],
    validation_dirs: list[str] | None = None, started: dict[str, str] | None = None,
) -> None:
    """Log the model's drift baseline (``bins_of_features``: the training window's part,
    :func:`jobs.scoring.drift.feature_bins`, with the bins of the model's own predictions on the
    holdout), its evaluation report and the bar, finish the run, and only then register the model
    rank 0 logged as a version (:func:`register_finished`), apply the champion gate, drop the
    checkpoints and write ``reports/training/date=D/summary.json``: a failure at any step before
    the registration leaves no version. ``started``: what started the run (``trigger``,
    ``started_by``), tagged on the run (a promoted sweep candidate's run too) and written to the
    summary."""
    import mlflow.pyfunc

    from jobs.lake.storage import delete_dir, write_text
    from jobs.scoring.drift import BASELINE_ARTIFACT, with_predictions
    from jobs.selection.bar import FAMILY, KIND, NAME, assess, read_rows
    from jobs.selection.gate import apply_gate
    from jobs.tracking import client, run_url

    cfg, spec = config.train, config.features
    mlflow_client = client()
    reconcile_registrations(mlflow_client, run.experiment_id)
    metrics = result["metrics"]
    with phase("holdout predictions"):
        holdout = read_rows(spark, holdout_dirs, spec.inputs, spec.label)  # with each row's day: the daily metrics
        # The logged model's own pyfunc on the holdout: the drift baseline's prediction bins (which
        # travel with the run before the version can become champion) and the gate's challenger score.
        predictions = mlflow.pyfunc.load_model(result["model_uri"]).predict(holdout[spec.inputs])
    mlflow_client.log_dict(run.run_id, with_predictions(bins_of_features, predictions, config.score.drift.bins),
                           BASELINE_ARTIFACT)
    # The evaluation report, and the bar: a candidate that does not beat the best baseline stops here.
    with phase("report and bar"):
        stopped = assess(spark, config, run.run_id, result["model_uri"], holdout_dirs, validation_dirs or [],
                         run_date, windows[1])
    for key, value in (started or {}).items():
        mlflow_client.set_tag(run.run_id, key, value)
    with phase("register"):
        version = register_finished(mlflow_client, run.run_id, result["model_uri"], cfg.model_name)
    if stopped is not None:
        for key, value in stopped.tags().items():
            mlflow_client.set_model_version_tag(cfg.model_name, version.version, key, value)
    with phase("gate"):
        decision = stopped or apply_gate(
            mlflow_client, cfg.model_name, str(version.version), holdout, spec.inputs, spec.label,
            cfg.promotion_metric, cfg.promotion_margin, predictions, cfg.require_approval,
            live_evidence=config.monitoring.promotion_evidence == "live",
        )
    train_window, holdout_window = windows
    validation_window = days_span(validation_dirs or [])
    tags = mlflow_client.get_run(run.run_id).data.tags
    # which family serves: mlp, xgboost, or a baseline's name (one that served in a candidate's place)
    family = tags.get(NAME, "baseline") if tags.get(KIND) == "baseline" else tags.get(FAMILY, "mlp")
    for key, value in {
        "run_date": run_date, "train_window": train_window, "validation_window": validation_window,
        "holdout_window": holdout_window, "model_family": family,
        **{f"holdout_{k}": round(v, 6) for k, v in metrics.items()},
    }.items():
        mlflow_client.set_model_version_tag(cfg.model_name, version.version, key, str(value))
    delete_dir(run.checkpoint_dir)  # the model is registered: a new attempt for this day starts afresh
    log.info(
        "registered %s version %s from run %s; holdout: %s",
        cfg.model_name, version.version, run.run_id, json.dumps({k: round(v, 4) for k, v in metrics.items()}),
    )
    summary = {
        "model_name": cfg.model_name, "model_version": str(version.version), "run_id": run.run_id,
        "model_family": family,
        "experiment_id": run.experiment_id, "run_url": run_url(run.experiment_id, run.run_id),
        "train_window": train_window, "validation_window": validation_window, "holdout_window": holdout_window,
        "metrics": metrics, "gate": decision.tags(),
        "trigger": (started or {}).get("trigger"), "started_by": (started or {}).get("started_by"),
    }
    write_text(lake.report("training", run_date), json.dumps(summary, indent=2))
    outcome = {"promoted": "is the new champion", "rejected": "stays a challenger",
               "awaiting_approval": "won the gate and awaits a person's approval",
               "awaiting_live_evidence": "won on the holdout and is scored in shadow until it beats the champion live",
               "stopped_at_bar": "was not sent to the gate"}[decision.outcome]
    log.info("champion gate: version %s %s: %s", version.version, outcome, decision.reason)


REGISTRATION = "registration"  # run tag: pending (finished, not registered yet), then the version's number


def register_finished(mlflow_client: Any, run_id: str, model_uri: str, name: str) -> Any:
    """End the run as FINISHED, then register its model as a version of ``name``: a version exists
    only for a run that finished with everything it logs. The run says ``registration: pending``
    between the two; a process that dies there leaves a finished run and no version, which the next
    training reconciles (:func:`reconcile_registrations`). A registration that fails leaves no version
    either: the run is tagged with why."""
    import mlflow

    mlflow_client.set_tag(run_id, REGISTRATION, "pending")
    mlflow_client.set_terminated(run_id, status="FINISHED")
    try:
        version = mlflow.register_model(model_uri, name)
    except BaseException as err:
        from jobs.tracking import best_effort_calls

        with best_effort_calls():  # the server may be what failed
            mlflow_client.set_tag(run_id, REGISTRATION, f"failed: {type(err).__name__}: {err}"[:4000])
        raise
    mlflow_client.set_tag(run_id, REGISTRATION, str(version.version))
    return version


def reconcile_registrations(mlflow_client: Any, experiment_id: str) -> list[str]:
    """Runs of the experiment that finished but were never registered (``registration: pending``: the
    process died between the two, :func:`register_finished`) tagged ``abandoned``, saying so in the
    log: they are no version and serve nothing; this training replaces them. Returns their ids."""
    found = mlflow_client.search_runs([experiment_id], filter_string=f"tags.{REGISTRATION} = 'pending'")
    for stale in found:
        note = ("abandoned: the run finished but its process died before registering it; no version was made, "
                "a later training replaced it")
        mlflow_client.set_tag(stale.info.run_id, REGISTRATION, note)
        log.warning("run %s of %s: %s", stale.info.run_id, stale.data.tags.get("run_date", "?"), note)
    return [stale.info.run_id for stale in found]

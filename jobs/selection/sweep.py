"""The hyperparameter sweep: candidate configs, their runs, and the one that goes forward.

- :func:`candidates`: for the ``mlp`` family, the first ``size`` combinations of the space
  (learning rate, width, depth, epochs), from ``sweep`` of the config with the DAG's params over
  it; width and depth set the default MLP's ``hidden_units`` (``[width] * depth``); for the
  ``xgboost`` family, one candidate per param set of ``sweep.xgboost`` (``sweep.families`` says
  which families);
- :func:`open_parent`: the parent MLflow run the candidates' runs hang under;
- each candidate is a train job with ``--parent-run-id`` (and ``--family``): it trains (an MLP with
  TorchDistributor, an xgboost candidate with ``SparkXGBClassifier``: :mod:`jobs.selection.trees`),
  logs the evaluation report (validation metrics included) and stops there
  (:func:`finish_candidate`), no registration; every candidate run is tagged
  ``candidate_kind=candidate`` and its ``model_family``;
- :func:`best_candidate`: the child run with the best promotion metric on the validation days
  (never the holdout), whatever its family, among the children of the same training, config and data version
  (:mod:`jobs.selection.identity`); the promotion job then registers it, puts it to the bar
  and the champion gate (:func:`candidate_result`).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.config import PipelineConfig, SweepSpec

log = logging.getLogger("jobs.selection.sweep")
# What the sweep ranks by when no candidate has the promotion metric on the validation days: a
# proper score, defined whatever classes the days hold.
FALLBACK_METRIC = "log_loss"
CHOSEN_BY = "chosen_by"  # the parent run's tag: validation_<the metric the sweep ranked by>

MODEL_URI_TAG = "model_uri"  # a candidate run's logged model, for the promotion of the best


def candidates(spec: SweepSpec, base: dict[str, Any], overrides: dict[str, Any] | None = None,
               ) -> list[dict[str, Any]]:
    """The sweep's candidate configs: ``{"name", "learning_rate", "epochs", "hyperparameters"}``.

    ``base``: the train config's ``learning_rate``, ``epochs`` and ``hyperparameters`` (an empty
    list in the space keeps the base value); ``overrides``: the DAG params (``size``,
    ``learning_rate``, ``width``, ``depth``, ``epochs``), None for "the config's"."""
    overrides = {k: v for k, v in (overrides or {}).items() if v not in (None, [])}
    size = int(overrides.get("size", spec.size))
    if size < 1:
        raise ValueError(f"the sweep needs at least one candidate, got size {size}")
    hidden = list(base["hyperparameters"].get("hidden_units", [64]))
    space = {
        "learning_rate": overrides.get("learning_rate", spec.learning_rate) or [base["learning_rate"]],
        "width": overrides.get("width", spec.width) or [hidden[0]],
        "depth": overrides.get("depth", spec.depth) or [len(hidden)],
        "epochs": overrides.get("epochs", spec.epochs) or [base["epochs"]],
    }
    found: list[dict[str, Any]] = []
    if "mlp" in spec.families:
        for lr, width, depth, epochs in itertools.islice(itertools.product(*space.values()), size):
            found.append({
                "name": f"lr={lr:g},width={width},depth={depth},epochs={epochs}", "family": "mlp",
                "learning_rate": float(lr), "epochs": int(epochs),
                "hyperparameters": {**base["hyperparameters"], "hidden_units": [int(width)] * int(depth)},
            })
    if "xgboost" in spec.families:
        for params in spec.xgboost_params():
            shown = ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items()
                             if k in ("n_estimators", "max_depth", "learning_rate"))
            found.append({"name": f"xgboost:{shown}", "family": "xgboost", "params": params})
    return found


def candidate_args(candidate: dict[str, Any], parent_run_id: str, training_id: str | None = None) -> list[str]:
    """The train job options of one candidate, as a child run of ``parent_run_id`` in the
    training ``training_id``."""
    if candidate.get("family", "mlp") == "xgboost":
        own = ["--family", "xgboost", "--xgboost-params", json.dumps(candidate["params"], sort_keys=True)]
    else:
        own = ["--learning-rate", str(candidate["learning_rate"]), "--epochs", str(candidate["epochs"]),
               "--hyperparameters", json.dumps(candidate["hyperparameters"], sort_keys=True)]
    return [*own, "--candidate-name", candidate["name"], "--parent-run-id", parent_run_id,
            *(["--training-id", training_id] if training_id else [])]


def open_parent(config: PipelineConfig, run_date: str, found: list[dict[str, Any]], started_by: str = "",
                training_id: str | None = None) -> str:
    """A parent MLflow run for the sweep of ``run_date`` in the training ``training_id``, with the
    candidates as a parameter."""
    from jobs.selection.identity import TRAINING_ID
    from jobs.selection.identity import training_id as tag_value
    from jobs.tracking import client, ensure_experiment

    mlflow_client = client()
    tags = {"run_date": run_date, "candidate_kind": "sweep", "started_by": started_by,
            **({TRAINING_ID: tag_value(training_id)} if training_id else {})}
    run = mlflow_client.create_run(ensure_experiment(config.train.experiment), run_name=f"sweep-{run_date}",
                                   tags=tags)
    mlflow_client.log_param(run.info.run_id, "candidates", json.dumps([c["name"] for c in found]))
    mlflow_client.log_param(run.info.run_id, "promotion_metric", config.train.promotion_metric)
    return run.info.run_id


def best_candidate(config: PipelineConfig, parent_run_id: str) -> dict[str, Any]:
    """The child run with the best validation promotion metric (or, where no candidate has one, with
    the best :data:`FALLBACK_METRIC`: see :func:`ranking_metric`); logs the sweep table to the
    parent, tags it with the winner (and its family) and finishes it. Returns ``{"run_id", "name",
    "family", "metric", "score"}``."""
    import pandas as pd

    from jobs.errors import DataError
    from jobs.selection.bar import FAMILY, better
    from jobs.tracking import client

    mlflow_client = client()
    parent = mlflow_client.get_run(parent_run_id)
    children = finished_children(mlflow_client, parent)
    metrics = list(dict.fromkeys([config.train.promotion_metric, FALLBACK_METRIC]))
    rows = [{"name": c.data.tags.get("candidate_name", c.info.run_id), "run_id": c.info.run_id,
             "family": c.data.tags.get(FAMILY, "mlp"),
             **{f"{part}_{m}": c.data.metrics.get(f"{part}_{m}") for m in metrics
                for part in ("validation", "holdout")}} for c in children]
    metric = ranking_metric(rows, config.train.promotion_metric)
    # A single candidate goes forward without a choice (and without validation days).
    scored = rows if len(rows) == 1 else [row for row in rows if row[f"validation_{metric}"] is not None]
    if not scored:
        mlflow_client.set_terminated(parent_run_id, status="FAILED")
        raise DataError(f"no finished candidate of sweep run {parent_run_id} (of its training, config and data "
                        f"version) has a validation {' or '.join(metrics)}: a sweep of several candidates chooses on "
                        "the validation days (train.validation_days at least 1), or set sweep.size 1")
    best = scored[0]
    for row in scored[1:]:
        if better(metric, row[f"validation_{metric}"], best[f"validation_{metric}"]):
            best = row
    mlflow_client.log_text(parent_run_id, pd.DataFrame(rows).to_csv(index=False), "sweep/candidates.csv")
    if best[f"validation_{metric}"] is not None:
        mlflow_client.log_metric(parent_run_id, f"best_validation_{metric}", best[f"validation_{metric}"])
    mlflow_client.set_tag(parent_run_id, "best_run_id", best["run_id"])
    mlflow_client.set_tag(parent_run_id, "best_candidate", best["name"])
    mlflow_client.set_tag(parent_run_id, "best_family", best["family"])
    mlflow_client.set_tag(parent_run_id, CHOSEN_BY, f"validation_{metric}")
    mlflow_client.set_terminated(parent_run_id, status="FINISHED")
    log.info("sweep %s: %d candidate(s), best by validation %s: %s (%s)", parent_run_id, len(rows), metric,
             best["name"], best[f"validation_{metric}"])
    return {"run_id": best["run_id"], "name": best["name"], "family": best["family"], "metric": metric,
            "score": best[f"validation_{metric}"]}


def ranking_metric(rows: list[dict[str, Any]], metric: str) -> str:
    """The validation metric the sweep ranks ``rows`` (candidates, ``validation_<metric>`` each) by:
    the promotion ``metric`` where a candidate has it; else :data:`FALLBACK_METRIC`, which every
    labelled day has. A rare label's validation days can hold one class only, and a ROC AUC or PR AUC
    of one class is undefined (not logged): the candidates are still ranked, and the log says by what."""
    if len(rows) < 2 or any(row.get(f"validation_{metric}") is not None for row in rows):
        return metric
    if any(row.get(f"validation_{FALLBACK_METRIC}") is not None for row in rows):
        log.warning("no candidate has a validation %s (the validation days hold one class?): the sweep chooses "
                    "by validation %s", metric, FALLBACK_METRIC)
        return FALLBACK_METRIC
    return metric


def chosen_by(parent: Any, promotion_metric: str) -> str:
    """The metric (without ``validation_``) the sweep of the ``parent`` run chose by: its
    :data:`CHOSEN_BY` tag (:func:`ranking_metric`), else ``promotion_metric``. What the sweep
    ranked by, its blend ranks by too."""
    return parent.data.tags.get(CHOSEN_BY, "").removeprefix("validation_") or promotion_metric


def finished_children(client: Any, parent: Any) -> list[Any]:
    """The finished child runs of the sweep's ``parent`` run that it chooses among (:func:`same_training`)."""
    query = f"tags.mlflow.parentRunId = '{parent.info.run_id}' and attributes.status = 'FINISHED'"
    return same_training(parent, client.search_runs([parent.info.experiment_id], query))


def same_training(parent: Any, children: list[Any]) -> list[Any]:
    """The children a sweep chooses among: those of the parent's training (when it has a
    ``training_id``) that have identity tags, of one config and data version: the latest finished
    child's (a retried candidate trained after the features were rebuilt is not compared with the
    others' scores on other rows). The ones left out are logged."""
    from jobs.selection.identity import CONFIG_FINGERPRINT, DATA_FINGERPRINT, TRAINING_ID, identity_of

    wanted = parent.data.tags.get(TRAINING_ID)
    mine = [c for c in children if identity_of(c.data.tags) is not None
            and (wanted is None or c.data.tags[TRAINING_ID] == wanted)]
    if mine:
        latest = max(mine, key=lambda c: c.info.end_time or 0)

        def version(run: Any) -> tuple[str | None, str | None]:
            return run.data.tags.get(CONFIG_FINGERPRINT), run.data.tags.get(DATA_FINGERPRINT)

        mine = [c for c in mine if version(c) == version(latest)]
    left = sorted({c.info.run_id for c in children} - {c.info.run_id for c in mine})
    if left:
        log.warning("sweep %s: %d finished candidate run(s) left out, not of this training's config and data "
                    "version (or without identity tags): %s", parent.info.run_id, len(left), ", ".join(left))
    return mine


def finish_candidate(spark: SparkSession, config: PipelineConfig, run_id: str, result: dict[str, Any],
                     holdout_dirs: list[str], validation_dirs: list[str], run_date: dt.date, window: str,
                     name: str, checkpoint_dir: str | None, family: str = "mlp") -> None:
    """A sweep candidate's end, whatever its family: its evaluation report (validation metrics for
    the choice of the best), the tags the promotion finds it by, the run finished; not registered.
    ``checkpoint_dir``: what the training leaves to remove (None: nothing)."""
    import mlflow.pyfunc

    from jobs.lake.storage import delete_dir
    from jobs.selection.bar import CANDIDATE, FAMILY, KIND, NAME, WINDOW, read_rows
    from jobs.selection.evaluation import evaluate_candidate
    from jobs.tracking import client

    spec, evaluation = config.features, config.evaluation
    columns = [*spec.inputs, *evaluation.segments]
    holdout = read_rows(spark, holdout_dirs, columns, spec.label)
    validation = read_rows(spark, validation_dirs, columns, spec.label)
    model = mlflow.pyfunc.load_model(result["model_uri"])
    evaluate_candidate(run_id, holdout, model.predict(holdout[spec.inputs]), spec.label, evaluation, validation,
                       model.predict(validation[spec.inputs]) if len(validation) else None)
    mlflow_client = client()
    for key, value in {KIND: CANDIDATE, FAMILY: family, NAME: name, WINDOW: window, "run_date": str(run_date),
                       MODEL_URI_TAG: result["model_uri"]}.items():
        mlflow_client.set_tag(run_id, key, value)
    mlflow_client.set_terminated(run_id, status="FINISHED")
    if checkpoint_dir:
        delete_dir(checkpoint_dir)
    log.info("sweep candidate %s: run %s, holdout %s", name, run_id,
             json.dumps({k: round(v, 4) for k, v in result["metrics"].items()}))


def candidate_result(run_id: str) -> tuple[dict[str, Any], str]:
    """What a finished candidate run's training returned (its model URI and holdout metrics) and
    its experiment, for :func:`jobs.training.publish.publish`."""
    from jobs.tracking import client

    run = client().get_run(run_id)
    if MODEL_URI_TAG not in run.data.tags:
        raise RuntimeError(f"run {run_id} is not a finished sweep candidate (no {MODEL_URI_TAG} tag)")
    metrics = {k.removeprefix("holdout_"): v for k, v in run.data.metrics.items() if k.startswith("holdout_")}
    return {"model_uri": run.data.tags[MODEL_URI_TAG], "metrics": metrics}, run.info.experiment_id

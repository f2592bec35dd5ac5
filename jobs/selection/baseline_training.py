"""The Spark MLlib baselines the PyTorch model must beat, fitted, evaluated and logged on its window
(the baselines job, ``jobs/baselines/job.py``, runs :func:`train_baselines`; what each run holds is
told there)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from jobs.config import BaselineSpec, PipelineConfig
    from jobs.lake.layout import Lake
    from jobs.model.tabular import Preprocessor

log = logging.getLogger("jobs.selection.baseline_training")


def estimator(spec: BaselineSpec, label: str, seed: int) -> Any:
    """The pyspark.ml estimator of a baseline, with its configured params."""
    from pyspark.ml.classification import GBTClassifier, LogisticRegression

    if spec.kind == "logistic_regression":
        return LogisticRegression(featuresCol="features", labelCol=label, **spec.params)
    return GBTClassifier(featuresCol="features", labelCol=label, **{"seed": seed, **spec.params})


def design_column(pre: Preprocessor, design: str) -> Column:
    """The design matrix as one Spark ML vector column, encoded as :meth:`Preprocessor.encode`
    encodes (:func:`jobs.scoring.predictor.encoded_columns`): ``design`` as
    :func:`jobs.model.baseline.design_matrix` builds it."""
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import functions as F

    from jobs.model.baseline import ONEHOT
    from jobs.scoring.predictor import encoded_columns

    columns = encoded_columns(json.loads(pre.to_json()))
    codes, zscores = columns[: len(pre.categorical)], columns[len(pre.categorical):]
    if design == ONEHOT:
        parts = [(code == F.lit(k)).cast("double") for code, size in zip(codes, pre.cardinalities, strict=True)
                 for k in range(size)]
    else:
        parts = [code.cast("double") for code in codes]
    parts += [z.cast("double") for z in zscores]
    return array_to_vector(F.array(*parts)).alias("features")


def design_rows(features: DataFrame, pre: Preprocessor, label: str, design: str) -> DataFrame:
    """The labelled rows of the training window as (design vector, label): what the baselines of
    ``design`` are fitted on."""
    from pyspark.sql import functions as F

    return features.where(F.col(label).isNotNull()).select(design_column(pre, design),
                                                           F.col(label).cast("double").alias(label))


def fit(rows: DataFrame, spec: BaselineSpec, label: str, seed: int) -> Any:
    """The baseline fitted on :func:`design_rows`."""
    return estimator(spec, label, seed).fit(rows)


def log_model(pre: Preprocessor, kind: str, params: dict[str, Any], example: Any,
              calibration: dict[str, Any] | None = None) -> Any:
    """Log the exported baseline to the active run as a pyfunc with signature; MLflow's ModelInfo.
    ``calibration``: the record of :func:`jobs.model.calibration.calibrate` (None: none)."""
    import tempfile
    from pathlib import Path

    import mlflow
    import numpy as np
    import pandas as pd
    from mlflow.models import infer_signature

    from jobs.model.baseline import DESIGNS, BaselineClassifier, design_matrix, predict_design, save
    from jobs.model.calibration import apply_scale
    from jobs.model.tabular import package_model_code, signature_example

    example = signature_example(example, [*pre.categorical, *pre.numeric], pre.categorical)
    with tempfile.TemporaryDirectory() as tmp:
        return mlflow.pyfunc.log_model(
            name="model", python_model=BaselineClassifier(), artifacts=save(pre, kind, params, Path(tmp), calibration),
            signature=infer_signature(example, apply_scale(
                predict_design(kind, params, design_matrix(pre, example, DESIGNS[kind])),
                (calibration or {}).get("logit_scale", 1.0))),
            input_example=example, code_paths=[package_model_code(Path(tmp))],
            pip_requirements=[f"mlflow=={mlflow.__version__}", f"pandas=={pd.__version__}",
                              f"numpy=={np.__version__}"],
        )


@dataclass(frozen=True)
class Window:
    """What every baseline of one training window shares, read or computed once: the design rows
    of each design (cached), the preprocessor, the holdout and validation rows, the drift baseline's feature part,
    and the windows' spans (``train``, ``validation``, ``holdout``)."""

    rows: dict[str, DataFrame]  # by design (jobs.model.baseline.DESIGNS)
    pre: Preprocessor
    holdout: Any  # pandas
    validation: Any  # pandas
    feature_bins: dict[str, Any]
    spans: dict[str, str]


def train_baseline(
    config: PipelineConfig, spec: BaselineSpec, run_date: dt.date, window: Window, started_by: str | None = None,
    identity: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Fit, evaluate and log one baseline as its own MLflow run (``window``: what the window's
    baselines share; ``identity``: the training's tags, :func:`jobs.selection.identity.identity_tags`).
    Returns the run id, the model URI, the holdout metrics, and the
    fitted pyspark.ml model with its preprocessor."""
    import mlflow

    from jobs.metrics import evaluate
    from jobs.model.baseline import DESIGNS, design_matrix, export, predict_design
    from jobs.model.calibration import calibrate_rows, record_metrics, record_params
    from jobs.scoring.drift import BASELINE_ARTIFACT, with_predictions
    from jobs.selection.bar import KIND, NAME, WINDOW
    from jobs.selection.evaluation import evaluate_candidate
    from jobs.selection.sweep import MODEL_URI_TAG
    from jobs.tracking import client, code_version, ensure_experiment
    from jobs.training.lifecycle import OWNER_TAG, owner_tag

    cfg, fspec = config.train, config.features
    pre, windows, holdout, validation = window.pre, window.spans, window.holdout, window.validation
    mlflow_client = client()
    experiment_id = ensure_experiment(cfg.experiment)
    # the owner from the start, as a training run's: a baseline killed midway is ended by the next training start
    tags = {KIND: "baseline", NAME: spec.name, WINDOW: windows["holdout"], "run_date": str(run_date),
            "baseline_kind": spec.kind, **({"started_by": started_by} if started_by else {}), **(identity or {}),
            OWNER_TAG: owner_tag()}
    with mlflow.start_run(experiment_id=experiment_id, run_name=f"{spec.name}-{run_date}", tags=tags) as run:
        mlflow.log_params({"baseline": spec.name, "kind": spec.kind, "run_date": run_date, "config": config.source,
                           "train_window": windows["train"], "validation_window": windows["validation"],
                           "holdout_window": windows["holdout"], "min_category_count": cfg.min_category_count,
                           **spec.params, **code_version()})
        started = time.perf_counter()
        design = DESIGNS[spec.kind]
        model = fit(window.rows[design], spec, fspec.label, cfg.seed)
        mlflow.log_metric("fit_seconds", time.perf_counter() - started)
        params = export(model, spec.kind)
        # the scale fitted on the validation days' probabilities before the model is logged with it
        calibration = calibrate_rows(cfg.calibration, validation, fspec.label, fspec.inputs,
                                     lambda rows: predict_design(spec.kind, params, design_matrix(pre, rows, design)))
        mlflow.log_params(record_params(calibration))
        mlflow.log_metrics(record_metrics(calibration))
        info = log_model(pre, spec.kind, params, holdout.head(5), calibration)
        pyfunc = mlflow.pyfunc.load_model(info.model_uri)  # the logged model, as scoring will load it
        probabilities = pyfunc.predict(holdout[fspec.inputs])
        metrics = evaluate(holdout[fspec.label], probabilities)
        mlflow.log_metrics({f"holdout_{k}": v for k, v in metrics.items() if k != "rows"})
        mlflow.log_metric("holdout_rows", metrics["rows"])
        evaluate_candidate(run.info.run_id, holdout, probabilities, fspec.label, config.evaluation, validation,
                           pyfunc.predict(validation[fspec.inputs]) if len(validation) else None)
        mlflow_client.log_dict(run.info.run_id,
                               with_predictions(window.feature_bins, probabilities, config.score.drift.bins),
                               BASELINE_ARTIFACT)
        mlflow_client.set_tag(run.info.run_id, MODEL_URI_TAG, info.model_uri)  # what the promotion job registers
    log.info("baseline %s (%s): holdout %s; run %s", spec.name, spec.kind,
             ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if k != "rows"), run.info.run_id)
    return {"name": spec.name, "run_id": run.info.run_id, "model_uri": info.model_uri, "metrics": metrics,
            "spark_model": model, "preprocessor": pre}


def logged_feature_bins(client: Any, run_id: str, run_date: dt.date, window: str) -> dict[str, Any] | None:
    """The drift baseline's feature part (:func:`jobs.scoring.drift.feature_bins`) that a baseline of
    the training of run ``run_id`` (its identity tags: the same window, config and data) logged with
    its model, or None where none did (no baselines configured, a run without identity tags). Every
    model of one window and preprocessor has the same feature part: the train job promoting a sweep's
    candidate takes it from here instead of fitting the preprocessor and binning the window again."""
    from jobs.scoring.drift import PREDICTION, load_baseline
    from jobs.selection.bar import window_runs
    from jobs.selection.identity import identity_of

    run = client.get_run(run_id)
    found = window_runs(client, run.info.experiment_id, run_date, window, "baseline", identity_of(run.data.tags))
    for baseline in found.values():
        logged = load_baseline(baseline.info.run_id)
        if logged is not None:
            log.info("the drift baseline's feature bins of this window: from baseline run %s", baseline.info.run_id)
            return {key: value for key, value in logged.items() if key != PREDICTION}
    return None


def training_rows(spark: SparkSession, lake: Lake, dirs: list[str], config: PipelineConfig) -> DataFrame:
    """The feature rows of ``dirs`` in as many partitions as the job has cores, each row in the
    partition its day and ids hash to and sorted by them there: the same rows in the same order
    whatever the files are named and whatever order they list in. MLlib's GBT samples rows by their
    position to find its split candidates, so two lakes built alike (the same rows, day files of
    other names) gave GBTs of different holdout ROC AUC on one window of 2013 when the files were
    only coalesced (docs/studies/2026-11-29-the-bar-repeatable.md)."""
    from jobs.lake.layout import PARTITION

    keys = [PARTITION, *config.features.id_columns]
    return (spark.read.option("basePath", lake.features).parquet(*dirs)
            .repartition(spark.sparkContext.defaultParallelism, *keys).sortWithinPartitions(*keys))


def train_baselines(spark: SparkSession, lake: Lake, config: PipelineConfig, run_date: dt.date,
                    started_by: str | None = None, training_id: str | None = None) -> list[dict[str, Any]]:
    """Every configured baseline on the window ending with ``run_date`` (see :func:`train_baseline`),
    each run tagged with ``training_id`` and the config's and window's fingerprints."""
    from jobs.model.baseline import DESIGNS
    from jobs.scoring.drift import feature_bins
    from jobs.selection.bar import read_rows
    from jobs.selection.identity import data_fingerprint, identity_tags
    from jobs.training.data import feature_dirs, featured_days, fit_preprocessor, training_window

    cfg = config.train
    days = dict(zip(("train", "validation", "holdout"),
                    training_window(run_date, cfg, featured_days(spark, lake, cfg), config.feed_calendar),
                    strict=True))
    dirs = {part: feature_dirs(spark, lake, found) for part, found in days.items()}
    windows = {part: f"{found[0]}..{found[-1]}" if found else "" for part, found in days.items()}
    # The training days are read once, then from memory, in as many partitions as the job has cores
    # (not one per day): the preprocessor, the drift bins and every baseline's fit read them, and a
    # fit is a Spark job per iteration (100 for logistic regression, a few per tree for GBT), each
    # paying a task per partition. In one order (:func:`training_rows`), whatever order the files list in.
    features = training_rows(spark, lake, dirs["train"], config).cache()
    rows: dict[str, DataFrame] = {}
    try:
        pre = fit_preprocessor(features, config.features, cfg.min_category_count, clip=cfg.clip_to_training_range,
                               local_max_rows=cfg.in_process_max_rows)
        identity = identity_tags(config, data_fingerprint(spark, [d for part in dirs.values() for d in part]),
                                 training_id)
        label, columns = config.features.label, [*config.features.inputs, *config.evaluation.segments]
        rows = {design: design_rows(features, pre, label, design).cache()
                for design in dict.fromkeys(DESIGNS[spec.kind] for spec in config.baselines)}
        window = Window(rows=rows, pre=pre, spans=windows,
                        feature_bins=feature_bins(features, pre, config.score.drift.bins, cfg.in_process_max_rows),
                        holdout=read_rows(spark, dirs["holdout"], columns, label),
                        validation=read_rows(spark, dirs["validation"], columns, label))
        return [train_baseline(config, spec, run_date, window, started_by, identity) for spec in config.baselines]
    finally:
        for cached in (*rows.values(), features):
            cached.unpersist()

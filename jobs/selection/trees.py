"""The sweep's ``xgboost`` family: a candidate fitted by ``xgboost.spark.SparkXGBClassifier``.

The train job runs it for a candidate with ``--family xgboost`` (``--xgboost-params``, a JSON
object of SparkXGBClassifier's params over ``jobs.config.XGBOOST_DEFAULTS``), on the same
window as the MLP's candidates (:func:`jobs.training.data.training_window`, whose feature folders
refuse stale days) with the same preprocessor. XGBoost trains distributed as TorchDistributor
does: ``train.num_processes`` workers in one barrier stage (as many free task slots needed), on
GPUs with ``device="cuda"`` when ``train.use_gpu`` (that needs the full ``xgboost`` package; the
CPU install is ``xgboost-cpu``). Its inputs: each category as its vocabulary index, a categorical
feature of XGBoost's own, each number as it is, null and NaN as missing (:func:`design_column`;
the pyfunc's side: :func:`jobs.model.booster.design_matrix`).

The run is a child of the sweep's parent with the training's identity tags, evaluated by the same
report as every candidate (:func:`jobs.selection.sweep.finish_candidate`), and its model is the plain
``xgboost.Booster`` with the preprocessor as a pyfunc that needs no Spark
(:mod:`jobs.model.booster`): ``select_candidate`` compares it with the MLP candidates on the
validation days, and ``promote_candidate`` (the promotion job) registers, bars and gates it like any.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

    from jobs.config import PipelineConfig
    from jobs.model.tabular import Preprocessor

log = logging.getLogger("jobs.selection.trees")

FEATURES = "features"  # the design column's name


def design_column(pre: Preprocessor) -> Column:
    """The design matrix as one array column of doubles (XGBoost casts it to float32), as
    :func:`jobs.model.booster.design_matrix` builds it without Spark."""
    from pyspark.sql import functions as F

    from jobs.model.booster import F32_LIMIT
    from jobs.scoring.predictor import encoded_columns

    codes = encoded_columns(json.loads(pre.to_json()))[: len(pre.categorical)]
    parts = [code.cast("double") for code in codes]
    for col in pre.numeric:
        value = F.col(col).cast("double")
        clipped = F.greatest(F.least(value, F.lit(F32_LIMIT)), F.lit(-F32_LIMIT))
        parts.append(F.when(value.isNull() | F.isnan(value), F.lit(float("nan"))).otherwise(clipped))
    return F.array(*parts).alias(FEATURES)


def estimator(params: dict[str, Any], pre: Preprocessor, label: str, num_workers: int, use_gpu: bool,
              seed: int) -> Any:
    """The SparkXGBClassifier of a candidate: ``params`` (XGBoost's scikit-learn names), on
    ``num_workers`` barrier tasks, on GPUs (``device="cuda"``) when ``use_gpu``."""
    from xgboost.spark import SparkXGBClassifier

    from jobs.model.booster import feature_types

    return SparkXGBClassifier(
        features_col=FEATURES, label_col=label, num_workers=num_workers, device="cuda" if use_gpu else "cpu",
        feature_types=feature_types(pre), missing=float("nan"), **{"random_state": seed, **params},
    )


def fit(spark: SparkSession, train_dirs: list[str], pre: Preprocessor, params: dict[str, Any], label: str,
        num_workers: int, use_gpu: bool, seed: int) -> Any:
    """The candidate fitted on the labelled rows of the training partitions."""
    from pyspark.sql import functions as F

    rows = (spark.read.parquet(*train_dirs).where(F.col(label).isNotNull())
            .select(design_column(pre), F.col(label).cast("double").alias(label)))
    return estimator(params, pre, label, num_workers, use_gpu, seed).fit(rows)


def train_candidate(
    spark: SparkSession, config: PipelineConfig, run_date: dt.date, dirs: dict[str, list[str]],
    windows: dict[str, str], pre: Preprocessor, params: dict[str, Any], name: str, parent_run_id: str,
    num_workers: int, identity: dict[str, str], started: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Fit, log and evaluate one xgboost candidate as a child run of ``parent_run_id`` (``dirs`` and
    ``windows``: the ``train``, ``validation`` and ``holdout`` days; ``identity``: the training's
    tags, :func:`jobs.selection.identity.identity_tags`). Returns the run id, the model URI, the
    holdout metrics and the fitted Spark model."""
    import mlflow

    from jobs.metrics import evaluate
    from jobs.model.booster import log_pyfunc, predict_booster
    from jobs.model.calibration import calibrate_rows, record_metrics, record_params
    from jobs.selection.bar import FAMILY, read_rows
    from jobs.selection.sweep import finish_candidate
    from jobs.tracking import client, code_version, ensure_experiment
    from jobs.training.lifecycle import OWNER_TAG, fail_stale_runs, failed_on_error, owner_tag

    cfg, fspec = config.train, config.features
    mlflow_client = client()
    experiment_id = ensure_experiment(cfg.experiment)
    fail_stale_runs(mlflow_client, experiment_id)  # runs a killed attempt left RUNNING
    # the owner from the start, as a training run's: a candidate killed midway is ended by the next start
    tags = {"mlflow.parentRunId": parent_run_id, "run_date": str(run_date), FAMILY: "xgboost", **identity,
            **(started or {}), OWNER_TAG: owner_tag()}
    run = mlflow_client.create_run(experiment_id, run_name=f"train-{run_date}", tags=tags)
    run_id = run.info.run_id
    with failed_on_error(mlflow_client, run_id), mlflow.start_run(run_id=run_id):
        mlflow.log_params({"family": "xgboost", "run_date": run_date, "config": config.source,
                           "train_window": windows["train"], "validation_window": windows["validation"],
                           "holdout_window": windows["holdout"], "min_category_count": cfg.min_category_count,
                           "num_workers": num_workers, "use_gpu": cfg.use_gpu, "seed": cfg.seed,
                           **params, **code_version()})
        started_at = time.perf_counter()
        model = fit(spark, dirs["train"], pre, params, fspec.label, num_workers, cfg.use_gpu, cfg.seed)
        mlflow.log_metric("fit_seconds", time.perf_counter() - started_at)
        holdout = read_rows(spark, dirs["holdout"], [*fspec.inputs, *config.evaluation.segments], fspec.label)
        booster = model.get_booster()
        # the scale fitted on the validation days' probabilities before the model is logged with it
        validation = read_rows(spark, dirs["validation"], fspec.inputs, fspec.label)
        calibration = calibrate_rows(cfg.calibration, validation, fspec.label, fspec.inputs,
                                     lambda rows: predict_booster(booster, pre, rows))
        mlflow.log_params(record_params(calibration))
        mlflow.log_metrics(record_metrics(calibration))
        info = log_pyfunc(booster, pre, params, holdout.head(5), calibration)
        # the logged model, as the promotion and scoring load it
        probabilities = mlflow.pyfunc.load_model(info.model_uri).predict(holdout[fspec.inputs])
        metrics = evaluate(holdout[fspec.label], probabilities)
        mlflow.log_metrics({f"holdout_{k}": v for k, v in metrics.items() if k != "rows"})
        mlflow.log_metric("holdout_rows", metrics["rows"])
        result = {"model_uri": info.model_uri, "metrics": metrics}
        finish_candidate(spark, config, run_id, result, dirs["holdout"], dirs["validation"], run_date,
                         windows["holdout"], name, None, family="xgboost")
    return {"run_id": run_id, **result, "spark_model": model}

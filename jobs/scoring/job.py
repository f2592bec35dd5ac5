"""Score a day's features with a registered model and write the predictions to the lake.

Usage::

    spark-submit jobs/scoring/job.py --run-date 2013-01-29 [--days N] [--model-version N] [--use-gpu true|false]
                               [--config PATH] [--lake-root PATH]

Resolves the model version once, on the driver (the version the ``champion`` alias of
``train.model_name`` points at, unless ``--model-version`` names one), then scores ``features/date=<run-date>``
with ``predict_batch_udf``: each Python worker loads the model once (on a GPU with ``score.use_gpu``)
and calls it on batches of ``score.batch_size`` rows (``score.gpu_batch_size`` on a GPU), the inputs
passed as plain columns, encoded by Spark when the model carries its preprocessor (a model logged
by :func:`jobs.model.tabular.log_pyfunc`), raw for any other pyfunc. Predictions go to
``predictions/date=<run-date>/``, replacing only that day's partition; every row carries the model
name, version and run id, the run date and the scoring time. Then measures the day's drift
against the model's training window (:mod:`jobs.scoring.drift`) into ``reports/drift/date=<run-date>/``,
and scores the day in shadow with the challengers (:mod:`jobs.scoring.shadow`) into ``shadow/``.
With ``--days N`` the job does that for each of the N days ending with the run date, in one pass:
the model resolved and loaded once, the Spark jobs grouped by day (a backfill, or the replay's days
that one version serves: :mod:`orchestration.replay`).
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from jobs.config import FeatureSpec, WindowArgs, job_parser, parse_bool, parse_job_args
from jobs.errors import run_job
from jobs.features.lineage import check_fresh
from jobs.lake.layout import DRIFT_PLOT, DRIFT_REPORT, PARTITION, partition_value
from jobs.lake.spark import MissingPartitionError, configure_logging, get_spark, path_exists, require_cuda
from jobs.lake.storage import delete_file, write_bytes, write_text
from jobs.timings import phase, preload
from jobs.validation.partitions import zone_writer

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from jobs.config import PipelineConfig
    from jobs.lake.layout import Lake
    from jobs.scoring.drift import DriftSpec
    from jobs.tracking import ModelRef

log = logging.getLogger("jobs.scoring.job")


def make_predict_fn(
    model_uri: str, columns: list[str], use_gpu: bool = False
) -> Callable[[], Callable[..., np.ndarray]]:
    """A factory for ``predict_batch_udf``: loads the pyfunc once, returns numpy-in, numpy-out.

    The returned function takes one array per input column, in ``columns`` order (its signature
    says so, which is how ``predict_batch_udf`` decides to pass the columns separately).
    ``use_gpu``: the model loads on :func:`worker_device`, passed as ``model_config["device"]``; the
    model must have been logged with a ``device`` key in its model_config (:func:`jobs.model.tabular.log_pyfunc`
    logs ``cpu``) and honour it (:class:`jobs.model.tabular.TabularClassifier` does).
    """

    def make() -> Callable[..., np.ndarray]:
        import pandas as pd

        model = load_model(model_uri, use_gpu)

        def predict(*arrays: np.ndarray) -> np.ndarray:
            frame = pd.DataFrame(dict(zip(columns, arrays, strict=True)))
            return np.asarray(model.predict(frame), dtype=np.float64)

        return with_positional_signature(predict, len(columns))

    return make


def make_encoded_predict_fn(
    model_uri: str, n_categorical: int, n_numeric: int, use_gpu: bool = False
) -> Callable[[], Callable[..., np.ndarray]]:
    """A factory for ``predict_batch_udf`` over inputs Spark has encoded (:func:`encoded_columns`):
    ``n_categorical`` arrays of category codes, then ``n_numeric`` arrays of z-scores.

    No pandas in the loop: each array is copied once into the model's (page-locked, on a GPU) input
    buffers and the net runs on them (:meth:`jobs.model.tabular.TabularClassifier.predict_codes`).
    """

    def make() -> Callable[..., np.ndarray]:
        model = load_model(model_uri, use_gpu).unwrap_python_model()

        def predict(*arrays: np.ndarray) -> np.ndarray:
            cats, nums = model.input_buffers(len(arrays[0]))
            for j in range(n_categorical):
                cats[j] = arrays[j]
            for j in range(n_numeric):
                nums[j] = arrays[n_categorical + j]
            return model.predict_codes(cats, nums)

        return with_positional_signature(predict, n_categorical + n_numeric)

    return make


def with_positional_signature(predict: Callable[..., np.ndarray], inputs: int) -> Callable[..., np.ndarray]:
    """Give ``predict(*arrays)`` a signature of ``inputs`` positional parameters: that is how
    ``predict_batch_udf`` decides to pass the columns separately."""
    predict.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(f"col{i}", inspect.Parameter.POSITIONAL_ONLY) for i in range(inputs)]
    )
    return predict


def load_model(model_uri: str, use_gpu: bool) -> Any:
    """The pyfunc, on :func:`worker_device`: once per Python worker (``predict_batch_udf`` caches
    the predict function, and with it the model and its CUDA context, across batches)."""
    import time

    started = time.perf_counter()
    import mlflow.pyfunc

    device = worker_device(use_gpu)
    if device == "cpu":
        model = mlflow.pyfunc.load_model(model_uri)
    else:
        model = mlflow.pyfunc.load_model(model_uri, model_config={"device": device})
        if "device" not in model.model_config:  # MLflow drops load-time keys the logged model lacks
            raise RuntimeError(
                f"{model_uri} was logged without a 'device' in its model_config, so it cannot be put on "
                f"{device}: log it with model_config={{'device': 'cpu'}} (jobs.model.tabular.log_pyfunc does) or "
                "score with --use-gpu false"
            )
    # A worker's stderr reaches the task log: the fixed cost each Python worker pays once.
    print(f"jobs.scoring.job: a Python worker imported MLflow and loaded the model on {device} in "
          f"{time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return model


# jobs.model.tabular.PREPROCESSOR_FILE inside a pyfunc's artifacts (read here without importing torch)
PREPROCESSOR_ARTIFACT = "artifacts/preprocessor.json"


def model_preprocessor(model_uri: str) -> dict[str, Any] | None:
    """The preprocessor a model logged by :func:`jobs.model.tabular.log_pyfunc` carries (vocabularies and
    normalisation statistics, as JSON), or None for any other model."""
    import mlflow.artifacts
    from mlflow.exceptions import MlflowException

    try:
        path = mlflow.artifacts.download_artifacts(artifact_uri=f"{model_uri.rstrip('/')}/{PREPROCESSOR_ARTIFACT}")
    except (MlflowException, OSError):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def encoded_columns(pre: dict[str, Any]) -> list[Column]:
    """The model's inputs encoded by Spark as :meth:`jobs.model.tabular.Preprocessor.encode` encodes them:
    a category's vocabulary index + 1 (0 for an unseen value or a null) as int, then each number's
    z-score in double (nulls, NaN and infinities at 0, clipped to +-Z_LIMIT), cast to float."""
    from pyspark.sql import functions as F

    from jobs.model.tabular import Z_LIMIT

    unknown = F.lit(0)  # jobs.model.tabular.UNKNOWN_INDEX
    codes = []
    for col in pre["categorical"]:
        vocab = pre["vocab"][col]
        lookup = F.create_map(*[x for i, value in enumerate(vocab) for x in (F.lit(value), F.lit(i + 1))])
        code = F.coalesce(F.try_element_at(lookup, F.col(col).cast("string")), unknown) if vocab else unknown
        codes.append(code.cast("int").alias(f"{col}_code"))
    zscores = []
    for col in pre["numeric"]:
        z = (F.col(col).cast("double") - F.lit(pre["mean"][col])) / F.lit(pre["std"][col])
        finite = z.isNotNull() & ~F.isnan(z) & (F.abs(z) != F.lit(float("inf")))
        clipped = F.greatest(F.least(z, F.lit(Z_LIMIT)), F.lit(-Z_LIMIT))
        zscores.append(F.when(finite, clipped).otherwise(F.lit(0.0)).cast("float").alias(f"{col}_z"))
    return [*codes, *zscores]


def worker_device(use_gpu: bool) -> str:
    """Where a Python worker puts the model: ``cpu``, or with ``use_gpu`` the GPU Spark gave the task
    (``spark.task.resource.gpu.amount`` on a cluster), else ``cuda:0`` (local mode, where Spark
    schedules no GPUs). No GPU visible is an error, not a silent fall back to the CPU."""
    if not use_gpu:
        return "cpu"
    import torch
    from pyspark import TaskContext

    if not torch.cuda.is_available():
        raise RuntimeError(
            "GPU scoring was asked for (score.use_gpu / --use-gpu true) but torch sees no CUDA device in this "
            f"Python worker (torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}); "
            "score on the CPU with --use-gpu false or run the job where the executors have GPUs"
        )
    task = TaskContext.get()
    gpus = task.resources().get("gpu") if task is not None else None
    return f"cuda:{gpus.addresses[0]}" if gpus is not None and gpus.addresses else "cuda:0"


def score_features(
    features: DataFrame, spec: FeatureSpec, model: ModelRef, load_uri: str, batch_size: int, run_date: dt.date | None,
    use_gpu: bool = False, preprocessor: dict[str, Any] | None = None,
) -> DataFrame:
    """Prediction rows: the id columns, ``probability``, the model's identity, the run date (None:
    each row's partition ``date``, for features of several days), the scoring time and the partition.

    With the model's ``preprocessor`` (:func:`model_preprocessor`), Spark encodes the inputs and the
    Python workers only run the net; without, the workers get the raw feature columns and call the
    pyfunc's ``predict`` (any MLflow pyfunc that takes them works)."""
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType

    if preprocessor is None:
        make, inputs = make_predict_fn(load_uri, spec.inputs, use_gpu), [F.col(c) for c in spec.inputs]
    else:
        n_categorical, n_numeric = len(preprocessor["categorical"]), len(preprocessor["numeric"])
        make = make_encoded_predict_fn(load_uri, n_categorical, n_numeric, use_gpu)
        inputs = encoded_columns(preprocessor)
    predict = predict_batch_udf(make, return_type=DoubleType(), batch_size=batch_size)
    return features.select(*prediction_columns(spec, model, predict(*inputs), run_date))


def prediction_columns(spec: FeatureSpec, model: ModelRef, probability: Any, run_date: dt.date | None) -> list[Any]:
    """A prediction row's columns around the ``probability`` column expression (``run_date`` None:
    the row's partition date)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType

    return [
        *dict.fromkeys(spec.id_columns),
        probability.alias("probability"),
        F.lit(model.name).alias("model_name"),
        F.lit(model.version).alias("model_version"),
        F.lit(model.run_id).alias("model_run_id"),
        (F.lit(run_date) if run_date is not None else F.col(PARTITION).cast(DateType())).alias("run_date"),
        F.current_timestamp().alias("scored_at"),
        PARTITION,
    ]


def resolve_model(name: str, version: str | None) -> tuple[ModelRef, str]:
    """The model version to use and where its files are, resolved once on the driver.

    Workers load from the artifact location, so they need no access to the registry.
    """
    from jobs.tracking import ModelRef, champion_version, client

    mlflow_client = client()
    ref = ModelRef.of(mlflow_client.get_model_version(name, version)) if version else champion_version(name)
    return ref, mlflow_client.get_model_version_download_uri(ref.name, ref.version)


@dataclass(frozen=True)
class ScoreArgs(WindowArgs):
    """The days ending with the run date (``--days``, one by default), each scored as its own day."""

    model_version: str | None  # a registered version; None: the champion
    use_gpu: bool | None  # None: score.use_gpu


def refuse_failed_day(lake: Lake, feed: str, day: dt.date) -> None:
    """Refuse a day whose feed failed validation since its features were built: they come from raw
    data that no longer passes (a re-delivered day), so nothing is served from them."""
    from jobs.validation.partitions import FailedValidationError, check_not_failed

    try:
        check_not_failed(lake, feed, [day])
    except FailedValidationError as err:
        raise FailedValidationError(
            f"not scoring {day}: its features were built before the day's raw data failed validation. {err}; "
            "then the ingest (validate and features) of the day, and score it again") from err


def main(argv: list[str] | None = None) -> None:
    configure_logging()
    parser = job_parser(__doc__, window=True)
    parser.add_argument("--model-version", default=None, help="a registered version (default: the champion)")
    parser.add_argument("--use-gpu", type=parse_bool, default=None, help="true/false (default: score.use_gpu)")
    args = parse_job_args(parser, argv, ScoreArgs)
    preload("mlflow.pyfunc")  # the model lookup and load need it, after the session starts
    spark = get_spark(f"score-{args.run_date}", connect=True)
    lake, config = args.lake, args.config
    use_gpu = config.score.use_gpu if args.use_gpu is None else args.use_gpu
    if use_gpu and spark.conf.get("spark.master", "").startswith("local"):  # the Python workers run here
        require_cuda("GPU scoring (--use-gpu true / score.use_gpu)",
                     "score on the CPU with --use-gpu false, or run the job where the executors have GPUs")
    for day in args.window:  # every day's features first: a backfill stops before writing anything
        source = lake.partition(lake.features, day)
        if not path_exists(spark, source):
            raise MissingPartitionError(f"no features for {day}: expected {source}; run the features job first")
        refuse_failed_day(lake, config.validation.feed, day)
    check_fresh(lake, args.window)  # features whose history changed since they were built are not served
    with phase("model load"):  # on the driver: the registry lookup and the preprocessor
        model, load_uri = resolve_model(config.train.model_name, args.model_version)
        preprocessor = model_preprocessor(load_uri)
    batch_size = config.score.gpu_batch_size if use_gpu else config.score.batch_size
    if use_gpu:  # one Arrow batch per model call, not Arrow's default of 10,000 rows
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(batch_size))
    days = args.window
    log.info("scoring %s with %s version %s (run %s) on %s, %s, in batches of %d",
             days[0] if len(days) == 1 else f"{len(days)} days, {days[0]}..{days[-1]},", model.name,
             model.version, model.run_id, "GPUs" if use_gpu else "the CPU",
             "inputs encoded by Spark" if preprocessor else "raw inputs to the pyfunc", batch_size)
    score_days(spark, lake, config, days, model, load_uri, preprocessor, batch_size, use_gpu)


def score_days(spark: SparkSession, lake: Lake, config: PipelineConfig, days: list[dt.date], model: ModelRef,
               load_uri: str, preprocessor: dict[str, Any] | None, batch_size: int,
               use_gpu: bool) -> list[dict[str, Any]]:
    """Score the days' features in one pass, write their predictions (each day's partition replaced,
    no other), then each day's drift report, shadow predictions and
    ``reports/scoring/date=D/summary.json``; returns the summaries, oldest day first.

    A day is what it would be scored alone: the Spark jobs (the scoring, the counts, the drift's
    bins) are grouped by day, not run once per day."""
    sources = [lake.partition(lake.features, day) for day in days]
    features = spark.read.option("basePath", lake.features).parquet(*sources)
    one_day = days[0] if len(days) == 1 else None  # several: each row's run date is its partition's
    predictions = score_features(features, config.features, model, load_uri, batch_size, one_day,
                                 use_gpu, preprocessor)
    # one writer of the days' predictions; staging a killed score job left is removed first
    with zone_writer(spark, lake, "predictions", lake.predictions, days, f"score-{days[-1]}"):
        predictions.write.mode("overwrite").partitionBy(PARTITION).parquet(lake.predictions)

    targets = [lake.partition(lake.predictions, day) for day in days]
    written = spark.read.option("basePath", lake.predictions).parquet(*targets)
    stats = {partition_value(row[PARTITION]): row for row in
             written.groupBy(PARTITION).agg({"probability": "avg", "*": "count"}).collect()}
    summaries = []
    for day, target in zip(days, targets, strict=True):
        row = stats.get(day)
        summary = {
            "run_date": day.isoformat(),
            "model_name": model.name,
            "model_version": model.version,
            "model_run_id": model.run_id,
            "rows": int(row["count(1)"]) if row else 0,
            "mean_probability": float((row["avg(probability)"] if row else None) or 0.0),
            "path": target,
        }
        log.info("wrote %d predictions to %s (mean probability %.3f)", summary["rows"], summary["path"],
                 summary["mean_probability"])
        summaries.append(summary)
    with phase("drift"):
        drifts = report_drift(spark, lake, days, model, features, written, config.score.drift)
    with phase("shadow"):  # the challengers, after the served predictions are written (jobs.scoring.shadow)
        from jobs.scoring.shadow import score_shadow

        shadows = score_shadow(spark, lake, config, features, days, model, batch_size, use_gpu)
    for summary, day in zip(summaries, days, strict=True):
        summary["drift"], summary["shadow"] = drifts.get(day), shadows.get(day, [])
        write_text(lake.report("scoring", day), json.dumps(summary, indent=2))
    return summaries


def report_drift(
    spark: SparkSession, lake: Lake, days: list[dt.date], model: ModelRef, features: DataFrame,
    predictions: DataFrame, spec: DriftSpec,
) -> dict[dt.date, dict[str, Any]]:
    """Measure each day's drift against the model's baseline (one Spark job for the days' inputs,
    one for their predictions); write ``reports/drift/date=D/`` (``drift.json``, and ``drift.png``
    unless ``spec.plot`` is off).
    Returns each day's headline (drifted, reasons); nothing without a baseline."""
    import io

    from jobs.scoring.drift import drift_figure, headline, load_baseline, measure_days

    baseline = load_baseline(model.run_id)
    if baseline is None:
        log.warning("no drift baseline with %s version %s (run %s): drift not measured", model.name,
                    model.version, model.run_id)
        return {}
    done = {}
    for day, measured in measure_days(baseline, features, predictions, spec, days).items():
        report = {"run_date": day.isoformat(), "model_name": model.name, "model_version": model.version,
                  "model_run_id": model.run_id, **measured}
        path = lake.report("drift", day, DRIFT_REPORT)
        write_text(path, json.dumps(report, indent=2))
        if spec.plot:
            image = io.BytesIO()
            drift_figure(report).savefig(image, format="png")
            write_bytes(lake.report("drift", day, DRIFT_PLOT), image.getvalue())
        else:  # no picture of an earlier scoring left beside this one's report
            delete_file(lake.report("drift", day, DRIFT_PLOT))
        line = headline(report)
        log.info("drift of %s against the training window: %s (report: %s)", day, line, path)
        done[day] = {"drifted": report["drifted"], "status": report["status"], "reasons": report["reasons"],
                     "headline": line, "report": path}
    return done


if __name__ == "__main__":
    run_job(main)


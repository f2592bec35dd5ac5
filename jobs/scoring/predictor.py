"""The model the score job serves, on Spark: resolved once on the driver (:func:`resolve_model`),
loaded once per Python worker (:func:`load_model`), and applied by ``predict_batch_udf``
(:func:`score_features`) to raw feature columns through the pyfunc (:func:`make_predict_fn`) or to
inputs Spark encoded with the model's preprocessor (:func:`encoded_columns`,
:func:`make_encoded_predict_fn`). The score job (:mod:`jobs.scoring.job`) and the shadow scoring
(:mod:`jobs.scoring.shadow`) both score with it."""

from __future__ import annotations

import datetime as dt
import inspect
import json
import math
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from jobs.lake.layout import PARTITION

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from jobs.config import FeatureSpec
    from jobs.tracking import ModelRef


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
    try:
        model = mlflow.pyfunc.load_model(model_uri, **({} if device == "cpu" else {"model_config": {"device": device}}))
    except Exception as err:
        # The driver checked the files (jobs.registry.check_version): present, not empty, yet this one fails.
        from jobs.errors import headline

        raise RuntimeError(
            f"the model at {model_uri} does not load in a Python worker ({headline(err)}): its "
            "files are all there, so one may be corrupt; if a retry fails the same way, move the champion alias "
            "to another version (docs/troubleshooting.md, 'A registered version whose files are damaged')"
        ) from err
    if device != "cpu":
        if "device" not in model.model_config:  # MLflow drops load-time keys the logged model lacks
            raise RuntimeError(
                f"{model_uri} was logged without a 'device' in its model_config, so it cannot be put on "
                f"{device}: log it with model_config={{'device': 'cpu'}} (jobs.model.tabular.log_pyfunc does) or "
                "score with --use-gpu false"
            )
    # A worker's stderr reaches the task log: the fixed cost each Python worker pays once.
    print(f"jobs.scoring.predictor: a Python worker imported MLflow and loaded the model on {device} in "
          f"{time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return model


# jobs.model.tabular.PREPROCESSOR_FILE inside a pyfunc's artifacts (read here without importing torch)
PREPROCESSOR_ARTIFACT = "artifacts/preprocessor.json"


def model_preprocessor(model_uri: str) -> dict[str, Any] | None:
    """The preprocessor a model logged by :func:`jobs.model.tabular.log_pyfunc` carries (vocabularies and
    normalisation statistics, as JSON), or None for a model without one (a baseline, an XGBoost
    pyfunc: scored on raw columns by design), told by the model's file list. A preprocessor listed
    but unreadable, or a store that does not answer, raises: never a quiet switch to raw columns
    (:func:`resolve_model` has checked the files before, so that is a fault)."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    folder = PREPROCESSOR_ARTIFACT.rpartition("/")[0]
    repo = get_artifact_repository(model_uri)
    if PREPROCESSOR_ARTIFACT not in {info.path for info in repo.list_artifacts(folder)}:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        with open(repo.download_artifacts(PREPROCESSOR_ARTIFACT, dst_path=tmp), encoding="utf-8") as handle:
            return json.load(handle)


def encoded_columns(pre: dict[str, Any]) -> list[Column]:
    """The model's inputs encoded by Spark as :meth:`jobs.model.tabular.Preprocessor.encode` encodes them:
    a category's vocabulary index + 1 (0 for an unseen value or a null) as int, then each number's
    z-score in double (nulls, NaN and infinities at 0, clipped to the training range's and to
    +-Z_LIMIT), cast to float."""
    from pyspark.sql import functions as F

    from jobs.model.tabular import Z_LIMIT, Preprocessor

    unknown = F.lit(0)  # jobs.model.tabular.UNKNOWN_INDEX
    codes = []
    for col in pre["categorical"]:
        vocab = pre["vocab"][col]
        lookup = F.create_map(*[x for i, value in enumerate(vocab) for x in (F.lit(value), F.lit(i + 1))])
        code = F.coalesce(F.try_element_at(lookup, F.col(col).cast("string")), unknown) if vocab else unknown
        codes.append(code.cast("int").alias(f"{col}_code"))
    zscores = []
    ranges = Preprocessor(**pre)
    for col in pre["numeric"]:
        z = (F.col(col).cast("double") - F.lit(pre["mean"][col])) / F.lit(pre["std"][col])
        finite = z.isNotNull() & ~F.isnan(z) & (F.abs(z) != F.lit(float("inf")))
        low, high = ranges.z_range(col)
        if math.isfinite(low):
            z = F.greatest(z, F.lit(low))
        if math.isfinite(high):
            z = F.least(z, F.lit(high))
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
    use_gpu: bool = False, preprocessor: dict[str, Any] | None = None, keep: list[str] | None = None,
) -> DataFrame:
    """Prediction rows: the id columns, ``probability``, the model's identity, the run date (None:
    each row's partition ``date``, for features of several days), the scoring time and the partition.

    With the model's ``preprocessor`` (:func:`model_preprocessor`), Spark encodes the inputs and the
    Python workers only run the net; without, the workers get the raw feature columns and call the
    pyfunc's ``predict`` (any MLflow pyfunc that takes them works). ``keep``: feature columns
    carried along (the recent-outcome shift keeps the label of the days it scores)."""
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
    return features.select(*prediction_columns(spec, model, predict(*inputs), run_date), *(keep or []))


@contextmanager
def served_predictions(spark: Any, lake: Any, config: Any, features: DataFrame, days: list[dt.date], model: Any,
                       load_uri: str, preprocessor: dict[str, Any] | None, batch_size: int, use_gpu: bool = False,
                       landed: set[dt.date] | None = None) -> Iterator[tuple[DataFrame, dict[dt.date, dict[str, Any]]]]:
    """What ``model`` would serve for ``features`` (the rows of ``days``), while the block runs: its
    predictions (:func:`score_features`, to be written in the block) with each day's recent-outcome
    shift applied, and the shifts (``score.recent_shift``, :mod:`jobs.scoring.shift`; {} when off).
    The served model and each challenger in shadow get theirs the same way.

    One pass scores the days and their reference days together (a day of a several-day pass is
    often another's reference day): its rows are kept (``persist``) while the reference days'
    labelled rows are binned in Spark and the shifts solved here, and the block's write reads them
    from there; they are let go when the block ends. ``landed``: the days the features zone holds,
    when the caller has listed them already."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType

    from jobs.lake.files import read_days
    from jobs.monitoring.outcomes import features_days
    from jobs.scoring.shift import day_shifts, logit_bins, reference_days, with_shifts

    spec, label, delay = config.score.recent_shift, config.features.label, config.monitoring.label_delay_days
    calendar = config.feed_calendar
    one_day = days[0] if len(days) == 1 else None  # several: each row's run date is its partition's
    wanted: list[dt.date] = []
    if spec.days:
        landed = features_days(spark, lake) if landed is None else landed
        wanted = sorted({d for day in days for d in reference_days(day, spec, delay, landed, calendar)})
    if not wanted:  # off, or the first days of a lake: nothing has landed, nothing is shifted (each day says why)
        shifts = day_shifts({}, days, spec, delay, landed, calendar) if spec.days else {}
        yield with_shifts(score_features(scoring_tasks(features, config.score.rows_per_task), config.features, model,
                                         load_uri, batch_size, one_day, use_gpu, preprocessor), shifts), shifts
        return
    # the columns the scoring reads, in the days' order: a reference day needs those, not the rest
    used = {*config.features.id_columns, label, PARTITION,
            *([*preprocessor["categorical"], *preprocessor["numeric"]] if preprocessor else config.features.inputs)}
    columns = [c for c in features.columns if c in used]
    rows = features.select(*columns)
    if extra := [d for d in wanted if d not in set(days)]:
        rows = rows.unionByName(read_days(spark, lake.features, extra).select(*columns))
    scored = score_features(scoring_tasks(rows, config.score.rows_per_task), config.features, model, load_uri,
                            batch_size, None, use_gpu, preprocessor, keep=[label]).persist()
    try:
        def of(chosen: list[dt.date]) -> Any:
            return F.col(PARTITION).cast(DateType()).isin(chosen)

        bins = logit_bins(scored.where(of(wanted)), label)
        shifts = day_shifts(bins, days, spec, delay, landed, calendar)
        predictions = scored.where(of(days)).drop(label)
        if one_day is not None:  # the run date as one literal, as a day scored on its own has it
            predictions = predictions.withColumn("run_date", F.lit(one_day))
        yield with_shifts(predictions, shifts), shifts
    finally:
        scored.unpersist()


def scoring_tasks(rows: DataFrame, rows_per_task: int) -> DataFrame:
    """``rows`` in at most ``ceil(count / rows_per_task)`` partitions (``score.rows_per_task``; 0:
    as they are). Spark splits even a small read across every core, and each task of the scoring
    starts a Python worker that imports torch and loads the model (seconds each, whatever its
    rows): a day and its reference days, a few thousand rows, are scored by one worker instead of
    one per core. Counting costs one Spark job over the Parquet footers; a ``coalesce`` only merges
    partitions (no shuffle), so a big day keeps Spark's split."""
    if rows_per_task <= 0:
        return rows
    return rows.coalesce(max(1, math.ceil(rows.count() / rows_per_task)))


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
    """The model version to use and where its files are, resolved once on the driver: the
    ``champion`` alias's version, or ``version`` (``--model-version``). Its files are checked
    there (:func:`jobs.registry.check_version`): a version whose artifacts are missing or
    unreadable is a data error naming it and what to do, before any Spark work; so is a
    ``version`` the registry does not have.

    Workers load from the artifact location, so they need no access to the registry.
    """
    from mlflow.exceptions import MlflowException

    from jobs.registry import ASKED, CHAMPION, check_version
    from jobs.tracking import ModelRef, NoModelError, champion_version, client

    mlflow_client = client()
    if version is None:
        ref = champion_version(name)
    else:
        try:
            ref = ModelRef.of(mlflow_client.get_model_version(name, version))
        except MlflowException as err:
            if err.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            raise NoModelError(f"model {name!r} has no version {version} (--model-version): pass a registered "
                               "version, or leave --model-version out to use the champion") from err
    return ref, check_version(mlflow_client, ref.name, ref.version, ASKED if version else CHAMPION)

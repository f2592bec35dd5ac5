"""Benchmark: rows/s of the Spark scoring job against a single-process pyarrow + torch baseline.

Usage::

    python -m benchmarks.scoring [--out DIR] [--scales day,month,year,3x-day,10x] [--repeat 2] [--tune-scale year]

Setup (timed, reported apart): the whole 2013 example year is landed into a throw-away lake, validated
(without GX) and turned into features (one Parquet file per day, as the features job writes them); a
small model (``train.model`` with the train section's hyperparameters and a preprocessor fitted on
January) is trained for a few hundred steps in this process, logged with ``log_pyfunc`` to a
throw-away MLflow store, registered and resolved with :func:`jobs.score.resolve_model`, as the score
job does. Scales are feature partitions of 1 day (2013-07-01), 1 month (July) and the full year, and
``Nx`` (e.g. ``10x``): N times the year, generated from the real rows (:func:`scale_up`: each day's
file holds its own rows, then N - 1 bootstrap resamples of them with the continuous numeric inputs
jittered by 5% of the day's standard deviation; one file per date partition, the same schema), and
``Nx-day`` (e.g. ``3x-day``, about 1M rows): the same N times the year's rows as one day's partition
(one file, :func:`one_partition`), the shape of the nightly job's input at lake scale: the score
job scores one day per run, so the year scales measure 365 files in and 365 partitions out, a
shape it never runs.

Contenders, per scale, side by side in one local[2] session (one for all), each writing its own
throw-away predictions folder, partitioned by date:

- ``spark (score job)``: :func:`jobs.score.score_features` on the scale's partitions with the model's
  preprocessor, as the job runs it (Spark encodes the inputs: category codes and z-scores; the
  workers copy them into the model's input buffers and run the net), written as the score job
  writes (``.write.mode("overwrite").partitionBy("date").parquet``), with ``score.batch_size`` and
  Arrow's default ``maxRecordsPerBatch`` (10000);
- ``spark, raw columns to the pyfunc``: the same output with the raw feature columns handed to the
  pyfunc's ``predict`` (a pandas DataFrame of strings and numbers, encoded in the worker): the
  job's path for a model without a preprocessor; its probabilities are checked against the score
  job's on the same rows;
- ``spark mapInArrow, encoded inputs (experiment)``: the same encoding and predict function through
  ``mapInArrow`` instead of predict_batch_udf (numpy arrays straight from Arrow, no pandas at all);
- ``spark read+write``: the same read and write without the model (a constant probability): the floor
  of Spark's I/O;
- ``spark read+write + no-op pandas UDF``: the same, with the model's input columns handed to the
  Python workers and a constant handed back through a pandas UDF: the floor of any Python scoring
  in Spark (Arrow out of the JVM, pandas, Arrow back) before a model runs;
- ``baseline (pyarrow + torch)``: one process (this one, torch on one thread as the pyfunc sets it):
  a ``pyarrow.dataset`` scan of the same Parquet, the pyfunc's ``predict`` on raw columns in batches of
  ``score.batch_size`` (like the UDF), the same output columns, ``pyarrow.dataset.write_dataset``
  partitioned by date;
- ``baseline, torch direct``: the same, with the inputs encoded once with pyarrow compute and the net
  called directly on the tensors.

Stage time is the wall time of the action (Spark: the write; baseline: scan + predict + write) in a
warm process: Spark's session is started, its Python workers are running and hold the model (each
contender runs once as a warm-up, then ``--repeat`` times, the contenders taking turns; the best run
counts); file listing happens when a contender's DataFrame or dataset is built, outside the timing.
Python workers idle for a minute exit (Spark's fixed timeout), so a UDF contender is warmed up again,
untimed, when more than 45 s passed since the last UDF ran. Ratios are stage time / the baseline's.

Tuning (``--tune-scale``, default ``year``; ``none`` skips it): the three Spark contenders with a model over
``score.batch_size`` in (1024, 4096, 16384) x ``spark.sql.execution.arrow.maxRecordsPerBatch`` in
(10000, 50000). Each splits the Arrow batches, so a model call sees at most the smaller of the two.

Checks, per scale: every contender writes the score job's columns and rows; the raw-column UDF's
probabilities equal the score job's on the same rows (both UDFs in one select, max abs diff < 1e-6
expected), the others' sorted probabilities equal the score job's sorted ones.

Fixed costs, measured in fresh processes (``subprocess``) on the day's partition: Python start and
imports, ``SparkSession.builder.getOrCreate()``, the first Spark action (JVM warm-up), the first UDF
call (Python worker start and imports) and a new UDF on warm workers (model load), against a warm
call; for the baseline, Python start and imports, ``mlflow.pyfunc.load_model`` and the first call.

Prints the machine and Markdown tables and writes ``scoring.json`` (settings, setup times, every run,
the checks) to ``--out``. Needs about 3 x N x the year's features (12 MB) of free disk for ``Nx``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.common import feature_lake, machine, throwaway_home
from jobs.config import FeatureSpec, days_ending, load_config
from jobs.datasets.land_flights import FIRST_DAY, LAST_DAY
from jobs.lake import PARTITION, Lake, partition_day, partition_name
from jobs.score import prediction_columns

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads
    from pyspark.sql import Column, DataFrame, SparkSession

    from jobs.model import Preprocessor
    from jobs.tracking import ModelRef

REPO = Path(__file__).resolve().parents[1]
SESSION = {"spark.master": "local[2]", "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"
DEFAULT_ARROW_BATCH = 10000
TUNE_BATCH_SIZES = (1024, 4096, 16384)
TUNE_ARROW_BATCHES = (10000, 50000)
DAY = dt.date(2013, 7, 1)
MONTH = days_ending(dt.date(2013, 7, 31), 31)
TRAIN_DAYS = days_ending(dt.date(2013, 1, 31), 31)
TRAIN_STEPS = 300
JITTER = 0.05  # the scaled-up set's noise on continuous inputs, in standard deviations of the day
TUNED = ("spark", "raw", "arrow")
REWARM_AFTER_S = 45  # Spark stops Python workers idle for 60 s, and their cached models with them
EQUAL_TOLERANCE = 1e-6
PROBE_MARK = "PROBE-RESULT "


@dataclasses.dataclass(frozen=True)
class Scale:
    """Feature partitions to score: some days under ``root``, or all of them (``days`` None)."""

    key: str
    label: str
    root: str
    days: list[dt.date] | None

    @property
    def run_date(self) -> dt.date:
        """The run date the score job would be given: the last day."""
        return self.days[-1] if self.days else LAST_DAY

    def spark_paths(self) -> list[str]:
        if self.days is None:
            return [self.root]
        return [f"{self.root}/{partition_name(d)}" for d in self.days]

    def files(self) -> list[str]:
        folders = [Path(p) for p in self.spark_paths()]
        return sorted(str(f) for folder in folders for f in folder.rglob("*.parquet") if not hidden(f, folder))


def hidden(path: Path, under: Path) -> bool:
    return any(part.startswith((".", "_")) for part in path.relative_to(under).parts)


@dataclasses.dataclass
class Contender:
    key: str
    name: str
    uses_udf: bool
    prepare: Callable[[], Callable[[], Any]]  # builds the DataFrame or dataset (untimed); returns the action
    output: str | None = None


# --------------------------------------------------------------------------------------------------
# Spark contenders beside the score job.


def raw_udf(spec: FeatureSpec, load_uri: str, batch_size: int) -> Column:
    """The pyfunc on the raw feature columns (what any MLflow pyfunc takes): the score job's path for a
    model without a Preprocessor."""
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType

    from jobs.score import make_predict_fn

    predict = predict_batch_udf(make_predict_fn(load_uri, spec.inputs), return_type=DoubleType(),
                                batch_size=batch_size)
    return predict(*[F.col(c) for c in spec.inputs])


def encoded_udf(pre: dict[str, Any], load_uri: str, batch_size: int) -> Column:
    """The score job's UDF over inputs Spark encoded."""
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql.types import DoubleType

    from jobs.score import encoded_columns, make_encoded_predict_fn

    predict = predict_batch_udf(make_encoded_predict_fn(load_uri, len(pre["categorical"]), len(pre["numeric"])),
                                return_type=DoubleType(), batch_size=batch_size)
    return predict(*encoded_columns(pre))


def same_columns(job: DataFrame, other: DataFrame, name: str) -> None:
    """The benchmark's copies of the score job's output must write what the job writes."""
    if job.dtypes != other.dtypes:
        raise RuntimeError(f"{name} writes {other.dtypes}, the score job {job.dtypes}: update benchmarks/scoring.py")


def score_features_raw(
    features: DataFrame, spec: FeatureSpec, model: ModelRef, load_uri: str, batch_size: int, run_date: dt.date,
) -> DataFrame:
    """:func:`jobs.score.score_features` on raw columns (the pyfunc's own contract)."""
    return features.select(*prediction_columns(spec, model, raw_udf(spec, load_uri, batch_size), run_date))


def score_features_arrow(
    features: DataFrame, spec: FeatureSpec, pre: dict[str, Any], model: ModelRef, load_uri: str, batch_size: int,
    run_date: dt.date,
) -> DataFrame:
    """The score job's encoded inputs and predict function through ``mapInArrow``, without
    predict_batch_udf's pandas: each Arrow batch's columns go to the predict function as numpy arrays,
    in slices of ``batch_size``; the model is cached per Python worker as predict_batch_udf caches it."""
    import uuid

    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, StructField, StructType

    from jobs.score import encoded_columns, make_encoded_predict_fn

    ids = list(dict.fromkeys(spec.id_columns))
    inputs = [c.alias(f"_input{i}") for i, c in enumerate(encoded_columns(pre))]
    encoded = features.select(*ids, PARTITION, *inputs)
    kept = encoded.schema.fields[: len(ids) + 1]
    schema = StructType([*kept, StructField("probability", DoubleType())])
    make = make_encoded_predict_fn(load_uri, len(pre["categorical"]), len(pre["numeric"]))
    key, n_kept, names = uuid.uuid4(), len(kept), [*(f.name for f in kept), "probability"]

    def score(batches: Any) -> Any:
        import numpy as np
        import pyarrow as pa
        from pyspark.ml.model_cache import ModelCache

        predict = ModelCache.get(key)
        if predict is None:
            predict = make()
            ModelCache.add(key, predict)
        for batch in batches:
            arrays = [batch.column(i).to_numpy(zero_copy_only=False) for i in range(n_kept, batch.num_columns)]
            parts = [predict(*[a[i : i + batch_size] for a in arrays]) for i in range(0, batch.num_rows, batch_size)]
            probability = pa.array(np.concatenate(parts) if parts else np.zeros(0), pa.float64())
            yield pa.RecordBatch.from_arrays([*batch.columns[:n_kept], probability], names=names)

    return encoded.mapInArrow(score, schema).select(*prediction_columns(spec, model, F.col("probability"), run_date))


def read_write_only(features: DataFrame, spec: FeatureSpec, model: ModelRef, run_date: dt.date) -> DataFrame:
    """The score job's read and output without the model: a constant probability."""
    from pyspark.sql import functions as F

    return features.select(*prediction_columns(spec, model, F.lit(0.5), run_date))


def handoff_only(features: DataFrame, spec: FeatureSpec, model: ModelRef, run_date: dt.date) -> DataFrame:
    """The score job's read, hand-off of the model's inputs to the Python workers and back (Arrow,
    pandas) and output, without a model: a pandas UDF over the same columns returning a constant."""
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("double")  # type: ignore[call-overload]
    def constant(*columns):  # noqa: ANN002, ANN202 - varargs of pd.Series; hints would change the UDF type
        return pd.Series(0.5, index=columns[0].index)

    return features.select(*prediction_columns(spec, model, constant(*[F.col(c) for c in spec.inputs]), run_date))


def write_predictions(predictions: DataFrame, path: str) -> None:
    """The score job's write."""
    predictions.write.mode("overwrite").partitionBy(PARTITION).parquet(path)


def max_abs_difference(features: DataFrame, spec: FeatureSpec, pre: dict[str, Any], load_uri: str,
                       batch_size: int) -> tuple[float, int]:
    """(max |score job (encoded inputs) - raw columns|, rows) over the same rows, both UDFs in one select."""
    from pyspark.sql import functions as F

    both = features.select(encoded_udf(pre, load_uri, batch_size).alias("job"),
                           raw_udf(spec, load_uri, batch_size).alias("raw"))
    row = both.agg(F.max(F.abs(F.col("job") - F.col("raw"))).alias("diff"), F.count("*").alias("n")).first()
    return float(row["diff"] or 0.0), int(row["n"])


# --------------------------------------------------------------------------------------------------
# The baseline: one process, pyarrow + torch.


def date_partitioning() -> Any:
    import pyarrow as pa
    import pyarrow.dataset as pads

    return pads.partitioning(pa.schema([(PARTITION, pa.date32())]), flavor="hive")


def arrow_dataset(scale: Scale) -> pads.Dataset:
    """The scale's partitions as a pyarrow dataset (``date`` from the folder names, as Spark reads it)."""
    import pyarrow.dataset as pads

    if scale.days is None:
        return pads.dataset(scale.root, format="parquet", partitioning=date_partitioning())
    return pads.dataset(scale.files(), format="parquet", partitioning=date_partitioning(),
                        partition_base_dir=scale.root)


def encode_arrow(pre: Preprocessor, table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`Preprocessor.encode` with pyarrow compute: (codes [n, k] int64, z-scores [n, m] float32)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cats = np.zeros((table.num_rows, len(pre.categorical)), dtype=np.int64)
    for j, col in enumerate(pre.categorical):
        index = pc.index_in(table[col].cast(pa.string()), value_set=pa.array(pre.vocab[col], pa.string()))
        cats[:, j] = pc.fill_null(index, -1).to_numpy().astype(np.int64) + 1
    nums = np.zeros((table.num_rows, len(pre.numeric)), dtype=np.float32)
    for j, col in enumerate(pre.numeric):
        values = table[col].cast(pa.float64()).to_numpy()
        z = (values - pre.mean[col]) / pre.std[col]
        nums[:, j] = np.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0)
    return cats, nums


def baseline_score(dataset: pads.Dataset, model: Any, spec: FeatureSpec, ref: ModelRef, run_date: dt.date,
                   out: str, batch_size: int, direct: bool = False) -> int:
    """Scan, predict in batches, write the score job's columns partitioned by date; returns the rows.

    ``model`` is the loaded pyfunc: its ``predict`` takes the raw columns (``direct``: the inputs
    are encoded once with pyarrow and its net is called on the tensors).
    """
    import pyarrow as pa
    import pyarrow.dataset as pads
    import torch

    ids = list(dict.fromkeys(spec.id_columns))
    table = dataset.to_table(columns=list(dict.fromkeys([*ids, *spec.inputs, PARTITION])))
    rows = table.num_rows
    if direct:
        inner = model.unwrap_python_model()
        cats, nums = (torch.from_numpy(a) for a in encode_arrow(inner.pre, table))
        with torch.inference_mode():
            parts = [torch.sigmoid(inner.net(cats[i : i + batch_size], nums[i : i + batch_size])).double().numpy()
                     for i in range(0, rows, batch_size)]
    else:
        inputs = table.select(spec.inputs)
        parts = [np.asarray(model.predict(inputs.slice(i, batch_size).to_pandas()), dtype=np.float64)
                 for i in range(0, rows, batch_size)]
    probability = np.concatenate(parts) if parts else np.zeros(0)
    now = dt.datetime.now(dt.UTC)
    output = pa.table({
        **{c: table[c] for c in ids},
        "probability": pa.array(probability, pa.float64()),
        "model_name": pa.repeat(pa.scalar(ref.name, pa.string()), rows),
        "model_version": pa.repeat(pa.scalar(ref.version, pa.string()), rows),
        "model_run_id": pa.repeat(pa.scalar(ref.run_id, pa.string()), rows),
        "run_date": pa.repeat(pa.scalar(run_date, pa.date32()), rows),
        "scored_at": pa.repeat(pa.scalar(now, pa.timestamp("us", tz="UTC")), rows),
        PARTITION: table[PARTITION],
    })
    pads.write_dataset(output, out, format="parquet", partitioning=date_partitioning(),
                       existing_data_behavior="delete_matching", basename_template="part-{i}.parquet")
    return rows


# --------------------------------------------------------------------------------------------------
# The scaled-up set.


def scale_up(source: str, target: str, factor: float, numeric: list[str], seed: int = 13) -> int:
    """Write ``factor`` x the rows of every date partition under ``source`` to ``target``; returns the rows.

    Each day keeps its own rows (one copy per whole unit of ``factor``, the first as it is) and adds
    bootstrap resamples of them, with the continuous columns of ``numeric`` jittered by JITTER of the
    day's standard deviation (nulls stay null; integer-valued columns are resampled, not jittered).
    One file per date partition, the source files' schema (Spark's metadata included).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if factor <= 0:
        raise ValueError(f"the scale factor must be positive, got {factor}")
    written = 0
    for folder in sorted(p for p in Path(source).iterdir() if p.is_dir() and partition_day(p.name) is not None):
        files = sorted(f for f in folder.glob("*.parquet") if not f.name.startswith((".", "_")))
        day = pa.concat_tables([pq.read_table(f) for f in files])
        n = day.num_rows
        wanted = round(factor * n)
        rng = np.random.default_rng([seed, dt.date.fromisoformat(folder.name[5:]).toordinal()])
        copies = [day] if wanted >= n else []
        left = wanted - n * len(copies)
        while left > 0:
            take = min(n, left)
            copies.append(jitter(day.take(rng.integers(0, n, take)), day, numeric, rng))
            left -= take
        out = folder.name
        (Path(target) / out).mkdir(parents=True, exist_ok=True)
        table = pa.concat_tables(copies) if copies else day.slice(0, 0)
        pq.write_table(table, Path(target) / out / "part-00000.parquet", compression="snappy")
        written += table.num_rows
    return written


def one_partition(source: str, target: str, day: dt.date) -> int:
    """Write every date partition under ``source`` as the single partition ``day`` under ``target``
    (one file); returns the rows."""
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    table = pads.dataset(source, format="parquet", partitioning="hive", exclude_invalid_files=True).to_table()
    folder = Path(target) / partition_name(day)
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.drop_columns([PARTITION]), folder / "part-00000.parquet", compression="snappy")
    return table.num_rows


def jitter(sample: pa.Table, day: pa.Table, numeric: list[str], rng: np.random.Generator) -> pa.Table:
    import pyarrow as pa

    for col in numeric:
        if col not in sample.column_names:
            continue
        reference = day[col].to_numpy(zero_copy_only=False).astype(np.float64)
        finite = reference[np.isfinite(reference)]
        if finite.size < 2 or np.all(np.mod(finite, 1.0) == 0.0):
            continue
        values = sample[col].to_numpy(zero_copy_only=False).astype(np.float64)
        noisy = values + rng.normal(0.0, JITTER * float(finite.std()), len(values))
        index = sample.column_names.index(col)
        column = pa.array(noisy, type=sample.schema.field(col).type, mask=np.isnan(values))
        sample = sample.set_column(index, sample.schema.field(col), column)
    return sample


def folder_bytes(path: str) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


# --------------------------------------------------------------------------------------------------
# Fixed costs, in fresh processes.


def run_probe(kind: str, job: dict[str, Any]) -> dict[str, Any]:
    """Run ``--probe`` in a new Python process; its timings, with the process's wall time."""
    launched = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.scoring", "--probe", json.dumps({**job, "kind": kind,
                                                                           "launched": launched})],
        cwd=REPO, capture_output=True, text=True, env=os.environ.copy(),
    )
    wall = time.time() - launched
    lines = [line for line in done.stdout.splitlines() if line.startswith(PROBE_MARK)]
    if done.returncode or not lines:
        raise RuntimeError(f"the {kind} probe failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                           f"{done.stderr[-3000:]}")
    return {**json.loads(lines[-1][len(PROBE_MARK):]), "process_wall_s": wall}


def probe(job: dict[str, Any]) -> dict[str, float]:
    """The fixed costs of one fresh process (``job["kind"]``: ``spark`` or ``baseline``)."""
    started = time.time()
    marks: dict[str, float] = {"python_start_s": started - job["launched"]}
    config = load_config()
    spec = config.features
    from jobs.tracking import ModelRef

    ref = ModelRef(**job["model"])
    scale = Scale("day", "1 day", job["root"], [dt.date.fromisoformat(job["day"])])

    def timed(name: str, fn: Callable[[], Any]) -> None:
        t = time.perf_counter()
        fn()
        marks[name] = time.perf_counter() - t

    if job["kind"] == "spark":
        t = time.perf_counter()
        import pyspark.ml.functions  # noqa: F401
        import pyspark.sql  # noqa: F401

        from jobs.score import score_features
        from jobs.spark import get_spark

        marks["imports_s"] = time.perf_counter() - t
        timed("session_start_s", lambda: get_spark("bench-scoring-probe", SESSION))
        spark = get_spark("bench-scoring-probe", SESSION)
        features = spark.read.option("basePath", scale.root).parquet(*scale.spark_paths())
        plain = read_write_only(features, spec, ref, scale.run_date)
        timed("first_read_write_s", lambda: write_predictions(plain, job["out"]))
        timed("warm_read_write_s", lambda: write_predictions(plain, job["out"]))
        first = score_features(features, spec, ref, job["load_uri"], job["batch_size"], scale.run_date)
        timed("first_udf_s", lambda: write_predictions(first, job["out"]))
        fresh = score_features(features, spec, ref, job["load_uri"], job["batch_size"], scale.run_date)
        timed("fresh_udf_warm_workers_s", lambda: write_predictions(fresh, job["out"]))
        timed("warm_udf_s", lambda: write_predictions(fresh, job["out"]))
        warm = marks["warm_udf_s"]
        timed("warm_udf_s", lambda: write_predictions(fresh, job["out"]))
        marks["warm_udf_s"] = min(warm, marks["warm_udf_s"])
        timed("session_stop_s", spark.stop)
    else:
        t = time.perf_counter()
        import mlflow.pyfunc
        import pyarrow.dataset  # noqa: F401
        import torch  # noqa: F401

        marks["imports_s"] = time.perf_counter() - t
        holder: dict[str, Any] = {}
        timed("model_load_s", lambda: holder.update(model=mlflow.pyfunc.load_model(job["load_uri"])))
        dataset = arrow_dataset(scale)
        run = lambda: baseline_score(  # noqa: E731
            dataset, holder["model"], spec, ref, scale.run_date, job["out"], job["batch_size"])
        timed("first_call_s", run)
        timed("warm_call_s", run)
        warm = marks["warm_call_s"]
        timed("warm_call_s", run)
        marks["warm_call_s"] = min(warm, marks["warm_call_s"])
    marks["in_process_s"] = time.time() - started
    return marks


# --------------------------------------------------------------------------------------------------
# Setup.


def train_model(spark: SparkSession, lake: Lake, config: Any) -> tuple[Any, Preprocessor, dict[str, Any], Any]:
    """A small model on January's features: (net, preprocessor, hyperparameters, a pandas example)."""
    import torch
    from pyspark.sql import functions as F

    from jobs.model import build_model
    from jobs.training.data import fit_preprocessor

    spec, cfg = config.features, config.train
    features = spark.read.option("basePath", lake.features).parquet(
        *[lake.partition(lake.features, d) for d in TRAIN_DAYS])
    pre = fit_preprocessor(features, spec, cfg.min_category_count)
    frame = features.where(F.col(spec.label).isNotNull()).toPandas()
    cats, nums = (torch.from_numpy(a) for a in pre.encode(frame))
    labels = torch.from_numpy(frame[spec.label].to_numpy(np.float32))
    hyper = dict(cfg.hyperparameters)
    torch.manual_seed(cfg.seed)
    net = build_model(cfg.model, pre, hyper)
    optimizer = torch.optim.Adam(net.parameters(), lr=cfg.learning_rate)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    generator = torch.Generator().manual_seed(cfg.seed)
    net.train()
    for _ in range(TRAIN_STEPS):
        batch = torch.randint(0, len(labels), (cfg.batch_size,), generator=generator)
        optimizer.zero_grad()
        loss_fn(net(cats[batch], nums[batch]), labels[batch]).backward()
        optimizer.step()
    net.eval()
    return net, pre, hyper, frame


def log_model(net: Any, pre: Preprocessor, hyper: dict[str, Any], frame: Any, name: str) -> tuple[ModelRef, str]:
    """Log, register and resolve the model as the score job does: (its version, where workers load it)."""
    import mlflow

    from jobs.model import log_pyfunc
    from jobs.score import resolve_model
    from jobs.tracking import ensure_experiment

    with mlflow.start_run(experiment_id=ensure_experiment("bench-scoring")):
        info = log_pyfunc(net, pre, hyper, frame.head(5))
    version = mlflow.register_model(info.model_uri, name).version
    return resolve_model(name, str(version))


def parse_scales(text: str) -> list[str]:
    scales = [s.strip() for s in text.split(",") if s.strip()]
    for s in scales:
        if s not in ("day", "month", "year") and not (s.endswith("x") and is_number(s[:-1])) and not (
            s.endswith("x-day") and is_number(s[:-5])
        ):
            raise SystemExit(f"unknown scale {s!r}: expected day, month, year, Nx (e.g. 10x) or Nx-day (e.g. 3x-day)")
    return scales


def is_number(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False


# --------------------------------------------------------------------------------------------------
# Measuring.


class Bench:
    """Runs contenders: warm-ups, turns, re-warming Python workers that may have idled out."""

    def __init__(self, repeat: int) -> None:
        self.repeat = repeat
        self.last_udf = 0.0
        self.rewarmed = 0

    def _run(self, contender: Contender, action: Callable[[], Any], timed: bool) -> float:
        if timed and contender.uses_udf and time.perf_counter() - self.last_udf > REWARM_AFTER_S:
            self.rewarmed += 1
            self._run(contender, action, timed=False)
        started = time.perf_counter()
        action()
        ended = time.perf_counter()
        if contender.uses_udf:
            self.last_udf = ended
        return ended - started

    def measure(
        self, contenders: list[Contender], variants: dict[Any, Callable[[], None]] | None = None
    ) -> dict[tuple[Any, str], list[float]]:
        """Timed runs per (variant, contender), after one warm-up each; the contenders take turns,
        and so do the variants (settings applied before their runs, e.g. a session conf)."""
        variants = variants or {None: lambda: None}
        actions = {c.key: c.prepare() for c in contenders}
        next(iter(variants.values()))()
        for c in contenders:
            self._run(c, actions[c.key], timed=False)
        runs: dict[tuple[Any, str], list[float]] = {(v, c.key): [] for v in variants for c in contenders}
        for _ in range(self.repeat):
            for variant, apply in variants.items():  # taking turns, so drift on a shared machine hits all
                apply()
                for c in contenders:
                    runs[variant, c.key].append(self._run(c, actions[c.key], timed=True))
        return runs


def read_outputs(path: str) -> tuple[int, np.ndarray, list[str]]:
    """(rows, sorted probabilities, column names) of a predictions folder."""
    import pyarrow.dataset as pads

    dataset = pads.dataset(path, format="parquet", partitioning=date_partitioning())
    table = dataset.to_table(columns=["probability"])
    return table.num_rows, np.sort(table["probability"].to_numpy()), sorted(dataset.schema.names)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--scales", default="day,month,year,3x-day,10x",
                        help="comma-separated: day, month, year, Nx (N times the year; a fraction such as "
                        "0.05x checks the generator quickly), Nx-day (N times the year as one day)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--tune-scale", default="year", help="a scale to tune batch sizes at, or none")
    parser.add_argument("--probe", default=None, help=argparse.SUPPRESS)  # a fresh process's fixed costs
    args = parser.parse_args(argv)
    if args.probe:
        print(PROBE_MARK + json.dumps(probe(json.loads(args.probe))), flush=True)
        return
    logging.basicConfig(level=logging.WARNING)
    scales = parse_scales(args.scales)
    tune_scale = None if args.tune_scale == "none" else parse_scales(args.tune_scale)[0]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    home = throwaway_home("bench-scoring-")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers need this venv (torch, mlflow)
    try:
        run_benchmark(home, out, scales, tune_scale, args.repeat)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_benchmark(home: Path, out: Path, scales: list[str], tune_scale: str | None, repeat: int) -> None:
    import mlflow.pyfunc
    import torch

    from jobs.score import model_preprocessor, score_features
    from jobs.spark import get_spark

    host = machine()
    config = load_config()
    spec, batch_size = config.features, config.score.batch_size
    year = days_ending(LAST_DAY, (LAST_DAY - FIRST_DAY).days + 1)
    factors = {s: float(s[:-1]) for s in {*scales, tune_scale} if s and s.endswith("x")}
    one_day = {s: float(s[:-5]) for s in {*scales, tune_scale} if s and s.endswith("x-day")}

    setup: dict[str, float] = {}
    spark = get_spark("bench-scoring", SESSION)
    lake = feature_lake(spark, home, config, FIRST_DAY, year, setup)
    started = time.perf_counter()
    net, preprocessor, hyper, frame = train_model(spark, lake, config)
    ref, load_uri = log_model(net, preprocessor, hyper, frame, config.train.model_name)
    pre = model_preprocessor(load_uri)  # as the score job reads it
    setup["train_and_log_s"] = time.perf_counter() - started

    defined = {
        "day": Scale("day", "1 day", lake.features, [DAY]),
        "month": Scale("month", "1 month", lake.features, MONTH),
        "year": Scale("year", "full year", lake.features, None),
    }
    year_bytes = folder_bytes(lake.features)
    for key, factor in factors.items():
        needed = int(3 * factor * year_bytes) + (1 << 30)
        free = shutil.disk_usage(home).free
        if free < needed:
            raise SystemExit(f"{key} needs about {needed >> 20} MiB free under {home}, {free >> 20} MiB are")
        started = time.perf_counter()
        root = str(home / f"features-{key}")
        scale_up(lake.features, root, factor, spec.numeric, seed=config.train.seed)
        setup[f"generate_{key}_s"] = time.perf_counter() - started
        defined[key] = Scale(key, f"{key} year", root, None)
    for key, factor in one_day.items():
        started = time.perf_counter()
        spread = str(home / f"features-{factor:g}x")
        if f"{factor:g}x" not in factors:
            scale_up(lake.features, spread, factor, spec.numeric, seed=config.train.seed)
        root = str(home / f"features-{key}")
        one_partition(spread, root, DAY)
        if f"{factor:g}x" not in factors:
            shutil.rmtree(spread)
        setup[f"generate_{key}_s"] = time.perf_counter() - started
        defined[key] = Scale(key, f"{factor:g}x the year as 1 day", root, [DAY])

    # Fixed costs, in fresh processes, before this process loads anything into torch.
    job = {"root": lake.features, "day": DAY.isoformat(), "load_uri": load_uri, "batch_size": batch_size,
           "model": dataclasses.asdict(ref)}
    fixed = {
        "spark": run_probe("spark", {**job, "out": str(home / "probe-spark")}),
        "baseline": run_probe("baseline", {**job, "out": str(home / "probe-baseline")}),
    }

    model = mlflow.pyfunc.load_model(load_uri)  # the baseline's; sets torch to one thread, like each worker
    bench = Bench(repeat)

    def contenders(scale: Scale, bs: int = batch_size) -> list[Contender]:
        folder = home / "predictions" / scale.key

        def features() -> DataFrame:
            return spark.read.option("basePath", scale.root).parquet(*scale.spark_paths())

        def spark_action(build: Callable[[], DataFrame], path: Path) -> Callable[[], Callable[[], Any]]:
            def prepare() -> Callable[[], Any]:
                predictions = build()
                return lambda: write_predictions(predictions, str(path))
            return prepare

        def baseline_action(path: Path, direct: bool) -> Callable[[], Callable[[], Any]]:
            def prepare() -> Callable[[], Any]:
                dataset = arrow_dataset(scale)
                return lambda: baseline_score(dataset, model, spec, ref, scale.run_date, str(path), bs, direct=direct)
            return prepare

        return [
            Contender("spark", "spark (score job: inputs encoded by Spark)", True, spark_action(
                lambda: score_features(features(), spec, ref, load_uri, bs, scale.run_date, preprocessor=pre),
                folder / "spark"), str(folder / "spark")),
            Contender("raw", "spark, raw columns to the pyfunc", True, spark_action(
                lambda: score_features_raw(features(), spec, ref, load_uri, bs, scale.run_date),
                folder / "raw"), str(folder / "raw")),
            Contender("arrow", "spark mapInArrow, encoded inputs (experiment)", True, spark_action(
                lambda: score_features_arrow(features(), spec, pre, ref, load_uri, bs, scale.run_date),
                folder / "arrow"), str(folder / "arrow")),
            Contender("read_write", "spark read+write (no model)", False, spark_action(
                lambda: read_write_only(features(), spec, ref, scale.run_date), folder / "read_write"),
                str(folder / "read_write")),
            Contender("handoff", "spark read+write + no-op pandas UDF (no model)", True, spark_action(
                lambda: handoff_only(features(), spec, ref, scale.run_date), folder / "handoff"),
                str(folder / "handoff")),
            Contender("baseline", "baseline (pyarrow + torch)", False, baseline_action(folder / "baseline", False),
                      str(folder / "baseline")),
            Contender("direct", "baseline, torch direct", False, baseline_action(folder / "direct", True),
                      str(folder / "direct")),
        ]

    spark.conf.set(ARROW_BATCH, str(DEFAULT_ARROW_BATCH))
    day = spark.read.option("basePath", lake.features).parquet(lake.partition(lake.features, DAY))
    job_output = score_features(day, spec, ref, load_uri, batch_size, DAY, preprocessor=pre)
    same_columns(job_output, score_features_raw(day, spec, ref, load_uri, batch_size, DAY), "raw columns")
    same_columns(job_output, score_features_arrow(day, spec, pre, ref, load_uri, batch_size, DAY), "mapInArrow")
    same_columns(job_output, read_write_only(day, spec, ref, DAY), "read+write")
    same_columns(job_output, handoff_only(day, spec, ref, DAY), "the no-op UDF")
    results = []
    for key in scales:
        scale = defined[key]
        entrants = contenders(scale)
        runs = {key: times for (_, key), times in bench.measure(entrants).items()}
        features = spark.read.option("basePath", scale.root).parquet(*scale.spark_paths())
        diff, diff_rows = max_abs_difference(features, spec, pre, load_uri, batch_size)
        bench.last_udf = time.perf_counter()
        rows, reference, names = read_outputs(entrants[0].output)
        checks = {"raw_vs_job_max_abs_diff": diff, "raw_vs_job_rows": diff_rows}
        for c in entrants[1:]:
            n, probs, columns = read_outputs(c.output)
            if n != rows or columns != names:
                raise RuntimeError(f"{c.name} wrote {n} rows of {columns} at {scale.label}, the score job {rows} "
                                   f"of {names}")
            if c.key not in ("read_write", "handoff"):
                checks[f"{c.key}_vs_job_sorted_max_abs_diff"] = float(np.max(np.abs(probs - reference), initial=0.0))
        for name, value in checks.items():
            if name.endswith("max_abs_diff") and value > EQUAL_TOLERANCE:
                print(f"note: {name} = {value:.2e} at {scale.label}: the probabilities differ from the score job's")
        base = min(runs["baseline"])
        results.append({
            "scale": scale.label, "key": key, "rows": rows, "files": len(scale.files()), "checks": checks,
            "contenders": [{
                "key": c.key, "contender": c.name, "stage_s": round(min(runs[c.key]), 3),
                "rows_per_s": round(rows / min(runs[c.key])), "vs_baseline": round(min(runs[c.key]) / base, 2),
                "runs_s": [round(t, 3) for t in runs[c.key]],
            } for c in entrants],
        })
        shutil.rmtree(home / "predictions" / key, ignore_errors=True)

    tuning = []
    if tune_scale:
        scale = defined[tune_scale]
        arrow_batches = {n: lambda n=n: spark.conf.set(ARROW_BATCH, str(n)) for n in TUNE_ARROW_BATCHES}
        for bs in TUNE_BATCH_SIZES:  # one batch size at a time: a worker caches 3 models (predict_batch_udf's)
            entrants = [c for c in contenders(scale, bs) if c.key in TUNED]
            runs = bench.measure(entrants, arrow_batches)
            for c in entrants:
                for n in TUNE_ARROW_BATCHES:
                    times = runs[n, c.key]
                    tuning.append({"contender": c.name, "key": c.key, "batch_size": bs, "arrow_batch": n,
                                   "stage_s": round(min(times), 3), "runs_s": [round(t, 3) for t in times]})
        shutil.rmtree(home / "predictions", ignore_errors=True)
        spark.conf.set(ARROW_BATCH, str(DEFAULT_ARROW_BATCH))
    spark.stop()

    settings = {"batch_size": batch_size, "arrow_batch": DEFAULT_ARROW_BATCH, "repeat": repeat, "scales": scales,
                "tune_scale": tune_scale, "year_features_mb": round(year_bytes / 2**20, 1),
                "model": dataclasses.asdict(ref), "hyper": hyper,
                "baseline_torch_threads": torch.get_num_threads(), "rewarmed_udf_runs": bench.rewarmed}
    report_tables(host, settings, setup, results, tuning, fixed)
    (out / "scoring.json").write_text(json.dumps(
        {"machine": host, "settings": settings, "setup_s": {k: round(v, 2) for k, v in setup.items()},
         "fixed_costs_s": fixed, "timings": results, "tuning": tuning}, indent=2))


def report_tables(host: dict[str, Any], settings: dict[str, Any], setup: dict[str, float],
                  results: list[dict[str, Any]], tuning: list[dict[str, Any]], fixed: dict[str, Any]) -> None:
    print(f"machine: {host['cpu_count']} CPUs, torch {host['torch']} ({host['torch_default_threads']} default "
          f"threads), pyspark {host['pyspark']}, pyarrow {host['pyarrow']}, Python {host['python']}")
    print(f"setup: {', '.join(f'{k} {v:.1f} s' for k, v in setup.items())}")
    print(f"stage time in a warm local[2] session, best of {settings['repeat']} after a warm-up; "
          f"score.batch_size {settings['batch_size']}, Arrow maxRecordsPerBatch {settings['arrow_batch']}; "
          f"baseline: one process, torch on {settings['baseline_torch_threads']} thread(s)")
    print()
    print("| scale | rows | files | contender | stage | rows/s | vs baseline |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        for c in r["contenders"]:
            print(f"| {r['scale']} | {r['rows']:,} | {r['files']} | {c['contender']} | {c['stage_s']:.2f} s | "
                  f"{c['rows_per_s']:,} | {c['vs_baseline']}x |")
    print()
    print("| scale | rows | score job / baseline | raw-column UDF / baseline | raw-column UDF / score job | "
          "mapInArrow / baseline | read+write / baseline | no-op UDF / baseline | "
          "max abs diff vs job: raw-column UDF, mapInArrow, baseline |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        c, k = {x["key"]: x for x in r["contenders"]}, r["checks"]
        print(f"| {r['scale']} | {r['rows']:,} | {c['spark']['vs_baseline']}x | {c['raw']['vs_baseline']}x | "
              f"{c['raw']['stage_s'] / c['spark']['stage_s']:.2f}x | {c['arrow']['vs_baseline']}x | "
              f"{c['read_write']['vs_baseline']}x | {c['handoff']['vs_baseline']}x | "
              f"{k['raw_vs_job_max_abs_diff']:.1e}, "
              f"{k['arrow_vs_job_sorted_max_abs_diff']:.1e} (sorted), {k['baseline_vs_job_sorted_max_abs_diff']:.1e} "
              "(sorted) |")
    if tuning:
        print()
        print(f"tuning at {settings['tune_scale']} (best of {settings['repeat']}):")
        print()
        print("| contender | score.batch_size | Arrow maxRecordsPerBatch | stage |")
        print("|---|---|---|---|")
        best = {k: min((t for t in tuning if t["key"] == k), key=lambda t: t["stage_s"]) for k in TUNED}
        for t in sorted(tuning, key=lambda t: (TUNED.index(t["key"]), t["batch_size"], t["arrow_batch"])):
            mark = " (best)" if t is best[t["key"]] else ""
            print(f"| {t['contender']} | {t['batch_size']} | {t['arrow_batch']} | {t['stage_s']:.2f} s{mark} |")
    s, b = fixed["spark"], fixed["baseline"]
    print()
    print("| fixed cost (fresh process, one day) | seconds |")
    print("|---|---|")
    for label, value in [
        ("spark: Python start (interpreter, benchmark module)", s["python_start_s"]),
        ("spark: imports (pyspark, jobs.score)", s["imports_s"]),
        ("spark: SparkSession getOrCreate (JVM, session)", s["session_start_s"]),
        ("spark: first action's JVM warm-up (read+write, first - warm)",
         s["first_read_write_s"] - s["warm_read_write_s"]),
        ("spark: Python worker start (first UDF - new UDF on warm workers)",
         s["first_udf_s"] - s["fresh_udf_warm_workers_s"]),
        ("spark: model load in warm workers (new UDF - warm UDF)", s["fresh_udf_warm_workers_s"] - s["warm_udf_s"]),
        ("spark: warm score of the day (best of 2)", s["warm_udf_s"]),
        ("spark: whole process (start to stop)", s["process_wall_s"]),
        ("baseline: Python start (interpreter, benchmark module)", b["python_start_s"]),
        ("baseline: imports (pyarrow, torch, mlflow)", b["imports_s"]),
        ("baseline: model load (mlflow.pyfunc.load_model)", b["model_load_s"]),
        ("baseline: first score of the day - warm", b["first_call_s"] - b["warm_call_s"]),
        ("baseline: warm score of the day (best of 2)", b["warm_call_s"]),
        ("baseline: whole process", b["process_wall_s"]),
    ]:
        print(f"| {label} | {value:.2f} |")


if __name__ == "__main__":
    main()

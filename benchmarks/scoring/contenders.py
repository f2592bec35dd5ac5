"""The scoring benchmark's contenders at one scale, side by side in one warm session: each built
(untimed), warmed up, then timed in turns; their outputs checked against the score job's."""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.harness import Turns
from benchmarks.scoring.baseline import arrow_dataset, baseline_score, read_outputs
from benchmarks.scoring.spark import (
    ARROW_BATCH,
    DEFAULT_ARROW_BATCH,
    handoff_only,
    max_abs_difference,
    mlflow_udf,
    read_write_only,
    score_features_arrow,
    score_features_mlflow,
    score_features_raw,
    write_predictions,
)
from jobs.config import FeatureSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from benchmarks.scoring.scales import Scale
    from jobs.tracking import ModelRef

TUNE_BATCH_SIZES = (1024, 4096, 16384)
TUNE_ARROW_BATCHES = (10000, 50000)
TUNED = ("spark", "raw", "arrow")
REWARM_AFTER_S = 45  # Spark stops Python workers idle for 60 s, and their cached models with them
EQUAL_TOLERANCE = 1e-6


@dataclasses.dataclass(frozen=True)
class Contender:
    """One way to score a scale; ``prepare`` builds its DataFrame or dataset (untimed) and returns
    the timed action, which writes to ``output``."""

    key: str
    name: str
    uses_udf: bool
    prepare: Callable[[], Callable[[], Any]]
    output: str


@dataclasses.dataclass(frozen=True)
class Fixture:
    """What every contender shares: the session, the model (resolved, its preprocessor, the loaded
    pyfunc for the baseline) and where outputs go."""

    spark: SparkSession
    home: Path
    spec: FeatureSpec
    ref: ModelRef
    load_uri: str
    pre: dict[str, Any]
    model: Any


class WarmWorkers(Turns[Contender]):
    """Turns that time each run and keep Spark's Python workers warm: a contender with a UDF is run
    again untimed first when more than REWARM_AFTER_S passed since the last UDF ran."""

    def __init__(self, repeat: int) -> None:
        super().__init__(repeat)
        self.last_udf = 0.0
        self.rewarmed = 0

    def warm_up(self, key: Contender, action: Callable[[], Any]) -> None:
        self._time(key, action)

    def run(self, key: Contender, action: Callable[[], Any]) -> float:
        if key.uses_udf and time.perf_counter() - self.last_udf > REWARM_AFTER_S:
            self.rewarmed += 1
            self._time(key, action)
        return self._time(key, action)

    def _time(self, contender: Contender, action: Callable[[], Any]) -> float:
        started = time.perf_counter()
        action()
        ended = time.perf_counter()
        if contender.uses_udf:
            self.last_udf = ended
        return ended - started


def contenders(fx: Fixture, scale: Scale, batch_size: int) -> list[Contender]:
    """The score job first, then the other Spark paths, the floors, and the two baselines."""
    from jobs.scoring.predictor import score_features

    spec, ref, uri, pre, day = fx.spec, fx.ref, fx.load_uri, fx.pre, scale.run_date
    folder = fx.home / "predictions" / scale.key

    def features() -> DataFrame:
        return fx.spark.read.option("basePath", scale.root).parquet(*scale.spark_paths())

    def spark(key: str, name: str, build: Callable[[], DataFrame], uses_udf: bool = True) -> Contender:
        def prepare() -> Callable[[], Any]:
            predictions = build()
            return lambda: write_predictions(predictions, str(folder / key))
        return Contender(key, name, uses_udf, prepare, str(folder / key))

    def baseline(key: str, name: str, direct: bool) -> Contender:
        def prepare() -> Callable[[], Any]:
            dataset = arrow_dataset(scale)
            return lambda: baseline_score(dataset, fx.model, spec, ref, day, str(folder / key), batch_size,
                                          direct=direct)
        return Contender(key, name, False, prepare, str(folder / key))

    return [
        spark("spark", "spark (score job: inputs encoded by Spark)",
              lambda: score_features(features(), spec, ref, uri, batch_size, day, preprocessor=pre)),
        spark("raw", "spark, raw columns to the pyfunc",
              lambda: score_features_raw(features(), spec, ref, uri, batch_size, day)),
        spark("mlflow_udf", "spark, mlflow.pyfunc.spark_udf (raw columns)",
              lambda: score_features_mlflow(features(), spec, ref, mlflow_udf(fx.spark, uri), day)),
        spark("arrow", "spark mapInArrow, encoded inputs (experiment)",
              lambda: score_features_arrow(features(), spec, pre, ref, uri, batch_size, day)),
        spark("read_write", "spark read+write (no model)", lambda: read_write_only(features(), spec, ref, day),
              uses_udf=False),
        spark("handoff", "spark read+write + no-op pandas UDF (no model)",
              lambda: handoff_only(features(), spec, ref, day)),
        baseline("baseline", "baseline (pyarrow + torch)", direct=False),
        baseline("direct", "baseline, torch direct", direct=True),
    ]


def measure_scale(fx: Fixture, turns: WarmWorkers, scale: Scale, batch_size: int) -> dict[str, Any]:
    """Every contender's runs at ``scale``, and the checks of their outputs against the score job's."""
    entrants = contenders(fx, scale, batch_size)
    runs = {c.key: times for c, times in turns.measure({c: c.prepare() for c in entrants}).items()}
    features = fx.spark.read.option("basePath", scale.root).parquet(*scale.spark_paths())
    diff, diff_rows = max_abs_difference(features, fx.spec, fx.pre, fx.load_uri, batch_size)
    turns.last_udf = time.perf_counter()
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
    shutil.rmtree(fx.home / "predictions" / scale.key, ignore_errors=True)
    return {
        "scale": scale.label, "key": scale.key, "rows": rows, "files": len(scale.files()), "checks": checks,
        "contenders": [{
            "key": c.key, "contender": c.name, "stage_s": round(min(runs[c.key]), 3),
            "rows_per_s": round(rows / min(runs[c.key])), "vs_baseline": round(min(runs[c.key]) / base, 2),
            "runs_s": [round(t, 3) for t in runs[c.key]],
        } for c in entrants],
    }


def tune(fx: Fixture, turns: WarmWorkers, scale: Scale) -> list[dict[str, Any]]:
    """The tuned contenders' runs at ``scale`` per ``score.batch_size`` x Arrow batch: the Arrow
    batches take turns (a session conf), the batch sizes one after the other (a worker caches 3
    models, predict_batch_udf's)."""
    arrow_batches = {n: lambda n=n: fx.spark.conf.set(ARROW_BATCH, str(n)) for n in TUNE_ARROW_BATCHES}
    tuning = []
    for bs in TUNE_BATCH_SIZES:
        entrants = [c for c in contenders(fx, scale, bs) if c.key in TUNED]
        runs = turns.measure_settings({c: c.prepare() for c in entrants}, arrow_batches)
        for c in entrants:
            for n in TUNE_ARROW_BATCHES:
                times = runs[n, c]
                tuning.append({"contender": c.name, "key": c.key, "batch_size": bs, "arrow_batch": n,
                               "stage_s": round(min(times), 3), "runs_s": [round(t, 3) for t in times]})
    shutil.rmtree(fx.home / "predictions", ignore_errors=True)
    fx.spark.conf.set(ARROW_BATCH, str(DEFAULT_ARROW_BATCH))
    return tuning

"""Benchmark stage: the score job against MLflow's ``mlflow.pyfunc.spark_udf`` and the single-process
baseline, on the same model version and the same features, at several sizes.

Run through ``python -m benchmarks.bench`` (``make bench``); its inputs are the features stage's
Spark outputs (one lake per size). A small model is trained on the smallest size's days
(:func:`benchmarks.scoring.model.registered_model`, under BENCH_MODEL so that it never becomes a
version of the pipeline's own model), logged, registered and resolved as the score job resolves it.
Contenders, in one warm local[2] session, each writing the score job's columns partitioned by date:

- ``spark (score job)``: :func:`jobs.scoring.predictor.score_features` with the model's preprocessor, as the job;
- ``spark, mlflow spark_udf``: the same output with the probability from ``mlflow.pyfunc.spark_udf``
  over the raw feature columns (what most users of Spark and MLflow write);
- ``baseline (pyarrow + torch)``: one process, :func:`benchmarks.scoring.baseline.baseline_score`.

Timing as in the scoring benchmark (:class:`benchmarks.scoring.contenders.WarmWorkers`: a warm-up,
then turns, best of ``repeat``). Checks: every contender writes the job's rows, and its sorted
probabilities equal the job's within 1e-6, or the stage fails. The issue's target: the job at least
TARGET_SPEEDUP x faster than spark_udf (at the largest size, measured).
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.features import summarize
from benchmarks.scoring.baseline import arrow_dataset, baseline_score, read_outputs
from benchmarks.scoring.contenders import EQUAL_TOLERANCE, Contender, WarmWorkers
from benchmarks.scoring.model import registered_model
from benchmarks.scoring.scales import Scale
from benchmarks.scoring.spark import mlflow_udf, score_features_mlflow, write_predictions
from jobs.lake.layout import Lake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.config import PipelineConfig

BENCH_MODEL = "bench_flight_delay"
TARGET_SPEEDUP = 1.5
JOB, UDF, BASELINE = "spark (score job)", "spark, mlflow spark_udf", "baseline (pyarrow + torch)"


def run_stage(spark: SparkSession, config: PipelineConfig, days: list[dt.date], lakes: list[str],
              home: Path, repeat: int) -> dict[str, Any]:
    """Every contender on each lake's features (one lake per size, smallest first)."""
    import mlflow.pyfunc

    from jobs.scoring.predictor import model_preprocessor, score_features

    spec, batch_size, run_date = config.features, config.score.batch_size, days[-1]
    _, _, ref, load_uri = registered_model(spark, Lake(lakes[0]), config, days, name=BENCH_MODEL)
    pre = model_preprocessor(load_uri)
    model = mlflow.pyfunc.load_model(load_uri)
    udf = mlflow_udf(spark, load_uri)
    turns = WarmWorkers(repeat)
    points = []
    for root in lakes:
        scale = Scale(Path(root).name, Path(root).name, Lake(root).features, None)
        features = spark.read.parquet(scale.root)
        out, dataset = home / "predictions" / scale.key, arrow_dataset(scale)
        entrants = [
            Contender("job", JOB, True, lambda f=features, o=str(out / "job"): lambda: write_predictions(
                score_features(f, spec, ref, load_uri, batch_size, run_date, preprocessor=pre), o), ""),
            Contender("udf", UDF, True, lambda f=features, o=str(out / "udf"): lambda: write_predictions(
                score_features_mlflow(f, spec, ref, udf, run_date), o), ""),
            Contender("baseline", BASELINE, False, lambda d=dataset, o=str(out / "baseline"): lambda: baseline_score(
                d, model, spec, ref, run_date, o, batch_size), ""),
        ]
        runs = {c.name: times for c, times in turns.measure({c: c.prepare() for c in entrants}).items()}
        rows, reference, names = read_outputs(str(out / "job"))
        for name, folder in ((UDF, "udf"), (BASELINE, "baseline")):
            n, probabilities, columns = read_outputs(str(out / folder))
            diff = float(np.max(np.abs(probabilities - reference), initial=0.0)) if n == rows else float("inf")
            if n != rows or columns != names or diff > EQUAL_TOLERANCE:
                raise RuntimeError(f"{name} at {scale.key}: {n} rows of {columns} (max abs diff {diff:.1e}); "
                                   f"the score job: {rows} of {names}")
        shutil.rmtree(out, ignore_errors=True)
        points.append({"factor": scale.key, "rows": rows, "seconds": {k: min(v) for k, v in runs.items()},
                       "runs_s": {k: [round(t, 3) for t in v] for k, v in runs.items()}, "outputs_equal": True})
    result = summarize("scoring", points, [JOB, UDF, BASELINE], JOB, {UDF: TARGET_SPEEDUP}, points[-1]["rows"],
                       faster=True)
    result["model"] = {"name": ref.name, "version": ref.version, "load_uri": load_uri}
    return result

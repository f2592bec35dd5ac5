"""Fixed costs, measured in fresh processes on one day's partition: what a scoring process pays
before its first row (Python start, imports, the session, the JVM's and the Python workers' warm-up,
the model load), for the Spark job and for the baseline.

The benchmark starts ``python -m benchmarks.scoring --probe JOB`` (:func:`run_probe`), which calls
:func:`probe` and prints its marks on a line of its own after :data:`PROBE_MARK`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import stopwatch
from benchmarks.scoring.baseline import arrow_dataset, baseline_score
from benchmarks.scoring.scales import Scale
from benchmarks.scoring.spark import SESSION, read_write_only, write_predictions
from jobs.config import load_config

REPO = Path(__file__).resolve().parents[2]
PROBE_MARK = "PROBE-RESULT "


def fixed_costs(job: dict[str, Any], home: Path) -> dict[str, dict[str, Any]]:
    """Both probes, one after the other, each writing under ``home``: ``spark`` and ``baseline``."""
    return {kind: run_probe(kind, {**job, "out": str(home / f"probe-{kind}")}) for kind in ("spark", "baseline")}


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

    if job["kind"] == "spark":
        with stopwatch(marks, "imports_s"):
            import pyspark.ml.functions  # noqa: F401
            import pyspark.sql  # noqa: F401

            from jobs.runtime.session import get_spark
            from jobs.scoring.predictor import score_features

        with stopwatch(marks, "session_start_s"):
            get_spark("bench-scoring-probe", SESSION)
        spark = get_spark("bench-scoring-probe", SESSION)
        features = spark.read.option("basePath", scale.root).parquet(*scale.spark_paths())
        plain = read_write_only(features, spec, ref, scale.run_date)
        for name in ("first_read_write_s", "warm_read_write_s"):
            with stopwatch(marks, name):
                write_predictions(plain, job["out"])
        first = score_features(features, spec, ref, job["load_uri"], job["batch_size"], scale.run_date)
        with stopwatch(marks, "first_udf_s"):
            write_predictions(first, job["out"])
        fresh = score_features(features, spec, ref, job["load_uri"], job["batch_size"], scale.run_date)
        for name in ("fresh_udf_warm_workers_s", "warm_udf_s", "warm_udf_again_s"):
            with stopwatch(marks, name):
                write_predictions(fresh, job["out"])
        marks["warm_udf_s"] = min(marks["warm_udf_s"], marks.pop("warm_udf_again_s"))
        with stopwatch(marks, "session_stop_s"):
            spark.stop()
    else:
        with stopwatch(marks, "imports_s"):
            import mlflow.pyfunc
            import pyarrow.dataset  # noqa: F401
            import torch  # noqa: F401

        with stopwatch(marks, "model_load_s"):
            model = mlflow.pyfunc.load_model(job["load_uri"])
        dataset = arrow_dataset(scale)
        for name in ("first_call_s", "warm_call_s", "warm_call_again_s"):
            with stopwatch(marks, name):
                baseline_score(dataset, model, spec, ref, scale.run_date, job["out"], job["batch_size"])
        marks["warm_call_s"] = min(marks["warm_call_s"], marks.pop("warm_call_again_s"))
    marks["in_process_s"] = time.time() - started
    return marks

"""``python -m benchmarks.scoring``: the scoring benchmark's CLI and run (see the package's docstring)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

import benchmarks.scoring
from benchmarks.common import feature_lake, machine, throwaway_home
from benchmarks.harness import arguments, start, stopwatch, write_results
from benchmarks.scaling import folder_bytes
from benchmarks.scoring.contenders import Fixture, WarmWorkers, measure_scale, tune
from benchmarks.scoring.model import registered_model
from benchmarks.scoring.probe import PROBE_MARK, fixed_costs, probe
from benchmarks.scoring.report import report_tables
from benchmarks.scoring.scales import DAY, define_scales, parse_scales
from benchmarks.scoring.spark import ARROW_BATCH, DEFAULT_ARROW_BATCH, SESSION, check_columns
from jobs.config import days_ending, load_config
from jobs.datasets.land_flights import FIRST_DAY, LAST_DAY


def main(argv: list[str] | None = None) -> None:
    parser = arguments(benchmarks.scoring.__doc__)
    parser.add_argument("--scales", default="day,month,year,3x-day,10x",
                        help="comma-separated: day, month, year, Nx (N times the year; a fraction such as "
                        "0.05x checks the generator quickly), Nx-day (N times the year as one day);\n"
                        "default: %(default)s")
    parser.add_argument("--tune-scale", default="year",
                        help="a scale to tune batch sizes at, or none (default: %(default)s)")
    parser.add_argument("--probe", default=None, help=argparse.SUPPRESS)  # a fresh process's fixed costs
    args = parser.parse_args(argv)
    if args.probe:
        print(PROBE_MARK + json.dumps(probe(json.loads(args.probe))), flush=True)
        return
    scales = parse_scales(args.scales)
    tune_scale = None if args.tune_scale == "none" else parse_scales(args.tune_scale)[0]
    out = start(args.out)

    home = throwaway_home("bench-scoring-")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers need this venv (torch, mlflow)
    try:
        run_benchmark(home, out, scales, tune_scale, args.repeat)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_benchmark(home: Path, out: Path, scales: list[str], tune_scale: str | None, repeat: int) -> None:
    """Set up (lake, model, scales), measure the fixed costs in fresh processes, then every scale and
    the tuning in one warm session; print the tables and write ``scoring.json``."""
    import mlflow.pyfunc
    import torch

    from jobs.runtime.session import get_spark
    from jobs.scoring.predictor import model_preprocessor

    host = machine()
    config = load_config()
    spec, batch_size = config.features, config.score.batch_size
    year = days_ending(LAST_DAY, (LAST_DAY - FIRST_DAY).days + 1)

    setup: dict[str, float] = {}
    spark = get_spark("bench-scoring", SESSION)
    lake = feature_lake(spark, home, config, FIRST_DAY, year, setup)
    with stopwatch(setup, "train_and_log_s"):
        _, hyper, ref, load_uri = registered_model(spark, lake, config)
        pre = model_preprocessor(load_uri)  # as the score job reads it
    year_bytes = folder_bytes(lake.features)
    keys = [key for key in dict.fromkeys([*scales, tune_scale]) if key]
    defined = define_scales(lake.features, home, keys, spec.numeric, config.train.seed, year_bytes, setup)

    # Fixed costs, in fresh processes, before this process loads anything into torch.
    fixed = fixed_costs({"root": lake.features, "day": DAY.isoformat(), "load_uri": load_uri,
                         "batch_size": batch_size, "model": dataclasses.asdict(ref)}, home)

    model = mlflow.pyfunc.load_model(load_uri)  # the baseline's; sets torch to one thread, like each worker
    fixture = Fixture(spark, home, spec, ref, load_uri, pre, model)
    turns = WarmWorkers(repeat)
    spark.conf.set(ARROW_BATCH, str(DEFAULT_ARROW_BATCH))
    day = spark.read.option("basePath", lake.features).parquet(lake.partition(lake.features, DAY))
    check_columns(day, spec, pre, ref, load_uri, batch_size, DAY)
    results = [measure_scale(fixture, turns, defined[key], batch_size) for key in scales]
    tuning = tune(fixture, turns, defined[tune_scale]) if tune_scale else []
    spark.stop()

    settings = {"batch_size": batch_size, "arrow_batch": DEFAULT_ARROW_BATCH, "repeat": repeat, "scales": scales,
                "tune_scale": tune_scale, "year_features_mb": round(year_bytes / 2**20, 1),
                "model": dataclasses.asdict(ref), "hyper": hyper,
                "baseline_torch_threads": torch.get_num_threads(), "rewarmed_udf_runs": turns.rewarmed}
    report_tables(host, settings, setup, results, tuning, fixed)
    write_results(out, "scoring", {"machine": host, "settings": settings,
                                   "setup_s": {k: round(v, 2) for k, v in setup.items()},
                                   "fixed_costs_s": fixed, "timings": results, "tuning": tuning})


if __name__ == "__main__":
    main()

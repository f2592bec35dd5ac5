"""What the training and scoring benchmarks share: a throw-away pipeline home, a lake with the
real example data landed, validated and turned into features, and a description of the machine."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import platform
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import stopwatch
from jobs.datasets.land_flights import land
from jobs.lake.layout import Lake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.config import PipelineConfig


REPO = Path(__file__).resolve().parents[1]


def pipeline_environment(home: Path) -> dict[str, str]:
    """This process's environment with the pipeline's settings (``AIRFLOW*``, ``MLFLOW*``,
    ``LAKE_*``, ``PIPELINE_*``) replaced by what ``scripts/env.sh`` sets for ``home`` (the tests'
    conftest and the nightly benchmark start from it)."""
    import subprocess

    prefixes = ("AIRFLOW", "MLFLOW", "LAKE_", "PIPELINE_")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    clean["PIPELINE_HOME"] = str(home)
    out = subprocess.run(["bash", "-c", f"source {REPO / 'scripts/env.sh'} && env -0"],
                         env=clean, check=True, capture_output=True, text=True).stdout
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def throwaway_home(prefix: str) -> Path:
    """A fresh PIPELINE_HOME with its own MLflow store, set in this process's environment (which
    rank and worker processes inherit)."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ.update({
        "PIPELINE_HOME": str(home), "MLFLOW_TRACKING_URI": f"sqlite:///{home}/mlflow.db",
        "PIPELINE_MLFLOW_ARTIFACTS": str(home / "mlartifacts"), "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
        "GX_ANALYTICS_ENABLED": "False",
    })
    return home


def feature_lake(
    spark: SparkSession, home: Path, config: PipelineConfig, first: dt.date, days: list[dt.date],
    setup: dict[str, float],
) -> Lake:
    """A lake under ``home`` with the raw data of ``first``..the last of ``days`` landed, and
    ``days`` validated (without GX) and turned into features; the seconds of each step go into
    ``setup`` (``land_s``, ``validate_s``, ``features_s``)."""
    from jobs.features.job import build_features, read_inputs, write_features
    from jobs.validation.job import validate

    no_gx = dataclasses.replace(config, validation=dataclasses.replace(config.validation, great_expectations=False))
    lake = Lake(str(home / "lake"))
    with stopwatch(setup, "land_s"):
        land(lake, first, days[-1])
    with stopwatch(setup, "validate_s"):
        report = validate(spark, lake, no_gx, days, days[0], "benchmark")
        assert report.success and report.written, report.summary()
    with stopwatch(setup, "features_s"):
        write_features(build_features(read_inputs(spark, lake, config, days), config, days), lake.features)
    return lake


def machine() -> dict[str, Any]:
    """Cores, platform, versions and the accelerator, for the benchmark's report."""
    import pyarrow
    import pyspark
    import torch

    cuda = torch.cuda.is_available()
    return {
        "cpu_count": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
        "torch": torch.__version__, "pyspark": pyspark.__version__, "pyarrow": pyarrow.__version__,
        "torch_default_threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(0) if cuda else "CPU only",
        "gpus": torch.cuda.device_count() if cuda else 0,
    }

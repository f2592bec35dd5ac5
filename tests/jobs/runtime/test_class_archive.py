"""Spark's class archive (``make class-archive``, which ``make test`` builds): the environment's
spark-submits start from it, and one that cannot use it runs as before, saying so. (The suite's
spark-submits also compile with C1 only: tests/jit.py.)"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from jobs.runtime.class_archive import default_path
from tests import jit

pytestmark = pytest.mark.e2e  # two spark-submits of their own

APP = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.getOrCreate()
print("rows:", spark.range(1000).count())
from tests.jit import tier
print("tier:", tier(spark.sparkContext._jvm))
spark.stop()
"""


def _submit(tmp_path: Path, options: str, *args: str) -> tuple[str, list[str]]:
    """spark-submit the tiny app with ``options`` as SPARK_SUBMIT_OPTS; its output and the
    JVM's class-loading log."""
    app, loaded = tmp_path / "app.py", tmp_path / "classes.log"
    app.write_text(APP)
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{options} -Xlog:class+load=info:file={loaded}",
           "PYTHONPATH": str(Path(__file__).resolve().parents[3])}  # the app imports tests.jit
    done = subprocess.run(["spark-submit", "--master", "local[1]", "--conf", "spark.ui.enabled=false", *args, str(app)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr, loaded.read_text().splitlines()


def test_spark_submits_map_spark_s_classes_from_the_archive_and_go_on_without_it(tmp_path):
    archive = default_path()
    assert archive.exists(), f"no {archive}: run `make class-archive` (make test does)"
    # scripts/env.sh's archive, then the suite's C1-only compiler (tests/conftest.py)
    assert os.environ["SPARK_SUBMIT_OPTS"] == f"-XX:SharedArchiveFile={archive} {jit.ONE_JOB}"

    output, classes = _submit(tmp_path, os.environ["SPARK_SUBMIT_OPTS"])
    assert "rows: 1000" in output and "tier: 1" in output
    mapped = [line for line in classes if line.endswith("source: shared objects file (top)")]
    spark = [line for line in mapped if " org.apache.spark." in line]
    assert len(mapped) > 8000 and len(spark) > 3000, (len(mapped), len(spark))  # Spark's own, not only the JDK's

    # a class path the archive was not built for (a jar put in front of Spark's): one warning, and
    # the job runs with its classes loaded from the jars
    (tmp_path / "first.jar").write_bytes(b"")
    output, classes = _submit(tmp_path, os.environ["SPARK_SUBMIT_OPTS"], "--driver-class-path",
                              str(tmp_path / "first.jar"))
    assert "rows: 1000" in output
    assert "Unable to use shared archive" in output
    assert not any(line.endswith("shared objects file (top)") for line in classes)

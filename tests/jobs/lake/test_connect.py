"""The jobs on a shared Spark Connect server (``PIPELINE_SPARK_REMOTE``), as Airflow runs them:
spark-submit, with the session on a real server started from pyspark's own spark-submit
(:mod:`jobs.lake.connect_server`). They write what a classic session writes, and start no driver."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.lake.layout import Lake, partition_name

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[3]
DAY = dt.date(2013, 1, 9)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def submit(job: str, lake: Lake, env: dict[str, str]) -> str:
    """spark-submit the ``job`` application (orchestration.spark_jobs.APPLICATIONS) for DAY on ``lake``;
    its output (fails the test on an error)."""
    from orchestration.spark_jobs import APPLICATIONS, JOBS_DIR

    done = subprocess.run(["spark-submit", "--master", "local[2]", str(JOBS_DIR / APPLICATIONS[job]),
                           "--run-date", DAY.isoformat(), "--lake-root", lake.root],
                          cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


def rows(folder: str, columns: list[str]) -> list[tuple]:
    table = pq.read_table(folder).to_pandas()[columns]
    return sorted(map(tuple, table.astype(str).to_numpy()))


def test_validate_and_features_on_a_spark_connect_server_write_what_a_classic_session_writes(
    spark, lake, config, tmp_path
):
    from jobs.features.job import build_features, read_inputs
    from jobs.lake.connect_server import start, stop

    port = free_port()
    server = start(port, log=tmp_path / "server.log", env=dict(os.environ))
    try:
        copy = Lake(str(tmp_path / "lake"))
        shutil.copytree(f"{lake.root}/raw", f"{copy.root}/raw")
        env = {**os.environ, "PIPELINE_SPARK_REMOTE": f"sc://127.0.0.1:{port}",
               "PIPELINE_TIMINGS_DIR": str(tmp_path / "timings")}
        outputs = [submit("validate", copy, env), submit("features", copy, env)]
    finally:
        stop(server)

    for output in outputs:  # the job's session was the server's: no SparkContext in the submit JVM
        assert "Running Spark version" not in output and "jobs.timings: timings:" in output
    assert "Running Spark version" in (tmp_path / "server.log").read_text()
    timings = [json.loads(p.read_text()) for p in (tmp_path / "timings").glob("*.json")]
    assert {t["job"] for t in timings} == {"validation", "features"}

    flights = list(config.tables["flights"].columns)
    part = partition_name(DAY)
    assert rows(f"{copy.validated('flights')}/{part}", flights) == rows(f"{lake.validated('flights')}/{part}", flights)
    classic = build_features(read_inputs(spark, lake, config, [DAY]), config).toPandas()
    columns = [c for c in classic.columns if c != "date"]
    connect = pq.read_table(f"{copy.features}/{part}").to_pandas()
    assert sorted(map(tuple, connect[columns].astype(str).to_numpy())) == \
        sorted(map(tuple, classic[columns].astype(str).to_numpy()))

"""How a job ends when it fails: the message first, in one line; a data problem (a DataError, a
file in a zone that is not Parquet) as exit 65, never retried; anything else exit 1, retried."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.errors import DATA_ERROR_EXIT, data_problem

REPO = Path(__file__).resolve().parents[2]

FAILING_JOB = """
from jobs.runner import run_job
from jobs.lake.spark import configure_logging

def main():
    configure_logging()
    def connect():
        raise ConnectionError("API request to http://127.0.0.1:5000/api/2.0/mlflow/runs/create failed: "
                              "Max retries exceeded\\n  (a second line of detail)")
    def start():
        try:
            connect()
        except ConnectionError as err:
            raise RuntimeError("the tracking server is unreachable\\njava.lang.Exception: stack") from err
    start()

run_job(main)
"""


def _run(script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, **env})


def test_a_fault_ends_with_its_message_in_one_line_and_the_traceback_only_at_debug_level():
    done = _run(FAILING_JOB, PIPELINE_LOG_LEVEL="INFO")
    assert done.returncode == 1  # a fault: Airflow retries it
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and "java.lang.Exception" not in done.stderr
    assert lines[-1].endswith("failed (a fault: Airflow retries the task): RuntimeError: the tracking server is "
                              "unreachable (the traceback: PIPELINE_LOG_LEVEL=DEBUG)"), lines
    debug = _run(FAILING_JOB, PIPELINE_LOG_LEVEL="DEBUG")
    assert debug.returncode == 1
    assert debug.stderr.index("RuntimeError: the tracking server is unreachable (") < debug.stderr.index("Traceback")
    assert "ConnectionError: API request" in debug.stderr  # the cause, in the traceback


def test_a_file_that_is_not_parquet_in_a_zone_is_a_data_error_naming_it(spark, tmp_path):
    zone = tmp_path / "features" / "date=2013-01-02"
    zone.mkdir(parents=True)
    spark.createDataFrame([(1,)], "x int").write.parquet(str(zone / "good"))
    stray = zone / "good" / "part-99999.parquet"
    stray.write_text("carrier,flight\nUA,1\n")  # a CSV dropped among the data files
    with pytest.raises(Exception) as failed:
        spark.read.parquet(str(zone / "good")).collect()
    problem = data_problem(failed.value)
    assert problem is not None and str(stray) in problem and "move the file out of the lake" in problem, problem
    assert data_problem(RuntimeError("a lost executor")) is None

    job = ("import sys\nfrom jobs.runner import run_job\nfrom jobs.lake.spark import configure_logging\n"
           "class Py4JJavaError(Exception): pass\n"
           "def main():\n    configure_logging()\n"
           f"    raise Py4JJavaError({str(failed.value)!r})\nrun_job(main)\n")
    error_file = tmp_path / "error.txt"
    done = _run(job, PIPELINE_ERROR_FILE=str(error_file))
    assert done.returncode == DATA_ERROR_EXIT, done.stderr[-2000:]  # not retried
    assert error_file.read_text() == problem  # what the Airflow task's failure says
    assert done.stderr.strip().splitlines()[-1].endswith(f"data error (not retried): {problem}")


def test_a_java_exception_through_py4j_is_told_by_its_own_message_not_by_the_method_called(spark):
    """A Py4JJavaError's first line only names the JVM method called ("An error occurred while
    calling o303.collectToPython."): the one line a failed job logs is the Java exception's message
    (a lost worker's training said nothing more than that before)."""
    from py4j.protocol import Py4JJavaError

    from jobs.errors import headline

    with pytest.raises(Py4JJavaError) as failed:
        spark._jvm.java.lang.Class.forName("no.such.Job")
    assert str(failed.value).startswith("An error occurred while calling")
    assert headline(failed.value) == "Py4JJavaError: ClassNotFoundException: no.such.Job"
    assert headline(RuntimeError("first line\nsecond")) == "RuntimeError: first line"  # others as before

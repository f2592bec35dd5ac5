"""How a job ends when it fails: the message first, in one line; a data problem (a DataError, a
file in a zone that is not Parquet) as exit 65, never retried; anything else exit 1, retried."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.errors import DATA_ERROR_EXIT, data_problem

REPO = Path(__file__).resolve().parents[2]

FAILING_JOB = """
from jobs.runner import run_job
from jobs.runtime.session import configure_logging

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

    job = ("import sys\nfrom jobs.runner import run_job\nfrom jobs.runtime.session import configure_logging\n"
           "class Py4JJavaError(Exception): pass\n"
           "def main():\n    configure_logging()\n"
           f"    raise Py4JJavaError({str(failed.value)!r})\nrun_job(main)\n")
    error_file = tmp_path / "error.txt"
    done = _run(job, PIPELINE_ERROR_FILE=str(error_file))
    assert done.returncode == DATA_ERROR_EXIT, done.stderr[-2000:]  # not retried
    assert error_file.read_text() == problem  # what the Airflow task's failure says
    assert done.stderr.strip().splitlines()[-1].endswith(f"data error (not retried): {problem}")


def test_a_dag_s_job_opens_its_failure_line_with_its_pipeline_and_day(monkeypatch):
    """Started by a DAG (``$PIPELINE_NAME``) with ``--run-date``, a job's last line says whose failure
    it is; the Airflow task's message says it too (orchestration.spark_jobs)."""
    from jobs.runner import whose
    from orchestration.spark_jobs import PipelineSparkSubmitOperator

    job = ("import sys\nfrom jobs.runner import run_job\nfrom jobs.errors import DataError\n"
           "sys.argv = ['job.py', '--run-date', '2013-01-02']\n"
           "def main():\n    raise DataError('no raw flights for 2013-01-02: land the day first')\nrun_job(main)\n")
    done = _run(job, PIPELINE_NAME="flights")
    assert done.returncode == DATA_ERROR_EXIT, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].endswith(
        "pipeline flights, day 2013-01-02: data error (not retried): DataError: no raw flights for 2013-01-02: "
        "land the day first")
    monkeypatch.delenv("PIPELINE_NAME", raising=False)
    assert whose(["job.py"]) == "" and whose(["job.py", "--run-date"]) == ""  # by hand: nothing to say
    monkeypatch.setenv("PIPELINE_NAME", "rivals")
    assert whose(["job.py", "--run-date", "2013-01-02"]) == "pipeline rivals, day 2013-01-02: "
    task = PipelineSparkSubmitOperator(task_id="validate_raw", application="job.py", pipeline_name="rivals",
                                       pipeline_source="pipelines/rivals",
                                       application_args=["--run-date", "2013-01-02"])
    assert task._whose() == "pipeline rivals, validate_raw for 2013-01-02: "


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


# What a line of a stack trace looks like: Python's (its header, a frame, the frame's code) or Java's.
TRACE_LINE = re.compile(r'^(Traceback \(most recent call last\):|\s+File "|\s+at |Caused by: |\s+\.\.\. \d+ more)')
SCREENFUL = 25


def trace_lines(text: str) -> int:
    return sum(bool(TRACE_LINE.match(line)) for line in text.splitlines())


@pytest.mark.slow
def test_a_real_job_on_a_missing_partition_ends_with_its_one_line_the_traceback_only_at_debug_level(tmp_path):
    """The features job on a lake without the day's validated partition: exit 65, the last line of
    stderr says what is missing and what to do, no traceback; PIPELINE_LOG_LEVEL=DEBUG adds it."""
    job = [sys.executable, "-m", "jobs.features.job", "--run-date", "2013-01-02", "--lake-root", str(tmp_path)]
    said = ("data error (not retried): MissingPartitionError: no validated partition of 'flights' for 2013-01-02 "
            f"under {tmp_path}/validated/flights: run the validate job for those days first")
    env = {**os.environ, "PIPELINE_LOG_LEVEL": "INFO"}
    done = subprocess.run(job, capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert done.returncode == DATA_ERROR_EXIT, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1].endswith(said), done.stderr[-3000:]
    assert trace_lines(done.stdout + done.stderr) == 0, done.stderr
    debug = subprocess.run(job, capture_output=True, text=True, timeout=300, cwd=REPO,
                           env={**env, "PIPELINE_LOG_LEVEL": "DEBUG"})
    assert debug.returncode == DATA_ERROR_EXIT
    assert debug.stderr.index(said) < debug.stderr.index("Traceback (most recent call last):")
    assert "jobs.lake.files.MissingPartitionError" in debug.stderr  # the traceback's last line


FAILING_TASK_JOB = """
from jobs.runner import run_job
from jobs.runtime.session import configure_logging, get_spark

def main():
    configure_logging()
    spark = get_spark("failing-task")
    from pyspark.sql import functions as F

    @F.udf("int")
    def broken(x):
        raise ValueError(f"bad value {x}")

    spark.range(4).repartition(2).select(broken("id")).collect()

run_job(main)
"""


def test_a_failed_spark_task_leaves_no_screens_of_java_stack_at_the_default_level():
    """A UDF that raises: Spark's executor and task-set manager logged every failed task with its
    Java stack (130 lines for two tasks); the log now holds at most a screenful of trace and ends
    with the worker's own exception in one line."""
    done = _run(FAILING_TASK_JOB, PIPELINE_LOG_LEVEL="INFO")
    assert done.returncode == 1, done.stderr[-3000:]
    assert trace_lines(done.stdout + done.stderr) <= SCREENFUL, done.stderr
    assert "org.apache.spark.executor.Executor" not in done.stderr and "\tat org.apache" not in done.stderr
    assert "[Stage " not in done.stderr  # no console progress bar where stderr is not a terminal
    last = done.stderr.strip().splitlines()[-1]
    assert re.search(r"failed \(a fault: Airflow retries the task\): PythonException: An exception was thrown "
                     r"from the Python worker: ValueError: bad value \d \(the traceback: PIPELINE_LOG_LEVEL=DEBUG\)$",
                     last), last


def test_a_data_error_of_several_lines_gives_its_details_first_and_ends_with_its_first_line(tmp_path):
    job = ("from jobs.errors import DataError\nfrom jobs.runner import run_job\n"
           "from jobs.runtime.session import configure_logging\n"
           "def main():\n    configure_logging()\n"
           "    raise DataError('3 checks failed; nothing was written; full report: r.html\\n  - one\\n  - two')\n"
           "run_job(main)\n")
    error_file = tmp_path / "error.txt"
    done = _run(job, PIPELINE_ERROR_FILE=str(error_file), PIPELINE_LOG_LEVEL="INFO")
    assert done.returncode == DATA_ERROR_EXIT, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert lines[-3:-1] == ["  - one", "  - two"], lines
    assert lines[-1].endswith("data error (not retried): DataError: 3 checks failed; nothing was written; "
                              "full report: r.html (in detail above)"), lines
    assert error_file.read_text().endswith("full report: r.html\n  - one\n  - two")  # all of it, for Airflow


def test_a_python_workers_exception_is_told_by_the_line_its_traceback_ends_with():
    from jobs.errors import headline

    class PythonException(Exception):
        pass

    err = PythonException("An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
                          '  File "job.py", line 3, in f\n    raise ValueError(x)\nValueError: bad value 3\n'
                          " SQLSTATE: 38000")
    assert headline(err) == ("PythonException: An exception was thrown from the Python worker: "
                             "ValueError: bad value 3")


FAILING_RANK_JOB = """
from jobs.runner import run_job
from jobs.runtime.session import configure_logging, get_spark
from jobs.training.driver import ranks_output_until_a_failure

def rank():
    raise ValueError("the rank's own failure")

def main():
    configure_logging()
    get_spark("failing-rank")
    from jobs.training.launcher import LeanTorchDistributor

    with ranks_output_until_a_failure():  # as the train job runs its ranks
        LeanTorchDistributor(num_processes=1, local_mode=True, use_gpu=False).run(rank)

run_job(main)
"""


@pytest.mark.slow
def test_a_failed_training_rank_leaves_no_screens_of_torchrun_output_below_debug_level():
    """A rank that raises: its traceback, torchrun's and torchrun's failure table (40 lines and
    more) are held back and counted in one line; PIPELINE_LOG_LEVEL=DEBUG shows them."""
    done = _run(FAILING_RANK_JOB, PIPELINE_LOG_LEVEL="INFO")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert trace_lines(output) <= SCREENFUL and "ChildFailedError" not in output, output
    assert re.search(r"\(\d+ lines of the ranks' output from their first traceback on held back: "
                     r"PIPELINE_LOG_LEVEL=DEBUG shows them\)", done.stdout), done.stdout
    assert "failed (a fault: Airflow retries the task): RuntimeError: " in done.stderr.strip().splitlines()[-1]
    debug = _run(FAILING_RANK_JOB, PIPELINE_LOG_LEVEL="DEBUG")
    assert "ValueError: the rank's own failure" in debug.stdout + debug.stderr

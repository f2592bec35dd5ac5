"""The one place that builds a SparkSession: the settings every job's session has, Spark's
console and log output, and the session released as a job ends.

With ``PIPELINE_SPARK_REMOTE`` set (``sc://host:15002``), a job's session is a Spark Connect
session on that long-running server instead of a new driver in the spark-submit JVM: the task is
still a spark-submit from Airflow, but no SparkContext starts and the server's JVM is already warm
(``python -m jobs.runtime.connect_server`` runs one). The lake's file helpers
(:mod:`jobs.lake.files`) then go through pyarrow instead of the driver's Hadoop FileSystem, which a
Connect client cannot reach.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


REMOTE_ENV = "PIPELINE_SPARK_REMOTE"
LOG_LEVEL_ENV = "PIPELINE_LOG_LEVEL"  # DEBUG: a failed job's traceback, and Spark's task failures, in full
CONSOLE_PROGRESS_ENV = "PIPELINE_CONSOLE_PROGRESS"

# Settings every job needs whatever the cluster: predictable output partitioning for small
# daily data, and overwrite of only the partitions a job writes (retries and backfills are
# idempotent). Anything else (master, memory, resources) comes from spark-submit.
SESSION_CONF = {
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Off: pyspark would otherwise record the Python call site of every column function in the JVM
    # (three py4j round trips each, for error messages' DataFrame context); a day's validation
    # builds about a thousand of them, and spends a tenth of its time on this.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    # Whole-stage code generation only where the generated method stays small enough for HotSpot
    # to compile (its HugeMethodLimit, 8000 bytes of bytecode: Spark's docs advise this value);
    # above it the JVM interprets the method row by row. The pipeline's wide projections pass it:
    # the baselines' design rows (200-odd columns) build several times faster with it
    # (docs/studies/2026-11-28-a-windows-model-selection-profiled.md).
    "spark.sql.codegen.hugeMethodLimit": "8000",
}

# What a driver keeps of its finished queries, jobs and stages for the UI and the status API.
# Spark keeps a thousand of each by default, with every query's plan and per-task metric values: a
# long-lived driver (the tests' session, the shared Connect server) filled its 1 GiB heap with them
# once the history features' plans grew (GC thrashing, no error). Static settings: they are given
# when a driver starts (get_spark's classic sessions, jobs.runtime.connect_server), never on a session.
DRIVER_CONF = {
    "spark.sql.ui.retainedExecutions": "50",
    "spark.ui.retainedJobs": "200",
    "spark.ui.retainedStages": "200",
}


def get_spark(app_name: str, extra_conf: dict[str, str] | None = None, connect: bool = False) -> SparkSession:
    """Get or create the session; under spark-submit the master and resources come from there.
    With ``connect`` and ``PIPELINE_SPARK_REMOTE`` set, a Spark Connect session on that server (see
    above), the SQL settings set on the session. (Training and the MLlib baselines stay classic:
    TorchDistributor starts its ranks from a driver of its own.)"""
    from jobs.timings import phase

    settings = {**SESSION_CONF, **(extra_conf or {})}
    with phase("spark session"):
        if connect and (remote := os.environ.get(REMOTE_ENV)):
            # The Connect builder itself: pyspark's refuses a remote when spark-submit set a master.
            from pyspark.sql.connect.session import SparkSession as ConnectSession

            os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"  # pyspark.sql.functions build Connect columns
            spark = ConnectSession.builder.remote(remote).appName(app_name).getOrCreate()
            for key, value in settings.items():
                if key.startswith("spark.sql."):  # the server's own settings (master...) stay its own
                    spark.conf.set(key, value)
            return spark  # type: ignore[return-value]
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.appName(app_name)
        for key, value in {**DRIVER_CONF, **console_conf(), **settings}.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
        if os.environ.get(LOG_LEVEL_ENV, "INFO").upper() != "DEBUG":
            quiet_task_failures(spark)
    return spark


def console_conf() -> dict[str, str]:
    """Spark's console progress bar off when ``PIPELINE_CONSOLE_PROGRESS`` is ``0`` (the replay
    sets it: its console shows its own progress lines) or stderr is not a terminal (a log file, a
    test's captured output: the bar's carriage returns only garble the lines around them). A driver
    that pyspark starts itself (the replay, a job run by hand, the tests) draws the bar; spark-submit's do not."""
    if os.environ.get(CONSOLE_PROGRESS_ENV, "1") == "0" or not sys.stderr.isatty():
        return {"spark.ui.showConsoleProgress": "false"}
    return {}


def quiet_task_failures(spark: SparkSession) -> None:
    """Keep a failed task's Java stack traces out of the log below ``PIPELINE_LOG_LEVEL=DEBUG``:
    Spark's executor and task-set manager log each failed task with its whole stack (50 lines and
    more a task, once per task and retry), where the job's own last line already says what failed
    (:func:`jobs.runner.run_job`). The task-set manager's one-line errors ("Task 0 in stage 3.0
    failed 4 times; aborting job") stay."""
    jvm = spark._jvm  # noqa: SLF001 - log4j's levels are only reachable this way
    levels, configurator = jvm.org.apache.logging.log4j.Level, jvm.org.apache.logging.log4j.core.config.Configurator
    configurator.setLevel("org.apache.spark.executor.Executor", levels.OFF)
    configurator.setLevel("org.apache.spark.scheduler.TaskSetManager", levels.ERROR)


@contextmanager
def without_whole_stage_codegen(spark: SparkSession) -> Iterator[None]:
    """The queries run in the block are interpreted, not compiled to Java: for a query whose
    generated method would pass the JVM's 64 KB limit (a case expression per bin of 80 columns and
    more), which Spark finds out only after spending seconds compiling it, then logs as an ERROR
    with a stack trace of a hundred lines before it falls back to the same interpretation."""
    key = "spark.sql.codegen.wholeStage"
    saved = spark.conf.get(key, "true")
    spark.conf.set(key, "false")
    try:
        yield
    finally:
        spark.conf.set(key, saved)


def is_remote(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def local_mode(spark: SparkSession) -> bool:
    """Whether the session's executors are its driver's own process (``local[...]``), a classic
    session's or a Spark Connect server's."""
    return str(spark.conf.get("spark.master", "")).startswith("local")


def configure_logging() -> None:
    """Log lines with a time and a source, at ``PIPELINE_LOG_LEVEL`` (default INFO); stdout
    line-buffered so a task log streams as it happens."""
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    level = os.environ.get(LOG_LEVEL_ENV, "INFO").upper()  # DEBUG: a failed job's traceback too
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("great_expectations", "py4j", "mlflow.utils", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def release_session() -> None:
    """End this process's Spark Connect session, if it has one: the server frees what the session
    holds (its state, cached plans, results) now instead of after its idle timeout. Without this, a
    backfill's jobs left hundreds of sessions on a shared server, which ran out of heap. Classic
    sessions end with their process."""
    if os.environ.get("SPARK_CONNECT_MODE_ENABLED") != "1":
        return
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = ConnectSession.getActiveSession()
    if session is not None:
        session.stop()

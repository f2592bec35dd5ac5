"""The one place that builds a SparkSession, and the lake reads every job shares."""

from __future__ import annotations

import datetime as dt
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.errors import DataError
from jobs.lake import partition_day

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


log = logging.getLogger(__name__)

# Settings every job needs whatever the cluster: predictable output partitioning for small
# daily data, and overwrite of only the partitions a job writes (retries and backfills are
# idempotent). Anything else (master, memory, resources) comes from spark-submit.
SESSION_CONF = {
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
}


def get_spark(app_name: str, extra_conf: dict[str, str] | None = None) -> SparkSession:
    """Get or create the session; under spark-submit the master and resources come from there."""
    from jobs.timings import phase

    with phase("spark session"):
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.appName(app_name)
        for key, value in {**SESSION_CONF, **(extra_conf or {})}.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
    return spark


GPU_DISCOVERY_SCRIPT = str(Path(__file__).resolve().with_name("gpu_discovery.sh"))


def gpu_conf(local_mode: bool, gpus: int, discovery_script: str = GPU_DISCOVERY_SCRIPT) -> dict[str, str]:
    """The resource settings TorchDistributor needs to put one rank on each GPU.

    ``local_mode``: the ranks run on the driver, which must own ``gpus`` GPUs (Spark's local master
    cannot schedule GPUs to tasks). Otherwise each executor owns ``gpus`` GPUs and each barrier task
    (one rank) takes one; a standalone worker must advertise its GPUs too (see the script).
    """
    if gpus < 1:
        raise ValueError(f"GPU training needs at least one GPU, got {gpus}")
    if local_mode:
        return {
            "spark.driver.resource.gpu.amount": str(gpus),
            "spark.driver.resource.gpu.discoveryScript": discovery_script,
        }
    return {
        "spark.executor.resource.gpu.amount": str(gpus),
        "spark.executor.resource.gpu.discoveryScript": discovery_script,
        "spark.task.resource.gpu.amount": "1",
    }


def configure_logging() -> None:
    """Log lines with a time and a source; stdout line-buffered so a task log streams as it happens."""
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("great_expectations", "py4j", "mlflow.utils", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class MissingPartitionError(DataError, FileNotFoundError):
    """A raw partition that a run needs is not in the lake."""


def hadoop_fs(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """(Hadoop FileSystem, Hadoop Path) for ``path``: any lake URI works the same way."""
    jvm = spark._jvm  # noqa: SLF001 - the Hadoop FileSystem API is only reachable this way
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(spark._jsc.hadoopConfiguration()), hpath  # noqa: SLF001


def path_exists(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` exists."""
    fs, hpath = hadoop_fs(spark, path)
    return bool(fs.exists(hpath))


def list_partitions(spark: SparkSession, path: str) -> list[dt.date]:
    """The ``date=YYYY-MM-DD`` partitions under ``path`` (none if it does not exist), oldest first."""
    fs, hpath = hadoop_fs(spark, path)
    if not fs.exists(hpath):
        return []
    days = [partition_day(status.getPath().getName()) for status in fs.listStatus(hpath) if status.isDirectory()]
    return sorted(day for day in days if day is not None)


def delete_path(spark: SparkSession, path: str) -> bool:
    """Delete a file or folder (recursively); whether there was one."""
    fs, hpath = hadoop_fs(spark, path)
    return bool(fs.delete(hpath, True))

"""The one place that builds a SparkSession, and the lake reads every job shares."""

from __future__ import annotations

import datetime as dt
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.lake import PARTITION, partition_day

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.config import TableSpec
    from jobs.lake import Lake

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


class MissingPartitionError(FileNotFoundError):
    """A raw partition that a run needs is not in the lake."""


def _hadoop(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """(Hadoop FileSystem, Hadoop Path) for ``path``: any lake URI works the same way."""
    jvm = spark._jvm  # noqa: SLF001 - the Hadoop FileSystem API is only reachable this way
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(spark._jsc.hadoopConfiguration()), hpath  # noqa: SLF001


def path_exists(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` exists."""
    fs, hpath = _hadoop(spark, path)
    return bool(fs.exists(hpath))


def raw_paths(spark: SparkSession, lake: Lake, table: TableSpec, days: list[dt.date] | None) -> dict[str, str]:
    """The raw files to read, keyed by partition (the day, or ``snapshot`` for a reference table).

    A missing partition of a required table is an error; of an optional one, a warning.
    """
    if not table.daily:
        path = lake.raw_file(table.name)
        if not path_exists(spark, path):
            raise MissingPartitionError(f"raw table {table.name!r} not found: expected {path}")
        return {"snapshot": path}
    if not days:
        raise ValueError(f"daily table {table.name!r} needs the days to read")
    found = {}
    for day in days:
        path = lake.raw_file(table.name, day)
        if path_exists(spark, path):
            found[day.isoformat()] = path
        elif table.required:
            raise MissingPartitionError(
                f"no raw partition of {table.name!r} for {day}: expected {path} "
                "(land the day's data first, e.g. `python -m jobs.land`)"
            )
        else:
            log.warning("no raw partition of optional table %r for %s (%s): nothing to read", table.name, day, path)
    return found


CORRUPT_RECORD = "_corrupt_record"


def read_raw_strings(
    spark: SparkSession,
    lake: Lake,
    table: TableSpec,
    paths: list[str],
    snapshot_date: dt.date,
    csv_options: dict[str, str] | None = None,
) -> DataFrame:
    """Read raw CSV files keeping every value as the text it is, so no row is lost to parsing.

    Every declared column is a string; a line with too few or too many fields keeps its text in
    ``_corrupt_record``. Daily tables get ``date`` from their partition folder, reference tables
    the snapshot date. Columns are matched by position: check the header first (:func:`read_header`).
    """
    from pyspark.sql import functions as F

    schema = ", ".join([*(f"`{c}` string" for c in table.columns), f"`{CORRUPT_RECORD}` string"])
    options = {
        **(csv_options or {}),
        "header": "true",
        "enforceSchema": "true",
        "mode": "PERMISSIVE",
        "columnNameOfCorruptRecord": CORRUPT_RECORD,
    }
    reader = spark.read.options(**options).schema(schema)
    if table.daily:
        return reader.option("basePath", lake.raw_table(table.name)).csv(paths)
    return reader.csv(paths).withColumn(PARTITION, F.lit(snapshot_date))


def read_header(spark: SparkSession, path: str) -> list[str] | None:
    """The column names in a CSV file's first line (``None`` for an empty file), read on the driver."""
    import csv

    fs, hpath = _hadoop(spark, path)
    jvm = spark._jvm  # noqa: SLF001
    reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(fs.open(hpath), "UTF-8"))
    try:
        line = reader.readLine()
    finally:
        reader.close()
    if line is None:
        return None
    return next(csv.reader([line.removeprefix("\ufeff")]), [])


def list_partitions(spark: SparkSession, path: str) -> list[dt.date]:
    """The ``date=YYYY-MM-DD`` partitions under ``path`` (none if it does not exist), oldest first."""
    fs, hpath = _hadoop(spark, path)
    if not fs.exists(hpath):
        return []
    days = [partition_day(status.getPath().getName()) for status in fs.listStatus(hpath) if status.isDirectory()]
    return sorted(day for day in days if day is not None)


def delete_path(spark: SparkSession, path: str) -> bool:
    """Delete a file or folder (recursively); whether there was one."""
    fs, hpath = _hadoop(spark, path)
    return bool(fs.delete(hpath, True))


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Write a small text file (a report) atomically: a temporary file, then a rename over ``path``."""
    fs, target = _hadoop(spark, path)
    tmp = spark._jvm.org.apache.hadoop.fs.Path(target.getParent(), f".{target.getName()}.tmp")  # noqa: SLF001
    fs.mkdirs(target.getParent())
    stream = fs.create(tmp, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()
    if fs.exists(target):
        fs.delete(target, False)
    if not fs.rename(tmp, target):
        raise OSError(f"could not move {tmp} to {path}")

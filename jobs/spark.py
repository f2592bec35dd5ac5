"""The one place that builds a SparkSession, and the lake reads every job shares."""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.config import Lake, TableSpec

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


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("great_expectations", "py4j", "mlflow.utils", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class MissingPartitionError(FileNotFoundError):
    """A raw partition that a run needs is not in the lake."""


def path_exists(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` exists, through Hadoop's FileSystem so any lake URI works."""
    jvm = spark._jvm  # noqa: SLF001 - the Hadoop FileSystem API is only reachable this way
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(spark._jsc.hadoopConfiguration()).exists(hpath)  # noqa: SLF001


def read_raw(
    spark: SparkSession,
    lake: Lake,
    table: TableSpec,
    days: list[dt.date] | None = None,
    csv_options: dict[str, str] | None = None,
) -> DataFrame:
    """Read a raw CSV table with its declared schema; daily tables gain a ``date`` column.

    The header must name the declared columns in order (``enforceSchema=false``) and a value that
    does not parse fails the read (``FAILFAST``): no row is turned into nulls silently.
    """
    from pyspark.sql import functions as F

    options = {**(csv_options or {}), "header": "true", "enforceSchema": "false", "mode": "FAILFAST"}
    reader = spark.read.options(**options).schema(table.ddl())
    if not table.daily:
        path = lake.raw_file(table.name)
        if not path_exists(spark, path):
            raise MissingPartitionError(f"raw table {table.name!r} not found: expected {path}")
        return reader.csv(path)
    if not days:
        raise ValueError(f"daily table {table.name!r} needs the days to read")
    frames = []
    for day in days:
        path = lake.raw_file(table.name, day)
        if path_exists(spark, path):
            frames.append(reader.csv(path).withColumn("date", F.lit(day)))
        elif table.required:
            raise MissingPartitionError(
                f"no raw partition of {table.name!r} for {day}: expected {path} "
                "(land the day's data first, e.g. `python -m jobs.land`)"
            )
        else:
            log.warning("no raw partition of optional table %r for %s (%s): reading it as empty", table.name, day, path)
    if not frames:
        return spark.createDataFrame([], table.ddl()).withColumn("date", F.lit(None).cast("date"))
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Write a small text file (a report) atomically: a temporary file, then a rename over ``path``."""
    jvm = spark._jvm  # noqa: SLF001
    target = jvm.org.apache.hadoop.fs.Path(path)
    fs = target.getFileSystem(spark._jsc.hadoopConfiguration())  # noqa: SLF001
    tmp = jvm.org.apache.hadoop.fs.Path(target.getParent(), f".{target.getName()}.tmp")
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

"""The lake's folders, partitions and files as a job reads them through its Spark session: through
the driver's Hadoop FileSystem (any lake URI alike), or through pyarrow (:mod:`jobs.lake.storage`)
on a Spark Connect session, whose client reaches no JVM."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from jobs.errors import DataError
from jobs.lake import storage
from jobs.lake.layout import partition_day, partition_name
from jobs.runtime.session import is_remote

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class MissingPartitionError(DataError, FileNotFoundError):
    """A raw partition that a run needs is not in the lake."""


def hadoop_fs(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """(Hadoop FileSystem, Hadoop Path) for ``path``: any lake URI works the same way."""
    jvm = spark._jvm  # noqa: SLF001 - the Hadoop FileSystem API is only reachable this way
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(spark._jsc.hadoopConfiguration()), hpath  # noqa: SLF001


def path_exists(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` exists."""
    if is_remote(spark):
        return storage.exists(path)
    fs, hpath = hadoop_fs(spark, path)
    return bool(fs.exists(hpath))


def list_entries(spark: SparkSession, folder: str) -> list[tuple[str, bool]]:
    """(name, is a folder) of each entry directly in ``folder``; none when it does not exist."""
    if is_remote(spark):
        return storage.entries(folder)
    fs, hpath = hadoop_fs(spark, folder)
    if not fs.exists(hpath):
        return []
    return [(status.getPath().getName(), bool(status.isDirectory())) for status in fs.listStatus(hpath)]


def list_partitions(spark: SparkSession, path: str) -> list[dt.date]:
    """The ``date=YYYY-MM-DD`` partitions under ``path`` (none if it does not exist), oldest first."""
    days = [partition_day(name) for name, folder in list_entries(spark, path) if folder]
    return sorted(day for day in days if day is not None)


def read_days(spark: SparkSession, zone: str, days: list[dt.date]) -> DataFrame:
    """The ``days``' partitions of the Parquet zone ``zone``, with their ``date`` column, read by
    their own folders (each must exist). Reading the zone and filtering on ``date`` would give the
    same rows, but Spark lists every partition of the zone first: with more than 32 it runs a Spark
    job to list them, and a job reading one day costs more with every day the lake holds. Each
    partition is checked first (:func:`jobs.lake.integrity.check_partitions`): a damaged file or a
    file copied twice is a data error naming it, before any row is read."""
    from jobs.lake.integrity import check_partitions

    check_partitions([f"{zone}/{partition_name(day)}" for day in days])
    return spark.read.option("basePath", zone).parquet(*[f"{zone}/{partition_name(day)}" for day in days])


def delete_path(spark: SparkSession, path: str) -> bool:
    """Delete a file or folder (recursively); whether there was one."""
    if is_remote(spark):
        found = storage.exists(path)
        storage.delete_dir(path)  # each does nothing unless the path is of its kind
        storage.delete_file(path)
        return found
    fs, hpath = hadoop_fs(spark, path)
    return bool(fs.delete(hpath, True))


def read_head(spark: SparkSession, path: str, size: int) -> bytes:
    """Up to the first ``size`` bytes of the file at ``path``."""
    if is_remote(spark):
        return storage.read_head(path, size)
    fs, hpath = hadoop_fs(spark, path)
    stream = fs.open(hpath)
    try:
        head = bytearray()
        while len(head) < size:
            byte = stream.read()
            if byte < 0:
                break
            head.append(byte)
    finally:
        stream.close()
    return bytes(head)


def read_first_line(spark: SparkSession, path: str, limit: int = 1 << 20) -> str | None:
    """The first line of a UTF-8 text file (without its line end), None for an empty file; on
    Connect at most ``limit`` bytes of it."""
    if is_remote(spark):
        head = read_head(spark, path, limit)
        return head.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", errors="replace") if head else None
    fs, hpath = hadoop_fs(spark, path)
    jvm = spark._jvm  # noqa: SLF001
    reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(fs.open(hpath), "UTF-8"))
    try:
        return reader.readLine()
    finally:
        reader.close()

"""The raw files as they arrived: which files a run reads, their headers against the declared
schema (schema drift), and their rows read as text so that nothing is lost to parsing."""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

from jobs.errors import DataError
from jobs.lake.files import MissingPartitionError, list_entries, path_exists, read_first_line, read_head
from jobs.lake.layout import PARTITION, RESERVED_PREFIX

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.config import TableSpec
    from jobs.lake.layout import Lake

log = logging.getLogger("jobs.validation.job")


class ReservedNameError(DataError):
    """A table declares a column whose name the lake or the validate job uses."""


def reserved(column: str) -> bool:
    """Whether ``column`` is a name a source table may not use: the lake's partition column (in any
    case: Spark matches names case-insensitively) or one that starts like the job's own columns."""
    return column.lower() == PARTITION.lower() or column.startswith(RESERVED_PREFIX)


def check_reserved_names(tables: list[TableSpec]) -> None:
    """Fail, before anything is read, when a table declares a reserved column name."""
    found = [(t.name, c) for t in tables for c in t.columns if reserved(c)]
    if found:
        listed = ", ".join(f"{t}.{c}" for t, c in found)
        raise ReservedNameError(
            f"reserved column name(s): {listed}. '{PARTITION}' is the lake's partition column and names "
            f"starting with '{RESERVED_PREFIX}' are the validate job's own; rename the column in the source "
            f"files and in the config's tables (e.g. '{found[0][1].lstrip(RESERVED_PREFIX)}' -> "
            f"'{found[0][0]}_{found[0][1].lstrip(RESERVED_PREFIX)}')"
        )


# The first bytes of compressed files that can arrive under a .csv name.
COMPRESSED = {b"\x1f\x8b": "gzip", b"PK\x03\x04": "zip", b"BZh": "bzip2", b"\x28\xb5\x2f\xfd": "zstd",
              b"\xfd7zXZ\x00": "xz"}


def compression(spark: SparkSession, path: str) -> str | None:
    """The compression a file's first bytes show (``gzip``...), or None for anything else."""
    head = read_head(spark, path, 6)
    return next((kind for magic, kind in COMPRESSED.items() if head.startswith(magic)), None)


def unexpected_files(spark: SparkSession, folder: str, expected: str, skip_folders: bool = False) -> list[str]:
    """What else is in a raw folder besides the ``expected`` file name (ignored by the run)."""
    return sorted(f"{folder}/{name}" for name, is_folder in list_entries(spark, folder)
                  if name != expected and not (skip_folders and is_folder))


def schema_drift(header: list[str] | None, declared: list[str]) -> str:
    """What is wrong with a file's header, or "" when it names the declared columns in order."""
    if header is None:
        return "the file is empty (no header line)"
    if header == declared:
        return ""
    missing = [c for c in declared if c not in header]
    extra = [c for c in header if c not in declared]
    problems = []
    if missing:
        problems.append(f"missing column(s) {missing}")
    if extra:
        problems.append(f"undeclared column(s) {extra}")
    if len(missing) == len(extra) == 1 and declared.index(missing[0]) == header.index(extra[0]):
        problems.append(f"'{missing[0]}' renamed to '{extra[0]}'?")
    if not problems:
        problems.append(f"columns out of order: expected {declared}, found {header}")
    if any(reserved(c) for c in extra):
        problems.append(f"{[c for c in extra if reserved(c)]} is a reserved name: rename it in the source")
    return "; ".join(problems)


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
            others = unexpected_files(spark, lake.raw_partition(table.name, day), path.rsplit("/", 1)[1])
            found = f"; the partition holds {others} instead" if others else ""
            raise MissingPartitionError(
                f"no raw partition of {table.name!r} for {day}: expected {path}{found} "
                "(land the day's raw data first: `python -m jobs.datasets.landing --daily NAME=PATH.csv "
                "--date-column C`, or the pipeline's own landing)"
            )
        else:
            log.warning("no raw partition of optional table %r for %s (%s): nothing to read", table.name, day, path)
    return found


CORRUPT_RECORD = "_corrupt_record"
SOURCE_FILE = "_source_file"  # the raw file a row came from
RECORD = "_record"  # the row's record number in that file (1 = the first after the header)


def read_raw_strings(
    spark: SparkSession,
    lake: Lake,
    table: TableSpec,
    paths: list[str],
    snapshot_date: dt.date,
    csv_options: dict[str, str] | None = None,
) -> DataFrame:
    """Read raw CSV files keeping every value as the text it is, so no row is lost to parsing.

    Every declared column is a string; a record with too few or too many fields keeps its text in
    ``_corrupt_record``. Records, not lines: a quoted value may hold line breaks (``multiLine``,
    which also reads each file in one task, in order, so :data:`RECORD` counts records in the file).
    Daily tables get ``date`` from their partition folder, reference tables the snapshot date.
    Columns are matched by position: check the header first (:func:`read_header`).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    schema = ", ".join([*(f"`{c}` string" for c in table.columns), f"`{CORRUPT_RECORD}` string"])
    options = {
        "escape": '"',  # a quote inside a quoted value is doubled (RFC 4180), not backslashed (Spark's default)
        **(csv_options or {}),
        "header": "true",
        "enforceSchema": "true",
        "mode": "PERMISSIVE",
        "columnNameOfCorruptRecord": CORRUPT_RECORD,
        "multiLine": "true",
    }
    reader = spark.read.options(**options).schema(schema)
    if table.daily:
        df = reader.option("basePath", lake.raw_table(table.name)).csv(paths)
    else:
        df = reader.csv(paths).withColumn(PARTITION, F.lit(snapshot_date))
    df = df.withColumns({SOURCE_FILE: F.col("_metadata.file_path"), "_order": F.monotonically_increasing_id()})
    order = Window.partitionBy(SOURCE_FILE).orderBy("_order")
    return df.withColumn(RECORD, F.row_number().over(order)).drop("_order")


def read_header(spark: SparkSession, path: str) -> list[str] | None:
    """The column names in a CSV file's first line (``None`` for an empty file), read on the driver."""
    import csv

    line = read_first_line(spark, path)
    if line is None:
        return None
    return next(csv.reader([line.removeprefix("\ufeff")]), [])

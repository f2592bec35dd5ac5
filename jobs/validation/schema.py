"""The raw files as they arrived: which files a run reads, their headers against the declared
schema (schema drift), and their rows read as text so that nothing is lost to parsing."""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

from jobs.lake import PARTITION
from jobs.spark import MissingPartitionError, hadoop_fs, path_exists

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.config import TableSpec
    from jobs.lake import Lake

log = logging.getLogger("jobs.validate")


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
            raise MissingPartitionError(
                f"no raw partition of {table.name!r} for {day}: expected {path} "
                "(land the day's raw data first; for the example data: `python -m jobs.datasets.land_flights`)"
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

    fs, hpath = hadoop_fs(spark, path)
    jvm = spark._jvm  # noqa: SLF001
    reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(fs.open(hpath), "UTF-8"))
    try:
        line = reader.readLine()
    finally:
        reader.close()
    if line is None:
        return None
    return next(csv.reader([line.removeprefix("\ufeff")]), [])

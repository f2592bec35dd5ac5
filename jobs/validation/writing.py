"""Writing a validation run's outputs: the split into validated and quarantined rows, each zone's
partitions replaced, the read-back that proves no row was lost, and the marks of failed days."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from jobs.lake.files import delete_path, path_exists, read_days
from jobs.lake.layout import PARTITION, Lake, partition_name
from jobs.validation.partitions import clear_failed, mark_failed
from jobs.validation.report import DataLossError
from jobs.validation.schema import CORRUPT_RECORD, RECORD, SOURCE_FILE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.config import TableSpec
    from jobs.validation.report import RunReport, TableReport


def split(spec: TableSpec, flagged: DataFrame, run_id: str) -> tuple[DataFrame, DataFrame]:
    """(validated rows, typed; quarantined rows, as text with where they came from (file and
    record number), the rules broken and the run id)."""
    from pyspark.sql import functions as F

    columns = list(spec.columns)
    validated = flagged.where(F.size("_rules") == 0).select(PARTITION, *columns)
    quarantined = flagged.where(F.size("_rules") > 0).select(
        PARTITION, *[F.col(f"_raw.{c}").alias(c) for c in [*columns, CORRUPT_RECORD]],
        SOURCE_FILE, RECORD, F.col("_rules").alias("_rules"), F.lit(run_id).alias("_run_id"),
    )
    return validated, quarantined


def write_zone(spark: SparkSession, df: DataFrame, path: str, expected: dict[str, int]) -> dict[str, int]:
    """Replace a zone's partitions with ``df``'s rows (one sorted file each); returns the rows read back.

    ``expected``: rows per partition of the window. Spark's dynamic overwrite replaces the
    partitions that get rows; one that gets none is deleted, so nothing from an earlier run of
    the same days survives.
    """

    for part, rows in expected.items():
        if rows == 0:
            delete_path(spark, f"{path}/{partition_name(dt.date.fromisoformat(part))}")
    if any(expected.values()):
        order = [c for c, t in df.dtypes if c != PARTITION and not t.startswith("array")]
        df.repartition(PARTITION).sortWithinPartitions(*order).write.mode("overwrite").partitionBy(PARTITION).parquet(path)
        days = [dt.date.fromisoformat(part) for part, rows in expected.items() if rows]
        present = [day for day in days if path_exists(spark, f"{path}/{partition_name(day)}")]
        rows = read_days(spark, path, present).groupBy(PARTITION).count().collect() if present else []
        written = {r[PARTITION].isoformat(): r["count"] for r in rows}
    else:
        written = {}
    return {part: written.get(part, 0) for part in expected}


def write_table(
    spark: SparkSession, lake: Lake, spec: TableSpec, report: TableReport, flagged: DataFrame, run_id: str
) -> None:
    """Write the quarantine, then the validated zone; check that no row was lost; clear the marks
    of days that failed before."""
    validated, quarantined = split(spec, flagged, run_id)
    partitions = report.partitions
    q = write_zone(spark, quarantined, lake.quarantine(spec.name), {p: c.quarantined for p, c in partitions.items()})
    v = write_zone(spark, validated, lake.validated(spec.name), {p: c.validated for p, c in partitions.items()})
    for part, counts in partitions.items():
        counts.written_validated, counts.written_quarantined = v[part], q[part]
        if v[part] + q[part] != counts.rows_in:
            raise DataLossError(
                f"{spec.name} partition {part}: {counts.rows_in} rows in, but {v[part]} validated + "
                f"{q[part]} quarantined were written"
            )
        clear_failed(lake, spec.name, dt.date.fromisoformat(part))


def mark_failures(spark: SparkSession, lake: Lake, report: RunReport, page: str) -> None:
    """Every partition with a failed check: its validated partition removed, a mark saying why."""
    problems: dict[tuple[str, str], list[str]] = {}
    for check in report.failures:
        problems.setdefault((check.table, check.partition), []).append(f"{check.check}: {check.detail}")
    for (table, part), found in sorted(problems.items()):
        mark_failed(spark, lake, table, dt.date.fromisoformat(part), report.run_id, found, page)

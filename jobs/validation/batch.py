"""Checks on a batch as a whole: a day's partition is not empty, is dated its day, has a row count
in the band of its trailing days, and quarantines few enough rows."""

from __future__ import annotations

import datetime as dt
import statistics
from typing import TYPE_CHECKING, Any

from jobs.lake.files import path_exists
from jobs.lake.layout import PARTITION
from jobs.validation.report import Check
from jobs.validation.schema import CORRUPT_RECORD, RECORD

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.config import PipelineConfig, TableSpec
    from jobs.lake.layout import Lake
    from jobs.validation.rules import TableSuite


def partition_stats(
    flagged: DataFrame, table: TableSpec, suite: TableSuite, rule_names: list[str]
) -> dict[str, dict[str, Any]]:
    """Everything the batch checks and the report need, per partition, in one aggregation."""
    from pyspark.sql import functions as F

    aggs = [
        F.count(F.lit(1)).alias("rows_in"),
        F.sum((F.size("_rules") > 0).cast("long")).alias("quarantined"),
    ]
    # A malformed record spanning lines: a quote left open swallows the records after it.
    runaway = F.col(f"_raw.{CORRUPT_RECORD}").contains("\n")
    aggs.append(F.sum(runaway.cast("long")).alias("runaway_records"))
    aggs.append(F.min(F.when(runaway, F.col(RECORD))).alias("first_runaway_record"))
    for name in rule_names:
        hit = F.array_contains("_rules", name) | F.array_contains("_warnings", name)
        aggs.append(F.sum(hit.cast("long")).alias(f"rule:{name}"))
    for c, t in table.columns.items():
        if t != "string":
            raw = F.col(f"_raw.{c}")
            aggs.append(F.count(raw).alias(f"present:{c}"))
            aggs.append(F.count(F.col(c)).alias(f"parsed:{c}"))
            aggs.append(F.first(F.when(F.col(c).isNull(), raw), ignorenulls=True).alias(f"example:{c}"))
    if suite.partition_date:
        row_date = F.expr(suite.partition_date)
        other = row_date.isNotNull() & (row_date != F.col(PARTITION))
        aggs.append(F.sum(other.cast("long")).alias("other_dates"))
        aggs.append(F.slice(F.array_sort(F.collect_set(F.when(other, row_date))), 1, 5).alias("other_dates_seen"))
    rows = flagged.groupBy(PARTITION).agg(*aggs).collect()
    return {r[PARTITION].isoformat(): r.asDict() for r in rows}


def batch_checks(
    table: TableSpec,
    config: PipelineConfig,
    partitions: list[str],
    stats: dict[str, dict[str, Any]],
    trailing: dict[str, int],
) -> list[Check]:
    """The batch checks of every partition read (see the module docstring)."""
    limits = config.validation.limits(table.name)
    checks = []
    for part in partitions:
        s = stats.get(part) or {"rows_in": 0, "quarantined": 0}
        rows = s["rows_in"]

        def check(name: str, ok: bool, observed: Any, detail: str, part: str = part) -> None:
            checks.append(Check(table.name, part, name, bool(ok), observed, "" if ok else detail))

        check("partition_not_empty", rows > 0, rows, "the partition has no rows" + (
            " (a feed with days without rows: set feed_calendar.empty_days: true and such a day is passed over)"
            if table.name == config.validation.feed and not config.feed_calendar.empty_days else ""))
        if s.get("runaway_records"):
            check("quotes_closed", False, s["runaway_records"],
                  f"record {s['first_runaway_record']} is malformed and runs over several lines: a quote "
                  "left open swallows the records after it; fix the quoting in the source file")
        for c, t in table.columns.items():
            if t != "string" and s.get(f"present:{c}"):
                present, parsed = s[f"present:{c}"], s[f"parsed:{c}"]
                check(f"column_type:{c}", parsed > 0, {"values": present, "parsed": parsed},
                      f"column {c!r} is declared {t} but none of its {present} values parse as {t} "
                      f"(e.g. {s[f'example:{c}']!r}): was it retyped?")
        if "other_dates" in s:
            check("rows_dated_partition_day", s["other_dates"] == 0, s["other_dates"],
                  f"{s['other_dates']} of {rows} rows are dated {[str(d) for d in s['other_dates_seen']]}, "
                  f"not {part}: a file landed under the wrong day?")
        if table.daily:
            day = dt.date.fromisoformat(part)
            before = [d.isoformat() for d in _days_before(day, limits.band_days)]
            history = [trailing[d] for d in before if d in trailing]
            if len(history) >= 3:
                median = statistics.median(history)
                low, high = limits.row_count_band
                ratio = rows / median if median else float("inf")
                check("row_count_in_band", low <= ratio <= high, {"rows": rows, "trailing_median": median},
                      f"{rows} rows is {ratio:.2f}x the median of the {len(history)} trailing days ({median:g}); "
                      f"the band is {low:g}x..{high:g}x")
        if rows:
            rate = s["quarantined"] / rows
            check("quarantine_rate", rate <= limits.max_quarantine_rate, round(rate, 6),
                  f"{s['quarantined']} of {rows} rows ({rate:.1%}) broke rules, above the limit of "
                  f"{limits.max_quarantine_rate:.1%}")
    return checks


def _days_before(day: dt.date, n: int) -> list[dt.date]:
    return [day - dt.timedelta(days=k) for k in range(n, 0, -1)]


def trailing_counts(spark: SparkSession, lake: Lake, table: TableSpec, days: list[dt.date], band_days: int) -> dict:
    """Data lines per raw file for the window and the ``band_days`` before it, in one text scan
    (lines, not records: a quoted line break counts twice, close enough for the band)."""
    span = sorted({d for day in days for d in [*_days_before(day, band_days), day]})
    existing = [p for p in (lake.raw_file(table.name, d) for d in span) if path_exists(spark, p)]
    if not existing:
        return {}
    lines = spark.read.option("basePath", lake.raw_table(table.name)).text(existing).groupBy(PARTITION).count()
    return {r[PARTITION].isoformat(): max(r["count"] - 1, 0) for r in lines.collect()}  # less the header

"""Validate the raw tables for a window of days: split every row into validated or quarantined.

Usage::

    spark-submit jobs/validate.py --run-date 2013-01-28 [--days 28] [--run-id ID] [--config PATH] [--lake-root PATH]

For every configured table (reference tables first, so their keys can be checked against), in one
Spark pass over its raw files:

1. **Schema drift** is checked before any row is read: each file's header must name the declared
   columns in order; a missing, extra, renamed or reordered column fails with the file and the
   columns. A declared column none of whose values parse as its type (a retyped column) fails too.
2. **Batch checks** (any failure fails the run, nothing is written): a daily partition is not
   empty, its rows are dated the partition's day, its row count lies within ``row_count_band`` of
   the median of the ``band_days`` trailing raw days, and it quarantines at most
   ``max_quarantine_rate`` of its rows.
3. **Row rules** (the dataset's :class:`~jobs.rules.TableSuite`, plus: the line is well formed,
   the text is valid UTF-8, each value parses as its column's type): a row that breaks a
   ``quarantine`` rule goes to ``quarantine/<table>/date=D/`` as the text it arrived as, with the
   names of the rules it broke and the run id; other rows go, typed, to ``validated/<table>/date=D/``.
   Each rule also runs as a Great Expectations expectation, whose counts the report shows beside
   the split's.

Daily tables are partitioned by their day; reference tables are validated as a snapshot dated
with the run date. Each zone's partitions of the window are replaced (dynamic partition overwrite;
a partition left without rows is removed), so a re-run rewrites the same rows. After writing, the
job checks rows in == validated + quarantined for every partition. The report (JSON and an HTML
page) goes to ``reports/validation/date=<run date>/days=<N>/``; the log prints a summary table.
Raw data is only read.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import logging
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from jobs.config import PipelineConfig, TableSpec, WindowArgs, import_object, job_parser, parse_job_args
from jobs.lake import PARTITION, SUMMARY, VALIDATION_PAGE, Lake, partition_name
from jobs.rules import QUARANTINE, WARN, References, Rule, TableSuite
from jobs.spark import (
    CORRUPT_RECORD,
    configure_logging,
    delete_path,
    get_spark,
    path_exists,
    raw_paths,
    read_header,
    read_raw_strings,
    write_text,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger("jobs.validate")

# Rules every table gets from the job itself, before the dataset's own.
WELL_FORMED = "well_formed_line"
VALID_UTF8 = "valid_utf8"
REPLACEMENT_CHARACTER = "\ufffd"  # what the UTF-8 decoder puts where a byte was not UTF-8


class ValidationFailed(RuntimeError):
    """A batch check failed: the message names the table, the partition, the check and what was seen."""


class DataLossError(RuntimeError):
    """Rows in and rows written (validated + quarantined) differ for a partition."""


@dataclass(frozen=True)
class Check:
    """A check on a batch (a file or a day's partition) as a whole."""

    table: str
    partition: str
    check: str
    success: bool
    observed: Any = None
    detail: str = ""

    def describe(self) -> str:
        return f"{self.table} partition {self.partition}: {self.check} failed: {self.detail}"


@dataclass
class RuleResult:
    """A row rule over the window: what the split flagged and what GX counted."""

    rule: str
    description: str
    action: str
    expectation: str
    columns: list[str]
    flagged: int = 0
    gx_unexpected: int | None = None
    gx_error: str | None = None
    examples: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class PartitionCounts:
    rows_in: int
    validated: int
    quarantined: int
    by_rule: dict[str, int]
    warnings: dict[str, int]
    written_validated: int | None = None
    written_quarantined: int | None = None


@dataclass
class TableReport:
    table: str
    partitions: dict[str, PartitionCounts] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    rules: list[RuleResult] = field(default_factory=list)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.success]

    @property
    def rows_in(self) -> int:
        return sum(p.rows_in for p in self.partitions.values())

    @property
    def quarantined(self) -> int:
        return sum(p.quarantined for p in self.partitions.values())


@dataclass
class RunReport:
    run_id: str
    run_date: str
    days: list[str]
    tables: list[TableReport]
    written: bool = False

    @property
    def failures(self) -> list[Check]:
        return [c for t in self.tables for c in t.failures]

    @property
    def success(self) -> bool:
        return not self.failures

    def to_json(self) -> str:
        return json.dumps({"success": self.success, **asdict(self)}, indent=2, default=str)

    def summary(self) -> str:
        """Fixed-width tables a person can read in the task log."""
        lines = [
            f"validation run {self.run_id} for {self.run_date} ({len(self.days)} day(s)): "
            + ("passed" if self.success else f"FAILED ({len(self.failures)} batch check(s))"),
            f"  {'table':<10} {'rows in':>9} {'validated':>10} {'quarantined':>12}  checks",
        ]
        for t in self.tables:
            ok = len(t.checks) - len(t.failures)
            lines.append(
                f"  {t.table:<10} {t.rows_in:>9} {t.rows_in - t.quarantined:>10} {t.quarantined:>12}  "
                f"{ok}/{len(t.checks)} passed"
            )
        lines.append(f"  {'table':<10} {'rule':<34} {'action':<10} {'rows':>7} {'GX':>7}")
        for t in self.tables:
            for r in t.rules:
                if r.flagged or r.gx_unexpected or r.gx_error:
                    gx = "error" if r.gx_error else ("" if r.gx_unexpected is None else r.gx_unexpected)
                    lines.append(f"  {t.table:<10} {r.rule:<34} {r.action:<10} {r.flagged:>7} {gx:>7}")
        for check in self.failures:
            lines.append(f"  FAILED {check.describe()}")
        return "\n".join(lines)


# --- reading and flagging -------------------------------------------------------------------


def drift(header: list[str] | None, declared: list[str]) -> str:
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


def job_rules(table: TableSpec) -> list[tuple[str, str]]:
    """The rules the job adds to every table: (name, description)."""
    rules = [
        (WELL_FORMED, "the line has exactly the declared number of fields"),
        (VALID_UTF8, "the text is valid UTF-8"),
    ]
    rules += [(parse_rule(c, t), f"{c} parses as {t}") for c, t in table.columns.items() if t != "string"]
    return rules


def parse_rule(column: str, type_: str) -> str:
    return f"{column}_is_{type_}"


def flag_rows(raw: DataFrame, table: TableSpec, rules: list[Rule], refs: References) -> DataFrame:
    """Typed columns, the raw text (``_raw``), and the names of the rules each row breaks.

    ``_rules``: the quarantine rules broken (empty = the row is valid); ``_warnings``: warn rules.
    """
    from pyspark.sql import functions as F

    typed = raw.select(
        PARTITION,
        *[(F.col(c) if t == "string" else F.col(c).try_cast(t)).alias(c) for c, t in table.columns.items()],
        F.struct(*[F.col(c) for c in table.columns], F.col(CORRUPT_RECORD)).alias("_raw"),
    )
    any_text = F.concat_ws("", *[F.col(f"_raw.{c}") for c in [*table.columns, CORRUPT_RECORD]])
    job_flags: list[tuple[str, Column]] = [
        (WELL_FORMED, F.col(f"_raw.{CORRUPT_RECORD}").isNotNull()),
        (VALID_UTF8, any_text.contains(REPLACEMENT_CHARACTER)),
    ]
    job_flags += [
        (parse_rule(c, t), F.col(f"_raw.{c}").isNotNull() & F.col(c).isNull())
        for c, t in table.columns.items()
        if t != "string"
    ]
    quarantine = job_flags + [(r.name, r.violation(refs)) for r in rules if r.action == QUARANTINE]
    warn = [(r.name, r.violation(refs)) for r in rules if r.action == WARN]

    def names(flags: list[tuple[str, Column]]) -> Column:
        if not flags:
            return F.array().cast("array<string>")
        return F.filter(F.array(*[F.when(cond, F.lit(name)) for name, cond in flags]), lambda x: x.isNotNull())

    return typed.withColumns({"_rules": names(quarantine), "_warnings": names(warn)})


def partition_stats(
    flagged: DataFrame, table: TableSpec, suite: TableSuite, rule_names: list[str]
) -> dict[str, dict[str, Any]]:
    """Everything the batch checks and the report need, per partition, in one aggregation."""
    from pyspark.sql import functions as F

    aggs = [
        F.count(F.lit(1)).alias("rows_in"),
        F.sum((F.size("_rules") > 0).cast("long")).alias("quarantined"),
    ]
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


# --- checks ----------------------------------------------------------------------------------


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

        check("partition_not_empty", rows > 0, rows, "the partition has no rows")
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
    """Data lines per raw file for the window and the ``band_days`` before it, in one text scan."""
    span = sorted({d for day in days for d in [*_days_before(day, band_days), day]})
    existing = [p for p in (lake.raw_file(table.name, d) for d in span) if path_exists(spark, p)]
    if not existing:
        return {}
    lines = spark.read.option("basePath", lake.raw_table(table.name)).text(existing).groupBy(PARTITION).count()
    return {r[PARTITION].isoformat(): max(r["count"] - 1, 0) for r in lines.collect()}  # less the header


def run_expectations(df: DataFrame, table: str, rules: list[Rule], refs: References) -> dict[str, dict[str, Any]]:
    """Run the rules as one GX suite over ``df``; per rule name: the expectation, GX's unexpected
    count and any error.

    Counts only (``BASIC`` without example lists): examples come from the flagged rows, which
    costs one small query per rule that found something instead of one per expectation.
    """
    import great_expectations as gx

    context = gx.get_context(mode="ephemeral")
    batch = (
        # No persist: GX would cache the frame and never release it, so a later run over the same
        # files would be validated against the stale cached rows.
        context.data_sources.add_spark(name="lake", persist=False)
        .add_dataframe_asset(name=table)
        .add_batch_definition_whole_dataframe("window")
        .get_batch(batch_parameters={"dataframe": df})
    )
    expectations = []
    for rule in rules:
        expectation = rule.expectation(refs)
        expectation.meta = {"rule": rule.name}
        expectations.append(expectation)
    kinds = {e.meta["rule"]: type(e).__name__ for e in expectations}
    suite = gx.ExpectationSuite(name=f"{table}_rules", expectations=expectations)
    result = batch.validate(suite, result_format={"result_format": "BASIC", "partial_unexpected_count": 0})
    out = {}
    for item in result.results:
        details = item.result or {}
        error = None
        for info in [item.exception_info or {}, *(item.exception_info or {}).values()]:
            if isinstance(info, dict) and info.get("raised_exception"):
                error = info.get("exception_message") or "metric computation raised"
                break
        unexpected = details.get("unexpected_count")
        if unexpected is None and isinstance(details.get("observed_value"), int):
            unexpected = details["observed_value"]  # UnexpectedRowsExpectation reports its count here
        rule = item.expectation_config.meta["rule"]
        out[rule] = {"expectation": kinds[rule], "unexpected": unexpected, "error": error}
    return out


def examples(flagged: DataFrame, rule: str, columns: list[str], limit: int = 3) -> list[dict[str, Any]]:
    """A few rows that broke ``rule``, as the text they arrived as (the rule's columns, or all)."""
    from pyspark.sql import functions as F

    hit = F.array_contains("_rules", rule) | F.array_contains("_warnings", rule)
    rows = flagged.where(hit).select("_raw.*").limit(limit).collect()
    return [{k: v for k, v in r.asDict().items() if (k in columns if columns else v is not None)} for r in rows]


# --- one table --------------------------------------------------------------------------------


@dataclass
class TableRun:
    """A table's validation in progress: its report and, when rows were read, the flagged rows."""

    spec: TableSpec
    report: TableReport
    flagged: DataFrame | None = None
    partitions: list[str] = field(default_factory=list)


def validate_table(
    spark: SparkSession,
    lake: Lake,
    config: PipelineConfig,
    table: TableSpec,
    suite: TableSuite,
    days: list[dt.date],
    run_date: dt.date,
    refs: References,
) -> TableRun:
    """Check one table's raw files for the window and flag every row; writes nothing."""
    report = TableReport(table.name)
    paths = raw_paths(spark, lake, table, days if table.daily else None)
    partition_of = {path: part if table.daily else run_date.isoformat() for part, path in paths.items()}
    declared = list(table.columns)
    for path, part in partition_of.items():
        problem = drift(read_header(spark, path), declared)
        report.checks.append(Check(table.name, part, "header_matches_schema", not problem, path, f"{path}: {problem}"))
    run = TableRun(table, report, partitions=list(partition_of.values()))
    if report.failures or not paths:
        return run
    raw = read_raw_strings(spark, lake, table, list(paths.values()), run_date, config.csv_options)
    flagged = flag_rows(raw, table, suite.rules, refs).cache()
    names = [n for n, _ in job_rules(table)] + [r.name for r in suite.rules]
    stats = partition_stats(flagged, table, suite, names)
    limits = config.validation.limits(table.name)
    trailing = trailing_counts(spark, lake, table, days, limits.band_days) if table.daily else {}
    report.checks += batch_checks(table, config, run.partitions, stats, trailing)
    warn_rules = {r.name for r in suite.rules if r.action == WARN}
    for part in run.partitions:
        s = stats.get(part, {"rows_in": 0, "quarantined": 0})
        hits = {n: s.get(f"rule:{n}", 0) for n in names}
        report.partitions[part] = PartitionCounts(
            rows_in=s["rows_in"],
            validated=s["rows_in"] - s["quarantined"],
            quarantined=s["quarantined"],
            by_rule={n: k for n, k in hits.items() if k and n not in warn_rules},
            warnings={n: k for n, k in hits.items() if k and n in warn_rules},
        )
    total = {n: sum(s.get(f"rule:{n}", 0) for s in stats.values()) for n in names}
    report.rules = [
        RuleResult(name, description, QUARANTINE, "(job)", [], total[name]) for name, description in job_rules(table)
    ]
    gx = {}
    if suite.rules and config.validation.great_expectations:
        gx = run_expectations(flagged.select(PARTITION, *declared), table.name, suite.rules, refs)
    for rule in suite.rules:
        result = gx.get(rule.name, {"expectation": "(GX not run)", "unexpected": None, "error": None})
        report.rules.append(
            RuleResult(
                rule.name, rule.description, rule.action, result["expectation"], rule.columns,
                total[rule.name], result["unexpected"], gx_error=result["error"],
            )
        )
        if result["error"] or (result["unexpected"] is not None and result["unexpected"] != total[rule.name]):
            log.warning("%s rule %s: GX counted %s, the split %d (%s)", table.name, rule.name,
                        result["unexpected"], total[rule.name], result["error"] or "counts differ")
    for result in report.rules:
        if result.flagged:
            result.examples = examples(flagged, result.rule, result.columns)
    run.flagged = flagged
    return run


def reference_values(run: TableRun, column: str) -> list[Any]:
    """The values of ``column`` among a reference table's valid rows."""
    from pyspark.sql import functions as F

    if run.flagged is None:
        raise ValidationFailed(f"{run.spec.name} failed its own checks, so it cannot be used as a reference")
    rows = run.flagged.where(F.size("_rules") == 0).select(column).distinct().collect()
    return [r[0] for r in rows if r[0] is not None]


# --- writing ----------------------------------------------------------------------------------


def split(run: TableRun, run_id: str) -> tuple[DataFrame, DataFrame]:
    """(validated rows, typed; quarantined rows, as text with the rules broken and the run id)."""
    from pyspark.sql import functions as F

    columns = list(run.spec.columns)
    flagged = run.flagged
    validated = flagged.where(F.size("_rules") == 0).select(PARTITION, *columns)
    quarantined = flagged.where(F.size("_rules") > 0).select(
        PARTITION, *[F.col(f"_raw.{c}").alias(c) for c in [*columns, CORRUPT_RECORD]],
        F.col("_rules").alias("_rules"), F.lit(run_id).alias("_run_id"),
    )
    return validated, quarantined


def write_zone(spark: SparkSession, df: DataFrame, path: str, expected: dict[str, int]) -> dict[str, int]:
    """Replace a zone's partitions with ``df``'s rows (one sorted file each); returns the rows read back.

    ``expected``: rows per partition of the window. Spark's dynamic overwrite replaces the
    partitions that get rows; one that gets none is deleted, so nothing from an earlier run of
    the same days survives.
    """
    from pyspark.sql import functions as F

    for part, rows in expected.items():
        if rows == 0:
            delete_path(spark, f"{path}/{partition_name(dt.date.fromisoformat(part))}")
    if any(expected.values()):
        order = [c for c, t in df.dtypes if c != PARTITION and not t.startswith("array")]
        df.repartition(PARTITION).sortWithinPartitions(*order).write.mode("overwrite").partitionBy(PARTITION).parquet(path)
        back = spark.read.parquet(path).where(F.col(PARTITION).isin(list(expected)))
        rows = back.groupBy(PARTITION).count().collect()
        written = {r[PARTITION].isoformat(): r["count"] for r in rows}
    else:
        written = {}
    return {part: written.get(part, 0) for part in expected}


def write_table(spark: SparkSession, lake: Lake, run: TableRun, run_id: str) -> None:
    """Write the quarantine, then the validated zone; then check that no row was lost."""
    validated, quarantined = split(run, run_id)
    partitions = run.report.partitions
    name = run.spec.name
    q = write_zone(spark, quarantined, lake.quarantine(name), {p: c.quarantined for p, c in partitions.items()})
    v = write_zone(spark, validated, lake.validated(name), {p: c.validated for p, c in partitions.items()})
    for part, counts in partitions.items():
        counts.written_validated, counts.written_quarantined = v[part], q[part]
        if v[part] + q[part] != counts.rows_in:
            raise DataLossError(
                f"{run.spec.name} partition {part}: {counts.rows_in} rows in, but {v[part]} validated + "
                f"{q[part]} quarantined were written"
            )


# --- the run ----------------------------------------------------------------------------------


def validate(
    spark: SparkSession,
    lake: Lake,
    config: PipelineConfig,
    days: list[dt.date],
    run_date: dt.date,
    run_id: str,
    write: bool = True,
    suites: dict[str, TableSuite] | None = None,
) -> RunReport:
    """Validate every table with rules for the window; when all batch checks pass and ``write``,
    write the validated and quarantine zones. Returns the report (not written to the lake).

    ``suites`` defaults to the config's ``validation.suites``.
    """
    if suites is None:
        suites = import_object(config.validation.suites)()
    unknown = sorted(set(suites) - set(config.tables))
    if unknown:
        raise ValueError(f"{config.validation.suites} has rules for undeclared tables {unknown}")
    # Reference tables first: daily tables check their keys against them.
    order = sorted(suites, key=lambda name: config.tables[name].daily)
    runs: dict[str, TableRun] = {}
    for name in order:
        suite = suites[name]
        refs = {}
        for ref in {r for rule in suite.rules for r in rule.references}:
            ref_table, _, column = ref.partition(".")
            if ref_table not in runs:
                raise ValueError(f"{name} rules refer to {ref}, but {ref_table} is not validated before it")
            refs[ref] = reference_values(runs[ref_table], column)
        started = time.monotonic()
        runs[name] = validate_table(spark, lake, config, config.tables[name], suite, days, run_date, refs)
        table = runs[name].report
        log.info("%s: %d rows in, %d quarantined, %d/%d batch checks passed (%.1f s)", name, table.rows_in,
                 table.quarantined, len(table.checks) - len(table.failures), len(table.checks),
                 time.monotonic() - started)
    report = RunReport(run_id, run_date.isoformat(), [d.isoformat() for d in days], [r.report for r in runs.values()])
    if report.success and write:
        for run in runs.values():
            if run.flagged is not None:
                write_table(spark, lake, run, run_id)
        report.written = True
    for run in runs.values():
        if run.flagged is not None:
            run.flagged.unpersist()
    return report


def render_html(report: RunReport) -> str:
    """A page a person can read: batch checks, rules with counts and examples, rows per partition."""
    e = html.escape

    def table(headers: list[str], rows: list[list[Any]]) -> str:
        head = "".join(f"<th>{e(h)}</th>" for h in headers)
        body = "".join("<tr>" + "".join(f"<td>{e(str(v))}</td>" for v in row) + "</tr>" for row in rows)
        return f"<table><tr>{head}</tr>{body}</table>"

    verdict = "passed" if report.success else "FAILED"
    parts = [
        "<!doctype html><meta charset='utf-8'>",
        f"<title>Validation {e(report.run_date)}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:.5em 0 1.5em}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}.bad{color:#b00}</style>",
        f"<h1>Validation run {e(report.run_id)}: <span class='{'' if report.success else 'bad'}'>{verdict}</span></h1>",
        f"<p>Run date {e(report.run_date)}, {len(report.days)} day(s): {e(report.days[0])} .. {e(report.days[-1])}. "
        f"Outputs written: {'yes' if report.written else 'no'}.</p>",
    ]
    for t in report.tables:
        parts.append(f"<h2>{e(t.table)}</h2>")
        failed = [[c.partition, c.check, c.detail] for c in t.failures]
        parts.append(f"<p>{len(t.checks) - len(failed)} of {len(t.checks)} batch checks passed.</p>")
        if failed:
            parts.append(table(["partition", "check", "what was seen"], failed))
        parts.append(table(
            ["rule", "action", "description", "GX expectation", "rows", "GX unexpected", "examples"],
            [[r.rule, r.action, r.description, r.expectation, r.flagged,
              r.gx_error or ("" if r.gx_unexpected is None else r.gx_unexpected), r.examples or ""]
             for r in t.rules],
        ))
        parts.append(table(
            ["partition", "rows in", "validated", "quarantined", "by rule", "warnings"],
            [[p, c.rows_in, c.validated, c.quarantined, c.by_rule or "", c.warnings or ""]
             for p, c in sorted(t.partitions.items())],
        ))
    return "\n".join(parts)


@dataclass(frozen=True)
class ValidateArgs(WindowArgs):
    run_id: str | None  # the Airflow run (recorded with quarantined rows)


def main(argv: list[str] | None = None) -> None:
    configure_logging()
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    parser = job_parser(__doc__, window=True)
    parser.add_argument(
        "--run-id", default=None, help="recorded with every quarantined row (default: manual__<run date>)"
    )
    args = parse_job_args(parser, argv, ValidateArgs)
    run_id = args.run_id or f"manual__{args.run_date}"
    spark = get_spark(f"validate-{args.run_date}")
    report = validate(spark, args.lake, args.config, args.window, args.run_date, run_id)
    summary, page = (args.lake.validation_report(args.run_date, args.days, name) for name in (SUMMARY, VALIDATION_PAGE))
    write_text(spark, summary, report.to_json())
    write_text(spark, page, render_html(report))
    log.info("%s\nreport: %s (JSON: %s)", report.summary(), page, summary)
    if not report.success:
        problems = "\n  - ".join(c.describe() for c in report.failures)
        raise ValidationFailed(
            f"validation of {args.window[0]}..{args.run_date} failed; nothing was written:\n  - {problems}\n"
            f"full report: {page}"
        )


if __name__ == "__main__":
    main()

"""Validate the raw tables for a window of days: split every row into validated or quarantined.

``spark-submit jobs/validation/job.py --help`` lists its options.

For every configured table (reference tables first, so their keys can be checked against), in one
Spark pass over its raw files:

1. **Schema drift** is checked before any row is read: each file's header must name the declared
   columns in order; a missing, extra, renamed or reordered column fails with the file and the
   columns. A declared column none of whose values parse as its type (a retyped column) fails too.
2. **Batch checks** (any failure fails the run, nothing is written): a daily partition is not
   empty, its rows are dated the partition's day, its row count lies within ``row_count_band`` of
   the median of the ``band_days`` trailing raw days, and it quarantines at most
   ``max_quarantine_rate`` of its rows.
3. **Row rules** (the dataset's :class:`~jobs.validation.rules.TableSuite`, plus: the line is well formed,
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

Faults (:mod:`jobs.validation.partitions`): the run locks its partitions before Spark starts (a
second run of the same days fails at once, naming this one; a dead owner's lock is taken over),
removes Spark staging a killed run left behind, and when a batch check fails, removes each failed
day's validated partition and marks the day, so readers fail with "failed validation" instead of
reading what no longer passes. Column names are checked first: ``date`` (the partition column) and
names starting with ``_`` are reserved.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jobs.config import PipelineConfig, TableSpec, WindowArgs, job_parser, parse_job_args
from jobs.lake.integrity import check_partitions
from jobs.lake.layout import PARTITION, SUMMARY, VALIDATION_PAGE, Lake
from jobs.lake.storage import read_bytes, write_text
from jobs.runner import run_job
from jobs.runtime.session import configure_logging, get_spark
from jobs.timings import preload
from jobs.validation.batch import batch_checks, partition_stats, trailing_counts
from jobs.validation.declared import suites_of
from jobs.validation.fingerprints import fingerprint, record, unchanged_since
from jobs.validation.partitions import Owner, PartitionLocks, clean_staging
from jobs.validation.report import (
    Check,
    PartitionCounts,
    RuleResult,
    RunReport,
    TableReport,
    ValidationFailed,
    render_html,
)
from jobs.validation.rows import examples, flag_rows, job_rules, run_expectations
from jobs.validation.rules import QUARANTINE, WARN, References, TableSuite
from jobs.validation.schema import (
    check_reserved_names,
    compression,
    raw_paths,
    read_header,
    read_raw_strings,
    schema_drift,
    unexpected_files,
)
from jobs.validation.writing import mark_failures, write_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("jobs.validation.job")


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
        folder, name = path.rsplit("/", 1)
        for other in unexpected_files(spark, folder, name, skip_folders=not table.daily):
            report.warnings.append(f"{other}: not {name}, so not read (move it out, or land it as {name})")
            log.warning("%s partition %s: %s", table.name, part, report.warnings[-1])
        kind = compression(spark, path)
        if kind:
            report.checks.append(Check(table.name, part, "file_not_compressed", False, kind,
                                       f"{path} is {kind}-compressed under a .csv name: land it decompressed "
                                       f"(a plain CSV file under the same name)"))
            continue
        problem = schema_drift(read_header(spark, path), declared)
        report.checks.append(Check(table.name, part, "header_matches_schema", not problem, path, f"{path}: {problem}"))
    run = TableRun(table, report, partitions=list(partition_of.values()))
    if report.failures or not paths:
        return run
    raw = read_raw_strings(spark, lake, table, list(paths.values()), run_date, config.csv_options)
    flagged = flag_rows(raw, table, suite.rules, refs, suite.partition_date).cache()
    job = job_rules(table, suite.partition_date)
    names = [n for n, _ in job] + [r.name for r in suite.rules]
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
        RuleResult(name, description, QUARANTINE, "(job)", [], total[name]) for name, description in job
    ]
    gx = {}
    if suite.rules and config.validation.great_expectations:
        gx = run_expectations(flagged.select(PARTITION, *declared), table.name, suite.rules, refs,
                              rows=sum(s["rows_in"] for s in stats.values()),
                              pandas_max_rows=config.validation.gx_pandas_max_rows)
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
            result.examples = examples(flagged, result.rule, result.columns, suite.key)
    run.flagged = flagged
    return run


def reference_values(spark: SparkSession, lake: Lake, run: TableRun, column: str) -> list[Any]:
    """The values of ``column`` among a reference table's valid rows (its reused snapshot's rows
    when it was not validated again)."""
    from pyspark.sql import functions as F

    if run.report.unchanged_since:
        snapshot = lake.partition(lake.validated(run.spec.name), dt.date.fromisoformat(run.report.unchanged_since))
        check_partitions([snapshot])  # a damaged or doubled snapshot file: a data error naming it
        rows = spark.read.parquet(snapshot).select(column).distinct().collect()
        return [r[0] for r in rows if r[0] is not None]
    if run.flagged is None:
        raise ValidationFailed(f"{run.spec.name} failed its own checks, so it cannot be used as a reference")
    rows = run.flagged.where(F.size("_rules") == 0).select(column).distinct().collect()
    return [r[0] for r in rows if r[0] is not None]


# --- the run ----------------------------------------------------------------------------------


def lock_partitions(
    lake: Lake, config: PipelineConfig, suites: dict[str, TableSuite], days: list[dt.date], run_date: dt.date,
    run_id: str,
) -> PartitionLocks:
    """Lock every partition the run writes (each daily table's days, each reference table's
    snapshot): a run already writing one of them fails this one here, before anything is read."""
    tables = [config.tables[name] for name in suites if name in config.tables]  # validate() names the others
    check_reserved_names(tables)
    locks = PartitionLocks(lake, Owner(run_id))
    locks.acquire([(t.name, day) for t in tables for day in (days if t.daily else [run_date])])
    return locks


def validate(
    spark: SparkSession,
    lake: Lake,
    config: PipelineConfig,
    days: list[dt.date],
    run_date: dt.date,
    run_id: str,
    write: bool = True,
    suites: dict[str, TableSuite] | None = None,
    locks: PartitionLocks | None = None,
) -> RunReport:
    """Validate every table with rules for the window; when all batch checks pass and ``write``,
    write the validated and quarantine zones. Returns the report (not written to the lake).

    With ``write``, the run holds its partitions' locks (``locks``, taken by the caller with
    :func:`lock_partitions`, or taken here), removes staging a killed run left, and when a check
    fails, removes each failed day's validated partition and marks it (see
    :mod:`jobs.validation.partitions`). ``suites`` defaults to the config's ``validation.suites``.
    """
    if suites is None:
        suites = suites_of(config)
    unknown = sorted(set(suites) - set(config.tables))
    if unknown:
        raise ValueError(f"validation rules for undeclared tables {unknown}")
    check_reserved_names([config.tables[name] for name in suites])
    # Reference tables first: daily tables check their keys against them.
    order = sorted(suites, key=lambda name: config.tables[name].daily)
    own = write and locks is None
    if own:
        locks = lock_partitions(lake, config, suites, days, run_date, run_id)
    try:
        for name in order if write else []:
            clean_staging(spark, locks, name, [lake.validated(name), lake.quarantine(name)])
        return _validate(spark, lake, config, suites, order, days, run_date, run_id, write)
    finally:
        if own:
            locks.release()


def _validate(
    spark: SparkSession, lake: Lake, config: PipelineConfig, suites: dict[str, TableSuite], order: list[str],
    days: list[dt.date], run_date: dt.date, run_id: str, write: bool,
) -> RunReport:
    runs: dict[str, TableRun] = {}
    for name in order:
        suite, spec = suites[name], config.tables[name]
        needed = {ref for rule in suite.rules for ref in rule.references}
        for ref in needed:
            if ref.partition(".")[0] not in runs:
                raise ValueError(f"{name} rules refer to {ref}, but {ref.partition('.')[0]} is not validated before it")
        started = time.monotonic()
        digest = reference_fingerprint(spark, lake, config, spec, suite, runs) if write else None
        since = None
        if digest and config.validation.skip_unchanged:
            since = unchanged_since(spark, lake, name, run_date, digest)
        if since:
            runs[name] = TableRun(spec, TableReport(name, fingerprint=digest, unchanged_since=since.isoformat()))
            log.info("%s: raw file unchanged since its snapshot of %s passed (fingerprint %s): not validated again",
                     name, since, digest[:12])
            continue
        refs = {}
        for ref in needed:
            ref_table, _, column = ref.partition(".")
            refs[ref] = reference_values(spark, lake, runs[ref_table], column)
        runs[name] = validate_table(spark, lake, config, spec, suite, days, run_date, refs)
        table = runs[name].report
        table.fingerprint = digest
        log.info("%s: %d rows in, %d quarantined, %d/%d batch checks passed (%.1f s)", name, table.rows_in,
                 table.quarantined, len(table.checks) - len(table.failures), len(table.checks),
                 time.monotonic() - started)
    report = RunReport(run_id, run_date.isoformat(), [d.isoformat() for d in days], [r.report for r in runs.values()])
    if report.success and write:
        for run in runs.values():
            if run.flagged is not None:
                write_table(spark, lake, run.spec, run.report, run.flagged, run_id)
                if run.report.fingerprint:
                    record(lake, run.spec.name, run_date, run.report.fingerprint, run_id)
        report.written = True
    elif write:
        mark_failures(spark, lake, report, lake.validation_report(run_date, len(days), VALIDATION_PAGE))
    for run in runs.values():
        if run.flagged is not None:
            run.flagged.unpersist()
    return report


def reference_fingerprint(spark: SparkSession, lake: Lake, config: PipelineConfig, spec: TableSpec, suite: TableSuite,
                          runs: dict[str, TableRun]) -> str | None:
    """A reference table's fingerprint (:mod:`jobs.validation.fingerprints`); None for a daily
    table and for one whose rules refer to a table that has none."""
    referred = {ref.partition(".")[0] for rule in suite.rules for ref in rule.references}
    digests = {t: runs[t].report.fingerprint for t in referred}
    if spec.daily or not all(digests.values()):
        return None
    raw = read_bytes(raw_paths(spark, lake, spec, None)["snapshot"])
    return None if raw is None else fingerprint(raw, spec, suite, config, digests)  # type: ignore[arg-type]


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
    if args.nothing_open(log, "validate"):
        return
    if args.config.validation.great_expectations:
        preload("great_expectations")
    run_id = args.run_id or f"manual__{args.run_date}"
    suites = suites_of(args.config)
    # Locked before Spark starts: a second run of the same days fails in seconds, naming this one.
    locks = lock_partitions(args.lake, args.config, suites, args.window, args.run_date, run_id)
    try:
        spark = get_spark(f"validate-{args.run_date}", connect=True)
        report = validate(spark, args.lake, args.config, args.window, args.run_date, run_id, suites=suites, locks=locks)
    finally:
        locks.release()
    summary, page = (args.lake.validation_report(args.run_date, args.days, name) for name in (SUMMARY, VALIDATION_PAGE))
    write_text(summary, report.to_json())
    write_text(page, render_html(report))
    log.info("%s\nreport: %s (JSON: %s)", report.summary(), page, summary)
    if not report.success:
        problems = "\n  - ".join(c.describe() for c in report.failures)
        raise ValidationFailed(
            f"validation of {args.window[0]}..{args.run_date} failed ({len(report.failures)} batch check(s)); "
            f"nothing was written and the failed days' validated partitions were removed; full report: {page}"
            f"\n  - {problems}"
        )


if __name__ == "__main__":
    run_job(main)

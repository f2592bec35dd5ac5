"""Validate the raw partitions of the daily feed with a Great Expectations suite.

Usage::

    spark-submit jobs/validate.py --run-date 2013-01-28 [--days 28] [--config PATH] [--lake-root PATH]

Reads the configured table (``validation.table``) for the DAYS days ending with the run date, runs
the suite named by ``validation.suite`` over them in one GX validation (one Spark pass per metric
batch, not one job per day), writes a JSON report to
``reports/validation/date=<run-date>/<table>.json`` and prints a summary table. Any failed
expectation fails the job with a message that names the expectation, the column and what was
observed. Raw data is only read.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from jobs.config import PipelineConfig, import_object, job_parser, parse_job_args
from jobs.spark import configure_logging, get_spark, read_raw, write_text

if TYPE_CHECKING:
    from great_expectations.expectations import Expectation
    from pyspark.sql import DataFrame

log = logging.getLogger("jobs.validate")


class ValidationFailed(RuntimeError):
    """The data broke at least one expectation; the message lists which."""


@dataclass(frozen=True)
class CheckResult:
    expectation: str
    column: str | None
    success: bool
    observed: Any = None
    unexpected_count: int | None = None
    unexpected_examples: list[Any] = field(default_factory=list)
    error: str | None = None

    def describe(self) -> str:
        where = f" on column {self.column!r}" if self.column else ""
        if self.error:
            return f"{self.expectation}{where} could not be evaluated: {self.error}"
        seen = []
        if self.unexpected_count:
            seen.append(f"{self.unexpected_count} unexpected rows")
        if self.unexpected_examples:
            seen.append(f"e.g. {self.unexpected_examples[:5]}")
        if self.observed is not None:
            seen.append(f"observed {self.observed}")
        return f"{self.expectation}{where} failed: {'; '.join(seen) or 'see the report'}"


@dataclass(frozen=True)
class ValidationReport:
    table: str
    run_date: str
    days: list[str]
    rows: int
    rows_per_day: dict[str, int]
    checks: list[CheckResult]

    @property
    def success(self) -> bool:
        return all(c.success for c in self.checks)

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.success]

    def to_json(self) -> str:
        return json.dumps({"success": self.success, **asdict(self)}, indent=2, default=str)

    def summary(self) -> str:
        """A fixed-width table a person can read in the task log."""
        width = max(len(_label(c)) for c in self.checks)
        lines = [
            f"validation of {self.table} for {self.run_date}: {len(self.days)} day(s), {self.rows} rows, "
            f"{len(self.checks) - len(self.failures)}/{len(self.checks)} expectations met",
            f"  {'expectation':<{width}}  result  unexpected",
        ]
        for c in self.checks:
            result = "ok" if c.success else ("ERROR" if c.error else "FAILED")
            unexpected = "" if c.unexpected_count is None else c.unexpected_count
            lines.append(f"  {_label(c):<{width}}  {result:<6}  {unexpected}")
        return "\n".join(lines)


def _label(check: CheckResult) -> str:
    return f"{check.expectation}({check.column})" if check.column else check.expectation


def run_suite(df: DataFrame, expectations: list[Expectation], name: str) -> list[CheckResult]:
    """Run the expectations over ``df`` as one GX validation and flatten the results."""
    import great_expectations as gx

    context = gx.get_context(mode="ephemeral")
    batch = (
        context.data_sources.add_spark(name="lake")
        .add_dataframe_asset(name=name)
        .add_batch_definition_whole_dataframe("window")
        .get_batch(batch_parameters={"dataframe": df})
    )
    suite = gx.ExpectationSuite(name=f"{name}_suite", expectations=expectations)
    result = batch.validate(suite, result_format="SUMMARY")
    checks = []
    for item in result.results:
        config = item.expectation_config
        details = item.result or {}
        # GX reports a metric that raised as a failed expectation: surface the exception.
        error = (item.exception_info or {}).get("exception_message")
        if error is None:
            for info in (item.exception_info or {}).values():
                if isinstance(info, dict) and info.get("raised_exception"):
                    error = info.get("exception_message") or "metric computation raised"
                    break
        checks.append(
            CheckResult(
                expectation=config.type,
                column=config.kwargs.get("column"),
                success=bool(item.success),
                observed=details.get("observed_value"),
                unexpected_count=details.get("unexpected_count"),
                unexpected_examples=list(details.get("partial_unexpected_list") or [])[:10],
                error=error,
            )
        )
    return checks


def validate_window(
    df: DataFrame, config: PipelineConfig, days: list[dt.date], run_date: dt.date
) -> ValidationReport:
    """Validate the configured table's rows for ``days`` (``df`` carries a ``date`` column)."""
    table = config.tables[config.validation.table]
    suite_fn = import_object(config.validation.suite)
    per_day = {str(r["date"]): r["count"] for r in df.groupBy("date").count().collect()}
    checks = run_suite(df, suite_fn(table, days), table.name)
    return ValidationReport(
        table=table.name,
        run_date=run_date.isoformat(),
        days=[d.isoformat() for d in days],
        rows=sum(per_day.values()),
        rows_per_day={d.isoformat(): per_day.get(d.isoformat(), 0) for d in days},
        checks=checks,
    )


def main(argv: list[str] | None = None) -> None:
    configure_logging()
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    args = parse_job_args(job_parser(__doc__), argv)
    config = args.config
    spark = get_spark(f"validate-{config.validation.table}-{args.run_date}")
    table = config.tables[config.validation.table]
    df = read_raw(spark, args.lake, table, args.window, config.csv_options)
    report = validate_window(df, config, args.window, args.run_date)
    path = args.lake.report("validation", args.run_date, f"{table.name}.json")
    write_text(spark, path, report.to_json())
    log.info("%s\nreport: %s", report.summary(), path)
    if not report.success:
        problems = "\n  - ".join(c.describe() for c in report.failures)
        raise ValidationFailed(
            f"{table.name} partitions {args.window[0]}..{args.run_date} failed validation:\n  - {problems}\n"
            f"full report: {path}"
        )


if __name__ == "__main__":
    main()

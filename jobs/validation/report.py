"""What a validation run found, as data (``summary.json``) and as a page to read (``report.html``)."""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from jobs.errors import DataError


class ValidationFailed(DataError):
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
    warnings: list[str] = field(default_factory=list)  # e.g. files in a raw partition the run did not read
    fingerprint: str | None = None  # a reference table's (jobs.validation.fingerprints)
    unchanged_since: str | None = None  # not validated again: its snapshot of this day passed unchanged

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
            if t.unchanged_since:
                lines.append(f"  {t.table:<10} unchanged since its snapshot of {t.unchanged_since} passed: "
                             "not validated again")
                continue
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
        for t in self.tables:
            lines += [f"  WARNING {t.table}: {w}" for w in t.warnings]
        for check in self.failures:
            lines.append(f"  FAILED {check.describe()}")
        return "\n".join(lines)


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
        if t.unchanged_since:
            parts.append(f"<p>Raw file unchanged since its snapshot of {e(t.unchanged_since)} passed (fingerprint "
                         f"{e(t.fingerprint or '')}): not validated again; that snapshot is the one read.</p>")
            continue
        failed = [[c.partition, c.check, c.detail] for c in t.failures]
        parts.append(f"<p>{len(t.checks) - len(failed)} of {len(t.checks)} batch checks passed.</p>")
        if failed:
            parts.append(table(["partition", "check", "what was seen"], failed))
        if t.warnings:
            parts.append(table(["warning"], [[w] for w in t.warnings]))
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

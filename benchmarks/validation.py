"""Benchmark: what validation costs, against a plain read + count and against the same checks written
by hand as one Spark aggregation, with fixed cost and throughput fitted apart.

``python -m benchmarks.validation --help`` lists its options.

One local[2] session measures, side by side at every point (contenders taking turns, best of
``--repeat`` after one warm-up):

- ``read+count``: ``spark.read.csv`` of every raw file validation reads (all tables), ``count()``;
- ``hand aggregation``: the lower bound, what a user would write instead: per table the raw files
  read as the job reads them (:func:`jobs.validation.schema.read_raw_strings`), typed, and every
  rule's violations counted in one ``agg`` (``count_if`` of each predicate: the job's own rules,
  well-formed line, UTF-8, values that parse and are finite, a calendar date, and every dataset rule's
  :meth:`jobs.validation.rules.Rule.violation`); the reference values later tables check against come out of the
  same ``agg``. Its counts must equal the validate job's per rule, or the run fails;
- ``GX alone``: :func:`jobs.validation.rows.run_expectations` (the dataset's rules as one GX suite per
  table) on the typed frame the validate job hands GX, read from the same files (not cached), with the
  hand aggregation's reference values;
- ``validate (split only)``: the validate job's work without GX (checks, split, both zones written);
- ``validate (with GX)``: the same plus every rule as a GX expectation (the default).

Every validate run validates every table (``validation.skip_unchanged`` off): the same work as the hand
aggregation's and GX's, whichever run of the turns it is.

The points: the real 2013 data (the whole year landed) for a window of 1 day and of the full year, and
the scale-up generator's flights (:func:`jobs.datasets.multiplied_flights.scale_raw`) multiplied by each of
``--factors`` for ``--factor-days`` days from 2013-07-01, each factor in a lake of its own. Over the
factors, each contender's time is fitted as ``t(N) = a + N / b`` (N: flights rows; the other tables do
not grow), so the fixed cost ``a`` and the throughput ``b`` are apart. The target: GX on Spark takes at
most 2x the hand aggregation (``GX alone`` / ``hand aggregation``), met or not at every point.

``--smoke``: two days, factors 1 and 2, one repeat, no real-data windows (about 3 minutes on two cores).
Prints Markdown tables and writes ``validation.json`` (times, ratios, fits, the target, and the year's
validation report, which the README's data findings quote) to ``--out``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import operator
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import (
    Turns,
    arguments,
    comma_list,
    fit_fixed_and_rate,
    markdown_table,
    seconds,
    start,
    write_results,
)
from jobs.config import PipelineConfig, days_ending, load_config
from jobs.datasets.land_flights import FIRST_DAY, LAST_DAY, land
from jobs.datasets.multiplied_flights import scale_raw
from jobs.lake.layout import PARTITION, Lake
from jobs.validation.declared import suites_of
from jobs.validation.job import validate
from jobs.validation.rows import (
    MAX_MAGNITUDE,
    REPLACEMENT_CHARACTER,
    ROW_DATE,
    VALID_UTF8,
    WELL_FORMED,
    finite_columns,
    finite_rule,
    flag_rows,
    job_rules,
    parse_rule,
    run_expectations,
)
from jobs.validation.rules import QUARANTINE, References, TableSuite
from jobs.validation.schema import CORRUPT_RECORD, raw_paths, read_raw_strings

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from jobs.config import TableSpec

CONTENDERS = ("read+count", "hand aggregation", "GX alone", "validate (split only)", "validate (with GX)")
GX_TARGET = 2.0  # GX on Spark at most this many times the hand aggregation
FACTOR_START = dt.date(2013, 7, 1)
SMOKE_DAYS, SMOKE_FACTORS = 2, [1.0, 2.0]
ROWS = "_rows"  # the hand aggregation's row count, beside the rules'
VALID = "_valid"


@dataclasses.dataclass(frozen=True)
class Point:
    """One size: a lake and the window validated in it; ``factor`` None for the real data as landed."""

    label: str
    lake: Lake
    days: list[dt.date]
    factor: float | None = None


# --- the hand aggregation ---------------------------------------------------------------------


def job_violations(table: TableSpec, partition_date: str | None) -> list[tuple[str, Column]]:
    """The job's own rules (:func:`jobs.validation.rows.job_rules`) as predicates over the typed
    columns and the text (``_raw``), never null."""
    from pyspark.sql import functions as F

    text = [F.col(f"_raw.{c}") for c in [*table.columns, CORRUPT_RECORD]]
    found = [
        (WELL_FORMED, F.col(f"_raw.{CORRUPT_RECORD}").isNotNull()),
        (VALID_UTF8, F.concat_ws("", *text).contains(REPLACEMENT_CHARACTER)),
        *[(parse_rule(c, t), F.col(f"_raw.{c}").isNotNull() & F.col(c).isNull())
          for c, t in table.columns.items() if t != "string"],
        *[(finite_rule(c), F.isnan(c) | (F.abs(c) > MAX_MAGNITUDE)) for c in finite_columns(table)],
    ]
    if partition_date:
        found.append((ROW_DATE, F.expr(partition_date).isNull()))
    expected = [name for name, _ in job_rules(table, partition_date)]
    if [name for name, _ in found] != expected:
        raise RuntimeError(f"the hand aggregation's job rules {[n for n, _ in found]} are not the job's {expected}")
    return [(name, F.coalesce(cond, F.lit(False))) for name, cond in found]


def hand_table(
    raw: DataFrame, table: TableSpec, suite: TableSuite, refs: References, keep: list[str],
) -> dict[str, Any]:
    """One aggregation over a table's rows: the rows, every rule's violations (by name), and the
    values of each ``keep`` column among the valid rows (``ref:<column>``, for later tables' rules)."""
    from pyspark.sql import functions as F

    typed = raw.select(
        PARTITION,
        *[(F.col(c) if t == "string" else F.col(c).try_cast(t)).alias(c) for c, t in table.columns.items()],
        F.struct(*[F.col(c) for c in table.columns], F.col(CORRUPT_RECORD)).alias("_raw"),
    )
    job = job_violations(table, suite.partition_date)
    rules = [(r.name, r.violation(refs), r.action == QUARANTINE) for r in suite.rules]
    quarantine = [cond for _, cond in job] + [cond for _, cond, held in rules if held]
    # A select first: a uniqueness rule is a window function, which an aggregate cannot hold.
    flags = typed.select(
        *[cond.alias(name) for name, cond in job], *[cond.alias(name) for name, cond, _ in rules],
        (~functools.reduce(operator.or_, quarantine)).alias(VALID), *keep,
    )
    names = [name for name, _ in job] + [name for name, _, _ in rules]
    row = flags.agg(
        F.count(F.lit(1)).alias(ROWS),
        *[F.count_if(F.col(name)).alias(name) for name in names],
        *[F.collect_set(F.when(F.col(VALID), F.col(c))).alias(f"ref:{c}") for c in keep],
    ).first()
    return row.asDict()


def hand_aggregation(
    spark: SparkSession, lake: Lake, config: PipelineConfig, suites: dict[str, TableSuite], days: list[dt.date],
) -> tuple[dict[str, dict[str, int]], References]:
    """Every table's rule counts (and ``_rows``) in one aggregation each, reference tables first;
    and the reference values the rules checked against."""
    wanted = {ref for suite in suites.values() for rule in suite.rules for ref in rule.references}
    refs: References = {}
    counts = {}
    for name in sorted(suites, key=lambda n: config.tables[n].daily):
        spec = config.tables[name]
        paths = list(raw_paths(spark, lake, spec, days if spec.daily else None).values())
        raw = read_raw_strings(spark, lake, spec, paths, days[-1], config.csv_options)
        keep = sorted({ref.partition(".")[2] for ref in wanted if ref.partition(".")[0] == name})
        row = hand_table(raw, spec, suites[name], refs, keep)
        for column in keep:
            refs[f"{name}.{column}"] = row.pop(f"ref:{column}")
        counts[name] = row
    return counts, refs


def gx_alone(
    spark: SparkSession, lake: Lake, config: PipelineConfig, suites: dict[str, TableSuite], days: list[dt.date],
    refs: References,
) -> dict[str, dict[str, Any]]:
    """GX's unexpected counts per table and rule: :func:`run_expectations` on the typed frame the
    validate job gives it (:func:`flag_rows`, the declared columns), read from the raw files."""
    out = {}
    for name, suite in suites.items():
        spec = config.tables[name]
        if not suite.rules:
            continue
        paths = list(raw_paths(spark, lake, spec, days if spec.daily else None).values())
        raw = read_raw_strings(spark, lake, spec, paths, days[-1], config.csv_options)
        typed = flag_rows(raw, spec, suite.rules, refs, suite.partition_date).select(PARTITION, *spec.columns)
        out[name] = run_expectations(typed, name, suite.rules, refs)
    return out


def check_counts(hand: dict[str, dict[str, int]], report: Any, contender: str) -> set[str]:
    """Fail unless the hand aggregation counted, per table and rule, what the validate job flagged;
    returns the tables compared (not those the job skipped as unchanged since a passed snapshot)."""
    tables = [t for t in report.tables if not t.unchanged_since]
    differ = [
        f"{t.table}.{r.rule}: hand {hand[t.table].get(r.rule)}, {contender} {r.flagged}"
        for t in tables for r in t.rules if hand[t.table].get(r.rule) != r.flagged
    ]
    differ += [f"{t.table} rows: hand {hand[t.table][ROWS]}, {contender} {t.rows_in}"
               for t in tables if hand[t.table][ROWS] != t.rows_in]
    if differ:
        raise AssertionError("the hand aggregation and the validate job count differently:\n  " + "\n  ".join(differ))
    return {t.table for t in tables}


# --- the run ----------------------------------------------------------------------------------


def measure_point(
    spark: SparkSession, config: PipelineConfig, suites: dict[str, TableSuite], point: Point, repeat: int,
) -> tuple[dict[str, Any], Any]:
    """Every contender at one point, in turns; returns the point's row and the with-GX report.
    Fails when the hand aggregation's counts differ from the validate job's."""
    lake, days = point.lake, point.days
    without_gx = dataclasses.replace(
        config, validation=dataclasses.replace(config.validation, great_expectations=False))
    files = [p for spec in config.tables.values() for p in raw_paths(spark, lake, spec, days).values()]
    last: dict[str, Any] = {}
    reports: list[tuple[str, Any]] = []  # every run's, warm-up included: a later run may skip unchanged tables

    def run(cfg: PipelineConfig) -> Any:
        report = validate(spark, lake, cfg, days, days[-1], "benchmark")
        assert report.success, report.summary()
        reports.append(("validate (with GX)" if cfg is config else "validate (split only)", report))
        return report

    actions = {
        "read+count": lambda: spark.read.option("header", "true").csv(files).count(),
        "hand aggregation": lambda: hand_aggregation(spark, lake, config, suites, days),
        # With the hand aggregation's reference values: its warm-up runs first.
        "GX alone": lambda: gx_alone(spark, lake, config, suites, days, last["hand aggregation"][1]),
        "validate (split only)": lambda: run(without_gx),
        "validate (with GX)": lambda: run(config),
    }

    def timed(name: str) -> Any:
        return lambda: seconds(lambda: last.__setitem__(name, actions[name]()))

    runs = Turns(repeat).measure({name: timed(name) for name in actions})
    best = {name: min(times) for name, times in runs.items()}
    counts, _ = last["hand aggregation"]
    compared = set().union(*[check_counts(counts, report, name) for name, report in reports])
    if compared != set(suites):
        raise AssertionError(f"no validate run counted {sorted(set(suites) - compared)} to compare with")
    gx_differs = [f"{table}.{rule}: GX {r['unexpected']}, hand {counts[table].get(rule)}"
                  for table, results in last["GX alone"].items() for rule, r in results.items()
                  if r["error"] or r["unexpected"] != counts[table].get(rule)]
    base, hand_s, gx_s = best["read+count"], best["hand aggregation"], best["GX alone"]
    split_s, with_gx_s = best["validate (split only)"], best["validate (with GX)"]
    row = {
        "window": point.label, "factor": point.factor, "days": len(days), "files": len(files),
        "flights_rows": counts[config.validation.feed][ROWS],
        "read_count_s": round(base, 2), "hand_s": round(hand_s, 2), "gx_alone_s": round(gx_s, 2),
        "split_s": round(split_s, 2), "gx_s": round(with_gx_s, 2),
        "hand_ratio": round(hand_s / base, 1), "split_ratio": round(split_s / base, 1),
        "gx_ratio": round(with_gx_s / base, 1),
        "gx_vs_hand": round(gx_s / hand_s, 2), "gx_target_met": round(gx_s / hand_s, 2) <= GX_TARGET,
        "hand_counts_equal_validate": True, "gx_differs_from_hand": gx_differs,
        "runs_s": {name: [round(t, 3) for t in times] for name, times in runs.items()},
    }
    return row, last["validate (with GX)"]


def every_table(config: PipelineConfig) -> PipelineConfig:
    """The config with every table validated on every run: no skipping a reference table whose raw
    file passed unchanged (``validation.skip_unchanged``), so that each run does the work the hand
    aggregation and GX alone do, and the year's report has every table."""
    return dataclasses.replace(config, validation=dataclasses.replace(config.validation, skip_unchanged=False))


def measure(
    spark: SparkSession, config: PipelineConfig, points: list[Point], repeat: int,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Every point's row (:func:`measure_point`, with :func:`every_table`'s config) and the with-GX
    report of the ``full year`` point (None without one)."""
    config = every_table(config)
    suites = suites_of(config)
    rows, year_report = [], None
    for point in points:
        row, report = measure_point(spark, config, suites, point, repeat)
        rows.append(row)
        if point.label == "full year":
            year_report = json.loads(report.to_json())
    return rows, year_report


def fits(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """``t(N) = a + N / b`` per contender over the scaled points (N: flights rows)."""
    scaled = [r for r in rows if r["factor"] is not None]
    keys = {"read+count": "read_count_s", "hand aggregation": "hand_s", "GX alone": "gx_alone_s",
            "validate (split only)": "split_s", "validate (with GX)": "gx_s"}
    out = {}
    for name, key in keys.items():
        fit = fit_fixed_and_rate([r["flights_rows"] for r in scaled], [r[key] for r in scaled])
        out[name] = {"a_s": round(fit.a, 2), "b_rows_per_s": None if fit.b is None else round(fit.b)}
    return out


def points(root: Path, factors: list[float], factor_days: int, real: bool) -> list[Point]:
    """Land the data of every point under ``root``: the whole real year (with ``real``), and the
    factor window once per factor."""
    out = []
    if real:
        year = Lake(str(root / "year"))
        land(year, FIRST_DAY, LAST_DAY)
        out += [Point("1 day", year, [dt.date(2013, 7, 1)]), Point("full year", year, days_ending(LAST_DAY, 365))]
    window = [FACTOR_START + dt.timedelta(days=k) for k in range(factor_days)]
    for factor in factors:
        lake = Lake(str(root / f"x{factor:g}"))
        scale_raw(lake, factor, window[0], window[-1])
        out.append(Point(f"{factor:g}x, {factor_days} days", lake, window, factor))
    return out


def print_tables(rows: list[dict[str, Any]], fitted: dict[str, dict[str, float | None]]) -> None:
    """The points' times and the GX target, then the fits, as Markdown."""
    print(markdown_table(
        ["window", "files", "flights rows", "read+count", "hand aggregation", "GX alone", "validate, split only",
         "validate with GX", f"GX alone / hand (target <= {GX_TARGET:g}x)"],
        [[r["window"], r["files"], f"{r['flights_rows']:,}", f"{r['read_count_s']} s (1x)",
          f"{r['hand_s']} s ({r['hand_ratio']}x)", f"{r['gx_alone_s']} s", f"{r['split_s']} s ({r['split_ratio']}x)",
          f"{r['gx_s']} s ({r['gx_ratio']}x)", f"{r['gx_vs_hand']}x ({'met' if r['gx_target_met'] else 'not met'})"]
         for r in rows],
    ))
    print()
    print(markdown_table(
        ["contender", "fixed cost a", "throughput b (flights rows/s)"],
        [[name, f"{f['a_s']} s", "-" if f["b_rows_per_s"] is None else f"{f['b_rows_per_s']:,}"]
         for name, f in fitted.items()],
    ))
    for r in rows:
        if r["gx_differs_from_hand"]:
            print(f"note ({r['window']}): GX alone counted differently: {'; '.join(r['gx_differs_from_hand'])}")


def publish(out: Path, settings: dict[str, Any], rows: list[dict[str, Any]], year_report: Any) -> Path:
    """Fit, print the tables and write ``validation.json`` to ``out``; returns its path."""
    fitted = fits(rows)
    print_tables(rows, fitted)
    return write_results(out, "validation", {
        "settings": settings,
        "target": {"gx_alone_vs_hand_at_most": GX_TARGET, "met": {r["window"]: r["gx_target_met"] for r in rows}},
        "timings": rows, "fits": fitted, "year_report": year_report,
    })


def main(argv: list[str] | None = None) -> None:
    from jobs.runtime.session import get_spark

    parser = arguments(__doc__)
    parser.add_argument("--factors", default="1,3,10",
                        help="scale-up factors of the flights, comma-separated (default: %(default)s)")
    parser.add_argument("--factor-days", type=int, default=28,
                        help="days of the scaled window, from 2013-07-01 (default: %(default)s)")
    parser.add_argument("--smoke", action="store_true",
                        help=f"{SMOKE_DAYS} days, factors {','.join(f'{f:g}' for f in SMOKE_FACTORS)}, one repeat, "
                             "no real-data windows")
    args = parser.parse_args(argv)
    factors = SMOKE_FACTORS if args.smoke else comma_list(args.factors, float)
    factor_days = SMOKE_DAYS if args.smoke else args.factor_days
    repeat = 1 if args.smoke else args.repeat
    out = start(args.out)

    root = Path(tempfile.mkdtemp(prefix="bench-validation-"))
    config = load_config()
    spark = get_spark("bench-validation", {"spark.master": "local[2]", "spark.ui.enabled": "false"})
    try:
        rows, year_report = measure(spark, config, points(root, factors, factor_days, not args.smoke), repeat)
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    settings = {"factors": factors, "factor_days": factor_days, "factor_start": str(FACTOR_START), "repeat": repeat,
                "smoke": args.smoke}
    publish(out, settings, rows, year_report)


if __name__ == "__main__":
    main()

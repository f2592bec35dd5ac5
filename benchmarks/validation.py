"""Benchmark: what validation costs, as a ratio to a plain Spark read + count of the same files.

Usage::

    python -m benchmarks.validation [--out DIR] [--repeat 2]

Lands the whole 2013 example year into a throw-away lake, starts one local[2] session, and for a
window of 1 day and of the full year measures side by side, in the same session:

- ``read+count``: ``spark.read.csv`` of every raw file validation reads (all tables), ``count()``;
- ``validate (split only)``: the validate job's work without GX (checks, split, both zones written);
- ``validate (with GX)``: the same plus every rule as a GX expectation (the default).

Each is run ``--repeat`` times after one warm-up; the best time counts. Prints a Markdown table
and writes ``validation.json`` (times, ratios, and the year's validation report, which the README's
data findings quote) to ``--out``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import tempfile
from typing import Any

from benchmarks.harness import arguments, best_of, markdown_table, start, write_results
from jobs.config import days_ending, load_config
from jobs.datasets.land_flights import FIRST_DAY, LAST_DAY, land
from jobs.lake import Lake
from jobs.spark import get_spark
from jobs.validate import validate
from jobs.validation.schema import raw_paths


def main(argv: list[str] | None = None) -> None:
    args = arguments(__doc__).parse_args(argv)
    out = start(args.out)

    lake = Lake(tempfile.mkdtemp(prefix="bench-validation-") + "/lake")
    land(lake, FIRST_DAY, LAST_DAY)
    config = load_config()
    no_gx = dataclasses.replace(config.validation, great_expectations=False)
    without_gx = dataclasses.replace(config, validation=no_gx)
    spark = get_spark("bench-validation", {"spark.master": "local[2]", "spark.ui.enabled": "false"})

    windows = {"1 day": [dt.date(2013, 7, 1)], "full year": days_ending(LAST_DAY, 365)}
    rows, year_report = [], None
    for label, days in windows.items():
        run_date = days[-1]
        files = [p for spec in config.tables.values() for p in raw_paths(spark, lake, spec, days).values()]

        def read_count(files: list[str] = files) -> int:
            return spark.read.option("header", "true").csv(files).count()

        def run(cfg: Any, days: list[dt.date] = days, run_date: dt.date = run_date) -> Any:
            report = validate(spark, lake, cfg, days, run_date, "benchmark")
            assert report.success, report.summary()
            return report

        baseline = best_of(args.repeat, read_count)
        split_only = best_of(args.repeat, lambda: run(without_gx))
        with_gx = best_of(args.repeat, lambda: run(config))
        flights_rows = sum(
            t.rows_in for t in run(without_gx).tables if t.table == config.validation.feed
        )
        rows.append({
            "window": label, "days": len(days), "files": len(files), "flights_rows": flights_rows,
            "read_count_s": round(baseline, 2), "split_s": round(split_only, 2), "gx_s": round(with_gx, 2),
            "split_ratio": round(split_only / baseline, 1), "gx_ratio": round(with_gx / baseline, 1),
        })
        if label == "full year":
            year_report = json.loads(run(config).to_json())

    spark.stop()
    print(markdown_table(
        ["window", "files", "flights rows", "read+count", "validate, split only", "validate with GX"],
        [[r["window"], r["files"], f"{r['flights_rows']:,}", f"{r['read_count_s']} s (1x)",
          f"{r['split_s']} s ({r['split_ratio']}x)", f"{r['gx_s']} s ({r['gx_ratio']}x)"] for r in rows],
    ))
    write_results(out, "validation", {"timings": rows, "year_report": year_report})


if __name__ == "__main__":
    main()

"""``make bench``: every benchmark in one command, one results folder.

``python -m benchmarks.bench --help`` lists its options.

In one local[2] session, on a throw-away lake of the real example data (the whole year; ``--smoke``:
two days), the stages that run side by side with what a user would pick instead, each at several
sizes made with the scale-up generator's rule (``--factors``: flights per real flight; default
1,3,10,15, i.e. 0.34M, 1M, 3.4M and 5M rows for the year; smoke: 1,2, about 2,000 and 4,000 rows):

- ``features``: the features job vs the same plan in Polars and DuckDB (:mod:`benchmarks.features`);
- ``scoring``: the score job vs ``mlflow.pyfunc.spark_udf`` and the single-process baseline, on the
  features stage's outputs (:mod:`benchmarks.scoring.versus_udf`).

Then (not with ``--smoke``) the other benchmarks, each in its own process with its own defaults
(``--others``: nightly, validation, training, scoring, health, scale, scoring_gpu; ``none`` skips them; ``scale``
runs its default, 1x and 10x, the 100x row being ``make bench-scale SCALES=100 ...`` by hand), their printed
tables saved as ``<name>.md`` and their results as ``<name>.json``.

Writes to ``--out``: ``results.md`` (the machine, its load average before and after, and per stage a
table of seconds, rows/s and ratios per size, the ``t(N) = a + N / b`` fits and the targets),
``<stage>-time.png`` and ``<stage>-rows-per-s.png`` (against rows, log-log), and ``bench.json``.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness import Line, arguments, comma_list, line_plot, markdown_table, start, stopwatch, write_results

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.config import PipelineConfig
    from jobs.lake.layout import Lake

FULL_FACTORS, SMOKE_FACTORS = "1,3,10,15", "1,2"
SMOKE_DAYS = [dt.date(2013, 7, 1), dt.date(2013, 7, 2)]
OTHERS = "nightly,validation,training,scoring,health,scale"
STAGES = ("features", "scoring")
VERDICT = {True: "met", False: "not met", None: "not measured"}


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one run each, no other benchmarks")
    parser.add_argument("--factors", default=None, help=f"flights per real flight (default {FULL_FACTORS}; "
                        f"smoke {SMOKE_FACTORS})")
    parser.add_argument("--others", default=OTHERS,
                        help="the other benchmarks to run after, comma-separated, or none (default: %(default)s)")
    args = parser.parse_args(argv)
    out = start(args.out)
    factors = comma_list(args.factors or (SMOKE_FACTORS if args.smoke else FULL_FACTORS), float)
    repeat = 1 if args.smoke else args.repeat
    load_before = os.getloadavg()

    from benchmarks.common import throwaway_home
    from benchmarks.scoring.spark import SESSION
    from jobs.config import days_ending, load_config
    from jobs.datasets.land_flights import LAST_DAY
    from jobs.runtime.session import get_spark

    home = throwaway_home("bench-")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers need this venv (torch, mlflow)
    config = load_config()
    days = SMOKE_DAYS if args.smoke else days_ending(LAST_DAY, 365)
    setup: dict[str, float] = {}
    spark = get_spark("bench", SESSION)
    try:
        base = validated_lake(spark, home, config, days, setup)
        results = run_stages(spark, base, config, days, factors, home, repeat)
    finally:
        spark.stop()
        shutil.rmtree(home, ignore_errors=True)
    others = [] if args.smoke or args.others == "none" else comma_list(args.others)
    ran = {name: run_other(name, out) for name in others}
    settings = run_settings(args.smoke, factors, repeat, days, setup, ran, load_before)
    print(write_report(out, settings, results).read_text())


def run_settings(smoke: bool, factors: list[float], repeat: int, days: list[dt.date], setup: dict[str, float],
                 others: dict[str, Any], load_before: tuple[float, ...]) -> dict[str, Any]:
    """What the report says about the run: its mode, sizes, setup times and the load average."""
    return {"smoke": smoke, "factors": factors, "repeat": repeat, "days": len(days),
            "setup_s": {k: round(v, 1) for k, v in setup.items()}, "others": others,
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()]}


def validated_lake(spark: SparkSession, home: Path, config: PipelineConfig, days: list[dt.date],
                   setup: dict[str, float]) -> Lake:
    """The real days landed (the generator at 1x) and validated without GX, under ``home``."""
    import dataclasses

    from jobs.datasets.multiplied_flights import scale_raw
    from jobs.lake.layout import Lake
    from jobs.validation.job import validate

    lake = Lake(str(home / "lake"))
    no_gx = dataclasses.replace(config, validation=dataclasses.replace(config.validation, great_expectations=False))
    with stopwatch(setup, "land_s"):
        scale_raw(lake, 1, days[0], days[-1])
    with stopwatch(setup, "validate_s"):
        report = validate(spark, lake, no_gx, days, days[0], "benchmark")
        assert report.success and report.written, report.summary()
    return lake


def run_stages(spark: SparkSession, base: Lake, config: PipelineConfig, days: list[dt.date], factors: list[float],
               home: Path, repeat: int) -> list[dict[str, Any]]:
    """The features stage at every factor, then the scoring stage on its Spark outputs. Both on the
    builder's features alone: the contenders implement the builder's joins, not the history and
    calendar columns of jobs/features/history.py."""
    import dataclasses

    from benchmarks import features
    from benchmarks.scoring import versus_udf

    config = dataclasses.replace(config, features=dataclasses.replace(config.features, history=None, calendar=None))

    staged = features.run_stage(spark, base, config, days, sorted(factors), home, repeat)
    lakes = [p["spark_output"] for p in staged["points"]]
    return [staged, versus_udf.run_stage(spark, config, days, lakes, home, repeat)]


def run_other(name: str, out: Path) -> dict[str, Any]:
    """Another benchmark in its own process: its printed tables to ``<out>/<name>.md``."""
    started = time.perf_counter()
    with open(out / f"{name}.md", "w") as printed:
        code = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--out", str(out)],
                              stdout=printed, stderr=subprocess.STDOUT).returncode
    return {"exit_code": code, "seconds": round(time.perf_counter() - started, 1), "tables": f"{name}.md"}


def stage_table(result: dict[str, Any]) -> str:
    """Seconds, rows/s and the subject's ratio to each other contender, per size."""
    names, subject = result["contenders"], result["subject"]
    others = [c for c in names if c != subject]
    columns = ["rows", *[f"{c} (s)" for c in names], *[f"{c} (rows/s)" for c in names],
               *[f"{subject} / {c}" for c in others]]
    rows = [[f"{p['rows']:,}", *[f"{p['seconds'][c]:.3f}" for c in names],
             *[f"{p['rows'] / p['seconds'][c]:,.0f}" for c in names], *[f"{p['ratios'][c]}x" for c in others]]
            for p in result["points"]]
    return markdown_table(columns, rows)


def write_report(out: Path, settings: dict[str, Any], results: list[dict[str, Any]]) -> Path:
    """``results.md``, the plots and ``bench.json``; returns the Markdown file's path."""
    from benchmarks.common import machine

    host = machine()
    lines = [
        f"# Benchmarks{' (smoke: tiny sizes, one run, not figures)' if settings['smoke'] else ''}", "",
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; {host['cpu_count']} cores, {host['platform']}, "
        f"{host['device']}; pyspark {host['pyspark']}, torch {host['torch']}; load average before "
        f"{settings['load_average_before']}, after {settings['load_average_after']}; best of {settings['repeat']} "
        f"after a warm-up; {settings['days']} days, flights x {', '.join(f'{f:g}' for f in settings['factors'])}.",
        f"Setup (not timed in the stages): {settings['setup_s']}.",
    ]
    for result in results:
        stage = result["stage"]
        for kind, ylabel, value in (("time", "seconds", lambda p, c: p["seconds"][c]),
                                    ("rows-per-s", "rows/s", lambda p, c: p["rows"] / p["seconds"][c])):
            line_plot(out / f"{stage}-{kind}.png",
                      [Line(c, [p["rows"] for p in result["points"]], [value(p, c) for p in result["points"]])
                       for c in result["contenders"]],
                      xlabel="rows", ylabel=ylabel, title=f"{stage}: {ylabel} against rows", log=True)
        fits = markdown_table(["contender", "fixed cost a (s)", "throughput b (rows/s)"],
                              [[c, f["a_s"], f"{f['b_rows_per_s']:,}" if f["b_rows_per_s"] else "-"]
                               for c, f in result["fits"].items()])
        targets = [f"- target: {' / '.join([t['other'], t['subject']][:: 1 if t['faster'] else -1])}"
                   f" {'>=' if t['faster'] else '<='} {t['bound']}x at {t['rows']:,} rows: "
                   f"{'-' if t['value'] is None else str(t['value']) + 'x'} ({t['how']}): "
                   f"**{VERDICT[t['met']]}**" for t in result["targets"]]
        lines += ["", f"## {stage}", "", stage_table(result), "", "`t(N) = a + N / b`, least squares over the sizes:",
                  "", fits, "", *targets, "", f"![{stage}: time]({stage}-time.png) "
                  f"![{stage}: rows/s]({stage}-rows-per-s.png)"]
    for name, ran in settings["others"].items():
        lines += ["", f"## {name}", "", f"`python -m benchmarks.{name}`: exit code {ran['exit_code']}, "
                  f"{ran['seconds']} s; its tables: [{ran['tables']}]({ran['tables']})."]
    path = out / "results.md"
    path.write_text("\n".join(lines) + "\n")
    write_results(out, "bench", {"machine": host, "settings": settings, "stages": results})
    return path


if __name__ == "__main__":
    main()

"""The scoring benchmark's report: the machine, the setup, and its tables in Markdown."""

from __future__ import annotations

from typing import Any

from benchmarks.harness import markdown_table
from benchmarks.scoring.contenders import TUNED

FIXED_COSTS = [  # (label, probe, mark, the mark subtracted from it or None)
    ("spark: Python start (interpreter, benchmark module)", "spark", "python_start_s", None),
    ("spark: imports (pyspark, jobs.scoring.predictor)", "spark", "imports_s", None),
    ("spark: SparkSession getOrCreate (JVM, session)", "spark", "session_start_s", None),
    ("spark: first action's JVM warm-up (read+write, first - warm)", "spark", "first_read_write_s",
     "warm_read_write_s"),
    ("spark: Python worker start (first UDF - new UDF on warm workers)", "spark", "first_udf_s",
     "fresh_udf_warm_workers_s"),
    ("spark: model load in warm workers (new UDF - warm UDF)", "spark", "fresh_udf_warm_workers_s", "warm_udf_s"),
    ("spark: warm score of the day (best of 2)", "spark", "warm_udf_s", None),
    ("spark: whole process (start to stop)", "spark", "process_wall_s", None),
    ("baseline: Python start (interpreter, benchmark module)", "baseline", "python_start_s", None),
    ("baseline: imports (pyarrow, torch, mlflow)", "baseline", "imports_s", None),
    ("baseline: model load (mlflow.pyfunc.load_model)", "baseline", "model_load_s", None),
    ("baseline: first score of the day - warm", "baseline", "first_call_s", "warm_call_s"),
    ("baseline: warm score of the day (best of 2)", "baseline", "warm_call_s", None),
    ("baseline: whole process", "baseline", "process_wall_s", None),
]


def report_tables(host: dict[str, Any], settings: dict[str, Any], setup: dict[str, float],
                  results: list[dict[str, Any]], tuning: list[dict[str, Any]], fixed: dict[str, Any]) -> None:
    """Print the machine, the setup, and the tables: every contender per scale, the ratios and
    checks per scale, the tuning (when run) and the fixed costs."""
    print(f"machine: {host['cpu_count']} CPUs, torch {host['torch']} ({host['torch_default_threads']} default "
          f"threads), pyspark {host['pyspark']}, pyarrow {host['pyarrow']}, Python {host['python']}")
    print(f"setup: {', '.join(f'{k} {v:.1f} s' for k, v in setup.items())}")
    print(f"stage time in a warm local[2] session, best of {settings['repeat']} after a warm-up; "
          f"score.batch_size {settings['batch_size']}, Arrow maxRecordsPerBatch {settings['arrow_batch']}; "
          f"baseline: one process, torch on {settings['baseline_torch_threads']} thread(s)")
    print()
    print(markdown_table(
        ["scale", "rows", "files", "contender", "stage", "rows/s", "vs baseline"],
        [[r["scale"], f"{r['rows']:,}", r["files"], c["contender"], f"{c['stage_s']:.2f} s", f"{c['rows_per_s']:,}",
          f"{c['vs_baseline']}x"] for r in results for c in r["contenders"]],
    ))
    print()
    print(markdown_table(
        ["scale", "rows", "score job / baseline", "raw-column UDF / baseline", "raw-column UDF / score job",
         "spark_udf / score job",
         "mapInArrow / baseline", "read+write / baseline", "no-op UDF / baseline",
         "max abs diff vs job: raw-column UDF, mapInArrow, baseline"],
        [ratio_row(r) for r in results],
    ))
    if tuning:
        print()
        print(f"tuning at {settings['tune_scale']} (best of {settings['repeat']}):")
        print()
        best = {k: min((t for t in tuning if t["key"] == k), key=lambda t: t["stage_s"]) for k in TUNED}
        print(markdown_table(
            ["contender", "score.batch_size", "Arrow maxRecordsPerBatch", "stage"],
            [[t["contender"], t["batch_size"], t["arrow_batch"],
              f"{t['stage_s']:.2f} s" + (" (best)" if t is best[t["key"]] else "")]
             for t in sorted(tuning, key=lambda t: (TUNED.index(t["key"]), t["batch_size"], t["arrow_batch"]))],
        ))
    print()
    print(markdown_table(
        ["fixed cost (fresh process, one day)", "seconds"],
        [[label, f"{fixed[kind][mark] - (fixed[kind][less] if less else 0.0):.2f}"]
         for label, kind, mark, less in FIXED_COSTS],
    ))


def ratio_row(result: dict[str, Any]) -> list[Any]:
    """One scale's ratios to the baseline and to the score job, and its checks."""
    c, k = {x["key"]: x for x in result["contenders"]}, result["checks"]
    return [
        result["scale"], f"{result['rows']:,}", f"{c['spark']['vs_baseline']}x", f"{c['raw']['vs_baseline']}x",
        f"{c['raw']['stage_s'] / c['spark']['stage_s']:.2f}x",
        f"{c['mlflow_udf']['stage_s'] / c['spark']['stage_s']:.2f}x", f"{c['arrow']['vs_baseline']}x",
        f"{c['read_write']['vs_baseline']}x", f"{c['handoff']['vs_baseline']}x",
        f"{k['raw_vs_job_max_abs_diff']:.1e}, {k['arrow_vs_job_sorted_max_abs_diff']:.1e} (sorted), "
        f"{k['baseline_vs_job_sorted_max_abs_diff']:.1e} (sorted)",
    ]

"""Benchmark: one nightly run of one day through Airflow, task by task, and where its time goes.

``python -m benchmarks.nightly --help`` lists its options.

Setup, not timed, in a throw-away pipeline home (its own lake, MLflow store and Airflow database):
lands January 2013, ingests the training window (one ``airflow dags test flights_ingest`` run of
2013-01-01..01-28) and trains a champion on it (``spark-submit jobs/training/job.py --epochs 1``). Then
each night D (2013-01-29, 01-30, ...) is what the scheduler runs when D's raw data lands:
``airflow dags test flights_ingest --conf '{"run_date": D}'`` (wait for the raw day, validate,
build the features, publish the asset), then ``airflow dags test flights_score`` for D (score with
the champion, measure drift), the Spark tasks spark-submitting to ``local[2]`` as in the demo.

The nights alternate between the modes (``--modes``), ``--nights`` of each:

- ``before``: the pipeline as it was before the cuts: every reference table is validated again
  every night and GX runs on Spark (``validation.skip_unchanged: false``, ``gx_pandas_max_rows: 0``);
- ``after``: the defaults: reference tables whose raw file has not changed since they last passed
  are not validated again (:mod:`jobs.validation.fingerprints`), GX checks a table's window of up to
  200,000 rows on pandas in the driver (:func:`jobs.validation.rows.run_expectations`), and the heavy
  imports (GX, MLflow) load in the background while Spark starts (:func:`jobs.timings.preload`);
- ``after+connect``: the same, and every job's session on one Spark Connect server that runs all
  the time, as the scheduler does (``PIPELINE_SPARK_REMOTE``, :mod:`jobs.runtime.connect_server`; started
  before the nights, not timed): no task starts a driver or warms a JVM.

Each Spark task's wall time (from Airflow's task instance) is split with the job's own timings
(:mod:`jobs.timings`, ``PIPELINE_TIMINGS_DIR``): spark-submit and JVM start (task start to the
Python driver's start), Python start and imports, SparkSession start, GX context, model load, the
work, and the teardown (the job's end to the task's end). The rest of the two commands' wall time
is Airflow's: starting the CLI, parsing the DAGs, the Python tasks, starting each task. The fixed
share is everything but the work.

Writes ``nightly.md`` (per mode the best night's breakdown and every night's total), the stacked
bars ``nightly-breakdown.png`` and ``nightly.json`` to ``--out``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import arguments, markdown_table, start, write_results
from jobs.lake.layout import ROOT_ENV

REPO = Path(__file__).resolve().parents[1]
TRAIN_DATE = dt.date(2013, 1, 28)
FIRST_NIGHT = dt.date(2013, 1, 29)
CUTS = {"skip_unchanged": True, "gx_pandas_max_rows": 200_000}
# Per mode: the validation settings, and whether the jobs share a Spark Connect server.
MODES: dict[str, tuple[dict[str, Any], bool]] = {
    "before": ({"skip_unchanged": False, "gx_pandas_max_rows": 0}, False),
    "after": (CUTS, False),
    "after+connect": (CUTS, True),
}
CONNECT_PORT = 15012
DAGS = ("flights_ingest", "flights_score")
# The parts of a Spark task, in the order they happen; "Airflow" is the commands' time outside them.
PARTS = ("spark-submit + JVM", "python start + imports", "spark session", "GX context", "model load", "work",
         "teardown")
FIXED = tuple(p for p in PARTS if p != "work")


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__)
    parser.add_argument("--nights", type=int, default=2, help="nights per mode (default: %(default)s)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help="the modes the nights alternate between, comma-separated (default: %(default)s)")
    args = parser.parse_args(argv)
    out = start(args.out)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}: choose from {sorted(MODES)}")
    home = Path(os.environ.get("NIGHTLY_HOME") or REPO / ".pipeline" / "bench-nightly")
    shutil.rmtree(home, ignore_errors=True)
    night_days = [FIRST_NIGHT + dt.timedelta(days=i) for i in range(args.nights * len(modes))]
    env = environment(home)
    setup = prepare(env, night_days[-1])
    server = None
    if any(MODES[m][1] for m in modes):  # a service that runs all the time, like the scheduler: not timed
        from jobs.runtime.connect_server import start as start_server

        started = time.perf_counter()
        server = start_server(CONNECT_PORT, log=home / "logs" / "connect-server.log", env=env)
        setup["connect_server_s"] = round(time.perf_counter() - started, 1)
    nights = []
    try:
        for i, day in enumerate(night_days):
            mode = modes[i % len(modes)]
            nights.append({"mode": mode, **run_night(env, home, day, mode)})
            print(f"night {day} ({mode}): {nights[-1]['wall_s']:.1f} s", flush=True)
    finally:
        if server is not None:
            from jobs.runtime.connect_server import stop

            stop(server)
    result = {"setup_s": setup, "nights": nights, "best": best_nights(nights)}
    plot(out / "nightly-breakdown.png", result["best"])
    (out / "nightly.md").write_text(report(result))
    write_results(out, "nightly", result)
    print((out / "nightly.md").read_text())
    shutil.copytree(home / "logs", out / "nightly-logs", dirs_exist_ok=True)  # every command's full output
    shutil.rmtree(home, ignore_errors=True)


def environment(home: Path) -> dict[str, str]:
    """The demo's environment (scripts/env.sh) on ``home``, with the jobs' timings switched on."""
    from benchmarks.common import pipeline_environment

    env = pipeline_environment(home)
    env["PYSPARK_PYTHON"] = str(REPO / ".venv" / "bin" / "python")
    return env


def run(env: dict[str, str], *command: str, log: Path) -> float:
    """Run ``command`` in the repository with ``env``, its output to ``log``; its wall seconds."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(log, "w") as output:
        code = subprocess.run(command, cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT).returncode
    if code:
        raise RuntimeError(f"{' '.join(command)} failed with exit code {code}: see {log}")
    return round(time.perf_counter() - started, 1)


def prepare(env: dict[str, str], last_night: dt.date) -> dict[str, float]:
    """Land the data, ingest the training window and train a champion; seconds per step."""
    logs = Path(env["PIPELINE_HOME"]) / "logs"
    conf = json.dumps({"run_date": TRAIN_DATE.isoformat(), "days": TRAIN_DATE.day})
    lake = f"{env[ROOT_ENV]}/flights"  # the flights pipeline's lake, where its DAGs read
    return {
        "land_s": run(env, "python", "-m", "jobs.datasets.land_flights", "--to", last_night.isoformat(),
                      "--lake-root", lake, log=logs / "land.log"),
        "migrate_s": run(env, "airflow", "db", "migrate", log=logs / "migrate.log"),
        "ingest_window_s": run(env, "airflow", "dags", "test", "flights_ingest", "--conf", conf,
                               log=logs / "ingest-window.log"),
        "train_s": run({**env, ROOT_ENV: lake}, "spark-submit", "--master", "local[2]", "jobs/training/job.py",
                       "--run-date", TRAIN_DATE.isoformat(), "--epochs", "1", log=logs / "train.log"),
    }


def mode_config(home: Path, mode: str) -> Path:
    """The bundled pipeline with the mode's validation settings."""
    from jobs.config import write_overlay

    return write_overlay(home / f"config-{mode}.yaml", {"validation": MODES[mode][0]})


def run_night(env: dict[str, str], home: Path, day: dt.date, mode: str) -> dict[str, Any]:
    """Ingest and score ``day`` through Airflow; its wall time and every task's breakdown."""
    timings = home / "timings" / day.isoformat()
    night = {**env, "PIPELINE_CONFIG": str(mode_config(home, mode)), "PIPELINE_TIMINGS_DIR": str(timings)}
    if MODES[mode][1]:
        night["PIPELINE_SPARK_REMOTE"] = f"sc://127.0.0.1:{CONNECT_PORT}"
    conf = json.dumps({"run_date": day.isoformat()})
    commands = {dag: run(night, "airflow", "dags", "test", dag, "--conf", conf,
                         log=home / "logs" / f"{dag}-{day}.log") for dag in DAGS}
    records = [json.loads(p.read_text()) for p in sorted(timings.glob("*.json"))]
    tasks = [task_breakdown(ti, records) for dag in DAGS for ti in task_instances(home, dag)]
    return {"day": day.isoformat(), **night_breakdown(commands, tasks)}


def task_instances(home: Path, dag_id: str) -> list[dict[str, Any]]:
    """The newest run's task instances of ``dag_id``: task, start and end (epoch seconds)."""
    with sqlite3.connect(home / "airflow" / "airflow.db") as db:
        run_id = db.execute("SELECT run_id FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1",
                            (dag_id,)).fetchone()[0]
        rows = db.execute("SELECT task_id, map_index, start_date, end_date FROM task_instance "
                          "WHERE dag_id = ? AND run_id = ? AND start_date IS NOT NULL ORDER BY start_date",
                          (dag_id, run_id)).fetchall()

    def epoch(text: str) -> float:
        return dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC).timestamp()

    return [{"task": task if index < 0 else f"{task}[{index}]", "start": epoch(begun), "end": epoch(ended)}
            for task, index, begun, ended in rows]


def task_breakdown(ti: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """One task: its seconds, split into :data:`PARTS` when a job's timings fall inside it."""
    seconds = round(ti["end"] - ti["start"], 3)
    inside = [r for r in records if r["process_started"] and ti["start"] <= r["process_started"] <= ti["end"]]
    if not inside:
        return {"task": ti["task"], "seconds": seconds, "parts": None}
    job = inside[0]
    parts = dict.fromkeys(PARTS, 0.0)
    parts["spark-submit + JVM"] = job["process_started"] - ti["start"]
    parts["teardown"] = ti["end"] - job["main_ended"]
    for name, value in job["seconds"].items():
        key = name if name in parts else "work"  # a job's own extra phases (GX expectations) are work
        parts[key] += value or 0.0
    return {"task": ti["task"], "job": job["job"], "seconds": seconds,
            "parts": {k: round(v, 3) for k, v in parts.items()}}


def night_breakdown(commands: dict[str, float], tasks: list[dict[str, Any]]) -> dict[str, Any]:
    """A night's wall time, its split by part over the Spark tasks plus Airflow, and the fixed share."""
    wall = sum(commands.values())
    spark_tasks = [t for t in tasks if t["parts"]]
    totals = {p: round(sum(t["parts"][p] for t in spark_tasks), 2) for p in PARTS}
    totals["Airflow"] = round(wall - sum(t["seconds"] for t in spark_tasks), 2)
    return {"wall_s": round(wall, 1), "commands_s": commands, "tasks": tasks, "parts_s": totals,
            "work_s": totals["work"], "fixed_share": round(1 - totals["work"] / wall, 3) if wall else None}


def best_nights(nights: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per mode, its fastest night."""
    best: dict[str, dict[str, Any]] = {}
    for night in nights:
        if night["mode"] not in best or night["wall_s"] < best[night["mode"]]["wall_s"]:
            best[night["mode"]] = night
    return best


def report(result: dict[str, Any]) -> str:
    """The Markdown report: per mode the best night's split, and every night's total."""
    from benchmarks.common import machine

    host = machine()
    best = result["best"]
    lines = [f"# One nightly run of one day ({dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; {host['cpu_count']} "
             f"cores, {host['platform']}; load average now {[round(x, 2) for x in os.getloadavg()]})", "",
             f"Setup, not timed: {result['setup_s']}.", ""]
    columns = ["part", *[f"{m}: {n['day']} (s)" for m, n in best.items()]]
    rows = [[part, *[f"{n['parts_s'][part]:.1f}" for n in best.values()]] for part in (*PARTS, "Airflow")]
    rows.append(["**total (wall)**", *[f"**{n['wall_s']:.1f}**" for n in best.values()]])
    rows.append(["fixed share", *[f"{n['fixed_share']:.0%}" for n in best.values()]])
    lines += [markdown_table(columns, rows), ""]
    if "before" in best:
        lines += [f"{mode} / before: {night['wall_s'] / best['before']['wall_s']:.2f}x"
                  for mode, night in best.items() if mode != "before"] + [""]
    for mode, night in best.items():
        lines += [f"## {mode}: {night['day']}, task by task", "",
                  markdown_table(["task", "seconds", *PARTS],
                                 [[t["task"], f"{t['seconds']:.1f}",
                                   *[f"{t['parts'][p]:.1f}" if t["parts"] else "" for p in PARTS]]
                                  for t in night["tasks"]]), ""]
    lines += ["## Every night", "", markdown_table(
        ["day", "mode", "wall (s)", "ingest (s)", "score (s)", "work (s)", "fixed share"],
        [[n["day"], n["mode"], f"{n['wall_s']:.1f}", *[f"{n['commands_s'][d]:.1f}" for d in DAGS],
          f"{n['work_s']:.1f}", f"{n['fixed_share']:.0%}"] for n in result["nights"]]),
        "", "![the nightly run's time, part by part](nightly-breakdown.png)", ""]
    return "\n".join(lines)


def plot(path: Path, best: dict[str, dict[str, Any]]) -> Path:
    """Stacked bars: per mode, the best night's seconds by part."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 2 + 0.9 * len(best)))
    ax = fig.add_subplot()
    labels = [f"{mode}\n{night['day']}" for mode, night in best.items()]
    left = [0.0] * len(best)
    for part in ("Airflow", *PARTS):
        widths = [night["parts_s"][part] for night in best.values()]
        ax.barh(labels, widths, left=left, label=part)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for y, total in enumerate(left):
        ax.text(total, y, f" {total:.0f} s", va="center")
    ax.set(xlabel="seconds", title="one nightly run of one day: where the time goes")
    ax.invert_yaxis()
    ax.legend(fontsize=7, ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


if __name__ == "__main__":
    main()

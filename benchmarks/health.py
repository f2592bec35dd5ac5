"""Benchmark: the Model health page with a year of days, its JSON and its HTML.

``python -m benchmarks.health --help`` lists its options.

Writes a synthetic lake (:func:`synthetic_lake`: ``--days`` days of the monitoring zone, decay, drift
and training reports, in the form the monitor job, the decay check, the score job and the train job
write them) and measures, best of ``--repeat`` after one warm-up:

- ``read (cold)``: :func:`orchestration.health.view.model_health` with an empty document cache (the
  first request after the API server started: every file listed, read and parsed);
- ``read (warm)``: the same with the cache filled (every later request: the listings only);
- ``JSON``: the warm read plus ``json.dumps`` (what ``/model-health/api/health`` answers);
- ``HTML``: the warm read plus :func:`orchestration.health.page.render` (the page).

The target: the page (warm) under 1 s with 365 days. Prints a Markdown table and writes
``health.json`` to ``--out``. The same synthetic lake feeds the tests and the page's screenshot
(``scripts/health_screenshot.py``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.harness import arguments, best_of, markdown_table, start, write_results

MODEL = "flights_delay"
FEATURES = ("distance", "dep_hour", "month", "day_of_week", "temp", "wind_speed", "visib", "precip",
            "origin", "carrier", "dest", "model_family")
IGNORED = ("day_of_week", "month")  # reported, not alerted on (a day has one of each)
SEGMENTS = (("origin", ("EWR", "JFK", "LGA")), ("carrier", ("UA", "B6", "EV", "DL")))
TARGET_SECONDS = 1.0


def _interval(value: float, half: float) -> dict[str, float]:
    return {"value": round(value, 6), "low": round(value - half, 6), "high": round(value + half, 6)}


def _metrics(rng: random.Random, auc: float, rows: int) -> dict[str, dict[str, float]]:
    half = 1.2 / math.sqrt(max(rows, 1))
    rate = 0.23 + rng.gauss(0, 0.02)
    return {
        "roc_auc": _interval(auc, half), "pr_auc": _interval(auc - 0.25, half * 1.3),
        "log_loss": _interval(0.5 + (0.66 - auc), half), "brier": _interval(0.16 + (0.66 - auc) / 3, half / 3),
        "ece": _interval(abs(rng.gauss(0.03, 0.01)), half / 2),
        "mean_prediction": _interval(rate + rng.gauss(0, 0.01), 0.01), "outcome_rate": _interval(rate, 0.02),
    }


def _entry(rng: random.Random, version: str, role: str, auc: float, holdout: float, status: str) -> dict[str, Any]:
    rows = rng.randint(800, 1000)
    with_outcome = 0 if status == "no_outcomes" else rows - rng.randint(5, 30) if status == "ok" else 0
    metrics = _metrics(rng, auc + rng.gauss(0, 0.012), with_outcome) if status == "ok" else {}
    estimate_auc = round(auc + rng.gauss(0, 0.01), 6)
    estimate = {"roc_auc": estimate_auc, "log_loss": round(0.5 + (0.66 - estimate_auc), 6), "error": None}
    if status == "ok":
        estimate["error"] = {"roc_auc": round(metrics["roc_auc"]["value"] - estimate_auc, 6),
                             "log_loss": round(metrics["log_loss"]["value"] - estimate["log_loss"], 6)}
    segments = [{"segment": segment, "value": value, "rows": rows // len(values),
                 "rows_with_outcome": with_outcome // len(values),
                 "metrics": _metrics(rng, auc + rng.gauss(0, 0.03), with_outcome // len(values)) if metrics else {}}
                for segment, values in SEGMENTS for value in values]
    return {
        "model_name": MODEL, "model_version": version, "role": role, "status": status, "rows": rows,
        "rows_with_outcome": with_outcome, "predictions_without_outcome": rows - with_outcome if status == "ok" else 0,
        "holdout": {"roc_auc": holdout, "pr_auc": holdout - 0.25, "log_loss": 0.5, "brier": 0.16, "ece": 0.03},
        "metrics": metrics, "segments": segments, "estimate": estimate,
        "mlflow_run_id": f"monitor{version}", "mlflow_experiment_id": "7",
    }


def _plan(days: int) -> dict[str, int]:
    """The days (index from the first) of the story the synthetic lake tells."""
    return {"weekly": 6, "drift_first": max(8, days // 3), "drift_last": max(9, days // 3 + 2),
            "decay_start": max(12, days * 55 // 100), "decay": max(16, days * 70 // 100),
            "no_outcomes": max(5, days // 6), "awaiting": 2}


def synthetic_lake(lake: Any, first: dt.date, days: int, seed: int = 13) -> dict[str, Any]:
    """Write ``days`` days from ``first`` of monitoring, decay, drift and training reports into
    ``lake`` (a :class:`jobs.lake.layout.Lake`) in the contract's form, telling one story: version 1
    is champion; a weekly retraining adds version 2 (rejected: a challenger); a drift episode
    retrains version 3 (a challenger); the champion's realized ROC AUC falls from the
    ``decay_start`` day, the decay check triggers on the ``decay`` day, which retrains version 4
    (promoted: champion the day after; version 1 is no longer scored); one day has no outcomes
    (all cancelled); the last days await their outcomes. Returns the story's days and versions."""
    from jobs.lake.layout import DECAY_REPORT, DRIFT_REPORT, MONITORING_REPORT
    from jobs.lake.storage import write_text

    rng = random.Random(seed)
    plan = _plan(days)
    holdout = {"1": 0.66, "2": 0.655, "3": 0.658, "4": 0.67}
    trainings = {plan["weekly"]: ("2", "schedule", "the weekly schedule", "rejected"),
                 plan["drift_last"]: ("3", "drift", "drift on {day}: visib: PSI 0.310 > 0.2", "rejected"),
                 plan["decay"]: ("4", "decay", "decay of version 1 on {day}: realized roc_auc below the holdout",
                                 "promoted")}
    versions = {"1": "champion"}
    for index in range(days):
        day = first + dt.timedelta(days=index)
        awaiting = index >= days - plan["awaiting"]
        status = "awaiting_outcomes" if awaiting else "no_outcomes" if index == plan["no_outcomes"] else "ok"
        entries = []
        for version, role in versions.items():
            auc = holdout[version]
            if version == "1" and index >= plan["decay_start"]:
                auc -= min(0.09, 0.01 * (index - plan["decay_start"] + 1))
            entries.append(_entry(rng, version, role, auc, holdout[version], status))
        record = {"day": day.isoformat(), "label_delay_days": 0, "outcomes": "awaiting" if awaiting else "in",
                  "models": entries}
        write_text(f"{lake.partition(lake.monitoring, day)}/{MONITORING_REPORT}", json.dumps(record))
        champion = next(v for v, r in versions.items() if r == "champion")
        decayed = index == plan["decay"]
        write_text(lake.report("decay", day, DECAY_REPORT), json.dumps({
            "day": day.isoformat(), "model_name": MODEL, "model_version": champion, "decayed": decayed,
            "triggered": decayed, "status": "judged",
            "reasons": [f"realized roc_auc 0.590 (95% interval 0.570..0.610) over the last 7 days is 0.070 worse "
                        f"than the holdout's {holdout[champion]:.3f} (margin 0.03)"] if decayed else [],
            "days": [], "metric_name": "roc_auc", "holdout": holdout[champion], "margin": 0.03, "max_ece": 0.1,
            "metric": None, "ece": None}))
        drifting = plan["drift_first"] <= index <= plan["drift_last"]
        features = {name: {"kind": "numeric", "psi": round(abs(rng.gauss(0.02, 0.015)) + (0.3 if drifting and name
                                                                                          == "visib" else 0), 6),
                           "monitored": name not in IGNORED} for name in FEATURES}
        for name in IGNORED:
            features[name]["psi"] = round(0.6 + rng.random(), 6)  # one day of the week against seven
        write_text(lake.report("drift", day, DRIFT_REPORT), json.dumps({
            "run_date": day.isoformat(), "model_name": MODEL, "model_version": champion, "rows": 900,
            "status": "drifted" if drifting else "stable", "drifted": drifting,
            "reasons": ["visib: PSI 0.310 > 0.2"] if drifting else [], "thresholds": {"psi": 0.2},
            "features": features, "prediction": {"psi": round(abs(rng.gauss(0.01, 0.01)), 6)}}))
        if index in trainings:
            version, trigger, started_by, decision = trainings[index]
            write_text(lake.report("training", day), json.dumps({
                "model_name": MODEL, "model_version": version, "run_id": f"train{version}", "experiment_id": "3",
                "run_url": "", "metrics": {"roc_auc": holdout[version]},
                "gate": {"gate_decision": decision, "gate_reason": f"version {version} {decision}"},
                "trigger": trigger, "started_by": started_by.format(day=day),
                "airflow_run_id": f"asset_triggered__{day}T01:00:00+00:00" if trigger != "schedule" else None}))
            if decision == "promoted":
                versions = {version: "champion", **{v: "challenger" for v in ("3", "2") if v in versions}}
            else:
                versions[version] = "challenger"
    return {"plan": plan, "first": first.isoformat(), "days": days}


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, repeat=5)
    parser.add_argument("--days", type=int, default=365, help="days of the synthetic lake (default: %(default)s)")
    args = parser.parse_args(argv)
    out = start(args.out)
    seconds = run(args.days, args.repeat)
    met = seconds["HTML"] <= TARGET_SECONDS
    print(markdown_table(["measure", "seconds"], [[k, f"{v:.3f}"] for k, v in seconds.items()]))
    verdict = "met" if met else "not met"
    print(f"\ntarget: the page (warm) in at most {TARGET_SECONDS} s with {args.days} days: {verdict}")
    write_results(out, "health", {"days": args.days, "seconds": seconds,
                                  "target": {"html_s": TARGET_SECONDS, "met": met}})


def run(days: int, repeat: int) -> dict[str, float]:
    """Seconds of each measure (see the module docstring) on a fresh synthetic lake of ``days`` days."""
    from jobs.lake.layout import Lake
    from orchestration.health.page import render
    from orchestration.health.view import DocumentCache, model_health

    with tempfile.TemporaryDirectory(prefix="health-bench-") as folder:
        lake = Lake(str(Path(folder) / "lake"))
        synthetic_lake(lake, dt.date(2013, 1, 1), days)
        cache = DocumentCache()
        results = {
            "read (cold)": best_of(repeat, lambda: model_health(lake, cache=DocumentCache())),
            "read (warm)": best_of(repeat, lambda: model_health(lake, cache=cache)),
            "JSON": best_of(repeat, lambda: json.dumps(model_health(lake, cache=cache))),
            "HTML": best_of(repeat, lambda: render(model_health(lake, cache=cache))),
        }
    return {name: round(value, 4) for name, value in results.items()}


if __name__ == "__main__":
    main()

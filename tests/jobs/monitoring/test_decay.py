"""The decay rule on daily monitoring records (the monitoring zone's ``monitoring.json``)."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import numpy as np
import pytest

from jobs.monitoring.decay import already_triggered, champion_days, judge, pooled
from orchestration.decisions import decay_report

SPEC = SimpleNamespace(metric="roc_auc", window_days=7, margin=0.03, max_ece=0.10)
HOLDOUT = {"roc_auc": 0.70, "log_loss": 0.55, "ece": 0.03}


def interval(value: float, half: float) -> dict[str, float]:
    return {"value": value, "low": value - half, "high": value + half}


def record(day: dt.date, auc: float, half: float, *, version: str = "1", ece: float = 0.03, rows: int = 900,
           status: str = "ok") -> dict:
    metrics = {"roc_auc": interval(auc, half), "ece": interval(ece, 0.01)} if status == "ok" else {}
    return {"day": day.isoformat(), "status": status, "models": [
        {"model_name": "m", "model_version": version, "role": "champion", "status": status, "rows": rows,
         "rows_with_outcome": rows if status == "ok" else 0, "metrics": metrics, "holdout": HOLDOUT}]}


def days(n: int, start: dt.date = dt.date(2013, 2, 1)) -> list[dt.date]:
    return [start + dt.timedelta(days=i) for i in range(n)]


def test_a_steady_decay_over_the_window_is_found_with_its_reason():
    records = [record(d, 0.62, 0.04) for d in days(7)]
    verdict = judge(records, "m", "1", HOLDOUT, SPEC)
    assert verdict["decayed"] and verdict["status"] == "judged"
    assert verdict["metric"]["high"] < 0.70  # the pooled interval excludes the holdout value
    assert "realized roc_auc 0.620" in verdict["reasons"][0] and "2013-02-01..2013-02-07" in verdict["reasons"][0]


def test_one_noisy_day_never_retrains():
    # six days as good as the holdout, one terrible day with a wide interval (a small, noisy day)
    records = [record(d, 0.70, 0.04) for d in days(6)] + [record(dt.date(2013, 2, 7), 0.40, 0.25, rows=60)]
    assert not judge(records, "m", "1", HOLDOUT, SPEC)["decayed"]
    # and a single bad day alone is not a window
    verdict = judge([record(dt.date(2013, 2, 7), 0.40, 0.05)], "m", "1", HOLDOUT, SPEC)
    assert not verdict["decayed"] and verdict["status"].startswith("not enough days: 1 ")


def test_worse_by_more_than_the_margin_but_an_interval_that_holds_the_holdout_is_not_decay():
    records = [record(d, 0.66, 0.30) for d in days(7)]  # very wide daily intervals
    verdict = judge(records, "m", "1", HOLDOUT, SPEC)
    assert verdict["metric"]["high"] > 0.70 and not verdict["decayed"]


def test_a_small_drop_within_the_margin_is_not_decay():
    assert not judge([record(d, 0.68, 0.01) for d in days(7)], "m", "1", HOLDOUT, SPEC)["decayed"]


def test_lost_calibration_is_decay_even_with_a_good_auc():
    records = [record(d, 0.71, 0.03, ece=0.20) for d in days(7)]
    verdict = judge(records, "m", "1", HOLDOUT, SPEC)
    assert verdict["decayed"] and verdict["reasons"][0].startswith("calibration gone: ECE 0.200")


def test_lower_is_better_metrics_decay_upwards():
    spec = SimpleNamespace(metric="log_loss", window_days=3, margin=0.02, max_ece=0.10)
    records = [record(d, 0.0, 0.0) for d in days(3)]
    for r in records:
        r["models"][0]["metrics"]["log_loss"] = interval(0.65, 0.02)
    assert judge(records, "m", "1", HOLDOUT, spec)["decayed"]
    for r in records:
        r["models"][0]["metrics"]["log_loss"] = interval(0.50, 0.02)  # better than the holdout's 0.55
    assert not judge(records, "m", "1", HOLDOUT, spec)["decayed"]


def test_only_the_judged_version_counts_and_days_without_outcomes_are_left_out():
    old = [record(d, 0.55, 0.02, version="1") for d in days(7)]
    new = [record(d, 0.70, 0.02, version="2") for d in days(7, dt.date(2013, 2, 8))]
    empty = [record(dt.date(2013, 2, 15), 0.0, 0.0, version="2", status="no_outcomes")]
    assert judge(old + new, "m", "1", HOLDOUT, SPEC)["decayed"]
    assert not judge(old + new + empty, "m", "2", HOLDOUT, SPEC)["decayed"]  # a new champion: a clean slate
    assert len(champion_days(old + new + empty, "m", "2")) == 7


def test_the_pooled_interval_is_the_weighted_mean_with_combined_standard_errors():
    entries = [{"rows_with_outcome": 100, "metrics": {"roc_auc": interval(0.6, 0.196)}},
               {"rows_with_outcome": 300, "metrics": {"roc_auc": interval(0.8, 0.098)}}]
    found = pooled(entries, "roc_auc")
    se = np.sqrt((0.25 * 0.1) ** 2 + (0.75 * 0.05) ** 2)
    assert found["value"] == pytest.approx(0.75)
    assert found["high"] - found["value"] == pytest.approx(1.959964 * se, rel=1e-3)
    assert pooled([{"rows_with_outcome": 0, "metrics": {}}], "roc_auc") is None


def test_a_decay_starts_one_retraining_per_version_within_the_window():
    records = [record(d, 0.60, 0.02) for d in days(8)]
    first = decay_report(records[:7], [], "m", "1", dt.date(2013, 2, 7), SPEC)
    assert first["triggered"] and first["holdout"] == 0.70
    second = decay_report(records, [first], "m", "1", dt.date(2013, 2, 8), SPEC)
    assert second["decayed"] and not second["triggered"] and "2013-02-07 already started" in second["status"]
    later = dt.date(2013, 2, 7) + dt.timedelta(days=SPEC.window_days + 1)
    assert already_triggered([first], "1", later, SPEC.window_days) is None  # the retraining lost long ago: again
    assert already_triggered([first], "2", dt.date(2013, 2, 8), SPEC.window_days) is None  # another version


def test_a_rerun_of_the_check_on_the_triggering_day_starts_nothing_new():
    records = [record(d, 0.60, 0.02) for d in days(7)]
    first = decay_report(records, [], "m", "1", dt.date(2013, 2, 7), SPEC)
    again = decay_report(records, [first], "m", "1", dt.date(2013, 2, 7), SPEC)  # the task cleared and re-run
    assert first["triggered"] and again["decayed"] and not again["triggered"]
    assert "2013-02-07 already started" in again["status"]


def test_the_new_champion_is_not_judged_on_the_days_whose_decay_retrained_its_predecessor():
    one_day = SimpleNamespace(**{**vars(SPEC), "window_days": 1})
    old = decay_report([record(dt.date(2013, 2, 1), 0.40, 0.02)], [], "m", "1", dt.date(2013, 2, 1), one_day)
    assert old["triggered"] and old["days"] == ["2013-02-01"]
    # version 2, promoted, re-scores the decayed day: its outcomes are just as bad for it
    rescored = [record(dt.date(2013, 2, 1), 0.40, 0.02, version="2")]
    new = decay_report(rescored, [old], "m", "2", dt.date(2013, 2, 1), one_day)
    assert not new["decayed"] and not new["triggered"] and new["status"].startswith("not enough days")
    # a day it serves afterwards is judged as usual
    later = [*rescored, record(dt.date(2013, 2, 2), 0.40, 0.02, version="2")]
    assert decay_report(later, [old], "m", "2", dt.date(2013, 2, 2), one_day)["triggered"]


def test_a_rewritten_day_keeps_the_verdicts_that_started_a_retraining():
    from jobs.monitoring.decay import EARLIER, carried, verdicts

    one_day = SimpleNamespace(**{**vars(SPEC), "window_days": 1})
    old = decay_report([record(dt.date(2013, 2, 1), 0.40, 0.02)], [], "m", "1", dt.date(2013, 2, 1), one_day)
    rerun = decay_report([record(dt.date(2013, 2, 1), 0.40, 0.02)], verdicts(old), "m", "1", dt.date(2013, 2, 1),
                         one_day)
    rerun = {**rerun, EARLIER: carried(old)}
    new = decay_report([record(dt.date(2013, 2, 1), 0.40, 0.02, version="2")], verdicts(rerun), "m", "2",
                       dt.date(2013, 2, 1), one_day)
    new = {**new, EARLIER: carried(rerun)}
    # the one triggered verdict survives both rewrites, once; the untriggered re-run is not kept
    assert [(v["model_version"], v["triggered"]) for v in verdicts(new)] == [("1", True), ("2", False)]
    # and still stops version 1 from starting another retraining on the next day
    later = [record(dt.date(2013, 2, d), 0.40, 0.02) for d in (1, 2)]
    assert not decay_report(later, verdicts(new), "m", "1", dt.date(2013, 2, 2), one_day)["triggered"]
    assert carried(None) == []

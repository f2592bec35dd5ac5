"""Decay: has the champion's realized quality fallen so far below its holdout that it should be
retrained? A pure function of the monitoring zone's daily records (``monitoring.json``).

Over the last ``decay.window_days`` monitored days of one model version (days with outcomes only):

- **metric decay**: the mean daily realized ``decay.metric`` (weighted by the rows with an outcome)
  is worse than the version's holdout value by more than ``decay.margin`` *and* its 95% interval
  excludes the holdout value. The interval pools the days' bootstrap intervals (each day's standard
  error from its interval, combined for the weighted mean), so one noisy day of 900 rows never
  retrains: its interval is wide and the pooled one stays wide until more days agree.
- **calibration gone**: the pooled expected calibration error exceeds ``decay.max_ece`` and its
  interval lies wholly above it.

The verdict also lists the window's days whose served level the monitor flagged
(``miscalibrated_days``: the mean served probability far from the realized rate, with the part of
the day's recent-outcome shift in it); they are shown, not a reason to retrain on their own.

Fewer monitored days than the window judge nothing yet ("not enough days"). The records of other
versions are ignored, and so are the days whose decay already started a retraining (``consumed``:
the days of an earlier triggered verdict of another version): a new champion starts with a clean
slate, so the decay that started its retraining does not start another once the new champion
scores, even when the new champion re-scores the decayed days themselves.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from jobs.metrics import LOWER_IS_BETTER

Z95 = 1.959964


def champion_days(records: list[dict[str, Any]], model_name: str, version: str,
                  consumed: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The entries of ``version`` in daily records (``monitoring.json`` documents), oldest first,
    each with its ``day``; days without outcomes and ``consumed`` days are left out."""
    found = []
    for record in sorted(records, key=lambda r: r["day"]):
        if record["day"] in consumed:
            continue
        for entry in record.get("models", []):
            if (entry.get("model_name") == model_name and str(entry.get("model_version")) == str(version)
                    and entry.get("status") == "ok"):
                found.append({**entry, "day": record["day"]})
    return found


def pooled(days: list[dict[str, Any]], metric: str) -> dict[str, float] | None:
    """The outcome-weighted mean of a metric over days, with a 95% interval from the days' own
    intervals (None when no day has the metric)."""
    parts = []
    for day in days:
        found = (day.get("metrics") or {}).get(metric) or {}
        value, low, high = found.get("value"), found.get("low"), found.get("high")
        weight = day.get("rows_with_outcome") or 0
        if value is None or low is None or high is None or weight <= 0:
            continue
        parts.append((float(value), max((float(high) - float(low)) / (2 * Z95), 0.0), float(weight)))
    if not parts:
        return None
    total = sum(w for _, _, w in parts)
    mean = sum(v * w for v, _, w in parts) / total
    se = math.sqrt(sum((w / total) ** 2 * s ** 2 for _, s, w in parts))
    return {"value": mean, "low": mean - Z95 * se, "high": mean + Z95 * se, "days": len(parts)}


def judge(records: list[dict[str, Any]], model_name: str, version: str, holdout: dict[str, float],
          spec: Any, consumed: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The decay verdict for ``version`` over the last ``spec.window_days`` monitored days of
    ``records`` (``consumed`` days left out): ``decayed``, the ``reasons`` in words, the pooled
    ``metric`` and ``ece``."""
    days = champion_days(records, model_name, version, consumed)[-spec.window_days:]
    verdict: dict[str, Any] = {"model_name": model_name, "model_version": str(version), "decayed": False,
                               "reasons": [], "days": [d["day"] for d in days], "metric_name": spec.metric,
                               "holdout": holdout.get(spec.metric), "margin": spec.margin, "max_ece": spec.max_ece}
    # days whose served level was far from the truth (the monitor's level check): shown, not a
    # retraining's reason on their own (a level moved by the day's shift is not the model's decay)
    verdict["miscalibrated_days"] = [{"day": d["day"], **d["level"]} for d in days
                                     if (d.get("level") or {}).get("flagged")]
    if len(days) < spec.window_days:
        verdict["status"] = (f"not enough days: {len(days)} monitored day(s) of version {version} with outcomes, "
                             f"decay is judged over {spec.window_days}")
        return verdict
    verdict["status"] = "judged"
    metric, ece = pooled(days, spec.metric), pooled(days, "ece")
    verdict["metric"], verdict["ece"] = metric, ece
    span = f"{days[0]['day']}..{days[-1]['day']}"
    base = holdout.get(spec.metric)
    if metric is not None and base is not None and math.isfinite(base):
        lower = spec.metric in LOWER_IS_BETTER
        worse_by = metric["value"] - base if lower else base - metric["value"]
        excluded = metric["low"] > base if lower else metric["high"] < base
        if worse_by > spec.margin and excluded:
            verdict["reasons"].append(
                f"realized {spec.metric} {metric['value']:.3f} (95% interval {metric['low']:.3f}.."
                f"{metric['high']:.3f}) over {span} is {worse_by:.3f} worse than the holdout's {base:.3f} "
                f"(margin {spec.margin})")
    if ece is not None and ece["value"] > spec.max_ece and ece["low"] > spec.max_ece:
        verdict["reasons"].append(
            f"calibration gone: ECE {ece['value']:.3f} (95% interval {ece['low']:.3f}..{ece['high']:.3f}) over {span} "
            f"exceeds {spec.max_ece}")
    verdict["decayed"] = bool(verdict["reasons"])
    return verdict


def already_triggered(previous: list[dict[str, Any]], version: str, day: dt.date, window_days: int) -> str | None:
    """The day of an earlier decay report that started a retraining for ``version`` on ``day``
    itself (a re-run of the check) or within the ``window_days`` days before it (its retraining is
    under way or lost: no second one), else None."""
    for report in sorted(previous, key=lambda r: r["day"], reverse=True):
        earlier = dt.date.fromisoformat(report["day"])
        if (report.get("triggered") and str(report.get("model_version")) == str(version)
                and dt.timedelta(0) <= day - earlier <= dt.timedelta(days=window_days)):
            return report["day"]
    return None


def consumed_days(previous: list[dict[str, Any]], version: str) -> frozenset[str]:
    """The days whose decay already started a retraining of another version than ``version``
    (the days of earlier triggered reports): not judged again for the version that replaced it."""
    return frozenset(day for report in previous
                     if report.get("triggered") and str(report.get("model_version")) != str(version)
                     for day in report.get("days", []))


EARLIER = "earlier"  # a day's decay report: the triggered verdicts it replaced, oldest first


def verdicts(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every verdict a day's decay report holds: the triggered ones it replaced (a re-run of the
    check, or a new champion that re-scored the day), then its own."""
    return [*report.get(EARLIER, []), {k: v for k, v in report.items() if k != EARLIER}]


def carried(old: dict[str, Any] | None) -> list[dict[str, Any]]:
    """What a day's new decay report keeps of the one it replaces: the verdicts that started a
    retraining (so the page still shows them, and no later check starts a second one)."""
    if old is None:
        return []
    *earlier, current = verdicts(old)
    return [*earlier, current] if current.get("triggered") else earlier

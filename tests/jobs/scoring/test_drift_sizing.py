"""Drift sized to a feed's volume: days drawn from the training window's own rows are rarely called
drifted, at 100, 300 or 1,000 rows a day, while a real shift still is. No Spark: the window's bins
and each day's counts are the driver's (local_feature_bins, local_bucket_counts), as Spark's are."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from jobs.config import DriftSpec
from jobs.scoring.drift import PREDICTION, judge, local_bucket_counts, local_feature_bins, with_predictions

DAYS = 200  # days drawn at each volume
FALSE_ALARMS = 0.05  # the most a feed may see of days drawn from its own training window called drifted


def window(rows: int = 4_000, seed: int = 1) -> pd.DataFrame:
    """A training window shaped like a small real feed's (a month of about 135 rows a day): a normal
    and a skewed number, a clock hour, a number with gaps, a categorical of 33 values (a few common,
    a long tail) and one of 5."""
    rng = np.random.default_rng(seed)
    weights = 1 / (np.arange(33) + 3.0)
    tail = rng.choice(33, rows, p=weights / weights.sum())
    gaps = rng.normal(10, 3, rows)
    gaps[rng.random(rows) < 0.1] = np.nan
    return pd.DataFrame({
        "temp": rng.normal(12, 8, rows), "distance": rng.lognormal(6.5, 0.6, rows),
        "hour": rng.integers(5, 23, rows).astype(float), "visib": gaps,
        "station": [f"s{v}" for v in tail],
        "kind": rng.choice(["a", "b", "c", "d", "e"], rows, p=[.4, .3, .2, .07, .03]),
    })


def fitted(frame: pd.DataFrame, min_count: int = 5) -> SimpleNamespace:
    """What the drift baseline reads of a preprocessor: its columns and vocabularies."""
    categorical = ["station", "kind"]
    vocab = {c: sorted(v for v, n in frame[c].value_counts().items() if n >= min_count) for c in categorical}
    return SimpleNamespace(numeric=["temp", "distance", "hour", "visib"], categorical=categorical, vocab=vocab)


@pytest.fixture(scope="module")
def baseline():
    frame = window()
    pre = fitted(frame)
    predictions = np.random.default_rng(2).beta(2, 6, 5000)
    return frame, pre, with_predictions(local_feature_bins(frame, pre, 10), predictions, 10)


def day_counts(baseline_of, day: pd.DataFrame) -> dict[str, list[int]]:
    """A day's rows per bin of the baseline, with predictions drawn as the window's were."""
    _, pre, baseline = baseline_of
    edges = {c: b["edges"] for c, b in baseline["numeric"].items()}
    counts = local_bucket_counts(day, edges, pre.vocab)
    predictions = np.random.default_rng(len(day)).beta(2, 6, len(day))
    counts[PREDICTION] = np.bincount(np.searchsorted(baseline[PREDICTION]["edges"], predictions, side="right"),
                                     minlength=len(baseline[PREDICTION]["edges"]) + 2).tolist()
    return counts


def judged(baseline_of, day: pd.DataFrame, spec: DriftSpec) -> dict:
    return judge(baseline_of[2], day_counts(baseline_of, day), spec)


def flagged_share(baseline_of, rows: int, spec: DriftSpec, seed: int = 3) -> float:
    frame = baseline_of[0]
    rng = np.random.default_rng(seed)
    days = [frame.iloc[rng.choice(len(frame), rows, replace=False)] for _ in range(DAYS)]
    return sum(judged(baseline_of, day, spec)["drifted"] for day in days) / DAYS


@pytest.mark.parametrize("rows", [100, 300, 1000])
def test_days_drawn_from_the_training_window_are_rarely_called_drifted(baseline, rows):
    assert flagged_share(baseline, rows, DriftSpec()) <= FALSE_ALARMS


def test_psi_alone_calls_a_small_feed_drifted_on_many_days(baseline):
    """What the rule replaced: a fixed PSI threshold over every bin (no pooling, no chance) calls a
    day of 100 rows drifted several times as often as the rule allows, for the noise of a 33-value
    categorical's shares."""
    assert flagged_share(baseline, 100, DriftSpec(alpha=1.0, min_expected_rows=0)) > 4 * FALSE_ALARMS


@pytest.mark.parametrize("rows", [100, 300, 1000])
def test_a_real_shift_is_still_drifted_at_every_volume(baseline, rows):
    """Routes four times as long (the size of move the 2013 replay's drift events showed), or a
    station the window never had on a fifth of the rows: flagged, naming the feature."""
    frame = baseline[0]
    day = frame.sample(rows, random_state=4)
    longer = judged(baseline, day.assign(distance=day["distance"] * 4), DriftSpec())
    assert longer["drifted"] and any(r.startswith("distance:") for r in longer["reasons"])
    unknown = day.copy()
    unknown.loc[unknown.sample(frac=0.2, random_state=5).index, "station"] = "new"
    found = judged(baseline, unknown, DriftSpec())
    assert found["drifted"] and any(r.startswith("station:") for r in found["reasons"]), found["reasons"]


def test_a_day_of_few_rows_pools_the_bins_it_cannot_tell_apart(baseline):
    day = baseline[0].sample(100, random_state=6)
    station = judged(baseline, day, DriftSpec())["features"]["station"]
    assert station["bins"] < len(baseline[2]["categorical"]["station"]["shares"])
    assert 0 <= station["chance"] <= 1


def _small_report(baseline_of, day: pd.DataFrame, run_id: str = "run-1") -> dict:
    """A day's drift report as the score job writes it for a day of too few rows: with its counts."""
    counts = day_counts(baseline_of, day)
    return {"model_run_id": run_id, **judge(baseline_of[2], counts, DriftSpec()), "counts": counts}


def test_a_small_feed_s_day_is_pooledpooled_with_the_days_before_it(baseline):
    """Days of 24 rows are too few alone; pooled newest first until 100 rows (five days), a shift
    of every day's temperature is drifted and days drawn from the window are stable. The pool stops
    at a day of another model, and at ``pool_days``, saying how many rows it reached."""
    from jobs.scoring.drift import headline, with_pooled

    frame, _, model = baseline
    rng = np.random.default_rng(11)

    def days(shift: float) -> list[dict]:
        drawn = [frame.iloc[rng.choice(len(frame), 24, replace=False)] for _ in range(5)]
        return [_small_report(baseline, day.assign(temp=day["temp"] + shift)) for day in drawn]

    spec = DriftSpec()
    for shift, status in ((15.0, "drifted"), (0.0, "stable")):
        today, *before = days(shift)
        assert today["status"] == "too_few_rows"
        earlier = [(f"2011-03-0{9 - n}", report) for n, report in enumerate(before)]
        pooled = with_pooled(model, today, earlier, spec)
        assert pooled["status"] == status, pooled["reasons"]
        assert pooled["pooled"] == {"days": ["2011-03-06", "2011-03-07", "2011-03-08", "2011-03-09"], "rows": 120}
        assert pooled["rows"] == 24 and pooled["counts"] == today["counts"]  # its own, for the days after it
        assert "(pooled with 4 day(s) before: 120 rows)" in headline(pooled)
    today, *before = days(15.0)
    other = [("2011-03-09", before[0]), ("2011-03-08", {**before[1], "model_run_id": "run-0"}), *
             [(f"2011-03-0{7 - n}", r) for n, r in enumerate(before[2:])]]
    short = with_pooled(model, today, other, spec)  # another model's day ends the pool
    assert short["status"] == "too_few_rows" and short["pooled"] == {"days": ["2011-03-09"], "rows": 48}
    assert "too few rows to judge drift (48 with 1 day(s) before < score.drift.min_rows 100)" in headline(short)
    assert with_pooled(model, today, other, DriftSpec(pool_days=1)) == today  # not pooled


def test_the_reports_a_day_pools_are_the_newest_before_it_in_the_lake(tmp_path):
    import datetime as dt

    from jobs.lake.layout import DRIFT_REPORT, Lake
    from jobs.lake.storage import write_json
    from jobs.scoring.job import earlier_reports

    lake = Lake(str(tmp_path))
    for day in (1, 2, 4, 5, 8):  # 03-03, 03-06 and 03-07 never scored
        write_json(lake.report("drift", dt.date(2011, 3, day), DRIFT_REPORT), {"day": day})
    found = earlier_reports(lake, dt.date(2011, 3, 8), 3)
    assert found == [("2011-03-05", {"day": 5}), ("2011-03-04", {"day": 4}), ("2011-03-02", {"day": 2})]
    assert earlier_reports(lake, dt.date(2011, 3, 1), 3) == [] and earlier_reports(Lake(str(tmp_path / "x")),
                                                                                   dt.date(2011, 3, 8), 3) == []

"""The recent-outcome shift's arithmetic (jobs/scoring/shift.py): the intercept solved from logit
bins, the reference days a day's shift may read (the label delay respected), and a lake's first
days left as the model predicts them, saying why. The shift in the score job, on a real lake and
model: tests/jobs/scoring/test_score.py."""

from __future__ import annotations

import datetime as dt
import math

import pytest

from jobs.config import ShiftSpec
from jobs.scoring.shift import LIMIT, day_shifts, reference_days, solve_shift

D = dt.date(2013, 3, 10)


def _sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z))


def test_the_solved_intercept_brings_the_mean_probability_to_the_realized_rate():
    """Rows whose positives were drawn at ``sigmoid(z + 0.7)`` give back 0.7; the mean it makes is
    the rate; rows all positive or all negative give the limit's side."""
    bins = [(z / 10, 100_000, round(100_000 * _sigmoid(z / 10 + 0.7))) for z in range(-30, 11)]
    delta = solve_shift(bins)
    assert delta == pytest.approx(0.7, abs=1e-4)
    rows = sum(n for _, n, _ in bins)
    made = sum(n * _sigmoid(z + delta) for z, n, _ in bins) / rows
    assert made == pytest.approx(sum(k for _, _, k in bins) / rows, abs=1e-9)
    assert solve_shift([(0.0, 10, 10)]) == pytest.approx(LIMIT, abs=1e-6)
    assert solve_shift([(0.0, 10, 0)]) == pytest.approx(-LIMIT, abs=1e-6)


@pytest.mark.parametrize("delay", [0, 2])
def test_a_days_reference_days_end_before_its_outcomes_could_land(delay):
    """Up to ``days`` days ending with D - 1 - delay, only those with features whose outcomes have
    landed (day + delay has features): a gap is left out, not filled; a lake's first day has none."""
    spec = ShiftSpec(days=3)
    lake = {D - dt.timedelta(days=k) for k in range(0, 30)} - {D - dt.timedelta(days=2 + delay)}
    assert reference_days(D, spec, delay, lake) == [D - dt.timedelta(days=3 + delay), D - dt.timedelta(days=1 + delay)]
    assert reference_days(D, spec, delay, {D}) == []
    if delay:  # a day whose outcomes land with a day the lake lacks is not read
        assert D - dt.timedelta(days=1 + delay) not in reference_days(D, spec, delay, lake - {D - dt.timedelta(days=1)})


def test_a_day_without_enough_landed_rows_is_not_shifted_and_says_why():
    spec = ShiftSpec(days=2, strength=0.5, min_rows=100)
    lake = {D - dt.timedelta(days=k) for k in range(0, 3)}
    bins = {D - dt.timedelta(days=1): [(0.0, 60, 30)], D - dt.timedelta(days=2): [(-1.0, 30, 20)]}
    found = day_shifts(bins, [D], spec, 0, lake)[D]
    assert found["logit_shift"] == 0.0 and found["rows"] == 90 and "at least 100 needed" in found["reason"]
    shifted = day_shifts(bins, [D], ShiftSpec(days=2, strength=0.5, min_rows=90), 0, lake)[D]
    assert shifted["realized_rate"] == pytest.approx(50 / 90)
    assert shifted["logit_shift"] == pytest.approx(0.5 * solve_shift([*bins[D - dt.timedelta(days=2)],
                                                                      *bins[D - dt.timedelta(days=1)]]), abs=1e-4)


@pytest.mark.parametrize(("settings", "message"), [({"days": -1}, "days\n.*greater than or equal to 0"),
                                                   ({"strength": 0.0}, "strength\n.*greater than 0"),
                                                   ({"min_rows": 0}, "min_rows\n.*greater than or equal to 1")])
def test_bad_settings_say_which(settings, message):
    with pytest.raises(ValueError, match=message):
        ShiftSpec(**settings)

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


def test_a_weekday_feed_counts_the_reference_days_and_the_label_delay_in_open_days():
    """Monday 2013-03-11 with a delay of one open day: Friday's outcomes land with Monday's ingest,
    so the last day read is Thursday, and the reference days are open days before it, the weekend
    passed over; every calendar day has features here, so only the calendar leaves them out."""
    from jobs.config import FeedCalendar
    from jobs.monitoring.job import monitored_days
    from jobs.monitoring.outcomes import outcomes_in

    weekdays, monday = FeedCalendar(days="weekdays"), dt.date(2013, 3, 11)
    lake = {monday - dt.timedelta(days=k) for k in range(0, 30)}
    assert reference_days(monday, ShiftSpec(days=3), 1, lake, weekdays) == [dt.date(2013, 3, d) for d in (5, 6, 7)]
    assert reference_days(monday, ShiftSpec(days=3), 1, lake) == [dt.date(2013, 3, d) for d in (7, 8, 9)]
    friday = dt.date(2013, 3, 8)
    assert outcomes_in({monday}, friday, 1, weekdays) and not outcomes_in({monday}, friday, 1)
    assert monitored_days(monday, 1, weekdays) == [friday, monday]  # its outcomes just landed
    assert monitored_days(monday, 1) == [dt.date(2013, 3, 10), monday]


def test_a_day_without_enough_landed_rows_is_not_shifted_and_says_why():
    spec = ShiftSpec(days=2, strength=0.5, min_rows=100)
    lake = {D - dt.timedelta(days=k) for k in range(0, 3)}
    bins = {D - dt.timedelta(days=1): [(0.0, 60, 30)], D - dt.timedelta(days=2): [(-1.0, 30, 20)]}
    found = day_shifts(bins, [D], spec, 0, lake)[D]
    assert found["logit_shift"] == 0.0 and found["rows"] == 90 and "at least 100 needed" in found["reason"]
    shifted = day_shifts(bins, [D], ShiftSpec(days=2, half_life_days=0, strength=0.5, min_rows=90), 0, lake)[D]
    assert shifted["realized_rate"] == pytest.approx(50 / 90)
    assert shifted["logit_shift"] == pytest.approx(0.5 * solve_shift([*bins[D - dt.timedelta(days=2)],
                                                                      *bins[D - dt.timedelta(days=1)]]), abs=1e-4)


@pytest.mark.parametrize("delay", [0, 1])
def test_the_last_landed_days_weigh_most_and_an_old_surge_fades(delay):
    """Each reference day's rows weigh ``2 ** (-age / half_life_days)``, age counted from
    D - 1 - delay: a week of delays that ended four days before weighs half of the quiet days
    after it, so D's level moves less than the plain mean of the fortnight would move it; 0 weighs
    every day alike (the rule before)."""
    last = D - dt.timedelta(days=1 + delay)
    lake = {D - dt.timedelta(days=k) for k in range(0, 20)}
    quiet = [(-2.0, 1000, round(1000 * _sigmoid(-2.0)))]  # the model right
    surge = [(-2.0, 1000, round(1000 * _sigmoid(-0.5)))]  # late flights the model did not see
    bins = {last - dt.timedelta(days=age): (surge if 4 <= age < 11 else quiet) for age in range(14)}
    spec = ShiftSpec(days=14, half_life_days=4, min_rows=1)
    found = day_shifts(bins, [D], spec, delay, lake)[D]
    weights = {age: 0.5 ** (age / 4) for age in range(14)}
    positives = sum(w * bins[last - dt.timedelta(days=age)][0][2] for age, w in weights.items())
    assert found["realized_rate"] == pytest.approx(positives / (1000 * sum(weights.values())), abs=1e-6)
    assert found["rows"] == 14_000 and found["half_life_days"] == 4
    alike = day_shifts(bins, [D], ShiftSpec(days=14, half_life_days=0, min_rows=1), delay, lake)[D]
    assert alike["realized_rate"] == pytest.approx(sum(b[0][2] for b in bins.values()) / 14_000, abs=1e-6)
    assert 0 < found["logit_shift"] < alike["logit_shift"]
    pooled = [(-2.0, 1000 * w, bins[last - dt.timedelta(days=a)][0][2] * w) for a, w in weights.items()]
    assert found["logit_shift"] == pytest.approx(solve_shift(pooled), abs=1e-4)
    # once the surge is over two weeks old, it is out of the window and D is matched to quiet days
    later = day_shifts(bins, [D + dt.timedelta(days=11)], spec, delay, lake | {D + dt.timedelta(days=11)})
    assert abs(later[D + dt.timedelta(days=11)]["logit_shift"]) < 0.01


@pytest.mark.parametrize(("settings", "message"), [({"days": -1}, "days\n.*greater than or equal to 0"),
                                                   ({"half_life_days": -1}, "half_life_days\n.*greater than or equal"),
                                                   ({"strength": 0.0}, "strength\n.*greater than 0"),
                                                   ({"min_rows": 0}, "min_rows\n.*greater than or equal to 1")])
def test_bad_settings_say_which(settings, message):
    with pytest.raises(ValueError, match=message):
        ShiftSpec(**settings)

"""A feed's calendar (``feed_calendar``) followed through the stages on the real example data of the
session lake (2013-01-01..10), landed as a weekday-only feed closed on New Year's Day whose
2013-01-08 landed without rows (an empty day, ``empty_days``): the validate and features jobs pass
over the closed and empty days and succeed, a window of closed days only has nothing
to do, and a training window with closed days inside it counts open days and finds every one's
features. The flights' own calendar (every day) is tested by every other test of the stages."""

from __future__ import annotations

import datetime as dt
import logging
import shutil
from pathlib import Path

import pytest

from jobs.lake.files import MissingPartitionError
from jobs.lake.layout import Lake

FIRST, LAST = dt.date(2013, 1, 1), dt.date(2013, 1, 10)  # a Tuesday (closed: New Year's Day) to a Thursday
CALENDAR = {"days": "weekdays", "closed": ["2013-01-01"], "empty_days": True}
OPEN = [dt.date(2013, 1, d) for d in (2, 3, 4, 7, 9, 10)]
CLOSED = [dt.date(2013, 1, d) for d in (1, 5, 6)]
EMPTY = dt.date(2013, 1, 8)
DAILY = ("flights", "weather")


def _partitions(zone: str) -> list[dt.date]:
    path = Path(zone)
    return sorted(dt.date.fromisoformat(p.name.removeprefix("date=")) for p in path.glob("date=*")) \
        if path.is_dir() else []


@pytest.fixture(scope="module")
def weekday_feed(lake, config_patch, tmp_path_factory):
    """(a lake whose raw daily tables hold only the open days, the config file with its calendar)."""
    root = tmp_path_factory.mktemp("weekday-feed")
    own = Lake(str(root / "lake"))
    shutil.copytree(f"{lake.root}/raw", f"{own.root}/raw")
    for table in DAILY:
        for day in CLOSED:
            shutil.rmtree(own.raw_partition(table, day))
    feed = Path(own.raw_file("flights", EMPTY))
    feed.write_text(feed.read_text().split("\n", 1)[0] + "\n")  # the header only: no flights that day
    settings = config_patch.write(root, feed_calendar=CALENDAR, validation={"great_expectations": False})
    return own, settings


@pytest.fixture(scope="module")
def ingested(weekday_feed):
    """The validate and features jobs run over the whole span, closed days inside it."""
    from jobs.features.job import main as features
    from jobs.validation.job import main as validate

    own, settings = weekday_feed
    run = ["--run-date", str(LAST), "--days", str((LAST - FIRST).days + 1), "--lake-root", own.root,
           "--config", str(settings)]
    validate([*run, "--run-id", "calendar"])
    features(run)
    return own, settings


@pytest.mark.slow
def test_a_weekday_feed_is_validated_and_featured_on_its_open_days_only(ingested):
    own, _ = ingested
    for table in DAILY:
        assert _partitions(own.validated(table)) == OPEN, table
    assert _partitions(own.features) == OPEN


@pytest.mark.slow
def test_without_its_calendar_the_same_feed_misses_partitions(spark, weekday_feed, config_without_gx):
    from jobs.validation.job import validate

    own, _ = weekday_feed
    with pytest.raises(MissingPartitionError, match="no raw partition of 'flights' for 2013-01-01"):
        validate(spark, own, config_without_gx, [FIRST, *OPEN[:1]], OPEN[0], "every-day", write=False)


@pytest.mark.slow
def test_a_window_of_closed_days_only_succeeds_with_nothing_to_do(ingested, caplog):
    from jobs.features.job import main as features
    from jobs.monitoring.job import main as monitor
    from jobs.scoring.job import main as score
    from jobs.validation.job import main as validate

    own, settings = ingested
    before = sorted(Path(own.root).rglob("*"))
    weekend = ["--run-date", "2013-01-06", "--days", "2", "--lake-root", own.root, "--config", str(settings)]
    with caplog.at_level(logging.INFO):
        for job in (validate, features, score, monitor):  # no model is registered: none is looked up
            job(weekend)
    assert caplog.text.count("2013-01-05, 2013-01-06 closed for the feed") == 4
    assert caplog.text.count("no open day in 2013-01-05..2013-01-06: nothing to do") == 4
    assert sorted(Path(own.root).rglob("*")) == before  # nothing written


@pytest.mark.slow
def test_a_training_window_counts_open_days_and_finds_their_features(spark, ingested, config, config_patch):
    from jobs.config import load_config, with_empty_days
    from jobs.training.data import feature_dirs, training_window

    own, settings = ingested
    calendar = with_empty_days(load_config(settings, profiles=(), overlays=()), own, LAST).feed_calendar
    assert calendar.closed == (FIRST, EMPTY)  # the empty day, found in the raw zone
    train = config_patch.replace(config, train={"train_days": 3, "validation_days": 1, "holdout_days": 2}).train
    window = training_window(LAST, train, OPEN, calendar)
    assert window == (OPEN[:3], OPEN[3:4], OPEN[4:])  # 6 open days over 9 calendar days
    for days in window:  # what the train and baselines jobs check before Spark reads a day
        assert feature_dirs(spark, own, days)
    sunday = training_window(dt.date(2013, 1, 6), train, OPEN, calendar)
    assert sunday[2] == [dt.date(2013, 1, 3), dt.date(2013, 1, 4)]  # the holdout ends with the Friday
    assert sunday[0] == [dt.date(2012, 12, d) for d in (27, 28, 31)]  # over a weekend and New Year's Day
    # an expanding window goes back over closed days, never stopping at one as at a gap
    expanding = config_patch.replace(config, train={"train_days": 2, "validation_days": 1, "holdout_days": 1,
                                                    "max_train_days": 5}).train
    assert training_window(LAST, expanding, OPEN, calendar)[0] == OPEN[:4]

"""Point-in-time history and calendar features (jobs/features/history.py) on the real example data
of the session lake (2013-01-01..10): no leak from a day's own or later outcomes, the label delay
respected, the first days and gaps flagged, the numbers equal to a plain pandas computation."""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import pandas as pd
import pytest

from jobs.features.job import build_features, read_inputs

D = dt.date(2013, 1, 8)
LAST = dt.date(2013, 1, 10)
FLIGHT = ["carrier", "flight", "origin", "sched_dep_time"]


def _days(first: dt.date, last: dt.date) -> list[dt.date]:
    return [first + dt.timedelta(days=k) for k in range((last - first).days + 1)]


def _changed(tables: dict, days: list[dt.date]) -> dict:
    """``tables`` with the outcomes (arrival delays) of ``days`` turned around: late becomes on time
    and on time two hours late."""
    from pyspark.sql import functions as F

    flights = tables["flights"]
    turned = F.when(F.col("arr_delay") > 15, F.lit(0.0)).otherwise(F.col("arr_delay") + 120)
    flights = flights.withColumn("arr_delay", F.when(F.col("date").isin(days), turned).otherwise(F.col("arr_delay")))
    return {**tables, "flights": flights}


def _day(frame, config) -> pd.DataFrame:
    columns = list(dict.fromkeys([*FLIGHT, "tailnum", *config.features.inputs, "label"]))
    return frame.toPandas().sort_values(FLIGHT).reset_index(drop=True)[columns]


@pytest.fixture(scope="module")
def delayed(config, config_patch):
    return config_patch.replace(config, monitoring={"label_delay_days": 2})


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0, 2])
def test_a_days_inputs_never_see_its_own_or_later_outcomes(spark, lake, config, delayed, delay):
    """Turning around the outcomes of every day from D - delay on changes none of D's model inputs
    (the scoring job predicts from these columns only); turning around the last day whose outcomes
    have landed, D - 1 - delay, changes D's history."""
    cfg = delayed if delay else config
    tables = read_inputs(spark, lake, cfg, _days(D, LAST))  # the days after D are in the frames too
    before = _day(build_features(tables, cfg, [D]), cfg)
    unseen = _day(build_features(_changed(tables, _days(D - dt.timedelta(days=delay), LAST)), cfg, [D]), cfg)
    inputs = cfg.features.inputs
    pd.testing.assert_frame_equal(unseen[inputs], before[inputs])
    if delay == 0:
        assert (unseen["label"] != before["label"]).any()  # the day's own outcomes did change
    landed = _day(build_features(_changed(tables, [D - dt.timedelta(days=1 + delay)]), cfg, [D]), cfg)
    history = [c for c in inputs if c.startswith("hist_") and "_rate" in c]
    moved = [c for c in history if not landed[c].equals(before[c])]
    # every window reaches that day, and every key's rate moves with it
    assert moved == history
    pd.testing.assert_frame_equal(landed[cfg.features.numeric], before[cfg.features.numeric])


@pytest.mark.slow
def test_history_equals_a_plain_computation_of_the_past_days(spark, lake, config):
    """hist_<key>_<w>d_* of day D against pandas over the validated flights of the days before D."""
    spec = config.features.history
    tables = read_inputs(spark, lake, config, [D])
    got = _day(build_features(tables, config, [D]), config)
    past = build_features(read_inputs(spark, lake, config, _days(dt.date(2013, 1, 1), D)), config).toPandas()
    m = spec.prior_rows
    for w in spec.windows:
        frame = past[(past["date"] >= D - dt.timedelta(days=w)) & (past["date"] < D)]
        labelled = frame[frame["label"].notna()]
        prior = labelled["label"].mean()
        assert got[f"hist_all_{w}d_rate"].iloc[0] == pytest.approx(prior)
        assert got[f"hist_days_{w}d"].iloc[0] == min(w, (D - dt.date(2013, 1, 1)).days)
        for key, cols in spec.keys.items():
            stats = labelled.groupby(cols)["label"].agg(["sum", "count"]).reset_index()
            joined = got[cols].merge(stats, on=cols, how="left").fillna({"sum": 0.0, "count": 0})
            expected = (joined["sum"] + m * prior) / (joined["count"] + m)
            assert got[f"hist_{key}_{w}d_rate"].to_numpy() == pytest.approx(expected.to_numpy()), (key, w)
            log_rows = np.log1p(joined["count"].to_numpy(float))
            assert got[f"hist_{key}_{w}d_log_rows"].to_numpy() == pytest.approx(log_rows), (key, w)


@pytest.mark.slow
def test_first_days_get_the_prior_and_gaps_are_counted(spark, lake, config):
    """The lake's first day has no history: every rate is the configured prior, every count 0, and
    hist_days says so; a missing day in the window is one day fewer, and an unseen or null key gets
    the window's overall rate."""
    from pyspark.sql import functions as F

    spec = config.features.history
    first = _day(build_features(read_inputs(spark, lake, config, [dt.date(2013, 1, 1)]), config), config)
    for w in spec.windows:
        assert (first[f"hist_days_{w}d"] == 0).all()
        rates = [c for c in first.columns if c.startswith("hist_") and c.endswith(f"_{w}d_rate")]
        assert (first[rates] == spec.default_prior).all().all()
        assert (first[[c for c in first.columns if c.endswith(f"_{w}d_log_rows")]] == 0).all().all()

    tables = read_inputs(spark, lake, config, [D])
    gap = dict(tables, flights=tables["flights"].where(F.col("date") != D - dt.timedelta(days=3)))
    flights = gap["flights"]
    # a plane never seen before, and a flight without a tail number
    flights = flights.withColumn("tailnum", F.when((F.col("date") == D) & (F.col("flight") % 2 == 0), F.lit("NEW1"))
                                 .when((F.col("date") == D) & (F.col("flight") % 3 == 0), F.lit(None))
                                 .otherwise(F.col("tailnum")))
    got = _day(build_features(dict(gap, flights=flights), config, [D]), config)
    assert (got["hist_days_7d"] == 6).all() and (got["hist_days_1d"] == 1).all()
    unseen = got[(got["flight"] % 2 == 0) | (got["flight"] % 3 == 0)]
    assert len(unseen) > 100
    for w in spec.windows:
        assert unseen[f"hist_tailnum_{w}d_rate"].to_numpy() == pytest.approx(unseen[f"hist_all_{w}d_rate"].to_numpy())
        assert (unseen[f"hist_tailnum_{w}d_log_rows"] == 0).all()


@pytest.mark.slow
def test_a_weekday_feed_counts_the_windows_and_the_label_delay_in_open_days(spark, lake, config, config_patch):
    """A weekday feed closed on New Year's Day, outcomes a day late: Friday's outcomes land with
    Monday's ingest, so Monday's 1-day window is Thursday and its 7-day one the two open days before
    Friday the lake has (Wednesday, Thursday), read in open days. Counted in calendar days instead,
    Monday's 1-day window would be a Saturday without rows and its 7-day one would read Friday's
    outcomes before they landed."""
    from pyspark.sql import functions as F

    from jobs.features.history import history_days

    monday, friday = dt.date(2013, 1, 7), dt.date(2013, 1, 4)
    weekdays = config_patch.replace(config, monitoring={"label_delay_days": 1},
                                    feed_calendar={"days": "weekdays", "closed": ["2013-01-01"]})
    calendar_days = config_patch.replace(config, monitoring={"label_delay_days": 1})
    read = history_days(weekdays.features, [monday], 1, weekdays.feed_calendar)
    assert friday not in read and read[-2:] == [dt.date(2013, 1, 2), dt.date(2013, 1, 3)]
    assert len(read) == weekdays.features.history.windows[-1]  # its longest window, in open days
    tables = read_inputs(spark, lake, config, _days(dt.date(2013, 1, 2), monday))  # Friday's outcomes in them
    open_days = F.dayofweek("date").between(2, 6) & (F.col("date") != dt.date(2013, 1, 1))
    tables["flights"] = tables["flights"].where(open_days)  # no rows on the weekend nor on New Year's Day
    counted = {name: _day(build_features(tables, cfg, [monday]), cfg)[["hist_days_1d", "hist_days_7d"]]
               for name, cfg in (("open", weekdays), ("calendar", calendar_days))}
    assert (counted["open"]["hist_days_1d"] == 1).all() and (counted["open"]["hist_days_7d"] == 2).all()
    assert (counted["calendar"]["hist_days_1d"] == 0).all() and (counted["calendar"]["hist_days_7d"] == 3).all()


def test_calendar_counts_days_to_and_since_holidays(config):
    from jobs.features.history import calendar_rows

    spec = dataclasses.replace(config.features.calendar, day_of_year=True)
    rows = {r[0]: r[1:] for r in calendar_rows(spec, _days(dt.date(2012, 12, 30), D))}
    assert rows[dt.date(2013, 1, 1)] == (1.0, 0.0, 0.0)  # New Year's Day
    assert rows[dt.date(2012, 12, 30)] == (365.0, 2.0, 5.0)  # after Christmas 2012, before New Year
    assert rows[D] == (8.0, 13.0, 7.0)  # Martin Luther King Jr. Day is 2013-01-21
    # the bundled config leaves day_of_year out of the inputs (a time index a linear model extrapolates)
    assert config.features.calendar.columns() == ["days_to_holiday", "days_since_holiday"]
    assert "day_of_year" not in config.features.inputs
    assert calendar_rows(config.features.calendar, [D]) == [(D, 13.0, 7.0)]


@pytest.mark.e2e  # the features job three times and a validation on a lake of its own: a minute or more
def test_a_revalidated_earlier_day_makes_the_later_days_stale_until_its_ingest_rebuilds_them(
        spark, lake, config_without_gx, config_patch, tmp_path):
    """Re-validating D - 3 with other outcomes leaves D's features (built from the old ones) stale:
    training's and scoring's check refuses them, naming the day, what changed and the command; the
    features job of D - 3 then rebuilds D - 3 and every later day its history feeds, and D's features
    equal building D afresh."""
    import shutil

    from jobs.features import lineage
    from jobs.features.job import main
    from jobs.lake.layout import Lake, partition_name
    from jobs.training.data import feature_dirs
    from jobs.validation.job import validate

    own = Lake(str(tmp_path / "lake"))
    for zone in ("raw", "validated"):
        shutil.copytree(f"{lake.root}/{zone}", f"{own.root}/{zone}")
    first, changed = dt.date(2013, 1, 1), D - dt.timedelta(days=3)
    settings = config_patch.write(tmp_path, validation={"great_expectations": False})
    job = ["--lake-root", own.root, "--config", str(settings)]
    main(["--run-date", str(LAST), "--days", str((LAST - first).days + 1), *job])
    lineage.check_fresh(own, _days(first, LAST))

    def written(day: dt.date) -> pd.DataFrame:
        return _day(spark.read.option("basePath", own.features).parquet(f"{own.features}/{partition_name(day)}"),
                    config_without_gx)

    before = written(D)

    raw = tmp_path / "lake" / "raw" / "flights" / partition_name(changed) / "flights.csv"
    frame = pd.read_csv(raw, keep_default_na=False, dtype=str)
    delay = pd.to_numeric(frame["arr_delay"], errors="coerce")
    frame["arr_delay"] = [("NA" if pd.isna(v) else str(int(0 if v > 15 else v + 120))) for v in delay]
    frame.to_csv(raw, index=False)
    assert validate(spark, own, config_without_gx, [changed], first, "again").written

    with pytest.raises(lineage.StaleFeaturesError) as refused:
        feature_dirs(spark, own, [D - dt.timedelta(days=1), D])
    message = str(refused.value)
    assert f"the features of {D - dt.timedelta(days=1)}, {D} are stale" in message
    assert f"flights of {changed} was validated again" in message
    assert f"spark-submit jobs/features/job.py --run-date {D} --days 2" in message
    stale = lineage.changes(own, _days(first, LAST))
    assert sorted(stale) == _days(changed, LAST)  # the day itself and the days its history feeds, no earlier one

    main(["--run-date", str(changed), "--days", "1", *job])  # the ingest of the changed day
    lineage.check_fresh(own, _days(first, LAST))
    feature_dirs(spark, own, _days(first, LAST))
    after = written(D)
    fresh = _day(build_features(read_inputs(spark, own, config_without_gx, [D]), config_without_gx, [D]),
                 config_without_gx)
    inputs = config_without_gx.features.inputs
    pd.testing.assert_frame_equal(after[inputs], fresh[inputs])
    assert not after["hist_route_7d_rate"].equals(before["hist_route_7d_rate"])


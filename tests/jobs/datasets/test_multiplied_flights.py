"""The scale-up generator: N times a day's flights with unique keys, joins that still hold, the
same bytes for the same seed, and the pipeline's own validate and features functions accepting it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd
import pytest

from jobs.datasets.land_flights import read_source, split_by_day
from jobs.datasets.multiplied_flights import FLIGHT_OFFSET, multiply_day, scale_raw
from jobs.lake.layout import Lake

FIRST, LAST = dt.date(2013, 3, 4), dt.date(2013, 3, 5)  # validated: the last day only (time)
KEY = ["year", "month", "day", "carrier", "flight", "origin", "sched_dep_time"]


@pytest.fixture(scope="module")
def source_days() -> dict[dt.date, pd.DataFrame]:
    return split_by_day(read_source("flights"), FIRST, LAST)


@pytest.mark.parametrize("factor", [2, 0.5, 2.5])
def test_a_day_is_multiplied_with_unique_keys_and_the_same_fleet(source_days, factor):
    day = source_days[FIRST]
    out = multiply_day(day, factor, seed=13, ordinal=FIRST.toordinal())
    assert len(out) == round(factor * len(day))
    assert not out.duplicated(KEY).any()
    assert (pd.to_numeric(out["flight"]) < FLIGHT_OFFSET * (int(factor) + 1)).all()
    # the schedule and outcomes are the real day's; tails stay within each carrier's fleet of the day
    real = ["origin", "dest", "sched_dep_time", "dep_delay", "arr_delay", "distance"]
    assert set(map(tuple, out[real].to_numpy())) <= set(map(tuple, day[real].to_numpy()))
    fleets = day.groupby("carrier")["tailnum"].agg(set)
    assert all(set(rows["tailnum"]) <= fleets[carrier] for carrier, rows in out.groupby("carrier"))
    if factor >= 1:
        assert (out.iloc[: len(day)].to_numpy() == day.to_numpy()).all()  # copy 0 is the day as it is
        whole = out.iloc[: int(factor) * len(day)]
        assert (whole["tailnum"] == "NA").sum() == int(factor) * (day["tailnum"] == "NA").sum()


def test_same_seed_same_rows_other_seed_other_tails(source_days):
    day = source_days[FIRST]
    a, b = (multiply_day(day, 3, seed=13, ordinal=1) for _ in range(2))
    pd.testing.assert_frame_equal(a, b)
    c = multiply_day(day, 3, seed=14, ordinal=1)
    assert not (a["tailnum"].to_numpy() == c["tailnum"].to_numpy()).all()


@pytest.mark.slow
def test_scaled_raw_zone_validates_and_builds_one_feature_row_per_flight(spark, config_without_gx, tmp_path,
                                                                         source_days):
    from pyspark.sql import functions as F

    from jobs.features.job import build_features, read_inputs
    from jobs.validation.job import validate

    lake = Lake(str(tmp_path / "lake"))
    counts = scale_raw(lake, 2, FIRST, LAST)
    assert counts["flights"] == 2 * sum(len(rows) for rows in source_days.values())
    expected = 2 * len(source_days[LAST])
    assert Path(lake.raw_file("planes")).exists() and Path(lake.raw_file("weather", LAST)).exists()

    report = validate(spark, lake, config_without_gx, [LAST], FIRST, "tests")
    assert report.success and report.written, report.summary()
    flights = next(t for t in report.tables if t.table == "flights")
    assert flights.rows_in == expected

    tables = read_inputs(spark, lake, config_without_gx, [LAST])
    validated = tables["flights"]
    assert validated.select(*KEY).distinct().count() == validated.count()
    features = build_features(tables, config_without_gx).cache()
    assert features.count() == validated.count()  # every left join kept every row, none duplicated
    # the joins find what they found at 1x: each copy of a day has the real day's weather and planes
    known = features.groupBy((F.col("flight") >= FLIGHT_OFFSET).alias("copy")).agg(
        F.count("temp").alias("weather"), F.count("seats").alias("planes"), F.count("*").alias("n"))
    original, copy = sorted((r.asDict() for r in known.collect()), key=lambda r: r["copy"])
    assert original["n"] == copy["n"] and original["weather"] == copy["weather"]
    assert original["planes"] == copy["planes"]
    features.unpersist()

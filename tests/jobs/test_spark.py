from __future__ import annotations

import datetime as dt

import pytest

from jobs.spark import MissingPartitionError, list_partitions, raw_paths, read_header, read_raw_strings


def test_a_missing_partition_names_the_path(spark, lake, config):
    with pytest.raises(MissingPartitionError, match=r"date=2014-01-01/flights\.csv"):
        raw_paths(spark, lake, config.tables["flights"], [dt.date(2014, 1, 1)])


def test_a_missing_day_of_an_optional_table_is_skipped(spark, lake, config, landed_days):
    weather = config.tables["weather"]
    assert not weather.required
    first, _ = landed_days
    assert list(raw_paths(spark, lake, weather, [first, dt.date(2014, 1, 1)])) == [first.isoformat()]


def test_raw_values_are_read_as_the_text_they_are(spark, lake, config, landed_days):
    flights = config.tables["flights"]
    first, _ = landed_days
    paths = raw_paths(spark, lake, flights, [first])
    assert read_header(spark, paths[first.isoformat()]) == list(flights.columns)
    df = read_raw_strings(spark, lake, flights, list(paths.values()), first, config.csv_options)
    assert {t for c, t in df.dtypes if c != "date"} == {"string"}
    assert dict(df.dtypes)["date"] == "date"
    row = df.where("flight = '1545' AND sched_dep_time = '515'").first()
    assert (row["time_hour"], row["dep_time"], row["date"]) == ("2013-01-01T10:00:00Z", "517", first)
    assert row["_corrupt_record"] is None


def test_partitions_are_listed_by_date(spark, lake, landed_days, tmp_path):
    first, last = landed_days
    assert list_partitions(spark, lake.validated("flights")) == [
        first + dt.timedelta(days=n) for n in range((last - first).days + 1)
    ]
    assert list_partitions(spark, str(tmp_path / "nothing")) == []

"""The lake's partitions and raw files read through a session: a missing one named, days read by their own folders."""

from __future__ import annotations

import datetime as dt

import pytest

from jobs.lake.files import MissingPartitionError, list_partitions
from jobs.validation.schema import raw_paths, read_header, read_raw_strings


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
    assert {t for c, t in df.dtypes if c not in ("date", "_record")} == {"string"}
    assert dict(df.dtypes)["date"] == "date"
    row = df.where("flight = '1545' AND sched_dep_time = '515'").first()
    assert (row["time_hour"], row["dep_time"], row["date"]) == ("2013-01-01T10:00:00Z", "517", first)
    assert row["_corrupt_record"] is None
    assert row["_source_file"].endswith(paths[first.isoformat()]) and row["_record"] == 1


def test_partitions_are_listed_by_date(spark, lake, landed_days, tmp_path):
    first, last = landed_days
    assert list_partitions(spark, lake.validated("flights")) == [
        first + dt.timedelta(days=n) for n in range((last - first).days + 1)
    ]
    assert list_partitions(spark, str(tmp_path / "nothing")) == []


def _listing(spark) -> tuple[int, int]:
    """Spark's own counters of what its file indexes listed: (files discovered, parallel listing jobs)."""
    metrics = spark._jvm.org.apache.spark.metrics.source.HiveCatalogMetrics  # noqa: SLF001
    return metrics.METRIC_FILES_DISCOVERED().getCount(), metrics.METRIC_PARALLEL_LISTING_JOB_COUNT().getCount()


@pytest.fixture
def long_zone(spark, tmp_path):
    """A Parquet zone of 40 daily partitions (more than Spark's 32 before it lists in a job), a file
    each: (its path, its days)."""
    days = [dt.date(2013, 1, 1) + dt.timedelta(days=n) for n in range(40)]
    zone = str(tmp_path / "zone")
    rows = spark.createDataFrame([(day, n) for n, day in enumerate(days)], "date date, n int")
    rows.repartition("date").write.partitionBy("date").parquet(zone)
    return zone, days


def test_reading_days_lists_their_partitions_only(spark, long_zone):
    from jobs.lake.files import read_days

    zone, days = long_zone
    before = _listing(spark)
    rows = read_days(spark, zone, days[5:7]).collect()
    files, jobs = (after - earlier for after, earlier in zip(_listing(spark), before, strict=True))
    assert sorted((row.date, row.n) for row in rows) == [(days[5], 5), (days[6], 6)]
    # the zone read whole and filtered: 40 files discovered, by a listing job of its own
    assert (files, jobs) == (2, 0)


def test_a_validated_zone_written_again_is_read_back_by_its_days_only(spark, long_zone):
    """A day's validation reads back the partitions it wrote, not the whole zone: its cost does not
    grow with the lake's history (a quarter's backfill slowed from 6 to 95 s a day before)."""
    from jobs.validation.writing import write_zone

    zone, days = long_zone
    again = spark.createDataFrame([(days[-1], 100), (days[-1], 101)], "date date, n int")
    before = _listing(spark)
    written = write_zone(spark, again, zone, {days[-1].isoformat(): 2, days[-2].isoformat(): 0})
    files, jobs = (after - earlier for after, earlier in zip(_listing(spark), before, strict=True))
    assert written == {days[-1].isoformat(): 2, days[-2].isoformat(): 0}
    assert jobs == 0 and files <= 2, (files, jobs)

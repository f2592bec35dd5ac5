from __future__ import annotations

import datetime as dt

import pytest
from pyspark.testing import assertDataFrameEqual

from jobs.features.job import build_features, read_inputs

DAY = dt.date(2013, 1, 2)  # a Wednesday


def _tables(spark, config):
    f = config.tables["flights"]
    flights = spark.createDataFrame(
        [
            # on time, known plane, weather hour recorded twice (averaged)
            (2013, 1, 2, 600, 600, 0.0, 900, 900, 5.0, "UA", 1, "N1", "EWR", "IAH", 200.0, 1400.0, 6, 0, None, DAY),
            # late, tail number not in planes, destination not in airports
            (2013, 1, 2, 700, 700, 30.0, 1000, 930, 40.0, "AA", 2, "N9", "JFK", "SJU", 200.0, 1600.0, 7, 0, None,
             DAY),
            # cancelled: no arrival delay, so no label; no tail number
            (2013, 1, 2, None, 800, None, None, 1100, None, "B6", 3, None, "LGA", "IAH", None, 1400.0, 8, 15, None,
             DAY),
        ],
        f.ddl() + ", date date",
    )
    weather = spark.createDataFrame(
        [("EWR", 2013, 1, 2, 6, 40.0), ("EWR", 2013, 1, 2, 6, 42.0), ("JFK", 2013, 1, 2, 7, 30.0)],
        "origin string, year int, month int, day int, hour int, temp double",
    )
    for col in ["dewp", "humid", "wind_dir", "wind_speed", "precip", "pressure", "visib"]:
        weather = weather.withColumn(col, weather.temp * 0 + 1.0)
    planes = spark.createDataFrame(
        [("N1", 2000, "BOEING", 150, 2)], "tailnum string, year int, manufacturer string, seats int, engines int"
    )
    # LGA's time zone unknown here: its flights' block time is null, as a destination's would be
    airports = spark.createDataFrame(
        [("IAH", 29.98, -95.34, -6), ("EWR", 40.69, -74.17, -5), ("JFK", 40.64, -73.78, -5)],
        "faa string, lat double, lon double, tz int",
    )
    return {"flights": flights, "weather": weather, "planes": planes, "airports": airports}


def test_one_row_per_flight_with_label_and_joined_context(spark, config):
    out = build_features(_tables(spark, config), config).orderBy("flight")
    rows = out.collect()
    assert [r["flight"] for r in rows] == [1, 2, 3]
    first, second, third = rows
    assert (first["label"], second["label"], third["label"]) == (0.0, 1.0, None)
    assert first["temp"] == 41.0  # the duplicated weather hour is averaged, not duplicated
    assert first["plane_age"] == 13.0 and first["manufacturer"] == "BOEING"
    assert first["dest_lat"] == 29.98 and second["dest_lat"] is None
    assert second["manufacturer"] is None and second["plane_age"] is None
    assert third["temp"] is None  # no weather recorded for that hour
    assert first["day_of_week"] == 4.0  # Spark: 1 = Sunday
    assert first["dep_minute_of_day"] == 360.0 and third["dep_minute_of_day"] == 495.0


@pytest.mark.slow
def test_the_schedule_features_read_the_day_s_timetable_only(spark, config):
    """Block time is the scheduled gate-to-gate minutes in UTC (past midnight too); the flights
    the day's schedule puts at the origin in the hour count cancelled ones (they were scheduled);
    neither moves when the day's departure and arrival times (its outcomes) do."""
    from pyspark.sql import functions as F

    tables = _tables(spark, config)
    overnight = spark.createDataFrame(  # EWR 06:30 -> IAH 00:30 the next day: 19 h in UTC, past midnight
        [(2013, 1, 2, 640, 630, 10.0, 100, 30, 30.0, "UA", 4, "N1", "EWR", "IAH", 200.0, 1400.0, 6, 30, None, DAY)],
        config.tables["flights"].ddl() + ", date date")
    tables["flights"] = tables["flights"].unionByName(overnight)
    rows = {r["flight"]: r for r in build_features(tables, config).collect()}
    assert rows[1]["sched_block_minutes"] == 240.0  # 06:00 EWR (UTC-5) -> 09:00 IAH (UTC-6): 4 h
    assert rows[4]["sched_block_minutes"] == 19 * 60.0
    assert rows[2]["sched_block_minutes"] is None and rows[3]["sched_block_minutes"] is None  # SJU, LGA: no tz
    assert {f: rows[f]["sched_origin_hour_flights"] for f in rows} == {1: 2.0, 2: 1.0, 3: 1.0, 4: 2.0}
    # EWR 06:00 and 06:30, JFK 07:00, LGA 08:00: the hours either side at the same origin
    assert {f: rows[f]["sched_origin_3h_flights"] for f in rows} == {1: 2.0, 2: 1.0, 3: 1.0, 4: 2.0}
    assert {f: rows[f]["sched_hour_flights"] for f in rows} == {1: 2.0, 2: 1.0, 3: 1.0, 4: 2.0}
    assert {f: rows[f]["sched_route_day_flights"] for f in rows} == {1: 2.0, 2: 1.0, 3: 1.0, 4: 2.0}
    assert rows[1]["sched_day_flights"] == 4.0 and rows[1]["sched_carrier_day_flights"] == 2.0  # UA twice
    assert rows[1]["sched_dest_hour_arrivals"] == 1.0  # IAH at 09 and at 00 (local)
    # EWR -> IAH: 240 and 1140 minutes, the route's median 690: -450 and +450
    assert (rows[1]["sched_block_pad_minutes"], rows[4]["sched_block_pad_minutes"]) == (-450.0, 450.0)
    # the day's outcomes changed: the same schedule features
    tables["flights"] = tables["flights"].withColumns({"dep_time": F.lit(2359), "arr_time": F.lit(1),
                                                       "arr_delay": F.lit(300.0), "dep_delay": F.lit(300.0)})
    again = {r["flight"]: r for r in build_features(tables, config).collect()}
    schedule = [c for c in config.features.numeric if c.startswith("sched_")]
    for flight, row in rows.items():
        assert [again[flight][c] for c in schedule] == [row[c] for c in schedule], flight


def test_output_schema_is_the_model_contract(spark, config):
    out = build_features(_tables(spark, config), config)
    types = dict(out.dtypes)
    assert all(types[c] == "string" for c in config.features.categorical)
    assert all(types[c] == "double" for c in config.features.numeric)
    assert types["label"] == "double" and types["date"] == "date"


@pytest.mark.slow
def test_rebuilding_a_day_replaces_its_partition(spark, lake, config, features_zone, tmp_path):
    from jobs.features.job import write_features

    days = [dt.date(2013, 1, 5)]
    features = build_features(read_inputs(spark, lake, config, days), config, days)
    target = str(tmp_path / "features")
    write_features(features, target)
    write_features(features, target)  # a retry
    written = spark.read.parquet(target)
    assertDataFrameEqual(written.drop("date"), features.drop("date"))
    assert {r["date"] for r in written.select("date").distinct().collect()} == set(days)
    # the session's features zone, built over all its days, holds for this day what building it alone gives
    # (the tests that read or copy days of it rely on that)
    shared = features_zone.frame(days)
    assert shared.columns == features.columns and shared.dtypes == features.dtypes
    assertDataFrameEqual(shared, features)


@pytest.mark.slow
def test_staging_a_killed_features_job_left_is_removed_by_the_next_run(spark, lake, tmp_path):
    """What a features job killed mid-write leaves in the zone (Spark's ``.spark-staging-*`` and
    ``_temporary`` with half-written files) is removed by the next run, unless another live run
    writes the zone; a live run writing the same day stops this one before it writes."""
    import pytest

    from jobs.features.job import main
    from jobs.lake.layout import Lake, partition_name
    from jobs.validation.partitions import ConcurrentRunError, Owner, PartitionLocks

    own = tmp_path / "lake"
    own.mkdir()
    for zone in ("raw", "validated"):  # read only: the session lake's
        (own / zone).symlink_to(f"{lake.root}/{zone}")
    day, other_day = dt.date(2013, 1, 5), dt.date(2013, 1, 6)
    zone = own / "features"
    run = ["--run-date", day.isoformat(), "--days", "1", "--lake-root", str(own)]

    def leave_staging() -> list:
        left = [zone / ".spark-staging-0f1e2d" / partition_name(day), zone / "_temporary" / "0" / "task_0"]
        for folder in left:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "part-00000.parquet").write_bytes(b"half a file")
        return left

    leave_staging()
    main(run)
    assert sorted(p.name for p in zone.iterdir()) == [partition_name(day)]
    rows = spark.read.parquet(str(zone / partition_name(day))).count()
    assert rows == spark.read.parquet(f"{lake.root}/validated/flights/{partition_name(day)}").count()

    another = PartitionLocks(Lake(str(own)), Owner("another live run"))
    another.acquire([("features", other_day)])  # writing another day of the zone now
    try:
        left = leave_staging()
        main(run)
        assert all(folder.exists() for folder in left)  # maybe that run's own staging: left alone
        another.acquire([("features", day)])
        with pytest.raises(ConcurrentRunError, match="being written by another run 'another live run'"):
            main(run)
    finally:
        another.release()
    main(run)  # alone again: the staging goes
    assert sorted(p.name for p in zone.iterdir()) == [partition_name(day)]


@pytest.mark.slow
def test_a_full_disk_fails_the_write_saying_so_and_keeps_the_day(spark, lake, tmp_path, caplog, small_disk):
    """The features zone on a small disk of its own with no room left: the job fails saying the
    disk is full, the day's partition stays what it was and no staging is left behind; with room
    again, the same run replaces the day."""
    import hashlib

    import pytest

    from jobs.features.job import main
    from jobs.lake.layout import partition_name
    from jobs.runner import run_job

    own = tmp_path / "lake"
    zone = small_disk(own / "features", "1m")
    for name in ("raw", "validated"):  # read only: the session lake's
        (own / name).symlink_to(f"{lake.root}/{name}")
    day = dt.date(2013, 1, 5)
    run = ["--run-date", day.isoformat(), "--days", "1", "--lake-root", str(own)]
    main(run)
    partition = zone / partition_name(day)

    def digest() -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in partition.iterdir()}

    before = digest()
    assert any(name.startswith("part-") for name in before)
    filler = small_disk.fill(zone)

    with pytest.raises(SystemExit) as failed:
        run_job(lambda: main(run))
    assert failed.value.code == 1  # a fault: space may be freed before Airflow's retry
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("failed")]
    assert "the disk is full (No space left on device" in line and "run the task again" in line, line
    assert digest() == before  # the day's partition is the one written before
    assert sorted(p.name for p in zone.iterdir()) == [".filler", partition_name(day)]  # no staging left

    filler.unlink()
    main(run)
    after = digest()
    assert after.keys() != before.keys() and len(after) == len(before)  # replaced: new files, as many

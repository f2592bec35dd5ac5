from __future__ import annotations

import datetime as dt

import pytest

from jobs.runtime.spark import MissingPartitionError, list_partitions
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


def test_gpu_conf_asks_the_driver_in_local_mode_and_one_gpu_per_task_on_a_cluster():
    from jobs.runtime.spark import GPU_DISCOVERY_SCRIPT, gpu_conf

    local = gpu_conf(local_mode=True, gpus=2)
    assert local == {"spark.driver.resource.gpu.amount": "2",
                     "spark.driver.resource.gpu.discoveryScript": GPU_DISCOVERY_SCRIPT}
    cluster = gpu_conf(local_mode=False, gpus=4)
    assert cluster["spark.executor.resource.gpu.amount"] == "4"
    assert cluster["spark.task.resource.gpu.amount"] == "1"
    assert cluster["spark.executor.resource.gpu.discoveryScript"] == GPU_DISCOVERY_SCRIPT
    with pytest.raises(ValueError, match="at least one GPU"):
        gpu_conf(local_mode=True, gpus=0)


@pytest.mark.parametrize(
    ("smi_output", "addresses"),
    [(None, []), ("0\n", ["0"]), ("0\n1\n 2\n", ["0", "1", "2"]), ("No devices were found\n", [])],
)
def test_gpu_discovery_script_prints_what_spark_expects(tmp_path, smi_output, addresses):
    """The script Spark runs to find GPUs, with an nvidia-smi that prints what a real one would
    (or none at all, as on this machine)."""
    import json
    import os
    import subprocess

    from jobs.runtime.spark import GPU_DISCOVERY_SCRIPT

    fake = tmp_path / "nvidia-smi"
    if smi_output is not None:
        fake.write_text(f"#!/bin/sh\nprintf '{smi_output}'\n")
        fake.chmod(0o755)
    out = subprocess.run([GPU_DISCOVERY_SCRIPT], env={**os.environ, "NVIDIA_SMI": str(fake)}, capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == {"name": "gpu", "addresses": addresses}


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
    from jobs.runtime.spark import read_days

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


def test_a_long_lived_driver_keeps_few_finished_queries(spark):
    """The tests' session (and the shared Connect server, from the same settings) keeps 50 finished
    queries, not Spark's thousand: their plans and metrics filled a worker's 1 GiB heap."""
    from jobs.runtime.connect_server import command
    from jobs.runtime.spark import DRIVER_CONF

    conf = spark.sparkContext.getConf()
    assert {key: conf.get(key) for key in DRIVER_CONF} == DRIVER_CONF
    assert int(DRIVER_CONF["spark.sql.ui.retainedExecutions"]) <= 100
    server = command(15002, "local[2]")
    assert all(f"{key}={value}" in server for key, value in DRIVER_CONF.items())


def test_spark_draws_its_console_progress_bar_only_on_a_terminal_and_never_for_the_replay(monkeypatch):
    import io
    import sys

    from jobs.runtime.spark import CONSOLE_PROGRESS_ENV, console_conf

    off = {"spark.ui.showConsoleProgress": "false"}

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv(CONSOLE_PROGRESS_ENV, raising=False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert console_conf() == off  # a log file, a test's captured output
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert console_conf() == {}  # a person at a terminal sees the stages go by
    monkeypatch.setenv(CONSOLE_PROGRESS_ENV, "0")  # what the replay sets: its own progress lines only
    assert console_conf() == off

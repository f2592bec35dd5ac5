from __future__ import annotations

import datetime as dt

import pytest

from jobs.lake.spark import MissingPartitionError, list_partitions
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
    from jobs.lake.spark import GPU_DISCOVERY_SCRIPT, gpu_conf

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

    from jobs.lake.spark import GPU_DISCOVERY_SCRIPT

    fake = tmp_path / "nvidia-smi"
    if smi_output is not None:
        fake.write_text(f"#!/bin/sh\nprintf '{smi_output}'\n")
        fake.chmod(0o755)
    out = subprocess.run([GPU_DISCOVERY_SCRIPT], env={**os.environ, "NVIDIA_SMI": str(fake)}, capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == {"name": "gpu", "addresses": addresses}

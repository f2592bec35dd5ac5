from __future__ import annotations

import datetime as dt

import pytest

from jobs.spark import MissingPartitionError, read_raw


def test_a_missing_partition_names_the_path(spark, lake, config):
    with pytest.raises(MissingPartitionError, match=r"date=2014-01-01/flights\.csv"):
        read_raw(spark, lake, config.tables["flights"], [dt.date(2014, 1, 1)], config.csv_options)


def test_a_missing_day_of_an_optional_table_reads_as_empty(spark, lake, config):
    weather = config.tables["weather"]
    assert not weather.required
    df = read_raw(spark, lake, weather, [dt.date(2014, 1, 1)], config.csv_options)
    assert df.count() == 0 and df.columns == [*weather.columns, "date"]

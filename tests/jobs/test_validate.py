from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pandas as pd
import pytest

from jobs.config import Lake
from jobs.spark import read_raw
from jobs.validate import ValidationFailed, main, validate_window

DAY = dt.date(2013, 1, 3)


def _bad_lake(lake: Lake, tmp_path: Path, mutate) -> Lake:
    """A lake whose flights partition for DAY is the real one with ``mutate`` applied."""
    frame = pd.read_csv(lake.raw_file("flights", DAY), dtype=str, keep_default_na=False)
    bad = Lake(str(tmp_path / "lake"))
    target = Path(bad.raw_file("flights", DAY))
    target.parent.mkdir(parents=True)
    mutate(frame).to_csv(target, index=False)
    return bad


def test_real_days_pass_and_are_counted(spark, lake, config):
    days = [DAY - dt.timedelta(days=1), DAY]
    df = read_raw(spark, lake, config.tables["flights"], days, config.csv_options)
    report = validate_window(df, config, days, DAY)
    assert report.success, report.summary()
    for day in days:
        expected = len(pd.read_csv(lake.raw_file("flights", day)))
        assert report.rows_per_day[day.isoformat()] == expected
    assert report.rows == sum(report.rows_per_day.values())


@pytest.mark.parametrize(
    ("mutate", "expectation", "column"),
    [
        (lambda f: f.assign(distance=f["distance"].where(f.index > 1, "-5")),
         "expect_column_values_to_be_between", "distance"),
        (lambda f: f.assign(carrier=f["carrier"].where(f.index != 0, "NA")),
         "expect_column_values_to_not_be_null", "carrier"),
        (lambda f: f.assign(day=f["day"].where(f.index != 3, "4")), "unexpected_rows_expectation", None),
        (lambda f: f.assign(origin=f["origin"].where(f.index != 0, "jfk")),
         "expect_column_values_to_match_regex", "origin"),
    ],
    ids=["negative-distance", "null-carrier", "another-days-row", "malformed-airport-code"],
)
def test_bad_rows_fail_the_job_naming_expectation_and_column(spark, lake, tmp_path, mutate, expectation, column):
    bad = _bad_lake(lake, tmp_path, mutate)
    with pytest.raises(ValidationFailed) as err:
        main(["--run-date", DAY.isoformat(), "--lake-root", bad.root])
    message = str(err.value)
    assert expectation in message
    if column:
        assert f"column {column!r}" in message
    report = json.loads(Path(bad.report("validation", DAY, "flights.json")).read_text())
    assert report["success"] is False
    failed = [c for c in report["checks"] if not c["success"]]
    assert [(c["expectation"], c["column"]) for c in failed] == [(expectation, column)]


def test_an_empty_partition_fails(spark, lake, tmp_path):
    bad = _bad_lake(lake, tmp_path, lambda f: f.iloc[0:0])
    with pytest.raises(ValidationFailed, match="expect_table_row_count_to_be_between"):
        main(["--run-date", DAY.isoformat(), "--lake-root", bad.root])


def test_a_renamed_column_is_refused_before_any_row_is_used(spark, lake, tmp_path):
    bad = _bad_lake(lake, tmp_path, lambda f: f.rename(columns={"dest": "destination"}))
    with pytest.raises(Exception, match="destination"):
        main(["--run-date", DAY.isoformat(), "--lake-root", bad.root])


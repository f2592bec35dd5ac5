from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd

from jobs.datasets.land_flights import read_source, split_by_day


def test_split_by_day_keeps_rows_within_the_range():
    frame = pd.DataFrame({"year": ["2013"] * 3, "month": ["1", "1", "2"], "day": ["1", "2", "1"], "v": ["a", "b", "c"]})
    parts = split_by_day(frame, dt.date(2013, 1, 2), dt.date(2013, 2, 1))
    assert list(parts) == [dt.date(2013, 1, 2), dt.date(2013, 2, 1)]
    assert parts[dt.date(2013, 1, 2)]["v"].tolist() == ["b"]


def test_landed_partitions_hold_exactly_the_source_rows(lake, landed_days):
    first_day, last_day = landed_days
    source = read_source("flights")
    days = pd.to_datetime(source[["year", "month", "day"]].astype(int)).dt.date
    for n in range((last_day - first_day).days + 1):
        day = first_day + dt.timedelta(days=n)
        landed = pd.read_csv(lake.raw_file("flights", day), dtype=str, keep_default_na=False)
        expected = source[days == day].reset_index(drop=True)
        pd.testing.assert_frame_equal(landed, expected)
    assert Path(lake.raw_file("planes")).exists()
    # no temporary files left behind by the atomic writes
    assert not list(Path(lake.raw_table("flights")).rglob("*.tmp"))

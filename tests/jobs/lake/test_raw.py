"""The raw zone read without Spark: which landed partitions of a table hold no rows."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from jobs.lake.layout import Lake
from jobs.lake.raw import HEADER_LIMIT, empty_partitions, holds_rows


def _land(lake: Lake, day: int, text: str, name: str = "flights.csv") -> None:
    folder = Path(lake.raw_partition("flights", dt.date(2013, 1, day)))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)


def test_a_partition_with_a_header_only_or_nothing_is_empty_and_one_with_a_record_is_not(tmp_path):
    lake = Lake(str(tmp_path))
    _land(lake, 1, "year,month\n")  # the header only
    _land(lake, 2, "year,month\n2013,1\n")
    _land(lake, 3, "")  # nothing at all
    _land(lake, 4, "year,month\n\n  \n")  # blank lines are no records
    _land(lake, 5, "year,month\n" + "2013,1\n" * (HEADER_LIMIT // 7 + 1))  # too large to be read: rows
    _land(lake, 6, "year,month\n", name="other.csv")  # not the table's file: not a landed partition
    assert empty_partitions(lake, "flights") == [dt.date(2013, 1, d) for d in (1, 3, 4)]
    assert empty_partitions(lake, "flights", last=dt.date(2013, 1, 2)) == [dt.date(2013, 1, 1)]
    assert empty_partitions(Lake(f"file://{tmp_path}"), "flights") == [dt.date(2013, 1, d) for d in (1, 3, 4)]
    assert empty_partitions(lake, "weather") == []  # no such table: nothing landed
    assert holds_rows(b"a,b\n1,2") and not holds_rows(b"a,b\r\n")

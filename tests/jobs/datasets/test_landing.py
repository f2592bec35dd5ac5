"""The generic landing: a table split by its date column (or year, month, day) into daily raw
partitions, atomically and the same bytes again; a reference table whole; a bad day refused."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd
import pytest

from jobs.datasets.landing import LandingError, land_frame, main
from jobs.lake.layout import Lake


def readings() -> pd.DataFrame:
    return pd.DataFrame({"station": ["a", "b", "a", "c"], "observed_on": ["2015-09-23", "2015-09-23",
                                                                          "2015-09-25T06:00", "2015-09-26"],
                         "value": ["1.5", "NA", "2", "3"]})


def test_a_daily_table_lands_one_csv_per_day_of_its_date_column(tmp_path):
    lake = Lake(str(tmp_path))
    counts = land_frame(readings(), "readings", lake, ["observed_on"], last=dt.date(2015, 9, 25))
    assert counts == {dt.date(2015, 9, 23): 2, dt.date(2015, 9, 24): 0, dt.date(2015, 9, 25): 1}
    # a day between without rows lands as its header: an empty day, not a missing partition
    assert Path(lake.raw_file("readings", dt.date(2015, 9, 24))).read_text() == "station,observed_on,value\n"
    assert not Path(lake.raw_partition("readings", dt.date(2015, 9, 26))).exists()  # after --to: not landed
    first = Path(lake.raw_file("readings", dt.date(2015, 9, 23)))
    assert first.read_text() == "station,observed_on,value\na,2015-09-23,1.5\nb,2015-09-23,NA\n"  # the text as it was
    before = first.stat().st_mtime_ns, first.read_bytes()
    land_frame(readings(), "readings", lake, ["observed_on"])
    assert first.read_bytes() == before[1]  # again: the same bytes
    assert not list(tmp_path.rglob("*.tmp"))


def test_year_month_day_columns_and_a_reference_table(tmp_path):
    lake = Lake(str(tmp_path))
    frame = pd.DataFrame({"year": ["2013", "2013"], "month": ["1", "1"], "day": ["1", "2"], "x": ["u", "v"]})
    assert land_frame(frame, "flights", lake, ["year", "month", "day"]) == {dt.date(2013, 1, 1): 1,
                                                                           dt.date(2013, 1, 2): 1}
    assert land_frame(frame, "planes", lake) == {None: 2}
    assert Path(lake.raw_file("planes")).read_text().count("\n") == 3


def test_a_row_without_a_readable_day_is_refused_naming_it(tmp_path):
    bad = readings()
    bad.loc[1, "observed_on"] = "someday"
    with pytest.raises(LandingError, match=r"readings: 1 row\(s\) have no readable day in observed_on"):
        land_frame(bad, "readings", Lake(str(tmp_path)), ["observed_on"])
    with pytest.raises(LandingError, match="no column when"):
        land_frame(bad, "readings", Lake(str(tmp_path)), ["when"])
    assert not (tmp_path / "raw").exists()


def test_the_command_lands_daily_and_reference_tables(tmp_path, capsys):
    source = tmp_path / "readings.csv"
    readings().to_csv(source, index=False)
    stations = tmp_path / "stations.csv"
    pd.DataFrame({"station": ["a", "b"]}).to_csv(stations, index=False)
    main(["--daily", f"readings={source}", "--date-column", "observed_on", "--reference", f"stations={stations}",
          "--lake-root", str(tmp_path / "lake")])
    lake = Lake(str(tmp_path / "lake"))
    assert Path(lake.raw_file("readings", dt.date(2015, 9, 26))).exists() and Path(lake.raw_file("stations")).exists()
    with pytest.raises(SystemExit):
        main(["--daily", f"readings={source}", "--lake-root", str(tmp_path / "lake")])
    assert "give --date-column" in capsys.readouterr().err


def test_a_span_that_ends_before_it_starts_is_refused_before_anything_lands(tmp_path, capsys):
    from jobs.datasets.land_bikeshare import land

    source = tmp_path / "readings.csv"
    readings().to_csv(source, index=False)
    with pytest.raises(SystemExit):
        main(["--daily", f"readings={source}", "--date-column", "observed_on", "--from", "2015-09-25",
              "--to", "2015-09-23", "--lake-root", str(tmp_path / "lake")])
    assert "--from 2015-09-25 is after --to 2015-09-23" in capsys.readouterr().err
    with pytest.raises(LandingError, match="--from 2011-02-01 is after --to 2011-01-31"):
        land(Lake(str(tmp_path / "lake")), dt.date(2011, 2, 1), dt.date(2011, 1, 31))
    assert not (tmp_path / "lake").exists()

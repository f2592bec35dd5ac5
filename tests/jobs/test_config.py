from __future__ import annotations

import datetime as dt

import pytest

from jobs.config import Lake, days_ending, job_parser, load_config, parse_job_args


def test_days_ending_is_consecutive_and_ends_on_the_run_date():
    days = days_ending(dt.date(2013, 3, 2), 3)
    assert days == [dt.date(2013, 2, 28), dt.date(2013, 3, 1), dt.date(2013, 3, 2)]


def test_days_ending_rejects_an_empty_window():
    with pytest.raises(ValueError, match="at least one day"):
        days_ending(dt.date(2013, 1, 1), 0)


def test_parse_job_args_resolves_the_training_window_from_config(tmp_path):
    args = parse_job_args(job_parser(None), ["--run-date", "2013-01-28", "--days", "train", "--lake-root", "/x/"])
    cfg = load_config()
    assert args.days == cfg.train.train_days + cfg.train.holdout_days
    assert args.window[-1] == dt.date(2013, 1, 28) and len(args.window) == args.days
    assert args.lake == Lake("/x")


@pytest.mark.parametrize("bad", [["--run-date", "2013-13-01"], ["--run-date", "2013-01-01", "--days", "0"],
                                 ["--run-date", "2013-01-01", "--days", "week"]])
def test_parse_job_args_rejects_bad_input(bad, capsys):
    with pytest.raises(SystemExit):
        parse_job_args(job_parser(None), bad)
    assert "error" in capsys.readouterr().err


def test_broken_config_names_the_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("dataset: x\ntables: {}\n")
    with pytest.raises(ValueError, match="broken.yaml"):
        load_config(path)


def test_lake_paths_derive_from_the_root():
    lake = Lake("s3a://bucket/lake")
    day = dt.date(2013, 1, 2)
    assert lake.raw_file("flights", day) == "s3a://bucket/lake/raw/flights/date=2013-01-02/flights.csv"
    assert lake.raw_file("planes") == "s3a://bucket/lake/raw/planes/planes.csv"
    assert lake.partition(lake.predictions, day) == "s3a://bucket/lake/predictions/date=2013-01-02"

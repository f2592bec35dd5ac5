from __future__ import annotations

import datetime as dt

import pytest

from jobs.config import WindowArgs, days_ending, job_parser, load_config, parse_job_args
from jobs.lake.layout import Lake


def test_days_ending_is_consecutive_and_ends_on_the_run_date():
    days = days_ending(dt.date(2013, 3, 2), 3)
    assert days == [dt.date(2013, 2, 28), dt.date(2013, 3, 1), dt.date(2013, 3, 2)]


def test_days_ending_rejects_an_empty_window():
    with pytest.raises(ValueError, match="at least one day"):
        days_ending(dt.date(2013, 1, 1), 0)


def test_parse_job_args_resolves_the_training_window_from_config(tmp_path):
    args = parse_job_args(job_parser(None, window=True),
                          ["--run-date", "2013-01-28", "--days", "train", "--lake-root", "/x/"], WindowArgs)
    cfg = load_config()
    assert args.days == cfg.train.train_days + cfg.train.validation_days + cfg.train.holdout_days
    assert args.window[-1] == dt.date(2013, 1, 28) and len(args.window) == args.days
    assert args.lake == Lake("/x")


@pytest.mark.parametrize("bad", [["--run-date", "2013-13-01"], ["--run-date", "2013-01-01", "--days", "0"],
                                 ["--run-date", "2013-01-01", "--days", "week"]])
def test_parse_job_args_rejects_bad_input(bad, capsys):
    with pytest.raises(SystemExit):
        parse_job_args(job_parser(None, window=True), bad, WindowArgs)
    assert "error" in capsys.readouterr().err


def test_broken_config_names_the_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("dataset: x\ntables: {}\n")
    with pytest.raises(ValueError, match="broken.yaml"):
        load_config(path)


@pytest.mark.parametrize(("job", "argv", "refused"), [
    ("jobs.training.job", ["--days", "train"], "--days"),  # training's window is the config's
    ("jobs.monitoring.job", ["--model-version", "3"], "--model-version"),  # it judges every version that scored
    ("jobs.scoring.job", ["--num-processes", "2"], "--num-processes"),  # an option of another job
    ("jobs.features.job", ["--run-id", "x"], "--run-id"),
    ("jobs.validation.job", ["--use-gpu", "true"], "--use-gpu"),
])
def test_a_job_refuses_options_it_does_not_have(job, argv, refused, capsys):
    import importlib

    with pytest.raises(SystemExit):
        importlib.import_module(job).main(["--run-date", "2013-01-28", *argv])
    assert f"unrecognized arguments: {refused}" in capsys.readouterr().err


def test_each_job_parses_its_own_typed_options():
    from jobs.training.job import TrainArgs, parse_args

    args = parse_args(["--run-date", "2013-01-28", "--use-gpu", "true", "--precision", "bf16", "--lake-root", "/l"])
    # an override becomes the run's train.* setting; what is not given stays the config's
    assert isinstance(args, TrainArgs) and args.config.train.use_gpu is True and args.config.train.precision == "bf16"
    assert args.num_processes is None and args.config.train.local_mode == load_config().train.local_mode
    assert args.lake == Lake("/l") and args.run_date == dt.date(2013, 1, 28)
    assert not hasattr(args, "days")


def test_the_promotion_evidence_is_the_holdout_unless_live_and_live_days_is_k():
    from jobs.monitoring.spec import monitoring_spec

    spec = load_config().monitoring
    assert (spec.promotion_evidence, spec.live_days) == ("holdout", 7)
    assert monitoring_spec({"promotion_evidence": "live", "live_days": 3}).live_days == 3
    with pytest.raises(ValueError, match="promotion_evidence must be one of holdout, live"):
        monitoring_spec({"promotion_evidence": "shadow"})
    with pytest.raises(ValueError, match="live_days must be at least 1"):
        monitoring_spec({"live_days": 0})

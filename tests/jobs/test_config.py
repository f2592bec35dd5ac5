"""The config: one schema with its defaults, files merged in a stated order, mistakes refused at load
with the file, the key's path and the value, and each run-time override declared once."""

from __future__ import annotations

import datetime as dt
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from jobs.config import (
    DEFAULT_CONFIG,
    ConfigError,
    FeedCalendar,
    WindowArgs,
    days_ending,
    job_parser,
    load_config,
    parse_job_args,
    write_overlay,
)
from jobs.lake.layout import Lake

REPO = Path(__file__).resolve().parents[2]


def test_days_ending_is_consecutive_and_ends_on_the_run_date():
    days = days_ending(dt.date(2013, 3, 2), 3)
    assert days == [dt.date(2013, 2, 28), dt.date(2013, 3, 1), dt.date(2013, 3, 2)]


def test_days_ending_rejects_an_empty_window():
    with pytest.raises(ValueError, match="at least one day"):
        days_ending(dt.date(2013, 1, 1), 0)


def test_a_feed_calendar_says_which_days_are_open_and_counts_a_window_in_open_days():
    every = FeedCalendar()
    assert every.open_days_ending(dt.date(2013, 1, 6), 3) == days_ending(dt.date(2013, 1, 6), 3)  # the default
    weekdays = FeedCalendar(days="weekdays", closed=(dt.date(2013, 1, 1),))  # 2013-01-05 is a Saturday
    assert [weekdays.is_open(dt.date(2013, 1, d)) for d in (1, 2, 4, 5, 6, 7)] == [False, True, True, False,
                                                                                   False, True]
    assert weekdays.open_between(dt.date(2012, 12, 31), dt.date(2013, 1, 7)) == [
        dt.date(2012, 12, 31), dt.date(2013, 1, 2), dt.date(2013, 1, 3), dt.date(2013, 1, 4), dt.date(2013, 1, 7)]
    # N days of a window are N open days, ending with the last open day on or before the run date
    assert weekdays.open_days_ending(dt.date(2013, 1, 6), 4) == [
        dt.date(2012, 12, 31), dt.date(2013, 1, 2), dt.date(2013, 1, 3), dt.date(2013, 1, 4)]
    with pytest.raises(ValueError, match="at least one day"):
        weekdays.open_days_ending(dt.date(2013, 1, 6), 0)


def test_a_calendar_counts_the_label_delay_and_the_history_s_day_numbers_in_open_days():
    every, weekdays = FeedCalendar(), FeedCalendar(days="weekdays", closed=(dt.date(2013, 1, 1),))
    friday, monday = dt.date(2013, 1, 4), dt.date(2013, 1, 7)
    assert every.every_day and not weekdays.every_day
    assert every.shifted(friday, 1) == dt.date(2013, 1, 5) and every.shifted(friday, -3) == dt.date(2013, 1, 1)
    assert weekdays.shifted(friday, 1) == monday and weekdays.shifted(monday, -1) == friday  # over the weekend
    assert weekdays.shifted(dt.date(2013, 1, 2), -1) == dt.date(2012, 12, 31)  # and over New Year's Day
    assert weekdays.shifted(friday, 0) == friday
    assert weekdays.ordinals(dt.date(2012, 12, 31), monday) == {
        dt.date(2012, 12, 31): 0, dt.date(2013, 1, 2): 1, dt.date(2013, 1, 3): 2, friday: 3, monday: 4}
    assert len(every.ordinals(dt.date(2013, 1, 1), monday)) == 7
    empty = weekdays.with_closed([dt.date(2013, 1, 3), dt.date(2013, 1, 1)])
    assert empty.closed == (dt.date(2013, 1, 1), dt.date(2013, 1, 3)) and not empty.is_open(dt.date(2013, 1, 3))
    assert weekdays.with_closed([dt.date(2013, 1, 1)]) is weekdays


def test_a_feed_of_empty_days_closes_the_days_landed_without_rows_and_waits_for_the_others(tmp_path):
    path = write_overlay(tmp_path / "empty.yaml", {"feed_calendar": {"empty_days": True}})
    lake = Lake(str(tmp_path / "lake"))
    for day, text in ((2, "year,month\n"), (3, "year,month\n2013,1\n"), (5, ""), (9, "year,month\n")):
        file = Path(lake.raw_file("flights", dt.date(2013, 1, day)))
        file.parent.mkdir(parents=True)
        file.write_text(text)
    run = ["--config", str(path), "--lake-root", lake.root]
    args = parse_job_args(job_parser(None, window=True), ["--run-date", "2013-01-07", "--days", "7", *run], WindowArgs)
    # the days landed without rows up to the run date are closed; 01-04, 01-06 not landed: still expected
    assert args.config.feed_calendar.closed == (dt.date(2013, 1, 2), dt.date(2013, 1, 5))
    assert args.window == [dt.date(2013, 1, d) for d in (1, 3, 4, 6, 7)]
    plain = parse_job_args(job_parser(None, window=True), ["--run-date", "2013-01-07", "--lake-root", lake.root],
                           WindowArgs)
    assert plain.config.feed_calendar == FeedCalendar()  # without empty_days the raw zone is not read


def test_a_job_s_window_holds_only_open_days_and_a_closed_one_has_nothing_to_do(tmp_path, caplog):
    import logging

    path = write_overlay(tmp_path / "weekdays.yaml", {"feed_calendar": {"days": "weekdays"}})
    assert load_config(DEFAULT_CONFIG, profiles=(), overlays=()).feed_calendar == FeedCalendar()  # the flights
    run = ["--config", str(path), "--lake-root", str(tmp_path)]
    args = parse_job_args(job_parser(None, window=True), ["--run-date", "2013-01-07", "--days", "4", *run], WindowArgs)
    assert args.window == [dt.date(2013, 1, 4), dt.date(2013, 1, 7)]
    with caplog.at_level(logging.INFO):
        assert not args.nothing_open(logging.getLogger("test"), "validate")
    assert "2013-01-05, 2013-01-06 closed for the feed" in caplog.text
    weekend = parse_job_args(job_parser(None, window=True), ["--run-date", "2013-01-06", "--days", "2", *run],
                             WindowArgs)
    assert weekend.window == [] and weekend.nothing_open(logging.getLogger("test"), "validate")


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


def _changed(tmp_path: Path, text: str) -> Path:
    """A deployment's file over the bundled pipeline: ``text`` is what it changes."""
    path = tmp_path / "deployment.yaml"
    path.write_text(f"pipeline: {DEFAULT_CONFIG}\n{text}")
    return path


@pytest.mark.parametrize(("text", "where", "said"), [
    ("trian:\n  epochs: 3\n", "trian", "unknown key (a section)"),
    ("train:\n  max_train_dayz: 40\n", "train.max_train_dayz", "unknown key"),
    ("train:\n  learning_rate: fast\n", "train.learning_rate", "valid number"),
    ("train:\n  precision: bf32\n", "train.precision", "'auto', 'bf16', 'fp16' or 'fp32'"),
    ("score:\n  drift:\n    bins: 1\n", "score.drift.bins", "greater than or equal to 2"),
    ("features:\n  numeric: [dep_hour, month, distance, dep_houur]\n", "features.numeric",
     "['dep_houur'] are in no table"),
    ("features:\n  label: late\n", "features.label", "['late'] are in no table"),
    ("evaluation:\n  segments: [origin, terminal]\n", "evaluation.segments", "['terminal'] are not feature columns"),
    ("features:\n  history:\n    keys: {gate: [gate]}\n", "features.history.keys.gate", "not columns of the builder"),
    ("train:\n  train_days: 30\n  max_train_days: 20\n", "train", "must be at least train.train_days"),
    ("train:\n  validation_days: 0\n", "train.validation_days", "chosen on the validation days"),
    ("validation:\n  feed: planes\n", "validation.feed", "must be a daily table"),
    ("feed_calendar:\n  days: weekends\n", "feed_calendar.days", "'every' or 'weekdays' (got 'weekends')"),
])
def test_a_mistake_is_refused_at_load_naming_the_file_the_key_and_the_value(tmp_path, text, where, said):
    path = _changed(tmp_path, text)
    with pytest.raises(ConfigError) as refused:
        load_config(path, profiles=(), overlays=())
    message = str(refused.value)
    assert f"{path}: {where}" in message and said in message, message
    if "fast" in text:
        assert "(got 'fast')" in message


def test_the_defaults_live_in_the_schema_and_the_pipeline_lists_what_it_changes():
    """Every tunable the flights' files leave out is the schema's default, and the files set no
    default again (one set of defaults)."""
    import dataclasses

    from jobs.config import PipelineConfig, ScoreSpec, TrainSpec
    from jobs.config.files import pipeline_files

    config = load_config(DEFAULT_CONFIG, profiles=(), overlays=())
    assert config.train.launcher == TrainSpec.__dataclass_fields__["launcher"].default.default == "auto"
    assert config.score.recent_shift == ScoreSpec().recent_shift and config.sweep.size == 1
    defaults = {f.name: f.default for f in dataclasses.fields(PipelineConfig)}

    def restated(layer: dict, default: object, path: str) -> list[str]:
        found = []
        for key, value in layer.items():
            if dataclasses.is_dataclass(default) and key in {f.name for f in dataclasses.fields(default)}:
                own = getattr(default, key)
                if isinstance(value, dict) and dataclasses.is_dataclass(own):
                    found += restated(value, own, f"{path}.{key}")
                elif value == own:
                    found.append(f"{path}.{key}")
        return found

    for file in pipeline_files(DEFAULT_CONFIG):
        layer = yaml.safe_load(file.read_text())
        for section, value in layer.items():
            default = defaults.get(section)
            if isinstance(value, dict) and dataclasses.is_dataclass(default):
                assert restated(value, default, section) == [], file


def test_files_merge_in_the_stated_order_and_say_where_a_setting_came_from(tmp_path):
    deployment = _changed(tmp_path, "train:\n  epochs: 3\nscore:\n  drift:\n    plot: true\n")
    overlay = tmp_path / "last.yaml"
    overlay.write_text("train:\n  epochs: 4\n")
    config = load_config(deployment, profiles=["replay"], overlays=[str(overlay)])
    # the pipeline's own files, the deployment's file, the profile (plot off again), the overlay
    assert config.train.epochs == 4 and config.score.drift.plot is False and config.monitoring.challengers == 0
    assert config.train.model_name == "flight_delay" and config.evaluation.segments  # the flights' tunables
    assert [Path(p).name for p in config.layers] == ["dataset.yaml", "tunables.yaml", "deployment.yaml",
                                                     "replay.yaml", "last.yaml"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("score:\n  drift:\n    bins: many\n")
    with pytest.raises(ConfigError, match=f"{bad}: score.drift.bins"):
        load_config(deployment, profiles=(), overlays=[str(bad)])
    with pytest.raises(ConfigError, match="no profile 'nightly'"):
        load_config(deployment, profiles=["nightly"], overlays=())


def test_only_true_and_false_are_booleans_so_a_join_s_on_key_stays_a_key():
    from jobs.config.files import load_yaml

    # YAML 1.1 would read the keys and values on, off, yes and no as booleans
    assert load_yaml("joins:\n  - {table: t, on: [k]}\nflags: [yes, no, off, true, False]\n") == {
        "joins": [{"table": "t", "on": ["k"]}], "flags": ["yes", "no", "off", True, False]}


def test_the_environment_chooses_the_pipeline_profiles_and_overlays(tmp_path, monkeypatch):
    overlay = tmp_path / "o.yaml"
    overlay.write_text("sweep:\n  size: 3\n")
    monkeypatch.setenv("PIPELINE_PROFILES", "demo")
    monkeypatch.setenv("PIPELINE_OVERLAYS", str(overlay))
    config = load_config()
    assert [b.name for b in config.baselines] == ["logistic_regression"] and config.sweep.families == ["mlp"]
    assert config.sweep.size == 3


def test_an_overlay_is_checked_before_it_is_written(tmp_path):
    with pytest.raises(ConfigError, match="train.epochs"):
        write_overlay(tmp_path / "x.yaml", {"train": {"epochs": 0}})
    assert not (tmp_path / "x.yaml").exists()
    path = write_overlay(tmp_path / "x.yaml", {"train": {"epochs": 2}})
    assert load_config(path, profiles=(), overlays=()).train.epochs == 2


def test_a_config_mistake_exits_as_a_usage_error_before_any_spark_work(tmp_path):
    """Exit 64 and the message in the error file: the Airflow operator fails the task without a retry."""
    path = _changed(tmp_path, "train:\n  learning_rate: fast\n")
    error_file = tmp_path / "error.txt"
    done = subprocess.run([sys.executable, "-m", "jobs.features.job", "--run-date", "2013-01-28", "--config",
                           str(path), "--lake-root", str(tmp_path / "lake")], cwd=REPO, capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "PIPELINE_ERROR_FILE": str(error_file)},
                          timeout=120)
    assert done.returncode == 64, done.stderr
    assert "train.learning_rate" in error_file.read_text() and "(got 'fast')" in error_file.read_text()
    assert not (tmp_path / "lake").exists()


def test_each_job_parses_its_own_typed_options():
    from jobs.training.job import TrainArgs, parse_args

    args = parse_args(["--run-date", "2013-01-28", "--use-gpu", "true", "--precision", "bf16", "--lake-root", "/l"])
    # an override becomes the run's train.* setting; what is not given stays the config's
    assert isinstance(args, TrainArgs) and args.config.train.use_gpu is True and args.config.train.precision == "bf16"
    assert args.overrides == {"use_gpu": True, "precision": "bf16"}
    assert args.config.train.local_mode == load_config().train.local_mode
    assert args.lake == Lake("/l") and args.run_date == dt.date(2013, 1, 28)
    assert not hasattr(args, "days")


def test_overrides_come_as_json_an_option_wins_and_a_window_length_drops_the_expanding_window():
    from jobs.training.job import parse_args

    args = parse_args(["--run-date", "2013-01-28", "--overrides", '{"epochs": 3, "train_days": 9}', "--epochs", "4"])
    assert (args.config.train.epochs, args.config.train.train_days, args.config.train.max_train_days) == (4, 9, None)
    assert parse_args(["--run-date", "2013-01-28", "--overrides", "{}"]).overrides == {}
    with pytest.raises(ConfigError, match=r"train.epochs: Input should be greater than or equal to 1 \(got 0\)"):
        parse_args(["--run-date", "2013-01-28", "--overrides", '{"epochs": 0}'])
    with pytest.raises(ConfigError, match="are not overrides this job takes"):
        parse_args(["--run-date", "2013-01-28", "--overrides", '{"seed": 1}'])


def test_adding_an_override_is_one_line_that_reaches_the_dags_params_and_the_jobs_parser(monkeypatch):
    import jobs.config
    import jobs.config.cli
    import orchestration.dags.train  # noqa: F401 (imported now: bound to the real overrides, not this test's)
    from jobs.training.job import parse_args

    names = (*jobs.config.cli.RUN_OVERRIDES, "seed")  # the one line: a name in RUN_OVERRIDES
    monkeypatch.setattr(jobs.config.cli, "RUN_OVERRIDES", names)
    monkeypatch.setattr(jobs.config, "RUN_OVERRIDES", names)
    assert parse_args(["--run-date", "2013-01-28", "--seed", "7"]).config.train.seed == 7
    spec = importlib.util.spec_from_file_location("train_dag_with_seed", REPO / "orchestration/dags/train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    param = module.train_params()["seed"]
    assert param.value is None and param.schema["type"] == ["null", "integer"] and param.description
    assert jobs.config.override_json({"seed": 7, "epochs": None}) == '{"seed": 7}'


def test_the_promotion_evidence_is_the_holdout_unless_live_and_live_days_is_k():
    from jobs.config import MonitoringSpec

    spec = load_config().monitoring
    assert (spec.promotion_evidence, spec.live_days) == ("holdout", 7)
    assert MonitoringSpec(promotion_evidence="live", live_days=3).live_days == 3
    with pytest.raises(ValueError, match="'holdout' or 'live'"):
        MonitoringSpec(promotion_evidence="shadow")
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        MonitoringSpec(live_days=0)


@pytest.mark.parametrize(("job", "argv", "refused"), [
    ("jobs.training.job", ["--days", "train"], "--days"),  # training's window is the config's
    ("jobs.monitoring.job", ["--model-version", "3"], "--model-version"),  # it judges every version that scored
    ("jobs.scoring.job", ["--num-processes", "2"], "--num-processes"),  # an option of another job
    ("jobs.features.job", ["--run-id", "x"], "--run-id"),
    ("jobs.validation.job", ["--use-gpu", "true"], "--use-gpu"),
])
def test_a_job_refuses_options_it_does_not_have(job, argv, refused, capsys):
    with pytest.raises(SystemExit):
        importlib.import_module(job).main(["--run-date", "2013-01-28", *argv])
    assert f"unrecognized arguments: {refused}" in capsys.readouterr().err

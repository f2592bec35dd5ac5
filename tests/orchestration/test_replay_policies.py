"""The replay's decisions are the DAGs': its weekly retraining fires where ``flights_train``'s
timetable does (Airflow computes that side), and each policy's retraining is what
``training_plan`` plans for the events it listens to."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

pytest.importorskip("airflow")

DAGS_DIR = Path(__file__).resolve().parents[2] / "dags"
FEBRUARY = [dt.date(2013, 2, 1) + dt.timedelta(days=i) for i in range(28)]


def _airflow_schedule_ends(first: dt.date, last: dt.date) -> list[dt.datetime]:
    """The data interval ends of flights_train's scheduled runs in [first, last + 1 day], as
    Airflow's scheduler computes them from the DAG's own timetable."""
    import pendulum
    from airflow.dag_processing.dagbag import DagBag
    from airflow.timetables.base import TimeRestriction
    from airflow.timetables.interval import CronDataIntervalTimetable

    dag = DagBag(dag_folder=str(DAGS_DIR)).dags["flights_train"]
    cron = dag.timetable.timetable  # AssetOrTimeSchedule: the time half
    timetable = CronDataIntervalTimetable(cron.expression, timezone=str(cron.timezone))
    before = first - dt.timedelta(days=31)  # a run's interval may start before ``first``
    earliest = pendulum.datetime(before.year, before.month, before.day, tz="UTC")
    restriction = TimeRestriction(earliest=earliest, latest=None, catchup=True)
    ends, last_interval = [], None
    while True:
        info = timetable.next_dagrun_info(last_automated_data_interval=last_interval, restriction=restriction)
        end = info.data_interval.end
        if end.date() > last + dt.timedelta(days=1):
            return ends
        if end.date() > first:
            ends.append(dt.datetime.fromtimestamp(end.timestamp(), dt.UTC))
        last_interval = info.data_interval


def test_the_weekly_retraining_fires_where_train_pipeline_s_timetable_does():
    from orchestration.decisions import scheduled_training_end
    from orchestration.replay.policies import POLICIES, retraining

    expected = _airflow_schedule_ends(FEBRUARY[0], FEBRUARY[-1])
    assert len(expected) == 4  # February 2013: four Sundays
    assert [scheduled_training_end(day) for day in FEBRUARY if scheduled_training_end(day)] == expected
    planned = {day: retraining(POLICIES["weekly"], day, None, None) for day in FEBRUARY}
    fired = {day: plan for day, plan in planned.items() if plan}
    assert [dt.datetime.combine(d + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC) for d in fired] == expected
    for day, plan in fired.items():  # the window ends with the last whole day before the run, as the DAG's
        assert plan == {"run_date": day.isoformat(), "trigger": "schedule",
                        "started_by": f"the weekly schedule (window up to {day})"}
    assert all(retraining(POLICIES["never"], day, None, None) is None for day in FEBRUARY)


@pytest.mark.parametrize(("policy", "trigger"), [
    ("never", None), ("weekly", None), ("drift", "drift"), ("decay", "decay"), ("default", "decay")])
def test_each_policy_starts_the_training_run_date_and_words_of_training_plan(policy, trigger):
    """A Wednesday with a drift and a decay event: each policy's run is ``training_plan``'s for the
    events it listens to (decay first, as the DAG plans it), none for the others."""
    from orchestration.decisions import training_plan
    from orchestration.replay.policies import POLICIES, retraining

    wednesday = dt.date(2013, 3, 6)
    drift = {"run_date": "2013-03-06", "reasons": ["dep_hour PSI 0.31 >= 0.2"], "report": "drift.json"}
    decay = {"run_date": "2013-03-06", "model_version": "4", "reasons": ["realized roc_auc 0.58"], "report": "d.json"}
    plan = retraining(POLICIES[policy], wednesday, drift, decay)
    if trigger is None:
        assert plan is None
        return
    listened = POLICIES[policy]
    assert plan == training_plan(None, [drift] if listened.drift else [], None, [decay] if listened.decay else [])
    assert plan["trigger"] == trigger and plan["run_date"] == "2013-03-06"


def test_an_unknown_policy_or_a_reversed_span_is_refused(tmp_path):
    from orchestration.replay.engine import Replay

    with pytest.raises(ValueError, match="unknown policy hourly: choose from never, weekly, drift, decay, default"):
        Replay(tmp_path, policies=("hourly",))
    with pytest.raises(ValueError, match="--end 2013-02-01 is before --start 2013-03-01"):
        Replay(tmp_path, start=dt.date(2013, 3, 1), end=dt.date(2013, 2, 1))


def test_the_shared_lake_reaches_as_far_back_as_the_expanding_window_does(tmp_path, config_patch):
    """A replay from July lands and validates the months before it (the 180-day cap's reach, not
    before the data's first day), so its first windows are as long as a replay from February has
    them by July; a window of fixed length reaches back its own days only. A home prepared from
    another first day is not resumed."""
    import json

    from orchestration.replay.engine import Replay

    july = Replay(tmp_path / "july", start=dt.date(2013, 7, 14), policies=("never",))
    assert july.base.train.max_train_days == 180
    assert july.lake_from == dt.date(2013, 1, 5)  # the window of 2013-07-13: 190 days, 01-05..07-13
    assert july.state["setup"]["lake_from"] == "2013-01-05"
    assert Replay(tmp_path / "february", policies=("never",)).lake_from == dt.date(2013, 1, 1)  # the data's first
    fixed = config_patch.write(tmp_path / "config", train={"max_train_days": None})
    assert Replay(tmp_path / "fixed", start=dt.date(2013, 7, 14), policies=("never",),
                  base_config=str(fixed)).lake_from == dt.date(2013, 6, 16)  # 18 + 3 + 7 days
    from jobs.config.files import PIPELINES

    bikes = Replay(tmp_path / "bikes", start=dt.date(2011, 3, 1), end=dt.date(2011, 3, 31), policies=("never",),
                   base_config=str(PIPELINES / "bikeshare"), land_with="jobs.datasets.land_bikeshare")
    assert bikes.lake_from == dt.date(2011, 1, 1)  # another pipeline's data, landed by its own module

    state = tmp_path / "older" / "state.json"  # prepared before the lake reached back: its first window's days
    state.parent.mkdir()
    setup = {**july.state["setup"]}
    del setup["lake_from"]
    state.write_text(json.dumps({"setup": setup}))
    with pytest.raises(ValueError, match="holds a replay with other settings"):
        Replay(tmp_path / "older", start=dt.date(2013, 7, 14), policies=("never",))


def test_each_replay_home_has_an_mlflow_store_of_its_own(tmp_path, monkeypatch):
    """An earlier replay's runs (a baseline of the first champion's window), versions and aliases
    live in its home's store: a replay in a fresh home sees none of them, whatever store the
    environment names (make's gives every home the same one), and the environment's is untouched."""
    import mlflow

    shared = f"sqlite:///{tmp_path}/shared.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", shared)  # first: the test's end puts back the variable as it was
    previous = mlflow.get_tracking_uri()
    # as after an earlier test in the process: MLflow's own URI is not the environment's (and
    # MLflow 3's set_tracking_uri writes the variable too, so the replay must put it back after)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/elsewhere.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", shared)
    try:
        _replay_homes_apart(tmp_path, shared)
    finally:
        mlflow.set_tracking_uri(previous)


def _replay_homes_apart(tmp_path, shared: str) -> None:
    import os

    from mlflow import MlflowClient

    from jobs.tracking import client, ensure_experiment
    from orchestration.replay.engine import Replay

    earlier, fresh = (Replay(tmp_path / home, policies=("never",)) for home in ("earlier", "fresh"))
    model, experiment = earlier.model_name("never"), f"{earlier.base.train.experiment}-replay"
    with earlier.store():
        mlflow_client = client()
        run = mlflow_client.create_run(ensure_experiment(experiment), tags={
            "candidate_kind": "baseline", "candidate_name": "logistic_regression", "run_date": "2013-01-31",
            "holdout_window": "2013-01-29..2013-01-31"})
        mlflow_client.log_metric(run.info.run_id, "holdout_roc_auc", 0.99)
        mlflow_client.set_terminated(run.info.run_id, "FINISHED")
        mlflow_client.create_registered_model(model)
        version = mlflow_client.create_model_version(model, source=(tmp_path / "model").as_uri()).version
        mlflow_client.set_registered_model_alias(model, "champion", version)
    assert os.environ["MLFLOW_TRACKING_URI"] == shared
    with fresh.store():
        seen = client()
        assert seen.get_experiment_by_name(experiment) is None
        assert seen.search_registered_models() == []
    assert earlier.tracking_uri != fresh.tracking_uri
    assert str(MlflowClient(earlier.tracking_uri).get_model_version_by_alias(model, "champion").version) == str(version)
    assert MlflowClient(shared).search_experiments(filter_string=f"name = '{experiment}'") == []

"""The pipeline as the deployed stack operates it (``tests/stack.py``: PostgreSQL behind Airflow and
an MLflow server, Airflow's API server, scheduler, DAG processor and triggerer, a Spark standalone
cluster, all real processes on loopback, not ``dag.test()``): a backfill of the ingest DAG created
through the REST API the way a person would (``POST /api/v2/backfills``), scoring started by the
``features`` Asset for every ingested day, and a day that drifts starting a retraining run by
itself through the ``scoring_drift`` Asset. Every task is a real spark-submit.

It works on a lake of its own (a copy of the session lake's raw and validated zones, with the last
day's raw flights made to drift) and the stack's MLflow server, with a champion trained here
before the DAGs are unpaused.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from jobs.lake.layout import DRIFT_REPORT, partition_day, partition_name
from tests.stack import running_stack

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
DAGS = ["ingest_pipeline", "score_pipeline", "train_pipeline"]
TRAIN_DATE = dt.date(2013, 1, 7)  # the first champion: trains on 01-01..01-05, evaluates on 01-06..01-07
DAYS = [dt.date(2013, 1, 8), dt.date(2013, 1, 9), dt.date(2013, 1, 10)]
DRIFT_DAY = DAYS[-1]  # its flights arrive with every distance four times too long
KEYS = ["carrier", "flight", "origin", "sched_dep_time"]


@pytest.fixture(scope="module")
def backfill_env(lake, spark, config_patch, tmp_path_factory):
    """The environment of the backfill: its own lake and a short-window config.

    Yields ``(environment for Airflow's tasks, the lake)``.
    """
    from jobs.lake.layout import Lake

    home = tmp_path_factory.mktemp("backfill")
    own = Lake(str(home / "lake"))
    for zone in ("raw", "validated"):
        shutil.copytree(f"{lake.root}/{zone}", f"{own.root}/{zone}")
    _make_drift(own.raw_file("flights", DRIFT_DAY))
    # One candidate, no baselines: the retraining as it was before the sweep (tested in test_e2e.py);
    # GX's cross-check is tested on its own, here it only adds time.
    config_path = config_patch.write(
        home, train={"train_days": 5, "validation_days": 0, "holdout_days": 2, "epochs": 2},
        baselines=[], validation={"great_expectations": False},
        replace={"evaluation": {"threshold": 0.5}, "sweep": {"size": 1}},
    )
    env = {
        "LAKE_ROOT": own.root,
        "PIPELINE_MLFLOW_ARTIFACTS": str(home / "mlartifacts"),
        "PIPELINE_CONFIG": str(config_path),
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield env, own
    import mlflow

    # The jobs' MLflow client set the global URI, and mlflow.set_tracking_uri also writes it to
    # os.environ: point both back at the session's store.
    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])


def _make_drift(path: str) -> None:
    """Rewrite a day's raw flights (in this test's own copy) with every distance times four:
    still valid rows, but a distribution the champion never saw."""
    flights = pd.read_csv(path, dtype=str, keep_default_na=False)
    flights["distance"] = [str(float(value) * 4) for value in flights["distance"]]
    flights.to_csv(path, index=False)


def _train_champion(lake):
    """Build the training window's features and train with the real jobs, in this process, on
    the MLflow server of ``$MLFLOW_TRACKING_URI``. The store is new, so the first version becomes
    champion."""
    from jobs.config import load_config
    from jobs.features import job as features
    from jobs.tracking import champion_version
    from jobs.training import job as train

    window = str(load_config().train.window_days)
    features.main(["--run-date", TRAIN_DATE.isoformat(), "--days", window, "--lake-root", lake.root])
    train.main(["--run-date", TRAIN_DATE.isoformat(), "--lake-root", lake.root])
    return champion_version(load_config().train.model_name)


def _of(runs: list[dict], run_type: str) -> list[dict]:
    return [r for r in runs if r["run_type"] == run_type]


def _retrained(runs: dict[str, list[dict]]) -> bool:
    """The chain has done its work: the three backfilled days ingested and a retraining finished."""
    return (len(_of(runs["ingest_pipeline"], "backfill")) == len(DAYS)
            and any(r["state"] == "success" for r in _of(runs["train_pipeline"], "asset_triggered")))


def test_backfilled_days_are_scored_and_a_drifting_day_starts_a_retraining(backfill_env, tmp_path, monkeypatch):
    env, lake = backfill_env
    # The schedules on, as deployed: without them the scheduler starts no Asset-triggered run either.
    with running_stack(tmp_path, env, airflow_settings={"AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "True"}) as stack:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", stack.mlflow.url)
        champion = _train_champion(lake)
        _check(stack.airflow, lake, champion)


def _check(airflow, lake, champion) -> None:
    """Backfill, let the chain come to rest, and check what it did (the stack still running)."""
    from jobs.config import load_config
    from jobs.tracking import client

    for dag_id in DAGS:
        airflow.wait_for_dag(dag_id)
        airflow.unpause(dag_id)  # the scheduler starts no run, backfills included, of a paused DAG
    # The range names logical dates, both ends included: one run per day of DAYS.
    planned = airflow.backfill("ingest_pipeline", DAYS[0], DAYS[-1], dry_run=True)
    assert [b["logical_date"][:10] for b in planned["backfills"]] == [d.isoformat() for d in DAYS]
    backfill = airflow.backfill("ingest_pipeline", DAYS[0], DAYS[-1], max_active_runs=1)
    assert backfill["dag_id"] == "ingest_pipeline", backfill
    # Bounded, with room for a shared 2-core machine: failed tries end the wait at once anyway.
    runs = airflow.settle(DAGS, _retrained, timeout=1500)
    states = {dag_id: airflow.task_instances(dag_id) for dag_id in DAGS}

    # unpausing started no doomed run: the scheduled runs for the last day and week of today's
    # calendar (no raw data, no features) were skipped at their first task
    for dag_id, first in (("ingest_pipeline", "wait_for_raw"), ("train_pipeline", "plan_training")):
        for run in _of(runs[dag_id], "scheduled"):
            assert run["state"] == "success", run
            first_state = {ti["task_id"]: ti["state"] for ti in states[dag_id] if ti["dag_run_id"] == run["dag_run_id"]}
            assert first_state[first] == "skipped", first_state
    ingest = _of(runs["ingest_pipeline"], "backfill")
    assert [r["logical_date"][:10] for r in ingest] == [d.isoformat() for d in DAYS]
    assert {r["state"] for r in ingest} == {"success"}
    for day, run in zip(DAYS, ingest, strict=True):
        # the day was validated by this backfill's run (its run id is in the report), not by anything earlier
        report = json.loads(Path(lake.validation_report(day, 1)).read_text())
        assert report["run_id"] == run["dag_run_id"] and report["success"], report["run_id"]

    # scoring followed the features Asset: every run started by an event, every day scored once at least
    assert {(r["run_type"], r["state"]) for r in runs["score_pipeline"]} == {("asset_triggered", "success")}
    mlflow_client = client()
    name = load_config().train.model_name
    now = mlflow_client.get_model_version_by_alias(name, "champion")
    for day in DAYS:
        flights = pd.read_csv(lake.raw_file("flights", day))
        predictions = pq.read_table(lake.partition(lake.predictions, day)).to_pandas()
        assert len(predictions) == len(flights), day  # one row per input flight
        assert not predictions.duplicated(KEYS).any(), day
        assert sorted(map(tuple, predictions[KEYS].to_numpy())) == sorted(map(tuple, flights[KEYS].to_numpy()))
        assert predictions["probability"].between(0.0, 1.0).all(), day
        # the last model to be champion scored the drifted day again; the other days kept the first
        expected = str(now.version) if day == DRIFT_DAY else champion.version
        assert set(predictions["model_version"]) == {expected}, day
    written = sorted(p.name for p in Path(lake.predictions).iterdir() if partition_day(p.name) is not None)
    assert written == [partition_name(d) for d in DAYS]  # nothing but the ingested days was scored

    # the drifted day started exactly one retraining, which says so, on the window ending that day
    drift = json.loads(Path(lake.report("drift", DRIFT_DAY, DRIFT_REPORT)).read_text())
    assert drift["drifted"] and any("distance" in reason for reason in drift["reasons"]), drift["reasons"]
    assert [r["state"] for r in _of(runs["train_pipeline"], "asset_triggered")] == ["success"]
    versions = {str(v.version): v for v in mlflow_client.search_model_versions(f"name = '{name}'")}
    assert len(versions) == 2
    retrained = max(versions.values(), key=lambda v: int(v.version))
    assert retrained.tags["run_date"] == DRIFT_DAY.isoformat()
    started_by = mlflow_client.get_run(retrained.run_id).data.tags["started_by"]
    assert started_by.startswith(f"drift on {DRIFT_DAY}") and "distance" in started_by, started_by
    # a promoted retraining re-scored the drifted day, whose drift then started no second retraining
    checks = [ti for ti in states["score_pipeline"] if ti["task_id"] == "check_drift"]
    promoted = retrained.tags["gate_decision"] == "promoted"
    assert str(now.version) == (str(retrained.version) if promoted else champion.version)
    assert sum(ti["state"] == "success" for ti in checks) == 1  # the one event for DRIFT_DAY
    assert len(runs["score_pipeline"]) >= (2 if promoted else 1)

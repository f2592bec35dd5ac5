"""A backfill through a running Airflow (scheduler, DAG processor, API server), not ``dag.test()``.

The backfill is created with the REST API the way a person would (``POST /api/v2/backfills``),
and the scheduler runs it: every task a real spark-submit. It works on a lake and an MLflow store
of its own (a copy of the session lake's raw and validated zones, and a fresh SQLite store with a
champion trained here), because ``tests/test_e2e.py`` expects the session's store to hold only
its own model and the session's predictions zone only its own day.
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
import yaml

from jobs.lake import partition_day, partition_name
from tests.airflow_server import running_airflow

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
DAG_ID = "score_pipeline"
TRAIN_DATE = dt.date(2013, 1, 7)  # trains on 01-01..01-05, evaluates on 01-06..01-07
DAYS = [dt.date(2013, 1, 8), dt.date(2013, 1, 9), dt.date(2013, 1, 10)]
KEYS = ["carrier", "flight", "origin", "sched_dep_time"]
STAGES = ["validate_raw", "build_features", "score_batch"]  # every run must have done these


@pytest.fixture(scope="module")
def backfill_env(lake, spark, tmp_path_factory):
    """The environment of the backfill: its own lake and MLflow store, a short-window config and a champion.

    Yields ``(environment for Airflow, the lake, the champion's ModelRef)``.
    """
    from jobs.lake import Lake

    home = tmp_path_factory.mktemp("backfill")
    own = Lake(str(home / "lake"))
    for zone in ("raw", "validated"):
        shutil.copytree(f"{lake.root}/{zone}", f"{own.root}/{zone}")
    raw = yaml.safe_load((REPO / "jobs/pipeline.yaml").read_text())
    raw["train"].update(train_days=5, holdout_days=2, epochs=2)
    raw["validation"]["great_expectations"] = False  # tested on its own; here it only adds time
    config_path = home / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    env = {
        "LAKE_ROOT": own.root,
        "MLFLOW_TRACKING_URI": f"sqlite:///{home}/mlflow.db",
        "PIPELINE_MLFLOW_ARTIFACTS": str(home / "mlartifacts"),
        "PIPELINE_CONFIG": str(config_path),
    }
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        yield env, own, _train_champion(own)
    import mlflow

    # The jobs' MLflow client set the global URI, and mlflow.set_tracking_uri also writes it to
    # os.environ: point both back at the session's store.
    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])


def _train_champion(lake):
    """Build the training window's features and train with the real jobs, in this process.

    The store is new, so the first version becomes champion.
    """
    from jobs import features, train
    from jobs.config import load_config
    from jobs.tracking import champion_version

    window = str(load_config().train.window_days)
    features.main(["--run-date", TRAIN_DATE.isoformat(), "--days", window, "--lake-root", lake.root])
    train.main(["--run-date", TRAIN_DATE.isoformat(), "--lake-root", lake.root])
    return champion_version(load_config().train.model_name)


def test_a_backfill_over_three_days_writes_three_prediction_partitions(backfill_env, tmp_path):
    env, lake, champion = backfill_env
    with running_airflow(tmp_path, env) as airflow:
        airflow.wait_for_dag(DAG_ID)
        airflow.unpause(DAG_ID)  # the scheduler starts no run, backfills included, of a paused DAG
        # The range names logical dates, both ends included: one run per day of DAYS.
        planned = airflow.backfill(DAG_ID, DAYS[0], DAYS[-1], dry_run=True)
        assert [b["logical_date"][:10] for b in planned["backfills"]] == [d.isoformat() for d in DAYS]

        backfill = airflow.backfill(DAG_ID, DAYS[0], DAYS[-1], max_active_runs=len(DAYS))
        assert (backfill["dag_id"], backfill["max_active_runs"]) == (DAG_ID, len(DAYS)), backfill
        # Bounded, with room for a shared 2-core machine: failed tries end the wait at once anyway.
        runs = airflow.wait_for_runs(DAG_ID, count=len(DAYS), timeout=900)

        assert [r["logical_date"][:10] for r in runs] == [d.isoformat() for d in DAYS]
        assert {(r["run_type"], r["state"]) for r in runs} == {("backfill", "success")}
        states = {(ti["dag_run_id"], ti["task_id"]): ti["state"] for ti in airflow.task_instances(DAG_ID)}
        for run in runs:
            assert all(states[run["dag_run_id"], task] == "success" for task in STAGES), states
        assert set(states.values()) <= {"success", "skipped"}, states  # e.g. a check with nothing to report

    for day, run in zip(DAYS, runs, strict=True):
        # the day was validated by this backfill's run (its run id is in the report), not by anything earlier
        report = json.loads(Path(lake.validation_report(day, 1)).read_text())
        assert report["run_id"] == run["dag_run_id"] and report["success"], report["run_id"]

        flights = pd.read_csv(lake.raw_file("flights", day))
        predictions = pq.read_table(lake.partition(lake.predictions, day)).to_pandas()
        assert len(predictions) == len(flights), day  # one row per input flight
        assert not predictions.duplicated(KEYS).any(), day
        assert sorted(map(tuple, predictions[KEYS].to_numpy())) == sorted(map(tuple, flights[KEYS].to_numpy()))
        assert set(predictions["model_version"]) == {champion.version}, day
        assert set(predictions["model_run_id"]) == {champion.run_id}, day
        assert predictions["probability"].between(0.0, 1.0).all(), day
    # nothing but the backfilled days was scored (no scheduled run for "yesterday")
    written = sorted(p.name for p in Path(lake.predictions).iterdir() if partition_day(p.name) is not None)
    assert written == [partition_name(d) for d in DAYS]

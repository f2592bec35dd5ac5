"""Faults of the platform under the pipeline, on the shared deployed stack (``scenario.py``), after
the backfills: each case breaks a part the way operations do, drives the pipeline through the REST
API like a user, and checks what is left: the lake's partitions and row accounting, Airflow's run
and task states, the lock files.

- The scheduler's machine lost while ingest validates a day: the scheduler, its executor's
  workers, the task's process and its spark-submit all SIGKILLed; the scheduler started again
  finds the task without a heartbeat, fails that try and retries it; the run ends successfully,
  the day's partitions hold each row once, no lock is left and no task instance stays running.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.deployed.scenario import DAYS

pytestmark = pytest.mark.e2e

RECOVERY_TIMEOUT = 900  # the heartbeat timeout (60 s here), the retry delay (1 min, then 2), the retried jobs


def _wait_for_run(airflow, dag_id: str, run_id: str, timeout: float) -> dict:
    """Wait until run ``run_id`` has finished (failed tries on the way are what this waits through)."""
    deadline = time.monotonic() + timeout
    while True:
        airflow.check_alive()
        [run] = [r for r in airflow.dag_runs(dag_id) if r["dag_run_id"] == run_id]
        if run["state"] in ("success", "failed"):
            return run
        if time.monotonic() > deadline:
            raise AssertionError(f"{dag_id} {run_id} not finished within {timeout:.0f} s\n{airflow.describe(dag_id)}")
        time.sleep(5)


def test_a_lost_scheduler_started_again_retries_the_killed_task_and_writes_the_day_once(stack, stack_lake, training):
    airflow, lake, day = stack.airflow, stack_lake, DAYS[0]
    # the day is ingested again; its scoring is not part of this case
    airflow.request("PATCH", "/api/v2/dags/score_pipeline", {"is_paused": True})
    run_id = airflow.trigger("ingest_pipeline", {"run_date": day.isoformat()})["dag_run_id"]
    airflow.wait_for_task("ingest_pipeline", run_id, "validate_raw", "running", timeout=300, poll=1)
    time.sleep(5)  # its spark-submit under way
    killed = airflow.kill("scheduler")
    assert any("SparkSubmit" in line or "spark-submit" in line for line in killed), killed  # the task's went too
    airflow.start("scheduler")

    run = _wait_for_run(airflow, "ingest_pipeline", run_id, RECOVERY_TIMEOUT)
    tis = {ti["task_id"]: ti for ti in airflow.task_instances("ingest_pipeline") if ti["dag_run_id"] == run_id}
    assert run["state"] == "success", airflow.describe("ingest_pipeline")
    assert tis["validate_raw"]["try_number"] == 2, tis["validate_raw"]  # the killed try failed, the retry ran
    assert {ti["state"] for ti in tis.values()} == {"success"}, tis
    running = [ti for dag_id in ("ingest_pipeline", "train_pipeline", "score_pipeline")
               for ti in airflow.task_instances(dag_id) if ti["state"] in ("running", "queued", "scheduled")]
    assert running == [], running
    assert airflow.health()["scheduler"]["status"] == "healthy"

    # the day once: every raw row validated or quarantined, one feature row per validated flight
    raw = len(pd.read_csv(lake.raw_file("flights", day), dtype=str, keep_default_na=False))
    validated = pq.read_table(lake.partition(lake.validated("flights"), day)).num_rows
    quarantine = Path(lake.partition(lake.quarantine("flights"), day))
    quarantined = pq.read_table(quarantine).num_rows if quarantine.exists() else 0
    assert raw == validated + quarantined, (raw, validated, quarantined)
    assert pq.read_table(lake.partition(lake.features, day)).num_rows == validated
    report = json.loads(Path(lake.validation_report(day, 1)).read_text())
    assert report["run_id"] == run_id and report["success"], report["run_id"]
    # no lock left behind, and no staging of the killed try in the zones it wrote
    assert [p for p in Path(lake.root, "locks").rglob("*") if p.is_file()] == []
    staging = [p for zone in ("validated", "quarantine", "features") for p in Path(lake.root, zone).rglob("*")
               if p.name.startswith((".spark-staging", "_temporary"))]
    assert staging == [], staging

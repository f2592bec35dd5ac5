"""Faults of the platform under the pipeline, on the shared deployed stack (``scenario.py``), after
the backfills: each case breaks a part the way operations do, drives the pipeline through the REST
API like a user, and checks what is left: the lake's partitions and row accounting, Airflow's run
and task states, the lock files.

- The scheduler's machine lost while ingest validates a day: the scheduler, its executor's
  workers, the task's process and its spark-submit all SIGKILLed; the scheduler started again
  marks its dead predecessor's job failed at its next check for orphans and resets the task,
  which runs again as its second try; the run ends successfully, the day's partitions hold each
  row once, no lock is left and no task instance stays running.
- A task's worker lost while ingest validates a day: the executor's worker that supervises the task,
  the task's process and its spark-submit SIGKILLed, the scheduler left running; the scheduler
  fails the try for its missing heartbeat (the audit log says so) and retries it; the retry writes
  what the backfill's clean run of the day wrote, row for row.
- The MLflow server lost while a day is scored (killed as the scoring task starts, down until its
  try has ended): the try fails as a fault, saying so in one line (not as "no champion", a data
  error never retried), the server comes back, the retry scores the day once with the champion;
  the drift and scoring reports are whole, nothing is left staged or locked.
- The lake's disk full under the predictions while a scored day is scored again: the try fails
  as a fault saying so, the day's partition stays as it was, no staging; space freed, the retry
  writes the day once.
- PostgreSQL crashed (``pg_ctl stop -m immediate``) for 30 s under a retraining: it recovers;
  what of Airflow exits is restarted by the stack's restart policy; the training's MLflow calls
  ride it out (``tracking.*``), so the run succeeds on the training's first try, nothing left
  running in Airflow or MLflow, and the champion moves only with the gate.
- PostgreSQL crashed the same way for 30 s as a day is scored (stopped as the score job's
  spark-submit starts, before the job has looked the champion up): the job's registry calls and the
  task's calls to Airflow's execution API wait for it, and score_batch succeeds on its first try, the
  day scored once by the champion.
- Load, in part: 50 trigger requests at once are each accepted or refused cleanly (the backfills'
  health-check latencies are measured in ``test_backfill.py``).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.deployed.scenario import DAGS, DAYS, KEYS, TRAIN_DATE, TRAIN_TIMEOUT, check_day_once, locks, staging
from tests.stack import wait_until

pytestmark = pytest.mark.e2e

RECOVERY_TIMEOUT = 900  # the orphan check (30 s here), the heartbeat timeout (60 s), the retry delay (5 s), the jobs


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
    airflow.pause("flights_score")
    airflow.unpause("flights_ingest")  # as test_backfill left it: the case runs alone too
    run_id = airflow.trigger("flights_ingest", {"run_date": day.isoformat()})["dag_run_id"]
    airflow.wait_for_task("flights_ingest", run_id, "validate_raw", "running", timeout=300, poll=1)
    airflow.wait_for_command("SparkSubmit")  # its spark-submit under way
    time.sleep(2)
    killed = airflow.kill("scheduler")
    assert any("SparkSubmit" in line or "spark-submit" in line for line in killed), killed  # the task's went too
    airflow.start("scheduler")

    run = _wait_for_run(airflow, "flights_ingest", run_id, RECOVERY_TIMEOUT)
    _check_retried_once(airflow, run, "validate_raw")
    assert "Reset the following 1 orphaned TaskInstances" in airflow.logs["scheduler"].read_text()
    check_day_once(lake, day, run_id)


def test_a_lost_task_worker_is_failed_by_its_missing_heartbeat_and_the_retry_writes_a_clean_runs_rows(
        stack, stack_lake, training):
    airflow, lake, day = stack.airflow, stack_lake, DAYS[1]
    clean = _day_rows(lake, day)  # what the backfill's run of the day wrote
    airflow.pause("flights_score")  # ingest alone, as above
    airflow.unpause("flights_ingest")
    run_id = airflow.trigger("flights_ingest", {"run_date": day.isoformat()})["dag_run_id"]
    ti = airflow.wait_for_task("flights_ingest", run_id, "validate_raw", "running", timeout=300, poll=1)
    airflow.wait_for_command("SparkSubmit")  # its spark-submit under way
    time.sleep(2)
    killed = airflow.kill_task(ti["id"])
    assert any("SparkSubmit" in line or "spark-submit" in line for line in killed), killed
    assert airflow.processes["scheduler"].poll() is None  # the scheduler was not touched

    run = _wait_for_run(airflow, "flights_ingest", run_id, RECOVERY_TIMEOUT)
    _check_retried_once(airflow, run, "validate_raw")
    # Airflow found the try by its missing heartbeat (nothing else could report it: its supervisor died)
    timeouts = [e for e in airflow.event_logs("flights_ingest", "heartbeat timeout")
                if (e["run_id"], e["task_id"], e["try_number"]) == (run_id, "validate_raw", 1)]
    assert len(timeouts) == 1, airflow.event_logs("flights_ingest", "heartbeat timeout")
    check_day_once(lake, day, run_id)
    assert _day_rows(lake, day) == clean


def _day_rows(lake, day) -> dict[str, list[tuple]]:
    """The day's rows in each zone ingest writes, sorted, without the quarantine's ``_run_id`` (the
    writing run's id); [] where the day has none."""
    found = {}
    for zone in (lake.validated("flights"), lake.quarantine("flights"), lake.features):
        path = Path(lake.partition(zone, day))
        table = pq.read_table(path).to_pandas().drop(columns="_run_id", errors="ignore") if path.exists() else None
        found[zone] = [] if table is None else sorted(map(tuple, table.astype(str).to_numpy()))
    return found


def _check_retried_once(airflow, run: dict, task_id: str, skipped: frozenset[str] = frozenset()) -> None:
    """The run succeeded with ``task_id`` on its second try, every other task succeeded (or was
    skipped, for those in ``skipped``), and nothing of any DAG is left running."""
    run_id = run["dag_run_id"]
    tis = {ti["task_id"]: ti for ti in airflow.task_instances(run["dag_id"]) if ti["dag_run_id"] == run_id}
    assert run["state"] == "success", airflow.describe(run["dag_id"])
    assert tis[task_id]["try_number"] == 2, tis[task_id]  # the killed try failed, the retry ran
    states = {name: ti["state"] for name, ti in tis.items()}
    assert all(state == "success" or (name in skipped and state == "skipped") for name, state in states.items()), \
        states
    running = [ti for dag_id in DAGS for ti in airflow.task_instances(dag_id)
               if ti["state"] in ("running", "queued", "scheduled")]
    assert running == [], running
    assert airflow.health()["scheduler"]["status"] == "healthy"


def test_the_mlflow_server_lost_while_a_day_is_scored_fails_the_try_saying_so_and_the_retry_scores_the_day_once(
        stack, stack_lake, training):
    import mlflow

    from jobs.lake.layout import DRIFT_REPORT
    from jobs.selection.gate import current_champion
    from tests.deployed.scenario import MODEL

    airflow, lake, day = stack.airflow, stack_lake, DAYS[0]
    champion = str(current_champion(mlflow.MlflowClient(stack.mlflow.url), MODEL).version)
    airflow.unpause("flights_score")  # paused above; nothing was queued for it meanwhile
    run_id = airflow.trigger("flights_score", {"run_date": day.isoformat()})["dag_run_id"]
    ti = airflow.wait_for_task("flights_score", run_id, "score_batch", "running", timeout=300, poll=1)
    stack.mlflow.kill()  # before the job has looked the champion up or loaded it
    # down (a redeploy gone wrong) until the try has ended: the job cannot score without the registry
    ended = _wait_for_try(airflow, "flights_score", run_id, "score_batch", ti["try_number"], timeout=300)
    stack.mlflow.start().ready()

    assert ended == "up_for_retry", airflow.describe("flights_score")  # a fault, retried: not a data error
    log = airflow.task_log("flights_score", run_id, "score_batch", 1, lines=400, map_index=ti["map_index"])
    assert "failed (a fault: Airflow retries the task)" in log and "data error" not in log, log
    run = _wait_for_run(airflow, "flights_score", run_id, RECOVERY_TIMEOUT)
    # a normal day: no drift, one day too few to judge decay, no live promotion in this config
    _check_retried_once(airflow, run, "score_batch", skipped=frozenset({"check_drift", "check_decay",
                                                                       "promote_challenger"}))

    # the day scored once, by the champion, and its reports whole
    flights = pd.read_csv(lake.raw_file("flights", day))
    predictions = pq.read_table(lake.partition(lake.predictions, day)).to_pandas()
    assert len(predictions) == len(flights) and not predictions.duplicated(KEYS).any()
    assert set(predictions["model_version"]) == {champion}
    drift = json.loads(Path(lake.report("drift", day, DRIFT_REPORT)).read_text())
    assert (drift["run_date"], drift["model_version"], drift["drifted"]) == (day.isoformat(), champion, False)
    summary = json.loads(Path(lake.report("scoring", day)).read_text())
    assert (summary["rows"], summary["model_version"]) == (len(flights), champion)
    assert locks(lake) == []
    assert staging(Path(lake.predictions)) == []
    assert str(current_champion(mlflow.MlflowClient(stack.mlflow.url), MODEL).version) == champion


def _wait_for_rest(airflow, timeout: float) -> None:
    """Wait until no run of any DAG is unfinished, whatever its tries' states (a paused DAG's queued
    runs wait for it to be unpaused: they count as at rest)."""
    deadline = time.monotonic() + timeout
    while True:
        airflow.check_alive()
        paused = {dag_id for dag_id in DAGS if airflow.request("GET", f"/api/v2/dags/{dag_id}")["is_paused"]}
        unfinished = [(dag_id, r["dag_run_id"], r["state"]) for dag_id in DAGS for r in airflow.dag_runs(dag_id)
                      if r["state"] not in ("success", "failed") and not (dag_id in paused and r["state"] == "queued")]
        if not unfinished:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"runs not finished within {timeout:.0f} s: {unfinished}")
        time.sleep(5)


def _wait_for_try(airflow, dag_id: str, run_id: str, task_id: str, try_number: int, timeout: float) -> str:
    """Wait until try ``try_number`` of ``task_id`` has ended; the state it left (up_for_retry,
    success, failed)."""
    deadline = time.monotonic() + timeout
    while True:
        airflow.check_alive()
        [ti] = [ti for ti in airflow.task_instances(dag_id) if (ti["dag_run_id"], ti["task_id"]) == (run_id, task_id)]
        if ti["try_number"] > try_number or ti["state"] in ("up_for_retry", "success", "failed"):
            return ti["state"] if ti["try_number"] == try_number else "up_for_retry"
        if time.monotonic() > deadline:
            raise AssertionError(f"{task_id} try {try_number} not ended within {timeout:.0f} s\n"
                                 f"{airflow.describe(dag_id)}")
        time.sleep(1)


def test_a_full_disk_under_the_predictions_fails_the_try_saying_so_keeps_the_day_and_the_retry_writes_it_once(
        stack, stack_lake, training, small_disk, tmp_path):
    """The predictions zone on a small disk of its own (a tmpfs mounted over it, holding a copy of
    what the zone held) with no room left, while a day already scored is scored again: the try
    fails as a fault saying the disk is full, the day's partition is the one written before and no
    staging is left; space freed, the retry writes the day once. The zone's own folder, under the
    mount, is untouched and comes back when it is unmounted."""
    import hashlib
    import shutil

    airflow, lake, day = stack.airflow, stack_lake, DAYS[0]
    zone = Path(lake.predictions)
    partition = Path(lake.partition(lake.predictions, day))

    def digest() -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in partition.iterdir()}

    underneath = digest()
    copy = shutil.copytree(zone, tmp_path / "predictions")
    held = sum(-(-p.stat().st_size // 4096) * 4096 for p in copy.rglob("*") if p.is_file())
    small_disk(zone, f"{held // 1024 + 1024}k")
    shutil.copytree(copy, zone, dirs_exist_ok=True)
    filler = small_disk.fill(zone)
    assert digest() == underneath

    run_id = airflow.trigger("flights_score", {"run_date": day.isoformat()})["dag_run_id"]
    ti = airflow.wait_for_task("flights_score", run_id, "score_batch", "running", timeout=300, poll=1)
    ended = _wait_for_try(airflow, "flights_score", run_id, "score_batch", ti["try_number"], timeout=600)
    assert ended == "up_for_retry", airflow.describe("flights_score")  # a fault: space may be freed
    assert digest() == underneath  # the day as it was
    assert staging(zone) == []
    filler.unlink()  # an operator frees space; the retry (5 s later here) writes the day
    log = airflow.task_log("flights_score", run_id, "score_batch", 1, lines=400, map_index=ti["map_index"])
    [line] = [line for line in log.splitlines() if "failed (a fault: Airflow retries the task)" in line]
    assert "the disk is full (No space left on device" in line and "free space on the lake's disk" in line, line

    run = _wait_for_run(airflow, "flights_score", run_id, RECOVERY_TIMEOUT)
    _check_retried_once(airflow, run, "score_batch", skipped=frozenset({"check_drift", "check_decay",
                                                                       "promote_challenger"}))
    flights = pd.read_csv(lake.raw_file("flights", day))
    predictions = pq.read_table(partition).to_pandas()
    assert len(predictions) == len(flights) and not predictions.duplicated(KEYS).any()
    assert digest().keys() != underneath.keys()  # replaced by the retry's files
    assert staging(zone) == []
    assert locks(lake) == []


def test_postgresql_stopped_immediately_during_training_recovers_and_the_champion_moves_only_with_the_gate(
        stack, stack_lake, training):
    """PostgreSQL (Airflow's and MLflow's database) stopped with ``pg_ctl stop -m immediate`` while
    a retraining logs to MLflow, started again 30 s later: it recovers from its WAL; the MLflow
    server and Airflow's API server stay up, the Airflow components that exit without their
    database are started again by the restart policy (as compose's); the training's MLflow calls
    wait for the database (retries with backoff, ``tracking.*``), so promote_candidate succeeds on its
    first try; nothing is left running or queued in Airflow, no run RUNNING in MLflow, every
    component healthy; the champion moved to this run's version only if its gate promoted it."""
    import mlflow

    from jobs.selection.gate import current_champion
    from tests.deployed.scenario import MODEL

    airflow, day = stack.airflow, TRAIN_DATE  # the first champion's window: its run finished, so trained afresh
    client = mlflow.MlflowClient(stack.mlflow.url)
    before = current_champion(client, MODEL)
    known = {v.version for v in client.search_model_versions(f"name = '{MODEL}'")}
    airflow.pause("flights_score")  # the new champion's re-scoring is not part of this case
    airflow.unpause("flights_train")
    run_id = airflow.trigger("flights_train", {"run_date": day.isoformat()})["dag_run_id"]
    mine = f"tags.run_date = '{day.isoformat()}'"

    def training_logs() -> bool:  # its MLflow run open, an epoch's metrics in
        runs = mlflow.search_runs(search_all_experiments=True, output_format="list",
                                  filter_string=f"{mine} and attributes.status = 'RUNNING'")
        return any(run.data.metrics for run in runs)

    wait_until(training_logs, "the retraining's first metrics in MLflow", TRAIN_TIMEOUT,
               alive=airflow.check_alive)
    assert airflow.restarts == []  # none before
    heard = stack.mlflow.log.stat().st_size
    said = stack.postgres.stop_immediately()
    assert "server stopped" in said, said
    time.sleep(30)  # down: every query of Airflow's processes, the MLflow server and the job fails
    stack.postgres.start().ready()

    run = _wait_for_run(airflow, "flights_train", run_id, RECOVERY_TIMEOUT)  # restarts what exited
    _wait_for_rest(airflow, timeout=300)
    assert "database system was not properly shut down; automatic recovery in progress" in \
        stack.postgres.log.read_text()
    tis = {ti["task_id"]: ti for ti in airflow.task_instances("flights_train") if ti["dag_run_id"] == run_id}
    running = [ti for dag_id in DAGS for ti in airflow.task_instances(dag_id)
               if ti["state"] in ("running", "queued", "scheduled", "up_for_retry")]
    assert running == [], running
    health = airflow.health()
    assert {part: state["status"] for part, state in health.items()} == dict.fromkeys(health, "healthy"), health
    # The DAG processor, the triggerer and at times the scheduler exit when their database is gone
    # (Airflow's own behaviour); the deployment's restart policy, as compose's, starts them again.
    restarted = sorted({name for name, _, _ in airflow.restarts})
    airflow.restarts.clear()  # accounted for: the last test checks that nothing else restarted
    assert stack.mlflow.health() == "OK"
    left = mlflow.search_runs(search_all_experiments=True, output_format="list",
                              filter_string="attributes.status = 'RUNNING'")
    assert left == [], [(r.info.run_id, r.data.tags.get("run_date")) for r in left]
    assert locks(stack_lake) == []

    after = current_champion(client, MODEL)
    new = [v for v in client.search_model_versions(f"name = '{MODEL}'") if v.version not in known]
    gated = [v for v in new if v.tags.get("gate_decision") == "promoted"]  # the gate's last step: the alias
    assert len(new) <= 1 and len(gated) <= 1, new  # one training, registered once at most
    if gated:
        assert after.version == gated[0].version != before.version
        assert tis["promote_candidate"]["state"] == "success", tis["promote_candidate"]
    else:
        assert after.version == before.version  # no gate, no move
    # the training's MLflow calls rode the restart out: the server turned its calls away meanwhile
    # (503: no database), its first try succeeded all the same, and so did the run
    refused = _refused(stack, heard, "/api/2.0/mlflow/runs/")
    assert refused, "no run call of the training reached the MLflow server while PostgreSQL was down"
    promoted = tis["promote_candidate"]
    assert (promoted["state"], promoted["try_number"]) == ("success", 1), promoted
    log = airflow.task_log("flights_train", run_id, "promote_candidate", 1, lines=400)
    assert "failed (a fault" not in log, log[-3000:]
    assert run["state"] == "success", airflow.describe("flights_train")
    print(f"restarted: {restarted}; flights_train {run_id}: {run['state']}; tries "
          f"{ {name: (ti['state'], ti['try_number']) for name, ti in tis.items()} }")


def test_postgresql_stopped_immediately_as_a_day_is_scored_the_jobs_registry_calls_wait_and_its_first_try_scores(
        stack, stack_lake, training):
    """PostgreSQL stopped with ``pg_ctl stop -m immediate`` as score_batch's spark-submit starts
    (before the job has looked the champion up), started again 30 s later: the MLflow server
    answers 503 meanwhile, the job's registry calls retry with backoff (``tracking.*``), the task's
    own calls to Airflow's execution API (its heartbeats, its end state) retry too
    (``AIRFLOW__WORKERS__EXECUTION_API_RETRIES``, scripts/env.sh), and its first try scores the day;
    the run succeeds, the day once, by the champion; nothing left running, every component healthy
    (the restart policy starts again what of Airflow exited)."""
    import mlflow

    from jobs.selection.gate import current_champion
    from tests.deployed.scenario import MODEL

    # the first champion's day: its features are in the stack's lake from the start (this case
    # needs no backfill before it), and scoring it again is what a new champion does anyway
    airflow, lake, day = stack.airflow, stack_lake, TRAIN_DATE
    champion = str(current_champion(mlflow.MlflowClient(stack.mlflow.url), MODEL).version)
    airflow.unpause("flights_score")
    run_id = airflow.trigger("flights_score", {"run_date": day.isoformat()})["dag_run_id"]
    ti = airflow.wait_for_task("flights_score", run_id, "score_batch", "running", timeout=300, poll=1)
    # once its spark-submit runs: the task has its inputs from Airflow, the job has not yet called
    # MLflow (a JVM, then the Python driver's imports, come first)
    wait_until(lambda: _spark_submit(airflow, "scoring/job.py"), "the score job's spark-submit", 120,
               alive=airflow.check_alive)
    heard = stack.mlflow.log.stat().st_size
    said = stack.postgres.stop_immediately()
    assert "server stopped" in said, said
    time.sleep(30)
    stack.postgres.start().ready()

    run = _wait_for_run(airflow, "flights_score", run_id, RECOVERY_TIMEOUT)
    _wait_for_rest(airflow, timeout=300)
    tis = {t["task_id"]: t for t in airflow.task_instances("flights_score") if t["dag_run_id"] == run_id}
    refused = _refused(stack, heard, "/api/2.0/mlflow/")
    assert refused, "no call of the score job reached the MLflow server while PostgreSQL was down"
    assert (tis["score_batch"]["state"], tis["score_batch"]["try_number"]) == ("success", 1), tis["score_batch"]
    log = airflow.task_log("flights_score", run_id, "score_batch", 1, lines=400, map_index=ti["map_index"])
    assert "failed (a fault" not in log, log[-3000:]
    assert run["state"] == "success", airflow.describe("flights_score")
    airflow.restarts.clear()  # the components that exit without their database: the case above checks them
    health = airflow.health()
    assert {part: state["status"] for part, state in health.items()} == dict.fromkeys(health, "healthy"), health

    flights = pd.read_csv(lake.raw_file("flights", day))
    predictions = pq.read_table(lake.partition(lake.predictions, day)).to_pandas()
    assert len(predictions) == len(flights) and not predictions.duplicated(KEYS).any()
    assert set(predictions["model_version"]) == {champion}
    assert locks(lake) == [] and staging(Path(lake.predictions)) == []
    print(f"the MLflow server refused {len(refused)} call(s) while PostgreSQL was down: {refused[:3]}")


def _refused(stack, heard: int, path: str) -> list[str]:
    """The MLflow server's log lines, after its first ``heard`` bytes, of calls under ``path`` that it
    answered 503 (its database unreachable)."""
    with stack.mlflow.log.open("rb") as server_log:
        server_log.seek(heard)
        return [line for line in server_log.read().decode(errors="replace").splitlines()
                if path in line and " 503 " in line]


def _spark_submit(airflow, application: str) -> bool:
    """Whether a spark-submit of ``application`` runs under the scheduler (a task's, with the
    LocalExecutor)."""
    import psutil

    for process in psutil.Process(airflow.processes["scheduler"].pid).children(recursive=True):
        try:
            command = " ".join(process.cmdline())
        except psutil.Error:  # ended meanwhile
            continue
        if "SparkSubmit" in command and application in command:
            return True
    return False


def test_fifty_trigger_requests_at_once_are_each_accepted_or_refused_cleanly(stack, training):
    """50 requests for a run of one DAG at the same moment (the DAG paused: nothing starts): each is
    answered, with a run of its own (200) or a refusal with a reason (409), never a server error or
    silence; the DAG holds exactly the runs accepted, which are deleted again."""
    import re
    from concurrent.futures import ThreadPoolExecutor

    from tests.airflow_server import AirflowError

    airflow, dag_id = stack.airflow, "flights_train"
    airflow.pause(dag_id)
    before = {r["dag_run_id"] for r in airflow.dag_runs(dag_id)}

    def trigger(_: int) -> tuple[int, str]:
        try:
            return 200, airflow.trigger(dag_id, {"run_date": DAYS[0].isoformat()})["dag_run_id"]
        except AirflowError as exc:
            found = re.search(r"HTTP (\d+): (.*)", str(exc), re.S)
            return (int(found.group(1)), found.group(2)) if found else (0, str(exc))

    with ThreadPoolExecutor(max_workers=50) as pool:
        answers = list(pool.map(trigger, range(50)))
    assert {code for code, _ in answers} <= {200, 409}, [a for a in answers if a[0] not in (200, 409)]
    for code, body in answers:
        if code == 409:
            assert json.loads(body)["detail"], body  # a reason a client can show
    accepted = {run_id for code, run_id in answers if code == 200}
    assert accepted and len(accepted) == sum(code == 200 for code, _ in answers)  # one run each
    runs = {r["dag_run_id"]: r for r in airflow.dag_runs(dag_id) if r["dag_run_id"] not in before}
    assert set(runs) == accepted
    assert {r["state"] for r in runs.values()} == {"queued"}  # paused: none started
    for run_id in accepted:
        airflow.request("DELETE", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}")
    assert {r["dag_run_id"] for r in airflow.dag_runs(dag_id)} == before

"""The pipeline as the deployed stack operates it (``scenario.py``, started once for this folder,
not ``dag.test()``): backfills of the ingest DAG created through the REST API the way a person
would (``POST /api/v2/backfills``), scoring started by the ``features`` Asset for every ingested
day, the monitor judging every scored day on its outcomes, and both retraining triggers firing by
themselves. Every task is a real spark-submit; the nightly jobs' sessions are the Connect
server's, training's driver its own on the standalone cluster.

Two backfills, one after the other, after the first champion (``test_stack.py``'s approved run):

1. ``DAYS[0]`` (a normal day) and ``DECAY_DAY``, whose outcomes are turned around for the flights
   from two of the three airports while every model input stays as it was: drift (PSI) stays
   quiet, the monitor sees the champion's realized log loss soar, ``check_decay`` updates the
   ``model_decay`` Asset and exactly one retraining starts, tagged ``decay``. The new champion
   re-scores the decayed day without starting a second one.
2. ``DRIFT_DAY``, whose flights arrive with every distance four times too long: the new champion
   scores it (the day after the decay), its drift starts a retraining through the
   ``scoring_drift`` Asset, and that one's champion re-scores it.

All along, the API answers a health check every 2 s (as a load balancer asks it); the calls'
latencies (median, p95, max) are kept in ``api-health-latency.json`` under the test home.

Headless Chromium then opens the Model health page through the Airflow UI and finds the decay and
both retrainings; its screenshot is kept (``make health-screenshot-stack`` copies it to docs/).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import statistics
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from jobs.lake.layout import DECAY_REPORT, DRIFT_REPORT, PARTITION, partition_day, partition_name
from tests.airflow_server import health_probe
from tests.browser import SCREENSHOTS, Page, chromium
from tests.deployed.scenario import DAGS, DAYS, DECAY_DAY, DRIFT_DAY, KEYS, TRAIN_DATE

pytestmark = pytest.mark.e2e

LATENCY = Path(os.environ["PIPELINE_TEST_HOME"]) / "api-health-latency.json"  # the health check's figures


def _of(runs: list[dict], run_type: str) -> list[dict]:
    return [r for r in runs if r["run_type"] == run_type]


def _served_by(lake, day: dt.date) -> set[str]:
    """The model versions of a day's served predictions (empty before it is scored)."""
    path = Path(lake.partition(lake.predictions, day))
    if not path.exists():
        return set()
    return set(pq.read_table(path, columns=["model_version"]).column("model_version").to_pylist())


def _rescored(lake, day: dt.date, trainings: int):
    """The chain's work is done: ``trainings`` retrainings finished and the day re-scored by a
    version none of the earlier champions is (the latest: every retraining is promoted)."""

    def done(runs: dict[str, list[dict]]) -> bool:
        finished = [r for r in _of(runs["flights_train"], "asset_triggered") if r["state"] == "success"]
        return len(finished) >= trainings and _served_by(lake, day) == {str(1 + trainings)}

    return done


def test_backfilled_days_are_scored_and_decay_then_drift_start_one_retraining_each(stack, stack_lake, training,
                                                                                      tmp_path, spark, lake, config):
    assert training["version"].version == "1"  # the first champion, approved by a person
    _check(stack.airflow, stack_lake)
    _check_connect(stack, spark, lake, stack_lake, config)
    _the_triggers_said_why(stack)
    pages = _see_the_model_health_page(stack.airflow, tmp_path)
    _secrets_stay_secret(stack, stack_lake, pages)


def _check(airflow, lake) -> None:
    """Backfill in two steps, let the chain come to rest after each, and check what it did (the
    stack still running)."""
    from jobs.config import load_config
    from jobs.tracking import client

    for dag_id in DAGS:
        airflow.wait_for_dag(dag_id)
        airflow.unpause(dag_id)  # the scheduler starts no run, backfills included, of a paused DAG
    # The range names logical dates, both ends included: one run per day.
    planned = airflow.backfill("flights_ingest", DAYS[0], DAYS[-1], dry_run=True)
    assert [b["logical_date"][:10] for b in planned["backfills"]] == [d.isoformat() for d in DAYS]
    # Bounded, with room for a shared 2-core machine: failed tries end the wait at once anyway.
    # The API answers its health check every 2 s all along (health_probe raises on a failed call).
    started = time.monotonic()
    with health_probe(airflow) as latencies:
        backfill = airflow.backfill("flights_ingest", DAYS[0], DECAY_DAY, max_active_runs=1)
        assert backfill["dag_id"] == "flights_ingest", backfill
        airflow.settle(DAGS, _rescored(lake, DECAY_DAY, 1), timeout=1200)
        _check_decay(lake)
        airflow.backfill("flights_ingest", DRIFT_DAY, DRIFT_DAY, max_active_runs=1)
        runs = airflow.settle(DAGS, _rescored(lake, DRIFT_DAY, 2), timeout=1200)
    seconds = time.monotonic() - started
    assert len(latencies) > seconds / 4, (len(latencies), seconds)  # the probe ran all along
    figures = {"calls": len(latencies), "seconds": round(seconds), "p50_s": round(statistics.median(latencies), 3),
               "p95_s": round(statistics.quantiles(latencies, n=20)[-1], 3), "max_s": round(max(latencies), 3)}
    LATENCY.write_text(json.dumps(figures, indent=2))
    print(f"\nthe API's health check during the backfills: {figures} ({LATENCY})")
    states = {dag_id: airflow.task_instances(dag_id) for dag_id in DAGS}

    # unpausing started no doomed run: the scheduled runs for the last day and week of today's
    # calendar (no raw data, no features) were skipped at their first task
    for dag_id, first in (("flights_ingest", "wait_for_raw"), ("flights_train", "plan_training")):
        for run in _of(runs[dag_id], "scheduled"):
            assert run["state"] == "success", run
            first_state = {ti["task_id"]: ti["state"] for ti in states[dag_id] if ti["dag_run_id"] == run["dag_run_id"]}
            assert first_state[first] == "skipped", first_state
    ingest = _of(runs["flights_ingest"], "backfill")
    assert [r["logical_date"][:10] for r in ingest] == [d.isoformat() for d in DAYS]
    assert {r["state"] for r in ingest} == {"success"}
    for day, run in zip(DAYS, ingest, strict=True):
        # the day was validated by this backfill's run (its run id is in the report), not by anything earlier
        report = json.loads(Path(lake.validation_report(day, 1)).read_text())
        assert report["run_id"] == run["dag_run_id"] and report["success"], report["run_id"]

    # scoring followed the features Asset and the champion: every run started by an event
    assert {(r["run_type"], r["state"]) for r in runs["flights_score"]} == {("asset_triggered", "success")}
    for day in DAYS:
        flights = pd.read_csv(lake.raw_file("flights", day))
        predictions = pq.read_table(lake.partition(lake.predictions, day)).to_pandas()
        assert len(predictions) == len(flights), day  # one row per input flight
        assert not predictions.duplicated(KEYS).any(), day
        assert sorted(map(tuple, predictions[KEYS].to_numpy())) == sorted(map(tuple, flights[KEYS].to_numpy()))
        assert predictions["probability"].between(0.0, 1.0).all(), day
    # each retraining's champion re-scored its own day; the first day kept the first champion
    assert [_served_by(lake, day) for day in DAYS] == [{"1"}, {"2"}, {"3"}]
    # nothing but the ingested days was scored, and the first champion's own day: scoring follows
    # the champion_model Asset, which the approved promotion updated
    written = sorted(p.name for p in Path(lake.predictions).iterdir() if partition_day(p.name) is not None)
    assert written == [partition_name(d) for d in [TRAIN_DATE, *DAYS]]

    # two retrainings, each started by its own trigger, on the window ending its day
    mlflow_client = client()
    name = load_config().train.model_name
    assert str(mlflow_client.get_model_version_by_alias(name, "champion").version) == "3"
    versions = {str(v.version): v for v in mlflow_client.search_model_versions(f"name = '{name}'")}
    assert sorted(versions) == ["1", "2", "3"]
    assert [r["state"] for r in _of(runs["flights_train"], "asset_triggered")] == ["success", "success"]
    for version, day, trigger, started in (("2", DECAY_DAY, "decay", f"decay of version 1 on {DECAY_DAY}"),
                                           ("3", DRIFT_DAY, "drift", f"drift on {DRIFT_DAY}")):
        assert versions[version].tags["run_date"] == day.isoformat()
        assert versions[version].tags["gate_decision"] == "promoted"
        tags = mlflow_client.get_run(versions[version].run_id).data.tags
        assert tags["trigger"] == trigger and tags["started_by"].startswith(started), tags
    drift = json.loads(Path(lake.report("drift", DRIFT_DAY, DRIFT_REPORT)).read_text())
    assert drift["drifted"] and any("distance" in reason for reason in drift["reasons"]), drift["reasons"]
    checks = [ti for ti in states["flights_score"] if ti["task_id"] == "check_drift"]
    assert sum(ti["state"] == "success" for ti in checks) == 1  # the one event, for DRIFT_DAY
    decays = [ti for ti in states["flights_score"] if ti["task_id"] == "check_decay"]
    assert sum(ti["state"] == "success" for ti in decays) == 1  # the one event, for DECAY_DAY

    # the decay-retrained champion served the day after the decay: the monitor judged it there,
    # in its version's monitoring run (step = the day), before the drift retraining replaced it
    from jobs.monitoring.job import EXPERIMENT_SUFFIX, MONITORING_OF, day_step

    experiment = mlflow_client.get_experiment_by_name(load_config().train.experiment + EXPERIMENT_SUFFIX)
    (run,) = mlflow_client.search_runs([experiment.experiment_id], filter_string=f"tags.{MONITORING_OF} = '{name}/2'")
    steps = {m.step for m in mlflow_client.get_metric_history(run.info.run_id, "roc_auc")}
    assert steps == {day_step(DECAY_DAY), day_step(DRIFT_DAY)}, steps


def _check_connect(stack, spark, session_lake, lake, config) -> None:
    """The nightly jobs' sessions were the Connect server's (no SparkContext started in their task),
    training's its own, on the standalone cluster; and what the Connect sessions wrote is what a
    classic session writes: the day the backfill left as it was, validated and featurized again
    on the server, against the session lake's partition (a classic validation) and features built
    here."""
    from jobs.features.job import build_features, read_inputs

    logs: dict[str, list[Path]] = {}
    for path in Path(stack.airflow.home / "logs").rglob("attempt=*.log"):
        (task,) = [part.removeprefix("task_id=") for part in path.parts if part.startswith("task_id=")]
        logs.setdefault(task, []).append(path)
    nightly = [p for task in ("validate_raw", "build_features", "score_batch", "monitor_day") for p in logs[task]]
    for path in nightly:
        text = path.read_text(errors="replace")
        assert "jobs.timings: timings:" in text and "Running Spark version" not in text, path
    server_log = stack.connect.log.read_text(errors="replace")
    assert "Running Spark version" in server_log
    # every job released its session when it ended: the server holds none of them until its idle
    # timeout (an hour), which a backfill's hundreds of sessions outgrew (its heap ran out)
    used = set(re.findall(r'(?<!\w)session_id: "([0-9a-f-]{36})"', server_log))  # not server_side_session_id
    closed = set(re.findall(r"Closing session with userId: .*? and sessionId: ([0-9a-f-]{36})", server_log))
    assert used and used <= closed, sorted(used - closed)
    for path in logs["promote_candidate"]:
        assert f"Connecting to master {stack.spark.url}" in path.read_text(errors="replace"), path

    day = partition_name(DAYS[0])
    written, copied = ({p.name for p in Path(zone.validated("flights"), day).glob("part-*")}
                       for zone in (lake, session_lake))
    assert written and not written & copied  # the backfill wrote the day again (its copy was replaced)
    flights = list(config.tables["flights"].columns)
    assert _rows(f"{lake.validated('flights')}/{day}", flights) == \
        _rows(f"{session_lake.validated('flights')}/{day}", flights)
    classic = build_features(read_inputs(spark, session_lake, config, [DAYS[0]]), config, [DAYS[0]]).toPandas()
    columns = [c for c in classic.columns if c != PARTITION]
    assert len(classic) > 100
    assert _rows(f"{lake.features}/{day}", columns) == sorted(map(tuple, classic[columns].astype(str).to_numpy()))


def _the_triggers_said_why(stack) -> None:
    """Each check that started a retraining ends its log with one line naming the pipeline, the
    day, the version, the DAG that retrains and the report."""
    said = {task: "\n".join(p.read_text(errors="replace") for p in Path(stack.airflow.home / "logs").rglob(
        "attempt=*.log") if f"task_id={task}" in p.parts) for task in ("check_drift", "check_decay")}
    drift, decay = said["check_drift"], said["check_decay"]
    assert (f"pipeline flights: {DRIFT_DAY} drifted from version 2's training window" in drift
            and "flights_train retrains on it; read " in drift
            and f"{partition_name(DRIFT_DAY)}/{DRIFT_REPORT}" in drift), drift[-3000:]
    assert (f"pipeline flights: version 1 decayed on {DECAY_DAY} (above): flights_train retrains on the days up "
            f"to it; report: " in decay and f"{partition_name(DECAY_DAY)}/{DECAY_REPORT}" in decay), decay[-3000:]


def _rows(folder: str, columns: list[str]) -> list[tuple]:
    table = pq.read_table(folder).to_pandas()[columns]
    return sorted(map(tuple, table.astype(str).to_numpy()))


def _check_decay(lake) -> None:
    """After the first backfill: the decayed day's inputs did not drift, its outcomes decayed the
    champion, the decay started the one retraining, and its champion's re-scoring did not start
    another."""
    drift = json.loads(Path(lake.report("drift", DECAY_DAY, DRIFT_REPORT)).read_text())
    assert not drift["drifted"], drift["reasons"]  # PSI quiet: the inputs are those of a normal day
    normal = json.loads(Path(lake.report("decay", DAYS[0], DECAY_REPORT)).read_text())
    assert normal["model_version"] == "1" and normal["status"] == "judged" and not normal["decayed"], normal
    decay = json.loads(Path(lake.report("decay", DECAY_DAY, DECAY_REPORT)).read_text())
    # the re-scoring by version 2 rewrote the day's report: not judged again on the day that retrained it
    assert decay["model_version"] == "2" and not decay["triggered"], decay
    assert decay["status"].startswith("not enough days"), decay["status"]
    # version 1's verdict, which started the retraining, stays in the rewritten report
    (first,) = decay["earlier"]
    assert first["model_version"] == "1" and first["decayed"] and first["triggered"], first
    assert first["metric"]["low"] > first["holdout"] + first["margin"], first  # log loss: higher is worse
    assert [reason.split(" (")[0] for reason in first["reasons"]] == [
        f"realized log_loss {first['metric']['value']:.3f}"], first["reasons"]
    # the day's record: the new champion's judgement, and version 1's, which it replaced, as it was
    monitored = json.loads(Path(lake.monitoring_report(DECAY_DAY)).read_text())
    entry, replaced = monitored["models"]
    assert (entry["model_version"], entry["role"], entry["status"]) == ("2", "champion", "ok"), entry
    assert (replaced["model_version"], replaced["role"]) == ("1", "replaced"), replaced
    assert replaced["metrics"]["log_loss"]["value"] == pytest.approx(first["metric"]["value"])


def _see_the_model_health_page(airflow, tmp_path) -> list[str]:
    """The Model health page, opened from the Airflow UI's navigation as a person does, shows the
    decay and both retrainings with what started them; the HTML of what the browser showed."""
    with chromium(tmp_path) as browser:
        page = Page(browser, prefix="backfill-")
        try:
            page.log_in(airflow)
            page.open_model_health(airflow.url, "flights")  # the stack serves two pipelines
            page.text("decayed, retraining started")
            page.text(f"decay of version 1 on {DECAY_DAY}")
            page.text(f"drift on {DRIFT_DAY}")
            pages = [browser.page_source]
            browser.switch_to.default_content()
            pages.append(browser.page_source)
            shot = page.shot("model-health")
        except Exception:
            browser.switch_to.default_content()
            page.keep_failure()
            raise
    assert shot.stat().st_size > 10_000, shot
    print(f"\nthe Model health page: {shot} (screenshots: {SCREENSHOTS})")
    return pages


def _secrets_stay_secret(stack, lake, pages: list[str]) -> None:
    """After the whole run: no password, key or connection string of the stack in a task log, an
    XCom, an MLflow param or tag, a report of the lake or a page the browser showed; and neither
    the REST API nor the Model health page answers without a valid token."""
    import urllib.error
    import urllib.request

    from jobs.tracking import client

    places: dict[str, str] = {}
    logs = [p for p in Path(stack.airflow.home / "logs").rglob("*") if p.is_file()]
    assert len(logs) > 20, logs  # every task's log is there to search
    places.update({f"task log {p}": p.read_text(errors="replace") for p in logs})
    with stack.postgres.connect("airflow") as conn, conn.cursor() as cur:
        cur.execute("SELECT dag_id, run_id, task_id, key, value::text FROM xcom")
        xcoms = cur.fetchall()
    assert xcoms, "no XCom to search"
    places.update({f"XCom {dag}/{run}/{task}/{key}": value or "" for dag, run, task, key, value in xcoms})
    mlflow_client = client()
    experiments = [e.experiment_id for e in mlflow_client.search_experiments()]
    for run in mlflow_client.search_runs(experiments, max_results=1000):
        places[f"MLflow run {run.info.run_id} params and tags"] = json.dumps([run.data.params, run.data.tags])
    zones = (Path(lake.root, "reports"), Path(lake.monitoring))
    reports = [p for zone in zones for p in zone.rglob("*") if p.is_file()]
    assert reports, "no report to search"
    places.update({f"report {p}": p.read_text(errors="replace") for p in reports})
    places.update({f"page {i}": html for i, html in enumerate(pages)})
    secrets = stack.secrets()
    assert len(secrets) >= 7, sorted(secrets)
    leaks = [f"{name} in {where}" for where, text in places.items() for name, value in secrets.items() if value in text]
    assert leaks == [], leaks

    for path, headers, refused in (("/api/v2/dags", {}, 401), ("/model-health/", {}, 401),
                                   ("/model-health/api/health", {"Authorization": "Bearer not-a-token"}, 403),
                                   ("/api/v2/dags", {"Authorization": "Bearer not-a-token"}, 403)):
        request = urllib.request.Request(f"{stack.airflow.url}{path}", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(request, timeout=30)
        assert answer.value.code == refused, (path, headers, answer.value.code)

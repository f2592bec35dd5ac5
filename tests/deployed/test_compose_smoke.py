"""The compose stack for real, from nothing, end to end: ``make compose-smoke`` (``pytest -m compose
tests/deployed/test_compose_smoke.py``). By hand: the ``compose`` marker keeps it out of every other
run (``tests/conftest.py`` skips it unless ``-m`` selects it), and it uses none of the local stack's
fixtures.

On this machine, in a compose project of its own (``lakeflow-smoke``, whose volumes it removes first)
and the pipelines of ``compose_smoke.py`` (the bundled flights and bikeshare, each on a short window):

1. the engine and compose (installed and started if need be: ``scripts/compose_stack.py``), the
   base images without a registry, the image, ``up -d --wait``: each timed; every container runs as
   a user that is not root, every published port is on 127.0.0.1; the image holds every pipeline's
   ``packages.txt``, ``airflow-init`` landed every pipeline's example data, and Airflow serves both
   pipelines' DAGs, all unpaused;
2. through Airflow's REST API with the admin password of ``.env``: an ingest of the first flights
   week, a first training (its ``champion_model`` Asset then re-scores its last day), and a night:
   the ingest of the next day, whose ``features`` Asset starts the scoring and the monitor of that
   day; MLflow serves the champion (its artifacts downloaded through the server);
3. a night of each pipeline at once (``nights.run_night``): every run succeeded, each pipeline's
   Assets started only its own DAGs, each MLflow experiment and model holds only its own runs, and
   the nightly jobs of both ran on the one ``spark-connect`` server (the Spark master ran none of
   them as an application of its own, only the trainings);
4. the Airflow UI and the Model health page in headless Chromium, as screenshots;
5. ``down`` and ``up`` again: the lakes, the MLflow runs, the registry and Airflow's runs are all
   still there (named volumes);
6. with ``--compose-nights``: a night of each alone and both at once again, each timed (the figures
   go to the report; speed is measured, never asserted);
7. with ``--compose-faults all`` (or some of ``scheduler,postgres,worker,connect``): the scheduler
   killed in a run (compose restarts it and the run finishes), PostgreSQL killed (the stack
   recovers, nothing lost), the Spark worker killed during training (the retry resumes from its
   checkpoint), the Spark Connect server killed in a night (restarted, the night finishes).

Each step is printed with its time and written to ``.pipeline/compose/smoke.json``. A step that
fails skips the ones after it. ``--compose-keep`` leaves the stack up at the end (``python
scripts/compose_stack.py down --project lakeflow-smoke`` stops it); ``--compose-reuse`` keeps the
volumes of an earlier run (with ``-k`` for one step on a stack left up).
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import pytest

from tests.deployed.compose_smoke import (
    BIKES_DAGS,
    BIKES_MODEL,
    DAGS,
    MODEL,
    PROJECT,
    REPO,
    SMOKE_CONFIG,
    STATE,
    Smoke,
    StackError,
    compose_stack,
    say,
)
from tests.deployed.nights import each_asset_started_its_own, each_registry_its_own, run_night

pytestmark = pytest.mark.compose

TRAIN_DATE = dt.date(2013, 1, 7)  # trains on 01-01..01-05, evaluates on 01-06..01-07
NIGHT = dt.date(2013, 1, 8)  # the night after: ingest, then scoring and monitoring of that day
BOTH_NIGHT = dt.date(2013, 1, 9)  # the flights' day of the night of both
TIMED_NIGHTS = (dt.date(2013, 1, 10), dt.date(2013, 1, 11))  # alone, then with the bikeshare's next days
FAULT_NIGHT = dt.date(2013, 1, 12)
CONNECT_FAULT_NIGHT = dt.date(2013, 1, 13)
BIKES_DAYS = 12  # the first bikeshare night ingests this many days, then trains up to the last and scores it
BIKES_DAY = dt.date(2011, 1, 12)  # the first bikeshare night's last day; the timed ones follow it
FAULTS = {"scheduler": "fault: the scheduler crashes in a run", "postgres": "fault: PostgreSQL crashes",
          "worker": "fault: the Spark worker crashes in training",
          "connect": "fault: the Spark Connect server crashes in a night"}


@pytest.fixture(scope="module")
def smoke(request: pytest.FixtureRequest):
    """The stack from nothing (or, ``--compose-reuse``, on the earlier run's volumes), up and logged
    in; at the end the report written and the stack down (unless ``--compose-keep``)."""
    option = request.config.getoption
    try:
        say(compose_stack.ensure_env(True if option("--compose-write-env") else None))
    except StackError as exc:
        pytest.fail(str(exc), pytrace=False)
    shots = Path(option("--compose-shots") or STATE / "screenshots")
    smoke = Smoke(PROJECT, shots if shots.is_absolute() else REPO / shots)
    report = smoke.report
    try:
        report["engine"] = smoke.step("engine", compose_stack.ensure_engine)
        report["compose"] = smoke.step("compose", lambda: " ".join(compose_stack.compose_cli()) + ": "
                                       + compose_stack.compose_version())
        if not option("--compose-reuse"):
            smoke.step("down --volumes (a fresh start)", lambda: smoke.compose("down", "--volumes", "--remove-orphans"))
        smoke.step("build (base images, wheelhouse, image)", lambda: compose_stack.build(PROJECT))
        smoke.step("the pipelines' files in the lake volume", smoke.write_pipelines)
        smoke.step("up -d --wait", smoke.up)
        smoke.step("log in with .env's password", smoke.login)
        yield smoke
    finally:
        report["result"] = f"failed at: {smoke.failed}" if smoke.failed else "passed"
        smoke.write()
        print(f"==> {report['result']}; steps and times in {STATE / 'smoke.json'}", flush=True)
        if not option("--compose-keep") and compose_stack.engine_answers():
            smoke.compose("down")


@pytest.fixture(autouse=True)
def in_order(smoke: Smoke) -> None:
    """Each test builds on the ones before it: after a failed step, the rest are skipped."""
    if smoke.failed:
        pytest.skip(f"an earlier step failed: {smoke.failed}")


def test_the_stack_comes_up_hardened_and_serves_both_pipelines(smoke):
    smoke.report["containers"] = smoke.step("non-root, loopback, limits", smoke.hardened)

    def served() -> dict[str, Any]:
        packages = [line.split("==")[0].strip() for path in sorted((REPO / "pipelines").glob("*/packages.txt"))
                    for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
        missing = [name for name in packages
                   if smoke.exec("airflow-scheduler", f"pip show -q {name} && echo yes || true").strip() != "yes"]
        assert packages and not missing, f"the image lacks the pipelines' packages {missing}"
        assert smoke.lake_has("raw/flights/date=2013-01-01/flights.csv"), "no flights landed in the lake volume"
        assert smoke.lake_has("raw/rentals/date=2011-01-01", "bikeshare"), "no bikeshare rentals landed"
        for dag_id in DAGS + BIKES_DAGS:
            smoke.airflow.wait_for_dag(dag_id, timeout=300)
            smoke.airflow.unpause(dag_id)
        return {"packages": packages, "dags": DAGS + BIKES_DAGS}

    smoke.report["served"] = smoke.step("both pipelines served: packages, example data, DAGs", served)


def test_a_first_training_and_a_night_of_the_flights(smoke):
    first = TRAIN_DATE - dt.timedelta(days=6)
    smoke.step("ingest the first week", lambda: smoke.run_dag(
        "flights_ingest", {"run_date": TRAIN_DATE.isoformat(), "days": (TRAIN_DATE - first).days + 1}))
    smoke.step("first training (and its re-scoring)", lambda: smoke.run_dag(
        "flights_train", {"run_date": TRAIN_DATE.isoformat()}, timeout=1500))
    smoke.step("a night: ingest, then scoring and monitoring by the Asset", lambda: smoke.run_dag(
        "flights_ingest", {"run_date": NIGHT.isoformat()}))

    def in_the_lake() -> None:
        for path in (f"predictions/date={NIGHT}", f"monitoring/date={NIGHT}"):
            assert smoke.lake_has(path), f"the night left no {path} in the lake"

    smoke.step("the night's predictions and monitoring in the lake", in_the_lake)
    smoke.report["champion"] = smoke.step("MLflow serves the champion", smoke.mlflow_serves_the_champion)


def test_a_night_of_each_pipeline_at_once_keeps_each_to_its_own(smoke):
    import mlflow

    from jobs.config import load_config
    from jobs.config.files import PIPELINES
    from jobs.selection.gate import current_champion

    airflow, client = smoke.airflow, mlflow.MlflowClient("http://127.0.0.1:5000")
    champion = str(current_champion(client, MODEL).version)
    versions = sorted(str(v.version) for v in client.search_model_versions(f"name = '{MODEL}'"))
    seen = {event["id"] for event in airflow.asset_events()}
    runs = smoke.step("a night of each pipeline at once", lambda: run_night(
        airflow, BOTH_NIGHT, BIKES_DAY, BIKES_DAYS))

    def each_its_own() -> None:
        failed = [(dag_id, r["dag_run_id"], r["state"]) for dag_id, found in runs.items() for r in found
                  if r["state"] != "success"]
        assert failed == [], failed
        kinds = {dag_id: sorted({r["run_type"] for r in found}) for dag_id, found in runs.items()}
        assert kinds["flights_ingest"] == kinds["bikeshare_ingest"] == kinds["bikeshare_train"] == ["manual"], kinds
        assert kinds["flights_score"] == kinds["bikeshare_score"] == ["asset_triggered"], kinds
        assert kinds["flights_train"] == [], kinds
        each_asset_started_its_own(airflow, runs, seen)
        experiment = load_config(PIPELINES / "flights", profiles=(), overlays=(), changes=SMOKE_CONFIG).train.experiment
        each_registry_its_own(client, [(MODEL, experiment, "2013-"), (BIKES_MODEL, BIKES_MODEL, "2011-")])
        assert sorted(str(v.version) for v in client.search_model_versions(f"name = '{MODEL}'")) == versions
        assert str(current_champion(client, MODEL).version) == champion
        assert [str(v.version) for v in client.search_model_versions(f"name = '{BIKES_MODEL}'")] == ["1"]
        assert str(current_champion(client, BIKES_MODEL).version) == "1"
        assert smoke.lake_has(f"predictions/date={BOTH_NIGHT}")
        assert smoke.lake_has(f"predictions/date={BIKES_DAY}", "bikeshare")

    smoke.step("each pipeline kept to its own", each_its_own)
    smoke.report["cluster_applications"] = smoke.step("the nightly jobs on the Connect server",
                                                      smoke.nightly_jobs_on_the_connect_server)


def test_the_ui_shows_both_pipelines(smoke):
    smoke.report["screenshots"] = smoke.step("screenshots", smoke.screenshots)


def test_down_and_up_keeps_everything(smoke):
    before = smoke.step("inventory", smoke.inventory)
    smoke.step("down", lambda: smoke.compose("down"))
    smoke.step("up again", smoke.up)
    smoke.login()
    after = smoke.inventory()
    smoke.report["persistence"] = {"before": before, "after": after}
    assert after == before, f"down and up lost something: {before} -> {after}"


def test_a_night_alone_and_both_at_once_timed(smoke, request):
    """By hand (``--compose-nights``): the wall time of a night of the flights alone, of the
    bikeshare alone, then of both at once, each on days of its own; the figures go to the report.
    A bikeshare night here is the next day's: its ingest (whose features the champion scores), a
    training up to it (its window's days ingested already) and the new champion's scoring."""
    if not request.config.getoption("--compose-nights"):
        pytest.skip("times the nights only with --compose-nights")
    alone, both = TIMED_NIGHTS
    nights = {"flights alone": (alone, None), "bikeshare alone": (None, BIKES_DAY + dt.timedelta(days=1)),
              "both at once": (both, BIKES_DAY + dt.timedelta(days=2))}
    figures: dict[str, Any] = {}
    for name, (flights_day, bikes_day) in nights.items():
        time.sleep(30)  # the stack at rest: the scheduler's and the processor's loops settled
        started = time.monotonic()
        runs = smoke.step(f"timed night: {name}", lambda f=flights_day, b=bikes_day: run_night(
            smoke.airflow, f, b, 1))
        figures[name] = {"seconds": round(time.monotonic() - started, 1), "flights_day": str(flights_day),
                         "bikeshare_day": str(bikes_day),
                         "runs": {dag_id: len(found) for dag_id, found in runs.items()}}
        failed = [(dag_id, r["state"]) for dag_id, found in runs.items() for r in found if r["state"] != "success"]
        assert failed == [], (name, failed)
    longer = max(figures["flights alone"]["seconds"], figures["bikeshare alone"]["seconds"])
    figures["both against the longer alone"] = round(figures["both at once"]["seconds"] / longer, 2)
    smoke.report["nights"] = figures
    smoke.write()
    print(f"    {figures}", flush=True)


def test_the_stack_rides_out_container_faults(smoke, request):
    """By hand (``--compose-faults all``, or some of ``scheduler,postgres,worker,connect``)."""
    chosen = request.config.getoption("--compose-faults")
    names = list(FAULTS) if chosen == "all" else [name.strip() for name in chosen.split(",") if name.strip()]
    if not names:
        pytest.skip("the container faults only with --compose-faults")
    unknown = set(names) - set(FAULTS)
    assert not unknown, f"--compose-faults: no fault {sorted(unknown)} (all, or some of {', '.join(FAULTS)})"
    actions = {"scheduler": lambda: smoke.fault_scheduler(FAULT_NIGHT), "postgres": smoke.fault_postgres,
               "worker": lambda: smoke.fault_spark_worker(NIGHT),
               "connect": lambda: smoke.fault_connect_server(CONNECT_FAULT_NIGHT)}
    for name in names:
        smoke.report[f"fault_{name}"] = smoke.step(FAULTS[name], actions[name])
        print(f"    {smoke.report[f'fault_{name}']}", flush=True)

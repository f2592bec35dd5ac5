"""A quarter of 2013 backfilled on the deployed stack, as an operator would load a new deployment's
history: ``make backfill-90`` (``pytest --backfill-days 90``; half an hour or more on 2 cores, so not
part of ``make test``, where it is skipped).

The stack is ``tests/stack.py``'s, as ``tests/deployed/`` runs it (PostgreSQL, Airflow's four
processes with the schedules on, the MLflow server, a Spark standalone cluster for training and
the Spark Connect server for the nightly jobs), on a lake of its own: the session lake's first
days (raw and validated) and the first champion's features, and the raw data of every day up to
the backfill's last. After the first champion is trained through the REST API, one backfill of
``flights_ingest`` covers the days after it (``POST /api/v2/backfills``, one run at a time: the
DAG's ``max_active_runs=1``); ``flights_score`` follows the ``features`` Asset by itself (one
run at a time too, so a run covers the days whose events arrived while the last one ran) and the
monitor judges each day on its outcomes.

Afterwards: every backfill run succeeded and validated its day (the report names the run); each
day's raw rows are validated or quarantined once, one feature row per validated flight, one
prediction per raw flight and no key twice, the day scored by exactly one task and judged by the
monitor; no lock, no Spark staging, no task left running, no MLflow run left RUNNING, no try
retried. All along, a thread calls the API's health check every 2 s as a load balancer does:
every call must answer, and the p95 must stay under ``HEALTH_P95_LIMIT``. The figures (health
latencies, days per hour, runs' durations) go to ``backfill-quarter.json`` and a plot of the
progress and the latencies to ``backfill-quarter.png`` under ``$PIPELINE_TEST_HOME``.

The retraining triggers are set out of reach (drift and decay thresholds no day can cross): a
retraining's minutes would make the run's length depend on the data, and both triggers are
tested on the stack in ``tests/deployed/test_backfill.py``. Every day is scored by the first
champion.

With ``--retrain-every N`` (``make backfill-retrain``; the test above is skipped then) the same
backfill retrains inside it: every N-th day's raw flights are changed before the backfill starts,
alternately a decay (the outcomes of two airports' flights turned around, as
``tests/deployed/test_backfill.py`` does) and a drift (every distance four times too long), with
the thresholds of the deployed scenario (decay judged day by day on log loss, drift at the
defaults) and every retraining promoted. The days between are real 2013 days under the same
thresholds: a trigger they fire themselves is a retraining like the others. Afterwards, besides
the checks above: every retraining ran once (one train run and one version per trigger day, each
on the window ending its day) and succeeded, each started by an event about the champion it
replaced (a run whose events all judged a champion replaced meanwhile is skipped as stale), each
drifted day drifted and is named by a retraining unless a newer champion had replaced the version
that scored it, every new champion re-scored its own day and served only later days, and no older
version served a day after a newer one did (the served versions rise with the days, the
retraining days aside); no day was scored or judged twice by the same version. Whether a day
with turned outcomes crosses the decay margin depends on the version serving it: recorded, not
asserted. The days an older champion served while its successor trained (the backfill goes on
meanwhile) are counted in the figures (``backfill-retrain.json`` and ``.png``).
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

from tests.airflow_server import FAILED_TASK_STATES, TERMINAL_RUN_STATES, health_probe
from tests.deployed.scenario import (
    DAGS,
    KEYS,
    TRAIN_DATE,
    TRAIN_TIMEOUT,
    check_day_once,
    copy_lake,
    locks,
    stack_config,
    stack_env,
    staging,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif("not config.getoption('--backfill-days')",
                       reason="a load test of half an hour or more: make backfill-90 (pytest --backfill-days N)"),
]
with_retraining = pytest.mark.skipif("not config.getoption('--retrain-every')",
                                     reason="retraining inside the backfill: make backfill-retrain (--retrain-every N)")
without_retraining = pytest.mark.skipif("config.getoption('--retrain-every')",
                                        reason="--retrain-every N runs the backfill with retraining instead")

MODEL = "backfill_model"
FIRST = TRAIN_DATE + dt.timedelta(days=1)  # the backfill's first day: the first champion's next
HEALTH_P95_LIMIT = 2.0  # seconds: a load balancer's check times out at a few seconds
POLL = 30  # seconds between two looks at the runs: the API's own load stays small
HEAP_EVERY = 300  # seconds between two samples of the Connect server's live heap (each a full GC)
HEAP_LIMIT = 0.5  # the live heap's share of the server's maximum at the end
SECONDS_PER_DAY = 240  # the wait's bound per backfilled day: about four times a quiet machine's pace
SECONDS_PER_TRAINING = 600  # and per retraining (two epochs of 5 days, one rank, about 2 minutes quiet)
HOME = Path(os.environ["PIPELINE_TEST_HOME"])
FIGURES = HOME / "backfill-quarter.json"
PLOT = FIGURES.with_suffix(".png")
DECAY_THRESHOLDS = {"window_days": 1, "metric": "log_loss", "margin": 0.25, "max_ece": 1.0}  # the scenario's


@pytest.fixture
def days(request) -> list[dt.date]:
    count = request.config.getoption("--backfill-days")
    return [FIRST + dt.timedelta(days=n) for n in range(count)]


@pytest.fixture
def changed(request, days) -> dict[dt.date, str]:
    """With ``--retrain-every N``: the backfilled days whose raw flights are changed, each with how
    (every N-th day, decay first, then drift, in turns); empty without."""
    every = request.config.getoption("--retrain-every")
    picked = days[every - 1::every] if every else []
    return {day: ("decay", "drift")[n % 2] for n, day in enumerate(picked)}


@pytest.fixture
def quarter(days, changed, lake, features_zone, config_patch, tmp_path_factory, monkeypatch):
    """The stack on a lake of its own holding the raw data of every backfilled day (the ``changed``
    days changed); the stack and the lake."""
    from jobs.datasets.land_flights import land
    from tests.deployed.scenario import make_drift, turn_outcomes
    from tests.stack import running_stack

    home = tmp_path_factory.mktemp("quarter")
    own = copy_lake(lake, features_zone, home / "lake" / "flights")
    land(own, FIRST, days[-1])
    for day, how in changed.items():
        (turn_outcomes if how == "decay" else make_drift)(own.raw_file("flights", day))
    if changed:  # the deployed scenario's thresholds, every retraining promoted
        config = stack_config(config_patch, home / "config", MODEL, train={"promotion_margin": -1.0},
                              monitoring={"decay": DECAY_THRESHOLDS})
    else:
        out_of_reach = {"psi_threshold": 1e9, "unknown_share_threshold": 1.0}
        config = stack_config(config_patch, home / "config", MODEL, score={"drift": out_of_reach},
                              monitoring={"decay": {"margin": 1e9, "max_ece": 1.0}})
    env = stack_env(own, config, home)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with running_stack(home, env, connect=True, airflow_settings={"AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "True"}) \
            as stack:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", stack.mlflow.url)
        yield stack, own


@without_retraining
def test_a_quarter_backfilled_through_the_rest_api_lands_every_day_once_and_the_api_stays_responsive(quarter, days):
    stack, lake = quarter
    runs, figures = _backfill(stack, lake, days, FIGURES)
    _check(stack, lake, runs, days)
    assert figures["health"]["p95_s"] < HEALTH_P95_LIMIT, figures["health"]


@with_retraining
def test_retraining_inside_a_long_backfill_starts_once_per_trigger_and_each_champion_serves_from_its_day(
        quarter, days, changed):
    stack, lake = quarter
    path = HOME / "backfill-retrain.json"
    runs, figures = _backfill(stack, lake, days, path, trainings=len(changed),
                              done=lambda: _retrained(stack, lake))
    for dag_id in DAGS:  # the days and the trainings are done: the chain at rest, nothing else to start
        assert all(r["state"] in TERMINAL_RUN_STATES for r in stack.airflow.dag_runs(dag_id)), dag_id
    figures["retrainings"] = _check_retraining(stack, lake, runs, days, changed)
    path.write_text(json.dumps(figures, indent=2))
    print(f"\nthe retrainings: {json.dumps(figures['retrainings'])} ({path})")
    assert figures["health"]["p95_s"] < HEALTH_P95_LIMIT, figures["health"]


def _backfill(stack, lake, days, path: Path, trainings: int = 0, done=lambda: True) -> tuple[dict, dict]:
    """The first champion through the REST API, then one backfill of the days, waited for (and for
    ``done``) with the health check and the heap watched; its runs by DAG and its figures (written
    to ``path``, the plot beside it)."""
    airflow = stack.airflow
    for dag_id in DAGS:
        airflow.wait_for_dag(dag_id)
    airflow.unpause("flights_train")
    run_id = airflow.trigger("flights_train", {"run_date": TRAIN_DATE.isoformat()})["dag_run_id"]
    airflow.settle(["flights_train"], lambda runs: any(r["dag_run_id"] == run_id for r in runs["flights_train"]),
                   timeout=TRAIN_TIMEOUT)
    for dag_id in DAGS:
        airflow.unpause(dag_id)

    started = time.monotonic()
    progress: list[tuple[float, int, int]] = []  # (seconds, days ingested, days scored)
    server = ConnectHeap(stack.connect.process.pid)
    with health_probe(airflow) as latencies:
        backfill = airflow.backfill("flights_ingest", days[0], days[-1], max_active_runs=1)
        assert backfill["dag_id"] == "flights_ingest", backfill
        runs = _wait(stack, lake, days, started, progress, latencies, server, trainings, done)
        seconds = time.monotonic() - started
        latency = list(latencies)
    server.sample(seconds)
    assert len(latency) > seconds / 4, (len(latency), seconds)  # the probe ran all along
    figures = _figures(runs, days, seconds, latency, server)
    path.write_text(json.dumps(figures, indent=2))
    _plot(progress, latency, seconds, figures, server, path.with_suffix(".png"), _promotions(stack, started))
    print(f"\nthe backfill of {len(days)} days: {json.dumps(figures)} ({path}, {path.with_suffix('.png')})")
    # the shared server's live heap stays bounded: what a backfill's jobs leave behind is freed
    assert server.samples[-1][1] < HEAP_LIMIT * server.max_mb, (server.samples, server.max_mb)
    return runs, figures


class ConnectHeap:
    """The Spark Connect server's live heap (``jcmd``: a full GC, then the heap's use), sampled as
    the backfill goes: (seconds, MiB)."""

    def __init__(self, pid: int) -> None:
        import psutil

        process = psutil.Process(pid)
        [self.java] = [p for p in [process, *process.children(recursive=True)] if p.name() == "java"]
        flags = self._jcmd("VM.flags")
        self.max_mb = int(re.search(r"MaxHeapSize=(\d+)", flags).group(1)) / 2**20
        self.samples: list[tuple[float, float]] = []

    def _jcmd(self, *command: str) -> str:
        import subprocess

        jcmd = Path(self.java.exe()).with_name("jcmd")  # the server's own JDK
        return subprocess.run([str(jcmd), str(self.java.pid), *command], capture_output=True, text=True,
                              check=True, timeout=120).stdout

    def sample(self, seconds: float) -> None:
        self._jcmd("GC.run")
        used = re.search(r"heap\s+total \d+K, used (\d+)K", self._jcmd("GC.heap_info")).group(1)
        self.samples.append((seconds, int(used) / 1024))


def _wait(stack, lake, days, started: float, progress: list, latencies: list[float],
          server: ConnectHeap, trainings: int = 0, done=lambda: True) -> dict[str, list[dict]]:
    """Wait until every backfill run has succeeded, every day is scored, ``done()`` holds and the
    chain is at rest, printing the progress and sampling the Connect server's heap every
    HEAP_EVERY seconds; a failed try fails the wait at once, with its log."""
    from jobs.lake.layout import partition_day

    airflow = stack.airflow
    deadline = started + SECONDS_PER_DAY * len(days) + SECONDS_PER_TRAINING * trainings + 600
    while True:
        airflow.check_alive()
        assert stack.connect.process.poll() is None, f"the Spark Connect server exited: {stack.connect.log}"
        if not server.samples or time.monotonic() - started - server.samples[-1][0] >= HEAP_EVERY:
            server.sample(time.monotonic() - started)
        for dag_id in DAGS:
            if airflow.task_instances(dag_id, FAILED_TASK_STATES):
                raise AssertionError(f"a try of {dag_id} failed:\n{airflow.describe(dag_id)}")
        runs = {dag_id: airflow.dag_runs(dag_id) for dag_id in DAGS}
        ingested = [r for r in runs["flights_ingest"] if r["run_type"] == "backfill" and r["state"] == "success"]
        zone = Path(lake.predictions)
        scored = {partition_day(p.name) for p in zone.iterdir()} & set(days) if zone.exists() else set()
        elapsed = time.monotonic() - started
        progress.append((elapsed, len(ingested), len(scored)))
        recent = sorted(latencies[-30:])
        print(f"{elapsed:6.0f} s: {len(ingested)}/{len(days)} days ingested, {len(scored)} scored; health check "
              f"(last minute) median {recent[len(recent) // 2] if recent else 0:.3f} s, max "
              f"{recent[-1] if recent else 0:.3f} s; Connect server's live heap {server.samples[-1][1]:.0f} of "
              f"{server.max_mb:.0f} MiB", flush=True)
        resting = all(r["state"] in TERMINAL_RUN_STATES for found in runs.values() for r in found)
        if resting and len(ingested) == len(days) and len(scored) == len(days) and done():
            return runs
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(ingested)} of {len(days)} days ingested and {len(scored)} scored within "
                                 f"{deadline - started:.0f} s")
        time.sleep(POLL)


def _figures(runs, days, seconds: float, latency: list[float], server: ConnectHeap) -> dict:
    def duration(run: dict) -> float:
        ended, began = (dt.datetime.fromisoformat(run[key]) for key in ("end_date", "start_date"))
        return (ended - began).total_seconds()

    ingest = [r for r in runs["flights_ingest"] if r["run_type"] == "backfill"]
    score = [r for r in runs["flights_score"] if r["start_date"] and r["start_date"] >= ingest[0]["start_date"]]
    return {
        "days": len(days), "first_day": days[0].isoformat(), "last_day": days[-1].isoformat(),
        "seconds": round(seconds), "days_per_hour": round(len(days) / seconds * 3600, 1),
        "ingest_run_s": {"median": round(statistics.median(map(duration, ingest)), 1),
                         "max": round(max(map(duration, ingest)), 1)},
        "score_runs": len(score), "score_run_s": {"median": round(statistics.median(map(duration, score)), 1)},
        "health": {"calls": len(latency), "p50_s": round(statistics.median(latency), 3),
                   "p95_s": round(statistics.quantiles(latency, n=20)[-1], 3), "max_s": round(max(latency), 3)},
        "connect_server_live_heap_mib": {"max_heap": round(server.max_mb), "first": round(server.samples[0][1]),
                                         "peak": round(max(used for _, used in server.samples)),
                                         "last": round(server.samples[-1][1])},
        "machine": {"cpus": os.cpu_count()},
    }


def _plot(progress: list, latency: list[float], seconds: float, figures: dict, server: ConnectHeap,
          path: Path = PLOT, promotions: list[tuple[float, str]] = ()) -> None:
    """Days ingested and scored against time (a line where each new champion was promoted), above
    the health check's latencies and the Connect server's live heap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom, heap) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    minutes = [p[0] / 60 for p in progress]
    # what each look at the runs found, held until the next look
    top.step(minutes, [p[1] for p in progress], where="post", label="ingested (backfill runs succeeded)")
    top.step(minutes, [p[2] for p in progress], where="post", label="scored (predictions written)")
    for n, (when, version) in enumerate(promotions):
        top.axvline(when / 60, color="tab:green", linewidth=1, linestyle=":",
                    label="a new champion (version)" if n == 0 else None)
        top.annotate(version, (when / 60, 0), textcoords="offset points", xytext=(2, 2), fontsize=7)
    top.set_ylabel("days")
    top.set_title(f"{figures['days']} days backfilled through the REST API: {figures['seconds'] / 60:.0f} min, "
                  f"{figures['days_per_hour']} days/hour")
    top.legend(loc="upper left")
    step = seconds / max(1, len(latency)) / 60
    bottom.plot([n * step for n in range(len(latency))], latency, ".", markersize=2)
    bottom.axhline(figures["health"]["p95_s"], color="tab:red", linewidth=1,
                   label=f"p95 {figures['health']['p95_s']:.3f} s")
    bottom.set_ylabel("health check (s)")
    bottom.legend(loc="upper left")
    heap.plot([t / 60 for t, _ in server.samples], [used for _, used in server.samples], "o-", markersize=3)
    heap.axhline(server.max_mb, color="tab:red", linewidth=1, label=f"max heap {server.max_mb:.0f} MiB")
    heap.set_ylim(0, server.max_mb * 1.1)
    heap.set_ylabel("Connect server\nlive heap (MiB)")
    heap.set_xlabel("minutes since the backfill was created")
    heap.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _check(stack, lake, runs, days) -> None:
    """What the backfill left: each day once in every zone, nothing running, locked or staged."""
    import mlflow

    from jobs.lake.layout import partition_day, partition_name

    airflow = stack.airflow
    _check_days(lake, runs, days)
    for day in days:
        assert _served_by(lake, day) == {"1"}, day  # the one champion
    written = sorted(p.name for p in Path(lake.predictions).iterdir() if partition_day(p.name) is not None)
    assert written == [partition_name(d) for d in [TRAIN_DATE, *days]]
    assert staging(Path(lake.predictions), Path(lake.monitoring)) == [] and locks(lake) == []

    # scoring followed the features Asset, and scored each day in exactly one task
    assert {r["state"] for r in runs["flights_score"]} == {"success"}
    tis = {dag_id: airflow.task_instances(dag_id) for dag_id in DAGS}
    scorings = [ti for ti in tis["flights_score"] if ti["task_id"] == "score_batch" and ti["state"] == "success"]
    assert len(scorings) == len(days) + 1, len(scorings)  # the champion's own day, then each backfilled one
    unfinished = [ti for found in tis.values() for ti in found if ti["state"] in ("running", "queued", "scheduled")]
    assert unfinished == [], unfinished
    retried = [(ti["dag_id"], ti["dag_run_id"], ti["task_id"]) for found in tis.values() for ti in found
               if ti["try_number"] > 1]
    assert retried == [], retried

    client = mlflow.MlflowClient(stack.mlflow.url)
    assert [v.version for v in client.search_model_versions(f"name = '{MODEL}'")] == ["1"]
    experiments = [e.experiment_id for e in client.search_experiments()]
    running = client.search_runs(experiments, filter_string="attributes.status = 'RUNNING'")
    assert running == [], [r.info.run_id for r in running]
    assert airflow.health()["scheduler"]["status"] == "healthy"


def _check_days(lake, runs, days) -> None:
    """Every backfill run succeeded, one a day in order, and its day is in the lake once: validated
    or quarantined, featured, one prediction per raw flight and no key twice, judged by the monitor."""
    ingest = [r for r in runs["flights_ingest"] if r["run_type"] == "backfill"]
    assert [r["logical_date"][:10] for r in ingest] == [d.isoformat() for d in days]
    assert {r["state"] for r in ingest} == {"success"}
    for day, run in zip(days, ingest, strict=True):
        check_day_once(lake, day, run["dag_run_id"])
        flights = pd.read_csv(lake.raw_file("flights", day))
        predictions = pq.read_table(lake.partition(lake.predictions, day)).to_pandas()
        assert len(predictions) == len(flights), day  # one row per input flight
        assert not predictions.duplicated(KEYS).any(), day
        assert Path(lake.monitoring_report(day)).exists(), day  # the monitor judged the day


def _served_by(lake, day: dt.date) -> set[str]:
    """The model versions of a day's served predictions (empty before it is scored)."""
    path = Path(lake.partition(lake.predictions, day))
    if not path.exists():
        return set()
    return set(pq.read_table(path, columns=["model_version"]).column("model_version").to_pylist())


def _versions(stack) -> list:
    import mlflow

    found = mlflow.MlflowClient(stack.mlflow.url).search_model_versions(f"name = '{MODEL}'")
    return sorted(found, key=lambda v: int(v.version))


def _promotions(stack, started: float) -> list[tuple[float, str]]:
    """When each retrained version was registered (seconds since ``started``, a monotonic time),
    with its label: every retraining is promoted as it registers."""
    origin = time.time() - (time.monotonic() - started)
    return [(v.creation_timestamp / 1000 - origin, f"v{v.version}") for v in _versions(stack)[1:]]


def _retrained(stack, lake) -> bool:
    """Every retrained version has re-scored the day its window ends with."""
    versions = _versions(stack)[1:]
    return all(_served_by(lake, dt.date.fromisoformat(v.tags["run_date"])) == {v.version} for v in versions
               if "run_date" in v.tags)


def _check_retraining(stack, lake, runs, days, changed) -> list[dict]:
    """What the backfill with retraining left: each day once in every zone; one retraining per
    trigger day, each promoted, on the window ending its day; each champion re-scored its own day
    and served later days only, the versions rising with the days; nothing scored or judged twice
    by a version, nothing running, locked or staged. Per retraining: its version, trigger, day and
    how many later days an older champion served while it trained."""
    import mlflow

    from jobs.config import load_config
    from jobs.lake.layout import DECAY_REPORT, DRIFT_REPORT, partition_day, partition_name
    from jobs.monitoring.job import EXPERIMENT_SUFFIX, MONITORING_OF

    airflow = stack.airflow
    _check_days(lake, runs, days)
    written = sorted(p.name for p in Path(lake.predictions).iterdir() if partition_day(p.name) is not None)
    assert written == [partition_name(d) for d in [TRAIN_DATE, *days]]
    assert staging(Path(lake.predictions), Path(lake.monitoring)) == [] and locks(lake) == []

    # one version per retraining, every retraining succeeded: none started twice, none lost
    client = mlflow.MlflowClient(stack.mlflow.url)
    versions = _versions(stack)
    assert [v.version for v in versions] == [str(n) for n in range(1, len(versions) + 1)]
    first, *retrained = versions
    trained_to = {v.version: dt.date.fromisoformat(v.tags["run_date"]) for v in versions}
    assert trained_to[first.version] == TRAIN_DATE
    trainings = [r for r in runs["flights_train"] if r["run_type"] == "asset_triggered"]
    assert [r["state"] for r in trainings] == ["success"] * len(trainings), trainings
    # a run whose events all judged a champion replaced while it waited is skipped at its plan (stale)
    plans = {ti["dag_run_id"]: ti["state"] for ti in airflow.task_instances("flights_train")
             if ti["task_id"] == "plan_training"}
    stale = [r["dag_run_id"] for r in trainings if plans[r["dag_run_id"]] == "skipped"]
    assert len(trainings) - len(stale) == len(retrained), (plans, len(retrained))
    # each on a day of its own, in the order of the days: no trigger day trained twice
    order = [trained_to[v.version] for v in retrained]
    assert order == sorted(set(order)) and set(order) <= set(days), order
    triggers = {}
    for version in retrained:
        assert version.tags["gate_decision"] == "promoted", version.tags
        tags = client.get_run(version.run_id).data.tags
        triggers[version.version] = tags["trigger"]
        day = trained_to[version.version].isoformat()
        assert tags["trigger"] in ("decay", "drift") and day in tags["started_by"], tags
        # started by an event about the champion it replaced, never one about an older version
        assert f"version {int(version.version) - 1}" in tags["started_by"], tags
    # each drifted day (distances four times too long: PSI far above any threshold) drifted and
    # started a retraining (its own, or one it shares with later drifted days: the latest day's
    # window), unless a version trained on an earlier day replaced the one that scored it before
    # its run planned (the event was stale); whether turned outcomes cross the decay margin depends
    # on the version serving the day, and a version replaced before check_decay ran is not judged
    # (the champion is): recorded
    started = [client.get_run(v.run_id).data.tags["started_by"] for v in retrained]
    verdicts = {}
    for day, how in changed.items():
        if how == "drift":
            drift = json.loads(Path(lake.report("drift", day, DRIFT_REPORT)).read_text())
            assert drift["drifted"] and any("distance" in r for r in drift["reasons"]), (day, drift["reasons"])
            named = any(day.isoformat() in text for text in started)
            scorer = int(drift["model_version"])  # a day named by no retraining was scored once
            assert named or any(int(v) > scorer and trained_to[v] < day for v in trained_to), (day, scorer, started)
        decay = json.loads(Path(lake.report("decay", day, DECAY_REPORT)).read_text())
        verdicts[day.isoformat()] = {"changed": how, "decay": decay["status"], "decayed": decay["decayed"],
                                     "judged_version": decay["model_version"],
                                     "retraining_named_it": any(day.isoformat() in text for text in started)}
    assert client.get_model_version_by_alias(MODEL, "champion").version == versions[-1].version

    # each new champion re-scored its own day, served only later days, and no older one served a
    # day after it: the versions rise with the days (the retraining days aside)
    served = {}
    for day in days:
        (version,) = _served_by(lake, day)
        served[day] = int(version)
    own_day = {trained_to[v.version]: int(v.version) for v in retrained}
    assert {day: served[day] for day in own_day} == own_day
    rest = [(day, served[day]) for day in days if day not in own_day]
    assert all(day > trained_to[str(version)] for day, version in rest), rest
    assert [version for _, version in rest] == sorted(version for _, version in rest), rest

    # scored once a day, and once more by each new champion on its own day
    tis = {dag_id: airflow.task_instances(dag_id) for dag_id in DAGS}
    scorings = [ti for ti in tis["flights_score"] if ti["task_id"] == "score_batch" and ti["state"] == "success"]
    assert len(scorings) == 1 + len(days) + len(retrained), len(scorings)
    # judged once a day by each version that served or shadowed it: no step twice in a version's run
    experiment = client.get_experiment_by_name(load_config().train.experiment + EXPERIMENT_SUFFIX)
    for version in versions:
        for run in client.search_runs([experiment.experiment_id],
                                      filter_string=f"tags.{MONITORING_OF} = '{MODEL}/{version.version}'"):
            steps = [m.step for m in client.get_metric_history(run.info.run_id, "roc_auc")]
            assert len(steps) == len(set(steps)), (version.version, sorted(steps))

    unfinished = [ti for found in tis.values() for ti in found if ti["state"] in ("running", "queued", "scheduled")]
    assert unfinished == [], unfinished
    retried = [(ti["dag_id"], ti["dag_run_id"], ti["task_id"]) for found in tis.values() for ti in found
               if ti["try_number"] > 1]
    assert retried == [], retried
    running = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                 filter_string="attributes.status = 'RUNNING'")
    assert running == [], [r.info.run_id for r in running]
    assert airflow.health()["scheduler"]["status"] == "healthy"

    figures = [{"changed_days": verdicts, "stale_runs_skipped": stale}]
    for version in retrained:
        number, day = int(version.version), trained_to[version.version]
        later = [d for d in days if d > day and d not in own_day]
        figures.append({"version": version.version, "trigger": triggers[version.version], "day": day.isoformat(),
                        "changed_day": day in changed,
                        "served_days": sum(served[d] == number for d in later),
                        "older_champion_days": sum(served[d] < number for d in later)})
    return figures

"""Two pipelines in one deployed Airflow (``scenario.py``: the stack serves the flights and the
bundled bikeshare pipeline from ``PIPELINES_DIR``), a night of each at the same time, and nothing
of one touches the other.

After the backfills, a dozen days of bikeshare rentals are landed in the stack's
``$LAKE_ROOT/bikeshare`` and the next flights day (never ingested) in the flights lake; the
bikeshare DAGs, paused since the stack started, are unpaused. Then, through the REST API at once:
``bikeshare_ingest`` over the bikeshare window in one run, then ``bikeshare_train`` up to its last
day, whose first champion's ``bikeshare_champion_model`` event starts ``bikeshare_score`` on that
day; and ``flights_ingest`` for the new flights day, whose ``flights_features`` event starts
``flights_score`` with the flights champion. Once everything has come to rest:

- every run of the night succeeded;
- every Asset event of the night started only DAGs of its own pipeline, and every run an Asset
  started consumed only its own pipeline's events;
- each pipeline's MLflow experiments hold only its own runs and its registered model only its own
  versions (the flights model kept its champion and gained no version);
- the bikeshare lake holds the predictions of its scored day and nothing else scored; the flights
  lake changed only under its night's day; neither lake keeps a lock or Spark's staging.

The bikeshare DAGs are paused again at the end: the fault cases that follow drive the flights alone.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from jobs.lake.layout import Lake, partition_day, partition_name
from tests.deployed.nights import each_asset_started_its_own, each_registry_its_own, run_night
from tests.deployed.scenario import BIKES, BIKES_DAGS, BIKES_MODEL, DAGS, DAYS, MODEL, TRAIN_DATE, locks, staging

pytestmark = pytest.mark.e2e

FLIGHTS_DAY = DAYS[-1] + dt.timedelta(days=1)  # the day after the backfills': never ingested
BIKES_FIRST, BIKES_DAY = dt.date(2011, 1, 1), dt.date(2011, 1, 12)  # the window; its last day trained up to, scored


def bikes_lake(stack_lake: Lake) -> Lake:
    """The bikeshare pipeline's lake: ``$LAKE_ROOT/bikeshare``, beside the flights'."""
    return Lake(str(Path(stack_lake.root).parent / BIKES))


def unpause_all(airflow) -> None:
    """Every DAG of both pipelines unpaused, and the stack at rest: the scheduled runs unpausing
    starts (yesterday's ingest, last week's training: no data, skipped at their first task) and
    the runs of any Asset event queued for them, finished."""
    dag_ids = DAGS + BIKES_DAGS
    for dag_id in dag_ids:
        airflow.wait_for_dag(dag_id)
        airflow.unpause(dag_id)

    def at_rest(runs: dict[str, list[dict[str, Any]]]) -> bool:
        return (all(runs[dag_id] for dag_id in (f"{BIKES}_ingest", f"{BIKES}_train"))
                and not any(airflow.queued_events(dag_id) for dag_id in dag_ids))

    airflow.settle(dag_ids, at_rest, timeout=600)


def test_a_night_of_each_pipeline_at_once_keeps_each_to_its_own(stack, stack_lake, training):
    import mlflow

    from jobs.datasets import land_bikeshare, land_flights
    from jobs.selection.gate import current_champion

    airflow, bikes = stack.airflow, bikes_lake(stack_lake)
    land_bikeshare.land(bikes, BIKES_FIRST, BIKES_DAY)
    land_flights.land(stack_lake, FLIGHTS_DAY, FLIGHTS_DAY)
    unpause_all(airflow)
    client = mlflow.MlflowClient(stack.mlflow.url)
    champion = str(current_champion(client, MODEL).version)
    versions = sorted(str(v.version) for v in client.search_model_versions(f"name = '{MODEL}'"))
    # Run without the backfills before it, the night's scoring is flights_score's first run started
    # by an Asset: it also takes the first champion's event, and scores that day again
    earlier = {TRAIN_DATE} if not [r for r in airflow.dag_runs("flights_score")
                                   if r["run_type"] == "asset_triggered"] else set()
    kept = _files_outside(stack_lake, {FLIGHTS_DAY} | earlier)
    seen = {event["id"] for event in airflow.asset_events()}
    try:
        runs = run_night(airflow, FLIGHTS_DAY, BIKES_DAY, (BIKES_DAY - BIKES_FIRST).days + 1)
    finally:
        for dag_id in BIKES_DAGS:
            airflow.pause(dag_id)

    # every run of the night succeeded: the two ingests and the bikeshare training as triggered,
    # scoring started by each pipeline's own Assets, and no flights training
    failed = [(dag_id, r["dag_run_id"], r["state"]) for dag_id, found in runs.items() for r in found
              if r["state"] != "success"]
    assert failed == [], failed
    kinds = {dag_id: sorted(r["run_type"] for r in found) for dag_id, found in runs.items()}
    assert kinds["flights_ingest"] == kinds[f"{BIKES}_ingest"] == kinds[f"{BIKES}_train"] == ["manual"], kinds
    assert kinds["flights_score"] == ["asset_triggered"] and kinds["flights_train"] == [], kinds
    assert set(kinds[f"{BIKES}_score"]) == {"asset_triggered"}, kinds

    each_asset_started_its_own(airflow, runs, seen)
    _each_registry_its_own(client, champion, versions)
    _each_lake_its_own(stack_lake, bikes, kept, champion, earlier)


def _each_registry_its_own(client, champion: str, versions: list[str]) -> None:
    """Each pipeline's experiments and model hold only its own runs (:func:`nights.each_registry_its_own`:
    the flights' days are of 2013, the bikeshare's of 2011); the flights model kept its versions
    and its champion, the bikeshare model has its first version, its champion."""
    from jobs.config import load_config
    from jobs.selection.gate import current_champion

    each_registry_its_own(client, [(MODEL, load_config().train.experiment, "2013-"),
                                   (BIKES_MODEL, BIKES_MODEL, "2011-")])
    assert sorted(str(v.version) for v in client.search_model_versions(f"name = '{MODEL}'")) == versions
    assert str(current_champion(client, MODEL).version) == champion
    assert [str(v.version) for v in client.search_model_versions(f"name = '{BIKES_MODEL}'")] == ["1"]
    assert str(current_champion(client, BIKES_MODEL).version) == "1"


def _files_outside(lake: Lake, days: set[dt.date]) -> dict[str, tuple[int, int]]:
    """Every file of the lake outside the partitions of ``days``, with its size and modification time;
    left out: Spark's markers and checksums (``_SUCCESS``, ``.crc``), which any write to a zone
    rewrites, and the scoring's mark of the newest features event it planned."""
    from orchestration.score_tasks import PLANNED_MARK

    root = Path(lake.root)
    return {str(path.relative_to(root)): (path.stat().st_size, path.stat().st_mtime_ns)
            for path in root.rglob("*")
            if path.is_file() and not {partition_name(day) for day in days} & set(path.parts)
            and path.name != PLANNED_MARK
            and not path.name.startswith(("_", "."))}


def _each_lake_its_own(flights: Lake, bikes: Lake, kept: dict[str, tuple[int, int]], champion: str,
                       earlier: set[dt.date]) -> None:
    """The bikeshare day scored by its first champion, nothing else of it scored; the flights day
    scored by the flights champion, nothing of the flights lake changed outside it; no lock or
    staging left in either."""
    predictions = pq.read_table(bikes.partition(bikes.predictions, BIKES_DAY)).to_pandas()
    features = pq.read_table(bikes.partition(bikes.features, BIKES_DAY)).num_rows
    assert len(predictions) == features > 0 and set(predictions["model_version"]) == {"1"}
    assert predictions["probability"].between(0.0, 1.0).all()
    scored = [partition_day(p.name) for p in Path(bikes.predictions).iterdir() if partition_day(p.name)]
    assert scored == [BIKES_DAY], scored

    raw = len(pd.read_csv(flights.raw_file("flights", FLIGHTS_DAY)))  # one prediction per input flight
    served = pq.read_table(flights.partition(flights.predictions, FLIGHTS_DAY), columns=["model_version"])
    assert served.num_rows == raw > 0 and set(served.column("model_version").to_pylist()) == {champion}
    now = _files_outside(flights, {FLIGHTS_DAY} | earlier)
    changed = sorted(path for path in kept.keys() | now.keys() if kept.get(path) != now.get(path))
    assert changed == [], "\n".join(changed)

    for lake in (flights, bikes):
        assert locks(lake) == [], lake.root
        assert staging(Path(lake.root)) == [], lake.root

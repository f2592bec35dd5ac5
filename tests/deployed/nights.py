"""A night of each pipeline at once through the REST API, and the checks that each kept to its own:
what ``test_two_pipelines.py`` runs on the local stack and ``test_compose_smoke.py`` on the compose
stack (both serve the flights and the bikeshare pipeline, whose DAG ids and Assets carry their
pipeline's name first).

Not a test module.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from tests.deployed.scenario import BIKES, BIKES_DAGS, DAGS

PIPELINES = ("flights", BIKES)
NIGHT_TIMEOUT = 1200  # both nights on a shared 2-core machine, with room; a failed try ends the wait at once


def pipeline_of(name: str) -> str:
    """The pipeline a DAG id or an Asset's name belongs to (its prefix)."""
    (found,) = [p for p in PIPELINES if name.startswith(f"{p}_")]
    return found


def run_night(airflow, flights_day: dt.date | None, bikes_day: dt.date | None,
              bikes_days: int, timeout: float = NIGHT_TIMEOUT) -> dict[str, list[dict[str, Any]]]:
    """A night of each pipeline, started at once through the REST API (``None``: that pipeline sits
    it out): ``flights_ingest`` for ``flights_day``; ``bikeshare_ingest`` over the ``bikes_days``
    days ending ``bikes_day``, then ``bikeshare_train`` up to it once the ingest has succeeded.
    Waits until every run has finished and each night's scoring has run (the flights' on its
    features, the bikeshare's on its new champion); returns the night's runs by DAG."""
    dag_ids = DAGS + BIKES_DAGS
    before = {dag_id: {r["dag_run_id"] for r in airflow.dag_runs(dag_id)} for dag_id in dag_ids}

    def new(runs: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
        return {dag_id: [r for r in found if r["dag_run_id"] not in before[dag_id]] for dag_id, found in runs.items()}

    if bikes_day:
        ingest = airflow.trigger(f"{BIKES}_ingest", {"run_date": bikes_day.isoformat(),
                                                     "days": bikes_days})["dag_run_id"]
    if flights_day:
        airflow.trigger("flights_ingest", {"run_date": flights_day.isoformat()})
    if bikes_day:
        def ingested(runs: dict[str, list[dict[str, Any]]]) -> bool:
            return any(r["dag_run_id"] == ingest for r in runs[f"{BIKES}_ingest"])

        airflow.settle([f"{BIKES}_ingest"], ingested, timeout=timeout)
        airflow.trigger(f"{BIKES}_train", {"run_date": bikes_day.isoformat()})

    def scored(runs: dict[str, list[dict[str, Any]]]) -> bool:
        night = new(runs)
        flights = not flights_day or any(r["run_type"] == "asset_triggered" for r in night["flights_score"])
        bikes = not bikes_day or any(
            event["name"] == f"{BIKES}_champion_model"
            for r in night[f"{BIKES}_score"]
            for event in airflow.triggering_events(f"{BIKES}_score", r["dag_run_id"]))
        return flights and bikes

    return new(airflow.settle(dag_ids, scored, timeout=timeout))


def each_asset_started_its_own(airflow, runs: dict[str, list[dict[str, Any]]], seen: set[int]) -> None:
    """Every event since ``seen`` (the ids of the events before the night) came from its pipeline's
    DAG and created only that pipeline's runs; every run an Asset started consumed only that
    pipeline's events."""
    events = [event for event in airflow.asset_events() if event["id"] not in seen]
    assert {event["name"] for event in events} >= {"flights_features", f"{BIKES}_features",
                                                   f"{BIKES}_champion_model"}, events
    for event in events:
        pipeline = pipeline_of(event["name"])
        assert pipeline_of(event["source_dag_id"]) == pipeline, event
        assert {pipeline_of(run["dag_id"]) for run in event["created_dagruns"]} <= {pipeline}, event
    for dag_id, found in runs.items():
        for run in found:
            if run["run_type"] != "asset_triggered":
                continue
            consumed = airflow.triggering_events(dag_id, run["dag_run_id"])
            assert consumed and {pipeline_of(e["name"]) for e in consumed} == {pipeline_of(dag_id)}, (run, consumed)


def each_registry_its_own(client, owners: list[tuple[str, str, str]]) -> None:
    """For each (registered model, MLflow experiment, year of its days) of ``owners``: its
    experiments (training's and monitoring's) hold only runs of its own days, its monitoring runs
    judge only its model, and its model holds only versions of its own runs and days."""
    from jobs.monitoring.job import EXPERIMENT_SUFFIX, MONITORING_OF

    for model, experiment, year in owners:
        training = client.get_experiment_by_name(experiment)
        ids = [training.experiment_id, client.get_experiment_by_name(experiment + EXPERIMENT_SUFFIX).experiment_id]
        found = client.search_runs(ids, max_results=1000)
        dated = [run.data.tags["run_date"] for run in found if "run_date" in run.data.tags]
        assert dated and all(day.startswith(year) for day in dated), (experiment, sorted(set(dated)))
        monitored = [run.data.tags[MONITORING_OF] for run in found if MONITORING_OF in run.data.tags]
        assert monitored and all(of.startswith(f"{model}/") for of in monitored), (experiment, monitored)
        for version in client.search_model_versions(f"name = '{model}'"):
            assert client.get_run(version.run_id).info.experiment_id == training.experiment_id, (model, version)
            assert version.tags["run_date"].startswith(year), (model, version.tags)

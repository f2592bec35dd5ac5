"""The Model health page as a FastAPI app, which the plugin (``plugins/lakeflow.py``) mounts in
Airflow's API server under ``/model-health`` and shows in the UI's navigation.

Every route is behind Airflow's own authentication: the caller's Airflow token (the UI's session
cookie, or an ``Authorization: Bearer`` header for scripts) must be valid and allow reading DAGs,
checked by the API server's own dependency (``requires_access_dag``); without one the answer is
401, with a bad one 403. Routes:

- ``/model-health/``: the page (``?pipeline=NAME`` picks a pipeline, default the first served with monitored days;
  ``?model=NAME&days=N`` narrow it);
- ``/model-health/api/health``: the same data as JSON, for scripts (same parameters);
- ``/model-health/api/days/YYYY-MM-DD``: one day's ``monitoring.json`` as the monitor job wrote it
  (segments included).

A pipeline's lake is ``$LAKE_ROOT/<pipeline>`` of the API server's environment, the headline metric
and window are the decay rule's (``monitoring.decay`` in the pipeline's config). Each retraining is
linked to its Airflow run through its train DAG's ``plan_training`` outputs in the metadata DB
(:func:`training_runs`), which also say what started it when the training summary does not.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

URL_PREFIX = "/model-health"
log = logging.getLogger(__name__)


def served(name: str | None, monitored: Callable[[Any], bool]) -> tuple[Any, list[str]]:
    """The pipeline the page shows (``name``, else the first served that ``monitored`` says has
    monitored days, else the first served) and every served pipeline's name; an unknown name is a
    404 naming the served ones."""
    from fastapi import HTTPException

    from jobs.config.pipelines import discover

    pipelines = discover()
    names = [p.name for p in pipelines]
    if name:
        chosen = [p for p in pipelines if p.name == name]
    else:  # the lakes are looked at only when no pipeline is named
        chosen = [next((p for p in pipelines if monitored(p)), pipelines[0])] if pipelines else []
    if not chosen:
        raise HTTPException(404, f"no pipeline {name!r}: this deployment serves {', '.join(names) or 'none'}")
    return chosen[0], names


PLAN_TASK = "plan_training"  # its outputs: the window's last day, and what started the run
PLAN_KEYS = ("run_date", "trigger", "started_by")


def training_runs(dag_id: str) -> dict[str, dict[str, str]]:
    """What Airflow's metadata DB knows of ``dag_id``'s training runs, by the last day of their window
    (the ``plan_training`` task's XComs): the run's id, its trigger and what started it; the latest
    run when several trained up to the same day. Empty when the DB cannot be read: the page then
    links to the DAG's runs and shows what the training summaries say."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    found: dict[str, dict[str, str]] = {}
    try:
        with create_session() as session:
            rows = session.execute(
                select(XComModel.run_id, XComModel.key, XComModel.value)
                .where(XComModel.dag_id == dag_id, XComModel.task_id == PLAN_TASK, XComModel.key.in_(PLAN_KEYS))
                .order_by(XComModel.timestamp)
            ).all()
    except Exception:  # noqa: BLE001 - a page without run links beats no page
        log.exception("could not read %s's runs from Airflow's metadata DB: no Airflow run links", dag_id)
        return found
    by_run: dict[str, dict[str, str]] = {}
    for run_id, key, value in rows:
        by_run.setdefault(run_id, {"airflow_run_id": run_id})[key] = str(XComModel.deserialize_value(_Row(value)))
    for plan in by_run.values():  # in the order they were written: the latest run of a day wins
        if "run_date" in plan:
            found[plan["run_date"]] = plan
    return found


class _Row:
    """What ``XComModel.deserialize_value`` reads: an object with the stored ``value``."""

    def __init__(self, value: Any) -> None:
        self.value = value


def create_app(lake_root: str | None = None) -> FastAPI:
    """The app; ``lake_root`` (default: ``LAKE_ROOT`` at each request) is where the pipelines' lakes are."""
    from airflow.api_fastapi.core_api.security import requires_access_dag
    from fastapi import Depends, FastAPI, HTTPException, Query
    from fastapi.responses import HTMLResponse, JSONResponse

    from jobs.lake.layout import MONITORING_REPORT, Lake
    from jobs.lake.storage import entries, exists, read_json
    from orchestration.health.page import render
    from orchestration.health.view import model_health
    from orchestration.pipelines import dag_ids

    app = FastAPI(title="Model health", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(requires_access_dag("GET"))])
    def last_days(days: str | None = Query(None, description="only the last N days up to the latest monitored "
                                                             "day (empty: every day, as the page's form sends it)")
                  ) -> int | None:
        if not days:
            return None
        if not days.isdigit() or int(days) < 1:
            raise HTTPException(422, f"days: a whole number of days, at least 1 (or empty: every day), got {days!r}")
        return int(days)

    def pipeline_lake(pipeline: Any) -> Lake:
        return Lake.at(pipeline.lake_root(Lake.at(lake_root).root))

    def monitored(pipeline: Any) -> bool:
        lake = pipeline_lake(pipeline)
        return exists(lake.monitoring) and any(is_dir for _, is_dir in entries(lake.monitoring))

    def view(name: str | None, model: str | None, days: int | None) -> dict[str, Any]:
        pipeline, names = served(name, monitored)
        decay = pipeline.config().monitoring.decay
        train_dag = dag_ids(pipeline.name)["train"]
        found = model_health(pipeline_lake(pipeline), metric=decay.metric, window_days=decay.window_days,
                             model=model or None, days=days, airflow_runs=training_runs(train_dag),
                             train_dag=train_dag)
        return {"pipeline": pipeline.name, "pipelines": names, **found}

    @app.get("/", response_class=HTMLResponse)
    def page(pipeline: str | None = None, model: str | None = None,
             days: int | None = Depends(last_days)) -> HTMLResponse:
        return HTMLResponse(render(view(pipeline, model, days), model=model or None, days=days))

    @app.get("/api/health")
    def health(pipeline: str | None = None, model: str | None = None,
               days: int | None = Depends(last_days)) -> JSONResponse:
        return JSONResponse(view(pipeline, model, days))

    @app.get("/api/days/{day}")
    def monitored_day(day: dt.date, pipeline: str | None = None) -> JSONResponse:
        lake = pipeline_lake(served(pipeline, monitored)[0])
        path = f"{lake.partition(lake.monitoring, day)}/{MONITORING_REPORT}"
        record = read_json(path)
        if record is None:
            raise HTTPException(404, f"no monitored day {day}: {path} does not exist (the monitor job writes it "
                                     "once the day is scored and its outcomes are in)")
        return JSONResponse(record)

    return app


class LazyApp:
    """An ASGI app that builds :func:`create_app`'s on its first request: every Airflow process loads
    the plugin (workers for its links), only the API server serves the page and pays for its imports."""

    def __init__(self) -> None:
        self.app: FastAPI | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.app is None:
            self.app = create_app()
        await self.app(scope, receive, send)


def external_view() -> dict[str, Any]:
    """The UI's navigation entry that shows the page in an iframe (``href`` relative to the UI's base)."""
    return {"name": "Model health", "href": f"{URL_PREFIX.lstrip('/')}/", "destination": "nav",
            "url_route": "model-health", "category": "browse"}

"""A pipeline's score DAG's tasks in the Airflow worker: plan the days a run scores, then per scored
day check its drift and the champion's decay (the pipeline's ``scoring_drift`` and ``model_decay``
Assets), and promote a challenger on live evidence (its ``champion_model`` Asset)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from jobs.config.pipelines import Pipeline
from orchestration.assets import asset_events, asset_extras, pipeline_assets
from orchestration.decisions import decay_event, drift_event, ingest_hint, missing_feature_days
from orchestration.pipelines import calendar_of, config_of, dag_ids, lake_of

if TYPE_CHECKING:
    from jobs.config import FeedCalendar


def scoring_days(run_date: str | None, features: Iterable[dict[str, Any]],
                 champion: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The days a scoring run scores, oldest first, each with ``after_retraining``: whether it is
    scored again because a new champion was trained up to it (then its drift starts no retraining).

    A person's ``run_date`` wins; else the days of the feature events (fresh data), then the days
    of the champion events that no feature event names.
    """
    if run_date:
        return [{"day": run_date, "after_retraining": False}]
    days: dict[str, bool] = {}
    for extra in features:
        days.update((day, False) for day in extra.get("days", []))
    for extra in champion:
        if extra.get("run_date"):
            days.setdefault(extra["run_date"], True)
    return [{"day": day, "after_retraining": again} for day, again in sorted(days.items())]


def open_scoring_days(days: list[dict[str, Any]], calendar: FeedCalendar) -> tuple[list[dict[str, Any]], list[str]]:
    """The planned ``days`` the feed has rows on (``feed_calendar``), and the closed ones: a closed
    day has no features, and scoring it is nothing to do, not a missing partition."""
    found = [item for item in days if calendar.is_open(dt.date.fromisoformat(item["day"]))]
    return found, [item["day"] for item in days if item not in found]


def unplanned_events(events: Iterable[tuple[dt.datetime, dict[str, Any]]], mark: dt.datetime | None,
                     triggering: Iterable[tuple[dt.datetime, dict[str, Any]]]) -> tuple[list[dict[str, Any]],
                                                                                    dt.datetime | None]:
    """The extras of the ``features`` events that no scoring run has planned yet, and the new mark.

    ``events``: (timestamp, extra) of the Asset's events after ``mark`` (the newest event an
    earlier run planned; None before the first), ``triggering``: this run's own. Airflow 3.3 makes
    an Asset-triggered run of the events up to the first one queued while the DAG was at
    ``max_active_runs``, then drops the queue entry: an event that came after it belongs to no run
    and starts none (a backfill's last day stayed unscored). So a run plans every event newer than
    the mark, whether or not it triggered the run; without a mark, from its first triggering event.
    """
    triggering = list(triggering)
    if mark is None:
        if not triggering:
            return [], None
        mark = min(when for when, _ in triggering) - dt.timedelta(microseconds=1)
    fresh = sorted(((when, extra) for when, extra in events if when > mark), key=lambda event: event[0])
    return [extra for _, extra in fresh], max([mark, *(when for when, _ in fresh)])


def plan_scoring(pipeline: Pipeline) -> Any:
    """The days this scoring run scores (see :func:`scoring_days`); each must have its features."""
    assets = pipeline_assets(pipeline.name)
    features, champion = assets.features, assets.champion

    @task(task_id="plan_scoring", inlets=[features])
    def plan(params: dict[str, Any] | None = None, triggering_asset_events: Any = None,
             inlet_events: Any = None) -> list[dict[str, Any]]:
        lake = lake_of(pipeline)
        run_date = (params or {}).get("run_date")
        fresh = [] if run_date else _unplanned_features(lake, inlet_events, triggering_asset_events, features)
        planned = scoring_days(run_date, fresh, asset_extras(triggering_asset_events, champion))
        last = max((dt.date.fromisoformat(item["day"]) for item in planned), default=None)
        days, closed = open_scoring_days(planned, calendar_of(pipeline, last))
        if closed:
            print(f"not scoring {', '.join(closed)}: closed for the feed (feed_calendar), no rows to score")
        if planned and not days:
            raise AirflowSkipException(f"{', '.join(closed)}: closed for the feed (feed_calendar): nothing to score")
        if not days and asset_extras(triggering_asset_events, features):
            raise AirflowSkipException("the features events of this run were planned by an earlier scoring run "
                                       "(it started after they came): nothing left to score")
        if not days:
            raise AirflowFailException(
                "no day to score: this run has no run_date param and no feature or champion event; "
                "trigger it with {\"run_date\": \"YYYY-MM-DD\"}"
            )
        if missing := missing_feature_days(lake, [dt.date.fromisoformat(d["day"]) for d in days]):
            raise AirflowFailException(f"no features for {', '.join(map(str, missing))}: "
                                       f"{ingest_hint(missing, dag_ids(pipeline.name)['ingest'])}")
        from jobs.tracking import NoModelError, champion_version

        try:  # a new deployment ingests before any model exists: nothing to score with yet
            champion_version(config_of(pipeline).train.model_name)
        except NoModelError as err:
            raise AirflowSkipException(f"not scoring {', '.join(d['day'] for d in days)}: {err}") from err
        for item in days:
            why = "again, with the new champion" if item["after_retraining"] else "new features"
            print(f"scoring {item['day']} ({why})")
        return days

    return plan()


PLANNED_MARK = "planned-features.json"  # in reports/scoring/: the newest features event a scoring run planned


def _unplanned_features(lake: Any, inlet_events: Any, triggering: Any, features: Asset) -> list[dict[str, Any]]:
    """:func:`unplanned_events` of a scoring run: the mark read from and written to the lake (runs
    go one at a time, ``max_active_runs=1``), the events from Airflow's record of the Asset."""
    from jobs.lake.storage import read_json, write_json

    path = f"{lake.reports('scoring')}/{PLANNED_MARK}"
    stored = (read_json(path) or {}).get("until")
    mark = dt.datetime.fromisoformat(stored) if stored else None
    own = [(event.timestamp, dict(event.extra or {})) for event in asset_events(triggering, features)]
    since = mark or (min(when for when, _ in own) if own else None)
    found = [] if since is None else [(event.timestamp, dict(event.extra or {}))
                                      for event in inlet_events[features].after(since.isoformat())]
    extras, until = unplanned_events(found, mark, own)
    if until is not None and until != mark:
        write_json(path, {"until": until.isoformat()})
    return extras


def drift_check(pipeline: Pipeline, days: Any) -> Any:
    """One task per scored day: updates ``asset`` when the score job found the day drifted;
    skipped (no event) when it did not, when the model has no drift baseline, or when the day was
    scored again after the retraining its drift started (no second retraining on the same window)."""
    asset = pipeline_assets(pipeline.name).drift

    @task(task_id="check_drift", outlets=[asset], map_index_template="{{ day }}")
    def check(item: dict[str, Any]) -> dict[str, Any]:
        day = item["day"]
        get_current_context()["day"] = day  # type: ignore[typeddict-unknown-key]  # names the mapped task in the UI
        extra, why = drift_event(lake_of(pipeline), day, item["after_retraining"])
        if extra is None:
            raise AirflowSkipException(why)
        get_current_context()["outlet_events"][asset].extra = extra
        for reason in extra["reasons"]:
            print(f"drift on {day}: {reason}")
        print(f"pipeline {pipeline.name}: {day} drifted from version {extra['model_version']}'s training window "
              f"({len(extra['reasons'])} reason(s) above): {dag_ids(pipeline.name)['train']} retrains on it; "
              f"read {extra['report']}")
        return extra

    return check.expand(item=days)


def decay_check(pipeline: Pipeline, days: Any) -> Any:
    """One task per scored day: judges the champion's decay on the monitored days up to it (the
    day minus ``monitoring.label_delay_days``), writes ``reports/decay/date=D/decay.json`` and
    updates the pipeline's ``model_decay`` Asset when the decay starts a retraining; skipped (no
    event) otherwise."""
    asset = pipeline_assets(pipeline.name).decay

    @task(task_id="check_decay", outlets=[asset], map_index_template="{{ day }}")
    def check(item: dict[str, Any]) -> dict[str, Any]:
        from jobs.tracking import champion_version

        get_current_context()["day"] = item["day"]  # type: ignore[typeddict-unknown-key]
        config = config_of(pipeline)
        champion = champion_version(config.train.model_name)
        report, extra = decay_event(lake_of(pipeline), config, dt.date.fromisoformat(item["day"]), champion.name,
                                    champion.version)
        for found in report.get("miscalibrated_days", []):  # the level far from the truth: said, not retrained on
            print(f"pipeline {pipeline.name}: version {champion.version} miscalibrated on {found['day']}: "
                  f"{found['reason']}")
        if extra is None:
            why = "; ".join(report["reasons"]) or report["status"]
            raise AirflowSkipException(f"no retraining for decay on {report['day']} ({why}); report: {report['path']}")
        get_current_context()["outlet_events"][asset].extra = extra
        for reason in report["reasons"]:
            print(f"decay on {report['day']}: {reason}")
        print(f"pipeline {pipeline.name}: version {champion.version} decayed on {report['day']} (above): "
              f"{dag_ids(pipeline.name)['train']} retrains on the days up to it; report: {report['path']}")
        return extra

    return check.expand(item=days)


def live_promotion_event(days: list[dict[str, Any]], config: Any, lake: Any, mlflow_client: Any) -> dict[str, Any]:
    """What ``promote_challenger`` does for the scored ``days``: with ``monitoring.promotion_evidence:
    live``, :func:`jobs.monitoring.challengers.live_promotion` over the monitored days up to the last
    one (the last scored day minus the label delay); the ``champion_model`` event's extra when a
    challenger became champion. Raises :class:`AirflowSkipException`, saying why, otherwise."""
    from jobs.monitoring.challengers import live_promotion

    if config.monitoring.promotion_evidence != "live":
        raise AirflowSkipException("monitoring.promotion_evidence is holdout: the champion gate and its approval "
                                   "decide, not the live evidence")
    last = max(dt.date.fromisoformat(item["day"]) for item in days)
    last -= dt.timedelta(days=config.monitoring.label_delay_days)
    promoted = live_promotion(mlflow_client, lake, config, last)
    if promoted is None:
        raise AirflowSkipException(f"no challenger awaiting live evidence beats the champion on "
                                   f"{config.monitoring.live_days} live days up to {last} (the log says why)")
    return {"run_date": last.isoformat(), "model_name": promoted["model_name"],
            "model_version": promoted["model_version"], "replaced": promoted["replaced"],
            "evidence": promoted["evidence"]["summary"]}


def challenger_promotion(pipeline: Pipeline, days: Any) -> Any:
    """After the monitor: with ``monitoring.promotion_evidence: live``, the challenger awaiting live
    evidence whose evidence beats the champion becomes champion (:func:`live_promotion_event`) and
    the pipeline's ``champion_model`` Asset is updated (scoring re-scores that day with it); skipped
    otherwise, saying why."""
    asset = pipeline_assets(pipeline.name).champion

    @task(task_id="promote_challenger", outlets=[asset])
    def promote(days: list[dict[str, Any]]) -> dict[str, Any]:
        from jobs.tracking import client

        extra = live_promotion_event(days, config_of(pipeline), lake_of(pipeline), client())
        get_current_context()["outlet_events"][asset].extra = extra
        print(f"{extra['model_name']} version {extra['model_version']} is the champion now: {extra['evidence']}")
        return extra

    return promote(days)

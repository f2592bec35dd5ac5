"""A pipeline's ingest DAG's tasks in the Airflow worker: wait for the day's raw data, then publish
the days whose features were built (the pipeline's ``features`` Asset)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import get_current_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from jobs.config.pipelines import Pipeline
from orchestration.assets import pipeline_assets
from orchestration.decisions import RUN_DATE, env_amount, missing_feature_days
from orchestration.pipelines import calendar_of, config_of, dag_ids, lake_of

RAW_WAIT_ENV = "PIPELINE_RAW_WAIT_HOURS"  # overrides wait_for_raw's wait_hours where the task runs


def raw_wait_hours(default: float) -> float:
    """How long ``wait_for_raw`` waits after a day ends: ``$PIPELINE_RAW_WAIT_HOURS`` where set (0:
    a scheduled run of a day without raw data skips at once, as on a deployment that only
    backfills history), else ``default``."""
    return env_amount(RAW_WAIT_ENV, default, "hours")


def raw_deadline(day: dt.date, wait_hours: float) -> dt.datetime:
    """When a day's raw data counts as not coming: ``wait_hours`` after the day ends (UTC)."""
    end = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
    return end + dt.timedelta(hours=wait_hours)


def wait_for_raw(pipeline: Pipeline, *, wait_hours: float = 6.0) -> Any:
    """A sensor that waits for the run day's raw feed partition (a closed day of ``feed_calendar``:
    none to wait for); past ``wait_hours`` after the day ended (:func:`raw_wait_hours`:
    ``$PIPELINE_RAW_WAIT_HOURS`` overrides it) it skips the run (nothing to ingest, nothing
    downstream) instead of failing it."""

    @task.sensor(task_id="wait_for_raw", poke_interval=300, timeout=(wait_hours + 24) * 3600,
                 mode="reschedule", soft_fail=True)
    def sensor(run_date: str) -> bool:
        from jobs.lake.storage import is_dir

        config = config_of(pipeline)
        lake, feed = lake_of(pipeline), config.validation.feed
        day = dt.date.fromisoformat(run_date)
        if not config.feed_calendar.is_open(day):  # the jobs pass over it and succeed, saying so
            print(f"{day} is closed for {feed} (feed_calendar): no raw data to wait for")
            return True
        folder = lake.raw_partition(feed, day)
        if is_dir(folder):
            print(f"raw {feed} for {day} is in: {folder}")
            return True
        deadline = raw_deadline(day, raw_wait_hours(wait_hours))
        if dt.datetime.now(dt.UTC) > deadline:
            raise AirflowSkipException(
                f"no raw {feed} for {day} ({folder}), and it was due by {deadline:%Y-%m-%d %H:%M} UTC: "
                f"nothing to ingest. To ingest past days, backfill {dag_ids(pipeline.name)['ingest']} over them "
                "or trigger it with a run_date."
            )
        print(f"waiting for raw {feed} for {day} in {folder} (skipping after {deadline:%Y-%m-%d %H:%M} UTC)")
        return False

    return sensor(run_date=RUN_DATE)


def publish_features(pipeline: Pipeline) -> Any:
    """After the features job: update the pipeline's ``features`` Asset with the days whose
    features were (re)built, the window's open days (``feed_calendar``); a window of closed days
    only publishes nothing (skipped)."""
    asset = pipeline_assets(pipeline.name).features

    @task(task_id="publish_features", outlets=[asset])
    def publish(run_date: str, days: str) -> dict[str, Any]:
        from jobs.config import days_ending

        lake = lake_of(pipeline)
        span = days_ending(dt.date.fromisoformat(run_date), int(days))
        window = calendar_of(pipeline, span[-1]).open_days(span)  # a closed day has no partition to publish
        if not window:
            raise AirflowSkipException(f"{span[0]}..{span[-1]} holds no open day of the feed (feed_calendar): "
                                       "no features to publish, nothing to score")
        if missing := missing_feature_days(lake, window):
            raise AirflowFailException(f"the features job ended but {missing} have no partition in {lake.features}")
        extra = {"days": [day.isoformat() for day in window], "path": lake.features}
        get_current_context()["outlet_events"][asset].extra = extra
        print(f"features ready for {window[0]}..{window[-1]} in {lake.features}")
        return extra

    return publish(run_date=RUN_DATE, days="{{ params.days }}")

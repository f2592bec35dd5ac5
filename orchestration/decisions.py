"""The decisions the DAGs' tasks take, as plain functions, tested without Airflow: the day a run is
for, the training window and what started it, a day's drift and decay events, which days lack
features. The tasks of :mod:`~orchestration.ingest_tasks`, :mod:`~orchestration.score_tasks` and
:mod:`~orchestration.train_tasks` wrap them, and the replay (:mod:`orchestration.replay`) calls them
as the DAGs do.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

# The day a run is for, when it is given: the ``run_date`` param, else the logical date.
RUN_DATE = "{{ params.run_date or ds }}"


def env_amount(name: str, default: float, unit: str) -> float:
    """The amount >= 0 in environment variable ``name``, else ``default`` (unset or empty); any
    other value raises, naming the variable and the ``unit``."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        amount = float(value)
    except ValueError:
        amount = -1.0
    if not amount >= 0:
        raise ValueError(f"{name}={value!r} is not a number of {unit} >= 0 (unset it for {default:g} {unit})")
    return amount


TRAINING_SCHEDULE = "@weekly"  # the train DAGs' timetable (cron, UTC); the replay's weekly retraining fires on it too


def scheduled_training_end(day: dt.date, schedule: str = TRAINING_SCHEDULE) -> dt.datetime | None:
    """When ``schedule`` fires as ``day`` ends (midnight UTC after it), that moment: the data
    interval end of the scheduled train DAG run, whose window then ends with ``day``
    (:func:`training_plan`); None when it does not fire then."""
    from croniter import croniter

    end = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
    return end if croniter.match(schedule, end.replace(tzinfo=None)) else None


def training_plan(run_date: str | None, drift: list[dict[str, Any]], scheduled_end: dt.datetime | None,
                  decay: list[dict[str, Any]] | None = None, champion: str | None = None) -> dict[str, str]:
    """The last day of the training window, what started the run (``trigger``: person, decay, drift
    or schedule) and that in words (``started_by``).

    A person's ``run_date`` wins; a decay event retrains on the window that ends with the latest
    decayed day (the outcomes say the champion is worse: the strongest evidence); a drift event on
    the window that ends with the latest drifted day; a scheduled run trains on the window that
    ends with the last whole day before it ran (``scheduled_end``: the end of its data interval).

    With ``champion`` (the version the alias points at as the run plans), the events about another
    version are stale and dropped: they judged a champion that a newer version replaced while the
    run waited (a train DAG runs one at a time: a drift or decay found while a retraining
    ran queues a run that starts after it). A run whose events are all stale is skipped, saying
    which: the new champion's own days are judged against it (:func:`stale_events`).
    """
    if not run_date and champion is not None and (drift or decay):
        drift, decay, stale = stale_events(drift, decay or [], champion)
        if not (drift or decay):
            raise AirflowSkipException(
                f"nothing to retrain: {'; '.join(stale)}, and version {champion} has replaced it as champion "
                "since (the days it serves are judged against it)")
    if run_date:
        return {"run_date": run_date, "trigger": "person", "started_by": f"a person: run_date {run_date}"}
    if decay:
        latest = max(decay, key=lambda extra: extra["run_date"])
        reasons = "; ".join(latest.get("reasons", [])) or "see the decay report"
        return {"run_date": latest["run_date"], "trigger": "decay",
                "started_by": f"decay of version {latest.get('model_version', '?')} on {latest['run_date']}: {reasons}"}
    if drift:
        latest = max(drift, key=lambda extra: extra["run_date"])
        reasons = "; ".join(latest.get("reasons", [])) or "see the drift report"
        days = sorted({extra["run_date"] for extra in drift})
        against = f" against version {latest['model_version']}" if latest.get("model_version") else ""
        return {"run_date": latest["run_date"], "trigger": "drift",
                "started_by": f"drift on {', '.join(days)}{against}: {reasons}"}
    if scheduled_end is None:
        raise AirflowFailException("no day to train up to: trigger with {\"run_date\": \"YYYY-MM-DD\"}")
    day = (scheduled_end - dt.timedelta(days=1)).date()
    return {"run_date": day.isoformat(), "trigger": "schedule",
            "started_by": f"the weekly schedule (window up to {day})"}


def stale_events(drift: list[dict[str, Any]], decay: list[dict[str, Any]],
                 champion: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """The drift and decay events about ``champion`` (or about no named version: events of an older
    release), and the others in words: a drift measured, or a decay judged, against a version that
    is no longer the champion."""
    def current(extra: dict[str, Any]) -> bool:
        return str(extra.get("model_version") or champion) == champion

    stale = [f"the {kind} of {extra['run_date']} was {verb} version {extra['model_version']}"
             for kind, verb, events in (("drift", "measured against", drift), ("decay", "judged on", decay))
             for extra in events if not current(extra)]
    return [e for e in drift if current(e)], [e for e in decay if current(e)], stale


def missing_feature_days(lake: Any, days: list[dt.date]) -> list[dt.date]:
    from jobs.lake.storage import is_dir

    return [day for day in days if not is_dir(lake.partition(lake.features, day))]


def ingest_hint(days: list[dt.date], ingest_dag: str) -> str:
    """What to trigger so that ``days`` get their features (``ingest_dag``: the pipeline's ingest DAG)."""
    span = (days[-1] - days[0]).days + 1
    return (f"ingest them first: trigger {ingest_dag} with {{\"run_date\": \"{days[-1]}\", \"days\": {span}}}, "
            f"or backfill {ingest_dag} from {days[0]} to {days[-1]}")


def drift_event(lake: Any, day: str, after_retraining: bool) -> tuple[dict[str, Any] | None, str]:
    """What ``check_drift`` does for a scored ``day`` (and the replay, :mod:`orchestration.replay`): the
    ``scoring_drift`` event's extra when the score job found the day drifted, else None and why not
    (no baseline, too few rows, no drift, or the day was scored again after the retraining its
    drift started: no second retraining on the same window)."""
    from jobs.lake.reports import read_report

    report = read_report(lake, "scoring", day)
    drift = report.get("drift")
    if drift is None:
        return None, f"drift was not measured for {day}: the model has no drift baseline"
    if drift.get("status") == "too_few_rows":
        return None, f"drift not judged on {day}: {drift['headline']} (report: {drift['report']})"
    if not drift["drifted"]:
        return None, f"no drift on {day} (report: {drift['report']})"
    if after_retraining:
        return None, (f"{day} still drifts after the retraining it started ({'; '.join(drift['reasons'])}): not "
                      f"retraining on the same window again; read {drift['report']}")
    # the version that scored the day, whose drift baseline it was measured against: a training
    # planned after a newer champion replaced it drops the event (training_plan)
    return {"run_date": day, "model_version": report.get("model_version"),
            "reasons": drift["reasons"], "report": drift["report"]}, "drifted"


def decay_report(records: list[dict[str, Any]], previous: list[dict[str, Any]], model_name: str,
                 champion: str, day: dt.date, spec: Any) -> dict[str, Any]:
    """The decay report of monitored ``day`` for the champion version: the verdict of
    :func:`jobs.monitoring.decay.judge` on ``records`` (the monitoring zone's days up to ``day``),
    its holdout value taken from the latest record, and ``triggered``: whether it starts a
    retraining (not when an earlier report in ``previous``, the same day's included, already
    started one for this version within the window). Days whose decay started the retraining of an
    earlier champion are not judged again."""
    from jobs.monitoring.decay import already_triggered, champion_days, consumed_days, judge

    consumed = consumed_days(previous, champion)
    days = champion_days(records, model_name, champion)
    holdout = dict((days[-1].get("holdout") or {}) if days else {})
    verdict = judge(records, model_name, champion, holdout, spec, consumed)
    report = {"day": day.isoformat(), **verdict, "triggered": False}
    if verdict["decayed"]:
        earlier = already_triggered(previous, champion, day, spec.window_days)
        if earlier:
            report["status"] = f"decayed, but the decay of {earlier} already started a retraining for this version"
        else:
            report["triggered"] = True
    return report


def decay_event(lake: Any, config: Any, scored: dt.date, model_name: str,
                champion: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """What ``check_decay`` does for a scored day (and the replay, :mod:`orchestration.replay`): judges the
    ``champion`` version's decay on the monitored days up to ``scored`` minus
    ``monitoring.label_delay_days``, writes ``reports/decay/date=D/decay.json`` (its ``path`` in the
    returned report) and returns it with the ``model_decay`` event's extra when the decay starts a
    retraining (None otherwise)."""
    import json

    from jobs.lake.layout import DECAY_REPORT, partition_day
    from jobs.lake.storage import entries, read_json, write_text
    from jobs.monitoring.decay import EARLIER, carried, verdicts

    day = scored - dt.timedelta(days=config.monitoring.label_delay_days)
    spec = config.monitoring.decay
    first = day - dt.timedelta(days=4 * spec.window_days)  # enough history for the window's days
    records, previous = [], []
    for name, _ in entries(lake.monitoring):
        found = partition_day(name)
        if found is not None and first <= found <= day:
            if (record := read_json(lake.monitoring_report(found))) is not None:
                records.append(record)
            # the day's own earlier report too (read before it is rewritten): a re-run starts nothing new
            if (earlier := read_json(lake.report("decay", found, DECAY_REPORT))) is not None:
                previous.extend(verdicts(earlier))
    report = decay_report(records, previous, model_name, champion, day, spec)
    path = lake.report("decay", day, DECAY_REPORT)
    # the verdicts that started a retraining stay in the day's report when it is rewritten
    write_text(path, json.dumps({**report, EARLIER: carried(read_json(path))}, indent=2))
    report = {**report, "path": path}
    if not report["triggered"]:
        return report, None
    return report, {"run_date": day.isoformat(), "model_version": champion, "reasons": report["reasons"],
                    "report": path}

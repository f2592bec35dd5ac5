"""The pipeline's Assets and the small tasks that run in the Airflow worker between its Spark jobs.

Who writes what (one owner per lake partition):
- ``ingest_pipeline`` is the only writer of ``validated/`` and ``features/``; each run updates
  :data:`FEATURES` with the days it built in the event's ``extra``.
- ``score_pipeline`` runs on :data:`FEATURES` (and on :data:`CHAMPION`: a new champion re-scores
  the day it was trained up to), writes ``predictions/`` for those days and updates :data:`DRIFT`
  for a day that drifted.
- ``score_pipeline`` also judges the served predictions on their outcomes (the monitor) and
  updates :data:`DECAY` when the champion's realized quality decayed.
- ``train_pipeline`` runs weekly, on :data:`DRIFT` or on :data:`DECAY`, reads the feature partitions of its window
  and writes none; a version that is promoted (by the gate, or by a person when the run requires
  approval) updates :data:`CHAMPION`.

Plain Assets with the days in the event's ``extra``, not Airflow's partitioned assets: an event
that carries a partition key never queues a DAG that is not partition-aware
(``AssetManager._queue_dagruns``), and every outlet event of a partitioned run carries the run's
key, so a partitioned scoring run could not start the weekly-or-on-drift training DAG (an
``AssetOrTimeSchedule``, which is not partition-aware).

The decisions (which days, which window, what started a run) are plain functions, tested
without Airflow; the tasks wrap them.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable
from typing import Any

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import Asset, get_current_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

FEATURES = Asset(name="features", uri="lakeflow://features")
DRIFT = Asset(name="scoring_drift", uri="lakeflow://reports/drift")
CHAMPION = Asset(name="champion_model", uri="lakeflow://models/champion")
DECAY = Asset(name="model_decay", uri="lakeflow://monitoring/decay")

# The day a run is for, when it is given: the ``run_date`` param, else the logical date.
RUN_DATE = "{{ params.run_date or ds }}"


def _events(events: Any, asset: Asset) -> list[Any]:
    """The events of ``asset`` among a run's triggering events (none: [])."""
    try:
        return list(events[asset]) if events else []
    except KeyError:
        return []


def _extras(events: Any, asset: Asset) -> list[dict[str, Any]]:
    """The ``extra`` of each event of ``asset`` among a run's triggering events (none: [])."""
    return [dict(event.extra or {}) for event in _events(events, asset)]


# ---- decisions, as plain functions ------------------------------------------------------------


TRAINING_SCHEDULE = "@weekly"  # train_pipeline's timetable (cron, UTC); the replay's weekly retraining fires on it too


def scheduled_training_end(day: dt.date, schedule: str = TRAINING_SCHEDULE) -> dt.datetime | None:
    """When ``schedule`` fires as ``day`` ends (midnight UTC after it), that moment: the data
    interval end of the scheduled ``train_pipeline`` run, whose window then ends with ``day``
    (:func:`training_plan`); None when it does not fire then."""
    from croniter import croniter

    end = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
    return end if croniter.match(schedule, end.replace(tzinfo=None)) else None


RAW_WAIT_ENV = "PIPELINE_RAW_WAIT_HOURS"  # overrides wait_for_raw's wait_hours where the task runs


def raw_wait_hours(default: float) -> float:
    """How long ``wait_for_raw`` waits after a day ends: ``$PIPELINE_RAW_WAIT_HOURS`` where set (0:
    a scheduled run of a day without raw data skips at once, as on a deployment that only
    backfills history), else ``default``."""
    return env_amount(RAW_WAIT_ENV, default, "hours")


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


def raw_deadline(day: dt.date, wait_hours: float) -> dt.datetime:
    """When a day's raw data counts as not coming: ``wait_hours`` after the day ends (UTC)."""
    end = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC)
    return end + dt.timedelta(hours=wait_hours)


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


def training_plan(run_date: str | None, drift: list[dict[str, Any]], scheduled_end: dt.datetime | None,
                  decay: list[dict[str, Any]] | None = None) -> dict[str, str]:
    """The last day of the training window, what started the run (``trigger``: person, decay, drift
    or schedule) and that in words (``started_by``).

    A person's ``run_date`` wins; a decay event retrains on the window that ends with the latest
    decayed day (the outcomes say the champion is worse: the strongest evidence); a drift event on
    the window that ends with the latest drifted day; a scheduled run trains on the window that
    ends with the last whole day before it ran (``scheduled_end``: the end of its data interval).
    """
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
        return {"run_date": latest["run_date"], "trigger": "drift",
                "started_by": f"drift on {', '.join(days)}: {reasons}"}
    if scheduled_end is None:
        raise AirflowFailException("no day to train up to: trigger with {\"run_date\": \"YYYY-MM-DD\"}")
    day = (scheduled_end - dt.timedelta(days=1)).date()
    return {"run_date": day.isoformat(), "trigger": "schedule",
            "started_by": f"the weekly schedule (window up to {day})"}


def missing_feature_days(lake: Any, days: list[dt.date]) -> list[dt.date]:
    from jobs.lake.storage import is_dir

    return [day for day in days if not is_dir(lake.partition(lake.features, day))]


def ingest_hint(days: list[dt.date]) -> str:
    """What to trigger so that ``days`` get their features."""
    span = (days[-1] - days[0]).days + 1
    return (f"ingest them first: trigger ingest_pipeline with {{\"run_date\": \"{days[-1]}\", \"days\": {span}}}, "
            f"or backfill ingest_pipeline from {days[0]} to {days[-1]}")


def _score(value: str) -> str:
    return value if value else "(none)"


def approval_evidence(lake: Any, config: Any, summary: dict[str, Any]) -> dict[str, Any] | None:
    """The live evidence of the version awaiting approval against the champion it was compared
    with (:func:`jobs.monitoring.challengers.live_evidence` over the monitoring zone's latest days),
    None when it has none (never scored in shadow beside that champion)."""
    from jobs.monitoring.challengers import HISTORY_FACTOR, live_evidence, monitoring_records

    champion = summary["gate"].get("gate_champion_version") or ""
    if not champion:
        return None
    live_days = config.monitoring.live_days
    records = monitoring_records(lake, days=HISTORY_FACTOR * live_days)
    evidence = live_evidence(records, summary["model_name"], champion, summary["model_version"], live_days)
    return evidence if evidence["days"] else None


def approval_request(summary: dict[str, Any], evidence: dict[str, Any] | None = None) -> tuple[str, str]:
    """The subject and Markdown body a person sees when a version that won the gate needs their
    approval: the comparison with the current champion, the holdout metrics, the live evidence
    when the version was scored in shadow beside the champion (``evidence``:
    :func:`approval_evidence`), and where to look."""
    gate, name, version = summary["gate"], summary["model_name"], summary["model_version"]
    champion = gate.get("gate_champion_version") or ""
    subject = (f"Make {name} version {version} the champion?" if not champion
               else f"Replace {name} champion v{champion} with version {version}?")
    rows = [
        "| | challenger (this run) | champion |",
        "|---|---|---|",
        f"| version | {version} | {_score(champion)} |",
        f"| holdout {gate['gate_metric']} | {gate['gate_challenger_score']} | {_score(gate['gate_champion_score'])} |",
    ]
    metrics = ", ".join(f"{key} {value:.0f}" if key == "rows" else f"{key} {value:.4f}"
                        for key, value in sorted(summary.get("metrics", {}).items()))
    live = ["Live evidence: none yet (the version has not been scored in shadow beside the champion)."]
    if evidence is not None and evidence.get("difference"):
        diff = evidence["difference"]
        live = [
            f"Live evidence (shadow scoring, realized outcomes): **{evidence['summary']}**.", "",
            "| live days | rows | difference in " + str(evidence["metric"]) + " (challenger - champion) "
            "| 95% interval | beats the champion |",
            "|---|---|---|---|---|",
            f"| {len(evidence['days'])} ({evidence['days'][0]}..{evidence['days'][-1]}) | {evidence['rows']} "
            f"| {diff['value']:+.4f} | {diff['low']:+.4f}..{diff['high']:+.4f} "
            f"| {'yes' if evidence['beats'] else 'no'} (on {evidence['live_days']} days) |",
        ]
    body = "\n".join([
        f"The champion gate says: **{gate['gate_reason']}**.", "", *rows, "",
        f"Trained on {summary.get('train_window', '?')}, compared on the holdout {summary.get('holdout_window', '?')}"
        " (both versions scored on the same rows).",
        f"Challenger's holdout metrics: {metrics or 'none'}.", "", *live, "",
        f"MLflow run: {summary.get('run_url') or summary.get('run_id', '?')}", "",
        "**Approve** moves the `champion` alias to this version (scoring re-scores the window's last day "
        "with it); **Reject** keeps the current champion. Either way the version is tagged with your answer.",
    ])
    return subject, body


# ---- the tasks ---------------------------------------------------------------------------------


def wait_for_raw(*, wait_hours: float = 6.0) -> Any:
    """A sensor that waits for the run day's raw feed partition; past ``wait_hours`` after the day
    ended (:func:`raw_wait_hours`: ``$PIPELINE_RAW_WAIT_HOURS`` overrides it) it skips the run
    (nothing to ingest, nothing downstream) instead of failing it."""

    @task.sensor(task_id="wait_for_raw", poke_interval=300, timeout=(wait_hours + 24) * 3600,
                 mode="reschedule", soft_fail=True)
    def sensor(run_date: str) -> bool:
        from jobs.config import load_config
        from jobs.lake.layout import Lake
        from jobs.lake.storage import is_dir

        lake, feed = Lake.at(), load_config().validation.feed
        day = dt.date.fromisoformat(run_date)
        folder = lake.raw_partition(feed, day)
        if is_dir(folder):
            print(f"raw {feed} for {day} is in: {folder}")
            return True
        deadline = raw_deadline(day, raw_wait_hours(wait_hours))
        if dt.datetime.now(dt.UTC) > deadline:
            raise AirflowSkipException(
                f"no raw {feed} for {day} ({folder}), and it was due by {deadline:%Y-%m-%d %H:%M} UTC: "
                "nothing to ingest. To ingest past days (the example data is 2013), backfill ingest_pipeline "
                "over them or trigger it with a run_date."
            )
        print(f"waiting for raw {feed} for {day} in {folder} (skipping after {deadline:%Y-%m-%d %H:%M} UTC)")
        return False

    return sensor(run_date=RUN_DATE)


def publish_features(*, asset: Asset = FEATURES) -> Any:
    """After the features job: update ``asset`` with the days whose features were (re)built."""

    @task(task_id="publish_features", outlets=[asset])
    def publish(run_date: str, days: str) -> dict[str, Any]:
        from jobs.config import days_ending
        from jobs.lake.layout import Lake

        lake = Lake.at()
        window = days_ending(dt.date.fromisoformat(run_date), int(days))
        if missing := missing_feature_days(lake, window):
            raise AirflowFailException(f"the features job ended but {missing} have no partition in {lake.features}")
        extra = {"days": [day.isoformat() for day in window], "path": lake.features}
        get_current_context()["outlet_events"][asset].extra = extra
        print(f"features ready for {window[0]}..{window[-1]} in {lake.features}")
        return extra

    return publish(run_date=RUN_DATE, days="{{ params.days }}")


def plan_scoring(*, features: Asset = FEATURES, champion: Asset = CHAMPION) -> Any:
    """The days this scoring run scores (see :func:`scoring_days`); each must have its features."""

    @task(task_id="plan_scoring", inlets=[features])
    def plan(params: dict[str, Any] | None = None, triggering_asset_events: Any = None,
             inlet_events: Any = None) -> list[dict[str, Any]]:
        from jobs.lake.layout import Lake

        run_date = (params or {}).get("run_date")
        fresh = [] if run_date else _unplanned_features(Lake.at(), inlet_events, triggering_asset_events, features)
        days = scoring_days(run_date, fresh, _extras(triggering_asset_events, champion))
        if not days and _extras(triggering_asset_events, features):
            raise AirflowSkipException("the features events of this run were planned by an earlier scoring run "
                                       "(it started after they came): nothing left to score")
        if not days:
            raise AirflowFailException(
                "no day to score: this run has no run_date param and no feature or champion event; "
                "trigger it with {\"run_date\": \"YYYY-MM-DD\"}"
            )
        if missing := missing_feature_days(Lake.at(), [dt.date.fromisoformat(d["day"]) for d in days]):
            raise AirflowFailException(f"no features for {', '.join(map(str, missing))}: {ingest_hint(missing)}")
        from jobs.config import load_config
        from jobs.tracking import NoModelError, champion_version

        try:  # a new deployment ingests before any model exists: nothing to score with yet
            champion_version(load_config().train.model_name)
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
    own = [(event.timestamp, dict(event.extra or {})) for event in _events(triggering, features)]
    since = mark or (min(when for when, _ in own) if own else None)
    found = [] if since is None else [(event.timestamp, dict(event.extra or {}))
                                      for event in inlet_events[features].after(since.isoformat())]
    extras, until = unplanned_events(found, mark, own)
    if until is not None and until != mark:
        write_json(path, {"until": until.isoformat()})
    return extras


def drift_event(lake: Any, day: str, after_retraining: bool) -> tuple[dict[str, Any] | None, str]:
    """What ``check_drift`` does for a scored ``day`` (and the replay, :mod:`jobs.replay`): the
    ``scoring_drift`` event's extra when the score job found the day drifted, else None and why not
    (no baseline, too few rows, no drift, or the day was scored again after the retraining its
    drift started: no second retraining on the same window)."""
    from jobs.summary import read_report

    drift = read_report(lake, "scoring", day).get("drift")
    if drift is None:
        return None, f"drift was not measured for {day}: the model has no drift baseline"
    if drift.get("status") == "too_few_rows":
        return None, f"drift not judged on {day}: {drift['headline']} (report: {drift['report']})"
    if not drift["drifted"]:
        return None, f"no drift on {day} (report: {drift['report']})"
    if after_retraining:
        return None, (f"{day} still drifts after the retraining it started ({'; '.join(drift['reasons'])}): not "
                      f"retraining on the same window again; read {drift['report']}")
    return {"run_date": day, "reasons": drift["reasons"], "report": drift["report"]}, "drifted"


def drift_check(days: Any, *, asset: Asset = DRIFT) -> Any:
    """One task per scored day: updates ``asset`` when the score job found the day drifted;
    skipped (no event) when it did not, when the model has no drift baseline, or when the day was
    scored again after the retraining its drift started (no second retraining on the same window)."""

    @task(task_id="check_drift", outlets=[asset], map_index_template="{{ day }}")
    def check(item: dict[str, Any]) -> dict[str, Any]:
        from jobs.lake.layout import Lake

        day = item["day"]
        get_current_context()["day"] = day  # type: ignore[typeddict-unknown-key]  # names the mapped task in the UI
        extra, why = drift_event(Lake.at(), day, item["after_retraining"])
        if extra is None:
            raise AirflowSkipException(why)
        get_current_context()["outlet_events"][asset].extra = extra
        for reason in extra["reasons"]:
            print(f"drift on {day}: {reason}")
        return extra

    return check.expand(item=days)


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
    """What ``check_decay`` does for a scored day (and the replay, :mod:`jobs.replay`): judges the
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


def decay_check(days: Any, *, asset: Asset = DECAY) -> Any:
    """One task per scored day: judges the champion's decay on the monitored days up to it (the
    day minus ``monitoring.label_delay_days``), writes ``reports/decay/date=D/decay.json`` and
    updates ``asset`` when the decay starts a retraining; skipped (no event) otherwise."""

    @task(task_id="check_decay", outlets=[asset], map_index_template="{{ day }}")
    def check(item: dict[str, Any]) -> dict[str, Any]:
        from jobs.config import load_config
        from jobs.lake.layout import Lake
        from jobs.tracking import champion_version

        get_current_context()["day"] = item["day"]  # type: ignore[typeddict-unknown-key]
        config = load_config()
        champion = champion_version(config.train.model_name)
        report, extra = decay_event(Lake.at(), config, dt.date.fromisoformat(item["day"]), champion.name,
                                    champion.version)
        if extra is None:
            why = "; ".join(report["reasons"]) or report["status"]
            raise AirflowSkipException(f"no retraining for decay on {report['day']} ({why}); report: {report['path']}")
        get_current_context()["outlet_events"][asset].extra = extra
        for reason in report["reasons"]:
            print(f"decay on {report['day']}: {reason}")
        return extra

    return check.expand(item=days)


def plan_training(*, drift: Asset = DRIFT, decay: Asset = DECAY) -> Any:
    """The training window's last day, what started the run and the training's id (the DAG run's,
    tagged on its every MLflow run); fails (no retry) when a day of the window has no features,
    saying how to ingest it; a weekly run whose window has no features at all (nothing ingested
    yet) is skipped instead."""

    @task(task_id="plan_training", multiple_outputs=True)
    def plan(params: dict[str, Any] | None = None, triggering_asset_events: Any = None,
             data_interval_end: Any = None, dag_run: Any = None) -> dict[str, str]:
        from jobs.config import days_ending, load_config
        from jobs.lake.layout import Lake
        from jobs.selection.gate import reconcile
        from jobs.tracking import client

        params = params or {}
        found = training_plan(params.get("run_date"), _extras(triggering_asset_events, drift), data_interval_end,
                              _extras(triggering_asset_events, decay))
        cfg = load_config().train
        # a promotion cut short between the alias and its tags (a killed train_model) is set right
        # before this run's gate compares with that champion; reconcile logs what it found
        reconcile(client(), cfg.model_name)
        window = ((params.get("train_days") or cfg.train_days) + cfg.validation_days
                  + (params.get("holdout_days") or cfg.holdout_days))
        days = days_ending(dt.date.fromisoformat(found["run_date"]), window)
        print(f"started by {found['started_by']}; window {days[0]}..{days[-1]} ({window} days)")
        missing = missing_feature_days(Lake.at(), days)
        if missing == days and found["trigger"] == "schedule":
            raise AirflowSkipException(
                f"no day of the window {days[0]}..{days[-1]} has features: nothing to train on yet "
                f"(for the 2013 example data, trigger with a run_date); {ingest_hint(missing)}"
            )
        if missing:
            raise AirflowFailException(
                f"the training window {days[0]}..{days[-1]} lacks features for {len(missing)} day(s) "
                f"({missing[0]}..{missing[-1]}): {ingest_hint(missing)}"
            )
        # every MLflow run of this DAG run (baselines, sweep, candidates) carries it: the bar and the
        # sweep compare runs of this training only (jobs.selection.identity)
        found["training_id"] = f"{dag_run.dag_id}/{dag_run.run_id}" if dag_run else ""
        return found

    return plan()


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


def challenger_promotion(days: Any, *, asset: Asset = CHAMPION) -> Any:
    """After the monitor: with ``monitoring.promotion_evidence: live``, the challenger awaiting live
    evidence whose evidence beats the champion becomes champion (:func:`live_promotion_event`) and
    ``asset`` is updated (scoring re-scores that day with it); skipped otherwise, saying why."""

    @task(task_id="promote_challenger", outlets=[asset])
    def promote(days: list[dict[str, Any]]) -> dict[str, Any]:
        from jobs.config import load_config
        from jobs.lake.layout import Lake
        from jobs.tracking import client

        extra = live_promotion_event(days, load_config(), Lake.at(), client())
        get_current_context()["outlet_events"][asset].extra = extra
        print(f"{extra['model_name']} version {extra['model_version']} is the champion now: {extra['evidence']}")
        return extra

    return promote(days)


class ChampionApprovalOperator(HITLOperator):
    """Asks a person (Airflow's human-in-the-loop: the task waits in *awaiting input*, the UI's
    *Required actions* shows the request) whether the version that won the champion gate becomes
    champion, with the comparison in front of them; skipped when the gate needed nobody (the run
    does not require approval, or the version lost). ``summary_task``: the train task's id.
    Unanswered within ``response_timeout``, the answer is Reject: the champion stays."""

    APPROVE, REJECT = "Approve", "Reject"

    def __init__(self, *, summary_task: str, **kwargs: Any) -> None:
        kwargs.setdefault("response_timeout", dt.timedelta(days=7))
        super().__init__(subject="champion approval", options=[self.APPROVE, self.REJECT], defaults=[self.REJECT],
                         **kwargs)
        self.summary_task = summary_task

    def execute(self, context: Any) -> Any:
        from jobs.config import load_config
        from jobs.lake.layout import Lake
        from jobs.selection.gate import AWAITING_APPROVAL

        summary = context["ti"].xcom_pull(task_ids=self.summary_task)
        if summary["gate"]["gate_decision"] != AWAITING_APPROVAL:
            raise AirflowSkipException(f"no approval to ask for: version {summary['model_version']} is "
                                       f"{summary['gate']['gate_decision']} ({summary['gate'].get('gate_reason', '')})")
        self.subject, self.body = approval_request(summary, approval_evidence(Lake.at(), load_config(), summary))
        self.log.info("%s: waiting for a person's answer under Required actions", self.subject)
        return super().execute(context)


def _responder(answer: dict[str, Any]) -> str:
    user = answer.get("responded_by_user") or {}
    return str(user.get("name") or user.get("id") or "a person") if isinstance(user, dict) else str(user)


def publish_champion(run_date: Any, summary: Any, *, approval: str | None = None, asset: Asset = CHAMPION) -> Any:
    """After training (and the approval task ``approval``, when there is one): update ``asset`` when
    the new version became champion; skipped otherwise. ``summary``: what the train task returned
    (the job's training summary). A version awaiting approval is promoted or kept out here, by the
    approval task's answer (:func:`jobs.selection.gate.record_approval`)."""

    @task(task_id="publish_champion", outlets=[asset], trigger_rule="none_failed_min_one_success")
    def publish(run_date: str, summary: dict[str, Any]) -> dict[str, Any]:
        from jobs.config import load_config
        from jobs.monitoring.challengers import promotion_decision
        from jobs.selection.gate import AWAITING_APPROVAL, AWAITING_LIVE

        gate, mode = summary["gate"], load_config().monitoring.promotion_evidence
        outcome = gate["gate_decision"]
        if outcome == AWAITING_APPROVAL:
            answer = get_current_context()["ti"].xcom_pull(task_ids=approval) if approval else None
            if not answer:
                raise AirflowFailException(f"version {summary['model_version']} awaits approval, but no "
                                           "answer was recorded: run the approval task again")
            from jobs.selection.gate import record_approval
            from jobs.tracking import client

            approved, by = answer["chosen_options"] == [ChampionApprovalOperator.APPROVE], _responder(answer)
            outcome = record_approval(client(), summary["model_name"], summary["model_version"], approved, by,
                                      gate.get("gate_champion_version") or "", live_evidence=mode == "live")
            if not approved:
                raise AirflowSkipException(f"version {summary['model_version']} was rejected by {by}: "
                                           "the champion stays")
        decision = promotion_decision(mode, outcome, None)  # live evidence: score_pipeline's promote_challenger
        if not decision["promote"]:
            why = gate.get("gate_reason", "") if outcome != AWAITING_LIVE else (
                "it won on the holdout; it is scored in shadow beside the champion and becomes champion once it "
                "beats it on monitoring.live_days live days (score_pipeline's promote_challenger)")
            raise AirflowSkipException(f"version {summary['model_version']} was not promoted "
                                       f"({outcome}): {why}")
        extra = {"run_date": run_date, "model_name": summary["model_name"],
                 "model_version": summary["model_version"], "run_url": summary.get("run_url", "")}
        get_current_context()["outlet_events"][asset].extra = extra
        print(f"{summary['model_name']} version {summary['model_version']} is the champion now")
        return extra

    return publish(run_date=run_date, summary=summary)

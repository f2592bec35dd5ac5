"""The decisions the worker tasks make between Spark jobs: which days a scoring run scores, which
window a training run trains on and what started it, when a missing raw day stops being waited for."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from orchestration.decisions import ingest_hint, missing_feature_days, training_plan  # noqa: E402
from orchestration.ingest_tasks import raw_deadline  # noqa: E402
from orchestration.score_tasks import open_scoring_days, scoring_days  # noqa: E402


def test_a_person_s_run_date_wins_over_the_events():
    days = scoring_days("2013-01-09", [{"days": ["2013-01-08"]}], [])
    assert days == [{"day": "2013-01-09", "after_retraining": False}]


def test_events_that_arrived_together_are_all_scored_once_oldest_first():
    features = [{"days": ["2013-01-09"]}, {"days": ["2013-01-07", "2013-01-08"]}, {"days": ["2013-01-08"]}]
    assert [d["day"] for d in scoring_days(None, features, [])] == ["2013-01-07", "2013-01-08", "2013-01-09"]


def test_a_new_champion_rescoring_its_day_is_marked_so_its_drift_starts_no_second_retraining():
    days = scoring_days(None, [{"days": ["2013-01-11"]}], [{"run_date": "2013-01-10"}, {"run_date": "2013-01-11"}])
    # 01-10 only because of the champion; 01-11 has fresh features too, so its drift counts
    assert days == [{"day": "2013-01-10", "after_retraining": True}, {"day": "2013-01-11", "after_retraining": False}]


def test_no_run_date_and_no_events_means_nothing_to_score():
    assert scoring_days(None, [], []) == []


def test_a_closed_day_of_the_feed_is_not_scored_and_is_named():
    from jobs.config import FeedCalendar

    planned = scoring_days(None, [{"days": ["2013-01-04", "2013-01-05"]}], [{"run_date": "2013-01-06"}])
    days, closed = open_scoring_days(planned, FeedCalendar(days="weekdays"))  # 01-05 and 01-06: a weekend
    assert days == [{"day": "2013-01-04", "after_retraining": False}] and closed == ["2013-01-05", "2013-01-06"]
    assert open_scoring_days(planned, FeedCalendar()) == (planned, [])  # every day open: all scored


def test_the_training_window_ends_with_the_latest_drifted_day_and_says_why():
    drift = [{"run_date": "2013-01-09", "reasons": ["distance: PSI 0.9"]},
             {"run_date": "2013-01-10", "reasons": ["dest: unknown share +0.2"]}]
    plan = training_plan(None, drift, dt.datetime(2013, 1, 14, tzinfo=dt.UTC))
    assert plan["run_date"] == "2013-01-10" and plan["trigger"] == "drift"
    assert plan["started_by"] == "drift on 2013-01-09, 2013-01-10: dest: unknown share +0.2"


def test_a_scheduled_training_ends_with_the_last_whole_day_before_it_ran():
    plan = training_plan(None, [], dt.datetime(2013, 1, 14, tzinfo=dt.UTC))
    assert plan == {"run_date": "2013-01-13", "trigger": "schedule",
                    "started_by": "the weekly schedule (window up to 2013-01-13)"}


def test_a_person_s_training_run_date_wins():
    assert training_plan("2013-01-28", [{"run_date": "2013-01-09"}], None)["run_date"] == "2013-01-28"


def test_raw_data_is_waited_for_until_hours_after_the_day_ended(monkeypatch):
    from orchestration.ingest_tasks import RAW_WAIT_ENV, raw_wait_hours

    assert raw_deadline(dt.date(2013, 1, 8), 6) == dt.datetime(2013, 1, 9, 6, tzinfo=dt.UTC)
    monkeypatch.delenv(RAW_WAIT_ENV, raising=False)
    assert raw_wait_hours(6.0) == 6.0
    monkeypatch.setenv(RAW_WAIT_ENV, "0")  # a deployment that only backfills: skip a day without raw at once
    assert raw_wait_hours(6.0) == 0.0
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv(RAW_WAIT_ENV, bad)
        with pytest.raises(ValueError, match=f"{RAW_WAIT_ENV}=.* is not a number of hours"):
            raw_wait_hours(6.0)


def test_the_first_retry_waits_a_minute_unless_the_environment_where_the_dags_are_parsed_says(monkeypatch):
    """$PIPELINE_RETRY_DELAY_SECONDS sets the first retry's delay of every task (the deployed stack's
    fault tests wait seconds, not minutes); read when the DAGs are parsed."""
    import subprocess
    import sys
    from datetime import timedelta

    from orchestration.decisions import env_amount
    from orchestration.spark_jobs import DEFAULT_ARGS, RETRY_DELAY_ENV

    assert RETRY_DELAY_ENV not in os.environ and DEFAULT_ARGS["retry_delay"] == timedelta(minutes=1)
    code = "from orchestration.spark_jobs import DEFAULT_ARGS; print(DEFAULT_ARGS['retry_delay'].total_seconds())"
    parsed = subprocess.run([sys.executable, "-c", code], env={**os.environ, RETRY_DELAY_ENV: "5"},
                            capture_output=True, text=True, check=True)
    assert float(parsed.stdout.split()[-1]) == 5.0, parsed.stderr
    monkeypatch.setenv(RETRY_DELAY_ENV, "soon")
    with pytest.raises(ValueError, match=f"{RETRY_DELAY_ENV}='soon' is not a number of seconds >= 0"):
        env_amount(RETRY_DELAY_ENV, 60, "seconds")


def test_missing_feature_days_are_named_with_what_to_trigger(tmp_path):
    from jobs.lake.layout import Lake

    lake = Lake(str(tmp_path))
    days = [dt.date(2013, 1, d) for d in range(1, 6)]
    for day in days[:2]:
        Path(lake.partition(lake.features, day)).mkdir(parents=True)
    missing = missing_feature_days(lake, days)
    assert missing == days[2:]
    hint = ingest_hint(missing, "flights_ingest")
    assert '{"run_date": "2013-01-05", "days": 3}' in hint
    assert "backfill flights_ingest from 2013-01-03 to 2013-01-05" in hint



def test_the_approval_request_shows_the_comparison_with_the_champion():
    from orchestration.train_tasks import approval_request

    summary = {"model_name": "flights", "model_version": "7", "train_window": "2013-01-01..2013-01-21",
               "holdout_window": "2013-01-22..2013-01-28", "metrics": {"roc_auc": 0.6712, "log_loss": 0.4951},
               "run_url": "http://127.0.0.1:5000/#/experiments/1/runs/abc",
               "gate": {"gate_decision": "awaiting_approval", "gate_metric": "roc_auc",
                        "gate_challenger_score": "0.671200", "gate_champion_score": "0.650000",
                        "gate_champion_version": "5", "gate_reason": "roc_auc 0.6712 vs champion v5 0.6500"}}
    subject, body = approval_request(summary)
    assert subject == "Replace flights champion v5 with version 7?"
    assert "| holdout roc_auc | 0.671200 | 0.650000 |" in body and "| version | 7 | 5 |" in body
    assert "roc_auc 0.6712 vs champion v5 0.6500" in body and "http://127.0.0.1:5000/#/experiments/1/runs/abc" in body
    assert "2013-01-22..2013-01-28" in body and "log_loss 0.4951" in body
    first = {**summary, "gate": {**summary["gate"], "gate_champion_version": "", "gate_champion_score": ""}}
    subject, body = approval_request(first)
    assert subject == "Make flights version 7 the champion?" and "| version | 7 | (none) |" in body


def test_decay_retrains_on_the_window_ending_with_the_latest_decayed_day():
    decay = [{"run_date": "2013-02-07", "model_version": "3", "reasons": ["realized roc_auc 0.600 ..."]},
             {"run_date": "2013-02-06", "model_version": "3", "reasons": ["older"]}]
    drift = [{"run_date": "2013-02-08", "reasons": ["distance: PSI 0.9"]}]
    plan = training_plan(None, drift, dt.datetime(2013, 2, 11, tzinfo=dt.UTC), decay)
    assert plan == {"run_date": "2013-02-07", "trigger": "decay",
                    "started_by": "decay of version 3 on 2013-02-07: realized roc_auc 0.600 ..."}
    assert training_plan("2013-01-28", drift, None, decay)["trigger"] == "person"
    assert training_plan(None, drift, None, [])["trigger"] == "drift"


def test_events_about_a_replaced_champion_start_no_training(tmp_path):
    """A drift and a decay found while a retraining ran judged version 4; the queued run plans after
    version 5 replaced it: those events are dropped, and a run with nothing else is skipped saying
    which events and which champion; an event about version 5 (or one naming no version) still
    trains, on its own day."""
    import json

    from airflow.sdk.exceptions import AirflowSkipException

    from jobs.lake.layout import Lake
    from jobs.lake.storage import write_text
    from orchestration.decisions import drift_event, stale_events

    lake = Lake(str(tmp_path / "lake"))
    drifted = {"drifted": True, "reasons": ["distance: PSI 0.9"], "report": "reports/drift/x.json"}
    write_text(lake.report("scoring", dt.date(2013, 2, 14)),
               json.dumps({"run_date": "2013-02-14", "model_version": "4", "drift": drifted}))
    stale, why = drift_event(lake, "2013-02-14", after_retraining=False)
    assert why == "drifted" and stale["model_version"] == "4"
    decay = [{"run_date": "2013-02-13", "model_version": "4", "reasons": ["log_loss 0.90"]}]
    with pytest.raises(AirflowSkipException) as skipped:
        training_plan(None, [stale], dt.datetime(2013, 2, 18, tzinfo=dt.UTC), decay, champion="5")
    assert str(skipped.value) == (
        "nothing to retrain: the drift of 2013-02-14 was measured against version 4; the decay of 2013-02-13 was "
        "judged on version 4, and version 5 has replaced it as champion since (the days it serves are judged "
        "against it)")
    fresh = {"run_date": "2013-02-15", "model_version": "5", "reasons": ["dest: unknown share +0.2"]}
    plan = training_plan(None, [stale, fresh], None, decay, champion="5")
    assert plan == {"run_date": "2013-02-15", "trigger": "drift",
                    "started_by": "drift on 2013-02-15 against version 5: dest: unknown share +0.2"}
    assert stale_events([{"run_date": "2013-02-16"}], [], "5")[0] == [{"run_date": "2013-02-16"}]
    # a person's run and the same events without a champion to compare with are not judged stale
    assert training_plan("2013-02-20", [stale], None, decay, champion="5")["trigger"] == "person"
    assert training_plan(None, [stale], None, decay)["trigger"] == "decay"


def test_the_approval_request_shows_the_live_evidence_from_the_monitoring_zone(tmp_path, config):
    """A version scored in shadow beside the champion on three days: the request says the days, the
    pooled difference and its interval; a version never compared says it has none."""
    import json

    from jobs.lake.layout import Lake
    from jobs.lake.storage import write_text
    from orchestration.train_tasks import approval_evidence, approval_request

    lake = Lake(str(tmp_path / "lake"))
    for i, diff in enumerate([0.02, 0.03, 0.04]):
        day = dt.date(2013, 2, 1) + dt.timedelta(days=i)
        write_text(lake.monitoring_report(day), json.dumps({"day": day.isoformat(), "models": [
            {"model_name": "flights", "model_version": "5", "role": "champion", "status": "ok"},
            {"model_name": "flights", "model_version": "7", "role": "challenger", "status": "ok",
             "comparison": {"metric": "roc_auc", "champion_version": "5", "rows": 900,
                            "difference": {"value": diff, "low": diff - 0.015, "high": diff + 0.015}}}]}))
    summary = {"model_name": "flights", "model_version": "7", "metrics": {},
               "gate": {"gate_decision": "awaiting_approval", "gate_metric": "roc_auc",
                        "gate_challenger_score": "0.671200", "gate_champion_score": "0.650000",
                        "gate_champion_version": "5", "gate_reason": "roc_auc 0.6712 vs champion v5 0.6500"}}
    evidence = approval_evidence(lake, config, summary)
    assert evidence["days"] == ["2013-02-01", "2013-02-02", "2013-02-03"] and evidence["rows"] == 2700
    _, body = approval_request(summary, evidence)
    assert "| 3 (2013-02-01..2013-02-03) | 2700 | +0.0300 |" in body
    assert "no (on 7 days)" in body and "does not beat the champion yet (3 of 7 days)" in body
    assert approval_evidence(lake, config, {**summary, "model_version": "8"}) is None
    _, body = approval_request({**summary, "model_version": "8"}, None)
    assert "Live evidence: none yet" in body


def _at(second: int) -> dt.datetime:
    return dt.datetime(2026, 11, 26, 20, 56, second, tzinfo=dt.UTC)


def test_a_scoring_run_plans_the_features_events_no_run_planned_yet():
    from orchestration.score_tasks import unplanned_events

    def event(second: int, day: str) -> tuple[dt.datetime, dict]:
        return _at(second), {"days": [day]}

    # the first run: from its own first triggering event on (nothing before the deployment's first run)
    extras, mark = unplanned_events([event(1, "04-04"), event(3, "04-05")], None, [event(1, "04-04")])
    assert (extras, mark) == ([{"days": ["04-04"]}, {"days": ["04-05"]}], _at(3))
    # Airflow made the next run of the events up to 04-06's (04-05's was planned above) while
    # 04-07's came before the run started: it belongs to no run, so this one plans it too
    triggering = [event(3, "04-05"), event(5, "04-06")]
    extras, mark = unplanned_events([event(5, "04-06"), event(8, "04-07")], _at(3), triggering)
    assert (extras, mark) == ([{"days": ["04-06"]}, {"days": ["04-07"]}], _at(8))
    # two events of the same instant: both, in the order Airflow gave them
    assert unplanned_events([event(9, "04-08"), event(9, "04-09")], _at(8), [])[0] == [{"days": ["04-08"]},
                                                                                      {"days": ["04-09"]}]
    # a run whose events were all planned earlier plans nothing, and keeps the mark
    assert unplanned_events([], _at(8), [event(8, "04-07")]) == ([], _at(8))
    # a run started by a new champion alone, before any features event: nothing, no mark
    assert unplanned_events([], None, []) == ([], None)

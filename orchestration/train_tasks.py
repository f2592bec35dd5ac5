"""A pipeline's train DAG's tasks in the Airflow worker: plan the training window, ask a person to
approve a new champion when the run requires it, and publish the champion (the pipeline's
``champion_model`` Asset). The sweep's tasks are in :mod:`~orchestration.sweep_tasks`."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import get_current_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from jobs.config.pipelines import Pipeline
from orchestration.assets import asset_extras, pipeline_assets
from orchestration.decisions import ingest_hint, missing_feature_days, training_plan
from orchestration.pipelines import calendar_of, config_of, dag_ids, lake_of


def plan_training(pipeline: Pipeline) -> Any:
    """The training window's last day, what started the run and the training's id (the DAG run's,
    tagged on its every MLflow run); fails (no retry) when a day of the window has no features,
    saying how to ingest it; a weekly run whose window has no features at all (nothing ingested
    yet) is skipped instead, and so is a run whose drift and decay events all judged a champion
    that a newer version replaced while the run waited."""
    assets = pipeline_assets(pipeline.name)
    drift, decay = assets.drift, assets.decay

    @task(task_id="plan_training", multiple_outputs=True)
    def plan(params: dict[str, Any] | None = None, triggering_asset_events: Any = None,
             data_interval_end: Any = None, dag_run: Any = None) -> dict[str, str]:
        from jobs.config import WINDOW_OVERRIDES
        from jobs.selection.gate import current_champion, reconcile
        from jobs.tracking import client

        params = params or {}
        config = config_of(pipeline)
        cfg = config.train
        # a promotion cut short between the alias and its tags (a killed promote_candidate) is set right
        # before this run's gate compares with that champion; reconcile logs what it found
        registry = client()
        reconcile(registry, cfg.model_name)
        # events about a champion replaced while this run waited are stale (skipped when all are)
        champion = current_champion(registry, cfg.model_name)
        found = training_plan(params.get("run_date"), asset_extras(triggering_asset_events, drift), data_interval_end,
                              asset_extras(triggering_asset_events, decay), champion.version if champion else None)
        window = cfg.with_overrides(**{k: params[k] for k in WINDOW_OVERRIDES if params.get(k)}).window_days
        # the window's days are open days of the feed (feed_calendar): a closed day is no gap
        run_date = dt.date.fromisoformat(found["run_date"])
        days = calendar_of(pipeline, run_date).open_days_ending(run_date, window)
        span = (days[-1] - days[0]).days + 1
        print(f"started by {found['started_by']}; window {days[0]}..{days[-1]} ({window} days"
              + (f" with rows, {span - window} closed day(s) passed over)" if span > window else ")"))
        missing = missing_feature_days(lake_of(pipeline), days)
        hint = ingest_hint(missing, dag_ids(pipeline.name)["ingest"]) if missing else ""
        if missing == days and found["trigger"] == "schedule":
            raise AirflowSkipException(
                f"no day of the window {days[0]}..{days[-1]} has features: nothing to train on yet "
                f"(a feed whose days are in the past: trigger with a run_date); {hint}"
            )
        if missing:
            raise AirflowFailException(
                f"the training window {days[0]}..{days[-1]} lacks features for {len(missing)} day(s) "
                f"({missing[0]}..{missing[-1]}): {hint}"
            )
        # every MLflow run of this DAG run (baselines, sweep, candidates) carries it: the bar and the
        # sweep compare runs of this training only (jobs.selection.identity)
        found["training_id"] = f"{dag_run.dag_id}/{dag_run.run_id}" if dag_run else ""
        return found

    return plan()


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


class ChampionApprovalOperator(HITLOperator):
    """Asks a person (Airflow's human-in-the-loop: the task waits in *awaiting input*, the UI's
    *Required actions* shows the request) whether the version that won the champion gate becomes
    champion, with the comparison in front of them; skipped when the gate needed nobody (the run
    does not require approval, or the version lost). ``summary_task``: the promotion task's id.
    Unanswered within ``response_timeout``, the answer is Reject: the champion stays."""

    APPROVE, REJECT = "Approve", "Reject"

    def __init__(self, *, summary_task: str, pipeline: Pipeline, **kwargs: Any) -> None:
        kwargs.setdefault("response_timeout", dt.timedelta(days=7))
        super().__init__(subject="champion approval", options=[self.APPROVE, self.REJECT], defaults=[self.REJECT],
                         **kwargs)
        self.summary_task = summary_task
        self.pipeline = pipeline

    def execute(self, context: Any) -> Any:
        from jobs.selection.gate import AWAITING_APPROVAL

        summary = context["ti"].xcom_pull(task_ids=self.summary_task)
        if summary["gate"]["gate_decision"] != AWAITING_APPROVAL:
            raise AirflowSkipException(f"no approval to ask for: version {summary['model_version']} is "
                                       f"{summary['gate']['gate_decision']} ({summary['gate'].get('gate_reason', '')})")
        evidence = approval_evidence(lake_of(self.pipeline), config_of(self.pipeline), summary)
        self.subject, self.body = approval_request(summary, evidence)
        self.log.info("%s: waiting for a person's answer under Required actions", self.subject)
        return super().execute(context)


def _responder(answer: dict[str, Any]) -> str:
    user = answer.get("responded_by_user") or {}
    return str(user.get("name") or user.get("id") or "a person") if isinstance(user, dict) else str(user)


def publish_champion(pipeline: Pipeline, run_date: Any, summary: Any, *, approval: str | None = None) -> Any:
    """After training (and the approval task ``approval``, when there is one): update ``asset`` when
    the new version became champion; skipped otherwise. ``summary``: what the promotion task returned
    (the job's training summary). A version awaiting approval is promoted or kept out here, by the
    approval task's answer (:func:`jobs.selection.gate.record_approval`). ``asset``: the pipeline's
    ``champion_model``."""
    asset = pipeline_assets(pipeline.name).champion

    @task(task_id="publish_champion", outlets=[asset], trigger_rule="none_failed_min_one_success")
    def publish(run_date: str, summary: dict[str, Any]) -> dict[str, Any]:
        from jobs.monitoring.challengers import promotion_decision
        from jobs.selection.gate import AWAITING_APPROVAL, AWAITING_LIVE

        gate, mode = summary["gate"], config_of(pipeline).monitoring.promotion_evidence
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
        decision = promotion_decision(mode, outcome, None)  # live evidence: <pipeline>_score's promote_challenger
        if not decision["promote"]:
            why = gate.get("gate_reason", "") if outcome != AWAITING_LIVE else (
                "it won on the holdout; it is scored in shadow beside the champion and becomes champion once it "
                f"beats it on monitoring.live_days live days ({dag_ids(pipeline.name)['score']}'s promote_challenger)")
            raise AirflowSkipException(f"version {summary['model_version']} was not promoted "
                                       f"({outcome}): {why}")
        extra = {"run_date": run_date, "model_name": summary["model_name"],
                 "model_version": summary["model_version"], "run_url": summary.get("run_url", "")}
        get_current_context()["outlet_events"][asset].extra = extra
        print(f"{summary['model_name']} version {summary['model_version']} is the champion now")
        return extra

    return publish(run_date=run_date, summary=summary)

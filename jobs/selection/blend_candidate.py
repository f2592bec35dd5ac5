"""The sweep's blend: one more candidate, the mean of the probabilities of ``sweep.blend``'s members.

A member is a sweep family (its best finished candidate of the training on the validation days)
or a baseline's name (its finished run of the training). Logistic regression and XGBoost rank a
day's flights differently (one linear in the history rates, the other in the schedule's
interactions), and their mean ranked better than either in most served weeks of 2013 (the model
study, docs/bench/model-study/study.md). The blend is built where the
sweep's choice is promoted (the promotion job, ``jobs/promotion/job.py``): a child run of the sweep's parent
with the training's identity, its model a pyfunc holding copies of the members'
(:mod:`jobs.model.blend`), evaluated by the same report as every candidate; it goes forward in
the candidate's place when it beats it on the validation days (:func:`preferred`), and then meets
the bar and the gate like any candidate. A promotion of the same window again (a retried task,
another policy of the replay) finds the blend of the same member runs and does not build it twice.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.config import PipelineConfig

log = logging.getLogger("jobs.selection.blend_candidate")

BLEND = "blend"  # the model_family tag of a blend run
MEMBERS_TAG = "blend_members"  # the member runs' ids, comma-separated, in the order of sweep.blend


def member_runs(config: PipelineConfig, client: Any, candidate: Any, run_date: dt.date,
                window: str) -> dict[str, Any] | str:
    """Each member's run for the training of ``candidate`` (a finished sweep candidate), or why
    there is no blend, in words."""
    from jobs.config import FAMILIES
    from jobs.metrics import LOWER_IS_BETTER
    from jobs.selection.bar import FAMILY, window_runs
    from jobs.selection.identity import identity_of
    from jobs.selection.sweep import MODEL_URI_TAG, chosen_by, finished_children

    identity = identity_of(candidate.data.tags)
    parent_id = candidate.data.tags.get("mlflow.parentRunId")
    if identity is None or parent_id is None:
        return "the candidate is no sweep candidate with a training's identity tags"
    parent = client.get_run(parent_id)
    ranked_by = chosen_by(parent, config.train.promotion_metric)
    metric = f"validation_{ranked_by}"
    children = finished_children(client, parent)
    pick = min if ranked_by in LOWER_IS_BETTER else max  # as the sweep picks
    baselines = window_runs(client, candidate.info.experiment_id, run_date, window, "baseline", identity)
    found = {}
    for name in config.sweep.blend:
        if name in FAMILIES:
            runs = [c for c in children if c.data.tags.get(FAMILY, "mlp") == name and metric in c.data.metrics
                    and MODEL_URI_TAG in c.data.tags]
            if not runs:
                return f"no finished {name} candidate of the sweep with a {metric}"
            found[name] = pick(runs, key=lambda run: run.data.metrics[metric])
        elif name in baselines and MODEL_URI_TAG in baselines[name].data.tags:
            found[name] = baselines[name]
        else:
            configured = [spec.name for spec in config.baselines]
            return (f"{name!r} is neither a sweep family ({', '.join(FAMILIES)}) nor a baseline of this training "
                    f"(configured: {', '.join(configured) or 'none'})")
    return found


def blend_candidate(spark: SparkSession, config: PipelineConfig, candidate_run_id: str, run_date: dt.date,
                    dirs: dict[str, list[str]], window: str) -> str | None:
    """The blend run of the training of ``candidate_run_id`` (``dirs``: its ``validation`` and
    ``holdout`` days; ``window``: the holdout's), built and evaluated, or found built already; None,
    saying why in the log, when ``sweep.blend`` names a member the training lacks."""
    import mlflow

    from jobs.metrics import evaluate
    from jobs.model.blend import log_pyfunc
    from jobs.model.tabular import signature_example
    from jobs.selection.bar import FAMILY, read_rows
    from jobs.selection.identity import identity_of
    from jobs.selection.sweep import MODEL_URI_TAG, finish_candidate
    from jobs.tracking import client, code_version
    from jobs.training.lifecycle import OWNER_TAG, failed_on_error, owner_tag

    mlflow_client = client()
    candidate = mlflow_client.get_run(candidate_run_id)
    members = member_runs(config, mlflow_client, candidate, run_date, window)
    if isinstance(members, str):
        log.warning("no blend of %s: %s", ", ".join(config.sweep.blend), members)
        return None
    ids = ",".join(run.info.run_id for run in members.values())
    parent_id = candidate.data.tags["mlflow.parentRunId"]
    experiment_id = candidate.info.experiment_id
    built = mlflow_client.search_runs(
        [experiment_id], f"tags.mlflow.parentRunId = '{parent_id}' and tags.{MEMBERS_TAG} = '{ids}' "
                         "and attributes.status = 'FINISHED'")
    if built:
        log.info("blend of %s: run %s, built already", ids, built[0].info.run_id)
        return built[0].info.run_id
    name = f"{BLEND}({'+'.join(members)})"
    tags = {"mlflow.parentRunId": parent_id, "run_date": str(run_date), FAMILY: BLEND, MEMBERS_TAG: ids,
            **(identity_of(candidate.data.tags) or {}), OWNER_TAG: owner_tag()}
    run_id = mlflow_client.create_run(experiment_id, run_name=f"blend-{run_date}", tags=tags).info.run_id
    spec = config.features
    with failed_on_error(mlflow_client, run_id), mlflow.start_run(run_id=run_id):
        mlflow.log_params({"family": BLEND, "run_date": run_date, "config": config.source, "members": ",".join(members),
                           **{f"member_{member}": run.info.run_id for member, run in members.items()},
                           **code_version()})
        holdout = read_rows(spark, dirs["holdout"], spec.inputs, spec.label)
        example = signature_example(holdout.head(5), spec.inputs, spec.categorical)
        info = log_pyfunc({member: run.data.tags[MODEL_URI_TAG] for member, run in members.items()}, example)
        # the logged model, as the promotion and scoring load it
        metrics = evaluate(holdout[spec.label], mlflow.pyfunc.load_model(info.model_uri).predict(holdout[spec.inputs]))
        mlflow.log_metrics({f"holdout_{k}": v for k, v in metrics.items() if k != "rows"})
        mlflow.log_metric("holdout_rows", metrics["rows"])
        finish_candidate(spark, config, run_id, {"model_uri": info.model_uri, "metrics": metrics}, dirs["holdout"],
                         dirs["validation"], run_date, window, name, None, family=BLEND)
    return run_id


def preferred(config: PipelineConfig, client: Any, candidate_run_id: str, blend_run_id: str | None) -> str:
    """The run that goes forward: the blend when its validation metric (the one the sweep chose by:
    the promotion metric, or the log loss where the validation days hold one class) beats the sweep's
    candidate's, the candidate otherwise (or without a blend); both runs say why."""
    from jobs.selection.bar import better
    from jobs.selection.sweep import chosen_by

    if blend_run_id is None:
        return candidate_run_id
    candidate = client.get_run(candidate_run_id)  # a sweep's child: its blend was built (member_runs)
    metric = chosen_by(client.get_run(candidate.data.tags["mlflow.parentRunId"]), config.train.promotion_metric)
    key = f"validation_{metric}"
    mine = client.get_run(blend_run_id).data.metrics.get(key)
    theirs = candidate.data.metrics.get(key)
    if mine is None or theirs is None:
        reason = f"no {key} to compare (train.validation_days 0?): the sweep's candidate goes forward"
        chosen = candidate_run_id
    elif better(metric, mine, theirs):
        reason = f"{key} {mine:.4f} beats the sweep's candidate's {theirs:.4f}: the blend goes forward in its place"
        chosen = blend_run_id
    else:
        reason = f"{key} {mine:.4f} does not beat the sweep's candidate's {theirs:.4f}: the candidate goes forward"
        chosen = candidate_run_id
    client.set_tag(blend_run_id, "blend_decision", reason)
    log.info("blend: %s", reason)
    return chosen

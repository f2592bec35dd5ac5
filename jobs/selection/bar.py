"""A candidate's assessment before the champion gate: its evaluation report, the comparison table
(every candidate and baseline of the window, and the current champion, on the same holdout) and
the bar: a candidate (of any family: the MLP, XGBoost) that does not beat the best MLlib baseline
on the holdout's promotion metric stops here, and the run and version record why.

The baselines (:mod:`jobs.selection.baseline_training`) log runs tagged ``candidate_kind=baseline`` with the
``run_date`` and ``holdout_window`` they were evaluated on; the bar compares with the latest run
of each baseline of the same window *and the same training*: the candidate's ``training_id``,
``config_fingerprint`` and ``data_fingerprint`` (:mod:`jobs.selection.identity`), never a run of
another training, config or data version that the experiment also holds. The comparison table's
other candidates are found the same way. With no baselines configured the bar is open whatever
the experiment holds; with baselines configured but none of this training (not run, or a candidate
without identity tags), it is open too, and the run's ``bar_decision`` says which.

The better family serves: a baseline with ``promote: true`` that beats the candidate on the same
evidence goes to the gate in its place (:func:`in_its_place`: the promotion job
registers and gates that baseline's run, which then has to beat the other baselines).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from jobs.metrics import HOLDOUT, LOWER_IS_BETTER
from jobs.selection.gate import GateDecision

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

    from jobs.config import PipelineConfig

log = logging.getLogger("jobs.selection.bar")

KIND, WINDOW, NAME = "candidate_kind", "holdout_window", "candidate_name"  # run tags
FAMILY = "model_family"  # run tag: mlp or xgboost (jobs.config.FAMILIES); the bar does not read it
CANDIDATE = "candidate"  # candidate_kind of every trained candidate, whatever its family (baselines: "baseline")
COMPARISON = "comparison/comparison.md"
STOPPED = "stopped_at_bar"
TABLE_METRICS = tuple(m for m in HOLDOUT if m != "positive_rate")  # the window's, not a model's


@dataclasses.dataclass(frozen=True)
class BarDecision(GateDecision):
    """The gate's record for a candidate the bar stopped: not promoted, never compared with the champion."""

    @property
    def outcome(self) -> str:
        return STOPPED


def read_rows(spark: SparkSession, dirs: list[str], columns: list[str], label: str) -> pd.DataFrame:
    """The labelled rows of these feature partitions, ``columns`` only (each once) and each row's
    day (the partition column, :data:`~jobs.lake.layout.PARTITION`: the daily metrics group by
    it), as pandas."""
    from jobs.lake.layout import PARTITION

    if not dirs:
        import pandas as pd

        return pd.DataFrame(columns=list(dict.fromkeys([*columns, PARTITION])))
    wanted = list(dict.fromkeys([*columns, label, PARTITION]))
    root = dirs[0].rstrip("/").rsplit("/", 1)[0]  # the partitions' folder: their day from their names
    return (spark.read.option("basePath", root).parquet(*dirs).select(*wanted).where(f"`{label}` IS NOT NULL")
            .toPandas())


def better(metric: str, a: float, b: float) -> bool:
    """Whether score ``a`` beats ``b`` on ``metric`` (strictly)."""
    return a < b if metric in LOWER_IS_BETTER else a > b


def bar_decision(metric: str, candidate: float, baselines: dict[str, float]) -> BarDecision | None:
    """None when ``candidate`` beats every baseline's score (or there is none), else why not."""
    if not baselines:
        return None
    best = min(baselines, key=baselines.get) if metric in LOWER_IS_BETTER else max(baselines, key=baselines.get)
    if better(metric, candidate, baselines[best]):
        return None
    reason = (f"holdout {metric} {candidate:.4f} does not beat the best baseline {best} ({baselines[best]:.4f}): "
              "stopped before the champion gate, nothing promoted")
    return BarDecision(False, metric, candidate, None, None, reason)


def window_runs(client: Any, experiment_id: str, run_date: dt.date, window: str, kind: str,
                identity: dict[str, str] | None) -> dict[str, Any]:
    """The latest finished run of each candidate name of ``kind`` for this run date and holdout
    window, of the training ``identity`` (:mod:`jobs.selection.identity`); none without one."""
    from jobs.selection.identity import run_filter, same_identity

    if identity is None:  # a run logged without identity tags belongs to no known training
        return {}
    query = (f"tags.{KIND} = '{kind}' and tags.{WINDOW} = '{window}' and tags.run_date = '{run_date}' "
             f"and {run_filter(identity)} and attributes.status = 'FINISHED'")
    latest: dict[str, Any] = {}
    for found in client.search_runs([experiment_id], query, order_by=["attributes.start_time DESC"]):
        if same_identity(found, identity):
            latest.setdefault(found.data.tags.get(NAME, found.info.run_id), found)
    return latest


def bar_state(configured: bool, identity: dict[str, str] | None, scores: dict[str, float]) -> str:
    """The run's ``bar_decision`` when the candidate was not stopped: why the bar was open, or cleared."""
    if not configured:
        return "no baselines configured"
    if identity is None:
        return "no baselines: the candidate has no training identity tags"
    return "cleared" if scores else "no baselines of this training"


def comparison_rows(candidates: dict[str, dict[str, float]], baselines: dict[str, Any],
                    champion: tuple[str, dict[str, float]] | None) -> list[dict[str, Any]]:
    """The comparison table: one row per candidate, baseline and the champion, their holdout metrics."""
    rows = [{"role": "candidate", "name": name, **{m: metrics.get(m) for m in TABLE_METRICS}}
            for name, metrics in candidates.items()]
    for name, found in sorted(baselines.items()):
        rows.append({"role": "baseline", "name": name,
                     **{m: found.data.metrics.get(f"holdout_{m}") for m in TABLE_METRICS}})
    if champion is not None:
        rows.append({"role": "champion", "name": champion[0], **{m: champion[1].get(m) for m in TABLE_METRICS}})
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table in Markdown, numbers to three places."""
    head = ["role", "name", *(f"holdout {m}" for m in TABLE_METRICS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["role"], row["name"], *("" if row[m] is None else f"{row[m]:.3f}" for m in TABLE_METRICS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def log_comparison(client: Any, run_id: str, rows: list[dict[str, Any]]) -> str:
    """Log the table to ``run_id`` (Markdown and CSV) and return its Markdown."""
    import pandas as pd

    text = markdown(rows)
    client.log_text(run_id, text, COMPARISON)
    client.log_text(run_id, pd.DataFrame(rows).to_csv(index=False), COMPARISON.replace(".md", ".csv"))
    return text


def champion_metrics(client: Any, model_name: str, holdout: pd.DataFrame, inputs: list[str], label: str,
                     ) -> tuple[str, dict[str, float]] | None:
    """The current champion's holdout metrics on these rows, scored through its pyfunc (a champion
    that cannot load: the gate's data error, :func:`jobs.selection.gate.score_champion`)."""
    from jobs.selection.gate import current_champion, score_champion

    found = current_champion(client, model_name)
    if found is None:
        return None
    return f"{model_name} v{found.version}", score_champion(client, model_name, str(found.version), holdout,
                                                           inputs, label)


def in_its_place(config: PipelineConfig, client: Any, run_id: str, run_date: dt.date, window: str) -> Any | None:
    """The run of the baseline that goes to the gate in place of the candidate ``run_id``: of the
    baselines with ``promote: true`` of the candidate's training that beat its holdout promotion
    metric (logged by the sweep's candidate), the best; None when none does (or none may serve).
    The candidate's run records why (``bar_decision`` stopped, ``bar_reason`` naming the baseline)."""
    from jobs.selection.identity import identity_of

    promotable = {spec.name for spec in config.baselines if spec.promote}
    candidate = client.get_run(run_id)
    key = f"holdout_{config.train.promotion_metric}"
    score = candidate.data.metrics.get(key)
    if not promotable or score is None:
        return None
    found = window_runs(client, candidate.info.experiment_id, run_date, window, "baseline",
                        identity_of(candidate.data.tags))
    beating = [r for n, r in found.items() if n in promotable and key in r.data.metrics
               and better(config.train.promotion_metric, r.data.metrics[key], score)]
    if not beating:
        return None
    pick = min if config.train.promotion_metric in LOWER_IS_BETTER else max  # as bar_decision picks
    best = pick(beating, key=lambda run: run.data.metrics[key])
    name = best.data.tags.get(NAME, best.info.run_id)
    reason = (f"holdout {key.removeprefix('holdout_')} {score:.4f} does not beat the baseline {name} "
              f"({best.data.metrics[key]:.4f}), which may serve (promote: true): it goes to the gate in its place")
    client.set_tag(run_id, "bar_decision", STOPPED)
    client.set_tag(run_id, "bar_reason", reason)
    log.warning("the bar: %s", reason)
    return best


def assess(spark: SparkSession, config: PipelineConfig, run_id: str, model_uri: str, holdout_dirs: list[str],
           validation_dirs: list[str], run_date: dt.date, window: str, version: str | None = None,
           name: str = "pytorch") -> BarDecision | None:
    """Report on the candidate ``model_uri`` (any family) of run ``run_id``, log the comparison table
    and apply the bar; returns the decision that stops it before the gate, or None to go on. A
    baseline's run (one that serves in a candidate's place, :func:`in_its_place`) keeps its kind and
    is compared with the other baselines."""
    import mlflow.pyfunc

    from jobs.metrics import days_of, evaluate
    from jobs.selection.evaluation import evaluate_candidate
    from jobs.selection.identity import TRAINING_ID, identity_of
    from jobs.tracking import client

    cfg, spec, evaluation = config.train, config.features, config.evaluation
    mlflow_client = client()
    columns = [*spec.inputs, *evaluation.segments]
    holdout = read_rows(spark, holdout_dirs, columns, spec.label)
    validation = read_rows(spark, validation_dirs, columns, spec.label)
    model = mlflow.pyfunc.load_model(model_uri)
    probabilities = model.predict(holdout[spec.inputs])
    validation_probabilities = model.predict(validation[spec.inputs]) if len(validation) else None
    tags = mlflow_client.get_run(run_id).data.tags
    own = tags.get(NAME, name)
    kind = "baseline" if tags.get(KIND) == "baseline" else CANDIDATE
    for key, value in {KIND: kind, NAME: own, WINDOW: window, "run_date": str(run_date)}.items():
        mlflow_client.set_tag(run_id, key, value)
    evaluate_candidate(run_id, holdout, probabilities, spec.label, evaluation, validation, validation_probabilities)

    metric = cfg.promotion_metric
    candidate = evaluate(holdout[spec.label], probabilities, days_of(holdout))
    experiment_id = mlflow_client.get_run(run_id).info.experiment_id
    identity = identity_of(tags)
    # No baselines configured: nothing to compare with, whatever runs the experiment holds.
    baselines = window_runs(mlflow_client, experiment_id, run_date, window, "baseline",
                            identity) if config.baselines else {}
    if kind == "baseline":  # a baseline serving in a candidate's place: the bar is the others
        baselines.pop(own, None)
    log.info("the bar for run %s: %s", run_id, "no baselines configured" if not config.baselines else
             f"{len(baselines)} baseline(s) of training {identity[TRAINING_ID]}" if identity else
             "the run has no training identity tags: compared with no baseline")
    champion = champion_metrics(mlflow_client, cfg.model_name, holdout, spec.inputs, spec.label)
    siblings = {n: {m.removeprefix("holdout_"): v for m, v in r.data.metrics.items()}
                for n, r in window_runs(mlflow_client, experiment_id, run_date, window, CANDIDATE, identity).items()}
    candidates = {**siblings, own: candidate}
    table = log_comparison(mlflow_client, run_id, comparison_rows(candidates, baselines, champion))
    log.info("holdout %s, every candidate, baseline and the champion:\n%s", window, table)
    key = f"holdout_{metric}"
    scores = {n: r.data.metrics[key] for n, r in baselines.items() if key in r.data.metrics}
    stopped = bar_decision(metric, candidate[metric], scores)
    if stopped is None:
        mlflow_client.set_tag(run_id, "bar_decision", bar_state(bool(config.baselines), identity, scores))
        return None
    mlflow_client.set_tag(run_id, "bar_decision", STOPPED)
    mlflow_client.set_tag(run_id, "bar_reason", stopped.reason)
    if version is not None:
        for key, value in stopped.tags().items():
            mlflow_client.set_model_version_tag(cfg.model_name, version, key, value)
    log.warning("the bar: %s", stopped.reason)
    return stopped

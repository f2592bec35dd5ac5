"""
### Training: weekly, on drift or on decay, on the feature partitions of a window

Runs weekly and whenever `<pipeline>_score` updates the `scoring_drift` Asset (a day's inputs moved)
or the `model_decay` Asset (the champion's realized quality on the outcomes fell below its
holdout). `plan_training` says what started the run and picks the window's last day *D*: the
`run_date` param when given, else the latest decayed day, else the latest drifted day, else the
last day before the weekly run; the MLflow run is tagged `trigger` (person, decay, drift or
schedule) and `started_by` (in words), and the training summary says both. The window is the
`train_days + holdout_days` days ending with *D*; every day of it must have features (built by
`<pipeline>_ingest`: this DAG writes none), or the run fails at once saying what to ingest. With
`max_train_days` the training days reach further back, over every earlier day with features up to
that many (an expanding window). A day whose features are stale (an earlier day they read was
validated again since) is refused, saying which ingest rebuilds it. Runs go one at a time: a drift
or decay found while a retraining runs queues the next run, and when that run plans, an event about
a version the retraining has since replaced is stale and dropped (a run with nothing else is
skipped, saying which events and which champion): the new champion's days are judged against it.

`train_baselines` fits the Spark MLlib baselines (logistic regression, gradient-boosted trees) on
the same days, each its own MLflow run. Every MLflow run of a DAG run carries its `training_id`
(with fingerprints of the config and the window's data): the bar, the comparison table and the
sweep's choice compare runs of the same training only. Beside it, the sweep: `plan_sweep` builds the candidate
configs from the `sweep_*` params (the MLP's learning rates, widths, depths, epochs; `sweep_size`
of them) and one per XGBoost param set of `sweep.xgboost` (the families of `sweep.families`)
under a parent MLflow run, and `train_candidate` is mapped over them: one TorchDistributor
training each MLP, one SparkXGBClassifier fit each XGBoost candidate, fitted on the first
`train_days`, with an evaluation report on the validation and holdout days. `select_candidate`
picks the best of every family on the validation days; `promote_candidate` (the promotion job)
registers it, and sends it to the champion gate only if it beats the best baseline on the
holdout (otherwise the run and version record why); it becomes `champion` only if it beats the
current champion on the same holdout by `promotion_margin` in `promotion_metric` (the task's
*MLflow run* button opens its run).
With `require_approval` on, a version that wins the gate does not become champion by itself:
`approve_champion` waits (state *awaiting input*) for a person to Approve or Reject it under the
UI's **Required actions**, showing the comparison with the current champion; unanswered for 7
days counts as Reject. Without it, or when the version lost, `approve_champion` is skipped.
`publish_champion` then moves the alias when a person approved, and updates the `champion_model`
Asset when there is a new champion; scoring re-scores *D* with it.
With `monitoring.promotion_evidence: live` a winner (approved, when approval is required) does not
become champion here: it is tagged `awaiting_live_evidence`, scored in shadow beside the champion,
and `<pipeline>_score`'s `promote_challenger` promotes it once it beats the champion on
`monitoring.live_days` days of realized outcomes; the approval request shows that live evidence
when the version has some.

**Trigger** from the UI with `{"run_date": "2013-01-28"}`; every other param left empty keeps
the config's setting of its name (`train.*`, docs/configuration.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk import DAG, AssetOrTimeSchedule, CronDataIntervalTimetable, Param

from jobs.config import RUN_OVERRIDES, WINDOW_OVERRIDES, override_json, param_schema
from orchestration.assets import pipeline_assets
from orchestration.dags.common import dag_settings, run_date_param
from orchestration.decisions import TRAINING_SCHEDULE
from orchestration.spark_jobs import spark_job, spark_job_mapped
from orchestration.sweep_tasks import plan_sweep, select_candidate
from orchestration.train_tasks import ChampionApprovalOperator, plan_training, publish_champion
from orchestration.training_sequence import baselines_args, promotion_args

if TYPE_CHECKING:
    from jobs.config.pipelines import Pipeline

OVERRIDES_JSON = "{{ override_json(params) }}"  # the params set, as the jobs' --overrides take them
WINDOW_JSON = f"{{{{ override_json(params, {list(WINDOW_OVERRIDES)!r}) }}}}"


def train_params() -> dict[str, Param]:
    """Knobs a person tunes per run (jobs.config.RUN_OVERRIDES): empty keeps train.<name> of the config."""
    return {name: Param(None, **param_schema(name)) for name in RUN_OVERRIDES}


def sweep_params() -> dict[str, Param]:
    """The sweep's knobs: each list empty keeps sweep.<name> of the config."""
    return {
        "sweep_size": Param(None, type=["null", "integer"], minimum=1, maximum=32,
                            description="MLP candidates the sweep trains (default: sweep.size, 1: an ensemble), "
                                        "beside one per sweep.xgboost param set"),
        "sweep_learning_rates": Param(None, type=["null", "array"], items={"type": "number", "exclusiveMinimum": 0},
                                      description="learning rates to try"),
        "sweep_widths": Param(None, type=["null", "array"], items={"type": "integer", "minimum": 1},
                              description="hidden layer widths to try"),
        "sweep_depths": Param(None, type=["null", "array"], items={"type": "integer", "minimum": 1},
                              description="numbers of hidden layers to try"),
        "sweep_epochs": Param(None, type=["null", "array"], items={"type": "integer", "minimum": 1},
                              description="epochs to try"),
    }


def train_dag(pipeline: Pipeline) -> DAG:
    """The pipeline's train DAG (this module's docstring is its doc)."""
    assets = pipeline_assets(pipeline.name)
    with DAG(
        # a retrain covers its whole window: old weeks need no run of their own (no catch-up)
        **dag_settings(pipeline, "train", __doc__ or "", "training"),
        description="Train and register the model weekly or on drift; promote it when it beats the champion",
        schedule=AssetOrTimeSchedule(timetable=CronDataIntervalTimetable(TRAINING_SCHEDULE, timezone="UTC"),
                                     assets=assets.drift | assets.decay),
        params={
            "run_date": run_date_param("last day of the window (empty: the drifted day, or the day before the run)"),
            **train_params(),
            **sweep_params(),
        },
        user_defined_macros={"override_json": override_json},  # the one renderer of a run's overrides
    ) as dag:
        plan = plan_training(pipeline)
        baselines = spark_job("baselines", pipeline, task_id="train_baselines", run_date=plan["run_date"],
                              args=baselines_args(plan["started_by"], plan["training_id"], WINDOW_JSON))
        candidates = plan_sweep(pipeline, plan["run_date"], plan["started_by"], plan["training_id"])
        sweep = spark_job_mapped("train", pipeline, candidates, task_id="train_candidate")
        best = select_candidate(pipeline, candidates)
        promote = spark_job(
            "promote", pipeline, task_id="promote_candidate", run_date=plan["run_date"],
            args=promotion_args(best, plan["started_by"], plan["trigger"], OVERRIDES_JSON),
        )
        sweep >> best
        baselines >> promote  # the bar: the candidate must beat the baselines of the same window
        approve = ChampionApprovalOperator(task_id="approve_champion", summary_task=promote.task_id,
                                           pipeline=pipeline)
        promote >> approve >> publish_champion(pipeline, plan["run_date"], promote.output,
                                               approval=approve.task_id)
    return dag

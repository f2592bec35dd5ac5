"""
### Training: weekly or on drift, on the feature partitions of a window

Runs weekly and whenever `score_pipeline` updates the `scoring_drift` Asset. `plan_training`
says what started the run and picks the window's last day *D*: the `run_date` param when given,
else the latest drifted day, else the last day before the weekly run. The window is the
`train_days + holdout_days` days ending with *D*; every day of it must have features (built by
`ingest_pipeline`: this DAG writes none), or the run fails at once saying what to ingest.

`train_model` trains with TorchDistributor on the first `train_days` and evaluates on the last
`holdout_days`, logs to MLflow (the run is tagged with what started it; the task's *MLflow run*
button opens it) and registers a new version of the model, which becomes `champion` only if it
beats the current champion on the same holdout by `promotion_margin` in `promotion_metric`.
With `require_approval` on, a version that wins the gate does not become champion by itself:
`approve_champion` waits (state *awaiting input*) for a person to Approve or Reject it under the
UI's **Required actions**, showing the comparison with the current champion; unanswered for 7
days counts as Reject. Without it, or when the version lost, `approve_champion` is skipped.
`publish_champion` then moves the alias when a person approved, and updates the `champion_model`
Asset when there is a new champion; scoring re-scores *D* with it.

**Trigger** from the UI with `{"run_date": "2013-01-28"}`; every other param left empty keeps
the setting of `jobs/pipeline.yaml` (`train.*`).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, AssetOrTimeSchedule, CronDataIntervalTimetable, Param
from pipeline_tasks import DRIFT, ChampionApprovalOperator, plan_training, publish_champion
from spark_jobs import DEFAULT_ARGS, spark_job

from jobs.champion import PROMOTION_METRICS
from jobs.config import PRECISIONS

# Knobs a person tunes per run: empty keeps train.<name> of the config.
TRAIN_PARAMS = {
    "train_days": Param(None, type=["null", "integer"], minimum=1, description="days the model is fitted on"),
    "holdout_days": Param(None, type=["null", "integer"], minimum=1,
                          description="days after them it is evaluated on (and compared with the champion)"),
    "epochs": Param(None, type=["null", "integer"], minimum=1, maximum=1000, description="passes over the data"),
    "learning_rate": Param(None, type=["null", "number"], exclusiveMinimum=0, maximum=1,
                           description="Adam's step size"),
    "num_processes": Param(None, type=["null", "integer"], minimum=1, maximum=64,
                           description="TorchDistributor ranks (on GPUs in local mode: one per GPU by default)"),
    "use_gpu": Param(None, type=["null", "boolean"], description="train on GPUs (NCCL), one rank per GPU"),
    "precision": Param(None, type=["null", "string"], enum=[None, *PRECISIONS],
                       description="arithmetic of the training steps (auto = bf16 on a GPU that has it)"),
    "promotion_metric": Param(None, type=["null", "string"], enum=[None, *PROMOTION_METRICS],
                              description="holdout metric of the champion gate (log_loss, brier, ece: lower wins)"),
    "promotion_margin": Param(None, type=["null", "number"], minimum=0,
                              description="how much better than the champion a version must be to replace it"),
    "require_approval": Param(None, type=["null", "boolean"],
                              description="a version that wins the gate waits for a person's Approve before it "
                                          "becomes champion (Required actions in the UI)"),
}


def _param_args(names: list[str]) -> list[str]:
    """``--name {{ params.name }}`` per param, empty when the param is (the job keeps its config)."""
    args: list[str] = []
    for name in names:
        args += [f"--{name.replace('_', '-')}", f"{{{{ '' if params.{name} is none else params.{name} }}}}"]
    return args


with DAG(
    dag_id="train_pipeline",
    description="Train and register the model weekly or on drift; promote it when it beats the champion",
    doc_md=__doc__,
    schedule=AssetOrTimeSchedule(timetable=CronDataIntervalTimetable("@weekly", timezone="UTC"), assets=DRIFT),
    start_date=pendulum.datetime(2013, 1, 1, tz="UTC"),
    catchup=False,  # a retrain covers its whole window; old weeks need no run of their own
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params={
        "run_date": Param(None, type=["null", "string"], format="date",
                          description="last day of the window (empty: the drifted day, or the day before the run)"),
        **TRAIN_PARAMS,
    },
    tags=["mlops", "training"],
):
    plan = plan_training()
    train_model = spark_job(
        "train", task_id="train_model", run_date=plan["run_date"],
        args=[*_param_args(list(TRAIN_PARAMS)), "--started-by", plan["started_by"]],
    )
    approve = ChampionApprovalOperator(task_id="approve_champion", summary_task=train_model.task_id)
    train_model >> approve >> publish_champion(plan["run_date"], train_model.output, approval=approve.task_id)

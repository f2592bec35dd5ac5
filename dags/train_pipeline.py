"""
### Training pipeline: validate → features → train

For a run date *D*, validates the raw flights of the training window (the
`train_days + holdout_days` days ending with *D*, set in `jobs/pipeline.yaml`), rebuilds their
feature partitions, and trains the model with TorchDistributor on the first `train_days`,
evaluating on the last `holdout_days`. The model is logged to MLflow and registered as a new
version of `flight_delay`, which becomes the `champion` only if it beats the current champion on
the same holdout (`promotion_metric`, `promotion_margin`); the `train_model` log links to the
MLflow run and says why the version was or was not promoted.

*D* is the `run_date` param when given (trigger with `{"run_date": "2013-01-28"}`), otherwise the
run's logical date. The example data covers 2013 only. `precision` (`auto`, `bf16`, `fp16`,
`fp32`) overrides `train.precision` for the run.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param
from spark_jobs import DEFAULT_ARGS, spark_job

with DAG(
    dag_id="train_pipeline",
    description="Validate raw data, build features and train + register the model",
    doc_md=__doc__,
    schedule="@weekly",
    start_date=pendulum.datetime(2013, 1, 1, tz="UTC"),
    catchup=False,  # a retrain covers its whole window; old weeks need no run of their own
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params={
        "run_date": Param(None, type=["null", "string"], format="date", description="last day of the window"),
        "precision": Param(
            None, type=["null", "string"], enum=[None, "auto", "bf16", "fp16", "fp32"],
            description="arithmetic of the training steps (empty: train.precision; auto = bf16 on a GPU that has it)",
        ),
    },
    tags=["mlops", "training"],
):
    validate_raw = spark_job("validate", task_id="validate_raw", args=["--days", "train", "--run-id", "{{ run_id }}"])
    build_features = spark_job("features", task_id="build_features", args=["--days", "train"])
    train_model = spark_job("train", task_id="train_model", args=["--precision", "{{ params.precision or '' }}"])

    validate_raw >> build_features >> train_model

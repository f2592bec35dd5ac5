"""
### Nightly scoring pipeline: validate → features → score

For a run date *D* (the logical date of the nightly run, or the `run_date` param), validates the
day's raw flights, builds its feature partition and scores it with the `champion` version of
`flight_delay`, writing `predictions/date=D/` in the lake, and measures the day's drift against the
champion's training window (`reports/drift/date=D/`). When the day drifted, `check_drift` updates
the `scoring_drift` Asset (a training DAG can schedule on it); otherwise it is skipped. Every
task replaces only day *D*'s outputs, so re-running or backfilling a day is safe.

The example data covers 2013 only: trigger with `{"run_date": "2013-01-29"}` or backfill a 2013
range.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param
from spark_jobs import DEFAULT_ARGS, DRIFT, drift_check, spark_job

with DAG(
    dag_id="score_pipeline",
    description="Validate the day's raw data, build its features and score them",
    doc_md=__doc__,
    schedule="@daily",
    start_date=pendulum.datetime(2013, 1, 1, tz="UTC"),
    catchup=False,  # history is scored by an explicit backfill, not on first unpause
    max_active_runs=4,
    default_args=DEFAULT_ARGS,
    params={"run_date": Param(None, type=["null", "string"], format="date", description="day to score")},
    tags=["mlops", "scoring"],
):
    validate_raw = spark_job("validate", task_id="validate_raw", args=["--run-id", "{{ run_id }}"])
    build_features = spark_job("features", task_id="build_features")
    score_batch = spark_job("score", task_id="score_batch")
    check_drift = drift_check(task_id="check_drift", asset=DRIFT)

    validate_raw >> build_features >> score_batch >> check_drift

"""
### Daily ingest: wait for the raw day → validate → build features → publish

The only writer of the lake's `validated/` and `features/` partitions. For a day *D* (the day the
daily run covers, or the `run_date` param), waits for *D*'s raw feed partition, validates the
`days` days ending with *D* (bad rows to quarantine with a reason, a hard failure stops the run
with a report), builds their feature partitions and updates the `features` Asset with the days it
built: `<pipeline>_score` scores them, `<pipeline>_train` reads them.

**When the raw day does not come**, the run is skipped (not failed) 6 hours after the day ended:
unpausing this DAG for a feed whose days are in the past starts one run for yesterday, which skips at once.
**Data errors** (a missing raw partition in the window, a failed validation) fail the task at once
with the reason and no retry; other faults are retried twice with backoff.

**Trigger** from the UI with `{"run_date": "2013-01-29"}` (one day) or
`{"run_date": "2013-01-29", "days": 29}` (a training window at once, in one Spark job per stage).
**Backfill** a range (Airflow UI: *Backfill*, or `airflow backfill create --dag-id <pipeline>_ingest
--from-date 2013-02-01 --to-date 2013-02-07`): one run per day, one at a time (`max_active_runs=1`,
so no two runs ever write the same partition), each scored as it lands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk import DAG, CronDataIntervalTimetable, Param

from orchestration.dags.common import dag_settings, run_date_param
from orchestration.ingest_tasks import publish_features, wait_for_raw
from orchestration.spark_jobs import spark_job

if TYPE_CHECKING:
    from jobs.config.pipelines import Pipeline


def ingest_dag(pipeline: Pipeline) -> DAG:
    """The pipeline's ingest DAG (this module's docstring is its doc)."""
    with DAG(
        **dag_settings(pipeline, "ingest", __doc__ or "", "ingest"),
        description="Validate a day's raw data and build its features (the only writer of validated/ and features/)",
        # A run for day D starts when D has ended (data-interval semantics): ds is D.
        schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
        params={
            "run_date": run_date_param("the last day to ingest (empty: the day this run covers)"),
            "days": Param(1, type="integer", minimum=1, maximum=366,
                          description="how many days ending with run_date to ingest in this run"),
        },
    ) as dag:
        days_args = ["--days", "{{ params.days }}"]
        (
            wait_for_raw(pipeline)
            >> spark_job("validate", pipeline, task_id="validate_raw", args=[*days_args, "--run-id", "{{ run_id }}"])
            >> spark_job("features", pipeline, task_id="build_features", args=days_args)
            >> publish_features(pipeline)
        )
    return dag

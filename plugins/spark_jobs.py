"""The one way DAGs submit the pipeline's Spark jobs: :func:`spark_job`, plus shared ``DEFAULT_ARGS``.

Infrastructure comes from the Airflow environment: the Spark master from the ``spark_default``
connection (e.g. ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}'``),
the lake and MLflow locations from ``LAKE_ROOT`` and ``MLFLOW_TRACKING_URI``, which spark-submit
inherits. ``PIPELINE_PY_FILES`` (comma-separated) ships the ``jobs`` package to executors that do
not have it installed.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.plugins_manager import AirflowPlugin
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, BaseOperatorLink, get_current_context, task
from airflow.sdk.exceptions import AirflowSkipException

JOBS_DIR = Path(__file__).resolve().parents[1] / "jobs"

DEFAULT_ARGS: dict[str, Any] = {
    "owner": "mlops",
    "retries": 1,
    "retry_delay": timedelta(minutes=2),
}

# The day a run is for: the ``run_date`` param when a person gives one, else the logical date.
RUN_DATE = "{{ params.run_date or ds }}"

# Submit-time settings only; the session settings every job needs live in jobs/spark.py.
SPARK_CONF = {
    "spark.ui.showConsoleProgress": "false",
}


class MLflowRunLink(BaseOperatorLink):
    """The "MLflow run" button of a training task: the run the task logged to."""

    name = "MLflow run"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        # Called by the worker when the task ends; Airflow stores the URL for the UI.
        return getattr(operator, "mlflow_run_url", "") or ""


class TrainModelOperator(SparkSubmitOperator):
    """Submit the train job, then publish what it registered.

    Reads the job's ``reports/training/date=<run date>/summary.json`` (model version, MLflow run,
    metrics, champion gate decision), returns it as the task's XCom and links the task to the run.
    """

    operator_extra_links = (MLflowRunLink(),)

    def execute(self, context: Any) -> dict[str, Any]:
        super().execute(context)
        from jobs.lake import Lake
        from jobs.summary import read_report

        run_date = self.application_args[self.application_args.index("--run-date") + 1]
        summary = read_report(Lake.at(), "training", run_date)
        self.mlflow_run_url = summary.get("run_url", "")
        self.log.info(
            "registered %s version %s (champion gate: %s); MLflow run: %s", summary["model_name"],
            summary["model_version"], summary["gate"]["gate_decision"], self.mlflow_run_url or summary["run_id"],
        )
        return summary


class PipelinePlugin(AirflowPlugin):
    """Registers the operator links so the API server can show them."""

    name = "lakeflow_mlops"
    operator_extra_links = [MLflowRunLink()]


_OPERATORS: dict[str, type[SparkSubmitOperator]] = {"train": TrainModelOperator}


def spark_job(job: str, *, task_id: str, args: list[str] | None = None, **kwargs: Any) -> SparkSubmitOperator:
    """A SparkSubmitOperator for ``jobs/<job>.py`` with the run date passed explicitly."""
    application = JOBS_DIR / f"{job}.py"
    if not application.is_file():
        raise FileNotFoundError(f"no Spark job {application}")
    operator = _OPERATORS.get(job, SparkSubmitOperator)
    return operator(
        task_id=task_id,
        application=str(application),
        name=f"{job}-{{{{ dag.dag_id }}}}-{RUN_DATE}",
        conn_id="spark_default",
        application_args=["--run-date", RUN_DATE, *(args or [])],
        conf=dict(SPARK_CONF),
        py_files=os.environ.get("PIPELINE_PY_FILES") or None,
        **kwargs,
    )


# Updated by a scoring run whose day drifted from the champion's training window; a training DAG
# can schedule on it (``schedule=[DRIFT]``). The event's extra says which day and why.
DRIFT = Asset(name="scoring_drift", uri="lakeflow://reports/drift")


def drift_check(*, task_id: str, asset: Asset) -> Any:
    """A task after scoring: emits an event on ``asset`` when the score job found the day drifted;
    skipped (no event) when it did not, or when the model has no drift baseline."""

    @task(task_id=task_id, outlets=[asset])
    def check(run_date: str) -> dict[str, Any]:
        from jobs.lake import Lake
        from jobs.summary import read_report

        drift = read_report(Lake.at(), "scoring", run_date).get("drift")
        if drift is None:
            raise AirflowSkipException(f"drift was not measured for {run_date}: the model has no drift baseline")
        if not drift["drifted"]:
            raise AirflowSkipException(f"no drift on {run_date} (report: {drift['report']})")
        extra = {"run_date": run_date, "reasons": drift["reasons"], "report": drift["report"]}
        get_current_context()["outlet_events"][asset].extra = extra
        for reason in drift["reasons"]:
            print(f"drift on {run_date}: {reason}")
        return extra

    return check(run_date=RUN_DATE)

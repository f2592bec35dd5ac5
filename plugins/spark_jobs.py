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

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

JOBS_DIR = Path(__file__).resolve().parents[1] / "jobs"

DEFAULT_ARGS: dict[str, Any] = {
    "owner": "mlops",
    "retries": 1,
    "retry_delay": timedelta(minutes=2),
}

# The day a run is for: the ``run_date`` param when a person gives one, else the logical date.
RUN_DATE = "{{ params.run_date or ds }}"

SPARK_CONF = {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
}


def spark_job(job: str, *, task_id: str, args: list[str] | None = None, **kwargs: Any) -> SparkSubmitOperator:
    """A SparkSubmitOperator for ``jobs/<job>.py`` with the run date passed explicitly."""
    application = JOBS_DIR / f"{job}.py"
    if not application.is_file():
        raise FileNotFoundError(f"no Spark job {application}")
    return SparkSubmitOperator(
        task_id=task_id,
        application=str(application),
        name=f"{job}-{{{{ dag.dag_id }}}}-{RUN_DATE}",
        conn_id="spark_default",
        application_args=["--run-date", RUN_DATE, *(args or [])],
        conf=dict(SPARK_CONF),
        py_files=os.environ.get("PIPELINE_PY_FILES") or None,
        **kwargs,
    )

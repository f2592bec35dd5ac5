"""The project's Airflow plugin: what the API server must load to show the pipeline's own UI parts.

Airflow puts this folder on its path and loads the :class:`AirflowPlugin` subclasses here; the
code the DAGs import lives in the installed ``orchestration`` package.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from orchestration.spark_jobs import MLflowRunLink


class PipelinePlugin(AirflowPlugin):
    """Registers the training task's "MLflow run" link so the API server can show it."""

    name = "lakeflow_mlops"
    operator_extra_links = [MLflowRunLink()]

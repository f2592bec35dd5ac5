"""The project's Airflow plugin: what the API server must load to show the pipeline's own UI parts.

Airflow puts this folder on its path and loads the :class:`AirflowPlugin` subclasses here; the
code the DAGs import lives in the installed ``orchestration`` package.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from orchestration.health.app import URL_PREFIX, LazyApp, external_view
from orchestration.spark_jobs import MLflowRunLink


class PipelinePlugin(AirflowPlugin):
    """Registers the training task's "MLflow run" link and the Model health page (a FastAPI app
    under ``/model-health``, behind Airflow's authentication, and its entry in the UI's navigation)."""

    name = "lakeflow_mlops"
    operator_extra_links = [MLflowRunLink()]
    fastapi_apps = [{"app": LazyApp(), "url_prefix": URL_PREFIX, "name": "Model health"}]
    external_views = [external_view()]

"""Every pipeline's Airflow DAGs (:mod:`orchestration.dags`): its ingest, score and train DAG, one
set per folder of the pipelines this deployment serves (``$PIPELINES_DIR``, else
``$PIPELINE_CONFIG``, else the bundled ``pipelines/``). Airflow's safe mode parses a file that names
both "airflow" and "dag": this docstring does."""

from orchestration.dags import build_all

globals().update(build_all())

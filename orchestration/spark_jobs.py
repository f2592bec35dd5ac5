"""The one way DAGs submit the pipeline's Spark jobs: :func:`spark_job` and :func:`spark_job_per_day`,
plus the shared ``DEFAULT_ARGS``.

Infrastructure comes from the Airflow environment: the Spark master from the ``spark_default``
connection (e.g. ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}'``),
the MLflow location from ``MLFLOW_TRACKING_URI``, which spark-submit inherits. Each job is pointed at
its pipeline (:func:`orchestration.pipelines.job_env`): its config, and its lake under ``LAKE_ROOT``.
``PIPELINE_PY_FILES`` (comma-separated) ships the ``jobs`` package to executors that do not have it
installed.

Retries mean something: a job that fails on its data (exit code ``jobs.errors.DATA_ERROR_EXIT``:
a missing partition, a failed validation, no model) or on its config (``jobs.errors.USAGE_EXIT``: an
unknown key, a wrong type, a column no table has) fails its task at once with the job's message
and no retry; any other failure (a lost executor, a killed process, a tracking server that is
down) is retried with exponential backoff.
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperatorLink
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from jobs.config.pipelines import Pipeline
from orchestration.decisions import RUN_DATE, env_amount
from orchestration.pipelines import job_env, lake_of

JOBS_DIR = Path(__file__).resolve().parents[1] / "jobs"
# The DAGs' name of each job -> its entry point under jobs/: every program is a stage's job.py.
APPLICATIONS = {
    "validate": "validation/job.py",
    "features": "features/job.py",
    "baselines": "baselines/job.py",
    "train": "training/job.py",
    "promote": "promotion/job.py",
    "score": "scoring/job.py",
    "monitor": "monitoring/job.py",
}

# The first retry's delay: $PIPELINE_RETRY_DELAY_SECONDS where the DAGs are parsed, else a minute.
RETRY_DELAY_ENV = "PIPELINE_RETRY_DELAY_SECONDS"

DEFAULT_ARGS: dict[str, Any] = {
    "owner": "mlops",
    "retries": 2,
    "retry_delay": timedelta(seconds=env_amount(RETRY_DELAY_ENV, 60, "seconds")),
    "retry_exponential_backoff": 2.0,  # 1, then 2 minutes (with jitter), at most max_retry_delay
    "max_retry_delay": timedelta(minutes=15),
}

# Submit-time settings only; the session settings every job needs live in jobs/runtime/session.py.
SPARK_CONF = {
    "spark.ui.showConsoleProgress": "false",
}


class PipelineSparkSubmitOperator(SparkSubmitOperator):
    """spark-submit a job of the pipeline ``pipeline_name`` (its files at ``pipeline_source``); a
    data error fails the task without retries, with its message."""

    def __init__(self, *, pipeline_name: str, pipeline_source: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline_name, self.pipeline_source = pipeline_name, pipeline_source

    @property
    def pipeline(self) -> Pipeline:
        return Pipeline(self.pipeline_name, self.pipeline_source)

    def _whose(self) -> str:
        """The failure's owner, to open its one line: pipeline, task and the day it ran for."""
        args = [str(a) for a in self.application_args or []]
        day = f" for {args[args.index('--run-date') + 1]}" if "--run-date" in args[:-1] else ""
        return f"pipeline {self.pipeline_name}, {self.task_id}{day}: "

    def execute(self, context: Any) -> Any:
        from jobs.errors import ERROR_FILE_ENV

        with tempfile.TemporaryDirectory(prefix="pipeline-job-") as folder:
            error_file = os.path.join(folder, "error.txt")
            self.env_vars = {**(self.env_vars or {}), **job_env(self.pipeline), ERROR_FILE_ENV: error_file}
            self._hook = None  # the hook is made from env_vars: make it again with the error file
            try:
                return super().execute(context)
            except AirflowException as err:
                if os.path.exists(error_file):
                    with open(error_file, encoding="utf-8") as found:
                        message = found.read().strip()
                    raise AirflowFailException(
                        f"{self._whose()}{message} (not retried: a retry cannot fix it)") from err
                raise


class MLflowRunLink(BaseOperatorLink):
    """The "MLflow run" button of a promotion task: the run it registered."""

    name = "MLflow run"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        # Called by the worker when the task ends; Airflow stores the URL for the UI.
        return getattr(operator, "mlflow_run_url", "") or ""


class PromoteCandidateOperator(PipelineSparkSubmitOperator):
    """Submit the promotion job, then publish what it registered.

    Reads the job's ``reports/training/date=<run date>/summary.json`` (model version, MLflow run,
    metrics, champion gate decision), returns it as the task's XCom and links the task to the run.
    """

    operator_extra_links = (MLflowRunLink(),)

    def execute(self, context: Any) -> dict[str, Any]:
        super().execute(context)
        from jobs.lake.reports import read_report

        run_date = self.application_args[self.application_args.index("--run-date") + 1]
        summary = read_report(lake_of(self.pipeline), "training", run_date)
        self.mlflow_run_url = summary.get("run_url", "")
        self.log.info(
            "registered %s version %s (champion gate: %s); MLflow run: %s", summary["model_name"],
            summary["model_version"], summary["gate"]["gate_decision"], self.mlflow_run_url or summary["run_id"],
        )
        return summary


_OPERATORS: dict[str, type[PipelineSparkSubmitOperator]] = {"promote": PromoteCandidateOperator}


def _submit_kwargs(job: str, pipeline: Pipeline) -> dict[str, Any]:
    if job not in APPLICATIONS:
        raise ValueError(f"no Spark job {job!r}: one of {', '.join(APPLICATIONS)}")
    application = JOBS_DIR / APPLICATIONS[job]
    return {
        "application": str(application),
        "name": f"{job}-{{{{ dag.dag_id }}}}",
        "conn_id": "spark_default",
        "conf": dict(SPARK_CONF),
        "py_files": os.environ.get("PIPELINE_PY_FILES") or None,
        "pipeline_name": pipeline.name,
        "pipeline_source": pipeline.source,
    }


def spark_job(job: str, pipeline: Pipeline, *, task_id: str, args: list[Any] | None = None, run_date: Any = RUN_DATE,
              **kwargs: Any) -> PipelineSparkSubmitOperator:
    """A task that spark-submits ``pipeline``'s ``<job's entry point> --run-date <run_date> <args>``
    (``APPLICATIONS``); ``run_date`` is a template (default: the ``run_date`` param, else the
    logical date) or another task's output."""
    operator = _OPERATORS.get(job, PipelineSparkSubmitOperator)
    return operator(task_id=task_id, application_args=["--run-date", run_date, *(args or [])],
                    **_submit_kwargs(job, pipeline), **kwargs)


def _day_args(extra: list[str]) -> Any:
    def args(item: dict[str, Any]) -> list[str]:
        return ["--run-date", item["day"], *extra]

    return args


def spark_job_per_day(job: str, pipeline: Pipeline, days: Any, *, task_id: str, args: list[str] | None = None,
                      **kwargs: Any) -> Any:
    """One mapped task per item of ``days`` (another task's list of ``{"day": ...}``), each
    spark-submitting ``pipeline``'s ``<job's entry point> --run-date <day> <args>``; the UI names
    each by its day."""
    return PipelineSparkSubmitOperator.partial(
        task_id=task_id, map_index_template="{{ task.application_args[1] }}", **_submit_kwargs(job, pipeline),
        **kwargs,
    ).expand(application_args=days.map(_day_args(list(args or []))))


def spark_job_mapped(job: str, pipeline: Pipeline, arg_lists: Any, *, task_id: str, map_index: int = 3,
                     **kwargs: Any) -> Any:
    """One mapped task per item of ``arg_lists`` (another task's list of argument lists), each
    spark-submitting ``pipeline``'s ``<job's entry point> <args>``; the UI names each by its
    ``map_index``-th argument."""
    return PipelineSparkSubmitOperator.partial(
        task_id=task_id, map_index_template=f"{{{{ task.application_args[{map_index}] }}}}",
        **_submit_kwargs(job, pipeline),
        **kwargs,
    ).expand(application_args=arg_lists)

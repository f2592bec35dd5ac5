"""What the operator adds to spark-submit, through Airflow (``dag.test()``) and a real spark-submit:
retries that mean something (a job that fails on its data fails its task at once with the job's
message; any other failure is retried), and the OpenLineage parent job of every Spark job."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # DAG runs whose tasks are real spark-submits

REPO = Path(__file__).resolve().parents[1]

DATA_ERROR = """
from jobs.errors import DataError
from jobs.runner import run_job

def main():
    raise DataError("no raw flights for 2013-02-30: land the day first")

run_job(main)
"""
FAULT = """
import sys
sys.exit(3)  # e.g. a lost executor: another try may well work
"""
# The Python driver runs under the spark-submit JVM: its command line holds the --conf it was given.
LINEAGE = """
import os
arguments = open(f"/proc/{os.getppid()}/cmdline").read().split("\\0")
print("LINEAGE", sorted(a for a in arguments if a.startswith("spark.openlineage.")))
print("PIPELINE", os.environ["PIPELINE_NAME"], os.environ["PIPELINE_CONFIG"], os.environ["LAKE_ROOT"])
"""
JOBS = {"data_error": DATA_ERROR, "fault": FAULT, "lineage": LINEAGE}


@pytest.fixture(scope="module")
def airflow_db():
    from airflow.utils.db import upgradedb

    upgradedb()


DAG_FILE = """
from datetime import timedelta

import pendulum
from airflow.sdk import DAG
from orchestration.spark_jobs import DEFAULT_ARGS, PipelineSparkSubmitOperator

args = {**DEFAULT_ARGS, "retries": 1, "retry_delay": timedelta(0), "retry_exponential_backoff": 0}
with DAG("retry_semantics", schedule=None, start_date=pendulum.datetime(2013, 1, 1, tz="UTC"), default_args=args):
    for name in ("data_error", "fault", "lineage"):
        PipelineSparkSubmitOperator(task_id=name, application=f"{APPS}/{name}.py", conn_id="spark_default",
                                    pipeline_name="flights", pipeline_source="pipelines/flights")
"""


def test_data_errors_are_not_retried_faults_are_and_spark_jobs_know_their_airflow_parent(
        airflow_db, tmp_path, monkeypatch, capfd):
    """A DAG of tasks that each spark-submit a tiny job: one fails on its data, one fails
    otherwise, one prints the OpenLineage settings its spark-submit was given and its pipeline."""
    from airflow.dag_processing.dagbag import DagBag

    for name, source in JOBS.items():
        (tmp_path / f"{name}.py").write_text(source)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "retry_semantics.py").write_text(f"APPS = {str(tmp_path)!r}\n{DAG_FILE}")
    from airflow import settings

    monkeypatch.setattr(settings, "DAGS_FOLDER", str(dags))  # dag.test() syncs its DAG from the dags folder
    bag = DagBag(dag_folder=str(dags))
    assert bag.import_errors == {}

    run = bag.dags["retry_semantics"].test()
    tries = {ti.task_id: (ti.state, ti.try_number) for ti in run.get_task_instances()}
    assert tries == {"data_error": ("failed", 1), "fault": ("failed", 2), "lineage": ("success", 1)}
    out = capfd.readouterr()
    text = out.out + out.err
    reason = "no raw flights for 2013-02-30: land the day first"
    assert f"data_error: DataError: {reason} (not retried: a retry cannot fix it)" in text
    # OpenLineage's Spark listener links the job to its Airflow task through these (scripts/env.sh)
    lineage = text[text.index("LINEAGE ["):].splitlines()[0]
    assert "spark.openlineage.parentJobName=retry_semantics.lineage" in lineage, lineage
    assert "spark.openlineage.parentRunId=" in lineage and "spark.openlineage.rootParentJobName=" in lineage
    # the job is pointed at its pipeline: its name, its files, its own lake under $LAKE_ROOT
    from jobs.lake.layout import Lake

    assert f"PIPELINE flights pipelines/flights {Lake.at().root}/flights" in text

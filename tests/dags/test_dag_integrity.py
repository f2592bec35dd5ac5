"""Every DAG loads, follows the house rules, and wires the task graph its pipeline promises."""

from __future__ import annotations

from pathlib import Path

import pytest

DAGS_DIR = Path(__file__).resolve().parents[2] / "dags"

EXPECTED_EDGES = {
    "train_pipeline": {("validate_raw", "build_features"), ("build_features", "train_model")},
    "score_pipeline": {("validate_raw", "build_features"), ("build_features", "score_batch"),
                       ("score_batch", "check_drift")},
}
# Tasks that run in the Airflow worker rather than as Spark jobs: (dag, task) -> the Assets they update.
WORKER_TASKS = {("score_pipeline", "check_drift"): {"scoring_drift"}}


@pytest.fixture(scope="module")
def dag_bag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS_DIR))


def test_no_import_errors(dag_bag):
    assert dag_bag.import_errors == {}


def test_every_pipeline_is_loaded_and_named_after_its_file(dag_bag):
    assert set(dag_bag.dag_ids) == set(EXPECTED_EDGES)
    for dag_id in dag_bag.dag_ids:
        assert Path(dag_bag.dags[dag_id].fileloc).stem == dag_id


@pytest.mark.parametrize("dag_id", sorted(EXPECTED_EDGES))
def test_house_rules(dag_bag, dag_id):
    dag = dag_bag.dags[dag_id]
    assert dag.tags, "every DAG has tags"
    assert dag.doc_md and dag.doc_md.strip(), "the module docstring is the DAG's doc_md"
    assert dag.schedule is not None, "an explicit schedule"
    assert dag.catchup is False, "catchup chosen on purpose"
    assert "run_date" in dag.params
    for task in dag.tasks:
        assert task.owner and task.owner != "airflow", f"{task.task_id} has an owner"
        assert task.retries >= 1, f"{task.task_id} retries"


@pytest.mark.parametrize("dag_id", sorted(EXPECTED_EDGES))
def test_task_graph(dag_bag, dag_id):
    dag = dag_bag.dags[dag_id]
    edges = {(up, task.task_id) for task in dag.tasks for up in task.upstream_task_ids}
    assert edges == EXPECTED_EDGES[dag_id]


@pytest.mark.parametrize("dag_id", sorted(EXPECTED_EDGES))
def test_tasks_are_spark_jobs_with_an_explicit_run_date(dag_bag, dag_id):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    for task in dag_bag.dags[dag_id].tasks:
        if (dag_id, task.task_id) in WORKER_TASKS:
            assert {asset.name for asset in task.outlets} == WORKER_TASKS[dag_id, task.task_id]
            assert "params.run_date" in task.op_kwargs["run_date"]
            continue
        assert isinstance(task, SparkSubmitOperator)
        assert Path(task.application).is_file()
        args = task.application_args
        assert args[0] == "--run-date" and "params.run_date" in args[1]


def test_no_connection_access_at_parse_time(monkeypatch):
    """Parsing must not touch connections: make any lookup fail and parse again."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import Connection

    def refuse(*args, **kwargs):
        raise AssertionError("connection looked up at parse time")

    monkeypatch.setattr(Connection, "get", refuse)
    bag = DagBag(dag_folder=str(DAGS_DIR))
    assert bag.import_errors == {}


@pytest.mark.parametrize("precision", [None, "bf16"])
def test_the_training_precision_param_reaches_the_job(dag_bag, precision):
    """The param renders to an argument the train job parses: empty (the config's) or the choice."""
    import jinja2

    from jobs.config import PRECISIONS, optional_choice

    dag = dag_bag.dags["train_pipeline"]
    assert set(dag.params.get_param("precision").schema["enum"]) == {None, *PRECISIONS}
    args = dag.get_task("train_model").application_args
    rendered = [jinja2.Template(a).render(params={"precision": precision, "run_date": "2013-01-28"}) for a in args]
    value = rendered[rendered.index("--precision") + 1]
    assert optional_choice(PRECISIONS)(value) == precision

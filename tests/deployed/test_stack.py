"""The deployed stack (``scenario.py``, started once for this folder): PostgreSQL as the backend
of Airflow and MLflow, Airflow's API server, scheduler, DAG processor and triggerer
(LocalExecutor), a Spark standalone master and worker, a Spark Connect server and the MLflow
server over HTTP, all on loopback; then the Airflow UI in headless Chromium.

The first champion goes through all of it (the ``training`` fixture): triggered through the REST
API as the UI's trigger form does, with ``require_approval``, its ``spark-submit`` on the
standalone cluster, logging to the MLflow server and registering the model there; the version
waits for a person, who reads the comparison and approves it (through the REST API the UI's
Required actions page uses), and only then becomes champion; its task's "MLflow run" button is
then clicked in the browser. The screenshots are kept in ``$PIPELINE_TEST_HOME/screenshots`` (the
test prints the folder); ``make ui-screenshot`` copies one to ``docs/airflow-ui.png``.
"""

from __future__ import annotations

import json
import shutil
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser import SCREENSHOTS, Page, chromium
from tests.deployed.scenario import DAGS, MODEL, TRAIN_DATE
from tests.stack import LOOPBACK, Stack

pytestmark = pytest.mark.e2e


def _listening(processes: list[Any]) -> set[tuple[str, str]]:
    """(process name, address) of every listening TCP socket of ``processes``."""
    import psutil

    pids = {p.pid: p for p in processes}
    found = set()
    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in pids:
            found.add((pids[conn.pid].name(), conn.laddr.ip.removeprefix("::ffff:")))
    return found


def test_every_part_of_the_stack_answers_on_loopback(stack):
    airflow = stack.airflow
    health = airflow.health()
    for part in ("metadatabase", "scheduler", "dag_processor", "triggerer"):
        assert health[part]["status"] == "healthy", health
    assert stack.mlflow.health() == "OK"
    master = stack.spark.status()
    assert master["status"] == "ALIVE" and [w["state"] for w in master["workers"]] == ["ALIVE"], master
    assert master["workers"][0]["cores"] == 2
    # Airflow's tasks reach the stack's MLflow server and submit to its Spark master
    assert stack.task_env["MLFLOW_TRACKING_URI"] == stack.mlflow.url
    assert json.loads(stack.task_env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == stack.spark.url

    for dag_id in DAGS:
        dag = airflow.wait_for_dag(dag_id)
        assert dag["dag_id"] == dag_id and not dag["has_import_errors"], dag
    assert airflow.request("GET", "/api/v2/importErrors")["import_errors"] == []
    # the train task's "MLflow run" button is registered by the plugin (the API server needs that to
    # show it; GET .../tasks/promote_candidate lists no extra links in Airflow 3.3.2 whatever the operator has)
    plugins = {p["name"]: p for p in airflow.request("GET", "/api/v2/plugins")["plugins"]}
    assert any("MLflowRunLink" in link for link in plugins["lakeflow_mlops"]["operator_extra_links"]), plugins

    # nothing of the stack is reachable from another machine
    addresses = _listening(stack.processes())
    assert addresses and {ip for _, ip in addresses} == {LOOPBACK}, sorted(addresses)


def approved_run(stack: Stack, training: dict[str, Any]) -> tuple[Any, str]:
    """The MLflow run of the approved first champion on the stack's server, and its page there."""
    import mlflow

    run = mlflow.MlflowClient(stack.mlflow.url).get_run(training["version"].run_id)
    return run, f"{stack.mlflow.url}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"


def test_a_training_run_logs_to_the_mlflow_server_and_links_to_it(stack, training):
    """The run triggered through the REST API trained on the standalone cluster and registered its
    model on the MLflow server (PostgreSQL behind it); the task's button links to that run."""
    run, page = approved_run(stack, training)
    assert run.data.tags["started_by"] == f"a person: run_date {TRAIN_DATE}", run.data.tags
    assert run.data.params["num_processes"] == "1" and run.data.metrics["holdout_roc_auc"] > 0, run.data
    ti = training["promote_candidate"]
    assert ti["state"] == "success" and ti["try_number"] == 1, ti
    # the person saw the comparison, and their answer is on the version
    request = training["approval"]
    assert request["subject"] == f"Make {MODEL} version 1 the champion?", request
    assert "| holdout roc_auc |" in request["body"] and run.info.run_id in request["body"], request["body"]
    version = training["version"]
    assert version.tags["gate_decision"] == "promoted" and version.tags["gate_approved_by"] == "admin", version.tags
    path = f"/api/v2/dags/flights_train/dagRuns/{urllib.parse.quote(ti['dag_run_id'], safe='')}/taskInstances"
    links = stack.airflow.request("GET", f"{path}/promote_candidate/links")
    assert links["extra_links"] == {"MLflow run": page}, links
    # the job ran on the standalone cluster, not on a local master: two jobs of the train script,
    # the sweep's one candidate, then promote_candidate registering and gating it
    apps = {name: [app["state"] for app in stack.spark.status()["completedapps"] if app["name"] == name]
            for name in (f"train-{TRAIN_DATE}", f"promote-{TRAIN_DATE}")}
    assert apps == {f"train-{TRAIN_DATE}": ["FINISHED"], f"promote-{TRAIN_DATE}": ["FINISHED"]}, apps


# --- the browser -------------------------------------------------------------------------------


@pytest.fixture
def browser(tmp_path) -> Iterator[Any]:
    with chromium(tmp_path) as driver:
        yield driver


def test_the_airflow_ui_in_chromium_shows_the_runs_and_opens_the_mlflow_run(stack, training, browser, capsys):
    from selenium.webdriver.common.by import By

    shutil.rmtree(SCREENSHOTS, ignore_errors=True)
    SCREENSHOTS.mkdir(parents=True)
    with capsys.disabled():
        print(f"\nscreenshots of the Airflow UI: {SCREENSHOTS}")
    airflow, page = stack.airflow, Page(browser)
    run_id = training["run"]["dag_run_id"]
    try:
        # not logged in: the UI sends the browser to the simple auth manager's login page
        page.log_in(airflow)
        page.text("Health")  # the home page, with the health of each component
        page.shot("home")

        browser.get(f"{airflow.url}/dags")
        for dag_id in DAGS:
            page.text(dag_id)
        page.shot("dags")

        browser.get(f"{airflow.url}/dags/flights_train/runs")
        page.text(run_id)
        page.shot("flights_train-runs")

        # the approval the person answered, with the comparison they read
        browser.get(f"{airflow.url}/dags/flights_train/runs/{run_id}/tasks/approve_champion/required_actions")
        page.text(training["approval"]["subject"])
        page.shot("approve_champion")

        # the task instance's details tab has its extra links: the "MLflow run" button
        browser.get(f"{airflow.url}/dags/flights_train/runs/{run_id}/tasks/promote_candidate/details")
        button = page.wait.until(lambda d: d.find_element(By.XPATH, "//a[normalize-space(.)='MLflow run']"))
        _, run_page = approved_run(stack, training)
        assert button.get_attribute("href") == run_page
        page.shot("promote_candidate")

        # which opens the run on the MLflow server, in a new tab, with the version it registered
        tabs = set(browser.window_handles)
        button.click()
        page.wait.until(lambda d: len(d.window_handles) > len(tabs))
        browser.switch_to.window((set(browser.window_handles) - tabs).pop())
        page.wait.until(lambda d: d.current_url == run_page)
        page.text(MODEL)
        page.shot("mlflow-run")
    except Exception:
        page.keep_failure()
        raise
    for path in page.shots:
        assert path.stat().st_size > 10_000, path  # a rendered page, not a blank one


def test_stopping_the_stack_leaves_no_process(running):
    """Last of this folder (``conftest.py`` puts it there): stop the stack and check that every
    process of it (the servers' children, Airflow's task processes and the JVMs they started
    included) is gone; and that no Airflow component exited on its own (and was started again by
    the restart policy) but where a fault case expected it."""
    import psutil

    assert running.stack.airflow.restarts == [], running.stack.airflow.restarts
    processes = running.stack.processes()
    assert len(processes) > 10, processes
    running.stop()
    left = [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], [(p.pid, p.name()) for p in left]

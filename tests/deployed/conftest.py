"""The deployed stack of ``scenario.py``, started once for every test under ``tests/deployed/``.

Its modules run in the scenario's order whatever their names: ``test_stack.py`` (the parts answer,
the first champion trained through the REST API with a person's approval, the UI in Chromium),
then ``test_backfill.py`` (backfills, decay and drift retrainings, the Model health page, secrets),
then ``test_two_pipelines.py`` (a night of the flights and one of the bikeshare pipeline at the
same time), then ``test_faults.py`` (parts of the platform killed under a running pipeline); the
test that stops the stack and looks for leftover processes runs last.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deployed.scenario import (
    MODEL,
    TRAIN_DATE,
    TRAIN_TIMEOUT,
    RunningStack,
    prepare_lake,
    stack_env,
    write_pipelines,
)
from tests.stack import Stack

ORDER = ["test_stack.py", "test_backfill.py", "test_two_pipelines.py", "test_faults.py"]
LAST = "test_stopping_the_stack_leaves_no_process"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """This folder's tests in ORDER (a test keeps its place within its module), LAST at the end."""
    here = Path(__file__).parent
    slots = [n for n, item in enumerate(items) if item.path.parent == here]

    def rank(item: pytest.Item) -> tuple[bool, int]:
        name = item.path.name
        return item.name == LAST, ORDER.index(name) if name in ORDER else len(ORDER)

    for slot, item in zip(slots, sorted((items[n] for n in slots), key=rank), strict=True):
        items[slot] = item


_STARTED: list[RunningStack] = []  # the stack of this process, once started


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Leaving this folder (the next test is elsewhere, or there is none): stop the stack and give
    the process its environment back. This folder is not a Python package, so pytest keeps its
    "package" fixtures to the end of the session: without this, a worker's next modules would run
    with the stack's config and settings."""
    here = Path(__file__).parent
    if item.path.parent == here and (nextitem is None or nextitem.path.parent != here):
        for started in _STARTED:
            started.stop()


@pytest.fixture(scope="package")
def running(lake, features_zone, config_patch, tmp_path_factory) -> Iterator[RunningStack]:
    """The stack on its lake and config, this process's environment pointing at both (the tests
    call the jobs' own functions too) until the stack stops: at the end of the folder, or when a
    test stops it."""
    home = tmp_path_factory.mktemp("stack")
    own = prepare_lake(lake, features_zone, home / "lake" / "flights")
    pipelines = write_pipelines(config_patch, home / "pipelines")
    env = {
        **stack_env(own, pipelines / "flights.yaml", home, pipelines),
        # a failed try is retried after 5 s, not a minute: the fault cases wait for retries
        "PIPELINE_RETRY_DELAY_SECONDS": "5",
    }
    patch = pytest.MonkeyPatch()
    for key, value in env.items():
        patch.setenv(key, value)
    # a task whose process is gone is failed (and retried) a minute after its last heartbeat, not
    # five; a restarted scheduler resets the tasks its dead predecessor ran within 30 s, not 300
    settings = {"AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "True",
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
                "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "30"}
    try:
        stack = RunningStack(home, own, env, patch, airflow_settings=settings, connect=True)
    except BaseException:
        patch.undo()
        raise
    patch.setenv("MLFLOW_TRACKING_URI", stack.stack.mlflow.url)
    _STARTED.append(stack)
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="package")
def stack(running) -> Stack:
    if running.stopped:
        pytest.fail("the stack was stopped already")
    return running.stack


@pytest.fixture(scope="package")
def stack_lake(running):
    """The stack's own lake (:func:`scenario.prepare_lake`)."""
    return running.lake


@pytest.fixture(scope="package")
def training(stack) -> dict[str, Any]:
    """The first champion: a flights_train run for TRAIN_DATE triggered through the REST API with
    approval required, approved by a person once it asks, finished; its run, promote_candidate's task
    instance, the approval request and the model version."""
    import mlflow

    from jobs.selection.gate import current_champion

    airflow = stack.airflow
    airflow.wait_for_dag("flights_train")
    airflow.unpause("flights_train")  # a paused DAG's triggered run would only be queued
    run_id = airflow.trigger("flights_train", {"run_date": TRAIN_DATE.isoformat(),
                                                "require_approval": True})["dag_run_id"]
    airflow.wait_for_task("flights_train", run_id, "approve_champion", "awaiting_input", timeout=TRAIN_TIMEOUT)
    request = airflow.hitl("flights_train", run_id, "approve_champion")
    # the version won the gate (the first one ever) but is not champion before a person says so
    client = mlflow.MlflowClient(stack.mlflow.url)
    assert current_champion(client, MODEL) is None
    [version] = client.search_model_versions(f"name = '{MODEL}'")
    assert version.tags["gate_decision"] == "awaiting_approval", version.tags
    assert client.get_run(version.run_id).info.status == "FINISHED"  # a version only of a run that finished
    assert client.get_run(version.run_id).data.tags["registration"] == str(version.version)
    # Answered before the scheduler has taken in the parked try's end, the task would be failed and
    # asked again (Airflow 3.3.2; a fixed sleep of 5 s was not always enough under load).
    airflow.wait_parked("flights_train", run_id, "approve_champion")
    answer = airflow.hitl("flights_train", run_id, "approve_champion", answer=["Approve"])
    assert answer["chosen_options"] == ["Approve"], answer

    def finished(runs: dict[str, list[dict[str, Any]]]) -> bool:
        return any(r["dag_run_id"] == run_id for r in runs["flights_train"])

    runs = airflow.settle(["flights_train"], finished, timeout=TRAIN_TIMEOUT)  # any failed try fails at once
    [run] = [r for r in runs["flights_train"] if r["dag_run_id"] == run_id]
    assert run["state"] == "success", run
    [train] = [ti for ti in airflow.task_instances("flights_train")
               if ti["task_id"] == "promote_candidate" and ti["dag_run_id"] == run_id]
    return {"run": run, "promote_candidate": train, "approval": request,
            "version": client.get_model_version(MODEL, version.version)}

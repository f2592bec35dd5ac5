"""``make demo``'s task logs for the UI: the console output of ``airflow dags test`` split per task
instance (the whole round trip, through Airflow's log reader, is in tests/test_e2e.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts/dag_test_logs.py"
spec = importlib.util.spec_from_file_location("dag_test_logs", SCRIPT)
dag_test_logs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dag_test_logs)

A, B = "01a2084b-33b2-7c2c-96fa-fddc8dfc3208", "01a2084b-33b3-7843-ab4f-7cddf1d7c54f"
# the markers as `airflow dags test` prints them (Airflow 3.3), around two tasks' own lines
CONSOLE = f"""\
2026-11-23T12:04:35.399561Z [info     ] DAG bundles loaded: dags-folder [airflow.dag_processing.bundles.manager]
2026-11-23T12:04:35.934219Z [info     ] [DAG TEST] starting task_id=validate_raw map_index=-1 [airflow.sdk...dag]
2026-11-23T12:04:35.934542Z [info     ] [DAG TEST] running task <TaskInstance: flights_train.validate_raw \
manual__2026-11-23T12:04:35.831167+00:00 [TaskInstanceState.SCHEDULED] ti_id={A}> [airflow.sdk...dag]
jobs.validate: flights 2013-01-28: 842 rows in, 842 valid
2026-11-23T12:05:22.888693Z [info     ] [DAG TEST] end task task_id=validate_raw map_index=-1 [airflow.sdk...dag]
2026-11-23T12:05:22.893494Z [info     ] [DAG TEST] starting task_id=build_features map_index=-1 [airflow.sdk...dag]
2026-11-23T12:05:22.894004Z [info     ] [DAG TEST] running task <TaskInstance: flights_train.build_features \
manual__2026-11-23T12:04:35.831167+00:00 [TaskInstanceState.SCHEDULED] ti_id={B}> [airflow.sdk...dag]
jobs.features: 842 rows for 2013-01-28
2026-11-23T12:05:36.550526Z [info     ] [DAG TEST] end task task_id=build_features map_index=-1 [airflow.sdk...dag]
2026-11-23T12:05:36.6Z [info     ] Dag run finished [airflow.sdk...dag]
"""


def test_each_task_gets_its_own_lines_from_its_start_marker_to_its_end_marker():
    parts = dag_test_logs.split_by_task(CONSOLE.splitlines())
    assert list(parts) == [A, B]
    assert [line.split("] ", 1)[-1][:30] for line in parts[A]] == [
        "[DAG TEST] running task <TaskI", "jobs.validate: flights 2013-01", "[DAG TEST] end task task_id=va"]
    assert "jobs.features: 842 rows for 2013-01-28" in parts[B] and not any("validate" in line for line in parts[B])
    assert not any("Dag run finished" in line for part in parts.values() for line in part)


def test_a_task_run_twice_keeps_both_parts():
    lines = CONSOLE.splitlines()
    parts = dag_test_logs.split_by_task(lines[1:5] + lines[1:5])
    assert list(parts) == [A] and len(parts[A]) == 6

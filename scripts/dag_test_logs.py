"""Give the task instances of an ``airflow dags test`` run their logs in the UI.

``dags test`` runs every task in its own process and prints the tasks' logs to the console only,
so the UI shows "log file not found" for those runs. This splits the console output (saved with
``tee``) at the markers ``dag.test()`` prints around each task (``[DAG TEST] starting
task_id=...``, ``running task <TaskInstance ... ti_id=...>``, ``[DAG TEST] end task``) and writes
each task's part where Airflow's file task handler reads it (``[logging] base_log_folder`` and the
run's log filename template), so the UI's log tab shows it.

Usage: ``python scripts/dag_test_logs.py CONSOLE_LOG`` (``make demo`` runs it after each DAG).
"""

from __future__ import annotations

import re
import sys
import uuid
from pathlib import Path

START = re.compile(r"\[DAG TEST\] running task <TaskInstance: .* ti_id=([0-9a-f-]{36})>")
END = re.compile(r"\[DAG TEST\] end task task_id=")


def split_by_task(lines: list[str]) -> dict[str, list[str]]:
    """The console lines of each task instance (by its id), from its start marker to its end marker.
    A task run twice in one ``dags test`` (a sensor rescheduled, a deferral) gets both parts."""
    parts: dict[str, list[str]] = {}
    current: str | None = None
    for line in lines:
        if found := START.search(line):
            current = found.group(1)
            parts.setdefault(current, [])
        if current is not None:
            parts[current].append(line)
            if END.search(line):
                current = None
    return parts


def write_task_logs(console_log: str) -> list[Path]:
    """Write each task's part of ``console_log`` as its log file; return the files written."""
    from airflow.configuration import conf
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.log.file_task_handler import FileTaskHandler
    from airflow.utils.session import create_session

    parts = split_by_task(Path(console_log).read_text(encoding="utf-8", errors="replace").splitlines())
    handler = FileTaskHandler(base_log_folder=conf.get("logging", "base_log_folder"))
    written = []
    with create_session() as session:
        for ti_id, lines in parts.items():
            ti = session.get(TaskInstance, uuid.UUID(ti_id))
            if ti is None:  # a run of another metadata DB: nothing to attach it to
                continue
            path = Path(handler.local_base) / handler._render_filename(ti, max(ti.try_number, 1), session=session)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            written.append(path)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    from airflow.configuration import conf as airflow_conf

    files = write_task_logs(sys.argv[1])
    print(f"task logs for the UI: {len(files)} file(s) under {airflow_conf.get('logging', 'base_log_folder')}")

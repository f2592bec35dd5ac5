"""The training's MLflow run through faults: which process owns a RUNNING run, ending it as FAILED
when the train job fails or is terminated, and failing the runs that a killed job left RUNNING.

A run the train job opens carries the tag ``pipeline.owner`` (``host:pid:start-time`` of the
driver process). The next start of the job (:func:`fail_stale_runs`, called when it opens its run)
marks a RUNNING run FAILED, with a note, when its owner is a process of this host that no longer
exists; a run owned by another host is left alone (its process cannot be checked from here). A
retry of the same training still resumes such a run from its checkpoints
(:func:`jobs.training.checkpoints.resumable_run` takes FAILED runs too).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

log = logging.getLogger("jobs.training.job")

OWNER_TAG = "pipeline.owner"
FAILURE_TAG = "pipeline.failure"  # why the pipeline ended a run as FAILED


def owner_tag(pid: int | None = None) -> str:
    """``host:pid:start-time`` of a process (this one by default): the start time tells a reused
    pid from the process that opened the run."""
    import psutil

    process = psutil.Process(pid or os.getpid())
    return f"{socket.gethostname()}:{process.pid}:{process.create_time():.0f}"


def owner_alive(owner: str) -> bool | None:
    """Whether the process a run's ``pipeline.owner`` names still runs; None when it is on another host."""
    import psutil

    host, pid, started = (owner.rsplit(":", 2) + ["", ""])[:3]
    if not pid.isdigit():
        return None
    if host != socket.gethostname():
        return None
    try:
        return f"{psutil.Process(int(pid)).create_time():.0f}" == started
    except psutil.Error:
        return False


def fail_stale_runs(client: Any, experiment_id: str) -> list[str]:
    """End as FAILED, with a note in ``pipeline.failure``, the RUNNING runs of the experiment whose
    owner process is gone (killed: SIGKILL, the OOM killer, a lost container). Returns their ids."""
    failed = []
    for run in client.search_runs([experiment_id], filter_string="attributes.status = 'RUNNING'", max_results=200):
        owner = run.data.tags.get(OWNER_TAG)
        if owner is None or owner_alive(owner) is not False:
            continue
        note = (f"ended as FAILED by the train job started by {owner_tag()}: the process that ran it ({owner}) "
                "is gone (killed), so the run could not end itself; a retry of the same training resumes it "
                "from its checkpoints")
        client.set_tag(run.info.run_id, FAILURE_TAG, note)
        client.set_terminated(run.info.run_id, status="FAILED")
        log.warning("MLflow run %s was left RUNNING by %s, which is gone: marked FAILED", run.info.run_id, owner)
        failed.append(run.info.run_id)
    return failed


class Terminated(SystemExit):
    """The job received SIGTERM (Airflow killing the task, a container stopping)."""


def terminate_on_signal() -> None:
    """Turn SIGTERM into :class:`Terminated` in the main thread, so ``finally`` blocks and
    :func:`failed_on_error` run (ending the MLflow run, stopping the ranks) instead of the process
    vanishing; and send it when this process's parent (spark-submit's JVM, the Airflow task) dies,
    instead of training on alone."""
    def handler(signum: int, _frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        raise Terminated(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        log.error("the train job's parent process %s is gone: stopping", parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="terminate-with-parent", daemon=True).start()


@contextlib.contextmanager
def failed_on_error(client: Any, run_id: str) -> Iterator[None]:
    """End the run as FAILED, with the error in ``pipeline.failure``, when the block raises anything
    (SIGTERM included, under :func:`terminate_on_signal`), then re-raise."""
    try:
        yield
    except BaseException as err:
        from jobs.tracking import best_effort_calls

        try:
            with best_effort_calls():  # within seconds: a gone server has cost its minute already
                if client.get_run(run_id).info.status != "FINISHED":  # a registered, finished run stays so
                    client.set_tag(run_id, FAILURE_TAG, f"{type(err).__name__}: {err}"[:4000])
                    client.set_terminated(run_id, status="FAILED")
                    log.error("MLflow run %s ended as FAILED: %s: %s; no model version was registered from it "
                              "(a version comes only from a finished run); a retry resumes the run",
                              run_id, type(err).__name__, err)
        except Exception as again:  # the tracking server may be what failed: keep the first error
            log.warning("could not mark MLflow run %s FAILED: %s", run_id, again)
        raise

"""Where a job's wall time goes: the phases a job marks, logged when it ends.

:func:`jobs.runner.run_job` times ``main``; inside it, :func:`phase` marks the fixed costs
(``spark session`` in :func:`jobs.runtime.session.get_spark`, ``GX context``, ``model load``, ...). When the
job ends, one log line gives the process's start-up (Python and the imports before ``main``), each
phase, and the rest of ``main`` as ``work``. With ``PIPELINE_TIMINGS_DIR`` set, the same goes as
JSON to ``<dir>/<job>-<pid>.json`` with wall-clock times, so a caller can line it up with the
Airflow task around it (``benchmarks/nightly.py`` does).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

TIMINGS_DIR_ENV = "PIPELINE_TIMINGS_DIR"

log = logging.getLogger("jobs.timings")

_phases: dict[str, float] = {}


def process_started() -> float | None:
    """When this process started (seconds since the epoch), from /proc; None where there is no /proc."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, IndexError, StopIteration, ValueError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Count the time spent in the block as ``name`` (added up when the block runs again)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        _phases[name] = _phases.get(name, 0.0) + time.perf_counter() - started


def take_phases() -> dict[str, float]:
    """The seconds per phase counted in this process so far, and start counting afresh (a caller
    that runs several jobs in one process, such as the replay, sums them per job)."""
    taken = dict(_phases)
    _phases.clear()
    return taken


def breakdown(main_started: float, main_ended: float, started: float | None) -> dict[str, Any]:
    """The job's timings: wall-clock marks and seconds per phase, ``work`` being the rest of main."""
    seconds = {"python start + imports": main_started - started if started else None, **_phases}
    seconds["work"] = max(0.0, main_ended - main_started - sum(_phases.values()))
    return {"process_started": started, "main_started": main_started, "main_ended": main_ended,
            "seconds": {k: None if v is None else round(v, 3) for k, v in seconds.items()}}


def job_name(entry_point: str) -> str:
    """A job's name in its timings: the entry point's stem, or the stage package of a ``job.py``
    (``jobs/validation/job.py`` is ``validation``)."""
    path = Path(entry_point)
    return (path.parent.name if path.stem == "job" else path.stem) or "job"


@contextmanager
def timed_job() -> Iterator[None]:
    """Time a job's ``main`` (what :func:`jobs.runner.run_job` wraps): logged at the end, and
    written as JSON when ``PIPELINE_TIMINGS_DIR`` is set; failed runs too."""
    started = time.time()
    try:
        yield
    finally:
        record = breakdown(started, time.time(), process_started())
        job = job_name(sys.argv[0])
        log.info("timings: %s", ", ".join(f"{k} {v:.1f} s" for k, v in record["seconds"].items() if v is not None))
        if folder := os.environ.get(TIMINGS_DIR_ENV):
            Path(folder).mkdir(parents=True, exist_ok=True)
            (Path(folder) / f"{job}-{os.getpid()}.json").write_text(json.dumps({"job": job, **record}))


def preload(*modules: str) -> None:
    """Import ``modules`` in a background thread while the job does other things (start Spark,
    read files): heavy imports (GX, MLflow: seconds each) then overlap with waiting on the JVM
    instead of adding to it. An ``import`` of one of them later waits for this one to finish."""
    import importlib
    import threading

    def load() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the job's own import raises it where it matters
                log.debug("preloading %s failed", name, exc_info=True)

    threading.Thread(target=load, name="preload", daemon=True).start()

"""Data errors, and how a job tells its caller that a retry would not help.

A :class:`DataError` is a problem with the input (a missing partition, a failed validation, no
model to score with): running the job again on the same lake fails the same way. A job started
with :func:`run_job` exits with :data:`DATA_ERROR_EXIT` on one and writes the message to the file
named by ``PIPELINE_ERROR_FILE`` when that is set; the Airflow operator (orchestration/spark_jobs.py)
turns that into a failure without retries that carries the message. Anything else (a lost
executor, an unreachable tracking server, a killed process) exits non-zero in the usual way and is
retried.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable

DATA_ERROR_EXIT = 65  # EX_DATAERR of sysexits.h
ERROR_FILE_ENV = "PIPELINE_ERROR_FILE"

log = logging.getLogger("jobs")


class DataError(Exception):
    """The input is wrong or missing: retrying will not help; the message says what to do."""


def run_job(main: Callable[[], None]) -> None:
    """Run a job's ``main``; on a :class:`DataError`, log it, record it and exit with DATA_ERROR_EXIT."""
    from jobs.timings import timed_job

    try:
        with timed_job():
            main()
    except DataError as err:
        message = f"{type(err).__name__}: {err}"
        log.error("data error (not retried): %s", message)
        if path := os.environ.get(ERROR_FILE_ENV):
            with open(path, "w", encoding="utf-8") as out:
                out.write(message)
        sys.exit(DATA_ERROR_EXIT)

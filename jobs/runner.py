"""How every job's ``__main__`` runs its ``main``: timed (:func:`jobs.timings.timed_job`), its Spark
Connect session released, and each failure told in one line with the exit code Airflow reads: a
data error (:mod:`jobs.errors`) exits with :data:`~jobs.errors.DATA_ERROR_EXIT`, not retried; any
other failure exits 1 and is retried."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable

from jobs.errors import DATA_ERROR_EXIT, ERROR_FILE_ENV, DataError, data_problem, disk_full, headline
from jobs.lake.spark import release_session
from jobs.timings import timed_job

log = logging.getLogger("jobs")


def run_job(main: Callable[[], None]) -> None:
    """Run a job's ``main``; on a :class:`DataError` (or a :func:`data_problem`), log it, record it
    and exit with DATA_ERROR_EXIT; on anything else, log it in one line and exit 1 (retried)."""
    try:
        with timed_job():
            try:
                main()
            finally:
                release_session()  # a shared Spark Connect server frees the job's session now
    except Exception as err:  # noqa: BLE001 - every failure gets its one line; the traceback at debug
        problem = f"{type(err).__name__}: {err}" if isinstance(err, DataError) else data_problem(err)
        if problem is None:
            log.error("failed (a fault: Airflow retries the task): %s (the traceback: PIPELINE_LOG_LEVEL=DEBUG)",
                      disk_full(err) or headline(err))
            log.debug("the traceback of that failure", exc_info=True)
            sys.exit(1)
        summary, _, details = problem.partition("\n")
        if details.strip():  # the details first: the log's last line is the problem, in one line
            log.error("data error, in detail:\n%s", details)
            summary += " (in detail above)"
        log.error("data error (not retried): %s", summary)
        log.debug("the traceback of that data error", exc_info=True)
        if path := os.environ.get(ERROR_FILE_ENV):
            with open(path, "w", encoding="utf-8") as out:
                out.write(problem)
        sys.exit(DATA_ERROR_EXIT)

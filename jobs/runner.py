"""How every job's ``__main__`` runs its ``main``: timed (:func:`jobs.timings.timed_job`), its Spark
Connect session released, and each failure told in one line with the exit code Airflow reads: a
data error (:mod:`jobs.errors`) exits with :data:`~jobs.errors.DATA_ERROR_EXIT` and a config
mistake (:class:`jobs.config.ConfigError`) with :data:`~jobs.errors.USAGE_EXIT`, neither retried;
any other failure exits 1 and is retried."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable

from jobs.config import ConfigError
from jobs.config.env import PIPELINE_NAME_ENV
from jobs.errors import DATA_ERROR_EXIT, ERROR_FILE_ENV, USAGE_EXIT, DataError, data_problem, disk_full, headline
from jobs.runtime.session import release_session
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
    except ConfigError as err:
        _not_retried("config error", str(err), USAGE_EXIT)
    except SystemExit as done:
        if done.code == 2:  # argparse refused the command line, its message above: a retry gets the same one
            _not_retried("usage error", "the job's command line was refused: see the usage error above it in the "
                         "log, and fix the task's arguments or the DAG's params", USAGE_EXIT)
        raise
    except Exception as err:  # noqa: BLE001 - every failure gets its one line; the traceback at debug
        problem = f"{type(err).__name__}: {err}" if isinstance(err, DataError) else data_problem(err)
        if problem is None:
            log.error("%sfailed (a fault: Airflow retries the task): %s (the traceback: PIPELINE_LOG_LEVEL=DEBUG)",
                      whose(), disk_full(err) or headline(err))
            log.debug("the traceback of that failure", exc_info=True)
            sys.exit(1)
        _not_retried("data error", problem, DATA_ERROR_EXIT)


def whose(argv: list[str] | None = None) -> str:
    """Whose failure, to open its line: the pipeline (a DAG's job knows it, ``$PIPELINE_NAME``) and
    the day (the job's ``--run-date``); empty when neither is known."""
    args = sys.argv if argv is None else argv
    parts = [f"pipeline {name}"] if (name := os.environ.get(PIPELINE_NAME_ENV)) else []
    if "--run-date" in args[:-1]:
        parts.append(f"day {args[args.index('--run-date') + 1]}")
    return f"{', '.join(parts)}: " if parts else ""


def _not_retried(kind: str, problem: str, status: int) -> None:
    """Log ``problem`` (its details first, then one line), record it for the Airflow operator, exit."""
    summary, _, details = problem.partition("\n")
    if details.strip():  # the details first: the log's last line is the problem, in one line
        log.error("%s, in detail:\n%s", kind, details)
        summary += " (in detail above)"
    log.error("%s%s (not retried): %s", whose(), kind, summary)
    log.debug("the traceback of that %s", kind, exc_info=True)
    if path := os.environ.get(ERROR_FILE_ENV):
        with open(path, "w", encoding="utf-8") as out:
            out.write(problem)
    sys.exit(status)

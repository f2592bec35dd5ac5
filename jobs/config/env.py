"""What the jobs read from their environment beside the config: the MLflow store's locations, user
code named in the config, and a window's days."""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import os
from collections.abc import Callable, Iterator
from typing import Any

from jobs.lake.layout import pipeline_home


def import_object(ref: str) -> Callable[..., Any]:
    """Import ``package.module:attribute``, the form config uses to name user code."""
    module, _, attr = ref.partition(":")
    if not attr:
        raise ValueError(f"expected 'module:attribute', got {ref!r}")
    return getattr(importlib.import_module(module), attr)


PIPELINE_NAME_ENV = "PIPELINE_NAME"  # set by the DAGs for the jobs they run (orchestration.pipelines.job_env)


def pipeline_name() -> str | None:
    """The pipeline this job runs for, when a DAG started it (``$PIPELINE_NAME``)."""
    return os.environ.get(PIPELINE_NAME_ENV) or None


def dag_id(stage: str) -> str:
    """The DAG of ``stage`` (``ingest``, ``score``, ``train``) of the pipeline this job runs for, for
    messages that say what to trigger (``<pipeline>_<stage>`` when the job was not started by a DAG)."""
    return f"{pipeline_name() or '<pipeline>'}_{stage}"


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{pipeline_home() / 'mlflow.db'}"


def artifact_root() -> str:
    return os.environ.get("PIPELINE_MLFLOW_ARTIFACTS") or str(pipeline_home() / "mlartifacts")


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """Set these environment variables for the block (and the processes it starts), then put back
    what was there before, unset ones unset again."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def days_ending(run_date: dt.date, days: int) -> list[dt.date]:
    """The ``days`` consecutive dates that end with ``run_date``, oldest first."""
    if days < 1:
        raise ValueError(f"a window needs at least one day, got {days}")
    return [run_date - dt.timedelta(days=n) for n in range(days - 1, -1, -1)]

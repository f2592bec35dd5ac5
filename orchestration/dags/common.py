"""What every pipeline DAG shares: its id, doc, tags and run settings, and the ``run_date`` param.

Each call makes new objects: two DAGs never share a ``Param`` (a value set on one would show in the
other's trigger form).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pendulum
from airflow.sdk import Param

from orchestration.pipelines import dag_ids, described
from orchestration.spark_jobs import DEFAULT_ARGS

if TYPE_CHECKING:
    from jobs.config.pipelines import Pipeline


def run_date_param(description: str) -> Param:
    """The ``run_date`` param every DAG takes: a day, empty by default."""
    return Param(None, type=["null", "string"], format="date", description=description)


def dag_settings(pipeline: Pipeline, stage: str, doc: str, tag: str) -> dict[str, Any]:
    """The DAG's keyword arguments common to every stage of ``pipeline``: its id, ``doc`` made the
    pipeline's, its tags, one run at a time (no two runs write the same partition at once), no
    catch-up (history comes in by an explicit backfill), the shared ``DEFAULT_ARGS``."""
    return {
        "dag_id": dag_ids(pipeline.name)[stage],
        "doc_md": described(pipeline, doc),
        "start_date": pendulum.datetime(2013, 1, 1, tz="UTC"),
        "catchup": False,
        "max_active_runs": 1,
        "default_args": DEFAULT_ARGS,
        "tags": ["mlops", tag, f"pipeline:{pipeline.name}"],
    }

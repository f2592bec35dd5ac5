"""Every pipeline's DAGs, built from its folder: ``<name>_ingest``, ``<name>_score``, ``<name>_train``.

``dags/pipeline_dags.py`` calls :func:`build_all` for the pipelines a deployment serves
(:func:`jobs.config.pipelines.discover`); adding a pipeline adds a folder and touches nothing in
``dags/``. A pipeline whose config does not load still gets its DAGs, each saying why at the top of
its doc, tagged ``config-error`` and paused, and every run of them fails at its first task with the
same message; the parse warns naming it. The other pipelines are served as usual.
"""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING

from orchestration.dags.ingest import ingest_dag
from orchestration.dags.score import score_dag
from orchestration.dags.train import train_dag

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from jobs.config.pipelines import Pipeline

log = logging.getLogger(__name__)
BROKEN_TAG = "config-error"


def pipeline_dags(pipeline: Pipeline) -> list[DAG]:
    """The three DAGs of ``pipeline``."""
    dags = [build(pipeline) for build in (ingest_dag, score_dag, train_dag)]
    if pipeline.error:
        for dag in dags:
            dag.tags = sorted({*dag.tags, BROKEN_TAG})
            dag.is_paused_upon_creation = True
            dag.description = f"NOT SERVED: pipeline {pipeline.name!r}'s config does not load (see the doc)"
    return dags


def build_all(pipelines: list[Pipeline] | None = None) -> dict[str, DAG]:
    """Every pipeline's DAGs by id (default: the pipelines found, :func:`jobs.config.pipelines.discover`)."""
    from jobs.config.pipelines import discover

    found = discover() if pipelines is None else pipelines
    for pipeline in found:
        if pipeline.error:
            message = f"pipeline {pipeline.name!r} is not served: {pipeline.error}"
            log.error(message)
            warnings.warn(message, UserWarning, stacklevel=2)
    return {dag.dag_id: dag for pipeline in found for dag in pipeline_dags(pipeline)}

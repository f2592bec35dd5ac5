"""A pipeline as its DAGs' tasks see it: its config, its lake, its Assets and its jobs' environment.

The DAGs of every pipeline are built by :mod:`orchestration.pipeline_dags`; their tasks get the
:class:`~jobs.config.pipelines.Pipeline` they belong to and reach everything through it, so that no
task of one pipeline reads another's lake, config or Assets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk.exceptions import AirflowFailException

from jobs.config.pipelines import Pipeline

if TYPE_CHECKING:
    import datetime as dt

    from jobs.config import FeedCalendar, PipelineConfig
    from jobs.lake.layout import Lake

NAME_ENV = "PIPELINE_NAME"  # a job's pipeline, for its messages


def lake_of(pipeline: Pipeline) -> Lake:
    """The pipeline's lake: ``$LAKE_ROOT/<name>`` of the process the task runs in."""
    from jobs.lake.layout import Lake

    return Lake.at(pipeline.lake_root(Lake.at().root))


def config_of(pipeline: Pipeline) -> PipelineConfig:
    """The pipeline's config; a config that does not load fails the task at once (a retry cannot
    fix it), naming the pipeline."""
    from jobs.config import ConfigError

    try:
        return pipeline.config()
    except ConfigError as err:
        message = str(err) if str(err).startswith(f"pipeline {pipeline.name!r}") else \
            f"pipeline {pipeline.name!r}: {err}"
        raise AirflowFailException(f"{message} (not retried: fix the pipeline's files)") from err


def calendar_of(pipeline: Pipeline, last: dt.date | None = None) -> FeedCalendar:
    """The pipeline's ``feed_calendar``, its empty days up to ``last`` closed when it has
    ``empty_days`` (the raw partitions landed without rows, as every job sees them)."""
    from jobs.config import with_empty_days

    return with_empty_days(config_of(pipeline), lake_of(pipeline), last).feed_calendar


def job_env(pipeline: Pipeline) -> dict[str, str]:
    """What a Spark job of the pipeline is pointed with: its config, its lake and its name."""
    from jobs.config.files import CONFIG_ENV
    from jobs.lake.layout import ROOT_ENV

    return {CONFIG_ENV: pipeline.source, ROOT_ENV: lake_of(pipeline).root, NAME_ENV: pipeline.name}


def dag_ids(name: str) -> dict[str, str]:
    """The pipeline's DAG ids, by stage."""
    return {stage: f"{name}_{stage}" for stage in ("ingest", "score", "train")}


def described(pipeline: Pipeline, doc: str) -> str:
    """A DAG's ``doc_md`` for ``pipeline``: ``doc`` with ``<pipeline>_`` and the Assets made the pipeline's,
    under a banner with the pipeline's error when its config does not load."""
    doc = doc.replace("<pipeline>_", f"{pipeline.name}_")
    for kind in ("features", "scoring_drift", "champion_model", "model_decay"):
        doc = doc.replace(f"`{kind}` Asset", f"`{pipeline.name}_{kind}` Asset")
    head = f"**Pipeline `{pipeline.name}`** ({pipeline.source})\n\n"
    if pipeline.error:
        head += f"**Not served: its config does not load.** {pipeline.error}\n\n"
    return head + doc

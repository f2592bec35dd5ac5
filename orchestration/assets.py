"""Each pipeline's Assets: which of its DAGs updates which, with what in the event's ``extra``.

Every pipeline has four, named after it (:func:`pipeline_assets`), so that an event of one pipeline
never starts another's DAGs. Who writes what (one owner per lake partition), for a pipeline ``N``:
- ``N_ingest`` is the only writer of ``validated/`` and ``features/``; each run updates
  ``N_features`` with the days it built in the event's ``extra``.
- ``N_score`` runs on ``N_features`` (and on ``N_champion_model``: a new champion re-scores the day
  it was trained up to), writes ``predictions/`` for those days and updates ``N_scoring_drift`` for
  a day that drifted.
- ``N_score`` also judges the served predictions on their outcomes (the monitor) and updates
  ``N_model_decay`` when the champion's realized quality decayed.
- ``N_train`` runs weekly, on ``N_scoring_drift`` or on ``N_model_decay``, reads the feature
  partitions of its window and writes none; a version that is promoted (by the gate, or by a person
  when the run requires approval) updates ``N_champion_model``.

Plain Assets with the days in the event's ``extra``, not Airflow's partitioned assets: an event
that carries a partition key never queues a DAG that is not partition-aware
(``AssetManager._queue_dagruns``), and every outlet event of a partitioned run carries the run's
key, so a partitioned scoring run could not start the weekly-or-on-drift training DAG (an
``AssetOrTimeSchedule``, which is not partition-aware).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow.sdk import Asset


@dataclass(frozen=True)
class PipelineAssets:
    """A pipeline's Assets: built features, a drifted day, a new champion, a decayed champion."""

    features: Asset
    drift: Asset
    champion: Asset
    decay: Asset


def pipeline_assets(name: str) -> PipelineAssets:
    """The Assets of the pipeline ``name``."""

    def asset(kind: str, path: str) -> Asset:
        return Asset(name=f"{name}_{kind}", uri=f"lakeflow://{name}/{path}")

    return PipelineAssets(features=asset("features", "features"), drift=asset("scoring_drift", "reports/drift"),
                          champion=asset("champion_model", "models/champion"),
                          decay=asset("model_decay", "monitoring/decay"))


def asset_events(events: Any, asset: Asset) -> list[Any]:
    """The events of ``asset`` among a run's triggering events (none: [])."""
    try:
        return list(events[asset]) if events else []
    except KeyError:
        return []


def asset_extras(events: Any, asset: Asset) -> list[dict[str, Any]]:
    """The ``extra`` of each event of ``asset`` among a run's triggering events (none: [])."""
    return [dict(event.extra or {}) for event in asset_events(events, asset)]


# ---- decisions, as plain functions ------------------------------------------------------------

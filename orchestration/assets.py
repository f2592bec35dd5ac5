"""The pipeline's Assets: which DAG updates which, with what in the event's ``extra``.

Who writes what (one owner per lake partition):
- ``ingest_pipeline`` is the only writer of ``validated/`` and ``features/``; each run updates
  :data:`FEATURES` with the days it built in the event's ``extra``.
- ``score_pipeline`` runs on :data:`FEATURES` (and on :data:`CHAMPION`: a new champion re-scores
  the day it was trained up to), writes ``predictions/`` for those days and updates :data:`DRIFT`
  for a day that drifted.
- ``score_pipeline`` also judges the served predictions on their outcomes (the monitor) and
  updates :data:`DECAY` when the champion's realized quality decayed.
- ``train_pipeline`` runs weekly, on :data:`DRIFT` or on :data:`DECAY`, reads the feature partitions of its window
  and writes none; a version that is promoted (by the gate, or by a person when the run requires
  approval) updates :data:`CHAMPION`.

Plain Assets with the days in the event's ``extra``, not Airflow's partitioned assets: an event
that carries a partition key never queues a DAG that is not partition-aware
(``AssetManager._queue_dagruns``), and every outlet event of a partitioned run carries the run's
key, so a partitioned scoring run could not start the weekly-or-on-drift training DAG (an
``AssetOrTimeSchedule``, which is not partition-aware).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Asset

FEATURES = Asset(name="features", uri="lakeflow://features")
DRIFT = Asset(name="scoring_drift", uri="lakeflow://reports/drift")
CHAMPION = Asset(name="champion_model", uri="lakeflow://models/champion")
DECAY = Asset(name="model_decay", uri="lakeflow://monitoring/decay")


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

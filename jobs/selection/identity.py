"""Which MLflow runs belong to one training: the runs the bar, the comparison table and the sweep's
choice may compare.

Every run of a training (its baselines, its sweep's candidates, the run that is registered)
carries three tags:

- ``training_id``: the training it is part of: ``<pipeline>_train``'s DAG run (``plan_training``),
  the replay's model selection of a window, or ``--training-id`` of the jobs;
- ``config_fingerprint``: a digest of what the config decides about a comparison: the features
  (inputs, label), the window's lengths, the category cut, the promotion metric, the evaluation
  report's settings and the baselines; not what candidates vary (epochs, learning rate, layers) nor
  where a version goes (model and experiment names);
- ``data_fingerprint``: a digest of the window's feature partitions (training, validation and
  holdout days): each day with the names of its data files. The features job writes new file
  names whenever it rewrites a day, so a rebuilt window is another data version; the digest does
  not depend on where the lake is mounted (the replay's policies see the shared features through
  links).

A lookup matches all three tags of the run in hand (:func:`run_filter`); a run without them (one
logged before they existed) never matches.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.config import PipelineConfig

TRAINING_ID, CONFIG_FINGERPRINT, DATA_FINGERPRINT = "training_id", "config_fingerprint", "data_fingerprint"
IDENTITY = (TRAINING_ID, CONFIG_FINGERPRINT, DATA_FINGERPRINT)


def training_id(value: str) -> str:
    """``value`` as a tag that an MLflow filter string can quote: characters other than letters,
    digits and ``_ - . : / + @`` become ``_`` (an Airflow run id keeps its shape)."""
    return re.sub(r"[^A-Za-z0-9_.:/+@-]", "_", value)


def config_fingerprint(config: PipelineConfig) -> str:
    """The digest of what ``config`` decides about comparing runs (see the module docstring)."""
    train = config.train
    evaluation = {k: v for k, v in dataclasses.asdict(config.evaluation).items() if k != "plots"}  # pictures only
    decides = {
        "dataset": config.dataset, "features": dataclasses.asdict(config.features),
        "window": [train.train_days, train.max_train_days, train.validation_days, train.holdout_days],
        "min_category_count": train.min_category_count, "promotion_metric": train.promotion_metric,
        "evaluation": evaluation, "baselines": [dataclasses.asdict(spec) for spec in config.baselines],
    }
    return hashlib.sha256(json.dumps(decides, sort_keys=True, default=str).encode()).hexdigest()[:16]


def data_fingerprint(spark: SparkSession, partition_dirs: list[str]) -> str:
    """The digest of these feature partitions: each folder's name (``date=D``) and the names of
    its data files (hidden and ``_`` files left out, as Spark leaves them out)."""
    from jobs.lake.files import list_entries

    digest = hashlib.sha256()
    for folder in sorted(partition_dirs, key=lambda path: path.rstrip("/").rsplit("/", 1)[-1]):
        files = sorted(name for name, is_dir in list_entries(spark, folder)
                       if not is_dir and not name.startswith(("_", ".")))
        digest.update(json.dumps([folder.rstrip("/").rsplit("/", 1)[-1], files]).encode())
    return digest.hexdigest()[:16]


def identity_tags(config: PipelineConfig, data: str, training: str | None) -> dict[str, str]:
    """The tags a run of this training carries: no ``training_id`` when ``training`` is None (a
    job run on its own: its runs are compared with none)."""
    tags = {CONFIG_FINGERPRINT: config_fingerprint(config), DATA_FINGERPRINT: data}
    if training:
        tags[TRAINING_ID] = training_id(training)
    return tags


def identity_of(tags: dict[str, str]) -> dict[str, str] | None:
    """The identity tags of a run, None unless it has all three."""
    found = {key: tags.get(key) for key in IDENTITY}
    return found if all(found.values()) else None  # type: ignore[return-value]


def run_filter(identity: dict[str, str]) -> str:
    """The MLflow search clause that matches the runs of ``identity`` only."""
    return " and ".join(f"tags.{key} = '{identity[key]}'" for key in IDENTITY)


def same_identity(run: Any, identity: dict[str, str]) -> bool:
    """Whether an MLflow run carries ``identity`` (a second check beside the search filter)."""
    return all(run.data.tags.get(key) == value for key, value in identity.items())

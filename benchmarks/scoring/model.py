"""The model the scoring benchmarks score with: small, trained in this process on January's
features, logged, registered and resolved as the score job resolves a model (:func:`registered_model`)."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

import numpy as np

from jobs.config import days_ending

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.lake.layout import Lake
    from jobs.model.tabular import Preprocessor
    from jobs.tracking import ModelRef

TRAIN_DAYS = days_ending(dt.date(2013, 1, 31), 31)
TRAIN_STEPS = 300


def registered_model(
    spark: SparkSession, lake: Lake, config: Any, days: list[dt.date] = TRAIN_DAYS, name: str | None = None,
) -> tuple[Preprocessor, dict[str, Any], ModelRef, str]:
    """:func:`train_model` on ``days`` then :func:`log_model` under ``name`` (default
    ``train.model_name``): (the preprocessor, the hyperparameters, the version, where workers load it)."""
    net, pre, hyper, frame = train_model(spark, lake, config, days)
    return (pre, hyper, *log_model(net, pre, hyper, frame, name or config.train.model_name))


def train_model(
    spark: SparkSession, lake: Lake, config: Any, days: list[dt.date] = TRAIN_DAYS,
) -> tuple[Any, Preprocessor, dict[str, Any], Any]:
    """A small model on ``days`` of features (default January): (net, preprocessor, hyperparameters,
    a pandas example)."""
    import torch
    from pyspark.sql import functions as F

    from jobs.model.tabular import build_model
    from jobs.training.data import fit_preprocessor
    from jobs.training.steps import batch_loss

    spec, cfg = config.features, config.train
    features = spark.read.option("basePath", lake.features).parquet(
        *[lake.partition(lake.features, d) for d in days])
    pre = fit_preprocessor(features, spec, cfg.min_category_count)
    frame = features.where(F.col(spec.label).isNotNull()).toPandas()
    cats, nums = (torch.from_numpy(a) for a in pre.encode(frame))
    labels = torch.from_numpy(frame[spec.label].to_numpy(np.float32))
    hyper = dict(cfg.hyperparameters)
    torch.manual_seed(cfg.seed)
    net = build_model(cfg.model, pre, hyper)
    optimizer = torch.optim.Adam(net.parameters(), lr=cfg.learning_rate)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    generator = torch.Generator().manual_seed(cfg.seed)
    net.train()
    for _ in range(TRAIN_STEPS):
        batch = torch.randint(0, len(labels), (cfg.batch_size,), generator=generator)
        optimizer.zero_grad()
        batch_loss(loss_fn, net(cats[batch], nums[batch]), labels[batch]).backward()
        optimizer.step()
    net.eval()
    return net, pre, hyper, frame


def log_model(net: Any, pre: Preprocessor, hyper: dict[str, Any], frame: Any, name: str) -> tuple[ModelRef, str]:
    """Log, register and resolve the model as the score job does: (its version, where workers load it)."""
    import mlflow

    from jobs.model.tabular import log_pyfunc
    from jobs.scoring.predictor import resolve_model
    from jobs.tracking import ensure_experiment

    with mlflow.start_run(experiment_id=ensure_experiment("bench-scoring")):
        info = log_pyfunc(net, pre, hyper, frame.head(5))
    version = mlflow.register_model(info.model_uri, name).version
    return resolve_model(name, str(version))

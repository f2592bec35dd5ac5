"""Holdout metrics of a binary classifier: the numbers training logs and the champion gate compares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def calibration_bins(
    labels: Sequence[float], probabilities: Sequence[float], bins: int = 10
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per bin of equal mass (probability quantiles): (mean predicted, observed rate, row count).

    Bins that tie (many equal probabilities) merge; empty bins are left out.
    """
    y, p = np.asarray(labels, dtype=np.float64), np.asarray(probabilities, dtype=np.float64)
    if len(p) == 0:
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=np.int64)
    edges = np.unique(np.quantile(p, np.linspace(0, 1, bins + 1)))
    which = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, max(len(edges) - 2, 0))
    counts = np.bincount(which, minlength=max(len(edges) - 1, 1))
    used = counts > 0
    predicted = np.bincount(which, weights=p, minlength=len(counts))[used] / counts[used]
    observed = np.bincount(which, weights=y, minlength=len(counts))[used] / counts[used]
    return predicted, observed, counts[used]


def expected_calibration_error(labels: Sequence[float], probabilities: Sequence[float], bins: int = 10) -> float:
    """Row-weighted mean gap between predicted probability and observed rate over the bins
    of :func:`calibration_bins`: 0 for a perfectly calibrated model, lower is better."""
    predicted, observed, counts = calibration_bins(labels, probabilities, bins)
    if counts.sum() == 0:
        return float("nan")
    return float(np.sum(counts * np.abs(predicted - observed)) / counts.sum())


def evaluate(labels: Sequence[float], probabilities: Sequence[float], days: Sequence[Any] | None = None
             ) -> dict[str, float]:
    """Holdout metrics; the AUCs are NaN when the holdout has a single class. With ``days`` (each
    row's day), also ``daily_roc_auc`` (:func:`daily_roc_auc`). The ranking and loss metrics are the
    monitor's (:func:`jobs.monitoring.quality.point_metrics`), numpy only: a training rank evaluates
    every epoch, and scikit-learn's import is a second of its start (the test holds each metric to
    scikit-learn's)."""
    from jobs.monitoring.quality import point_metrics

    nan = float("nan")
    y = np.asarray(labels, dtype=np.float64)
    p = np.clip(np.asarray(probabilities, dtype=np.float64), 1e-7, 1 - 1e-7)
    both = len(np.unique(y)) == 2
    found = point_metrics(p, y)  # an undefined metric left out
    daily = {} if days is None else {"daily_roc_auc": daily_roc_auc(days, y, p)}
    return {
        "log_loss": found.get("log_loss", nan),
        "roc_auc": found["roc_auc"] if both else nan,
        "pr_auc": found["pr_auc"] if both else nan,
        "brier": found.get("brier", nan),
        "ece": expected_calibration_error(y, p),
        "accuracy": float(np.mean((p >= 0.5) == (y == 1.0))),
        "positive_rate": float(np.mean(y)),
        "rows": float(len(y)),
        **daily,
    }


def roc_auc(labels: Any, scores: Any) -> float:
    """The ROC AUC of 0/1 ``labels`` (both present) by ``scores``, tied scores counting half: the
    monitor's weighted one (:func:`jobs.monitoring.quality.roc_auc`) with every row weighing one."""
    from jobs.monitoring.quality import roc_auc as weighted

    y = np.asarray(labels, dtype=np.float64)
    return float(weighted(np.asarray(scores, dtype=np.float64), y, np.ones((1, len(y))))[0])


def days_of(rows: Any) -> Any:
    """Each row's day, the partition column (:data:`jobs.lake.layout.PARTITION`) that
    ``jobs.selection.bar.read_rows`` reads with the rows; None for rows without it: what
    :func:`evaluate` takes as ``days``."""
    from jobs.lake.layout import PARTITION

    return rows[PARTITION] if PARTITION in rows.columns else None


def daily_roc_auc(days: Sequence[Any], labels: Sequence[float], probabilities: Sequence[float]) -> float:
    """The ROC AUC of each day's rows, averaged with the days' labelled rows as weights (days of a
    single class left out; NaN when every day is): how well a model ranks the flights *within* a
    day, the measure the replay and the monitor judge served days by. The ROC AUC of the pooled days
    also credits ranking one day above another (a stormy day's flights all above a calm day's),
    which no day's own ranking uses."""
    import pandas as pd

    frame = pd.DataFrame({"day": np.asarray(days), "y": np.asarray(labels, dtype=np.float64),
                          "p": np.asarray(probabilities, dtype=np.float64)})
    scores, weights = [], []
    for _, rows in frame.groupby("day", sort=True):
        if rows["y"].nunique() == 2:
            scores.append(roc_auc(rows["y"].to_numpy(), rows["p"].to_numpy()))
            weights.append(len(rows))
    return float(np.average(scores, weights=weights)) if scores else float("nan")

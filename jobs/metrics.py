"""The metric catalogue: every metric of a binary classifier the pipeline computes, its direction
and how it is computed, one place for training, the bar, the gate, the monitor, decay and the
summary. Every computing function takes the labels first, then the probabilities (then weights).

Each metric is written once for weighted rows (:func:`weighted_metrics`): a (resamples x rows)
weight matrix gives all of a bootstrap's resamples at once, weight 1 the point value (equal to
scikit-learn's on the same rows: tested).

- ROC AUC: the weighted share of (positive, negative) pairs ranked right, ties counting half;
  ``daily_roc_auc``: each day's, averaged by its rows;
- PR AUC: average precision (scikit-learn's step-wise definition, no interpolation);
- log loss and Brier: the means, probabilities clipped to [EPS, 1 - EPS];
- ECE: the mean gap between predicted and observed rate over equal-mass bins
  (:func:`calibration_bins`); a resample keeps the rows' bins (its weights move, its edges do not);
- accuracy at 0.5, the positive rate, the mean prediction and the outcome rate: the means.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

EPS = 1e-7  # probabilities are clipped to [EPS, 1 - EPS] for the log loss and the Brier score


@dataclass(frozen=True)
class Metric:
    """A metric: its name, whether a lower value is better (None: neither, a rate), what it means."""

    name: str
    lower_is_better: bool | None
    meaning: str


CATALOGUE: dict[str, Metric] = {m.name: m for m in (
    Metric("roc_auc", False, "ROC AUC: the share of (positive, negative) pairs ranked right"),
    Metric("daily_roc_auc", False, "each day's ROC AUC, averaged by the days' rows"),
    Metric("pr_auc", False, "average precision"),
    Metric("log_loss", True, "mean binary log loss"),
    Metric("brier", True, "mean squared error of the probabilities"),
    Metric("ece", True, "expected calibration error over equal-mass bins"),
    Metric("accuracy", False, "share of rows right at the 0.5 threshold"),
    Metric("positive_rate", None, "share of positive labels"),
    Metric("mean_prediction", None, "mean probability"),
    Metric("outcome_rate", None, "share of positive outcomes"),
)}
LOWER_IS_BETTER = frozenset(name for name, m in CATALOGUE.items() if m.lower_is_better)
HOLDOUT = ("roc_auc", "pr_auc", "log_loss", "brier", "ece", "accuracy", "positive_rate")  # a training's report
REALIZED = ("roc_auc", "pr_auc", "log_loss", "brier", "ece", "mean_prediction", "outcome_rate")  # a served day's


def better(metric: str, value: float, than: float) -> float:
    """How much ``value`` beats ``than`` in ``metric``'s direction (negative: worse)."""
    return than - value if metric in LOWER_IS_BETTER else value - than


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
    row's day), also ``daily_roc_auc`` (:func:`daily_roc_auc`). The ranking and loss metrics are
    :func:`point_metrics`, numpy only: a training rank evaluates every epoch, and scikit-learn's
    import is a second of its start (the test holds each metric to scikit-learn's)."""
    nan = float("nan")
    y = np.asarray(labels, dtype=np.float64)
    p = np.clip(np.asarray(probabilities, dtype=np.float64), EPS, 1 - EPS)
    both = len(np.unique(y)) == 2
    found = point_metrics(y, p)  # an undefined metric left out
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
    """The ROC AUC of 0/1 ``labels`` (both present) by ``scores``, tied scores counting half:
    :func:`weighted_roc_auc` with every row weighing one."""
    y = np.asarray(labels, dtype=np.float64)
    return float(weighted_roc_auc(y, np.asarray(scores, dtype=np.float64), np.ones((1, len(y))))[0])


def _grouped(y: np.ndarray, p: np.ndarray, weights: np.ndarray, descending: bool = False,
             ) -> tuple[np.ndarray, np.ndarray]:
    """Positive and negative weight per group of tied probabilities, groups in order of ``p``
    (ascending, or descending): two (resamples x groups) arrays."""
    order = np.argsort(-p if descending else p, kind="stable")
    ps = p[order]
    starts = np.flatnonzero(np.r_[True, ps[1:] != ps[:-1]])
    w = weights[:, order]
    ys = y[order]
    return np.add.reduceat(w * ys, starts, axis=1), np.add.reduceat(w * (1.0 - ys), starts, axis=1)


def weighted_roc_auc(y: np.ndarray, p: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted ROC AUC per row of ``weights`` (NaN where a resample lacks a class)."""
    pos, neg = _grouped(y, p, weights)
    below = np.cumsum(neg, axis=1) - neg
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sum(pos * (below + 0.5 * neg), axis=1) / (pos.sum(axis=1) * neg.sum(axis=1))


def weighted_pr_auc(y: np.ndarray, p: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted average precision per row of ``weights`` (NaN where a resample lacks a class)."""
    pos, neg = _grouped(y, p, weights, descending=True)
    tp, fp = np.cumsum(pos, axis=1), np.cumsum(neg, axis=1)
    total_pos, total_neg = tp[:, -1], fp[:, -1]
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(tp + fp > 0, tp / np.where(tp + fp > 0, tp + fp, 1.0), 0.0)
        ap = np.sum(pos * precision, axis=1) / total_pos
    return np.where((total_pos > 0) & (total_neg > 0), ap, np.nan)


def ece_bins(p: np.ndarray, bins: int = 10) -> np.ndarray:
    """Each row's bin, as :func:`calibration_bins` assigns it (equal mass, ties merged)."""
    edges = np.unique(np.quantile(p, np.linspace(0, 1, bins + 1)))
    return np.clip(np.searchsorted(edges, p, side="right") - 1, 0, max(len(edges) - 2, 0))


def weighted_ece(y: np.ndarray, p: np.ndarray, weights: np.ndarray, which: np.ndarray) -> np.ndarray:
    """Weighted expected calibration error per row of ``weights`` over the bins ``which``."""
    k = int(which.max()) + 1 if len(which) else 1
    onehot = np.zeros((len(p), k))
    onehot[np.arange(len(p)), which] = 1.0
    gap = np.abs((weights * p) @ onehot - (weights * y) @ onehot)
    return gap.sum(axis=1) / weights.sum(axis=1)


def weighted_metrics(y: np.ndarray, p: np.ndarray, weights: np.ndarray, calibration_bins: int = 10
                     ) -> dict[str, np.ndarray]:
    """Every metric of :data:`REALIZED` per row of ``weights`` (a resample's counts, or ones)."""
    clipped = np.clip(p, EPS, 1 - EPS)
    total = weights.sum(axis=1)
    loss = -(y * np.log(clipped) + (1 - y) * np.log(1 - clipped))
    return {
        "roc_auc": weighted_roc_auc(y, p, weights),
        "pr_auc": weighted_pr_auc(y, p, weights),
        "log_loss": (weights @ loss) / total,
        "brier": (weights @ (clipped - y) ** 2) / total,
        "ece": weighted_ece(y, p, weights, ece_bins(p, calibration_bins)),
        "mean_prediction": (weights @ p) / total,
        "outcome_rate": (weights @ y) / total,
    }


def point_metrics(labels: Any, probabilities: Any, calibration_bins: int = 10) -> dict[str, float]:
    """The metrics of :data:`REALIZED` of these rows (no interval); an undefined one is left out."""
    y, p = np.asarray(labels, dtype=np.float64), np.asarray(probabilities, dtype=np.float64)
    if len(p) == 0:
        return {}
    found = weighted_metrics(y, p, np.ones((1, len(p))), calibration_bins)
    return {name: float(values[0]) for name, values in found.items() if math.isfinite(values[0])}


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

"""Temperature scaling: one logit scale per model version, fitted on its validation days.

A model trained on a window of days is over-confident when delays shift after it: its
probabilities sit too close to 0 and 1. ``p' = sigmoid(a * logit(p))`` with one scale ``a``
fitted by minimising the log loss on the validation days (:func:`fit_scale`) pulls them in
(``a < 1``) or pushes them out (``a > 1``) without an intercept, which would chase the validation
days' own base rate. It is monotone, so a model's ranking (ROC AUC, PR AUC) and the gate's choice
by them are unchanged. Every family's pyfunc stores the scale as :data:`CALIBRATION_FILE` and
applies it (:func:`apply_scale`); a model logged without one reads 1.0 (:func:`read_scale`) and
predicts exactly as before. Only numpy here: the module ships with every logged model.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

CALIBRATION_FILE = "calibration.json"  # a pyfunc artifact: the record of :func:`calibrate`
SCALE_BOUNDS = (0.25, 4.0)  # the scale searched: beyond these a model's validation days say too much
MIN_ROWS = 100  # fewer validation rows leave the scale at 1.0
LOGIT_EPS = 1e-12  # probabilities clipped into [eps, 1 - eps] before their logit: 0 and 1 stay finite
LOSS_EPS = 1e-7  # the log loss's clipping, as jobs.metrics.evaluate's


def logit(probabilities: Any) -> np.ndarray:
    """log(p / (1 - p)) of probabilities clipped into [LOGIT_EPS, 1 - LOGIT_EPS], float64."""
    p = np.clip(np.asarray(probabilities, dtype=np.float64), LOGIT_EPS, 1.0 - LOGIT_EPS)
    return np.log(p) - np.log1p(-p)


def sigmoid(z: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-z)) without overflow for large |z|."""
    out = np.empty_like(z)
    positive = z >= 0
    out[positive] = 1.0 / (1.0 + np.exp(-z[positive]))
    e = np.exp(z[~positive])
    out[~positive] = e / (1.0 + e)
    return out


def apply_scale(probabilities: Any, scale: float) -> np.ndarray:
    """``sigmoid(scale * logit(p))`` as float64; the probabilities themselves when ``scale`` is 1.0
    (a model without calibration predicts exactly as it always did)."""
    p = np.asarray(probabilities, dtype=np.float64)
    if scale == 1.0:
        return p
    return sigmoid(scale * logit(p))


def log_loss(labels: np.ndarray, probabilities: np.ndarray) -> float:
    """Mean binary log loss, probabilities clipped as :func:`jobs.metrics.evaluate` clips them."""
    p = np.clip(probabilities, LOSS_EPS, 1.0 - LOSS_EPS)
    return float(-np.mean(labels * np.log(p) + (1.0 - labels) * np.log1p(-p)))


def fit_scale(labels: Any, probabilities: Any, bounds: tuple[float, float] = SCALE_BOUNDS,
              tolerance: float = 1e-4) -> float:
    """The scale in ``bounds`` with the lowest log loss of ``sigmoid(a * logit(p))`` on these rows:
    a golden-section search (the loss is convex in ``a``), to within ``tolerance``."""
    y = np.asarray(labels, dtype=np.float64)
    z = logit(probabilities)

    def loss(a: float) -> float:
        return log_loss(y, sigmoid(a * z))

    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    lo, hi = bounds
    left, right = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    loss_left, loss_right = loss(left), loss(right)
    while hi - lo > tolerance:
        if loss_left <= loss_right:
            hi, right, loss_right = right, left, loss_left
            left = hi - ratio * (hi - lo)
            loss_left = loss(left)
        else:
            lo, left, loss_left = left, right, loss_right
            right = lo + ratio * (hi - lo)
            loss_right = loss(right)
    best = (lo + hi) / 2.0
    return 1.0 if loss(1.0) <= loss(best) else float(best)  # never worse than no scaling on these rows


def calibrate(method: str, labels: Any, probabilities: Any, min_rows: int = MIN_ROWS) -> dict[str, Any]:
    """The calibration record of a model from its validation rows' labels and probabilities:
    ``{"method", "logit_scale", "validation_rows", "log_loss_before", "log_loss_after"}``, and a
    ``reason`` when the scale is left at 1.0 without a fit (method ``none``, fewer than
    ``min_rows`` rows, one class only)."""
    from jobs.config.choices import CALIBRATIONS

    if method not in CALIBRATIONS:
        raise ValueError(f"calibration must be one of {', '.join(CALIBRATIONS)}, got {method!r}")
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(probabilities, dtype=np.float64)
    n = len(y)
    before = log_loss(y, p) if n else None
    record: dict[str, Any] = {"method": method, "logit_scale": 1.0, "validation_rows": n,
                              "log_loss_before": before, "log_loss_after": before}
    if method == "none":
        return {**record, "reason": "train.calibration is none"}
    if n < min_rows:
        return {**record, "reason": f"{n} validation rows, fewer than {min_rows}"}
    if len(np.unique(y)) < 2:
        return {**record, "reason": "the validation rows hold one class only"}
    scale = fit_scale(y, p)
    return {**record, "logit_scale": scale, "log_loss_after": log_loss(y, apply_scale(p, scale))}


def calibrate_rows(method: str, rows: Any, label: str, inputs: list[str], predict: Any) -> dict[str, Any]:
    """:func:`calibrate` on the validation ``rows`` (a pandas DataFrame of ``inputs`` and ``label``)
    with the uncalibrated model's ``predict`` (a frame of ``inputs`` in, probabilities out); the
    model is not asked when the method is ``none`` or there are no rows."""
    if method == "none" or len(rows) == 0:
        return calibrate(method, [], [])
    return calibrate(method, rows[label], predict(rows[inputs]))


def record_metrics(record: dict[str, Any]) -> dict[str, float]:
    """The record's numbers as MLflow metrics: ``calibration_logit_scale``,
    ``calibration_validation_rows``, ``calibration_log_loss_before`` and ``_after`` (when there were rows)."""
    keys = ("logit_scale", "validation_rows", "log_loss_before", "log_loss_after")
    return {f"calibration_{k}": float(record[k]) for k in keys if record.get(k) is not None}


def record_params(record: dict[str, Any]) -> dict[str, str]:
    """The record's words as MLflow params: ``calibration`` (the method) and ``calibration_note``
    (why the scale stayed 1.0, when it did without a fit)."""
    return {"calibration": record["method"], **({"calibration_note": record["reason"]} if "reason" in record else {})}


def save_record(record: dict[str, Any], folder: Path) -> dict[str, str]:
    """Write the record as :data:`CALIBRATION_FILE` under ``folder``; the pyfunc artifacts map entry."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CALIBRATION_FILE).write_text(json.dumps(record, sort_keys=True))
    return {CALIBRATION_FILE: str(folder / CALIBRATION_FILE)}


def read_scale(artifacts: dict[str, str]) -> float:
    """A loaded pyfunc's logit scale from its artifacts: 1.0 for a model logged without
    :data:`CALIBRATION_FILE` (every version logged before calibration existed)."""
    path = artifacts.get(CALIBRATION_FILE)
    if path is None:
        return 1.0
    return float(json.loads(Path(path).read_text())["logit_scale"])

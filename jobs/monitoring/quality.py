"""A monitored day's quality, on the driver with numpy: the realized metrics of a model's
predictions on their outcomes, each with a seeded bootstrap 95% interval, and the estimate of ROC
AUC and log loss from the probabilities alone (confidence-based performance estimation, CBPE).

Every metric is the catalogue's (:mod:`jobs.metrics`), written once for weighted rows: a bootstrap
resample is the same rows weighted by how often it drew each (a multinomial count), so all
``bootstrap`` resamples are computed at once as a (resamples x rows) weight matrix
(:func:`jobs.metrics.weighted_metrics`), and the point value is the same function with weight 1.

A metric that a day cannot define (an AUC with a single class among the outcomes) is left out,
never NaN. An interval is the 2.5 and 97.5 percentiles of the resamples that define the metric,
widened to include the point value when a skewed bootstrap misses it (tiny days). Arguments come
in the catalogue's order: the outcomes (the labels) first, then the probabilities.

The estimate (:func:`estimate`) treats each probability as the chance its row's outcome is 1: for
a calibrated model, the expected log loss is the mean binary entropy of the probabilities, and the
expected ROC AUC is the AUC with every row counted as a positive with weight p and as a negative
with weight 1 - p (pairs of a row with itself left out): the ratio of expected correctly ranked
pairs to expected pairs, NannyML's CBPE for ROC AUC in closed form. Once the outcomes are in, the
realized value minus the estimate is the estimate's error: a model whose calibration drifted
shows it there first.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from jobs.metrics import EPS, REALIZED, point_metrics, weighted_metrics
from jobs.monitoring.decay import Z95

ESTIMATED = ("roc_auc", "log_loss")  # the metrics the estimate covers (the health page shows them)


def resample_weights(rows: int, resamples: int, seed: int) -> np.ndarray:
    """(resamples x rows) counts: how often each bootstrap resample drew each row (seeded)."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(rows, np.full(rows, 1.0 / rows), size=resamples).astype(np.float64)


def metrics_with_intervals(outcomes: Any, probabilities: Any, resamples: int, seed: int,
                           calibration_bins: int = 10) -> dict[str, dict[str, float]]:
    """``{metric: {"value", "low", "high"}}`` over rows with outcomes: the point value and its
    bootstrap 95% interval from ``resamples`` seeded resamples. Empty for no rows; a metric the
    rows cannot define (an AUC with one class) is left out."""
    p, y = np.asarray(probabilities, dtype=np.float64), np.asarray(outcomes, dtype=np.float64)
    if len(p) == 0:
        return {}
    point = point_metrics(y, p, calibration_bins)
    spread = weighted_metrics(y, p, resample_weights(len(p), resamples, seed), calibration_bins) if resamples > 0 \
        else {}
    out = {}
    for name in REALIZED:
        if name not in point:
            continue
        value = point[name]
        drawn = spread.get(name, np.zeros(0))
        drawn = drawn[np.isfinite(drawn)]
        low, high = (np.percentile(drawn, [2.5, 97.5]) if len(drawn) else (value, value))
        out[name] = {"value": value, "low": float(min(low, value)), "high": float(max(high, value))}
    return out


def paired_difference(outcomes: Any, challenger: Any, champion: Any, metric: str, resamples: int, seed: Any,
                      calibration_bins: int = 10) -> dict[str, float] | None:
    """``metric`` of the ``challenger``'s probabilities minus the ``champion``'s on the same rows
    and outcomes, with a paired bootstrap 95% interval: each resample draws rows, and both
    models are judged on the same draw, so the interval is that of the difference, not of two
    independent metrics. None when the rows cannot define the metric."""
    a, b = np.asarray(challenger, dtype=np.float64), np.asarray(champion, dtype=np.float64)
    y = np.asarray(outcomes, dtype=np.float64)
    if len(y) == 0:
        return None
    ones = np.ones((1, len(y)))
    value = float(weighted_metrics(y, a, ones, calibration_bins)[metric][0]
                  - weighted_metrics(y, b, ones, calibration_bins)[metric][0])
    if not math.isfinite(value):
        return None
    low = high = value
    if resamples > 0:
        weights = resample_weights(len(y), resamples, seed)
        drawn = weighted_metrics(y, a, weights, calibration_bins)[metric] \
            - weighted_metrics(y, b, weights, calibration_bins)[metric]
        drawn = drawn[np.isfinite(drawn)]
        if len(drawn):
            low, high = (float(x) for x in np.percentile(drawn, [2.5, 97.5]))
    return {"value": value, "low": min(low, value), "high": max(high, value)}


def estimate(probabilities: Any) -> dict[str, float]:
    """The expected ROC AUC and log loss of these predictions if they are calibrated (the module
    docstring says how); empty for no rows, ROC AUC left out when it is undefined (a single row)."""
    p = np.asarray(probabilities, dtype=np.float64)
    if len(p) == 0:
        return {}
    clipped = np.clip(p, EPS, 1 - EPS)
    found = {"log_loss": float(np.mean(-(clipped * np.log(clipped) + (1 - clipped) * np.log(1 - clipped))))}
    # Every row is a positive with weight p and a negative with weight 1 - p: the weighted AUC's
    # pairs of a row with itself (a tie, counted half) are taken out of both sums.
    order = np.argsort(p, kind="stable")
    ps = p[order]
    starts = np.flatnonzero(np.r_[True, ps[1:] != ps[:-1]])
    pos, neg = np.add.reduceat(ps, starts), np.add.reduceat(1.0 - ps, starts)
    below = np.cumsum(neg) - neg
    self_pairs = float(np.sum(p * (1.0 - p)))
    pairs = pos.sum() * neg.sum() - self_pairs
    if pairs > 0:
        found["roc_auc"] = float((np.sum(pos * (below + 0.5 * neg)) - 0.5 * self_pairs) / pairs)
    return found


def estimate_error(realized: dict[str, dict[str, float]], estimated: dict[str, float]) -> dict[str, float] | None:
    """Realized minus estimated, per estimated metric both have; None when neither has one."""
    error = {name: realized[name]["value"] - estimated[name] for name in ESTIMATED
             if name in realized and name in estimated}
    return error or None


def level_check(outcomes: Any, probabilities: Any, model_probabilities: Any, max_gap: float) -> dict[str, Any]:
    """Whether a day's served level was far from the truth: the mean served probability against
    the day's realized rate with its 95% interval (Wilson's), flagged when it lies outside the
    interval and further from the rate than ``max_gap``. ``model_probabilities``: the model's own,
    before the day's recent-outcome shift (None, or all NaN, for predictions that lack them): the
    shift's part of the level is the difference of the two means."""
    p, y = np.asarray(probabilities, dtype=np.float64), np.asarray(outcomes, dtype=np.float64)
    rows = len(y)
    predicted, realized = float(p.mean()), float(y.mean())
    z = Z95
    centre = (realized + z * z / (2 * rows)) / (1 + z * z / rows)
    half = z * math.sqrt(realized * (1 - realized) / rows + z * z / (4 * rows * rows)) / (1 + z * z / rows)
    low, high = max(0.0, centre - half), min(1.0, centre + half)
    gap = predicted - realized
    flagged = abs(gap) > max_gap and not low <= predicted <= high
    found: dict[str, Any] = {"predicted_rate": round(predicted, 6), "realized_rate": round(realized, 6),
                             "low": round(low, 6), "high": round(high, 6), "gap": round(gap, 6),
                             "max_gap": max_gap, "flagged": flagged}
    own = np.asarray(model_probabilities if model_probabilities is not None else [], dtype=np.float64)
    if own.size == rows and np.isfinite(own).all():
        found["model_rate"] = round(float(own.mean()), 6)
        found["shift_part"] = round(predicted - float(own.mean()), 6)
    if flagged:
        ratio = f", {predicted / realized:.1f} times the truth" if realized > 0 else ""
        shift = (f"; the day's recent-outcome shift moved it by {found['shift_part']:+.3f} from the model's own "
                 f"{found['model_rate']:.3f}" if found.get("shift_part") else "")
        found["reason"] = (f"served level {predicted:.3f} against a realized rate of {realized:.3f} (95% interval "
                           f"{low:.3f}..{high:.3f}){ratio}{shift}")
    return found

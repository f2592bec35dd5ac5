"""Figures a person looks at instead of reading numbers: logged with every training run.

Each function takes plain arrays and returns a matplotlib Figure (Agg backend, no display).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _figure() -> tuple[Figure, object]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5, 4), dpi=100, layout="constrained")
    return fig, fig.add_subplot()


def roc_figure(labels: Sequence[float], probabilities: Sequence[float]) -> Figure:
    """ROC curve with its AUC, against the diagonal of a random guess."""
    from sklearn.metrics import roc_auc_score, roc_curve

    fpr, tpr, _ = roc_curve(labels, probabilities)
    fig, ax = _figure()
    ax.plot(fpr, tpr, label=f"model (AUC {roc_auc_score(labels, probabilities):.3f})")
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="random")
    ax.set(xlabel="false positive rate", ylabel="true positive rate", title="ROC curve (holdout)")
    ax.legend(loc="lower right")
    return fig


def calibration_figure(labels: Sequence[float], probabilities: Sequence[float], bins: int = 10) -> Figure:
    """Observed rate of positives against mean predicted probability, per probability decile."""
    from jobs.metrics import calibration_bins

    predicted, observed, _ = calibration_bins(labels, probabilities, bins)
    fig, ax = _figure()
    ax.plot(predicted, observed, marker="o", label="model")
    top = max(float(np.max(predicted, initial=0.0)), float(np.max(observed, initial=0.0)), 0.05)
    ax.plot([0, top], [0, top], linestyle="--", color="grey", label="perfectly calibrated")
    ax.set(xlabel="mean predicted probability", ylabel="observed share of positives", title="Calibration (holdout)")
    ax.legend(loc="upper left")
    return fig


def loss_figure(history: dict[str, Sequence[float]]) -> Figure:
    """One line per series (e.g. train and holdout log loss) over epochs."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = _figure()
    for name, values in history.items():
        ax.plot(range(1, len(values) + 1), values, marker="o", label=name)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="epoch", ylabel="log loss", title="Loss by epoch")
    ax.legend()
    return fig

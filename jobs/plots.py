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


def pr_figure(labels: Sequence[float], probabilities: Sequence[float]) -> Figure:
    """Precision against recall, with the average precision, against the positives' share."""
    from sklearn.metrics import average_precision_score, precision_recall_curve

    precision, recall, _ = precision_recall_curve(labels, probabilities)
    fig, ax = _figure()
    ax.plot(recall, precision, label=f"model (AP {average_precision_score(labels, probabilities):.3f})")
    share = float(np.mean(np.asarray(labels, dtype=np.float64)))
    ax.axhline(share, linestyle="--", color="grey", label=f"random ({share:.2f})")
    ax.set(xlabel="recall", ylabel="precision", title="Precision-recall curve (holdout)", ylim=(0, 1.02))
    ax.legend(loc="upper right")
    return fig


def confusion_figure(counts: dict[str, float], threshold: dict[str, object]) -> Figure:
    """The 2x2 confusion matrix (rows: actual, columns: predicted) at the report's threshold."""
    cells = np.array([[counts["tn"], counts["fp"]], [counts["fn"], counts["tp"]]], dtype=np.float64)
    fig, ax = _figure()
    ax.imshow(cells, cmap="Blues")
    for (i, j), value in np.ndenumerate(cells):
        ax.text(j, i, f"{int(value):,}", ha="center", va="center",
                color="white" if value > cells.max() / 2 else "black")
    ax.set_xticks([0, 1], ["negative", "positive"])
    ax.set_yticks([0, 1], ["negative", "positive"])
    ax.set(xlabel="predicted", ylabel="actual",
           title=f"Confusion at {float(threshold['value']):.3f} ({threshold['policy']})")
    return fig


def segments_figure(rows: Sequence[dict]) -> Figure:
    """ROC AUC of each segment value, one panel per segment column, against the rows' count."""
    from matplotlib.figure import Figure

    columns = list(dict.fromkeys(row["segment"] for row in rows)) or ["(no segments)"]
    fig = Figure(figsize=(5, 2.2 * len(columns)), dpi=100, layout="constrained")
    for ax, column in zip(fig.subplots(len(columns), 1, squeeze=False)[:, 0], columns, strict=True):
        found = [row for row in rows if row["segment"] == column]
        aucs = [row["roc_auc"] if row["roc_auc"] is not None else np.nan for row in found]
        ax.bar([str(row["value"]) for row in found], aucs, color="tab:blue")
        ax.axhline(0.5, linestyle="--", color="grey")
        ax.set(ylabel="ROC AUC", title=f"by {column}", ylim=(0.3, 1.0))
        ax.tick_params(axis="x", labelrotation=90, labelsize=7)
    return fig

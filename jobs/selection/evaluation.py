"""The evaluation report of a candidate model, logged to its MLflow run under ``evaluation/``.

- ``report.json``: the threshold and how it was chosen, the holdout metrics (the same
  :func:`jobs.metrics.evaluate` the gate uses), the confusion matrix at the threshold, the
  validation metrics when there are validation days, and the metrics of every segment;
- ``segments.csv``: the segment table, for a spreadsheet;
- ``holdout_predictions.parquet``: every holdout row's segment columns, label and probability,
  from which every number of the report can be computed again (:func:`build_report`);
- plots: ROC and precision-recall curves, calibration, confusion matrix, ROC AUC by segment.

The threshold policy is explicit (``evaluation.threshold``): a configured probability, or the
F1-best threshold on the validation days; the holdout never chooses it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from jobs.config import EvaluationSpec

REPORT, SEGMENTS = "evaluation/report.json", "evaluation/segments.csv"
PREDICTIONS = "evaluation/holdout_predictions.parquet"
OTHER = "(other)"  # segments with fewer than min_segment_rows rows, together
PROBABILITY = "probability"


def best_f1_threshold(labels: Any, probabilities: Any) -> float:
    """The probability threshold with the highest F1 on these rows (0.5 when no row is positive)."""
    from sklearn.metrics import precision_recall_curve

    y = np.asarray(labels, dtype=np.float64)
    if not (y == 1.0).any():
        return 0.5
    precision, recall, thresholds = precision_recall_curve(y, np.asarray(probabilities, dtype=np.float64))
    f1 = np.divide(2 * precision * recall, precision + recall, out=np.zeros_like(precision),
                   where=(precision + recall) > 0)[:-1]
    return float(thresholds[int(np.argmax(f1))])


def choose_threshold(spec: EvaluationSpec, validation_labels: Any = None, validation_probabilities: Any = None,
                     ) -> dict[str, Any]:
    """The report's threshold: ``{"value", "policy", "chosen_on"}``; ``validation_f1`` needs the
    validation rows' labels and probabilities."""
    if not spec.chosen_on_validation:
        return {"value": float(spec.threshold), "policy": "configured", "chosen_on": "evaluation.threshold"}
    if validation_labels is None or len(validation_labels) == 0:
        raise ValueError("evaluation.threshold is validation_f1 but there are no validation rows")
    value = best_f1_threshold(validation_labels, validation_probabilities)
    return {"value": value, "policy": "validation_f1", "chosen_on": f"{len(validation_labels)} validation rows"}


def confusion(labels: Any, probabilities: Any, threshold: float) -> dict[str, float]:
    """Counts at ``probability >= threshold`` and the precision, recall and F1 they give."""
    y = np.asarray(labels, dtype=np.float64) == 1.0
    predicted = np.asarray(probabilities, dtype=np.float64) >= threshold
    tp, fp = int(np.sum(predicted & y)), int(np.sum(predicted & ~y))
    fn, tn = int(np.sum(~predicted & y)), int(np.sum(~predicted & ~y))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"tn": tn, "fp": fp, "fn": fn, "tp": tp, "precision": precision, "recall": recall, "f1": f1}


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None  # JSON has no NaN


def segment_rows(frame: pd.DataFrame, label: str, segments: list[str], threshold: float, min_rows: int,
                 ) -> list[dict[str, Any]]:
    """One row per (segment column, value): rows, positives' share, mean probability, the holdout
    metrics and the confusion-matrix rates at ``threshold``. Values with fewer than ``min_rows``
    rows are pooled as ``(other)``; nulls are ``(null)``."""
    from jobs.metrics import evaluate

    out = []
    for column in segments:
        values = segment_values(frame[column], min_rows)
        for value in sorted(values.unique(), key=segment_order):
            part = frame[(values == value).to_numpy()]
            metrics = evaluate(part[label], part[PROBABILITY])
            at = confusion(part[label], part[PROBABILITY], threshold)
            out.append({
                "segment": column, "value": value, "rows": int(len(part)),
                "positive_rate": metrics["positive_rate"], "mean_probability": float(part[PROBABILITY].mean()),
                **{m: _finite(metrics[m]) for m in ("roc_auc", "pr_auc", "log_loss", "brier")},
                "precision": at["precision"], "recall": at["recall"],
            })
    return out


def segment_values(column: pd.Series, min_rows: int) -> pd.Series:
    """A segment column's values as text (:func:`_labels`), values with fewer than ``min_rows``
    rows pooled as ``(other)``."""
    values = _labels(column)
    counts = values.value_counts()
    return values.where(values.map(counts) >= min_rows, OTHER)


def _labels(column: pd.Series) -> pd.Series:
    """A segment column's values as text: whole numbers stored as floats (an hour, a month) without
    their ".0"; nulls as ``(null)``."""
    import pandas as pd

    if pd.api.types.is_float_dtype(column) and (column.dropna() % 1 == 0).all():
        column = column.astype("Int64")
    return column.astype("string").fillna("(null)")


def segment_order(value: str) -> tuple[int, float, str]:
    """Numbers in numeric order, then text, then the pooled rest."""
    try:
        return (0, float(value), "")
    except ValueError:
        return (2 if value == OTHER else 1, 0.0, value)


def build_report(predictions: pd.DataFrame, label: str, spec: EvaluationSpec, threshold: dict[str, Any],
                 validation: dict[str, float] | None = None) -> dict[str, Any]:
    """The report of a candidate from its holdout ``predictions`` (the segment columns, ``label``
    and ``probability``): everything in it is a function of those rows and the threshold."""
    from jobs.metrics import days_of, evaluate

    labels, probabilities = predictions[label], predictions[PROBABILITY]
    return {
        "threshold": threshold,
        "holdout": {k: _finite(v) for k, v in evaluate(labels, probabilities, days_of(predictions)).items()},
        "confusion": confusion(labels, probabilities, threshold["value"]),
        "validation": {k: _finite(v) for k, v in (validation or {}).items()},
        "segments": segment_rows(predictions, label, spec.segments, threshold["value"], spec.min_segment_rows),
    }


def report_metrics(report: dict[str, Any]) -> dict[str, float]:
    """The report's headline numbers as MLflow metrics (the holdout's own are logged by training)."""
    daily = report["holdout"].get("daily_roc_auc")  # the day's rows known: read_rows' partition column
    found = {"threshold": report["threshold"]["value"],
             **{f"holdout_{k}": report["confusion"][k] for k in ("precision", "recall", "f1")},
             **({"holdout_daily_roc_auc": daily} if daily is not None else {}),
             **{f"validation_{k}": v for k, v in report["validation"].items() if v is not None}}
    return {k: float(v) for k, v in found.items()}


def evaluate_candidate(run_id: str, holdout: pd.DataFrame, holdout_probabilities: Any, label: str,
                       spec: EvaluationSpec, validation: pd.DataFrame | None = None,
                       validation_probabilities: Any = None) -> dict[str, Any]:
    """Build a candidate's report and log it, its holdout predictions, plots and metrics to
    ``run_id``; returns the report. ``holdout``/``validation``: feature rows with ``label`` and
    the segment columns, in the order of their probabilities."""
    from jobs.lake.layout import PARTITION
    from jobs.metrics import days_of, evaluate

    has_validation = validation is not None and len(validation) > 0
    threshold = choose_threshold(spec, validation[label] if has_validation else None, validation_probabilities)
    validation_metrics = (evaluate(validation[label], validation_probabilities, days_of(validation))
                          if has_validation else None)
    day = [PARTITION] if PARTITION in holdout.columns else []  # each prediction's day, where known
    predictions = holdout[[*dict.fromkeys([*spec.segments, label, *day])]].reset_index(drop=True).copy()
    predictions[PROBABILITY] = np.asarray(holdout_probabilities, dtype=np.float64)
    report = build_report(predictions, label, spec, threshold, validation_metrics)
    log_report(run_id, report, predictions, label, spec)
    return report


def log_report(run_id: str, report: dict[str, Any], predictions: pd.DataFrame, label: str,
               spec: EvaluationSpec) -> None:
    """Log the report, its tables, the predictions and the plots to ``run_id``."""
    import tempfile
    from pathlib import Path

    import pandas as pd

    from jobs.plots import calibration_figure, confusion_figure, pr_figure, roc_figure, segments_figure
    from jobs.tracking import client

    mlflow_client = client()
    labels, probabilities = predictions[label], predictions[PROBABILITY]
    mlflow_client.log_dict(run_id, report, REPORT)
    mlflow_client.log_text(run_id, pd.DataFrame(report["segments"]).to_csv(index=False), SEGMENTS)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(PREDICTIONS).name
        predictions.to_parquet(path, index=False)
        mlflow_client.log_artifact(run_id, str(path), str(Path(PREDICTIONS).parent))
    figures = {}
    if spec.plots:
        figures = {"evaluation/calibration.png": calibration_figure(labels, probabilities, spec.calibration_bins),
                   "evaluation/confusion_matrix.png": confusion_figure(report["confusion"], report["threshold"]),
                   "evaluation/segments.png": segments_figure(report["segments"])}
        if len(np.unique(labels)) == 2:
            figures["evaluation/roc_curve.png"] = roc_figure(labels, probabilities)
            figures["evaluation/pr_curve.png"] = pr_figure(labels, probabilities)
    for path, figure in figures.items():
        mlflow_client.log_figure(run_id, figure, path)
    for key, value in report_metrics(report).items():
        mlflow_client.log_metric(run_id, key, value)


def read_predictions(run_id: str) -> pd.DataFrame:
    """The holdout predictions a run's report was built from."""
    import mlflow.artifacts
    import pandas as pd

    from jobs.tracking import client

    client()  # sets the tracking URI
    return pd.read_parquet(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=PREDICTIONS))

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jobs.config import EvaluationSpec
from jobs.selection.evaluation import PROBABILITY, best_f1_threshold, build_report, choose_threshold, confusion

rng = np.random.default_rng(3)
N = 600
FRAME = pd.DataFrame({
    "carrier": rng.choice(["AA", "UA", "B6", "ZZ"], size=N, p=[0.45, 0.35, 0.17, 0.03]),
    "dep_hour": rng.integers(5, 9, size=N).astype(float),  # as the features store it
    PROBABILITY: rng.uniform(size=N),
})
FRAME["label"] = (rng.uniform(size=N) < FRAME[PROBABILITY]).astype(float)
SPEC = EvaluationSpec(segments=["carrier", "dep_hour"], threshold=0.4, min_segment_rows=30)


def test_confusion_counts_every_row_once_at_the_threshold():
    found = confusion([1, 1, 0, 0, 1], [0.9, 0.3, 0.6, 0.1, 0.5], 0.5)
    assert (found["tp"], found["fn"], found["fp"], found["tn"]) == (2, 1, 1, 1)
    assert found["precision"] == pytest.approx(2 / 3) and found["recall"] == pytest.approx(2 / 3)


def test_the_f1_threshold_is_the_best_one_on_the_rows_it_is_chosen_on():
    best = best_f1_threshold(FRAME["label"], FRAME[PROBABILITY])
    f1 = confusion(FRAME["label"], FRAME[PROBABILITY], best)["f1"]
    for other in np.linspace(0.05, 0.95, 19):
        assert f1 >= confusion(FRAME["label"], FRAME[PROBABILITY], other)["f1"] - 1e-12


def test_the_threshold_policy_is_configured_or_validation_never_the_holdout():
    assert choose_threshold(SPEC)["value"] == 0.4 and choose_threshold(SPEC)["policy"] == "configured"
    chosen = EvaluationSpec(threshold="validation_f1")
    validation = FRAME.head(200)
    found = choose_threshold(chosen, validation["label"], validation[PROBABILITY])
    assert found["value"] == best_f1_threshold(validation["label"], validation[PROBABILITY])
    assert found["chosen_on"] == "200 validation rows"
    with pytest.raises(ValueError, match="no validation rows"):
        choose_threshold(chosen)
    with pytest.raises(ValueError, match="strictly between"):
        EvaluationSpec(threshold=1.5)
    with pytest.raises(ValueError, match="validation_f1"):
        EvaluationSpec(threshold="holdout_f1")


def test_segments_break_down_the_holdout_and_pool_the_small_ones():
    from jobs.metrics import evaluate

    report = build_report(FRAME, "label", SPEC, choose_threshold(SPEC))
    by_carrier = {row["value"]: row for row in report["segments"] if row["segment"] == "carrier"}
    assert set(by_carrier) == {"AA", "UA", "B6", "(other)"}  # ZZ has fewer than 30 rows
    assert sum(row["rows"] for row in by_carrier.values()) == N
    aa = FRAME[FRAME["carrier"] == "AA"]
    assert by_carrier["AA"]["roc_auc"] == evaluate(aa["label"], aa[PROBABILITY])["roc_auc"]
    hours = [row["value"] for row in report["segments"] if row["segment"] == "dep_hour"]
    assert hours == ["5", "6", "7", "8"]
    assert report["holdout"]["rows"] == N
    assert sum(report["confusion"][k] for k in ("tn", "fp", "fn", "tp")) == N


def test_report_figures_are_drawn(tmp_path):
    from jobs.plots import confusion_figure, pr_figure, segments_figure

    report = build_report(FRAME, "label", SPEC, choose_threshold(SPEC))
    for name, fig in {"pr": pr_figure(FRAME["label"], FRAME[PROBABILITY]),
                      "confusion": confusion_figure(report["confusion"], report["threshold"]),
                      "segments": segments_figure(report["segments"])}.items():
        fig.savefig(tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    assert len(segments_figure(report["segments"]).axes) == 2  # one panel per segment column


def test_a_report_without_plots_logs_its_tables_and_no_figures():
    """``evaluation.plots: false`` (the replay's setting): the same report and tables, no figures."""
    import dataclasses

    from jobs.selection.evaluation import log_report
    from jobs.tracking import client

    report = build_report(FRAME, "label", SPEC, choose_threshold(SPEC))
    logged = {}
    for plots in (True, False):
        run_id = client().create_run(client().get_experiment_by_name("Default").experiment_id).info.run_id
        log_report(run_id, report, FRAME, "label", dataclasses.replace(SPEC, plots=plots))
        logged[plots] = {a.path for a in client().list_artifacts(run_id, "evaluation")}
    figures = {f"evaluation/{f}" for f in ("calibration.png", "confusion_matrix.png", "segments.png",
                                            "roc_curve.png", "pr_curve.png")}
    assert figures <= logged[True] and logged[False] == logged[True] - figures
    assert {"evaluation/report.json", "evaluation/segments.csv"} <= logged[False]


def test_the_daily_roc_auc_ranks_within_each_day_not_one_day_above_another():
    """Two days a model cannot rank within (one score a day) but whose levels differ: the pooled
    ROC AUC credits the levels, the daily one does not; a day of one class is left out, the days
    are weighted by their rows."""
    from jobs.metrics import daily_roc_auc, evaluate

    days = ["d1"] * 4 + ["d2"] * 4 + ["d3"] * 3
    labels = [1, 1, 1, 0] + [0, 0, 0, 1] + [0, 0, 0]
    flat = [0.8] * 4 + [0.2] * 4 + [0.1] * 3
    metrics = evaluate(labels, flat, days)
    assert metrics["roc_auc"] > 0.8 and metrics["daily_roc_auc"] == 0.5
    assert "daily_roc_auc" not in evaluate(labels, flat)  # no days, no daily metric
    ranked = [0.9, 0.8, 0.7, 0.6] + [0.1, 0.2, 0.3, 0.4] + [0.5, 0.5, 0.5]  # d1 right, d2 right
    assert daily_roc_auc(days, labels, ranked) == 1.0
    # d1 right (1.0, 4 rows), d2 wrong (0.0, 8 rows): weighted by rows, not one vote a day
    days2, labels2 = ["d1"] * 4 + ["d2"] * 8, [1, 1, 1, 0] + [0] * 7 + [1]
    scores2 = [0.9, 0.8, 0.7, 0.6] + [0.9] * 7 + [0.1]
    assert daily_roc_auc(days2, labels2, scores2) == pytest.approx(4 / 12)
    assert np.isnan(daily_roc_auc(["d3"] * 3, [0, 0, 0], [0.1, 0.2, 0.3]))


def test_a_report_of_rows_with_their_days_has_the_daily_roc_auc_and_logs_it():
    """Rows read with their day (read_rows' partition column): the report's holdout and validation
    metrics include the daily ROC AUC, logged as holdout_ and validation_daily_roc_auc, and each
    logged prediction keeps its day."""
    from jobs.lake.layout import PARTITION
    from jobs.metrics import daily_roc_auc
    from jobs.selection.evaluation import evaluate_candidate, read_predictions
    from jobs.tracking import client

    frame = FRAME.assign(**{PARTITION: np.repeat(["2013-03-01", "2013-03-02", "2013-03-03"], N // 3)})
    run_id = client().create_run(client().get_experiment_by_name("Default").experiment_id).info.run_id
    evaluate_candidate(run_id, frame, frame[PROBABILITY], "label", SPEC, frame, frame[PROBABILITY])
    metrics = client().get_run(run_id).data.metrics
    expected = daily_roc_auc(frame[PARTITION], frame["label"], frame[PROBABILITY])
    assert metrics["holdout_daily_roc_auc"] == pytest.approx(expected) == metrics["validation_daily_roc_auc"]
    assert read_predictions(run_id)[PARTITION].tolist() == frame[PARTITION].tolist()
    assert "holdout_daily_roc_auc" not in report_metrics_of(FRAME)


def report_metrics_of(frame: pd.DataFrame) -> dict[str, float]:
    from jobs.selection.evaluation import report_metrics

    return report_metrics(build_report(frame, "label", SPEC, choose_threshold(SPEC)))

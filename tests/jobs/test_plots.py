from __future__ import annotations

import numpy as np

from jobs.plots import calibration_figure, loss_figure, roc_figure

rng = np.random.default_rng(0)
P = rng.uniform(size=500)
Y = (rng.uniform(size=500) < P).astype(float)  # calibrated by construction


def test_roc_figure_reports_the_auc():
    from sklearn.metrics import roc_auc_score

    ax = roc_figure(Y, P).axes[0]
    assert f"{roc_auc_score(Y, P):.3f}" in ax.get_legend().get_texts()[0].get_text()


def test_calibration_points_follow_the_diagonal_for_a_calibrated_model():
    line = calibration_figure(Y, P).axes[0].get_lines()[0]
    predicted, observed = line.get_xdata(), line.get_ydata()
    assert len(predicted) == 10
    assert np.abs(np.asarray(predicted) - np.asarray(observed)).max() < 0.15


def test_loss_figure_draws_each_series_over_epochs(tmp_path):
    fig = loss_figure({"train": [0.6, 0.5, 0.45], "holdout": [0.62, 0.55, 0.54]})
    lines = fig.axes[0].get_lines()
    assert [list(line.get_xdata()) for line in lines] == [[1, 2, 3], [1, 2, 3]]
    fig.savefig(tmp_path / "loss.png")
    assert (tmp_path / "loss.png").stat().st_size > 1000

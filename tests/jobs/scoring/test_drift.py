"""Drift: PSI and unknown-category shares against a baseline of real training days; a day made
from real data with shifted inputs crosses the thresholds, a normal day does not."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest

from jobs.config import DriftSpec
from jobs.scoring.drift import (
    PREDICTION,
    bucket_counts,
    build_baseline,
    feature_bins,
    headline,
    local_bucket_counts,
    local_columns,
    measure,
    psi,
)

TRAIN_DAYS = [dt.date(2013, 1, d) for d in range(2, 8)]
HOLDOUT_DAY, SCORED_DAY = dt.date(2013, 1, 8), dt.date(2013, 1, 9)


def test_psi_is_zero_for_the_same_shares_and_matches_the_formula():
    assert psi([0.25, 0.25, 0.5], [0.25, 0.25, 0.5]) == 0.0
    expected = (0.4 - 0.5) * math.log(0.4 / 0.5) + (0.6 - 0.5) * math.log(0.6 / 0.5)
    assert abs(psi([0.5, 0.5], [0.4, 0.6]) - expected) < 1e-12
    assert math.isfinite(psi([0.5, 0.5, 0.0], [0.0, 0.5, 0.5]))  # empty bins are smoothed, not infinite


def test_bucket_counts_bins_numbers_categories_and_nulls(spark):
    df = spark.createDataFrame(
        [(1.0, "AA"), (5.0, "UA"), (5.0, None), (9.0, "ZZ"), (None, "UA"), (float("nan"), "AA")],
        "x double, carrier string",
    )
    counts = bucket_counts(df, {"x": [2.0, 5.0]}, {"carrier": ["AA", "UA"]})
    assert counts["x"] == [1, 0, 3, 2]  # below 2 | [2, 5) | 5 and above | null or NaN
    assert counts["carrier"] == [2, 2, 2]  # unknown (ZZ, null) | AA | UA
    # counted in the driver's process, the same bins
    assert local_bucket_counts(df.toPandas(), {"x": [2.0, 5.0]}, {"carrier": ["AA", "UA"]}) == counts


def test_a_small_window_binned_in_the_driver_has_the_bins_spark_counts(features_zone, config):
    """A window of at most ``local_max_rows`` rows is binned by numpy: every edge is a quantile of
    the column within approxQuantile's error bound, and Spark's own counting of the window into
    those bins (what scoring does) gives the same shares, so a day like the window has PSI 0."""
    from jobs.training.data import fit_preprocessor

    train = features_zone.frame(TRAIN_DAYS).cache()
    pre = fit_preprocessor(train, config.features, config.train.min_category_count)
    bins = config.score.drift.bins
    local = feature_bins(train, pre, bins, local_max_rows=10**9)
    spark_made = feature_bins(train, pre, bins)
    assert local["rows"] == spark_made["rows"] == train.count()
    edges = {c: local["numeric"][c]["edges"] for c in pre.numeric}
    counted = bucket_counts(train, edges, pre.vocab)
    for col in pre.numeric:
        total = sum(counted[col])
        assert local["numeric"][col]["shares"] == [n / total for n in counted[col]], col
    for col in pre.categorical:
        assert local["categorical"][col] == spark_made["categorical"][col], col
    values = local_columns(train, pre)
    for col in pre.numeric:
        column = values[col].dropna().to_numpy()
        n = len(column)
        for edge in edges[col]:  # each edge a value of the column at one of the deciles' ranks
            assert edge in column, col
            below, at_most = int((column < edge).sum()), int((column <= edge).sum())
            assert any(below <= p * n / bins + 1 and at_most >= p * n / bins - 1 for p in range(1, bins)), (col, edge)
        assert (edges[col] == spark_made["numeric"][col]["edges"]
                or len(edges[col]) == len(spark_made["numeric"][col]["edges"])), col


@pytest.fixture(scope="module")
def reference(features_zone, config):
    """A baseline from six real training days and a seeded net's predictions on the next day."""
    import torch

    from jobs.model.tabular import build_net, predict_proba
    from jobs.training.data import fit_preprocessor

    features = features_zone.frame([*TRAIN_DAYS, HOLDOUT_DAY, SCORED_DAY]).cache()
    train = features.where(features.date.isin(TRAIN_DAYS))
    pre = fit_preprocessor(train, config.features, config.train.min_category_count)
    torch.manual_seed(0)
    net = build_net(pre, {"embedding_dim": 4, "hidden_units": [8]})
    holdout = features.where(features.date == HOLDOUT_DAY).toPandas()
    baseline = build_baseline(train, pre, predict_proba(net, pre, holdout), config.score.drift.bins)
    day = features.where(features.date == SCORED_DAY).toPandas()
    return {"baseline": baseline, "net": net, "pre": pre, "day": day}


def _measure(spark, reference, day, spec: DriftSpec) -> dict:
    from jobs.model.tabular import predict_proba

    scored = day.assign(**{PREDICTION: predict_proba(reference["net"], reference["pre"], day)})
    frame = spark.createDataFrame(scored.drop(columns=["date"]))
    return measure(reference["baseline"], frame, frame.select(PREDICTION), spec)


def test_the_baseline_describes_the_training_window(reference, config):
    baseline = reference["baseline"]
    assert set(baseline["numeric"]) == set(config.features.model_numeric)
    assert set(baseline["categorical"]) == set(config.features.categorical)
    for entry in [*baseline["numeric"].values(), *baseline["categorical"].values(), baseline[PREDICTION]]:
        assert abs(sum(entry["shares"]) - 1.0) < 1e-9
    distance = baseline["numeric"]["distance"]
    assert distance["edges"] == sorted(distance["edges"]) and len(distance["edges"]) >= 5


def test_a_normal_day_does_not_drift(spark, reference, config):
    report = _measure(spark, reference, reference["day"], config.score.drift)
    assert not report["drifted"], report["reasons"]
    assert report["rows"] == len(reference["day"])
    monitored = {c: e["psi"] for c, e in report["features"].items() if e["monitored"]}
    assert max(monitored.values()) < config.score.drift.psi_threshold
    # day-level context is reported even though it is not alerted on
    assert report["features"]["day_of_week"]["psi"] > 1.0 and not report["features"]["day_of_week"]["monitored"]
    # the one-line verdict names the highest monitored features, not the higher day-level context
    line = headline(report)
    assert line.startswith("none over the thresholds; highest monitored PSI: ")
    highest = max(monitored, key=monitored.get)
    assert f"{highest} {monitored[highest]:.3f}" in line and "day_of_week" not in line


def test_a_day_with_shifted_inputs_drifts(spark, reference, config, config_patch):
    day = reference["day"].copy()
    # the same real flights, six hours later and on routes 60% longer
    day["dep_hour"] = (day["dep_hour"] + 6) % 24
    day["dep_minute_of_day"] = (day["dep_minute_of_day"] + 360) % 1440
    day["distance"] = day["distance"] * 1.6
    report = _measure(spark, reference, day, config.score.drift)
    assert report["drifted"]
    flagged = {reason.split(":")[0] for reason in report["reasons"]}
    assert {"dep_hour", "dep_minute_of_day", "distance"} <= flagged
    assert report["features"]["distance"]["psi"] > 1.0
    assert headline(report).startswith("DRIFTED (") and "distance: PSI" in headline(report)
    # the predictions moved too; with a threshold on them, that is a reason of its own
    threshold = report["prediction"]["psi"] / 2
    strict = config_patch.replace(config, score={"drift": {"prediction_psi_threshold": threshold}}).score.drift
    assert "predictions" in {r.split(":")[0] for r in _measure(spark, reference, day, strict)["reasons"]}


def test_a_day_of_unknown_categories_drifts(spark, reference, config):
    day = reference["day"].copy()
    rng = np.random.default_rng(7)
    renamed = rng.random(len(day)) < 0.2  # a fifth of the flights by a carrier the model never saw
    day.loc[renamed, "carrier"] = "N1"
    report = _measure(spark, reference, day, config.score.drift)
    carrier = report["features"]["carrier"]
    assert abs(carrier["unknown_share"] - renamed.mean()) < 1e-6
    assert carrier["baseline_unknown_share"] < 0.01
    assert any(r.startswith("carrier:") and "does not know" in r for r in report["reasons"])

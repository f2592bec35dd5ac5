"""Temperature scaling (jobs.model.calibration): the scale it fits, how it is applied, and the
pyfuncs of every family logged with and without one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jobs.metrics import evaluate
from jobs.model.calibration import (
    CALIBRATION_FILE,
    apply_scale,
    calibrate,
    calibrate_rows,
    fit_scale,
    log_loss,
    logit,
    read_scale,
    record_metrics,
    record_params,
    sigmoid,
)
from jobs.model.tabular import Preprocessor

PRE = Preprocessor(categorical=["carrier", "origin"], numeric=["distance", "dep_hour"],
                   vocab={"carrier": ["AA", "B6", "UA"], "origin": ["EWR", "JFK"]},
                   mean={"distance": 1000.0, "dep_hour": 13.0}, std={"distance": 600.0, "dep_hour": 5.0})


def over_confident(rows: int = 5000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Labels drawn from sigmoid(z) and a model that says sigmoid(3 z): three times too sure."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 1.0, rows) - 1.2
    labels = (rng.random(rows) < sigmoid(z)).astype(np.float64)
    return labels, sigmoid(3.0 * z)


def frame(rows: int = 40, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"carrier": rng.choice(["AA", "B6", "UA", "ZZ"], rows).astype(object),
                         "origin": rng.choice(["EWR", "JFK", "LGA"], rows).astype(object),
                         "distance": rng.uniform(100.0, 2500.0, rows), "dep_hour": rng.uniform(5.0, 23.0, rows)})


def test_the_scale_of_over_confident_probabilities_is_below_one_and_lowers_the_log_loss():
    labels, probabilities = over_confident()
    record = calibrate("temperature", labels, probabilities)
    assert 0.25 < record["logit_scale"] < 0.5  # about 1/3
    assert record["validation_rows"] == len(labels) and "reason" not in record
    assert record["log_loss_after"] < record["log_loss_before"] - 0.05
    scaled = apply_scale(probabilities, record["logit_scale"])
    assert record["log_loss_after"] == pytest.approx(log_loss(labels, scaled))
    # under-confident probabilities get a scale above 1
    assert fit_scale(labels, sigmoid(logit(probabilities) / 6.0)) > 1.5


def test_the_scale_keeps_the_ranking_and_one_is_the_probabilities_themselves():
    labels, probabilities = over_confident()
    scaled = apply_scale(probabilities, 0.4)
    assert evaluate(labels, scaled)["roc_auc"] == evaluate(labels, probabilities)["roc_auc"]
    assert (np.argsort(scaled, kind="stable") == np.argsort(probabilities, kind="stable")).all()
    assert apply_scale(probabilities, 1.0) is not None and (apply_scale(probabilities, 1.0) == probabilities).all()
    extreme = apply_scale(np.array([0.0, 1.0, 1e-300, 0.5]), 0.5)  # 0 and 1 clipped before their logit
    assert np.isfinite(extreme).all() and 0 < extreme[0] < 1e-5 and 1 - 1e-5 < extreme[1] < 1 and extreme[3] == 0.5


def test_too_few_rows_one_class_or_none_leave_the_scale_at_one_saying_why():
    labels, probabilities = over_confident()
    few = calibrate("temperature", labels[:50], probabilities[:50])
    assert few["logit_scale"] == 1.0 and "fewer than 100" in few["reason"]
    one = calibrate("temperature", np.zeros(500), probabilities[:500])
    assert one["logit_scale"] == 1.0 and "one class" in one["reason"]
    none = calibrate("none", labels, probabilities)
    assert none["logit_scale"] == 1.0 and none["reason"] == "train.calibration is none"
    assert record_params(none) == {"calibration": "none", "calibration_note": "train.calibration is none"}
    empty = calibrate_rows("temperature", pd.DataFrame(columns=["x"]), "label", ["x"], lambda rows: 1 / 0)
    assert empty["validation_rows"] == 0 and record_metrics(empty) == {"calibration_logit_scale": 1.0,
                                                                       "calibration_validation_rows": 0.0}
    with pytest.raises(ValueError, match="temperature"):
        calibrate("platt", labels, probabilities)


def test_the_config_refuses_an_unknown_calibration(config):
    import dataclasses

    assert config.train.calibration == "temperature"
    with pytest.raises(ValueError, match="calibration\n.*'none' or 'temperature'"):
        dataclasses.replace(config.train, calibration="platt")


def test_a_model_without_a_calibration_file_reads_scale_one(tmp_path):
    assert read_scale({"model_state.pt": "x"}) == 1.0
    (tmp_path / CALIBRATION_FILE).write_text('{"logit_scale": 0.5}')
    assert read_scale({CALIBRATION_FILE: str(tmp_path / CALIBRATION_FILE)}) == 0.5


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """The MLP, a logistic-regression baseline and an XGBoost booster, each logged without a
    calibration (as every version before it) and with a logit scale of 0.5."""
    import mlflow
    import torch
    import xgboost

    from jobs.model.baseline import design_width
    from jobs.model.booster import design_matrix, feature_types
    from jobs.model.booster import log_pyfunc as log_booster
    from jobs.model.tabular import build_net
    from jobs.model.tabular import log_pyfunc as log_net
    from jobs.selection.baseline_training import log_model as log_baseline
    from jobs.tracking import ensure_experiment

    home = tmp_path_factory.mktemp("calibrated-models")
    mlflow.set_tracking_uri(f"sqlite:///{home}/mlflow.db")
    experiment = ensure_experiment("calibration-tests")
    torch.manual_seed(3)
    hyper = {"embedding_dim": 3, "hidden_units": [8]}
    net = build_net(PRE, hyper)
    params = {"coefficients": np.linspace(-1.0, 1.0, design_width(PRE)).tolist(), "intercept": -0.3}
    rows = frame(200, seed=2)
    booster = xgboost.train({"max_depth": 2, "nthread": 1}, xgboost.DMatrix(
        design_matrix(PRE, rows), label=(rows["distance"] > 1200).astype(float), feature_types=feature_types(PRE),
        enable_categorical=True, missing=np.nan), num_boost_round=5)
    record = {"method": "temperature", "logit_scale": 0.5, "validation_rows": 200, "log_loss_before": 0.7,
              "log_loss_after": 0.6}
    uris = {}
    for calibration, suffix in ((None, "plain"), (record, "calibrated")):
        with mlflow.start_run(experiment_id=experiment):
            uris[f"mlp-{suffix}"] = log_net(net, PRE, hyper, rows.head(5), calibration=calibration).model_uri
            uris[f"baseline-{suffix}"] = log_baseline(PRE, "logistic_regression", params, rows.head(5),
                                                      calibration).model_uri
            uris[f"xgboost-{suffix}"] = log_booster(booster, PRE, {"max_depth": 2}, rows.head(5),
                                                    calibration).model_uri
    return {"uris": uris, "net": net, "params": params, "booster": booster}


@pytest.mark.parametrize("family", ["mlp", "baseline", "xgboost"])
def test_every_family_applies_its_scale_and_one_logged_without_predicts_as_before(logged, family):
    import mlflow.pyfunc

    from jobs.model.baseline import design_matrix, predict_design
    from jobs.model.booster import predict_booster
    from jobs.model.tabular import predict_proba

    rows = frame()
    raw = {"mlp": lambda: predict_proba(logged["net"], PRE, rows),
           "baseline": lambda: predict_design("logistic_regression", logged["params"], design_matrix(PRE, rows)),
           "xgboost": lambda: predict_booster(logged["booster"], PRE, rows)}[family]()
    plain = mlflow.pyfunc.load_model(logged["uris"][f"{family}-plain"])
    assert plain.unwrap_python_model().logit_scale == 1.0
    np.testing.assert_array_equal(plain.predict(rows), raw)  # exactly as before calibration existed
    calibrated = mlflow.pyfunc.load_model(logged["uris"][f"{family}-calibrated"])
    assert calibrated.unwrap_python_model().logit_scale == 0.5
    np.testing.assert_allclose(calibrated.predict(rows), apply_scale(raw, 0.5), rtol=0, atol=1e-12)
    assert not np.allclose(calibrated.predict(rows), raw)


def test_the_mlp_encoded_scoring_path_applies_the_scale_as_predict_does(logged):
    """jobs.scoring.predictor's encoded path (predict_codes on what Spark encodes) and the pyfunc's
    predict on raw rows give the same calibrated probabilities."""
    import mlflow.pyfunc

    from jobs.scoring.predictor import make_encoded_predict_fn

    rows = frame(300, seed=4)
    uri = logged["uris"]["mlp-calibrated"]
    cats, nums = PRE.encode(rows)
    arrays = [*(cats[:, j].astype(np.int32) for j in range(cats.shape[1])), *(nums[:, j] for j in range(nums.shape[1]))]
    encoded = make_encoded_predict_fn(uri, len(PRE.categorical), len(PRE.numeric))()(*arrays)
    np.testing.assert_allclose(encoded, mlflow.pyfunc.load_model(uri).predict(rows), rtol=0, atol=1e-12)

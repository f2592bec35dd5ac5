from __future__ import annotations

import datetime as dt
import math

import pytest

from jobs.selection.gate import CHAMPION, apply_gate, decide


def test_the_first_model_becomes_champion():
    decision = decide("roc_auc", 0.61, None, margin=0.01)
    assert decision.promote and "first model" in decision.reason


@pytest.mark.parametrize(
    ("metric", "challenger", "champion", "promote"),
    [
        ("roc_auc", 0.70, 0.68, True),   # better by more than the margin
        ("roc_auc", 0.685, 0.68, False),  # better, but by less than the margin
        ("roc_auc", 0.60, 0.68, False),  # worse
        ("log_loss", 0.50, 0.55, True),  # lower is better
        ("log_loss", 0.56, 0.55, False),
    ],
)
def test_promotion_needs_an_improvement_of_at_least_the_margin(metric, challenger, champion, promote):
    decision = decide(metric, challenger, champion, margin=0.01, champion_version="3")
    assert decision.promote is promote
    assert "v3" in decision.reason and metric in decision.reason
    assert decision.tags()["gate_decision"] == ("promoted" if promote else "rejected")


def test_an_unmeasurable_challenger_never_replaces_a_champion():
    assert not decide("roc_auc", math.nan, 0.7, margin=0.0, champion_version="1").promote
    assert not decide("roc_auc", math.nan, math.nan, margin=0.0, champion_version="1").promote
    first = decide("roc_auc", math.nan, None, margin=0.0)  # the first model: champion, with a warning
    assert first.promote and first.warning and first.tags()["gate_warning"] == first.warning


@pytest.fixture(scope="module")
def holdout_and_nets(features_zone, config):
    """Real features: a net trained on three days, and the holdout day it is judged on."""
    import numpy as np
    import torch

    from jobs.model.tabular import build_net
    from jobs.training.data import fit_preprocessor

    train_days, holdout_day = [dt.date(2013, 1, d) for d in (2, 3, 4)], dt.date(2013, 1, 5)
    train = features_zone.frame(train_days)
    pre = fit_preprocessor(train, config.features, min_count=1)
    label = config.features.label
    frame = train.where(f"{label} IS NOT NULL").toPandas()
    holdout = features_zone.frame([holdout_day])
    holdout = holdout.where(f"{label} IS NOT NULL").toPandas()
    hyper = {"embedding_dim": 4, "hidden_units": [16]}

    torch.manual_seed(3)
    untrained = build_net(pre, hyper)
    torch.manual_seed(3)
    trained = build_net(pre, hyper)
    cats, nums = (torch.from_numpy(a) for a in pre.encode(frame))
    y = torch.from_numpy(frame[label].to_numpy(np.float32))
    optimizer = torch.optim.Adam(trained.parameters(), lr=0.01)
    for _ in range(60):
        optimizer.zero_grad()
        torch.nn.functional.binary_cross_entropy_with_logits(trained(cats, nums), y).backward()
        optimizer.step()
    inverted = build_net(pre, hyper)  # deliberately worse: the trained net with its ranking reversed
    inverted.load_state_dict(trained.state_dict())
    with torch.no_grad():
        inverted.mlp[-1].weight.neg_()
        inverted.mlp[-1].bias.neg_()
    return {"pre": pre, "hyper": hyper, "holdout": holdout, "untrained": untrained, "trained": trained,
            "inverted": inverted}


def registry(tmp_path, experiment: str, name: str, data: dict):
    """An MLflow registry on SQLite under the test home (artifacts there too), and a function that
    logs a net of ``data`` and registers it as a new version of ``name``, returning the version."""
    import mlflow

    from jobs.model.tabular import log_pyfunc
    from jobs.tracking import ensure_experiment

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    mlflow.set_experiment(experiment_id=ensure_experiment(experiment))

    def register(net) -> str:
        with mlflow.start_run():
            info = log_pyfunc(net, data["pre"], data["hyper"], data["holdout"].head(5))
        return str(mlflow.register_model(info.model_uri, name).version)

    return mlflow.MlflowClient(), register


def test_gate_promotes_better_versions_only(holdout_and_nets, config, tmp_path):
    from jobs.model.tabular import predict_proba
    from jobs.selection.gate import score_version

    name, data = "gate_model", holdout_and_nets
    client, register = registry(tmp_path, "gate-tests", name, data)
    features, label = config.features.inputs, config.features.label

    def gate(version: str):
        return apply_gate(client, name, version, data["holdout"], features, label, "roc_auc", 0.002)

    first = register(data["untrained"])
    assert gate(first).promote
    assert str(client.get_model_version_by_alias(name, CHAMPION).version) == first

    worse = register(data["inverted"])
    decision = gate(worse)
    assert not decision.promote and decision.champion_version == first
    assert str(client.get_model_version_by_alias(name, CHAMPION).version) == first
    assert client.get_model_version(name, worse).tags["gate_decision"] == "rejected"

    better = register(data["trained"])
    # The training driver hands the gate the new version's holdout predictions it already has.
    probabilities = predict_proba(data["trained"], data["pre"], data["holdout"])
    decision = apply_gate(client, name, better, data["holdout"], features, label, "roc_auc", 0.002, probabilities)
    own = score_version(f"models:/{name}/{better}", data["holdout"], features, label)["roc_auc"]
    assert abs(decision.challenger_score - own) < 1e-9
    assert decision.promote, decision.reason
    assert decision.challenger_score > decision.champion_score + 0.002
    assert str(client.get_model_version_by_alias(name, CHAMPION).version) == better
    tags = client.get_model_version(name, better).tags
    assert tags["gate_decision"] == "promoted" and tags["gate_champion_version"] == first


def test_a_registry_that_does_not_answer_is_not_one_without_a_champion(tmp_path, monkeypatch):
    """No model, or no version with the alias: no champion. A tracking server that does not answer
    raises instead (a fault, retried): taken for "no champion", the gate would promote unopposed and
    scoring would fail the night as a data error, never retried."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from jobs.errors import DataError
    from jobs.selection.gate import current_champion
    from jobs.tracking import champion_version
    from tests.airflow_server import _free_port

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    assert current_champion(client, "never_registered") is None
    client.create_registered_model("no_champion_yet")
    assert current_champion(client, "no_champion_yet") is None

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    silent = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    with pytest.raises(MlflowException) as raised:
        current_champion(mlflow.MlflowClient(silent), "no_champion_yet")
    assert raised.value.error_code == "INTERNAL_ERROR"
    previous = mlflow.get_tracking_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", silent)
    try:
        with pytest.raises(MlflowException) as raised:
            champion_version("no_champion_yet")  # what scoring asks first
    finally:
        mlflow.set_tracking_uri(previous)  # jobs.tracking.client() set the process's URI to the silent one
    assert not isinstance(raised.value, DataError)


def test_with_approval_required_a_winner_waits_for_a_person(holdout_and_nets, config, tmp_path):
    """The gate only tags a winning version awaiting_approval; a person's answer then moves the
    alias (approve) or keeps the champion (reject); an approval given against a comparison the
    alias has since moved away from promotes nothing."""
    from jobs.selection.gate import AWAITING_APPROVAL, ApprovalError, current_champion, record_approval

    name, data = "approval_model", holdout_and_nets
    client, register = registry(tmp_path, "approval-tests", name, data)
    features, label = config.features.inputs, config.features.label

    def gate(version: str):
        return apply_gate(client, name, version, data["holdout"], features, label, "roc_auc", 0.002,
                          require_approval=True)

    first = register(data["untrained"])
    decision = gate(first)
    assert not decision.promote and decision.outcome == AWAITING_APPROVAL
    assert current_champion(client, name) is None  # nothing moves before a person answers
    assert client.get_model_version(name, first).tags["gate_decision"] == AWAITING_APPROVAL
    assert record_approval(client, name, first, False, "ana", "") == "rejected"
    assert current_champion(client, name) is None
    tags = client.get_model_version(name, first).tags
    assert tags["gate_decision"] == "rejected" and tags["gate_approved_by"] == "ana"
    assert tags["gate_reason"].startswith("rejected by ana; gate: no champion yet")
    with pytest.raises(ApprovalError, match="not awaiting approval"):
        record_approval(client, name, first, True, "ana", "")  # answered already

    second = register(data["untrained"])
    assert gate(second).outcome == AWAITING_APPROVAL
    third = register(data["trained"])
    assert gate(third).outcome == AWAITING_APPROVAL  # compared with no champion, like the second
    assert record_approval(client, name, second, True, "bo", "") == "promoted"
    assert str(current_champion(client, name).version) == second
    with pytest.raises(ApprovalError, match="stale"):
        record_approval(client, name, third, True, "bo", "")  # the champion moved since its comparison
    assert str(current_champion(client, name).version) == second
    assert client.get_model_version(name, third).tags["gate_decision"] == AWAITING_APPROVAL

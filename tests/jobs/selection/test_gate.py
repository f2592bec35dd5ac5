from __future__ import annotations

import datetime as dt
import logging
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

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
    """Real features: a net trained on three days, and the holdout day it is judged on. The
    "untrained" net gives every flight one probability (ROC AUC 0.5): one with random weights ranks
    the day by chance, which beat the trained net once the features grew past a hundred inputs."""
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
    untrained = build_net(pre, hyper)  # one probability for every flight (its last layer's weights zeroed): ROC AUC 0.5
    with torch.no_grad():
        untrained.mlp[-1].weight.zero_()
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


def test_a_champion_that_cannot_load_cannot_be_compared(holdout_and_nets, config, tmp_path):
    """A champion whose weights file is corrupt, then whose files are gone: the gate (and the bar's
    comparison table) stop with a data error naming the champion, its artifact URI and the command
    that moves or removes the alias; nothing is promoted and the new version carries no decision."""
    import shutil
    from urllib.parse import urlparse

    from jobs.model.tabular import MODEL_FILE
    from jobs.registry import DamagedModelError
    from jobs.selection.bar import champion_metrics

    name, data = "gate_damaged", holdout_and_nets
    client, register = registry(tmp_path, "gate-damaged-tests", name, data)
    features, label = config.features.inputs, config.features.label
    first = register(data["untrained"])
    assert apply_gate(client, name, first, data["holdout"], features, label, "roc_auc", 0.002).promote
    folder = Path(urlparse(client.get_model_version_download_uri(name, first)).path)
    (folder / "artifacts" / MODEL_FILE).write_bytes(b"not the weights of a net")  # there, not empty, unreadable
    better = register(data["trained"])

    for damage, said in [("corrupt", "it does not load ("), ("gone", "no files there")]:
        if damage == "gone":
            shutil.rmtree(folder)
        with pytest.raises(DamagedModelError) as failed:
            apply_gate(client, name, better, data["holdout"], features, label, "roc_auc", 0.002)
        message = str(failed.value)
        assert f"model {name!r} version {first} (the champion) cannot be loaded" in message, message
        assert folder.as_uri() in message and said in message, message
        assert f"set_registered_model_alias({name!r}, 'champion', '<VERSION>')" in message  # no former champion
        assert f"delete_registered_model_alias({name!r}, 'champion')" in message
        with pytest.raises(DamagedModelError, match=f"version {first} \\(the champion\\)"):
            champion_metrics(client, name, data["holdout"], features, label)
        assert str(client.get_model_version_by_alias(name, CHAMPION).version) == first
        assert "gate_decision" not in client.get_model_version(name, better).tags


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


# A gate (or an approval) in a process of its own that SIGKILLs itself right after its
# ``kill_after``-th registry write: the crash window between moving the alias and tagging.
CRASHING_PROMOTION = """
import os, signal, sys

import numpy as np
import pandas as pd
from mlflow import MlflowClient

from jobs.selection import gate

uri, name, version, action, kill_after = sys.argv[1:6]
writes = []


def killing(write):
    def wrapped(self, *args, **kwargs):
        result = write(self, *args, **kwargs)
        writes.append(write.__name__)
        if len(writes) == int(kill_after):
            os.kill(os.getpid(), signal.SIGKILL)
        return result
    return wrapped


for method in ("set_registered_model_alias", "set_model_version_tag"):
    setattr(MlflowClient, method, killing(getattr(MlflowClient, method)))
client = MlflowClient(uri)
if action == "gate":  # the first version: it wins, and no model is loaded (its predictions are given)
    holdout = pd.DataFrame({"x": [0.0, 1.0, 2.0, 3.0], "label": [0.0, 0.0, 1.0, 1.0]})
    gate.apply_gate(client, name, version, holdout, ["x"], "label", "roc_auc", 0.0, np.array([0.1, 0.2, 0.8, 0.9]))
else:
    gate.record_approval(client, name, version, True, "ana", "")
sys.exit(3)  # never killed: fewer writes than kill_after
"""
REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("action", "kill_after"), [("gate", 1), ("gate", 4), ("approval", 1)])
def test_a_promotion_killed_between_the_alias_and_its_tags_is_reconciled(tmp_path, caplog, action, kill_after):
    """The process is really killed (SIGKILL) right after its first, or fourth, registry write; the
    alias moved first, so what scoring serves is the decision, and the reconcile completes the
    version's tags, saying so in one line. Then alias and tags agree, and a second reconcile
    finds nothing."""
    from mlflow import MlflowClient

    from jobs.selection.gate import AWAITING_APPROVAL, PROMOTED, RECONCILED, current_champion, reconcile

    uri, name = f"sqlite:///{tmp_path}/mlflow.db", "crash_model"
    client = MlflowClient(uri)
    client.create_registered_model(name)
    version = str(client.create_model_version(name, source=(tmp_path / "model").as_uri()).version)
    if action == "approval":  # won the gate, a person approves it
        client.set_model_version_tag(name, version, "gate_decision", AWAITING_APPROVAL)
        client.set_model_version_tag(name, version, "gate_reason", "no champion yet: the first model becomes champion")
    died = subprocess.run([sys.executable, "-c", CRASHING_PROMOTION, uri, name, version, action, str(kill_after)],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=300)
    assert died.returncode == -signal.SIGKILL, died.stderr[-3000:]
    champion = current_champion(client, name)
    assert champion is not None and str(champion.version) == version  # the alias moved before the process died
    assert client.get_model_version(name, version).tags.get("gate_decision") != PROMOTED  # the window it died in

    with caplog.at_level(logging.INFO, logger="jobs.selection.gate"):
        note = reconcile(client, name)
    assert note and f"alias points at version {version}" in note
    said = [r.getMessage() for r in caplog.records if r.name == "jobs.selection.gate"]
    assert said == [f"reconciled {name}: {note}"]
    tags = client.get_model_version(name, version).tags
    assert tags["gate_decision"] == PROMOTED and tags[RECONCILED] == note
    assert str(current_champion(client, name).version) == version
    assert reconcile(client, name) is None  # alias and tags agree now


def test_the_next_gate_reconciles_a_champion_whose_promotion_was_cut_short(holdout_and_nets, config, tmp_path):
    """The state a promotion killed after its alias leaves (the alias on a version without its
    decision tags): the next gate first tags that champion ``promoted``, then compares with it."""
    from jobs.selection.gate import PROMOTED, RECONCILED

    name, data = "cut_short_model", holdout_and_nets
    client, register = registry(tmp_path, "cut-short-tests", name, data)
    first = register(data["untrained"])
    client.set_registered_model_alias(name, CHAMPION, first)  # the alias moved, the process died
    second = register(data["inverted"])
    decision = apply_gate(client, name, second, data["holdout"], config.features.inputs, config.features.label,
                          "roc_auc", 0.002)
    assert not decision.promote and decision.champion_version == first
    tags = client.get_model_version(name, first).tags
    assert tags["gate_decision"] == PROMOTED and "died before its decision tags" in tags[RECONCILED]
    assert client.get_model_version(name, second).tags["gate_decision"] == "rejected"

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from jobs.metrics import evaluate
from jobs.model.tabular import UNKNOWN_INDEX, Preprocessor, TabularNet, predict_proba, safe_std

PRE = Preprocessor(
    categorical=["carrier"], numeric=["distance"], vocab={"carrier": ["AA", "UA"]},
    mean={"distance": 100.0}, std={"distance": 50.0},
)


def test_encode_maps_unknown_and_null_categories_to_the_shared_index():
    frame = pd.DataFrame({"carrier": ["UA", "ZZ", None, "AA"], "distance": [150.0, np.nan, 100.0, 0.0]})
    cats, nums = PRE.encode(frame)
    assert cats[:, 0].tolist() == [2, UNKNOWN_INDEX, UNKNOWN_INDEX, 1]
    assert nums[:, 0].tolist() == [1.0, 0.0, 0.0, -2.0]  # z-scores; a missing value sits at the mean
    assert cats.dtype == np.int64 and nums.dtype == np.float32


def test_encode_builds_no_categorical_from_values_outside_its_categories(monkeypatch):
    """pandas 3 deprecates pd.Categorical(values, categories=...) with values outside the categories
    and pandas 4 raises there (pandas 3.1 warned, rehearsing the GPU run on Python 3.12): scoring meets
    unseen values every day, so the encoding must not depend on it. Here it raises as pandas 4 will."""
    real = pd.Categorical

    def strict(values=None, categories=None, *args, **kwargs):
        if categories is not None:
            outside = set(pd.Series(values).dropna()) - set(categories)
            if outside:
                raise ValueError(f"values outside the categories: {sorted(outside)}")
        return real(values, categories, *args, **kwargs)

    monkeypatch.setattr(pd, "Categorical", strict)
    frame = pd.DataFrame({"carrier": ["UA", "ZZ", None, "AA"], "distance": [150.0, np.nan, 100.0, 0.0]})
    cats, _ = PRE.encode(frame)
    assert cats[:, 0].tolist() == [2, UNKNOWN_INDEX, UNKNOWN_INDEX, 1]


def test_preprocessor_survives_a_json_round_trip():
    assert Preprocessor.from_json(PRE.to_json()) == PRE


def test_safe_std_never_divides_by_zero():
    assert safe_std(0.0) == 1.0 and safe_std(None) == 1.0 and safe_std(float("nan")) == 1.0
    assert safe_std(2.5) == 2.5


def test_net_gives_one_probability_per_row():
    torch.manual_seed(0)
    net = TabularNet(PRE.cardinalities, 1, embedding_dim=3, hidden_units=[4])
    frame = pd.DataFrame({"carrier": ["UA", "AA", "XX"], "distance": [1.0, 2.0, 3.0]})
    p = predict_proba(net, PRE, frame)
    assert p.shape == (3,) and ((p > 0) & (p < 1)).all()


def test_dropout_acts_in_training_only_and_a_net_saved_without_it_loads_into_the_default_model():
    from jobs.model.tabular import build_net

    torch.manual_seed(0)
    net = build_net(PRE, {"embedding_dim": 3, "hidden_units": [16, 16], "dropout": 0.5})
    rows = pd.DataFrame({"carrier": ["UA"] * 64, "distance": [1.0] * 64})
    cats, nums = (torch.from_numpy(a) for a in PRE.encode(rows))
    net.train()
    assert net(cats, nums).unique().numel() > 1  # 64 equal rows, different masks: different logits
    net.eval()
    assert net(cats, nums).unique().numel() == 1 and torch.equal(net(cats, nums), net(cats, nums))
    # a version logged before dropout existed: hyperparameters without it, the same weight names
    old = TabularNet(PRE.cardinalities, 1, embedding_dim=3, hidden_units=[16, 16])
    plain = build_net(PRE, {"embedding_dim": 3, "hidden_units": [16, 16]})
    plain.load_state_dict(old.state_dict())
    assert torch.equal(plain.eval()(cats, nums), old.eval()(cats, nums))


def test_a_wide_net_adds_a_linear_term_of_its_inputs_and_an_older_net_loads_as_it_was():
    """``wide``: the logit is the hidden layers' plus a linear function of the embedded categories
    and the numbers, so with the hidden layers silenced the net is a logistic regression of its
    inputs; a net logged before (no ``wide`` in its hyperparameters) builds without the term."""
    from jobs.model.tabular import build_net

    torch.manual_seed(0)
    net = build_net(PRE, {"embedding_dim": 3, "hidden_units": [8], "wide": True}).eval()
    rows = pd.DataFrame({"carrier": ["UA", "AA", "XX", None], "distance": [1.0, 200.0, 35.0, np.nan]})
    cats, nums = (torch.from_numpy(a) for a in PRE.encode(rows))
    with torch.no_grad():
        net.mlp[-1].weight.zero_()
        net.mlp[-1].bias.zero_()
        inputs = torch.cat([net.embeddings[0](cats[:, 0]), nums], dim=1)
        assert torch.allclose(net(cats, nums), inputs @ net.wide.weight[0] + net.wide.bias[0])
        assert net(cats, nums).unique().numel() == 4  # the rows told apart by the linear term alone
    plain = build_net(PRE, {"embedding_dim": 3, "hidden_units": [8]})
    assert plain.wide is None and not any(name.startswith("wide") for name in plain.state_dict())


def test_a_onehot_wide_term_is_logistic_regression_s_design_beside_the_mlp():
    """``wide: onehot``: with the hidden layers silenced the logit is a weight per category (the
    unknown index's too) plus a linear function of the numbers, as logistic regression on one-hot
    categories is, and no dropout reaches it: in training mode it gives what it gives in eval mode.
    An ensemble's members each have their own such term."""
    from jobs.model.tabular import build_net

    torch.manual_seed(0)
    net = build_net(PRE, {"embedding_dim": 3, "hidden_units": [8], "dropout": 0.9, "wide": "onehot"})
    assert net.wide is None and net.onehot is not None
    rows = pd.DataFrame({"carrier": ["UA", "AA", "XX", None], "distance": [1.0, 200.0, 35.0, np.nan]})
    cats, nums = (torch.from_numpy(a) for a in PRE.encode(rows))
    with torch.no_grad():
        net.mlp[-1].weight.zero_()
        net.mlp[-1].bias.zero_()
        net.onehot.categories[0].weight[:, 0] = torch.tensor([0.5, -1.0, 2.0])  # unknown, AA, UA
        expected = torch.tensor([2.0, -1.0, 0.5, 0.5]) + nums[:, 0] * net.onehot.numbers.weight[0, 0, 0] \
            + net.onehot.numbers.bias[0, 0, 0]
        assert torch.allclose(net.eval()(cats, nums), expected)
        assert torch.allclose(net.train()(cats, nums), expected)

    ensemble = build_net(PRE, {"embedding_dim": 3, "hidden_units": [8], "wide": "onehot", "members": 3})
    with torch.no_grad():
        ensemble.out.weight.zero_()
        ensemble.out.bias.zero_()
        ensemble.onehot.categories[0].weight.copy_(torch.arange(9.0).view(3, 3))  # member i: column i
        ensemble.onehot.numbers.weight.zero_()
        ensemble.onehot.numbers.bias.zero_()
        by_row = [[6.0, 7.0, 8.0], [3.0, 4.0, 5.0], [0.0, 1.0, 2.0], [0.0, 1.0, 2.0]]  # UA, AA, unknown, unknown
        assert ensemble.train()(cats, nums).tolist() == by_row


def _into_ensemble(nets: list[TabularNet], ensemble) -> None:
    """Copy each net's weights into its member of ``ensemble`` (member i: embedding columns
    i*d..(i+1)*d, the i-th of each stacked layer; torch's Linear keeps [out, in], stacked [in, out])."""
    d = ensemble.embedding_dim
    linears = [[m for m in net.mlp if isinstance(m, torch.nn.Linear)] for net in nets]
    with torch.no_grad():
        for i, net in enumerate(nets):
            for j, emb in enumerate(net.embeddings):
                ensemble.embeddings[j].weight[:, i * d:(i + 1) * d] = emb.weight
            for layer, linear in zip([*ensemble.hidden, ensemble.out], linears[i], strict=True):
                layer.weight[i] = linear.weight.T
                layer.bias[i, 0] = linear.bias
            ensemble.wide.weight[i] = net.wide.weight.T
            ensemble.wide.bias[i, 0] = net.wide.bias


def test_an_ensemble_is_its_members_side_by_side_each_learning_from_its_own_loss():
    """``members``: k nets of one shape in one module. Each member computes what a TabularNet with
    its weights computes; in eval mode the ensemble's logit is that of the members' mean
    probability; one optimizer step on the ensemble's loss (:func:`batch_loss`, the members' mean)
    moves every member as a step of its own net on its own loss would (the members share nothing)."""
    from jobs.model.tabular import TabularEnsemble, build_net
    from jobs.training.steps import batch_loss

    torch.manual_seed(0)
    hyper = {"embedding_dim": 3, "hidden_units": [8, 4], "wide": True}
    nets = [build_net(PRE, hyper) for _ in range(3)]
    ensemble = build_net(PRE, {**hyper, "members": 3})
    assert isinstance(ensemble, TabularEnsemble) and isinstance(build_net(PRE, {**hyper, "members": 1}), TabularNet)
    _into_ensemble(nets, ensemble)
    rows = pd.DataFrame({"carrier": ["UA", "AA", "XX", None, "UA"], "distance": [1.0, 200.0, 35.0, np.nan, 90.0]})
    cats, nums = (torch.from_numpy(a) for a in PRE.encode(rows))
    labels = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
    apart = torch.stack([net.eval()(cats, nums) for net in nets], dim=1)
    assert torch.allclose(ensemble.train()(cats, nums), apart, atol=1e-6)  # training mode: [n, members]
    mean = torch.sigmoid(apart).mean(dim=1)
    assert torch.allclose(ensemble.eval()(cats, nums), torch.log(mean / (1 - mean)), atol=1e-5)
    assert predict_proba(ensemble, PRE, rows).shape == (5,)

    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")
    step = torch.optim.SGD(ensemble.parameters(), lr=0.5)
    step.zero_grad()
    batch_loss(loss_fn, ensemble.train()(cats, nums), labels).backward()
    step.step()
    for net in nets:
        own = torch.optim.SGD(net.parameters(), lr=0.5)
        own.zero_grad()
        (batch_loss(loss_fn, net.train()(cats, nums), labels) / len(nets)).backward()
        own.step()
    moved = torch.stack([net.eval()(cats, nums) for net in nets], dim=1)
    assert not torch.allclose(moved, apart, atol=1e-3)
    assert torch.allclose(ensemble.train()(cats, nums), moved, atol=1e-5)


def test_an_ensemble_s_members_start_apart_and_its_dropout_masks_each_member_on_its_own():
    from jobs.model.tabular import build_net

    torch.manual_seed(0)
    ensemble = build_net(PRE, {"embedding_dim": 3, "hidden_units": [16], "dropout": 0.5, "members": 4})
    rows = pd.DataFrame({"carrier": ["UA"] * 64, "distance": [1.0] * 64})
    cats, nums = (torch.from_numpy(a) for a in PRE.encode(rows))
    logits = ensemble.eval().member_logits(cats, nums)
    assert logits.shape == (4, 64) and logits[:, 0].unique().numel() == 4  # other initial weights each
    assert torch.equal(ensemble(cats, nums), ensemble(cats, nums))
    trained = ensemble.train()(cats, nums)
    assert trained.shape == (64, 4) and all(trained[:, i].unique().numel() > 1 for i in range(4))
    with pytest.raises(ValueError, match="at least 2 members"):
        from jobs.model.tabular import TabularEnsemble
        TabularEnsemble(PRE.cardinalities, 1, 3, [4], members=1)


def test_evaluate_scores_a_perfect_and_a_single_class_holdout():
    perfect = evaluate([0, 1, 1, 0], [0.1, 0.9, 0.8, 0.2])
    assert perfect["roc_auc"] == 1.0 and perfect["accuracy"] == 1.0 and perfect["positive_rate"] == 0.5
    single = evaluate([1, 1], [0.7, 0.6])
    assert math.isnan(single["roc_auc"]) and single["log_loss"] > 0


@pytest.mark.parametrize("rows, distinct", [(7, 3), (200, 5), (5000, 10_000), (5000, 40)])
def test_evaluate_gives_scikit_learn_s_numbers_without_importing_it(rows, distinct):
    """The metrics are numpy's (a training rank evaluates every epoch and scikit-learn's import is a
    second of its start), and equal scikit-learn's: scores with many ties, few, and rows with one
    positive; a fresh interpreter that evaluates has no scikit-learn."""
    import subprocess
    import sys

    from sklearn.metrics import average_precision_score, brier_score_loss, log_loss, roc_auc_score

    from jobs.metrics import daily_roc_auc

    rng = np.random.default_rng(rows + distinct)
    for case in range(4):
        scores = rng.integers(0, distinct, rows) / distinct + 1e-3
        labels = (rng.random(rows) < np.clip(scores if case else scores / 10, 0, 1)).astype(float)
        labels[:2] = [0.0, 1.0] if case != 3 else [1.0, 0.0]
        if case == 2:
            labels[2:] = 0.0  # one positive
        got = evaluate(labels, scores)
        clipped = np.clip(scores, 1e-7, 1 - 1e-7)
        assert got["roc_auc"] == pytest.approx(roc_auc_score(labels, clipped), abs=1e-12)
        assert got["pr_auc"] == pytest.approx(average_precision_score(labels, clipped), abs=1e-12)
        assert got["log_loss"] == pytest.approx(log_loss(labels, clipped, labels=[0.0, 1.0]), abs=1e-12)
        assert got["brier"] == pytest.approx(brier_score_loss(labels, clipped), abs=1e-12)
        days = np.arange(rows) % 3
        expected = np.average([roc_auc_score(labels[days == d], clipped[days == d]) for d in range(3)
                               if len(set(labels[days == d])) == 2],
                              weights=[(days == d).sum() for d in range(3) if len(set(labels[days == d])) == 2])
        assert daily_roc_auc(days, labels, clipped) == pytest.approx(expected, abs=1e-12)
    code = ("import sys\nfrom jobs.metrics import evaluate\nevaluate([0, 1, 1], [0.2, 0.7, 0.4], days=[1, 1, 2])\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_calibration_error_is_zero_when_predictions_match_observed_rates_and_grows_with_the_gap():
    from jobs.metrics import calibration_bins, expected_calibration_error

    rng = np.random.default_rng(3)
    # two groups of equal size: predicted 0.2 and 0.7, and exactly those shares are positive
    labels = np.array([1] * 20 + [0] * 80 + [1] * 70 + [0] * 30, dtype=float)
    calibrated = np.array([0.2] * 100 + [0.7] * 100)
    order = rng.permutation(200)
    labels, calibrated = labels[order], calibrated[order]
    predicted, observed, counts = calibration_bins(labels, calibrated)
    np.testing.assert_allclose(predicted, observed)
    assert counts.sum() == 200
    assert expected_calibration_error(labels, calibrated) < 1e-12
    # overconfident by 0.1 in both groups: every row is 0.1 away from its group's rate
    overconfident = np.where(calibrated < 0.5, 0.1, 0.8)
    assert abs(expected_calibration_error(labels, overconfident) - 0.1) < 1e-12
    assert evaluate(labels, overconfident)["ece"] == expected_calibration_error(labels, overconfident)

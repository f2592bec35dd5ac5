"""The research scripts of ``studies/`` (what ``make bench`` does not run): the model-families
study on a small window of the example's features. The capacity model's arithmetic is
``tests/test_capacity.py``."""

from __future__ import annotations

import json


def test_the_model_families_study_cuts_the_train_jobs_window_and_scores_every_family(features_zone, config,
                                                                                    config_patch, tmp_path):
    """``studies.model_families``: the window as the train job cuts it (training days before the
    validation days, the holdout ending with the run date) and a mean per-day ROC AUC for each
    family, the MLP with the config's regularisation."""
    import datetime as dt

    import pandas as pd

    from studies.model_families import main, window_rows

    days = pd.DataFrame({"day": [dt.date(2013, 1, d) for d in range(1, 31)]})
    train = config.train
    run = dt.date(2013, 1, 30)
    training, holdout = window_rows(days, run, train, 10)
    assert list(holdout.day) == [run - dt.timedelta(days=k) for k in range(train.holdout_days - 1, -1, -1)]
    last_training = holdout.day.min() - dt.timedelta(days=train.validation_days + 1)
    assert training.day.max() == last_training and len(training) == 10

    last = max(dt.date.fromisoformat(p.name.removeprefix("date=")) for p in features_zone.path.glob("date=*"))
    short = config_patch.write(tmp_path / "config", train={"validation_days": 1, "holdout_days": 2})
    main(["--features", str(features_zone.path), "--windows", last.isoformat(), "--seeds", "13", "--config",
          str(short), "--max-train-days", "7", "--out", str(tmp_path), "--sweep"])
    found = json.loads((tmp_path / "model_families.json").read_text())
    (window,) = found["windows"]
    assert window["training_rows"] > 1000
    swept = [f"mlp_{s}{x}" for s in ("constant", "cosine") for x in ("", "_best_epoch", "_mean")]
    for family in ("logistic_regression", "xgboost", "mlp_before", "mlp", *swept):
        assert 0.5 < window[family] < 1, (family, window)
    for family in ("logistic_regression", "xgboost", *swept, "blend", "blend_mlp", "blend_mlp_mean"):
        assert 0.5 < window["pooled"][family] < 1, (family, window)
    epochs = window["mlp_cosine_best_epochs"]
    assert len(epochs) == len(config.sweep.learning_rate) and all(1 <= e <= config.train.epochs for e in epochs)
    assert found["settings"]["mlp"]["dropout"] == config.train.hyperparameters["dropout"] > 0
    # the MLP as an ensemble, alone (--mlp-only): no other family fitted, its figures beside the sweep's
    main(["--features", str(features_zone.path), "--windows", last.isoformat(), "--config", str(short),
          "--max-train-days", "7", "--out", str(tmp_path / "ensemble"), "--sweep", "--schedules", "cosine",
          "--members", "2", "--mlp-only"])
    (window,) = json.loads((tmp_path / "ensemble" / "model_families.json").read_text())["windows"]
    assert 0.5 < window["mlp_members2"] < 1 and 0.5 < window["pooled"]["mlp_members2"] < 1, window
    assert {"logistic_regression", "xgboost", "mlp", "blend", "blend_mlp"}.isdisjoint({*window, *window["pooled"]})
    assert 0.5 < window["pooled"]["mlp_cosine_mean"] < 1

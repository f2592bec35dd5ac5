"""Which runs belong to one training (jobs/selection/identity.py): the config's fingerprint moves
with what decides a comparison only; the data's with the window's partitions as written, not with
where the lake is mounted; the sweep chooses among the candidates of its training, config and data
version only."""

from __future__ import annotations

import datetime as dt
import shutil

import pytest

DAYS = [dt.date(2013, 1, d) for d in (2, 3, 4)]


def test_the_config_fingerprint_moves_with_what_decides_a_comparison_only(config, config_patch):
    from jobs.config import BaselineSpec
    from jobs.selection.identity import config_fingerprint

    mine = config_fingerprint(config)
    # what a sweep varies, where versions go, the report's pictures: the same comparison
    for same in ({"train": {"epochs": 9, "learning_rate": 0.5, "model_name": "elsewhere", "experiment": "other",
                            "hyperparameters": {"hidden_units": [3]}}}, {"evaluation": {"plots": False}}):
        assert config_fingerprint(config_patch.replace(config, **same)) == mine, same
    for other in ({"train": {"train_days": config.train.train_days + 1}}, {"train": {"promotion_metric": "log_loss"}},
                  {"baselines": (BaselineSpec("lr", "logistic_regression"),)}, {"evaluation": {"threshold": 0.3}}):
        assert config_fingerprint(config_patch.replace(config, **other)) != mine, other


def test_the_data_fingerprint_is_the_partitions_as_written_wherever_the_lake_is(spark, features_zone, tmp_path):
    from jobs.lake.layout import Lake
    from jobs.selection.identity import data_fingerprint

    features_zone.copy(DAYS, tmp_path / "shared" / "features")
    shared = Lake.at(str(tmp_path / "shared"))
    linked = tmp_path / "policy"  # a replay policy's lake: the shared features linked in
    linked.mkdir()
    (linked / "features").symlink_to(tmp_path / "shared" / "features")
    policy = Lake.at(str(linked))

    def fingerprint(lake: Lake) -> str:
        return data_fingerprint(spark, [lake.partition(lake.features, day) for day in DAYS])

    before = fingerprint(shared)
    assert fingerprint(policy) == before
    assert data_fingerprint(spark, [shared.partition(shared.features, day) for day in DAYS[:2]]) != before
    # the features job rewrites a day: new file names, another data version
    folder = tmp_path / "shared" / "features" / f"date={DAYS[1]}"
    for part in [p for p in folder.iterdir() if p.name.startswith("part-")]:
        shutil.move(part, folder / part.name.replace("part-", "part-rewritten-"))
    assert fingerprint(shared) != before and fingerprint(policy) == fingerprint(shared)


def test_the_sweep_chooses_among_candidates_of_its_training_config_and_data_only(config, config_patch, tmp_path,
                                                                                 monkeypatch):
    """A real MLflow store holds, under one sweep's parent, two candidates of its training, a
    better one trained on an older data version, one of another training and one logged without
    identity tags: the choice is the better of the two, and the sweep's table lists only them."""
    import mlflow.artifacts

    from jobs.selection.sweep import best_candidate, open_parent
    from jobs.tracking import client

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setenv("PIPELINE_MLFLOW_ARTIFACTS", str(tmp_path / "artifacts"))
    config = config_patch.replace(config, train={"promotion_metric": "roc_auc"})
    training = "flights_train/manual__2013-01-28"
    parent = open_parent(config, "2013-01-28", [{"name": n} for n in "ab"], "a test", training)
    mlflow_client = client()
    assert mlflow_client.get_run(parent).data.tags["training_id"] == training
    experiment = mlflow_client.get_run(parent).info.experiment_id

    def child(name: str, score: float, **changed: str | None) -> str:
        identity = {"training_id": training, "config_fingerprint": "c1", "data_fingerprint": "d1"} | changed
        run = mlflow_client.create_run(experiment, tags={"mlflow.parentRunId": parent, "candidate_name": name,
                                                         **{k: v for k, v in identity.items() if v}})
        mlflow_client.log_metric(run.info.run_id, "validation_roc_auc", score)
        mlflow_client.set_terminated(run.info.run_id, "FINISHED")
        return run.info.run_id

    child("stale", 0.95, data_fingerprint="d0")  # trained before the window's features were rebuilt
    child("other", 0.97, training_id="flights_train/manual__2013-01-21")
    child("untagged", 0.99, training_id=None, config_fingerprint=None, data_fingerprint=None)
    child("a", 0.70)
    b = child("b", 0.72)
    best = best_candidate(config, parent)
    assert (best["run_id"], best["name"]) == (b, "b")
    table = mlflow.artifacts.load_text(f"runs:/{parent}/sweep/candidates.csv")
    assert sorted(line.split(",")[0] for line in table.splitlines()[1:]) == ["a", "b"]


def test_the_sweep_ranks_by_log_loss_when_the_validation_days_hold_one_class(config, config_patch, tmp_path,
                                                                             monkeypatch):
    """A rare label's validation days without a positive: no candidate has a validation ROC AUC
    (undefined on one class), every one a log loss. The sweep chooses the lowest log loss and says
    so, instead of failing (and being retried) on a choice it could make; a sweep where neither
    metric is there fails as a data error naming what to change."""
    from jobs.errors import DataError
    from jobs.selection.sweep import best_candidate, open_parent, ranking_metric
    from jobs.tracking import client

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setenv("PIPELINE_MLFLOW_ARTIFACTS", str(tmp_path / "artifacts"))
    config = config_patch.replace(config, train={"promotion_metric": "roc_auc"})
    mlflow_client = client()

    def sweep(metrics: dict[str, dict[str, float]]) -> tuple[str, dict[str, str]]:
        training = f"rain_train/manual__{len(metrics)}-{sorted(metrics)[0]}"
        parent = open_parent(config, "2013-01-28", [{"name": n} for n in metrics], "a test", training)
        experiment = mlflow_client.get_run(parent).info.experiment_id
        ids = {}
        for name, logged in metrics.items():
            run = mlflow_client.create_run(experiment, tags={
                "mlflow.parentRunId": parent, "candidate_name": name, "training_id": training,
                "config_fingerprint": "c1", "data_fingerprint": "d1"})
            for key, value in logged.items():
                mlflow_client.log_metric(run.info.run_id, key, value)
            mlflow_client.set_terminated(run.info.run_id, "FINISHED")
            ids[name] = run.info.run_id
        return parent, ids

    parent, ids = sweep({"slow": {"validation_log_loss": 0.16, "holdout_roc_auc": 0.90},
                         "fast": {"validation_log_loss": 0.13, "holdout_roc_auc": 0.93}})
    best = best_candidate(config, parent)
    assert (best["run_id"], best["metric"], best["score"]) == (ids["fast"], "log_loss", 0.13)
    assert mlflow_client.get_run(parent).data.tags["chosen_by"] == "validation_log_loss"

    # where a candidate has the promotion metric, it ranks by it, as always
    assert ranking_metric([{"validation_roc_auc": None, "validation_log_loss": 0.1},
                           {"validation_roc_auc": 0.7, "validation_log_loss": 0.2}], "roc_auc") == "roc_auc"
    parent, _ = sweep({"x": {"holdout_roc_auc": 0.9}, "y": {"holdout_roc_auc": 0.8}})
    with pytest.raises(DataError, match="validation roc_auc or log_loss.*train.validation_days"):
        best_candidate(config, parent)
    assert mlflow_client.get_run(parent).info.status == "FAILED"

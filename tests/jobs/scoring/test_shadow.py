"""Shadow scoring: the score job scores the day with each challenger into ``shadow/version=V/``,
and the served predictions are left exactly as they were."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jobs.lake.layout import Lake, partition_name

DAY, OTHER = dt.date(2013, 1, 6), dt.date(2013, 1, 7)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _two_versions(features_zone, config, tmp_path, monkeypatch, days, experiment):
    """A lake with ``days``' features and a throw-away registry holding two versions of the model
    (seeds 1 and 2, no alias yet): the lake, the features as pandas, the client, the model's name
    and the two versions."""
    import mlflow
    import torch

    from jobs.model.tabular import build_net, log_pyfunc
    from jobs.tracking import ensure_experiment
    from jobs.training.data import fit_preprocessor

    scoring = Lake(str(tmp_path / "lake"))
    features_zone.copy(days, scoring.features)
    features = features_zone.frame(days)
    pre = fit_preprocessor(features, config.features, min_count=1)
    frame = features.toPandas()
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(experiment_id=ensure_experiment(experiment))
    client, name, hyper = mlflow.MlflowClient(uri), config.train.model_name, {"embedding_dim": 4, "hidden_units": [8]}
    versions = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        with mlflow.start_run():
            info = log_pyfunc(build_net(pre, hyper), pre, hyper, frame.head(5))
        versions.append(str(mlflow.register_model(info.model_uri, name).version))
    return scoring, frame, client, name, versions


@pytest.mark.slow
def test_challengers_are_scored_in_shadow_and_the_served_predictions_stay_byte_for_byte(
        spark, features_zone, config, tmp_path, monkeypatch):
    import mlflow

    from jobs.scoring.job import main
    from jobs.scoring.shadow import score_shadow
    from jobs.tracking import ModelRef

    scoring, frame, client, name, (champion, challenger) = _two_versions(
        features_zone, config, tmp_path, monkeypatch, [DAY, OTHER], "shadow-tests")
    client.set_registered_model_alias(name, "champion", champion)
    client.set_model_version_tag(name, challenger, "gate_decision", "awaiting_approval")  # as the gate tags it

    main(["--run-date", OTHER.isoformat(), "--lake-root", scoring.root])
    main(["--run-date", DAY.isoformat(), "--lake-root", scoring.root])
    served_dir = Path(scoring.partition(scoring.predictions, DAY))
    shadow_dir = Path(scoring.partition(scoring.shadow_predictions(str(challenger)), DAY))
    served, shadow = pd.read_parquet(served_dir), pd.read_parquet(shadow_dir)
    assert set(served["model_version"]) == {str(champion)} and set(shadow["model_version"]) == {str(challenger)}
    ids = ["carrier", "flight", "origin", "sched_dep_time"]
    day_rows = frame[frame["date"] == DAY]
    assert len(served) == len(shadow) == len(day_rows)
    served, shadow = (f.sort_values(ids).reset_index(drop=True) for f in (served, shadow))
    assert served[ids].equals(shadow[ids])
    ordered = day_rows.sort_values(ids).reset_index(drop=True)
    expected = mlflow.pyfunc.load_model(f"models:/{name}/{challenger}").predict(ordered[config.features.inputs])
    np.testing.assert_allclose(shadow["probability"], expected, rtol=0, atol=1e-6)
    assert not np.allclose(shadow["probability"], served["probability"])
    summary = json.loads(Path(scoring.report("scoring", DAY)).read_text())
    # the lake's first day: no outcomes landed before it, so neither model's level is moved, and it says so
    assert summary["shadow"] == [{"model_version": str(challenger), "rows": len(day_rows), "path": str(shadow_dir),
                                  "logit_shift": 0.0}]
    assert summary["recent_shift"]["logit_shift"] == 0.0 and "0 labelled rows" in summary["recent_shift"]["reason"]
    later = json.loads(Path(scoring.report("scoring", OTHER)).read_text())  # the day before has landed
    assert later["recent_shift"]["days"] == [DAY.isoformat()] and later["recent_shift"]["logit_shift"] != 0.0
    assert later["shadow"][0]["logit_shift"] not in (0.0, later["recent_shift"]["logit_shift"])  # its own

    # The shadow step again (a retry): the served zone is byte-for-byte what it was, the shadow
    # partition of the day replaced (not appended), the other day's shadow partition untouched.
    before = _files(Path(scoring.predictions))
    other_shadow = _files(Path(scoring.partition(scoring.shadow_predictions(str(challenger)), OTHER)))
    day_features = spark.read.option("basePath", scoring.features).parquet(scoring.partition(scoring.features, DAY))
    ref = ModelRef(name, str(champion), "")
    killed = Path(scoring.shadow_predictions(str(challenger))) / ".spark-staging-5e4d" / partition_name(DAY)
    killed.mkdir(parents=True)  # what a score job killed mid-write of the shadow rows leaves
    (killed / "part-00000.parquet").write_bytes(b"half a file")
    again = score_shadow(spark, scoring, config, day_features, [DAY], ref, config.score.batch_size)
    assert [a["rows"] for a in again[DAY]] == [len(day_rows)]
    assert _files(Path(scoring.predictions)) == before
    assert len(pd.read_parquet(shadow_dir)) == len(day_rows)
    assert _files(Path(scoring.partition(scoring.shadow_predictions(str(challenger)), OTHER))) == other_shadow
    assert sorted(p.name for p in Path(scoring.shadow_predictions(str(challenger))).iterdir()) == [
        partition_name(DAY), partition_name(OTHER)]  # the killed writer's staging is gone
    assert sorted(p.name for p in Path(scoring.predictions).iterdir() if p.is_dir()) == [
        partition_name(DAY), partition_name(OTHER)]


def test_a_challenger_that_fails_to_score_never_fails_the_served_scoring(spark, config, tmp_path, monkeypatch):
    """A registered version whose files are not a model: logged as an error, nothing written."""
    import mlflow

    from jobs.scoring.shadow import score_shadow
    from jobs.tracking import ModelRef

    uri = f"sqlite:///{tmp_path}/broken.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    client, name = mlflow.MlflowClient(uri), config.train.model_name
    experiment = client.create_experiment("broken", artifact_location=str(tmp_path / "artifacts"))
    run = client.create_run(experiment)
    client.set_terminated(run.info.run_id)
    client.create_registered_model(name)
    version = client.create_model_version(name, f"runs:/{run.info.run_id}/nothing", run_id=run.info.run_id).version
    client.set_model_version_tag(name, version, "gate_decision", "awaiting_approval")
    scoring = Lake(str(tmp_path / "lake"))
    features = spark.createDataFrame([{c: None for c in ["x"]}], "x string")
    done = score_shadow(spark, scoring, config, features, [DAY], ModelRef(name, "99", ""), 100)[DAY]
    assert [d["model_version"] for d in done] == [str(version)] and "error" in done[0]
    assert not Path(scoring.shadow).exists()
    # the version being served is never scored in shadow too
    assert score_shadow(spark, scoring, config, features, [DAY], ModelRef(name, str(version), ""), 100) == {DAY: []}


@pytest.mark.slow
def test_a_challenger_whose_files_are_gone_is_skipped_and_the_champion_still_served(
        features_zone, config, tmp_path, monkeypatch, caplog):
    """Its artifact folder deleted: the score job writes the champion's predictions, warns once
    naming the challenger, its artifact URI and what to do, writes no shadow rows for it, and the
    day's report records it as damaged."""
    import logging
    import shutil
    from urllib.parse import urlparse

    from jobs.scoring.job import main

    scoring, frame, client, name, (champion, challenger) = _two_versions(
        features_zone, config, tmp_path, monkeypatch, [DAY], "damaged-shadow-tests")
    client.set_registered_model_alias(name, "champion", champion)
    client.set_model_version_tag(name, challenger, "gate_decision", "awaiting_approval")
    challenger_uri = client.get_model_version_download_uri(name, challenger)
    shutil.rmtree(urlparse(challenger_uri).path)

    with caplog.at_level(logging.WARNING, logger="jobs.scoring.shadow"):
        main(["--run-date", DAY.isoformat(), "--lake-root", scoring.root])
    served = pd.read_parquet(scoring.partition(scoring.predictions, DAY))
    assert len(served) == len(frame) and set(served["model_version"]) == {champion}
    assert not Path(scoring.shadow).exists()
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "jobs.scoring.shadow"]
    assert f"model {name!r} version {challenger} (a challenger) cannot be loaded" in warning, warning
    assert challenger_uri in warning and "no files there" in warning and "delete_model_version" in warning
    assert not any(r.exc_info for r in caplog.records if r.name == "jobs.scoring.shadow")  # no trace
    summary = json.loads(Path(scoring.report("scoring", DAY)).read_text())
    (entry,) = summary["shadow"]
    assert entry["model_version"] == challenger and entry["damaged"] is True and challenger_uri in entry["error"]

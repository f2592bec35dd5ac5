"""The monitor: its metrics against scikit-learn, its intervals and estimate, and the job on a real
lake (the example data's features, predictions written as the score job writes them) with a real
MLflow store: outcomes joined, label delay, days without outcomes, unmatched predictions, a day
never scored, one monitoring run per version at step = day, re-runs, and the decay check reading
what the monitor wrote."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jobs.lake.layout import PARTITION, Lake, partition_name

DAYS = [dt.date(2013, 1, d) for d in range(2, 8)]  # 01-02 .. 01-07
D1, D2, D3, D4, D5, D6 = DAYS
NAME = "flight_delay"
HOLDOUT = {"roc_auc": 0.74, "pr_auc": 0.5, "log_loss": 0.47, "brier": 0.15, "ece": 0.03}


# ---------------------------------------------------------------------------------------------
# quality: pure numpy


def _rows(n: int = 900, seed: int = 0, ties: bool = False) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.uniform(size=n)
    if ties:
        p = np.round(p, 1)
    return p, (rng.uniform(size=n) < p).astype(float)


@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "tied"])
def test_metrics_equal_sklearns_and_trainings_on_the_same_rows(ties):
    from sklearn.metrics import average_precision_score, brier_score_loss, log_loss, roc_auc_score

    from jobs.metrics import expected_calibration_error, point_metrics, weighted_pr_auc, weighted_roc_auc
    from jobs.monitoring.quality import resample_weights

    p, y = _rows(ties=ties)
    got = point_metrics(y, p)
    assert got["roc_auc"] == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert got["pr_auc"] == pytest.approx(average_precision_score(y, p), abs=1e-12)
    assert got["log_loss"] == pytest.approx(log_loss(y, np.clip(p, 1e-7, 1 - 1e-7)), abs=1e-12)
    assert got["brier"] == pytest.approx(brier_score_loss(y, p), abs=1e-12)
    assert got["ece"] == pytest.approx(expected_calibration_error(y, p), abs=1e-12)
    assert (got["mean_prediction"], got["outcome_rate"]) == pytest.approx((p.mean(), y.mean()))
    # a bootstrap resample is the rows weighted by their draws: scikit-learn's sample_weight
    weights = resample_weights(len(p), 3, seed=1)
    assert weighted_roc_auc(y, p, weights) == pytest.approx([roc_auc_score(y, p, sample_weight=w) for w in weights])
    assert weighted_pr_auc(y, p, weights) == pytest.approx(
        [average_precision_score(y, p, sample_weight=w) for w in weights])


def test_every_metric_function_takes_the_outcomes_before_the_probabilities():
    """One argument order for every function that computes from outcomes and probabilities, the
    catalogue's and the monitor's: the labels first, then the scores (swapped, both are arrays of
    floats and nothing else would say so)."""
    import inspect

    import jobs.metrics
    import jobs.monitoring.quality

    labels, scores = {"labels", "outcomes", "y"}, {"probabilities", "scores", "p", "challenger", "champion"}
    checked = {}
    for module in (jobs.metrics, jobs.monitoring.quality):
        for name, function in inspect.getmembers(module, inspect.isfunction):
            params = list(inspect.signature(function).parameters)
            if function.__module__ == module.__name__ and labels & set(params) and scores & set(params):
                checked[name] = params
                first_label = min(params.index(p) for p in labels & set(params))
                assert first_label < min(params.index(p) for p in scores & set(params)), (name, params)
    assert {"evaluate", "roc_auc", "weighted_metrics", "metrics_with_intervals", "paired_difference",
            "level_check"} <= set(checked), sorted(checked)


def test_intervals_contain_the_value_and_a_rerun_gives_the_same_numbers():
    from jobs.metrics import REALIZED
    from jobs.monitoring.quality import metrics_with_intervals

    p, y = _rows(seed=3)
    first = metrics_with_intervals(y, p, resamples=200, seed=[13, 7])
    assert set(first) == set(REALIZED)
    for name, found in first.items():
        assert found["low"] <= found["value"] <= found["high"], name
        assert found["high"] - found["low"] > 0, name
    assert metrics_with_intervals(y, p, resamples=200, seed=[13, 7]) == first
    other = metrics_with_intervals(y, p, resamples=200, seed=[14, 7])
    assert other["roc_auc"]["value"] == first["roc_auc"]["value"] and other["roc_auc"]["low"] != first["roc_auc"]["low"]
    assert first["roc_auc"]["high"] - first["roc_auc"]["low"] < 0.1  # 900 rows: a few hundredths


def test_a_single_class_has_no_auc_and_nothing_is_nan():
    from jobs.monitoring.quality import estimate, metrics_with_intervals

    found = metrics_with_intervals([0.0, 0.0, 0.0], [0.2, 0.4, 0.7], resamples=50, seed=1)
    assert "roc_auc" not in found and "pr_auc" not in found and found["outcome_rate"]["value"] == 0.0
    json.dumps(found, allow_nan=False)
    assert metrics_with_intervals([], [], resamples=50, seed=1) == {} and estimate([]) == {}


def test_the_estimate_is_what_calibrated_probabilities_promise():
    """Outcomes drawn from the probabilities themselves: the realized AUC and log loss average
    to the estimate; outcomes that contradict them show as the estimate's error."""
    from sklearn.metrics import log_loss, roc_auc_score

    from jobs.monitoring.quality import estimate, estimate_error, metrics_with_intervals

    rng = np.random.default_rng(5)
    p = rng.beta(2, 5, size=900)
    expected = estimate(p)
    draws = [(rng.uniform(size=len(p)) < p).astype(float) for _ in range(200)]
    assert np.mean([roc_auc_score(y, p) for y in draws]) == pytest.approx(expected["roc_auc"], abs=0.005)
    assert np.mean([log_loss(y, p) for y in draws]) == pytest.approx(expected["log_loss"], abs=0.005)
    flipped = 1.0 - draws[0]  # a model whose outcomes turned against it
    error = estimate_error(metrics_with_intervals(flipped, p, 0, 1), expected)
    assert error["roc_auc"] < -0.2 and error["log_loss"] > 0.2


# ---------------------------------------------------------------------------------------------
# the job on a real lake


@pytest.fixture(scope="module")
def feature_frames(features_zone):
    """The real features of DAYS, one pandas frame per day (the ``date`` column dropped, as on disk)."""
    frame = features_zone.frame(DAYS).toPandas()
    return {day: part.drop(columns=[PARTITION]).reset_index(drop=True)
            for day, part in frame.groupby(PARTITION)}


def _write(zone: str, day: dt.date, frame: pd.DataFrame) -> None:
    folder = Path(zone) / partition_name(day)
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(folder / "part-00000.parquet", index=False)


def _predictions(features: pd.DataFrame, config, version: str, run_id: str, day: dt.date, seed: int) -> pd.DataFrame:
    """Prediction rows as the score job writes them, with probabilities that know the label a little."""
    rng = np.random.default_rng(seed)
    label = features[config.features.label].to_numpy(dtype=float)
    signal = np.where(np.isnan(label), 0.0, 1.6 * (label - 0.25))
    p = 1.0 / (1.0 + np.exp(-(signal + rng.normal(0.0, 1.0, len(label)) - 1.0)))
    out = features[list(dict.fromkeys(config.features.id_columns))].copy()
    out["probability"] = p
    out["model_name"], out["model_version"], out["model_run_id"] = NAME, version, run_id
    out["run_date"], out["scored_at"] = day, pd.Timestamp("2013-02-01 06:00:00").as_unit("us")
    return out


@pytest.fixture(scope="module")
def tracking(tmp_path_factory):
    """A throw-away MLflow store with two training runs that logged holdout metrics."""
    import mlflow

    home = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{home}/mlflow.db"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        mlflow.set_tracking_uri(uri)
        client = mlflow.MlflowClient(uri)
        experiment = client.create_experiment("flight_delay", artifact_location=str(home / "artifacts"))
        runs = {}
        for version in ("1", "2", "3"):
            run = client.create_run(experiment)
            for key, value in HOLDOUT.items():
                client.log_metric(run.info.run_id, f"holdout_{key}", value)
            runs[version] = run.info.run_id
        yield {"client": client, "runs": runs}


@pytest.fixture(scope="module")
def monitored_lake(feature_frames, config, tracking, tmp_path_factory):
    """A lake of DAYS: version 1 scored D1, D2, D3 and D5; version 2 scored D4; D2's predictions
    have rows no features row matches; D5's flights were all cancelled (no outcome); D6 has
    features and was never scored."""
    lake = Lake.at(str(tmp_path_factory.mktemp("lake")))
    label = config.features.label
    for day in DAYS:
        frame = feature_frames[day].copy()
        if day == D5:
            frame[label] = np.nan
        _write(lake.features, day, frame)
        if day == D6:
            continue
        version = "2" if day == D4 else "1"
        predictions = _predictions(frame, config, version, tracking["runs"][version], day, seed=day.day)
        if day == D2:
            ghosts = predictions.head(5).copy()
            ghosts["flight"] = (99990 + np.arange(5)).astype(predictions["flight"].dtype)  # as the score job types it
            predictions = pd.concat([predictions, ghosts], ignore_index=True)
        _write(lake.predictions, day, predictions)
    return lake


def _run(lake: Lake, day: dt.date, config_path: str | None = None) -> None:
    from jobs.monitoring.job import main

    main(["--run-date", day.isoformat(), "--lake-root", lake.root, *(["--config", config_path] if config_path else [])])


def _record(lake: Lake, day: dt.date) -> dict:
    def no_nan(text: str) -> float:
        raise AssertionError(f"{text} in monitoring.json")

    return json.loads(Path(lake.monitoring_report(day)).read_text(), parse_constant=no_nan)


@pytest.fixture(scope="module")
def monitored(monitored_lake, tracking):
    """The monitor run for every scored day (label delay 0, the example config)."""
    for day in (D1, D2, D3, D4, D5):
        _run(monitored_lake, day)
    return {day: _record(monitored_lake, day) for day in (D1, D2, D3, D4, D5)}


def test_a_day_is_judged_on_its_outcomes_with_the_metrics_of_its_joined_rows(monitored, feature_frames,
                                                                             monitored_lake, config):
    from sklearn.metrics import roc_auc_score

    from jobs.metrics import point_metrics

    record = monitored[D1]
    assert (record["day"], record["label_delay_days"], record["outcomes"]) == (D1.isoformat(), 0, "in")
    [entry] = record["models"]
    identity = (entry["model_name"], entry["model_version"], entry["role"], entry["status"])
    assert identity == (NAME, "1", "champion", "ok")
    predictions = pd.read_parquet(Path(monitored_lake.predictions) / partition_name(D1))
    labels = feature_frames[D1][config.features.label]
    assert entry["rows"] == len(predictions) == len(labels)
    assert entry["rows_with_outcome"] == int(labels.notna().sum()) > 0
    assert entry["predictions_without_outcome"] == int(labels.isna().sum()) > 0  # cancelled flights: counted
    assert entry["predictions_unmatched"] == 0
    # the same numbers from the rows joined by hand (features and predictions are in the same order here)
    known = labels.notna().to_numpy()
    y, p = labels.to_numpy()[known], predictions["probability"].to_numpy()[known]
    expected = point_metrics(y, p)
    assert entry["metrics"]["roc_auc"]["value"] == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert {k: v["value"] for k, v in entry["metrics"].items()} == pytest.approx(expected, abs=1e-12)
    assert entry["holdout"] == pytest.approx(HOLDOUT)
    assert set(entry["estimate"]) == {"roc_auc", "log_loss", "error"}
    assert entry["estimate"]["error"]["roc_auc"] == pytest.approx(
        entry["metrics"]["roc_auc"]["value"] - entry["estimate"]["roc_auc"])
    # segments: the evaluation's columns, small values pooled, each with its own interval
    segments = {(s["segment"], s["value"]): s for s in entry["segments"]}
    assert {s for s, _ in segments} == set(config.evaluation.segments)
    assert sum(s["rows_with_outcome"] for (c, _), s in segments.items() if c == "origin") == entry["rows_with_outcome"]
    ewr = segments[("origin", "EWR")]
    assert ewr["metrics"]["roc_auc"]["low"] <= ewr["metrics"]["roc_auc"]["value"] <= ewr["metrics"]["roc_auc"]["high"]
    assert any(v == "(other)" for c, v in segments if c == "carrier")


def test_predictions_without_a_features_row_are_counted_not_dropped(monitored):
    [entry] = monitored[D2]["models"]
    assert entry["predictions_unmatched"] == 5
    assert entry["rows"] == entry["rows_with_outcome"] + entry["predictions_without_outcome"]
    assert entry["predictions_without_outcome"] >= 5


def test_a_day_without_any_outcome_says_so_and_has_no_metrics(monitored):
    [entry] = monitored[D5]["models"]
    assert monitored[D5]["outcomes"] == "in"
    assert entry["status"] == "no_outcomes" and entry["metrics"] == {} and entry["segments"] == []
    assert entry["rows_with_outcome"] == 0 and entry["predictions_without_outcome"] == entry["rows"] > 0
    assert entry["estimate"]["error"] is None and "roc_auc" in entry["estimate"]


def test_each_version_has_one_monitoring_run_with_a_point_per_day(monitored, tracking, config):
    from jobs.monitoring.job import day_step

    client = tracking["client"]
    experiment = client.get_experiment_by_name(f"{config.train.experiment}-monitoring")
    runs = {r.data.tags["monitoring_of"]: r for r in client.search_runs([experiment.experiment_id])}
    assert set(runs) == {f"{NAME}/1", f"{NAME}/2"}
    first = runs[f"{NAME}/1"]
    assert first.info.run_id == monitored[D1]["models"][0]["mlflow_run_id"]
    assert monitored[D1]["models"][0]["mlflow_experiment_id"] == experiment.experiment_id
    history = client.get_metric_history(first.info.run_id, "roc_auc")
    assert {m.step for m in history} == {day_step(D) for D in (D1, D2, D3)}  # D5 had no outcomes
    assert {m.step for m in client.get_metric_history(first.info.run_id, "estimated_roc_auc")} == {
        day_step(D) for D in (D1, D2, D3, D5)}
    assert day_step(D1) == 15707  # 2013-01-02
    point = next(m for m in history if m.step == day_step(D1))
    assert point.value == pytest.approx(monitored[D1]["models"][0]["metrics"]["roc_auc"]["value"])
    second = client.get_metric_history(runs[f"{NAME}/2"].info.run_id, "roc_auc")
    assert [m.step for m in second] == [day_step(D4)]
    assert first.data.metrics["holdout_roc_auc"] == pytest.approx(HOLDOUT["roc_auc"])


def test_a_rerun_writes_the_same_record_and_reuses_the_run(monitored, monitored_lake, tracking, config):
    before = Path(monitored_lake.monitoring_report(D3)).read_bytes()
    _run(monitored_lake, D3)
    assert Path(monitored_lake.monitoring_report(D3)).read_bytes() == before
    client = tracking["client"]
    experiment = client.get_experiment_by_name(f"{config.train.experiment}-monitoring")
    assert len(client.search_runs([experiment.experiment_id], "tags.monitoring_of = 'flight_delay/1'")) == 1


def test_days_judged_in_one_job_equal_each_day_judged_alone(monitored, monitored_lake):
    """``--days 5``: the window's predictions joined with their outcomes in one query write, per
    day, the record that five one-day runs wrote (the replay and backfills rely on it)."""
    from jobs.monitoring.job import main

    before = {day: Path(monitored_lake.monitoring_report(day)).read_bytes() for day in monitored}
    for day in monitored:  # written again, not left as they were
        Path(monitored_lake.monitoring_report(day)).unlink()
    main(["--run-date", D5.isoformat(), "--days", "5", "--lake-root", monitored_lake.root])
    assert {day: Path(monitored_lake.monitoring_report(day)).read_bytes() for day in monitored} == before


def test_a_day_never_scored_fails_as_a_data_error_saying_what_to_trigger(monitored_lake, tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_NAME", "flights")  # as a DAG's job: its messages name the pipeline's DAGs
    from jobs.errors import DATA_ERROR_EXIT, ERROR_FILE_ENV
    from jobs.monitoring.job import NeverScoredError
    from jobs.runner import run_job

    with pytest.raises(NeverScoredError, match=r"day 2013-01-07 was never scored.*trigger flights_score with "
                                               r"\{\"run_date\": \"2013-01-07\"\}"):
        _run(monitored_lake, D6)
    monkeypatch.setenv(ERROR_FILE_ENV, str(tmp_path / "error.txt"))
    with pytest.raises(SystemExit) as exited:
        run_job(lambda: _run(monitored_lake, D6))
    assert exited.value.code == DATA_ERROR_EXIT  # Airflow does not retry it
    assert "flights_score" in (tmp_path / "error.txt").read_text()
    assert not Path(monitored_lake.monitoring_report(D6)).exists()


def test_with_a_label_delay_a_day_is_estimated_first_and_judged_when_its_outcomes_land(
    monitored_lake, feature_frames, config, config_patch, tracking, tmp_path
):
    """Label delay 1: the run for D2 judges D1 (its outcomes landed with D2's ingest) and gives
    D2 its estimate only; once D3's features land, a run for D3 judges D2."""
    config_path = config_patch.write(tmp_path, monitoring={"label_delay_days": 1})
    lake = Lake.at(str(tmp_path / "lake"))
    for day in (D1, D2):
        _write(lake.features, day, feature_frames[day])
        _write(lake.predictions, day, pd.read_parquet(Path(monitored_lake.predictions) / partition_name(day)))

    _run(lake, D2, str(config_path))
    judged, waiting = _record(lake, D1), _record(lake, D2)
    assert (judged["outcomes"], judged["label_delay_days"], judged["models"][0]["status"]) == ("in", 1, "ok")
    assert judged["models"][0]["metrics"]["roc_auc"]["value"] > 0.5
    [entry] = waiting["models"]
    assert (waiting["outcomes"], entry["status"]) == ("awaiting", "awaiting_outcomes")
    assert entry["metrics"] == {} and entry["segments"] == [] and entry["rows_with_outcome"] == 0
    assert entry["estimate"]["error"] is None and 0.5 < entry["estimate"]["roc_auc"] < 1.0

    _write(lake.features, D3, feature_frames[D3])  # D3's ingest brings D2's outcomes
    _write(lake.predictions, D3, _predictions(feature_frames[D3], config, "1", tracking["runs"]["1"], D3, seed=3))
    _run(lake, D3, str(config_path))
    now = _record(lake, D2)["models"][0]
    assert now["status"] == "ok" and now["estimate"]["roc_auc"] == entry["estimate"]["roc_auc"]
    assert now["estimate"]["error"]["roc_auc"] == pytest.approx(now["metrics"]["roc_auc"]["value"]
                                                                - now["estimate"]["roc_auc"])
    assert _record(lake, D3)["outcomes"] == "awaiting"


def test_the_decay_check_reads_what_the_monitor_wrote(feature_frames, config, tracking, tmp_path):
    """A champion whose outcomes turn against it from D4 on: over D1..D3 it holds up, over D4..D6
    the decay check (check_decay's report, on the monitor's records) says it decayed."""
    from orchestration.decisions import decay_report

    lake = Lake.at(str(tmp_path / "lake"))
    label = config.features.label
    for day in DAYS:
        features = feature_frames[day].copy()
        _write(lake.predictions, day, _predictions(features, config, "3", tracking["runs"]["3"], day, seed=day.day))
        if day >= D4:
            features[label] = 1.0 - features[label]  # the world changed: late is on time and back
        _write(lake.features, day, features)
        _run(lake, day)
    records = [_record(lake, day) for day in DAYS]
    spec = dataclasses.replace(config.monitoring.decay, window_days=3)

    healthy = decay_report(records[:3], [], NAME, "3", D3, spec)
    assert healthy["status"] == "judged" and not healthy["decayed"] and not healthy["triggered"], healthy
    assert healthy["holdout"] == HOLDOUT["roc_auc"] and healthy["days"] == [d.isoformat() for d in (D1, D2, D3)]

    decayed = decay_report(records, [], NAME, "3", D6, spec)
    assert decayed["decayed"] and decayed["triggered"], decayed
    assert decayed["days"] == [d.isoformat() for d in (D4, D5, D6)]
    assert decayed["metric"]["high"] < HOLDOUT["roc_auc"] - spec.margin
    assert any("realized roc_auc" in reason for reason in decayed["reasons"])
    json.dumps(decayed, allow_nan=False)
    assert not math.isnan(decayed["metric"]["value"])


def test_a_day_re_scored_by_a_new_champion_keeps_the_replaced_one_s_judgement(monitored, monitored_lake, tracking,
                                                                              feature_frames, config):
    """A promotion re-scores the day with the new champion (version 3 here): the monitor judges it,
    and the entry of the version it replaced stays in the day's record (``role: replaced``), as it was."""
    from orchestration.health.view import DocumentCache, model_health

    before = monitored[D3]["models"][0]
    _write(monitored_lake.predictions, D3,
           _predictions(feature_frames[D3], config, "3", tracking["runs"]["3"], D3, seed=99))
    _run(monitored_lake, D3)
    new, old = _record(monitored_lake, D3)["models"]
    assert (new["model_version"], new["role"], old["model_version"], old["role"]) == ("3", "champion", "1", "replaced")
    assert {k: v for k, v in old.items() if k != "role"} == {k: v for k, v in before.items() if k != "role"}
    _run(monitored_lake, D3)  # a re-run keeps it once
    assert [(e["model_version"], e["role"]) for e in _record(monitored_lake, D3)["models"]] == [
        ("3", "champion"), ("1", "replaced")]
    (found,) = model_health(monitored_lake, cache=DocumentCache())["models"]
    assert "1" not in found["challengers"]  # a replaced version is history, not a challenger


def test_a_version_deleted_from_mlflow_keeps_its_history_on_the_page(monitored, monitored_lake, tracking):
    """Version 2's training run deleted for good (``mlflow gc``, as when a team cleans up its
    registered version and runs): the monitor re-run of its day still judges it, without a holdout
    to compare with, and the Model health page, which reads the lake, still shows its day.
    Last in this module: the run does not come back."""
    import os
    import subprocess
    import sys

    from orchestration.health.view import DocumentCache, model_health

    client, run_id = tracking["client"], tracking["runs"]["2"]
    client.delete_run(run_id)
    subprocess.run([sys.executable, "-m", "mlflow", "gc", "--backend-store-uri", os.environ["MLFLOW_TRACKING_URI"],
                    "--run-ids", run_id], check=True, capture_output=True, timeout=300)
    _run(monitored_lake, D4)
    [entry] = _record(monitored_lake, D4)["models"]
    assert (entry["model_version"], entry["status"], entry["holdout"]) == ("2", "ok", {})
    assert entry["metrics"]["roc_auc"] == monitored[D4]["models"][0]["metrics"]["roc_auc"]
    (found,) = model_health(monitored_lake, cache=DocumentCache())["models"]
    versions = {v["model_version"]: v for v in found["versions"]}
    assert [d["day"] for d in versions["2"]["days"]] == [D4.isoformat()]


def test_a_served_level_far_from_the_truth_is_flagged_with_the_shifts_part():
    """A day like the demo's 2013-01-29: a model whose own mean is about 0.134, shifted by +1.169
    logits, on a day whose realized rate is 0.115: flagged, the shift named as most of the gap. The
    model's own level is within the day's interval and is not; a gap under the setting is not."""
    from jobs.monitoring.quality import level_check

    rng = np.random.default_rng(0)
    own = np.clip(rng.beta(1.3, 8.4, 869), 1e-4, 1 - 1e-4)
    served = 1 / (1 + np.exp(-(np.log(own / (1 - own)) + 1.169)))
    y = (rng.random(869) < 0.115).astype(float)
    found = level_check(y, served, own, 0.10)
    assert found["flagged"] and found["low"] < found["realized_rate"] < found["high"] < found["predicted_rate"]
    assert found["shift_part"] == pytest.approx(found["predicted_rate"] - found["model_rate"])
    assert found["shift_part"] > 0.5 * found["gap"] > 0
    assert "times the truth" in found["reason"] and "recent-outcome shift" in found["reason"]
    calibrated = level_check(y, own, None, 0.10)
    assert not calibrated["flagged"] and "shift_part" not in calibrated
    assert not level_check(y, served, own, 0.5)["flagged"]  # a gap under the setting: not flagged


def test_the_monitor_flags_a_shifted_day_far_from_its_outcomes_and_the_verdict_lists_it(
        feature_frames, config, tracking, tmp_path, caplog, monkeypatch):
    """The monitor judges the served level beside the ranking: a day whose served probabilities sit
    far above its realized rate is flagged in monitoring.json, with the shift's part read from the
    rows' model_probability and logit_shift; the decay verdict lists the day without retraining on it."""
    from jobs.monitoring.decay import judge

    lake = Lake.at(str(tmp_path / "lake"))
    frame = feature_frames[D1]
    _write(lake.features, D1, frame)
    predictions = _predictions(frame, config, "1", tracking["runs"]["1"], D1, seed=1)
    own = predictions["probability"].to_numpy()
    predictions["model_probability"], predictions["logit_shift"] = own, 2.0
    predictions["probability"] = 1 / (1 + np.exp(-(np.log(own / (1 - own)) + 2.0)))
    _write(lake.predictions, D1, predictions)
    monkeypatch.setenv("PIPELINE_NAME", "flights")  # as a DAG's job
    with caplog.at_level("WARNING", logger="jobs.monitoring.job"):
        _run(lake, D1)
    # one line: the pipeline, the day, the version, what is wrong and what to do
    [said] = [r.getMessage() for r in caplog.records if "MISCALIBRATED" in r.getMessage()]
    assert said.startswith(f"pipeline flights, {D1}: {NAME} version 1 (champion): MISCALIBRATED: served level ")
    assert "Nothing retrains on the level alone: if it persists, retrain (trigger flights_train)" in said
    [entry] = _record(lake, D1)["models"]
    level = entry["level"]
    assert level["flagged"] and level["predicted_rate"] > level["high"]
    assert level["model_rate"] == pytest.approx(own[frame[config.features.label].notna().to_numpy()].mean(), abs=1e-6)
    verdict = judge([_record(lake, D1)], NAME, "1", HOLDOUT, config.monitoring.decay)
    assert [d["day"] for d in verdict["miscalibrated_days"]] == [D1.isoformat()] and not verdict["decayed"]

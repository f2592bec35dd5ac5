"""Champion and challengers on live data: the versions chosen from a real registry's gate tags,
the paired difference, the monitor comparing a shadow challenger with the champion on a real lake,
the live evidence pooled from monitoring files, and the live promotion moving the real alias."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jobs.lake.layout import PARTITION, Lake, partition_name

DAY = dt.date(2013, 1, 6)


@pytest.fixture(scope="module")
def registry(features_zone, config, tmp_path_factory):
    """A real MLflow store (SQLite, artifacts beside it) with one tiny logged net, the real
    features of DAY, and ``register()``: a new registered version of that net."""
    import mlflow
    import torch

    from jobs.model.tabular import build_net, log_pyfunc
    from jobs.tracking import ensure_experiment
    from jobs.training.data import fit_preprocessor

    features = features_zone.frame([DAY])
    pre = fit_preprocessor(features, config.features, min_count=1)
    frame = features.toPandas()
    holdout = frame[frame[config.features.label].notna()].reset_index(drop=True)
    home = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{home}/mlflow.db"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        mlflow.set_tracking_uri(uri)
        mlflow.set_experiment(experiment_id=ensure_experiment("challenger-tests"))
        torch.manual_seed(2)
        hyper = {"embedding_dim": 4, "hidden_units": [8]}
        with mlflow.start_run():
            info = log_pyfunc(build_net(pre, hyper), pre, hyper, frame.head(5))
        name = config.train.model_name
        probabilities = mlflow.pyfunc.load_model(info.model_uri).predict(holdout[config.features.inputs])

        def register() -> str:
            return str(mlflow.register_model(info.model_uri, name).version)

        yield {"client": mlflow.MlflowClient(uri), "name": name, "register": register, "holdout": holdout,
               "probabilities": np.asarray(probabilities), "frame": frame}


def _gate(registry, config, version: str, probabilities, **kwargs):
    from jobs.selection.gate import apply_gate

    return apply_gate(registry["client"], registry["name"], version, registry["holdout"], config.features.inputs,
                      config.features.label, "roc_auc", 0.01, probabilities, **kwargs)


@pytest.fixture(scope="module")
def gated(registry, config):
    """Versions through the real gate: 1 champion; 2 as good as it (a near miss); 3 far worse;
    4 better, awaiting approval; 5 better, awaiting live evidence; 6 better, rejected by a person."""
    from jobs.selection.gate import record_approval

    y = registry["holdout"][config.features.label].to_numpy(dtype=float)
    own, perfect = registry["probabilities"], 0.1 + 0.8 * y
    versions = {}
    for key, probabilities, kwargs in [("champion", own, {}), ("near", own, {}), ("worse", 1.0 - perfect, {}),
                                       ("approval", perfect, {"require_approval": True}),
                                       ("live", perfect, {"live_evidence": True}),
                                       ("refused", perfect, {"require_approval": True})]:
        version = registry["register"]()
        decision = _gate(registry, config, version, probabilities, **kwargs)
        versions[key] = (version, decision)
    record_approval(registry["client"], registry["name"], versions["refused"][0], False, "ops", "1")
    return {key: version for key, (version, _) in versions.items()} | {
        "decisions": {key: decision for key, (_, decision) in versions.items()}}


def test_challengers_are_the_versions_awaiting_then_the_near_misses_of_the_gate(registry, gated, config):
    from jobs.monitoring.challengers import challenger_versions

    decisions = gated["decisions"]
    assert [decisions[k].outcome for k in ("champion", "near", "worse", "approval", "live")] == [
        "promoted", "rejected", "rejected", "awaiting_approval", "awaiting_live_evidence"]
    assert registry["client"].get_model_version(registry["name"], gated["near"]).tags["gate_margin"] == "0.01"
    client, name = registry["client"], registry["name"]

    def chosen(limit: int) -> list[str]:
        return [ref.version for ref in challenger_versions(client, name, limit, margin=0.01)]

    assert chosen(3) == [gated["live"], gated["approval"], gated["near"]]  # the champion is never one
    assert chosen(2) == [gated["live"], gated["approval"]]
    assert chosen(0) == [] and len(chosen(10)) == 3  # far worse and refused by a person: never
    refs = challenger_versions(client, name, 1, margin=0.01)
    assert refs[0].run_id and refs[0].name == name


def test_the_paired_difference_judges_both_models_on_the_same_resampled_rows():
    from sklearn.metrics import roc_auc_score

    from jobs.monitoring.quality import paired_difference

    rng = np.random.default_rng(4)
    y = (rng.uniform(size=900) < 0.25).astype(float)
    weak = np.clip(0.25 + 0.1 * (y - 0.25) + rng.normal(0, 0.2, 900), 0.01, 0.99)
    strong = np.clip(0.25 + 0.4 * (y - 0.25) + rng.normal(0, 0.2, 900), 0.01, 0.99)
    found = paired_difference(y, strong, weak, "roc_auc", 200, [13, 1])
    assert found["value"] == pytest.approx(roc_auc_score(y, strong) - roc_auc_score(y, weak), abs=1e-12)
    assert 0 < found["low"] <= found["value"] <= found["high"]
    same = paired_difference(y, weak, weak, "roc_auc", 200, [13, 1])
    assert same == {"value": 0.0, "low": 0.0, "high": 0.0}  # paired: one model against itself never differs
    assert paired_difference(np.zeros(900), weak, strong, "roc_auc", 50, 1) is None  # one class: no AUC


def _write(zone: str, day: dt.date, frame: pd.DataFrame) -> None:
    folder = Path(zone) / partition_name(day)
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(folder / "part-00000.parquet", index=False)


def _predictions(features: pd.DataFrame, config, version: str, signal: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    label = features[config.features.label].to_numpy(dtype=float)
    logit = np.where(np.isnan(label), 0.0, signal * (label - 0.25)) + rng.normal(0.0, 1.0, len(label)) - 1.0
    out = features[list(dict.fromkeys(config.features.id_columns))].copy()
    out["probability"] = 1.0 / (1.0 + np.exp(-logit))
    out["model_name"], out["model_version"], out["model_run_id"] = "flight_delay", version, ""
    out["run_date"], out["scored_at"] = DAY, pd.Timestamp("2013-02-01 06:00:00").as_unit("us")
    return out


def test_the_monitor_compares_a_shadow_challenger_with_the_champion_on_the_same_rows(
        registry, config, tmp_path, monkeypatch):
    """Served predictions of version 1 and shadow ones of version 2 for two days: the record has a
    challenger entry whose comparison is the paired difference on the rows both scored, pooled
    over the days so far."""
    from sklearn.metrics import roc_auc_score

    from jobs.monitoring.job import main

    lake = Lake(str(tmp_path / "lake"))
    frame = registry["frame"].drop(columns=[PARTITION])
    label = config.features.label
    days = [DAY, DAY + dt.timedelta(days=1)]
    for i, day in enumerate(days):
        _write(lake.features, day, frame)
        _write(lake.predictions, day, _predictions(frame, config, "1", 0.5, seed=i))
        shadow = _predictions(frame, config, "2", 3.0, seed=10 + i)
        _write(lake.shadow_predictions("2"), day, shadow.iloc[:-7])  # a few rows the challenger did not score
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/monitor.db")
    for day in days:
        main(["--run-date", day.isoformat(), "--lake-root", lake.root])
    record = json.loads(Path(lake.monitoring_report(days[1])).read_text())
    champion, challenger = record["models"]
    assert (champion["role"], champion["model_version"]) == ("champion", "1") and "comparison" not in champion
    assert (challenger["role"], challenger["model_version"], challenger["status"]) == ("challenger", "2", "ok")
    compared = challenger["comparison"]
    assert (compared["metric"], compared["champion_version"]) == ("roc_auc", "1")
    served, shadow = _predictions(frame, config, "1", 0.5, seed=1), _predictions(frame, config, "2", 3.0, seed=11)
    known = frame[label].notna().to_numpy()
    known[-7:] = False
    y = frame[label].to_numpy(dtype=float)[known]
    expected = (roc_auc_score(y, shadow["probability"].to_numpy()[known])
                - roc_auc_score(y, served["probability"].to_numpy()[known]))
    assert compared["rows"] == int(known.sum())
    assert compared["difference"]["value"] == pytest.approx(expected, abs=1e-12)
    assert 0 < compared["difference"]["low"] <= compared["difference"]["value"] <= compared["difference"]["high"]
    assert compared["pooled"]["days"] == [d.isoformat() for d in days] and compared["pooled"]["beats"] is False


def _record(day: dt.date, champion: str, challenger: str, diff: tuple[float, float, float], rows: int = 800) -> dict:
    value, low, high = diff
    return {"day": day.isoformat(), "label_delay_days": 0, "outcomes": "in", "models": [
        {"model_name": "flight_delay", "model_version": champion, "role": "champion", "status": "ok"},
        {"model_name": "flight_delay", "model_version": challenger, "role": "challenger", "status": "ok",
         "comparison": {"metric": "roc_auc", "champion_version": champion, "rows": rows,
                        "difference": {"value": value, "low": low, "high": high}}}]}


def _write_records(lake: Lake, records: list[dict]) -> None:
    from jobs.lake.storage import write_text

    for record in records:
        write_text(lake.monitoring_report(dt.date.fromisoformat(record["day"])), json.dumps(record))


def test_live_evidence_pools_the_last_k_days_of_the_pair_from_the_monitoring_zone(tmp_path):
    from jobs.monitoring.challengers import live_evidence, monitoring_records

    lake = Lake(str(tmp_path / "lake"))
    start = dt.date(2013, 2, 1)
    records = [_record(start, "1", "5", (0.01, -0.02, 0.04))]  # an old, uncertain day
    records += [_record(start + dt.timedelta(days=i), "1", "5", (0.03, 0.01, 0.05)) for i in range(1, 4)]
    records.append(_record(start + dt.timedelta(days=4), "9", "5", (-0.5, -0.6, -0.4)))  # another champion
    _write_records(lake, records)
    read = monitoring_records(lake)
    assert [r["day"] for r in read] == [r["day"] for r in records]
    assert monitoring_records(lake, start + dt.timedelta(days=2), 2)[-1]["day"] == "2013-02-03"

    found = live_evidence(read, "flight_delay", "1", "5", live_days=3)
    assert found["days"] == ["2013-02-02", "2013-02-03", "2013-02-04"] and found["rows"] == 2400
    assert found["difference"]["value"] == pytest.approx(0.03)
    assert 0 < found["difference"]["low"] < 0.03 < found["difference"]["high"]
    assert found["beats"] is True and "beats the champion" in found["summary"]
    short = live_evidence(read[1:3], "flight_delay", "1", "5", live_days=3)
    assert short["beats"] is False and "2 of 3 days" in short["summary"]
    none = live_evidence(read, "flight_delay", "1", "7", live_days=3)
    assert none["difference"] is None and none["beats"] is False and "no live evidence" in none["summary"]


def test_with_live_evidence_an_approval_waits_for_the_evidence_and_the_gate_alone_promotes_nothing(
        registry, gated):
    from jobs.monitoring.challengers import promotion_decision
    from jobs.selection.gate import current_champion, record_approval

    client, name = registry["client"], registry["name"]
    outcome = record_approval(client, name, gated["approval"], True, "ops", gated["champion"], live_evidence=True)
    assert outcome == "awaiting_live_evidence"
    assert str(current_champion(client, name).version) == gated["champion"]
    assert client.get_model_version(name, gated["approval"]).tags["gate_approved_by"] == "ops"
    beats = {"beats": True, "summary": "version 5 vs champion v1 ... beats the champion"}
    assert promotion_decision("holdout", "promoted", None)["promote"]
    assert not promotion_decision("holdout", "awaiting_live_evidence", beats)["promote"]
    assert not promotion_decision("live", "awaiting_live_evidence", None)["promote"]
    assert not promotion_decision("live", "awaiting_live_evidence", {**beats, "beats": False})["promote"]
    assert not promotion_decision("live", "rejected", beats)["promote"]
    assert promotion_decision("live", "awaiting_live_evidence", beats)["promote"]
    assert promotion_decision("live", "promoted", None)["promote"]  # the first version: no champion to beat


def test_with_live_evidence_the_alias_moves_only_once_the_challenger_beats_the_champion_on_k_days(
        registry, gated, config, tmp_path):
    """The decision of promote_challenger on real monitoring files and the real registry."""
    from airflow.sdk.exceptions import AirflowSkipException

    from jobs.selection.gate import current_champion
    from orchestration.score_tasks import live_promotion_event

    client, name = registry["client"], registry["name"]
    champion, live = gated["champion"], gated["live"]
    spec = dataclasses.replace(config.monitoring, promotion_evidence="live", live_days=3, challengers=2)
    live_config = dataclasses.replace(config, monitoring=spec)
    lake = Lake(str(tmp_path / "lake"))
    start = dt.date(2013, 2, 1)
    days = [start + dt.timedelta(days=i) for i in range(3)]
    scored = [{"day": d.isoformat()} for d in days]
    _write_records(lake, [_record(d, champion, live, (0.03, 0.01, 0.05)) for d in days[:2]])

    with pytest.raises(AirflowSkipException, match="holdout"):
        live_promotion_event(scored, config, lake, client)  # promotion_evidence: holdout (the default)
    with pytest.raises(AirflowSkipException, match="3 live days"):
        live_promotion_event(scored, live_config, lake, client)  # two days: not yet
    assert str(current_champion(client, name).version) == champion

    _write_records(lake, [_record(days[2], champion, live, (0.03, 0.01, 0.05))])
    extra = live_promotion_event(scored, live_config, lake, client)
    assert (extra["model_version"], extra["replaced"], extra["run_date"]) == (live, champion, days[2].isoformat())
    assert str(current_champion(client, name).version) == live
    tags = client.get_model_version(name, live).tags
    assert tags["gate_decision"] == "promoted" and "live evidence" in tags["gate_reason"]
    assert tags["gate_live_days"] == ",".join(d.isoformat() for d in days)

"""Sixteen days replayed through the real jobs (validate, features, train, score, monitor) and the
DAGs' decisions, under two policies (``never`` and ``default``: weekly, on drift or on decay),
checking the invariants a year's replay must keep:

- every day served exactly once per policy, by the version that was that policy's champion then:
  read from the registry alone (the latest version the gate promoted on a window that ended before
  the day), and the served rows, the monitor's record and the replay's state agree with it;
- no served prediction from a model whose training window holds the day (no leakage);
- retrainings only on their triggers, and every trigger starts one: the days with a retraining are
  exactly the days the weekly schedule fires, the day's drift report says drifted, or the day's
  decay report says the decay starts a retraining (read from the reports the jobs wrote), and each
  retraining's trigger holds on its day;
- the lake's row accounting, day by day: raw rows = validated + quarantined, one feature row per
  validated flight, one served prediction per feature row;
- run again with the same settings, it does nothing twice (resumable), and the report is the same.

A lighter model than the DAG's (a 15-day window, two epochs, one rank, the bar open, GX's
cross-check off: each is tested on its own) keeps the 32 policy-days and their retrainings to a
few minutes.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

# sixteen days: three Saturdays (the weekly schedule), the 2013-02-08 blizzard, and with the first window's
# fifteen days one month of the shared lake, one validate and one features job; six weeks cost 569 s of
# the suite's 2,400 (2026-11-28), four 382-413 s, three 350 s, for the same checks
START, END = dt.date(2013, 2, 1), dt.date(2013, 2, 16)
POLICIES = ("never", "default")


def _rows(path: str) -> int:
    """Rows of a Parquet partition folder (0 when it does not exist)."""
    import pyarrow.parquet as pq

    return pq.read_table(path).num_rows if Path(path).exists() else 0


def test_sixteen_days_under_two_policies_keep_the_invariants(spark, config_patch, tmp_path, monkeypatch):
    import pandas as pd
    import pyarrow.parquet as pq
    from mlflow import MlflowClient

    from jobs.lake.layout import DECAY_REPORT, DRIFT_REPORT, Lake
    from orchestration.decisions import scheduled_training_end
    from orchestration.replay.engine import Replay

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setenv("PIPELINE_MLFLOW_ARTIFACTS", str(tmp_path / "mlartifacts"))
    config = config_patch.write(
        tmp_path / "config",
        # exactly 10 training days (no expanding window): the shared lake is the first window's 15 days on
        train={"train_days": 10, "max_train_days": None, "validation_days": 2, "holdout_days": 3, "epochs": 2,
               "num_processes": 1},
        validation={"great_expectations": False},
        sweep={"families": ["mlp"]},  # the xgboost family is tested in tests/jobs/selection/test_trees.py
    )
    home = tmp_path / "replay"
    # the bar open (no baselines): a one-candidate sweep of a light model need not beat them
    settings = {"start": START, "end": END, "policies": POLICIES, "base_config": str(config),
                "sweep_size": 1, "baselines": 0}
    replay = Replay(home, **settings)
    report = replay.run()

    # the home's own store, not the environment's (which another replay home may share)
    assert replay.tracking_uri == f"sqlite:///{home.resolve()}/mlflow.db"
    assert MlflowClient(f"sqlite:///{tmp_path}/mlflow.db").search_registered_models() == []
    mlflow_client = MlflowClient(replay.tracking_uri)
    shared = Lake(str(home / "lake"))
    days = [START + dt.timedelta(days=i) for i in range((END - START).days + 1)]
    state = json.loads((home / "state.json").read_text())

    for day in days:  # the shared zones: nothing lost, nothing made up
        raw = len(pd.read_csv(shared.raw_file("flights", day), dtype=str, keep_default_na=False))
        validated = _rows(shared.partition(shared.validated("flights"), day))
        assert raw == validated + _rows(shared.partition(shared.quarantine("flights"), day)), day
        assert _rows(shared.partition(shared.features, day)) == validated, day

    for name in POLICIES:
        mine = state["policies"][name]
        model = f"flight_delay-replay-{name}"
        assert sorted(mine["served"]) == [d.isoformat() for d in days], name  # each day once
        # the registry's own record of who was champion when: promoted versions and their windows
        promoted = sorted((int(v.version), dt.date.fromisoformat(v.tags["run_date"]))
                          for v in mlflow_client.search_model_versions(f"name = '{model}'")
                          if v.tags.get("gate_decision") == "promoted")
        lake = Lake(str(home / "policies" / name / "lake"))
        for day in days:
            version = str(max(v for v, window_end in promoted if window_end < day))  # no leakage
            assert mine["served"][day.isoformat()] == version, (name, day)
            served = pq.read_table(lake.partition(lake.predictions, day)).to_pandas()
            assert set(served["model_version"]) == {version}, (name, day)
            assert len(served) == _rows(shared.partition(shared.features, day)), (name, day)  # one per row
            record = json.loads(Path(lake.monitoring_report(day)).read_text())
            assert [(e["model_version"], e["role"]) for e in record["models"]] == [(version, "champion")]

        later = [t for t in mine["trainings"] if t["day"] >= START.isoformat()]
        if name == "never":
            assert later == [] and len(promoted) == 1
            continue
        # retrainings only on their triggers, every trigger one retraining (read from the reports)
        fired = {}
        for day in days:
            drift = json.loads(Path(lake.report("drift", day, DRIFT_REPORT)).read_text())
            decay = json.loads(Path(lake.report("decay", day, DECAY_REPORT)).read_text())
            holds = {"schedule": scheduled_training_end(day) is not None,
                     "drift": drift["drifted"] and drift["status"] != "too_few_rows",
                     "decay": decay["triggered"]}
            if any(holds.values()):
                fired[day.isoformat()] = holds
        assert [t["day"] for t in later] == sorted(fired), (later, fired)
        for training in later:
            assert fired[training["day"]][training["trigger"]], training
            assert training["run_date"] == training["day"]  # the window up to the served day
        assert sum(t["trigger"] == "schedule" for t in later) >= 1  # the weekly schedule's Saturdays
        assert len(promoted) == 1 + sum(t["outcome"] == "promoted" for t in later)

    # each window's model selection ran once, whichever policies trained on it: the first champion's
    # one candidate run became a version of both models
    windows = {t["run_date"]: t["run_id"] for name in POLICIES for t in state["policies"][name]["trainings"]}
    assert sorted(state["trained"]) == sorted(windows)
    assert all(state["trained"][window]["run_id"] == run_id for window, run_id in windows.items())
    assert len({state["policies"][name]["trainings"][0]["run_id"] for name in POLICIES}) == 1
    assert report["policies"]["never"]["retrainings"]["started"] == 0
    assert report["policies"]["default"]["days_judged"] == len(days)
    # each judged day with its weight in the means, what a combined report of parts recomputes them from
    assert all(day["rows"] > 0 for name in POLICIES for day in report["policies"][name]["daily"])
    # which family served, per window each family's holdout score (here the MLP's only: no baselines)
    for name in POLICIES:
        assert report["policies"][name]["days_by_family"] == {"mlp": report["policies"][name]["days_served"]}
    assert [row["window"] for row in report["windows"]] == sorted(state["trained"])
    for row in report["windows"]:
        assert row["chosen"] == "mlp" and set(row["holdout"]) == {"mlp"} and 0 < row["holdout"]["mlp"] < 1
    assert "Days served by each family" in (home / "report" / "replay.md").read_text()

    again = Replay(home, **settings).run()  # resumed: nothing left to do, nothing done twice
    assert json.loads((home / "state.json").read_text()) == state
    assert again["policies"] == report["policies"]

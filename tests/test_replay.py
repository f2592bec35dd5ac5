"""A short replay through the real jobs (validate, features, baselines, train, score, monitor) and
the DAGs' decisions, two policies, checking the invariants a year's replay must keep:

- every day served exactly once per policy, by the version that was that policy's champion then
  (the registry's own record: the version's ``gate_decision`` and its window end);
- no served prediction from a model whose training window holds the day (no leakage);
- retrainings only on their triggers (``weekly``: where train_pipeline's schedule fires);
- the lake's row accounting: each served day has one prediction per feature row;
- run again with the same settings, it does nothing twice (resumable), and the report is the same.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

START, END = dt.date(2013, 2, 1), dt.date(2013, 2, 4)  # Saturday 2 February: the weekly schedule fires


def test_two_policies_replayed_keep_the_invariants(spark, tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from jobs.lake.layout import Lake
    from jobs.tracking import client
    from orchestration.replay.engine import Replay
    from orchestration.tasks import scheduled_training_end

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setenv("PIPELINE_MLFLOW_ARTIFACTS", str(tmp_path / "mlartifacts"))
    home = tmp_path / "replay"
    # the bar open (no baselines): the one-candidate sweep of this short test need not beat them
    settings = {"start": START, "end": END, "policies": ("never", "weekly"), "sweep_size": 1, "baselines": 0}
    report = Replay(home, **settings).run()

    mlflow_client = client()
    days = [START + dt.timedelta(days=i) for i in range((END - START).days + 1)]
    for name in ("never", "weekly"):
        state = json.loads((home / "state.json").read_text())["policies"][name]
        assert sorted(state["served"]) == [d.isoformat() for d in days], name  # each day once
        lake = Lake(str(home / "policies" / name / "lake"))
        promoted_on = {t["version"]: t["day"] for t in state["trainings"] if t["outcome"] == "promoted"}
        for day in days:
            version = state["served"][day.isoformat()]
            tags = mlflow_client.get_model_version(f"flight_delay-replay-{name}", version).tags
            assert tags["gate_decision"] == "promoted", (name, day, tags)
            assert dt.date.fromisoformat(tags["run_date"]) < day, (name, day, tags)  # no leakage
            assert promoted_on[version] < day.isoformat()  # champion before the day, not after
            served = pq.read_table(lake.partition(lake.predictions, day)).to_pandas()
            assert set(served["model_version"]) == {version}
            features = pq.read_table(lake.partition(lake.features, day)).to_pandas()
            assert len(served) == len(features)  # one prediction per feature row
            record = json.loads(Path(lake.monitoring_report(day)).read_text())
            assert [(e["model_version"], e["role"]) for e in record["models"]] == [(version, "champion")]
        later = [t for t in state["trainings"] if t["day"] >= START.isoformat()]
        if name == "never":
            assert later == []
        else:  # only where the schedule fires, the window up to that day, the new champion from the next day
            fired = [d.isoformat() for d in days if scheduled_training_end(d)]
            assert [(t["day"], t["trigger"], t["run_date"]) for t in later] == [(d, "schedule", d) for d in fired]

    # the same window's model selection ran once for both policies: one candidate run, two versions
    state = json.loads((home / "state.json").read_text())
    assert sorted(state["trained"]) == ["2013-01-31", "2013-02-02"]
    assert report["policies"]["weekly"]["days_judged"] == len(days)
    assert report["policies"]["never"]["retrainings"]["started"] == 0

    again = Replay(home, **settings).run()  # resumed: nothing left to do, nothing done twice
    assert json.loads((home / "state.json").read_text()) == state
    assert again["policies"] == report["policies"]

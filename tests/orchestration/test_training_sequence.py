"""The training sequence is planned once: for one window, the train DAG's tasks and the replay give
the baselines, the candidates and the promotion the same job arguments (the replay adds only where
its jobs run: its config and lake). No job runs: their mains are stand-ins that record their argv."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import jinja2
import pytest

DAGS_DIR = Path(__file__).resolve().parents[2] / "dags"
RUN_DATE, STARTED_BY, TRAINING, CHOSEN = "2013-01-31", "a person", "replay/2013-01-31/abc000000000", "run-chosen"


def _without_where(argv: list[str]) -> list[str]:
    """``argv`` less the options saying where a job runs (its config files and lake)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--config", "--profile", "--overlay", "--lake-root"):
            skip = True
        else:
            out.append(arg)
    return out


def _render(args: list[Any], dag: Any, xcoms: dict[str, str]) -> list[str]:
    """A task's arguments as they reach the job: templates rendered for a run with no params,
    other tasks' outputs (by their key) from ``xcoms``."""
    env = jinja2.Environment()
    env.globals.update(dag.user_defined_macros or {})
    params = dict.fromkeys(dag.params)
    return [env.from_string(a).render(params=params) if isinstance(a, str) else xcoms[a.key] for a in args]


@pytest.fixture
def replayed(tmp_path, monkeypatch) -> dict[str, Any]:
    """One window of the replay, its jobs recorded instead of run: the argv of each."""
    from jobs.baselines import job as baselines_job
    from jobs.promotion import job as promotion_job
    from jobs.training import job as train_job
    from orchestration.replay import engine
    from orchestration.replay.home import config_of

    calls: dict[str, list[list[str]]] = {"baselines": [], "train": [], "promote": []}
    for name, module in (("baselines", baselines_job), ("train", train_job), ("promote", promotion_job)):
        monkeypatch.setattr(module, "main", lambda argv, name=name: calls[name].append(list(argv)))
    monkeypatch.setattr("jobs.selection.sweep.open_parent", lambda *args, **kwargs: "parent-run")
    monkeypatch.setattr("jobs.selection.sweep.best_candidate",
                        lambda config, parent: {"run_id": CHOSEN, "family": "mlp", "name": "c", "score": 0.7})
    monkeypatch.setattr(engine, "family_scores", lambda config, training: {})
    monkeypatch.setattr("jobs.lake.reports.read_report", lambda lake, kind, day: {"model_version": "1", "gate": {}})
    monkeypatch.setattr("uuid.uuid4", lambda: type("U", (), {"hex": "abc" + "0" * 29})())
    replay = engine.Replay(tmp_path / "replay", baselines=1)
    replay.state["policies"]["weekly"] = {"seconds": {}}  # as serve() starts a policy
    replay.promote("weekly", {"run_date": RUN_DATE, "trigger": "person", "started_by": STARTED_BY})
    return {"calls": calls, "config": config_of(replay.config_args)}


def test_the_replay_and_the_dag_plan_the_same_jobs_with_the_same_arguments(replayed, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    from orchestration import sweep_tasks

    calls = replayed["calls"]
    assert [len(calls[name]) for name in ("baselines", "promote")] == [1, 1] and calls["train"]
    dag = DagBag(dag_folder=str(DAGS_DIR)).dags["flights_train"]
    xcoms = {"run_date": RUN_DATE, "started_by": STARTED_BY, "training_id": TRAINING, "trigger": "person",
             "return_value": CHOSEN}
    assert _without_where(calls["baselines"][0]) == _render(dag.get_task("train_baselines").application_args, dag,
                                                            xcoms)
    assert _without_where(calls["promote"][0]) == _render(dag.get_task("promote_candidate").application_args, dag,
                                                          xcoms)
    # plan_sweep's own code, on the replay's config (its sweep), with the params of a run that set none
    monkeypatch.setattr(sweep_tasks, "config_of", lambda pipeline: replayed["config"])
    monkeypatch.setattr("jobs.selection.sweep.open_parent", lambda *args, **kwargs: "parent-run")
    planned = dag.get_task("plan_sweep").python_callable(run_date=RUN_DATE, started_by=STARTED_BY,
                                                        training_id=TRAINING, params=dict.fromkeys(dag.params))
    assert [_without_where(argv) for argv in calls["train"]] == planned
    assert dt.date.fromisoformat(planned[0][1]) == dt.date(2013, 1, 31)

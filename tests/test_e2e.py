"""The three DAGs run through Airflow (``dag.test()``) as the scheduler chains them, every task a
real spark-submit, on real days: ingest a window, train on it, score the day after; the Asset events
each DAG emits are read back from Airflow's metadata DB, where the scheduler finds them.

The training window is shortened (3 training days, 2 validation days, 2 holdout
days, 2 epochs) through a config
file passed to the jobs with PIPELINE_CONFIG; everything else is the embedded default.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from jobs.lake.layout import DRIFT_PLOT, DRIFT_REPORT, VALIDATION_PAGE, partition_day, partition_name

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
TRAIN_DATE = dt.date(2013, 1, 7)
SCORE_DATE = dt.date(2013, 1, 8)


@pytest.fixture(scope="module")
def airflow_env(lake, config_patch, tmp_path_factory):
    """Airflow's metadata DB migrated, and a short-window config for the jobs."""
    # One baseline, regularised to a constant (holdout ROC AUC 0.5): the bar is there and cleared,
    # so the run goes on to the gate (tests/jobs/selection/test_baseline_training.py stops a worse candidate).
    path = config_patch.write(
        tmp_path_factory.mktemp("config"),
        train={"train_days": 3, "validation_days": 2, "holdout_days": 2, "epochs": 2},
        baselines=[{"name": "flat_lr", "kind": "logistic_regression",
                    "params": {"maxIter": 5, "regParam": 10.0, "elasticNetParam": 1.0}}],
        # the MLP's candidates only: the checks below read their epochs and learning rates (the
        # xgboost family through the train job: tests/jobs/selection/test_trees.py)
        sweep={"families": ["mlp"]},
    )
    os.environ["PIPELINE_CONFIG"] = str(path)
    os.environ["PIPELINE_TIMINGS_DIR"] = str(tmp_path_factory.mktemp("timings"))  # jobs.timings: every job's split
    # the DAGs read and write the pipeline's lake, $LAKE_ROOT/flights: the session's lake is it
    lakes, before = tmp_path_factory.mktemp("lakes"), os.environ["LAKE_ROOT"]
    (lakes / "flights").symlink_to(lake.root)
    os.environ["LAKE_ROOT"] = str(lakes)
    # Migrate in this process, on the engine dag.test() will use (a subprocess' migration can be
    # invisible to a SQLite connection this process opened earlier).
    from airflow.utils.db import upgradedb

    upgradedb()
    yield lake
    os.environ["LAKE_ROOT"] = before
    os.environ.pop("PIPELINE_CONFIG")
    os.environ.pop("PIPELINE_TIMINGS_DIR")


@pytest.fixture(scope="module")
def dags(airflow_env):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    for dag in bag.dags.values():
        for task in dag.tasks:
            task.retries = 0  # a failure should fail the test now, not after the retry delay
    return bag.dags


def _run(dag, day: dt.date, **conf):
    """Trigger ``dag`` for ``day`` with ``run_date`` and ``conf`` as a person would from the UI."""
    import pendulum

    run = dag.test(logical_date=pendulum.datetime(day.year, day.month, day.day, tz="UTC"),
                   run_conf={"run_date": day.isoformat(), **conf})
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert run.state == "success", states
    return states


def _asset_events(name: str) -> list[dict]:
    """The ``extra`` of every event of the Asset ``name``, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
        return [event.extra for event in session.scalars(query.where(AssetModel.name == name).order_by(AssetEvent.id))]


def _consumers(name: str) -> set[str]:
    """The DAGs the scheduler starts on an event of the Asset ``name`` (once they are unpaused)."""
    from airflow.models.asset import AssetModel, DagScheduleAssetReference
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = select(DagScheduleAssetReference.dag_id).join(AssetModel)
        return set(session.scalars(query.where(AssetModel.name == name)))


def _xcoms(dag_id: str, task_id: str) -> dict:
    """The XComs a task pushed, read from the metadata DB the way the UI reads them."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(
            select(XComModel).where(XComModel.dag_id == dag_id, XComModel.task_id == task_id)
        ).all()
        return {row.key: row.value for row in rows}


def check_sweep_bar_and_report(mlflow_client, run_id: str, config) -> None:
    """The promoted version is the sweep's best child on the validation days; it cleared the bar
    over the baseline; its report is what its saved holdout predictions give."""
    import mlflow.artifacts

    from jobs.selection.evaluation import REPORT, build_report, read_predictions

    run = mlflow_client.get_run(run_id)
    parent = mlflow_client.get_run(run.data.tags["mlflow.parentRunId"])
    assert parent.data.tags["best_run_id"] == run_id and parent.info.status == "FINISHED"
    children = mlflow_client.search_runs([run.info.experiment_id],
                                         f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert len(children) == 2 and {c.data.params["learning_rate"] for c in children} == {"0.01", "0.003"}
    assert run.data.metrics["validation_roc_auc"] == max(c.data.metrics["validation_roc_auc"] for c in children)
    assert run.data.tags["bar_decision"] == "cleared"
    # one training: the DAG run's id on the sweep's parent, its candidates and the baseline it cleared
    (baseline,) = mlflow_client.search_runs([run.info.experiment_id], "tags.candidate_kind = 'baseline'")
    training = run.data.tags["training_id"]
    assert training.startswith("flights_train/") and parent.data.tags["training_id"] == training
    assert {c.data.tags["training_id"] for c in children} == {baseline.data.tags["training_id"]} == {training}
    assert {(c.data.tags["config_fingerprint"], c.data.tags["data_fingerprint"]) for c in children} == {
        (baseline.data.tags["config_fingerprint"], baseline.data.tags["data_fingerprint"])}
    table = mlflow.artifacts.load_text(f"runs:/{run_id}/comparison/comparison.md")
    rows = {tuple(line.split(" | ")[:2]) for line in table.splitlines()[2:]}
    assert rows == {("| candidate", c.data.tags["candidate_name"]) for c in children} | {("| baseline", "flat_lr")}
    report = mlflow.artifacts.load_dict(f"runs:/{run_id}/{REPORT}")
    assert report["threshold"]["policy"] == "validation_f1"
    again = build_report(read_predictions(run_id), config.features.label, config.evaluation, report["threshold"],
                         report["validation"])
    assert json.loads(json.dumps(again)) == report
    assert report["holdout"]["roc_auc"] == pytest.approx(run.data.metrics["holdout_roc_auc"], abs=1e-6)


def _ui_log(dag_id: str, task_id: str) -> str:
    """What the UI's log tab shows for the last try of ``task_id``'s latest run."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.log.log_reader import TaskLogReader
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ti = session.scalars(select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.task_id == task_id)
                             .order_by(TaskInstance.start_date.desc())).first()
        stream, _ = TaskLogReader().read_log_chunks(ti, ti.try_number, {})
        return "\n".join(getattr(line, "event", str(line)) for line in stream)


def test_ingest_train_score_through_airflow(dags, airflow_env, config, caplog, tmp_path):
    lake = airflow_env
    from jobs.tracking import client

    # ingest the training window and the scored day in one run: the only writer of features/
    window = (SCORE_DATE - dt.date(2013, 1, 1)).days + 1
    states = _run(dags["flights_ingest"], SCORE_DATE, days=window)
    assert states == {"wait_for_raw": "success", "validate_raw": "success", "build_features": "success",
                      "publish_features": "success"}
    days = [(dt.date(2013, 1, 1) + dt.timedelta(days=n)).isoformat() for n in range(window)]
    assert [event["days"] for event in _asset_events("flights_features")] == [days]
    assert _consumers("flights_features") == {"flights_score"}  # the scheduler scores them next
    written = sorted(p.name for p in Path(lake.features).iterdir() if partition_day(p.name) is not None)
    assert written == [partition_name(dt.date.fromisoformat(d)) for d in days]

    states = _run(dags["flights_train"], TRAIN_DATE, sweep_size=2, sweep_learning_rates=[0.01, 0.003],
                  sweep_epochs=[1])
    assert states == {"plan_training": "success", "train_baselines": "success", "plan_sweep": "success",
                      "train_candidate": "success", "select_candidate": "success", "promote_candidate": "success",
                      "approve_champion": "skipped",
                      "publish_champion": "success"}

    mlflow_client = client()
    versions = mlflow_client.search_model_versions(f"name = '{config.train.model_name}'")
    assert len(versions) == 1
    version = versions[0]
    assert version.tags["run_date"] == TRAIN_DATE.isoformat()
    assert version.tags["train_window"] == "2013-01-01..2013-01-03"
    assert version.tags["holdout_window"] == "2013-01-06..2013-01-07"
    run = mlflow_client.get_run(version.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["registration"] == str(version.version)
    assert 0.5 < run.data.metrics["holdout_roc_auc"] <= 1.0
    assert len(mlflow_client.get_metric_history(version.run_id, "train_loss")) == 1  # the sweep's one epoch
    check_sweep_bar_and_report(mlflow_client, version.run_id, config)
    assert run.data.params["train_start"] == "2013-01-01"
    plots = {a.path for a in mlflow_client.list_artifacts(version.run_id, "plots")}
    assert plots == {"plots/loss_curves.png", "plots/roc_curve.png", "plots/calibration_curve.png"}
    # the promotion task returns the job's summary and links to the MLflow run
    xcoms = _xcoms("flights_train", "promote_candidate")
    summary = xcoms["return_value"]
    assert (summary["model_version"], summary["run_id"]) == (str(version.version), version.run_id)
    assert summary["gate"]["gate_decision"] == "promoted"
    link = xcoms["_link_MLflowRunLink"]
    assert link.startswith(os.environ["MLFLOW_UI_URL"]) and link.endswith(f"/runs/{version.run_id}")
    # the first model ever becomes champion, and the gate says so on the version
    assert mlflow_client.get_model_version_by_alias(config.train.model_name, "champion").version == version.version
    assert version.tags["gate_decision"] == "promoted"

    assert "drift/baseline.json" in {a.path for a in mlflow_client.list_artifacts(version.run_id, "drift")}
    # the run says who started it; the promotion updated the champion Asset, which scoring follows
    assert run.data.tags["started_by"] == f"a person: run_date {TRAIN_DATE}"
    assert run.data.tags["trigger"] == "person"
    assert (summary["trigger"], summary["started_by"]) == ("person", f"a person: run_date {TRAIN_DATE}")
    assert [(e["run_date"], e["model_version"]) for e in _asset_events("flights_champion_model")] == [
        (TRAIN_DATE.isoformat(), str(version.version))]
    assert _consumers("flights_champion_model") == {"flights_score"}
    assert _consumers("flights_scoring_drift") == {"flights_train"}
    # training read the window's features and wrote none (the ingest run's files are untouched)
    assert sorted(p.name for p in Path(lake.features).iterdir() if partition_day(p.name) is not None) == written

    # a version waiting for a person's approval is a challenger: here the run's flat baseline,
    # registered and tagged as the approval flow leaves a gate winner (only the alias is not moved)
    import mlflow

    from jobs.selection.bar import KIND
    from jobs.selection.gate import AWAITING_APPROVAL

    (flat,) = mlflow_client.search_runs([run.info.experiment_id], filter_string=f"tags.{KIND} = 'baseline'")
    waiting = mlflow.register_model(f"runs:/{flat.info.run_id}/model", config.train.model_name)
    mlflow_client.set_model_version_tag(config.train.model_name, waiting.version, "gate_decision", AWAITING_APPROVAL)

    caplog.clear()
    states = _run(dags["flights_score"], SCORE_DATE)
    # dag.test() logs each task's run only to the console; `make demo` files each task's part where
    # the UI reads task logs (scripts/dag_test_logs.py), so the log tab of such a run is not empty
    import importlib.util

    spec = importlib.util.spec_from_file_location("dag_test_logs", REPO / "scripts/dag_test_logs.py")
    dag_test_logs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dag_test_logs)
    console = tmp_path / "console.log"
    console.write_text(caplog.text)
    # plan_scoring, score_batch, check_drift, monitor_day, check_decay, promote_challenger
    assert len(dag_test_logs.write_task_logs(str(console))) == 6
    shown = _ui_log("flights_score", "score_batch")
    assert "[DAG TEST] running task <TaskInstance: flights_score.score_batch" in shown, shown
    assert "task_id=plan_scoring" not in shown
    # a normal day: no drift, so no Asset event (the check is skipped)
    # and the monitor judged the day on its outcomes; one day is too few to judge decay (skipped);
    # promotions go by the holdout here (the default), so no challenger is promoted on live days
    assert states == {"plan_scoring": "success", "score_batch": "success", "check_drift": "skipped",
                      "monitor_day": "success", "check_decay": "skipped", "promote_challenger": "skipped"}
    monitored = json.loads(Path(lake.monitoring_report(SCORE_DATE)).read_text())
    assert [(m["model_version"], m["role"], m["status"]) for m in monitored["models"]] == [
        (str(version.version), "champion", "ok"), (str(waiting.version), "challenger", "ok")]
    # the challenger scored every flight in shadow, apart from the served predictions, and the
    # monitor compared it with the champion on the same rows: the flat baseline ranks nothing
    shadow = pq.read_table(lake.partition(lake.shadow_predictions(str(waiting.version)), SCORE_DATE)).to_pandas()
    assert len(shadow) == len(pd.read_csv(lake.raw_file("flights", SCORE_DATE)))
    assert set(shadow["model_version"]) == {str(waiting.version)}
    comparison = monitored["models"][1]["comparison"]
    assert comparison["champion_version"] == str(version.version) and comparison["metric"] == "roc_auc"
    difference = comparison["difference"]
    assert difference["low"] <= difference["value"] <= difference["high"] and difference["value"] < 0, difference
    assert comparison["pooled"]["days"] == [SCORE_DATE.isoformat()] and comparison["pooled"]["beats"] is False
    assert _asset_events("flights_scoring_drift") == []
    drift = json.loads(Path(lake.report("drift", SCORE_DATE, DRIFT_REPORT)).read_text())
    assert drift["model_version"] == str(version.version) and not drift["drifted"]
    assert Path(lake.report("drift", SCORE_DATE, DRIFT_PLOT)).stat().st_size > 0
    # validation reported the day with the Airflow run's id, and accounted for every row
    report = json.loads(Path(lake.validation_report(SCORE_DATE, window)).read_text())
    assert report["success"] and report["written"] and report["run_id"] != f"manual__{SCORE_DATE}"
    tables = {t["table"]: t for t in report["tables"]}
    assert set(tables) == {"flights", "weather", "planes", "airports", "airlines"}
    day = tables["flights"]["partitions"][SCORE_DATE.isoformat()]
    assert day["rows_in"] == day["written_validated"] + day["written_quarantined"]
    assert Path(lake.validation_report(SCORE_DATE, window, VALIDATION_PAGE)).exists()

    flights = pd.read_csv(lake.raw_file("flights", SCORE_DATE))
    predictions = pq.read_table(lake.partition(lake.predictions, SCORE_DATE)).to_pandas()
    assert len(predictions) == len(flights)  # one row per valid input flight
    keys = ["carrier", "flight", "origin", "sched_dep_time"]
    assert not predictions.duplicated(keys).any()
    assert sorted(map(tuple, predictions[keys].to_numpy())) == sorted(map(tuple, flights[keys].to_numpy()))
    assert predictions["probability"].between(0.0, 1.0).all()
    assert predictions["probability"].notna().all()
    assert set(predictions["model_version"]) == {str(version.version)}
    assert set(predictions["model_run_id"]) == {version.run_id}
    assert set(predictions["run_date"]) == {SCORE_DATE}
    # only the scored day was written
    assert [p.name for p in Path(lake.predictions).iterdir() if partition_day(p.name) is not None] == [
        partition_name(SCORE_DATE)
    ]
    # what `make demo` prints: the scoring model, its metrics and the day's drift verdict
    from jobs.summary import collect, render

    text = render(collect(lake, SCORE_DATE))
    assert f"version {version.version} (MLflow run {version.run_id})" in text
    assert "none over the thresholds; highest monitored PSI: " in text
    assert "predictions PSI " in text and "(reported, not alerted on)" in text
    assert "validation days 2013-" in text  # the days between training and holdout that chose the threshold
    # the score job wrote it in the pipeline's lake, $LAKE_ROOT/flights (the session's lake, linked)
    served = f"{os.environ['LAKE_ROOT']}/flights"
    assert lake.report("drift", SCORE_DATE, DRIFT_REPORT).replace(lake.root, served) in text
    check_timings(Path(os.environ["PIPELINE_TIMINGS_DIR"]))


def check_timings(folder: Path) -> None:
    """Every spark-submitted job wrote its split (jobs.timings), and the nightly benchmark's
    breakdown of the scoring task adds up to the task's time in Airflow's metadata DB."""
    from benchmarks.nightly import PARTS, task_breakdown, task_instances

    records = [json.loads(p.read_text()) for p in folder.glob("*.json")]
    assert {r["job"] for r in records} == {"validation", "features", "training", "promotion", "scoring", "baselines",
                                                "monitoring"}
    for record in records:
        assert record["process_started"] <= record["main_started"] <= record["main_ended"]
        assert record["seconds"]["spark session"] > 0 and record["seconds"]["work"] >= 0
    assert any(r["seconds"].get("GX context", 0) > 0 for r in records if r["job"] == "validation")
    tasks = {t["task"]: task_breakdown(t, records)
             for t in task_instances(Path(os.environ["PIPELINE_HOME"]), "flights_score")}
    score = tasks["score_batch[0]"]
    assert score["job"] == "scoring" and score["parts"]["model load"] > 0
    assert all(v >= 0 for v in score["parts"].values()), score
    assert abs(sum(score["parts"].values()) - score["seconds"]) < 0.01
    assert set(score["parts"]) == set(PARTS) and tasks["plan_scoring"]["parts"] is None

"""The Model health page: the view read from a lake written in the monitoring contract's form, the
HTML it renders, the FastAPI app mounted by Airflow's own plugin code behind Airflow's own
authentication, and the plugin's navigation entry."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.health import FEATURES, IGNORED, MODEL, synthetic_lake
from jobs.lake.layout import DECAY_REPORT, MONITORING_REPORT, Lake
from jobs.lake.storage import write_text
from orchestration.health.page import render
from orchestration.health.view import DocumentCache, model_health

REPO = Path(__file__).resolve().parents[2]
FIRST = dt.date(2013, 2, 1)
DAYS = 40
TRAIN_DAG = "flights_train"  # the bundled pipeline's train DAG


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    """A synthetic lake of DAYS days (see benchmarks.health.synthetic_lake) and its plan."""
    lake = Lake(str(tmp_path_factory.mktemp("health") / "lakes" / "flights"))  # the bundled pipeline's lake
    return lake, synthetic_lake(lake, FIRST, DAYS)["plan"]


def _day(index: int) -> str:
    return (FIRST + dt.timedelta(days=index)).isoformat()


def _entry(version: str, role: str, status: str, **extra) -> dict:
    metrics = {name: {"value": v, "low": v - 0.02, "high": v + 0.02} for name, v in
               {"roc_auc": 0.64, "pr_auc": 0.4, "log_loss": 0.5, "brier": 0.16, "ece": 0.03,
                "mean_prediction": 0.22, "outcome_rate": 0.23}.items()}
    return {"model_name": MODEL, "model_version": version, "role": role, "status": status, "rows": 900,
            "rows_with_outcome": 880 if status == "ok" else 0,
            "predictions_without_outcome": 20 if status == "ok" else 0,
            "holdout": {"roc_auc": 0.66, "pr_auc": 0.41, "log_loss": 0.49, "brier": 0.16, "ece": 0.02},
            "metrics": metrics if status == "ok" else {}, "segments": [],
            "estimate": {"roc_auc": 0.65, "log_loss": 0.51, "error": None},
            "mlflow_run_id": f"m{version}", "mlflow_experiment_id": "9", **extra}


def _write_day(lake: Lake, day: dt.date, outcomes: str, *entries: dict) -> None:
    record = {"day": day.isoformat(), "label_delay_days": 0, "outcomes": outcomes, "models": list(entries)}
    write_text(f"{lake.partition(lake.monitoring, day)}/{MONITORING_REPORT}", json.dumps(record))


def test_every_version_that_scored_keeps_its_days_champion_and_challengers_from_the_latest_day(story):
    lake, plan = story
    view = model_health(lake, train_dag=TRAIN_DAG, cache=DocumentCache())
    (found,) = view["models"]
    assert view["range"] == {"first": _day(0), "last": _day(DAYS - 1), "monitored_days": DAYS}
    assert found["champion"] == "4" and found["challengers"] == ["3", "2"]
    versions = {v["model_version"]: v for v in found["versions"]}
    assert [v["model_version"] for v in found["versions"]] == ["4", "3", "2", "1"]  # champion, challengers, retired
    # Version 1 stopped scoring when version 4 became champion (it may be gone from the registry):
    # its history stays, read from the lake.
    retired = versions["1"]
    assert retired["last_day"] == _day(plan["decay"]) and retired["roles"] == {"champion": plan["decay"] + 1}
    assert not retired["is_champion"] and not retired["is_challenger"]
    assert retired["realized"]["value"] < retired["holdout"]["roc_auc"] - 0.03  # the decay it was replaced for
    assert len(retired["days"]) == plan["decay"] + 1
    assert versions["4"]["first_day"] == _day(plan["decay"] + 1)
    # What started each retraining, and the links to its runs.
    events = {e["model_version"]: e for e in found["retrainings"]}
    assert events["4"]["trigger"] == "decay" and events["4"]["started_by"].startswith("decay of version 1")
    assert events["3"]["trigger"] == "drift" and events["2"]["trigger"] == "schedule"
    assert events["4"]["mlflow_url"] == f"{os.environ['MLFLOW_UI_URL']}/#/experiments/3/runs/train4"
    assert events["4"]["airflow_path"] == (f"dags/flights_train/runs/asset_triggered__{_day(plan['decay'])}"
                                           "T01%3A00%3A00%2B00%3A00")
    assert events["2"]["airflow_path"] == "dags/flights_train/runs"  # no run id in its summary: the DAG's runs
    decayed = [d for d in found["decay"] if d["decayed"]]
    assert [(d["day"], d["triggered"], d["model_version"]) for d in decayed] == [(_day(plan["decay"]), True, "1")]
    drift = found["drift"]
    assert len(drift["days"]) == DAYS and drift["threshold"] == 0.2
    assert drift["features"][-2:] == ["day_of_week", "month"]  # the features reported only come last
    assert [d["day"] for d in drift["days"] if d["drifted"]] == [_day(i) for i in
                                                                 range(plan["drift_first"], plan["drift_last"] + 1)]
    json.dumps(view, allow_nan=False)  # what the JSON API sends


def test_days_narrows_to_the_last_days_and_model_to_one_model(story):
    lake, _ = story
    view = model_health(lake, days=7, cache=DocumentCache())
    assert view["range"] == {"first": _day(DAYS - 7), "last": _day(DAYS - 1), "monitored_days": 7}
    assert len(view["models"][0]["drift"]["days"]) == 7 and view["models"][0]["retrainings"] == []
    assert model_health(lake, model="another_model", cache=DocumentCache())["models"] == []


def test_a_day_without_outcomes_says_so_and_days_awaiting_them_show_the_estimate(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    days = [FIRST + dt.timedelta(days=i) for i in range(4)]
    _write_day(lake, days[0], "in", _entry("5", "champion", "ok"))
    _write_day(lake, days[1], "in", _entry("5", "champion", "no_outcomes"))  # every flight cancelled
    _write_day(lake, days[2], "in", _entry("5", "champion", "ok"))
    _write_day(lake, days[3], "awaiting", _entry("5", "champion", "awaiting_outcomes"))
    view = model_health(lake, cache=DocumentCache())
    (version,) = view["models"][0]["versions"]
    assert [d["status"] for d in version["days"]] == ["ok", "no_outcomes", "ok", "awaiting_outcomes"]
    assert version["days"][1]["metrics"] == {} and version["realized"]["days"] == 2
    html = render(view)
    assert "no outcomes (no scored row has one)" in html and "NaN" not in html and "nan" not in html.lower()
    assert f"{days[3]} v5: estimated roc_auc 0.650 (outcomes not in yet)" in html
    assert "<td>0.650</td><td>0.510</td>" in html  # the estimate table: roc_auc, log_loss
    assert "No drift reports on these days" in html and "No retraining on these days" in html


def test_a_rewritten_day_is_read_again_and_a_broken_file_is_named_not_fatal(tmp_path):
    lake, cache = Lake(str(tmp_path / "lake")), DocumentCache()
    day = FIRST
    _write_day(lake, day, "in", _entry("1", "champion", "ok"))
    assert model_health(lake, cache=cache)["models"][0]["champion"] == "1"
    os.utime(f"{lake.partition(lake.monitoring, day)}/{MONITORING_REPORT}", ns=(1, 1))  # a stamp of its own
    _write_day(lake, day, "in", _entry("1", "challenger", "ok"), _entry("2", "champion", "ok"))
    assert model_health(lake, cache=cache)["models"][0]["champion"] == "2"
    write_text(lake.report("decay", day, DECAY_REPORT), "{not json")
    view = model_health(lake, cache=cache)
    assert view["models"][0]["champion"] == "2" and view["models"][0]["decay"] == []
    assert len(view["problems"]) == 1 and "not readable JSON" in view["problems"][0]


def test_the_page_draws_the_metric_the_intervals_the_heat_map_and_links_the_runs(story):
    lake, plan = story
    html = render(model_health(lake, train_dag=TRAIN_DAG, cache=DocumentCache()))
    assert "champion v4" in html and "challengers v3, v2" in html and "retired" in html
    chart, heatmap = html.split("aria-label='realized roc_auc'")[1].split("aria-label='drift heat map'")
    assert chart.count("<polygon") >= 4 and chart.count("<polyline") >= 4  # a band and a line per version
    assert chart.count("stroke-dasharray='6,4'") == 4  # a holdout line per version
    assert chart.count("(outcomes not in yet)") == 3 * plan["awaiting"]  # the estimate of every version scored
    assert f"{_day(plan['decay'])}: v1 decayed (retraining started)" in chart
    assert chart.count("retrained v") == 3
    heatmap = heatmap.split("</svg>")[0]
    assert len(re.findall(r"\d{4}-\d\d-\d\d: PSI ", heatmap)) == 12 * DAYS  # a cell per feature and day
    assert heatmap.count("fill='#d62728'") == plan["drift_last"] - plan["drift_first"] + 1  # the days that drifted
    # the features the drift check does not monitor (score.drift.ignore), apart below and in greys:
    # their high PSI (a day has one day of the week) must not hide the monitored ones' drift
    monitored, ignored = heatmap.split("<g class='monitored'>")[1].split("<g class='not-monitored'>")
    assert "not monitored (score.drift.ignore)" in ignored
    for feature in FEATURES:
        here, elsewhere = (ignored, monitored) if feature in IGNORED else (monitored, ignored)
        assert here.count(f"<title>{feature} ") == DAYS and f"<title>{feature} " not in elsewhere, feature
    assert heatmap.index(f">{FEATURES[0]}</text>") < heatmap.index("not monitored (") < heatmap.index(
        f">{IGNORED[0]}</text>")  # the block below the monitored rows
    grey = re.compile(r"fill='#(..)\1\1'>")
    muted = re.findall(r"<rect [^>]*fill='(#[0-9a-f]{6})'><title>[^<]*\(not monitored\)</title>", ignored)
    assert len(muted) == len(IGNORED) * DAYS and all(grey.match(f"fill='{fill}'>") for fill in muted)
    alerting = re.findall(r"<rect [^>]*fill='(#[0-9a-f]{6})'><title>visib ", monitored)
    assert any(not grey.match(f"fill='{fill}'>") for fill in alerting)  # the drifting feature in colour
    assert f"href='../dags/flights_train/runs/asset_triggered__{_day(plan['decay'])}" in html
    assert "target='_top'" in html  # an Airflow link opens in the UI, not inside the iframe
    assert f"href='{os.environ['MLFLOW_UI_URL']}/#/experiments/3/runs/train4'" in html
    assert "<script" not in html and "http://" not in html.replace(os.environ["MLFLOW_UI_URL"], "").replace(
        "http://www.w3.org/2000/svg", "")  # nothing fetched from elsewhere: the API server may be offline


def test_an_empty_lake_says_what_to_trigger(tmp_path):
    view = {**model_health(Lake(str(tmp_path / "lake")), cache=DocumentCache()), "pipeline": "flights",
            "pipelines": ["flights", "another"]}
    html = render(view)
    assert "No monitored days yet" in html and "trigger flights_score" in html
    assert "<option selected>flights</option><option>another</option>" in html  # the pipeline picker


PLAN_DAG = """
import pendulum
from airflow.sdk import DAG, task

with DAG("health_plan_check", schedule=None, start_date=pendulum.datetime(2013, 1, 1, tz="UTC")):
    @task(task_id="plan_training", multiple_outputs=True)
    def plan():
        return {"run_date": "2013-03-10", "trigger": "decay", "started_by": "decay of version 1 on 2013-03-10"}

    plan()
"""


@pytest.fixture(scope="module")
def airflow_api():
    """Airflow's own plugin mounting (``init_plugins``: this project's plugins folder) and auth
    manager (the configured one, the simple auth manager here) on an API app, as the API server
    builds them; the metadata DB migrated (a valid token is checked against its revoked tokens)."""
    from airflow.api_fastapi.app import init_auth_manager, init_plugins
    from airflow.utils.db import upgradedb
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    upgradedb()

    app = FastAPI()
    init_plugins(app)
    manager = init_auth_manager(app)
    return TestClient(app), manager


def _token(manager) -> str:
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return manager.generate_jwt(SimpleAuthManagerUser(username="viewer", role="viewer"))


def test_without_a_valid_airflow_token_the_page_and_the_api_are_refused(airflow_api, story, monkeypatch):
    import jwt

    client, _ = airflow_api
    monkeypatch.setenv("LAKE_ROOT", str(Path(story[0].root).parent))
    forged = jwt.encode({"sub": "admin", "role": "admin", "exp": 4102444800}, "not-the-key" * 8, algorithm="HS512")
    for path in ("/model-health/", "/model-health/api/health", f"/model-health/api/days/{_day(0)}"):
        assert client.get(path).status_code == 401, path
        assert client.get(path, headers={"Authorization": f"Bearer {forged}"}).status_code == 403, path
        assert client.get(path, cookies={"_token": forged}).status_code == 403, path


def test_with_the_ui_s_cookie_or_a_bearer_token_the_page_and_its_json_answer(airflow_api, story, monkeypatch):
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

    client, manager = airflow_api
    lake, plan = story
    monkeypatch.setenv("LAKE_ROOT", str(Path(lake.root).parent))
    token = _token(manager)
    client.cookies.set(COOKIE_NAME_JWT_TOKEN, token)  # what the browser sends the UI's iframe
    try:
        page = client.get("/model-health/?days=30")
    finally:
        client.cookies.clear()
    assert page.status_code == 200 and "champion v4" in page.text and "30 monitored day(s)" in page.text
    headers = {"Authorization": f"Bearer {token}"}
    data = client.get("/model-health/api/health", headers=headers).json()
    assert data["metric"] == "roc_auc" and data["models"][0]["champion"] == "4"
    assert data["range"]["monitored_days"] == DAYS
    day = client.get(f"/model-health/api/days/{_day(0)}", headers=headers).json()
    assert day["day"] == _day(0) and day["models"][0]["segments"]  # the record as the monitor wrote it
    missing = client.get("/model-health/api/days/2012-01-01", headers=headers)
    assert missing.status_code == 404 and "the monitor job writes it" in missing.json()["detail"]
    assert client.get("/model-health/api/health?days=0", headers=headers).status_code == 422
    # the page opens on a pipeline with monitored days; one that has not run yet shows that it has none
    empty = client.get("/model-health/?pipeline=bikeshare&days=30", headers=headers)
    assert empty.status_code == 200 and "trigger bikeshare_score" in empty.text
    # the form's "every day" sends days empty: every day, not a refused integer
    everything = client.get("/model-health/?pipeline=&model=&days=", headers=headers)
    assert everything.status_code == 200 and "champion v4" in everything.text


def test_the_plugin_registers_the_app_and_the_navigation_entry(airflow_api):
    from airflow import plugins_manager

    (plugin,) = [p for p in plugins_manager.get_plugin_info() if p["name"] == "lakeflow_mlops"]
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/model-health"]
    (view,) = plugin["external_views"]
    # The UI shows href in an iframe, relative to its base: no leading slash.
    assert view["name"] == "Model health" and view["href"] == "model-health/" and view["destination"] == "nav"


@pytest.mark.skipif(not shutil.which("chromium") and not Path("/usr/bin/chromium").exists(),
                    reason="no Chromium (scripts/system_packages.sh installs it)")
def test_the_screenshot_script_renders_the_page_in_headless_chromium(tmp_path):
    out = tmp_path / "model-health.png"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "health_screenshot.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 50_000


def test_a_retraining_links_its_airflow_run_and_says_what_started_it_from_airflow_s_plan(
        airflow_api, tmp_path, monkeypatch):
    """A real DAG run whose ``plan_training`` returned its window's last day and trigger (as
    flights_train's does): the page finds the run by that day in Airflow's metadata DB."""
    from airflow import settings
    from airflow.dag_processing.dagbag import DagBag

    from orchestration.health.app import training_runs

    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "health_plan_check.py").write_text(PLAN_DAG)
    monkeypatch.setattr(settings, "DAGS_FOLDER", str(dags))  # dag.test() syncs its DAG from the dags folder
    bag = DagBag(dag_folder=str(dags))
    assert bag.import_errors == {}
    run = bag.dags["health_plan_check"].test()
    runs = training_runs("health_plan_check")
    assert runs == {"2013-03-10": {"airflow_run_id": run.run_id, "run_date": "2013-03-10", "trigger": "decay",
                                   "started_by": "decay of version 1 on 2013-03-10"}}

    lake = Lake(str(tmp_path / "lake"))
    write_text(lake.report("training", dt.date(2013, 3, 10)), json.dumps(  # a summary without trigger or run id
        {"model_name": MODEL, "model_version": "2", "run_id": "r2", "experiment_id": "3", "metrics": {}, "gate": {}}))
    view = model_health(lake, airflow_runs=runs, train_dag=TRAIN_DAG, cache=DocumentCache())
    (event,) = view["models"][0]["retrainings"]
    assert event["trigger"] == "decay" and event["started_by"] == "decay of version 1 on 2013-03-10"
    assert event["airflow_run_id"] == run.run_id and event["airflow_path"].startswith("dags/flights_train/runs/")


def test_a_challenger_shows_its_live_comparison_with_the_champion(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    difference = {"value": 0.021, "low": 0.004, "high": 0.038}
    comparison = {"metric": "roc_auc", "champion_version": "2", "rows": 880, "difference": difference,
                  "pooled": {"days": 7, "rows": 6160, "difference": difference, "beats": True}}
    _write_day(lake, FIRST, "in", _entry("2", "champion", "ok"), _entry("3", "challenger", "ok", comparison=comparison))
    view = model_health(lake, cache=DocumentCache())
    versions = view["models"][0]["versions"]
    assert [(v["model_version"], v["comparison"] is not None) for v in versions] == [("2", False), ("3", True)]
    html = render(view)
    assert "roc_auc +0.021 [+0.004, +0.038] over 7 d vs v2: <span class='good'>beats it</span>" in html

"""The README's first command for another pipeline: ``make demo PIPELINE=bikeshare`` runs
``scripts/demo.sh``, which lands the second example's data and runs its three DAGs through Airflow
(``airflow dags test``: every task a real spark-submit) on a throw-away home, as a user's shell
would. The window is shortened by an overlay (``PIPELINE_OVERLAYS``); everything else is the
pipeline's own config and the demo profile."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from benchmarks.common import pipeline_environment
from jobs.config.files import PIPELINES
from jobs.lake.layout import Lake

REPO = Path(__file__).resolve().parents[1]
DAYS = {"FIRST_DAY": "2011-01-01", "TRAIN_DATE": "2011-01-12", "SCORE_DATE": "2011-01-13"}


def _demo(home: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {**pipeline_environment(home), **env}
    return subprocess.run(["bash", str(REPO / "scripts/demo.sh")], env=environment, capture_output=True,
                          text=True, timeout=1200, cwd=REPO)


@pytest.mark.e2e
def test_make_demo_runs_the_second_pipeline_through_its_dags(tmp_path):
    overlay = tmp_path / "short.yaml"
    overlay.write_text(yaml.safe_dump({
        "train": {"train_days": 7, "validation_days": 2, "holdout_days": 3, "epochs": 4},
        "sweep": {"epochs": [4]}, "validation": {"great_expectations": False}}))
    home = tmp_path / "home"
    done = _demo(home, PIPELINE="bikeshare", PIPELINE_OVERLAYS=str(overlay), **DAYS)
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-4000:]
    for dag in ("bikeshare_ingest", "bikeshare_train", "bikeshare_score"):
        assert f"{dag} for " in out and f"{dag} for {DAYS['SCORE_DATE']} failed" not in out
    # the rules by name, the bar and the gate, a champion, the scored day and its monitor
    assert "rentals: " in out and "quarantined" in out
    assert "| candidate | logistic_regression |" in out and "bike_demand version 1 is the champion now" in out
    assert "more than 100 rentals in the hour" in out  # the summary speaks of this pipeline's label
    lake = Lake(str(home / "lake" / "bikeshare"))
    predictions = pd.read_parquet(Path(lake.root, "predictions", f"date={DAYS['SCORE_DATE']}"))
    raw = pd.read_csv(Path(lake.root, "raw", "rentals", f"date={DAYS['SCORE_DATE']}", "rentals.csv"))
    assert len(predictions) == len(raw) and predictions["probability"].between(0, 1).all()
    monitored = json.loads(Path(lake.root, "monitoring", f"date={DAYS['SCORE_DATE']}", "monitoring.json").read_text())
    champion = next(m for m in monitored["models"] if m["role"] == "champion")
    assert champion["rows_with_outcome"] == len(raw) and champion["metrics"]["roc_auc"]["value"] > 0.5, champion
    # the other pipeline's lake was not touched
    assert not (home / "lake" / "flights").exists()
    features = pd.read_parquet(Path(lake.root, "features", f"date={DAYS['TRAIN_DATE']}"))
    assert len(features) == len(pd.read_csv(Path(lake.root, "raw", "rentals", f"date={DAYS['TRAIN_DATE']}",
                                                 "rentals.csv")))


def test_a_pipeline_without_demo_dates_is_told_what_to_give(tmp_path):
    shutil.copytree(PIPELINES / "bikeshare", tmp_path / "pipelines" / "rentals",
                    ignore=shutil.ignore_patterns("demo.env"))
    tunables = tmp_path / "pipelines" / "rentals" / "tunables.yaml"
    tunables.write_text(tunables.read_text().replace("bike_demand", "rentals"))
    done = _demo(tmp_path / "home", PIPELINE="rentals", PIPELINES_DIR=str(tmp_path / "pipelines"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "rentals has no" in done.stderr and "FIRST_DAY=, TRAIN_DATE= and SCORE_DATE=" in done.stderr
    done = _demo(tmp_path / "home", PIPELINE="nowhere", PIPELINES_DIR=str(tmp_path / "pipelines"))
    assert done.returncode != 0 and "no pipeline 'nowhere'" in done.stderr
    assert not (tmp_path / "home" / "lake").exists()  # nothing landed, nothing run

"""The compose stack stays in step with what the tests run locally.

There is no Docker engine where the tests run, so this checks the file's structure instead of
starting it: anchors resolve, every service runs the project's one image, the Airflow services
get the same variables that scripts/env.sh sets locally, and the commands name real files.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def _compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_every_project_service_runs_the_one_image():
    services = _compose()["services"]
    ours = {name: s for name, s in services.items() if name != "postgres"}
    assert {s["image"] for s in ours.values()} == {"lakeflow-mlops:latest"}
    assert any("build" in s for s in ours.values())


def test_airflow_services_get_the_variables_env_sh_sets():
    exported = set(re.findall(r"export (\w+)=", (REPO / "scripts/env.sh").read_text()))
    exported -= {"PATH", "PIPELINE_REPO"}
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-init"):
        env = _compose()["services"][name]["environment"]
        missing = exported - set(env) - {"MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"}
        assert not missing, f"{name} lacks {missing}"
        conn = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
        assert conn["host"].startswith("spark://spark-master:")


def test_spark_cluster_is_started_with_spark_class_like_the_tests():
    services = _compose()["services"]
    assert "org.apache.spark.deploy.master.Master" in services["spark-master"]["command"]
    worker = services["spark-worker"]["command"]
    assert "org.apache.spark.deploy.worker.Worker" in worker and "spark://spark-master:7077" in worker


def test_dockerfile_copies_what_the_services_use():
    dockerfile = (REPO / "Dockerfile").read_text()
    for folder in ("jobs", "dags", "plugins", "scripts"):
        assert f"COPY {folder} ./{folder}" in dockerfile
        assert (REPO / folder).is_dir()
    env = _compose()["services"]["airflow-scheduler"]["environment"]
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/pipeline/dags"

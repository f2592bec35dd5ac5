"""Training as a barrier stage on a real Spark standalone cluster (``local_mode=False``).

The test starts a master and a worker with pyspark's own ``spark-class`` (as docker-compose
does), submits the train job to it with spark-submit, and stops both afterwards.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.lake import partition_name

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
RUN_DATE = dt.date(2013, 1, 6)  # 3 training days + 2 holdout days: 2013-01-02..2013-01-06


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cluster_env(work: Path) -> dict[str, str]:
    import pyspark

    return {
        **os.environ,
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_WORKER_DIR": str(work / "worker"),
        "SPARK_LOG_DIR": str(work / "logs"),
    }


def _wait(predicate, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(1)
    raise TimeoutError(f"{what} did not come up within {timeout:.0f}s")


@contextlib.contextmanager
def standalone_cluster(work: Path, worker_opts: str = ""):
    """A standalone master and one 2-core worker on 127.0.0.1 (``worker_opts``: its
    SPARK_WORKER_OPTS, e.g. the GPUs it advertises); yields the master URL, environment and log."""
    env = {**_cluster_env(work), "SPARK_WORKER_OPTS": worker_opts}
    spark_class = str(Path(env["SPARK_HOME"]) / "bin" / "spark-class")
    port, ui = _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    logs = open(work / "cluster.log", "w")  # noqa: SIM115 - closed at teardown
    master = subprocess.Popen(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(ui)],
        env=env, stdout=logs, stderr=subprocess.STDOUT, start_new_session=True,
    )
    worker = None
    try:
        _wait(lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close() is None, "the master")
        worker = subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--cores", "2", "--memory", "3g",
             "--webui-port", str(_free_port()), "--work-dir", str(work / "worker")],
            env=env, stdout=logs, stderr=subprocess.STDOUT, start_new_session=True,
        )

        def worker_alive() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as response:
                return json.load(response).get("aliveworkers", 0) >= 1

        _wait(worker_alive, "the worker")
        yield {"url": url, "env": env, "log": work / "cluster.log"}
    finally:
        for process in (worker, master):
            if process is not None:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=30)
        logs.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with standalone_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


def small_window(spark, lake, config, tmp_path: Path, **train: Any) -> tuple[Path, Path, list[dt.date]]:
    """(config file, lake root, training days): a 3 + 2 day window ending RUN_DATE with its
    features written, and ``train`` settings over the bundled config's."""
    from jobs.features import build_features, read_inputs, write_features
    from jobs.training.data import split_window

    raw = yaml.safe_load((REPO / "jobs/pipeline.yaml").read_text())
    raw["train"].update(train_days=3, holdout_days=2, epochs=2, **train)
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    train_days, holdout_days = split_window(RUN_DATE, 3, 2)
    features_lake = tmp_path / "lake"
    days = [*train_days, *holdout_days]
    write_features(build_features(read_inputs(spark, lake, config, days), config), str(features_lake / "features"))
    return config_path, features_lake, train_days


def test_training_runs_as_a_barrier_stage_on_a_standalone_cluster(cluster, spark, lake, config, tmp_path):
    import mlflow

    config_path, features_lake, train_days = small_window(spark, lake, config, tmp_path, num_processes=2,
                                                          model_name="cluster_model")
    tracking = f"sqlite:///{tmp_path}/mlflow.db"
    env = {**cluster["env"], "MLFLOW_TRACKING_URI": tracking, "PIPELINE_MLFLOW_ARTIFACTS": str(tmp_path / "art")}
    done = subprocess.run(
        ["spark-submit", "--master", cluster["url"], "--conf", "spark.executor.memory=1g",
         str(REPO / "jobs/train.py"), "--run-date", RUN_DATE.isoformat(), "--config", str(config_path),
         "--lake-root", str(features_lake), "--local-mode", "false"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    output = done.stdout + done.stderr
    assert "Started distributed training with 2 executor processes" in output  # not on the driver
    assert "epoch 2/2" in output

    client = mlflow.MlflowClient(tracking)
    version = client.get_model_version_by_alias("cluster_model", "champion")
    run = client.get_run(version.run_id)
    assert run.data.params["local_mode"] == "False" and run.data.params["num_processes"] == "2"
    labelled = spark.read.parquet(*[str(features_lake / "features" / partition_name(d)) for d in train_days])
    assert run.data.metrics["train_rows"] == labelled.where("label IS NOT NULL").count()


def gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.skipif(gpus() == 0, reason="no GPU here: run on a GPU machine (README: GPU)")
def test_gpu_training_on_a_standalone_worker_that_advertises_its_gpus(spark, lake, config, tmp_path):
    """A GPU worker as a user's cluster has one: the worker advertises its GPUs through the project's
    discovery script, the job asks one GPU per executor and task, each rank trains on its GPU."""
    import mlflow

    from jobs.spark import GPU_DISCOVERY_SCRIPT

    worker_opts = (f"-Dspark.worker.resource.gpu.amount={gpus()} "
                   f"-Dspark.worker.resource.gpu.discoveryScript={GPU_DISCOVERY_SCRIPT}")
    config_path, features_lake, _ = small_window(spark, lake, config, tmp_path, num_processes=1,
                                                 model_name="gpu_cluster_model")
    tracking = f"sqlite:///{tmp_path}/mlflow.db"
    with standalone_cluster(tmp_path, worker_opts) as gpu_cluster:
        env = {**gpu_cluster["env"], "MLFLOW_TRACKING_URI": tracking,
               "PIPELINE_MLFLOW_ARTIFACTS": str(tmp_path / "art")}
        done = subprocess.run(
            ["spark-submit", "--master", gpu_cluster["url"], "--conf", "spark.executor.memory=2g",
             str(REPO / "jobs/train.py"), "--run-date", RUN_DATE.isoformat(), "--config", str(config_path),
             "--lake-root", str(features_lake), "--local-mode", "false", "--use-gpu", "true"],
            env=env, capture_output=True, text=True, timeout=600,
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    output = done.stdout + done.stderr
    assert "labelled rows on cuda:0" in output and "epoch 2/2" in output
    run = mlflow.MlflowClient(tracking).get_run(
        mlflow.MlflowClient(tracking).get_model_version_by_alias("gpu_cluster_model", "champion").run_id)
    assert run.data.params["use_gpu"] == "True" and run.data.params["local_mode"] == "False"
    assert run.data.params["training_device"] != "cpu"

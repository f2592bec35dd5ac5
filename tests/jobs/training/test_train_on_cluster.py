"""Training as a barrier stage on a real Spark standalone cluster (``local_mode=False``).

The test starts a master and a worker with pyspark's own ``spark-class`` (as docker-compose
does; ``tests/stack.py``), submits the train job to it with spark-submit, and stops both afterwards.
"""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path
from typing import Any

import pytest

from jobs.lake.layout import partition_name
from tests.stack import running_spark_cluster

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[3]
RUN_DATE = dt.date(2013, 1, 6)  # 3 training days + 2 holdout days: 2013-01-02..2013-01-06


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_spark_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


def small_window(features_zone, config_patch, tmp_path: Path, **train: Any) -> tuple[Path, Path, list[dt.date]]:
    """(config file, lake root, training days): a 3 + 2 day window ending RUN_DATE with its
    features written, and ``train`` settings over the bundled config's."""
    from jobs.training.data import split_window

    # no validation days to choose on; in train_pipeline (test_stack.py) one candidate, no baselines
    config_path = config_patch.write(
        tmp_path, train={"train_days": 3, "validation_days": 0, "holdout_days": 2, "epochs": 2, **train},
        baselines=[], replace={"evaluation": {"threshold": 0.5}, "sweep": {"size": 1}},
    )
    train_days, holdout_days = split_window(RUN_DATE, 3, 2)
    features_lake = tmp_path / "lake"
    days = [*train_days, *holdout_days]
    features_zone.copy(days, features_lake / "features")
    return config_path, features_lake, train_days


def test_training_runs_as_a_barrier_stage_on_a_standalone_cluster(cluster, spark, features_zone, config_patch,
                                                                    tmp_path):
    import mlflow

    config_path, features_lake, train_days = small_window(features_zone, config_patch, tmp_path, num_processes=2,
                                                          model_name="cluster_model")
    tracking = f"sqlite:///{tmp_path}/mlflow.db"
    env = {**cluster.env, "MLFLOW_TRACKING_URI": tracking, "PIPELINE_MLFLOW_ARTIFACTS": str(tmp_path / "art")}
    done = subprocess.run(
        ["spark-submit", "--master", cluster.url, "--conf", "spark.executor.memory=1g",
         str(REPO / "jobs/training/job.py"), "--run-date", RUN_DATE.isoformat(), "--config", str(config_path),
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


@pytest.mark.gpu
def test_gpu_training_on_a_standalone_worker_that_advertises_its_gpus(features_zone, config_patch, tmp_path):
    """A GPU worker as a user's cluster has one: the worker advertises its GPUs through the project's
    discovery script, the job asks one GPU per executor and task, each rank trains on its GPU."""
    import mlflow

    from jobs.lake.spark import GPU_DISCOVERY_SCRIPT

    worker_opts = (f"-Dspark.worker.resource.gpu.amount={gpus()} "
                   f"-Dspark.worker.resource.gpu.discoveryScript={GPU_DISCOVERY_SCRIPT}")
    config_path, features_lake, _ = small_window(features_zone, config_patch, tmp_path, num_processes=1,
                                                 model_name="gpu_cluster_model")
    tracking = f"sqlite:///{tmp_path}/mlflow.db"
    with running_spark_cluster(tmp_path, worker_opts) as gpu_cluster:
        env = {**gpu_cluster.env, "MLFLOW_TRACKING_URI": tracking,
               "PIPELINE_MLFLOW_ARTIFACTS": str(tmp_path / "art")}
        done = subprocess.run(
            ["spark-submit", "--master", gpu_cluster.url, "--conf", "spark.executor.memory=2g",
             str(REPO / "jobs/training/job.py"), "--run-date", RUN_DATE.isoformat(), "--config", str(config_path),
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

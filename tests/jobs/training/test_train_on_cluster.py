"""Training as a barrier stage on a real Spark standalone cluster (``local_mode=False``), and the
cluster's worker lost under training and under the features job (issue 27, case 4).

The module starts a master and a worker with pyspark's own ``spark-class`` (as docker-compose
does; ``tests/stack.py``), submits the jobs to it with spark-submit, and stops both afterwards.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from jobs.lake.layout import partition_name
from tests.airflow_server import _kill_tree
from tests.jobs.training.test_train_resume import checkpointed_epochs
from tests.stack import _get, running_spark_cluster

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[3]
RUN_DATE = dt.date(2013, 1, 6)  # 3 training days + 2 holdout days: 2013-01-02..2013-01-06
LONG_EPOCHS = 16  # many short epochs, so that a kill lands mid-training


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_spark_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


def small_window(features_zone, config_patch, tmp_path: Path, **train: Any) -> tuple[Path, Path, list[dt.date]]:
    """(config file, lake root, training days): a 3 + 2 day window ending RUN_DATE with its
    features written, and ``train`` settings over the bundled config's."""
    from jobs.training.data import split_window

    # no validation days to choose on; in flights_train (test_stack.py) one candidate, no baselines
    config_path = config_patch.write(
        tmp_path, train={"train_days": 3, "validation_days": 0, "holdout_days": 2, "epochs": 2, **train},
        baselines=[], evaluation={"threshold": 0.5, "segments": []},
        sweep={"size": 1, "families": ["mlp"], "blend": [], "learning_rate": [], "width": [], "depth": [],
               "epochs": []},
    )
    train_days, holdout_days = split_window(RUN_DATE, 3, 2)
    features_lake = tmp_path / "lake"
    days = [*train_days, *holdout_days]
    features_zone.copy(days, features_lake / "features")
    return config_path, features_lake, train_days


def test_training_runs_as_a_barrier_stage_on_the_cluster_and_resumes_after_its_worker_is_lost(
        cluster, spark, features_zone, config_patch, tmp_path):
    """Training with local_mode false runs its two ranks as a barrier stage on the cluster's
    executor, not on the driver. Issue 27, case 4, on the same training (one cluster training, not
    two, for the suite's time): the worker that runs both ranks dies mid-training (SIGKILL to it,
    its executor and the ranks under it, as when its machine goes). The job fails at once (Spark
    does not retry a barrier stage that lost a task), as a fault (retried) whose one line says so;
    the MLflow run is not left RUNNING; the retry, on a worker started again, resumes the same run
    after its last checkpoint, counts every epoch once and registers one version."""
    import mlflow

    from jobs.errors import DATA_ERROR_EXIT

    config_path, lake, train_days = small_window(features_zone, config_patch, tmp_path, num_processes=2,
                                                 model_name="cluster_model", epochs=LONG_EPOCHS, batch_size=64)
    tracking = f"sqlite:///{tmp_path}/mlflow.db"
    env = {**cluster.env, "MLFLOW_TRACKING_URI": tracking, "PIPELINE_MLFLOW_ARTIFACTS": str(tmp_path / "art")}
    command = ["spark-submit", "--master", cluster.url, "--conf", "spark.executor.memory=1g",
               str(REPO / "jobs/training/job.py"), "--run-date", RUN_DATE.isoformat(), "--config", str(config_path),
               "--lake-root", str(lake), "--local-mode", "false"]
    checkpoints = lake / "checkpoints" / "training" / partition_name(RUN_DATE)

    def epochs_done() -> int:
        return checkpointed_epochs(checkpoints)

    log = tmp_path / "killed.log"
    with log.open("w") as out:
        first = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while epochs_done() < 1:
            assert first.poll() is None, "training ended before its first checkpoint:\n" + log.read_text()[-4000:]
            assert time.monotonic() < deadline, "no checkpoint within 300 s:\n" + log.read_text()[-4000:]
            time.sleep(0.1)
        killed = cluster.kill_worker()
        lost_at = time.monotonic()
        code = first.wait(timeout=180)
        failed_after = time.monotonic() - lost_at
    finally:
        if first.poll() is None:
            _kill_tree(first, "the train job")
    output = log.read_text()
    assert "Started distributed training with 2 executor processes" in output  # not on the driver
    assert any("CoarseGrainedExecutorBackend" in line for line in killed), killed  # the executor went too
    assert code not in (0, DATA_ERROR_EXIT), output[-4000:]  # a fault: Airflow retries it
    # One line that says what happened (it said only "Py4JJavaError: An error occurred while calling
    # o303.collectToPython." before): Spark gives up on a barrier stage that lost a task at once.
    fault = next(line for line in output.splitlines() if "failed (a fault: Airflow retries the task)" in line)
    assert "SparkException: Job aborted due to stage failure: Could not recover from a failed barrier" in fault
    assert "ExecutorLostFailure" in fault and "worker lost" in fault, fault
    assert failed_after < 120
    killed_after = epochs_done()
    assert 1 <= killed_after < LONG_EPOCHS, "the kill must land mid-training"
    client = mlflow.MlflowClient(tracking)
    experiments = [e.experiment_id for e in client.search_experiments()]
    (dead,) = client.search_runs(experiments)
    assert dead.info.status == "FAILED"  # not left RUNNING

    cluster.restart_worker()
    retry = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    retried = retry.stdout + retry.stderr
    assert retry.returncode == 0, retried[-6000:]
    assert f"resuming MLflow run {dead.info.run_id} after epoch {killed_after}" in retried
    (run,) = client.search_runs(experiments)  # the same run, not a fork
    assert run.info.run_id == dead.info.run_id and run.info.status == "FINISHED"
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "train_loss")) == list(range(LONG_EPOCHS))
    (version,) = client.search_model_versions("name = 'cluster_model'")
    assert version.run_id == run.info.run_id
    assert client.get_model_version_by_alias("cluster_model", "champion").version == version.version
    assert run.data.params["local_mode"] == "False" and run.data.params["num_processes"] == "2"
    labelled = spark.read.parquet(*[str(lake / "features" / partition_name(d)) for d in train_days])
    assert run.data.metrics["train_rows"] == labelled.where("label IS NOT NULL").count()


def test_the_features_job_finishes_every_day_whole_when_its_worker_is_lost_mid_stage(
        cluster, spark, lake, features_zone, tmp_path):
    """Issue 27, case 4, the features half: the worker that runs the job's executor dies while a
    stage's tasks run (SIGKILL to it and its executor, as when its machine goes) and comes back, as
    a supervisor restarts it. Spark's own task retry covers it (the lost executor's tasks and cached
    blocks are computed again on the new one): the job succeeds, every day's partition holds each
    validated flight once, and equals what the job's functions build without a fault; no staging."""
    import json

    import pyarrow.parquet as pq

    from jobs.config import days_ending
    from tests.airflow_server import _free_port
    from tests.conftest import FIRST_DAY, LAST_DAY

    own = tmp_path / "lake"
    own.mkdir()
    for name in ("raw", "validated"):  # read only: the session lake's
        (own / name).symlink_to(f"{lake.root}/{name}")
    days = days_ending(LAST_DAY, (LAST_DAY - FIRST_DAY).days + 1)
    ui, events = _free_port(), tmp_path / "events"
    events.mkdir()
    command = ["spark-submit", "--master", cluster.url, "--conf", "spark.executor.memory=1g",
               "--conf", f"spark.ui.port={ui}", "--conf", "spark.eventLog.enabled=true",
               "--conf", "spark.eventLog.compress=false", "--conf", f"spark.eventLog.dir={events.as_uri()}",
               str(REPO / "jobs/features/job.py"),
               "--run-date", LAST_DAY.isoformat(), "--days", str(len(days)), "--lake-root", str(own)]

    def running_tasks() -> int:
        """Tasks running now in the job's active stages (0 before its UI is up)."""
        base = f"http://127.0.0.1:{ui}/api/v1/applications"
        try:
            [app] = json.loads(_get(base, timeout=2))
            return sum(stage["numActiveTasks"] for stage in json.loads(_get(f"{base}/{app['id']}/stages?status=active",
                                                                            timeout=2)))
        except (OSError, ValueError):
            return 0

    log = tmp_path / "features.log"
    with log.open("w") as out:
        job = subprocess.Popen(command, env=cluster.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while running_tasks() == 0:
            assert job.poll() is None, "the job ended before a task ran:\n" + log.read_text()[-4000:]
            assert time.monotonic() < deadline, "no task running within 300 s:\n" + log.read_text()[-4000:]
            time.sleep(0.05)
        killed = cluster.kill_worker()
        cluster.restart_worker()
        code = job.wait(timeout=300)
    finally:
        if job.poll() is None:
            _kill_tree(job, "the features job")
    output = log.read_text()
    assert any("CoarseGrainedExecutorBackend" in line for line in killed), killed  # its executor went too
    assert code == 0, output[-6000:]
    assert "Lost executor 0" in output, output[-6000:]
    # Spark's event log: tasks running on the lost executor ended as lost (not counted as the
    # tasks' failures) and ran again, to success, on the new one
    lines = [line for path in sorted(events.rglob("events_*")) for line in path.read_text().splitlines()]
    ends = [e for e in map(json.loads, lines) if e["Event"] == "SparkListenerTaskEnd"]

    def tasks(reason: str, executor: str | None = None) -> set[tuple[int, int]]:
        return {(e["Stage ID"], e["Task Info"]["Index"]) for e in ends if e["Task End Reason"]["Reason"] == reason
                and executor in (None, e["Task Info"]["Executor ID"])}

    lost, redone = tasks("ExecutorLostFailure"), tasks("Success", executor="1")
    assert lost and lost <= redone, (lost, redone)

    for day in days:
        written = pq.read_table(own / "features" / partition_name(day)).num_rows
        validated = pq.read_table(lake.partition(lake.validated("flights"), day)).num_rows
        assert written == validated, (day, written, validated)
    got = spark.read.parquet(str(own / "features")).select(*features_zone.columns)
    assert got.exceptAll(features_zone.frame(days)).count() == 0
    assert features_zone.frame(days).exceptAll(got).count() == 0
    staging = [p.name for p in (own / "features").iterdir() if not p.name.startswith("date=")]
    assert staging == [], staging


def gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.gpu
def test_gpu_training_on_a_standalone_worker_that_advertises_its_gpus(features_zone, config_patch, tmp_path):
    """A GPU worker as a user's cluster has one: the worker advertises its GPUs through the project's
    discovery script, the job asks one GPU per executor and task, each rank trains on its GPU."""
    import mlflow

    from jobs.runtime.gpu import GPU_DISCOVERY_SCRIPT

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

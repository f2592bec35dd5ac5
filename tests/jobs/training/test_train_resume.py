"""Resume: a training process killed after its first checkpoint, started again, finishes the same
MLflow run with every epoch counted once, and ends where a training that never stopped ends.

The train job runs as its own process (``python -m jobs.training.job``, the command spark-submit runs),
in its own process group; the test kills the whole group with SIGKILL (driver JVM, torchrun and
both ranks), like the OOM killer or a lost node would, as soon as the first epoch's checkpoint is
in the lake.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.lake.layout import partition_name

pytestmark = pytest.mark.e2e  # a whole train job, killed and started again: about two minutes

REPO = Path(__file__).resolve().parents[3]
RUN_DATE = dt.date(2013, 1, 5)
EPOCHS = 16  # many short epochs: the kill lands well before the end


@pytest.fixture(scope="module")
def training_setup(features_zone, config_patch, tmp_path_factory):
    """Features for 2013-01-02..05 in a lake of their own, and a config training on 3 days, holding
    out 1, for EPOCHS epochs of small batches."""
    home = tmp_path_factory.mktemp("resume")
    days = [dt.date(2013, 1, d) for d in (2, 3, 4, 5)]
    features_zone.copy(days, home / "lake" / "features")
    config_patch.write(home, train={"train_days": 3, "validation_days": 0, "holdout_days": 1, "epochs": EPOCHS,
                                    "batch_size": 64, "launcher": "torch_distributor"},
                       evaluation={"threshold": 0.5})  # no validation days to choose it on
    return home


def _train(home: Path, store: str) -> subprocess.Popen:
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{home / store}.db",
           "PIPELINE_MLFLOW_ARTIFACTS": str(home / f"{store}-artifacts")}
    log = open(home / f"{store}.log", "a")  # noqa: SIM115 - the child writes to it until it ends
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.training.job", "--run-date", RUN_DATE.isoformat(),
         "--config", str(home / "pipeline.yaml"), "--lake-root", str(home / "lake")],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )


def _finish(home: Path, store: str, proc: subprocess.Popen) -> None:
    code = proc.wait(timeout=300)
    assert code == 0, (home / f"{store}.log").read_text()[-4000:]


def checkpointed_epochs(folder: Path) -> int:
    """Epochs the newest checkpoint under a day's checkpoint ``folder`` holds (its file name says so)."""
    return max((int(path.stem.removeprefix("epoch-")) for path in folder.glob("*/epoch-*.pt")), default=0)


def _epochs_done(home: Path) -> int:
    return checkpointed_epochs(home / "lake" / "checkpoints" / "training" / partition_name(RUN_DATE))


def _client(home: Path, store: str):
    from mlflow import MlflowClient

    return MlflowClient(f"sqlite:///{home / store}.db")


def test_a_killed_training_resumes_its_run_and_counts_every_epoch_once(training_setup, config):
    home = training_setup
    proc = _train(home, "resumed")
    deadline = time.monotonic() + 240
    while _epochs_done(home) < 1:
        assert proc.poll() is None, "training ended before its first checkpoint:\n" + (
            home / "resumed.log").read_text()[-4000:]
        assert time.monotonic() < deadline, "no checkpoint within 240 s"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    time.sleep(2)  # ranks live in sessions of their own: they must notice and stop, not train on
    killed_after = _epochs_done(home)
    time.sleep(2)
    assert _epochs_done(home) == killed_after, "the ranks outlived their launcher and kept training"
    assert 1 <= killed_after < EPOCHS, "the kill must land mid-training"

    client = _client(home, "resumed")
    (dead,) = client.search_runs([client.get_experiment_by_name(config.train.experiment).experiment_id])
    assert dead.info.status in ("RUNNING", "FAILED")  # not FINISHED: it was killed
    assert len(client.get_metric_history(dead.info.run_id, "train_loss")) <= killed_after

    _finish(home, "resumed", _train(home, "resumed"))  # the retry
    assert f"resuming MLflow run {dead.info.run_id} after epoch {killed_after}" in (home / "resumed.log").read_text()
    (run,) = client.search_runs([dead.info.experiment_id])  # the same run, not a fork
    assert run.info.run_id == dead.info.run_id and run.info.status == "FINISHED"
    assert run.data.tags["resumed_from_epoch"] == str(killed_after)
    history = client.get_metric_history(run.info.run_id, "train_loss")
    assert sorted(m.step for m in history) == list(range(EPOCHS))  # every epoch once
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train_rows")] == [0]
    (version,) = client.search_model_versions(f"name = '{config.train.model_name}'")
    assert version.run_id == run.info.run_id
    assert not (home / "lake" / "checkpoints" / "training" / partition_name(RUN_DATE)).exists() or not any(
        (home / "lake" / "checkpoints" / "training" / partition_name(RUN_DATE)).iterdir()
    ), "checkpoints outlive the registered model"

    # A training that never stopped, in a store of its own, ends with the same model.
    _finish(home, "uninterrupted", _train(home, "uninterrupted"))
    other = _client(home, "uninterrupted")
    (straight,) = other.search_runs([other.get_experiment_by_name(config.train.experiment).experiment_id])
    assert "resumed_from_epoch" not in straight.data.tags
    by_step = {m.step: m.value for m in history}
    assert by_step == {m.step: m.value for m in other.get_metric_history(straight.info.run_id, "train_loss")}
    for metric in ("holdout_log_loss", "holdout_roc_auc", "holdout_ece"):
        assert run.data.metrics[metric] == straight.data.metrics[metric]
    assert run.data.params["code_version"] == straight.data.params["code_version"]

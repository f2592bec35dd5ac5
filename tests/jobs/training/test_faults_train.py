"""Faults of training, tracking and drift (issue 15): each class answered with a clear message, a
run that does not stay RUNNING, or a report that says what it is.

Real Spark (the session fixture), real MLflow (a SQLite store; a real ``mlflow server`` process for
the outage), real train job processes for the kills.
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

REPO = Path(__file__).resolve().parents[3]
DAYS = [dt.date(2013, 1, d) for d in (2, 3, 4, 5)]
RUN_DATE = DAYS[-1]


@pytest.fixture(scope="module")
def features(features_zone, tmp_path_factory):
    """Real feature rows of DAYS (a Spark DataFrame, cached) and a folder to build lakes in."""
    frame = features_zone.frame(DAYS).cache()
    frame.count()
    return frame


def make_lake(config_patch, home: Path, frame, epochs: int = 1, **train) -> Path:
    """A lake at ``home/lake`` with ``frame`` as its features, and ``home/pipeline.yaml`` training on
    three days and holding out one, for ``epochs`` epochs of small batches, through TorchDistributor's
    ranks unless ``launcher`` says otherwise (the bundled ``auto`` trains a window this small in the
    job's own process)."""
    from jobs.features.job import write_features

    write_features(frame, str(home / "lake" / "features"))
    config_patch.write(home, train={"train_days": 3, "validation_days": 0, "holdout_days": 1, "epochs": epochs,
                                    "batch_size": 64, "launcher": "torch_distributor", **train},
                       evaluation={"threshold": 0.5})  # no validation days to choose it on
    return home


def start_training(home: Path, tracking_uri: str, **env: str) -> subprocess.Popen:
    """The train job as its own process (what spark-submit runs), in a session of its own."""
    out = open(home / "train.log", "a")  # noqa: SIM115 - the child writes to it until it ends
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.training.job", "--run-date", RUN_DATE.isoformat(),
         "--config", str(home / "pipeline.yaml"), "--lake-root", str(home / "lake")],
        cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "MLFLOW_TRACKING_URI": tracking_uri,
             "PIPELINE_MLFLOW_ARTIFACTS": str(home / "artifacts"), **env},
    )


def epochs_done(home: Path) -> int:
    found = (home / "lake" / "checkpoints" / "training" / partition_name(RUN_DATE)).glob("*/epoch-*.pt")
    return max((int(path.stem.removeprefix("epoch-")) for path in found), default=0)


def wait_for_epoch(home: Path, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while epochs_done(home) < 1:
        assert proc.poll() is None, "training ended early:\n" + (home / "train.log").read_text()[-4000:]
        assert time.monotonic() < deadline, f"no checkpoint within {timeout} s"
        time.sleep(0.05)


def run_of(tracking_uri: str, config, timeout: float = 120, tag: str | None = None):
    """The one run of the training experiment in the store, once it exists (and has ``tag``)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        experiment = client.get_experiment_by_name(config.train.experiment)
        runs = client.search_runs([experiment.experiment_id]) if experiment else []
        if runs and (tag is None or tag in runs[0].data.tags):
            return client, runs[0]
        time.sleep(0.2)
    raise AssertionError(f"no training run in {tracking_uri} within {timeout} s")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


# --- 1. the tracking server down ----------------------------------------------------------------


@pytest.mark.e2e
def test_a_dead_tracking_server_fails_training_within_two_minutes_saying_so(features, config_patch, tmp_path):
    """A real ``mlflow server`` killed before the train job starts: the job fails fast (it checks the
    server up front; MLflow's own retries would take over 4 minutes) with a message saying what to do."""
    from tests.stack import running_mlflow

    home = make_lake(config_patch, tmp_path, features)
    with running_mlflow(tmp_path / "mlflow", f"sqlite:///{tmp_path}/server.db") as server:
        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=30)
        started = time.monotonic()
        proc = start_training(home, server.url)
        try:
            code = proc.wait(timeout=150)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    elapsed = time.monotonic() - started
    log = (home / "train.log").read_text()
    assert code != 0 and elapsed < 120, f"{elapsed:.0f} s:\n{log[-3000:]}"
    assert f"tracking server at {server.url} not reachable" in log and "Start it with" in log, log[-3000:]


def test_tracking_settings_bound_mlflow_calls_and_the_environment_wins(config, monkeypatch):
    from jobs.config import TRACKING_ENV

    for variable in TRACKING_ENV.values():
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "7")
    applied = config.tracking.apply()
    assert applied["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "7"  # set by the operator: kept
    assert applied["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == str(config.tracking.max_retries)
    from mlflow.environment_variables import MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR, MLFLOW_HTTP_REQUEST_MAX_RETRIES

    assert MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == config.tracking.max_retries  # what MLflow reads
    assert MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR.get() == config.tracking.backoff_factor


def test_every_job_bounds_its_mlflow_calls_not_only_training(monkeypatch, tmp_path):
    """The scoring, monitoring and baselines jobs call MLflow too (the registry, the model's
    artifacts, metrics): each job's argument parsing applies ``tracking.*``, so a night's scoring
    whose server is gone fails within seconds (and is retried), not after MLflow's 7 retries."""
    from jobs.config import TRACKING_ENV, job_parser, load_config, parse_job_args

    for variable in TRACKING_ENV.values():
        monkeypatch.delenv(variable, raising=False)
    parse_job_args(job_parser("a job"), ["--run-date", "2013-01-08", "--lake-root", str(tmp_path)])
    tracking = load_config().tracking
    from mlflow.environment_variables import MLFLOW_HTTP_REQUEST_MAX_RETRIES

    assert MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == tracking.max_retries  # MLflow's own default: 7


# --- 2. killed mid-training ---------------------------------------------------------------------


@pytest.mark.e2e
def test_a_tracking_server_lost_mid_training_fails_the_job_saying_what_ended_the_rank(
        features, config_patch, tmp_path):
    """The MLflow server lost after the first epoch (as when PostgreSQL behind it restarts, issue 27
    case 3): the job's forwarding of rank 0's log fails, and the job's one line says so. TorchDistributor
    itself reports only "TorchDistributor failed during training.View stdout logs for detailed
    error message.", the cause being in the rank's output far above."""
    from tests.stack import running_mlflow

    home = make_lake(config_patch, tmp_path, features, epochs=40)
    with running_mlflow(tmp_path / "mlflow", f"sqlite:///{tmp_path}/server.db") as server:
        proc = start_training(home, server.url)
        try:
            wait_for_epoch(home, proc)
            server.kill()
            code = proc.wait(timeout=180)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    log = (home / "train.log").read_text()
    assert code == 1, log[-3000:]  # a fault: Airflow retries it (and the retry resumes the run)
    [line] = [line for line in log.splitlines() if "failed (a fault: Airflow retries the task)" in line]
    # rank 0 logs through the job's process (jobs.training.relay), whose forwarding fails once MLflow's
    # retries run out: the job says so (rank 0 stops at its next epoch if it is still training, its
    # line then "training failed: rank 0: ... the launching process stopped the training: ...")
    assert "could not forward rank 0's log to MLflow run" in line and "MlflowException: " in line, line
    assert "View stdout" not in line and "registered" not in log, line


@pytest.mark.e2e
@pytest.mark.parametrize("launcher", ["torch_distributor", "in_process"])
def test_a_terminated_training_ends_its_run_as_failed_and_stops_its_ranks(features, config, config_patch, tmp_path,
                                                                          launcher):
    """SIGTERM to the train job mid-training (what Airflow sends a task it kills): the ranks stop (or
    the job's own training, in_process), the job exits within seconds and the MLflow run is FAILED
    with the reason, not RUNNING forever."""
    home = make_lake(config_patch, tmp_path, features, epochs=40, launcher=launcher)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    proc = start_training(home, uri)
    try:
        wait_for_epoch(home, proc)
        os.kill(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=60)
        deadline = time.monotonic() + 15
        while group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not group_alive(proc.pid), "ranks outlived the terminated job"
    finally:
        if group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    assert code != 0 and epochs_done(home) < 40
    _, run = run_of(uri, config)
    assert run.info.status == "FAILED", (home / "train.log").read_text()[-3000:]
    assert "Terminated" in run.data.tags["pipeline.failure"]


@pytest.mark.e2e
def test_the_next_start_fails_a_run_whose_job_was_killed(features, config, config_patch, tmp_path):
    """SIGKILL (the OOM killer, a lost node) leaves no chance to end the run; the next start of the
    job (opening its own run) marks it FAILED with a note, since its process is gone."""
    import hashlib

    from jobs.lake.layout import Lake
    from jobs.model.tabular import Preprocessor
    from jobs.training.publish import open_run

    home = make_lake(config_patch, tmp_path, features, epochs=40)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    proc = start_training(home, uri)
    try:
        client, run = run_of(uri, config, tag="pipeline.owner")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert client.get_run(run.info.run_id).info.status == "RUNNING"

    # The next start of the job, for another day: it opens its run in the same experiment.
    os.environ["MLFLOW_TRACKING_URI"], saved = uri, os.environ["MLFLOW_TRACKING_URI"]
    try:
        pre = Preprocessor([], [], {}, {}, {})
        nonce = hashlib.sha256(str(tmp_path).encode()).hexdigest()
        new = open_run(Lake.at(str(home / "lake")), DAYS[0], config.train.experiment, {"nonce": nonce}, pre, 1)
    finally:
        os.environ["MLFLOW_TRACKING_URI"] = saved
    stale = client.get_run(run.info.run_id)
    assert stale.info.status == "FAILED"
    assert "is gone (killed)" in stale.data.tags["pipeline.failure"]
    assert client.get_run(new.run_id).info.status == "RUNNING"  # its own run is left alone


# --- 3. a training window without labels ----------------------------------------------------------


def train_in_this_process(home: Path, monkeypatch, tmp_path) -> None:
    """``jobs.training.job.main`` in the test process on the session's Spark, restoring the SIGTERM handler."""
    from jobs.config import TRACKING_ENV
    from jobs.training.job import main

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setenv("PIPELINE_MLFLOW_ARTIFACTS", str(tmp_path / "artifacts"))
    for variable in TRACKING_ENV.values():
        monkeypatch.setenv(variable, os.environ.get(variable, "2"))
    handler = signal.getsignal(signal.SIGTERM)
    try:
        main(["--run-date", RUN_DATE.isoformat(), "--config", str(home / "pipeline.yaml"),
              "--lake-root", str(home / "lake")])
    finally:
        signal.signal(signal.SIGTERM, handler)


@pytest.mark.parametrize(("label", "says"), [("null", "has a label"), ("0.0", "a classifier needs both classes")])
def test_a_window_without_labels_fails_before_training_naming_the_window(
        features, config, config_patch, tmp_path, monkeypatch, label, says):
    from pyspark.sql import functions as F

    from jobs.errors import DataError
    from jobs.training.data import LabelError

    unlabelled = features.withColumn(config.features.label, F.expr(f"CAST({label} AS DOUBLE)"))
    home = make_lake(config_patch, tmp_path, unlabelled)
    started = time.monotonic()
    with pytest.raises(LabelError, match=says) as raised:
        train_in_this_process(home, monkeypatch, tmp_path)
    assert isinstance(raised.value, DataError)
    assert f"training window {DAYS[0]}..{DAYS[2]}" in str(raised.value)
    assert time.monotonic() - started < 60 and epochs_done(home) == 0  # no rank started


def test_a_window_that_leaves_a_rank_no_rows_is_refused_before_the_ranks_start(
        features, config, config_patch, tmp_path, monkeypatch):
    """More ranks than the window has row groups: a rank would have nothing to train on and its
    peers would wait for it in every collective. The job refuses, saying why, before any rank starts."""
    import pyarrow.parquet as pq

    from jobs.errors import DataError
    from jobs.training.stream import EmptyShareError

    home = make_lake(config_patch, tmp_path, features)
    groups = sum(pq.ParquetFile(path).num_row_groups
                 for day in DAYS[:3] for path in (home / "lake" / "features" / partition_name(day)).glob("*.parquet"))
    config_patch.write(home, train={"train_days": 3, "validation_days": 0, "holdout_days": 1, "epochs": 1,
                                    "num_processes": groups + 1, "launcher": "torch_distributor"},
                       evaluation={"threshold": 0.5})
    started = time.monotonic()
    with pytest.raises(EmptyShareError, match=f"1 of {groups + 1} ranks would get no labelled row") as raised:
        train_in_this_process(home, monkeypatch, tmp_path)
    assert isinstance(raised.value, DataError)
    assert f"training window {DAYS[0]}..{DAYS[2]}" in str(raised.value) and "fewer processes" in str(raised.value)
    assert time.monotonic() - started < 60 and epochs_done(home) == 0  # no rank started


@pytest.mark.slow
def test_auto_trains_a_small_window_as_one_rank_in_the_job_s_own_process(features, config, config_patch,
                                                                         tmp_path, monkeypatch):
    """``train.launcher: auto`` on a CPU window of at most ``in_process_max_rows`` labelled rows: the
    job trains it as one rank in its own process (no TorchDistributor, no torchrun, no rank
    processes), says so in the run's params, and the model is the one a TorchDistributor rank in a
    world of one trains on the same window: the same metrics, to the bit."""
    from jobs.training import job
    from jobs.training.launcher import LeanTorchDistributor

    runs, calls = {}, []
    real_in_process, real_run = job.train_in_process, LeanTorchDistributor.run

    def in_process(rank):
        calls.append("in_process")
        return real_in_process(rank)

    def distributor_run(self, *args, **kwargs):
        calls.append("torch_distributor")
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(job, "train_in_process", in_process)
    monkeypatch.setattr(LeanTorchDistributor, "run", distributor_run)
    for launcher in ("auto", "torch_distributor"):
        # a buffer smaller than the window: auto still holds it in memory in process (rank_data_path);
        # the TorchDistributor rank is told to, so both train the same way
        home = make_lake(config_patch, tmp_path / launcher, features, epochs=2, launcher=launcher, num_processes=1,
                         buffer_rows=500, **({"data_path": "memory"} if launcher == "torch_distributor" else {}))
        train_in_this_process(home, monkeypatch, tmp_path / launcher)
        _, runs[launcher] = run_of(f"sqlite:///{tmp_path / launcher}/mlflow.db", config)
    auto, distributed = runs["auto"], runs["torch_distributor"]
    assert auto.data.params["launcher"] == "in_process" and auto.data.params["num_processes"] == "1"
    assert auto.data.params["data_path"] == "auto" and auto.data.params["training_data_path"] == "memory"
    assert int(auto.data.metrics["train_rows"]) > 500  # more rows than the buffer: auto alone would stream
    assert distributed.data.params["launcher"] == "torch_distributor"
    assert calls == ["in_process", "torch_distributor"]  # auto started no torchrun and no rank process
    metrics = {k: v for k, v in distributed.data.metrics.items() if k.startswith(("holdout_", "train_loss"))}
    assert metrics and {k: auto.data.metrics[k] for k in metrics} == metrics


def test_the_launcher_follows_the_window_the_device_and_the_cluster(config, config_patch):
    from jobs.training.resources import choose_launcher, rank_data_path

    def chosen(setting="auto", use_gpu=False, local_mode=True, rows=1000):
        return choose_launcher(setting, use_gpu=use_gpu, local_mode=local_mode, labelled_rows=rows, max_rows=1000)[0]

    assert chosen() == "in_process" and chosen(rows=1001) == "torch_distributor"
    assert chosen(use_gpu=True) == chosen(local_mode=False) == "torch_distributor"
    assert chosen("torch_distributor") == "torch_distributor" and chosen("in_process", rows=10**9) == "in_process"
    # in process, a window within in_process_max_rows is held in memory; anything else as set
    assert rank_data_path("auto", "in_process", 1000, 1000) == "memory"
    assert rank_data_path("auto", "in_process", 1001, 1000) == "auto"  # a forced in_process past the bound
    assert rank_data_path("auto", "torch_distributor", 10, 1000) == "auto"
    assert rank_data_path("stream", "in_process", 10, 1000) == "stream"
    assert config.train.launcher == "auto"  # the bundled default
    with pytest.raises(ValueError, match="launcher\n.*'auto', 'torch_distributor' or 'in_process'"):
        config_patch.replace(config, train={"launcher": "ray"})
    with pytest.raises(ValueError, match="in_process runs the one rank in the train job's own process: it needs "
                                         "train.local_mode true"):
        config_patch.replace(config, train={"launcher": "in_process", "local_mode": False})


# --- 4. non-finite and absurd numerics ----------------------------------------------------------


@pytest.mark.parametrize("local_max_rows", [0, 100_000])  # Spark's aggregations, or counted in this process
def test_a_feature_with_non_finite_statistics_stops_training_naming_it(features, config, local_max_rows):
    """NaN, infinity and values near the float maximum (whose sum overflows) in the training rows:
    the preprocessor refuses them instead of standardising the features to zeros."""
    from pyspark.sql import functions as F

    from jobs.errors import DataError
    from jobs.training.data import fit_preprocessor

    first = F.col("flight") % 7 == 0
    broken = (features
              .withColumn("distance", F.when(first, F.lit(float("nan"))).otherwise(F.col("distance")))
              .withColumn("temp", F.when(first, F.lit(float("inf"))).otherwise(F.col("temp")))
              .withColumn("seats", F.when(first, F.lit(1.7e308)).otherwise(F.col("seats"))))
    with pytest.raises(DataError, match="non-finite statistics") as raised:
        fit_preprocessor(broken, config.features, 5, "training window 2013-01-02..2013-01-04",
                         local_max_rows=local_max_rows)
    message = str(raised.value)
    for named in ("distance (mean nan", "temp (mean inf", "seats (mean "):
        assert named in message, message
    assert "training window 2013-01-02..2013-01-04" in message and "dep_hour" not in message
    fit_preprocessor(features, config.features, 5, local_max_rows=local_max_rows)  # the real rows pass


# --- 5. days with very few rows -----------------------------------------------------------------


@pytest.mark.slow
def test_a_day_with_too_few_rows_is_not_judged_as_drift(features, config):
    import numpy as np

    from jobs.scoring.drift import PREDICTION, build_baseline, headline, measure
    from jobs.training.data import fit_preprocessor

    train = features.where(features.date.isin(DAYS[:3]))
    pre = fit_preprocessor(train, config.features, 5)
    baseline = build_baseline(train, pre, np.linspace(0.05, 0.95, 500), config.score.drift.bins)
    day = features.where(features.date == DAYS[3]).drop("date")
    one_row = day.limit(1).withColumn(PREDICTION, day.distance * 0 + 0.5).cache()
    report = measure(baseline, one_row, one_row.select(PREDICTION), config.score.drift)
    assert report["rows"] == 1 and report["status"] == "too_few_rows"
    assert not report["drifted"] and report["reasons"] == []
    assert headline(report).startswith("too few rows to judge drift (1 < score.drift.min_rows")
    whole = day.withColumn(PREDICTION, (day.distance % 1000) / 1000)  # a real day is judged
    assert measure(baseline, whole, whole.select(PREDICTION), config.score.drift)["status"] != "too_few_rows"


# --- 6. undefined metrics at the champion gate --------------------------------------------------


def test_the_first_model_becomes_champion_with_an_undefined_metric_and_a_warning(features, config, tmp_path):
    """A holdout of one class has no ROC AUC: the first version still becomes champion (as the README
    says), with a warning tag; a later challenger with an undefined metric never replaces a champion."""
    import math

    import mlflow
    import torch

    from jobs.model.tabular import build_net, log_pyfunc
    from jobs.selection.gate import CHAMPION, apply_gate, decide
    from jobs.tracking import ensure_experiment
    from jobs.training.data import fit_preprocessor

    label = config.features.label
    pre = fit_preprocessor(features.where(features.date.isin(DAYS[:3])), config.features, 5)
    holdout = features.where((features.date == DAYS[3]) & (features[label] == 0.0)).limit(200).toPandas()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    mlflow.set_experiment(experiment_id=ensure_experiment("gate-faults"))
    client, name = mlflow.MlflowClient(), "undefined_gate"
    torch.manual_seed(0)
    with mlflow.start_run():
        info = log_pyfunc(build_net(pre, {"embedding_dim": 2, "hidden_units": [4]}), pre,
                          {"embedding_dim": 2, "hidden_units": [4]}, holdout.head(5))
    version = str(mlflow.register_model(info.model_uri, name).version)
    decision = apply_gate(client, name, version, holdout, config.features.inputs, label, "roc_auc", 0.002)
    assert math.isnan(decision.challenger_score)
    assert decision.promote, decision.reason
    assert str(client.get_model_version_by_alias(name, CHAMPION).version) == version
    tags = client.get_model_version(name, version).tags
    assert tags["gate_decision"] == "promoted" and "undefined" in tags["gate_warning"]

    later = decide("roc_auc", math.nan, 0.71, 0.002, champion_version=version)
    assert not later.promote and "never replaces the champion" in later.reason and later.warning


# --- 7. no version from a run that failed ---------------------------------------------------------


def versions_from_unfinished_runs(client, name: str) -> list[str]:
    """The versions of ``name`` whose run did not finish: none may exist."""
    return [f"version {v.version} from run {v.run_id} ({client.get_run(v.run_id).info.status})"
            for v in client.search_model_versions(f"name = '{name}'")
            if client.get_run(v.run_id).info.status != "FINISHED"]


def _fail(*args, **kwargs):
    raise RuntimeError("injected failure")


@pytest.mark.slow
@pytest.mark.parametrize("step", ["feature bins", "report", "bar", "registration"])
def test_a_training_that_fails_after_training_leaves_no_version(features, config, config_patch, tmp_path,
                                                                monkeypatch, step):
    """Registration comes last: a failure at the feature bins, the evaluation report, the bar or the
    registration itself leaves the run unfinished or unregistered, and no version in the registry."""
    import mlflow

    import jobs.scoring.drift
    import jobs.selection.bar
    import jobs.selection.evaluation

    home = make_lake(config_patch, tmp_path, features, launcher="in_process")
    target = {"feature bins": (jobs.scoring.drift, "feature_bins"),
              "report": (jobs.selection.evaluation, "evaluate_candidate"),
              "bar": (jobs.selection.bar, "bar_decision"),
              "registration": (mlflow, "register_model")}[step]
    monkeypatch.setattr(*target, _fail)
    with pytest.raises(RuntimeError, match="injected failure"):
        train_in_this_process(home, monkeypatch, tmp_path)
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    name = config.train.model_name
    assert client.search_model_versions(f"name = '{name}'") == []
    [run] = client.search_runs([client.get_experiment_by_name(config.train.experiment).experiment_id])
    if step == "registration":  # finished with everything logged, then refused: it says why, and is no version
        assert run.info.status == "FINISHED" and run.data.tags["registration"].startswith("failed: RuntimeError")
    else:
        assert run.info.status == "FAILED"
    monkeypatch.undo()
    train_in_this_process(home, monkeypatch, tmp_path)  # the retry registers one version, from a finished run
    [version] = client.search_model_versions(f"name = '{name}'")
    assert versions_from_unfinished_runs(client, name) == []
    assert client.get_run(version.run_id).data.tags["registration"] == str(version.version)


def test_a_run_that_finished_but_never_registered_is_reconciled_by_the_next_training(tmp_path):
    """The process died between finishing the run and registering it: the next training tags it
    abandoned, saying so, and it is no version."""
    import mlflow

    from jobs.training.publish import REGISTRATION, reconcile_registrations

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.create_experiment("x")
    pending = client.create_run(experiment, tags={REGISTRATION: "pending"}).info.run_id
    client.set_terminated(pending, status="FINISHED")
    registered = client.create_run(experiment, tags={REGISTRATION: "3"}).info.run_id
    assert reconcile_registrations(client, experiment) == [pending]
    assert client.get_run(pending).data.tags[REGISTRATION].startswith("abandoned")
    assert client.get_run(registered).data.tags[REGISTRATION] == "3"
    assert reconcile_registrations(client, experiment) == []

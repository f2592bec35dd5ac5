from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch.overrides import TorchFunctionMode

from jobs.config import FeatureSpec
from jobs.lake.layout import partition_name
from jobs.training.data import fit_preprocessor, split_window
from jobs.training.rank import RankConfig


def test_split_window_puts_the_holdout_last():
    train, holdout = split_window(dt.date(2013, 1, 10), 7, 3)
    assert train[0] == dt.date(2013, 1, 1) and train[-1] == dt.date(2013, 1, 7)
    assert holdout == [dt.date(2013, 1, 8), dt.date(2013, 1, 9), dt.date(2013, 1, 10)]


def test_an_expanding_window_reaches_back_over_the_featured_days_up_to_its_cap(config, config_patch):
    from jobs.training.data import training_window

    def days(first: int, last: int) -> list[dt.date]:
        return [dt.date(2013, 1, d) for d in range(first, last + 1)]

    run = dt.date(2013, 1, 30)
    fixed = config_patch.replace(config, train={"train_days": 5, "validation_days": 2, "holdout_days": 3})
    assert training_window(run, fixed.train, days(1, 30)) == (days(21, 25), days(26, 27), days(28, 30))
    expanding = config_patch.replace(fixed, train={"max_train_days": 12})
    assert training_window(run, expanding.train, days(1, 30))[0] == days(14, 25)  # at most 12 days
    assert training_window(run, expanding.train, days(18, 30))[0] == days(18, 25)  # as far as the lake goes
    gap = [d for d in days(1, 30) if d != dt.date(2013, 1, 17)]
    assert training_window(run, expanding.train, gap)[0] == days(18, 25)  # up to the first gap
    assert training_window(run, expanding.train, [])[0] == days(21, 25)  # train_days at least, as ever
    with pytest.raises(ValueError, match="max_train_days .4. must be at least train.train_days"):
        config_patch.replace(fixed, train={"max_train_days": 4})


def test_the_regularisation_settings_are_checked(config, config_patch):
    with pytest.raises(ValueError, match="weight_decay\n.*greater than or equal to 0"):
        config_patch.replace(config, train={"weight_decay": -0.1})
    with pytest.raises(ValueError, match="dropout must be a number in"):
        config_patch.replace(config, train={"hyperparameters": {"embedding_dim": 4, "hidden_units": [8],
                                                                "dropout": 1.0}})
    for members in (0, 1.5, True):
        with pytest.raises(ValueError, match="members must be a whole number of nets"):
            config_patch.replace(config, train={"hyperparameters": {"embedding_dim": 4, "hidden_units": [8],
                                                                    "members": members}})
    for wide in ("linear", 2):
        with pytest.raises(ValueError, match="wide must be true, false or onehot"):
            config_patch.replace(config, train={"hyperparameters": {"embedding_dim": 4, "hidden_units": [8],
                                                                    "wide": wide}})
    assert config.train.weight_decay > 0 and config.train.hyperparameters["dropout"] > 0  # the shipped MLP's


@pytest.mark.parametrize("local_max_rows", [0, 5, 1000])  # Spark's aggregations; over the bound; in this process
def test_fit_preprocessor_uses_labelled_rows_and_frequent_categories(spark, local_max_rows):
    spec = FeatureSpec(builder="x:y", id_columns=[], categorical=["carrier"], numeric=["distance", "engines"],
                       label="label")
    df = spark.createDataFrame(
        [("UA", 100.0, 2.0, 1.0), ("UA", 300.0, 2.0, 0.0), ("AA", 200.0, 2.0, 0.0),
         ("AA", 200.0, 2.0, 1.0), ("B6", 200.0, 2.0, 1.0), ("DL", 9999.0, 2.0, None), ("DL", 9999.0, 2.0, None)],
        "carrier string, distance double, engines double, label double",
    )
    pre = fit_preprocessor(df, spec, min_count=2, clip=True, local_max_rows=local_max_rows)
    assert pre.vocab == {"carrier": ["AA", "UA"]}  # B6 is rare; DL only in unlabelled rows
    assert pre.mean["distance"] == 200.0
    assert round(pre.std["distance"], 6) == round((20000 / 5) ** 0.5, 6)
    assert pre.std["engines"] == 1.0  # a constant column is not divided by zero
    # with clip (train.clip_to_training_range), the labelled rows' range, which encoding clips to
    assert (pre.low, pre.high) == ({"distance": 100.0, "engines": 2.0}, {"distance": 300.0, "engines": 2.0})
    assert pre.encode(pd.DataFrame({"carrier": ["UA"] * 2, "distance": [9999.0, 0.0], "engines": [2.0, 2.0]}))[1][
        :, 0].tolist() == pytest.approx([100 / (20000 / 5) ** 0.5, -100 / (20000 / 5) ** 0.5])
    unclipped = fit_preprocessor(df, spec, min_count=2, local_max_rows=local_max_rows)
    assert (unclipped.low, unclipped.high) == ({}, {}) and unclipped.mean == pre.mean


def test_the_vocabularies_of_one_pass_equal_one_count_per_column_on_real_days(spark, features_zone, config):
    """fit_preprocessor counts every categorical column in one grouping-sets pass: the vocabularies
    (order and value types included) are what a count per column (its earlier way) finds."""
    from pyspark.sql import functions as F

    days = [dt.date(2013, 1, d) for d in (2, 3, 4)]
    df = features_zone.frame(days)
    spec = config.features
    pre = fit_preprocessor(df, spec, min_count=5)
    labelled = df.where(F.col(spec.label).isNotNull())
    for col in spec.categorical:
        rows = (labelled.where(F.col(col).isNotNull()).groupBy(col).count().where(F.col("count") >= 5)
                .orderBy(col).collect())
        assert pre.vocab[col] == [r[col] for r in rows], col
        assert {type(v) for v in pre.vocab[col]} == {type(r[col]) for r in rows}, col
    assert len(pre.vocab["carrier"]) > 5 and any(len(values) > 50 for values in pre.vocab.values())


def test_a_window_counted_in_this_process_gives_spark_s_preprocessor_on_real_days(spark, features_zone, config):
    """The vocabularies (values, order, types) and the range of a window of real days counted from
    Arrow in this process are Spark's; the means and deviations within 1e-12 (another order of sums)."""
    days = [dt.date(2013, 1, d) for d in (2, 3, 4)]
    df = features_zone.frame(days)
    spark_pre = fit_preprocessor(df, config.features, 5, clip=True)
    rows = df.where(df[config.features.label].isNotNull()).count()
    local_pre = fit_preprocessor(df, config.features, 5, clip=True, local_max_rows=rows)
    assert local_pre.vocab == spark_pre.vocab and len(local_pre.vocab["dest"]) > 50
    assert {c: [type(v) for v in vs] for c, vs in local_pre.vocab.items()} == {
        c: [type(v) for v in vs] for c, vs in spark_pre.vocab.items()}
    assert (local_pre.low, local_pre.high) == (spark_pre.low, spark_pre.high)
    assert local_pre.numeric == spark_pre.numeric and len(spark_pre.numeric) > 30
    for c in spark_pre.numeric:
        assert local_pre.mean[c] == pytest.approx(spark_pre.mean[c], rel=1e-12, abs=1e-12), c
        assert local_pre.std[c] == pytest.approx(spark_pre.std[c], rel=1e-12, abs=1e-12), c


def test_shards_are_disjoint_cover_every_row_group_and_are_stable(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.training.data import shard_units

    dirs = []
    for day, groups in ((dt.date(2013, 1, 1), 3), (dt.date(2013, 1, 2), 1), (dt.date(2013, 1, 3), 2)):
        folder = tmp_path / partition_name(day)
        folder.mkdir()
        pq.write_table(pa.table({"x": list(range(groups * 10))}), folder / "part-0.parquet", row_group_size=10)
        dirs.append(str(folder))
    everything = shard_units(dirs, 0, 1)
    assert len(everything) == 6
    for world in (2, 3, 4):
        shares = [shard_units(dirs, rank, world) for rank in range(world)]
        assert sorted(u for share in shares for u in share) == sorted(everything)
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
        assert shares == [shard_units(dirs, rank, world) for rank in range(world)]


@pytest.fixture(scope="module")
def small_training(spark, features_zone, config, tmp_path_factory):
    """Features of four real days (three to train on, one holdout), a fitted preprocessor and a
    throw-away MLflow store: ``new_job(**overrides)`` is a train_fn job with a fresh MLflow run."""
    import mlflow

    from jobs.tracking import ensure_experiment

    home = tmp_path_factory.mktemp("small-training")
    days = [dt.date(2013, 1, d) for d in (2, 3, 4, 5)]
    features_zone.copy(days, home / "features")
    dirs = [str(home / "features" / partition_name(d)) for d in days]
    pre = fit_preprocessor(spark.read.parquet(*dirs[:3]), config.features, min_count=1)
    uri = f"sqlite:///{home}/mlflow.db"
    mlflow.set_tracking_uri(uri)
    experiment = ensure_experiment("train-tests")  # artifacts under the test home, not ./mlruns

    # The train job's rank config (RankConfig.build), smaller: two epochs of a tiny net.
    train = dataclasses.replace(config.train, hyperparameters={"embedding_dim": 4, "hidden_units": [8]}, epochs=2,
                                batch_size=256, learning_rate=0.01, seed=5, use_gpu=False)

    def new_job(**overrides) -> RankConfig:
        run_id = mlflow.MlflowClient(uri).create_run(experiment).info.run_id  # whatever a test set since
        job = RankConfig.build(train, config.features.label, pre, dirs[:3], dirs[3:], run_id=run_id, tracking_uri=uri)
        return job.replace(**overrides)

    return {"new_job": new_job, "dirs": dirs, "uri": uri}


# A streaming rank whose buffer holds a fraction of its share (about 1,300 labelled rows a rank on two),
# decoding each row group (a day's file, hundreds of rows) in several batches.
STREAMING = {"data_path": "stream", "buffer_rows": 300, "read_ahead": 1, "read_batch_rows": 128}


@pytest.mark.slow
def test_distributed_training_is_deterministic_and_sees_every_row_once(spark, config, small_training):
    """Two ranks under TorchDistributor, streaming their shares through a buffer smaller than them
    (the in-memory path trains in the other tests here, and in the train job's tests), training an
    ensemble of two nets as the shipped MLP is (DDP over its stacked members)."""
    import mlflow

    from jobs.training.launcher import LeanTorchDistributor
    from jobs.training.loop import train_fn
    from jobs.training.relay import run_relayed

    def train() -> tuple[dict, str]:  # as the train job launches them: rank 0 logs through this process
        job = small_training["new_job"](**STREAMING, hyper={"embedding_dim": 4, "hidden_units": [8], "members": 2})
        distributor = LeanTorchDistributor(num_processes=2, local_mode=True, use_gpu=False)
        return run_relayed(job, lambda relayed: distributor.run(train_fn, relayed)), job.run_id

    (first, first_run), (second, _) = train(), train()
    assert first["metrics"] == second["metrics"]
    assert first["model_uri"] != second["model_uri"]
    label = config.features.label
    labelled = spark.read.parquet(*small_training["dirs"][:3]).where(f"{label} IS NOT NULL").count()
    run = mlflow.MlflowClient().get_run(first_run)
    assert run.data.metrics["train_rows"] == labelled
    assert run.data.params["training_precision"] == "fp32"  # auto on the CPU: results as before
    assert run.data.params["training_data_path"] == run.data.params["holdout_data_path"] == "stream"
    # train.arrow_memory_pool and train.malloc_mmap_threshold, as the rank set them in its own process
    assert run.data.params["training_arrow_memory_pool"] == "system"
    assert run.data.params["training_malloc_mmap_threshold"] == str(config.train.malloc_mmap_threshold) == "1048576"
    assert run.info.status == "RUNNING"  # the driver finishes it after registering the model
    assert 0.5 < first["metrics"]["roc_auc"] <= 1.0


def run_record(uri: str, run_id: str) -> dict:
    """What a training run logged: params, each metric's (step, value) history (``epoch_seconds``
    only its steps: a duration), the plots' names and the model's predictions on the holdout."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    run = client.get_run(run_id)
    history = {name: [(m.step, None if name == "epoch_seconds" else m.value)
                      for m in sorted(client.get_metric_history(run_id, name), key=lambda m: (m.step, m.timestamp))]
               for name in run.data.metrics}
    (model,) = logged_models(uri, run_id)
    return {"params": run.data.params, "metrics": history, "status": run.info.status,
            "plots": sorted(a.path for a in client.list_artifacts(run_id, "plots")), "model": model.model_uri}


def test_rank_0_logging_through_the_relay_logs_what_it_logs_itself(small_training, config):
    """The same training logged by rank 0 itself and through the relay (its files forwarded by this
    process, the model logged here from its weights): the same params, metric histories, plots and
    result, and models that predict the same, to the bit."""
    import mlflow

    from jobs.training.driver import train_in_process
    from jobs.training.relay import run_relayed

    uri = small_training["uri"]
    direct_job, relayed_job = small_training["new_job"](), small_training["new_job"]()
    direct = train_in_process(direct_job)
    relayed = run_relayed(relayed_job, train_in_process)
    assert relayed["metrics"] == direct["metrics"] and relayed["model_uri"] != direct["model_uri"]
    mine, theirs = run_record(uri, direct_job.run_id), run_record(uri, relayed_job.run_id)
    assert mine["model"] == direct["model_uri"] and theirs["model"] == relayed["model_uri"]
    assert theirs["status"] == mine["status"] == "RUNNING"  # the driver finishes it after registering
    assert theirs["plots"] == mine["plots"] == ["plots/calibration_curve.png", "plots/loss_curves.png",
                                                "plots/roc_curve.png"]
    assert theirs["params"] == mine["params"] and theirs["metrics"] == mine["metrics"]
    assert len(mine["metrics"]["train_loss"]) == direct_job.epochs
    rows = pd.concat([pd.read_parquet(d) for d in small_training["dirs"][3:]])[config.features.inputs]
    predicted = [mlflow.pyfunc.load_model(r["model_uri"]).predict(rows) for r in (direct, relayed)]
    assert (predicted[0] == predicted[1]).all()


def test_an_ensemble_trains_in_the_job_s_loop_and_its_logged_model_serves_the_members_mean(small_training, config):
    """``train.hyperparameters.members``: the rank trains the members side by side in one module
    and logs it; the pyfunc loads an ensemble and gives the probability of its members' mean, each
    member's own net computing its part."""
    import json

    import mlflow
    import mlflow.artifacts

    from jobs.model.calibration import CALIBRATION_FILE, apply_scale
    from jobs.model.tabular import HYPER_FILE, Preprocessor, TabularEnsemble, build_model, predict_proba
    from jobs.training.driver import train_in_process

    hyper = {"embedding_dim": 4, "hidden_units": [8], "wide": "onehot", "dropout": 0.2, "members": 3}
    result = train_in_process(small_training["new_job"](hyper=hyper))
    rows = pd.concat([pd.read_parquet(d) for d in small_training["dirs"][3:]])[config.features.inputs]
    served = mlflow.pyfunc.load_model(result["model_uri"]).predict(rows)
    assert len(served) == len(rows) and 0.5 < result["metrics"]["roc_auc"] <= 1.0
    folder = Path(mlflow.artifacts.download_artifacts(result["model_uri"]))
    (saved,) = folder.rglob(HYPER_FILE)
    assert json.loads(saved.read_text())["hyperparameters"]["members"] == 3
    (state,) = folder.rglob("model_state.pt")
    (pre_file,) = folder.rglob("preprocessor.json")
    pre = Preprocessor.from_json(pre_file.read_text())
    net = build_model(config.train.model, pre, hyper)
    net.load_state_dict(torch.load(state))
    assert isinstance(net, TabularEnsemble)
    cats, nums = (torch.from_numpy(a) for a in pre.encode(rows))
    with torch.no_grad():
        members = torch.sigmoid(net.eval().member_logits(cats, nums)).double()
    assert len({tuple(m[:20].tolist()) for m in members}) == 3  # three nets, not one three times
    mean = members.mean(dim=0).numpy()
    assert predict_proba(net, pre, rows) == pytest.approx(mean, abs=1e-6)
    records = list(folder.rglob(CALIBRATION_FILE))  # the pyfunc serves the mean, calibrated when it has a record
    scale = json.loads(records[0].read_text())["logit_scale"] if records else 1.0
    assert np.asarray(served, dtype=float) == pytest.approx(apply_scale(mean, scale), abs=1e-6)


def test_rank_0_under_the_relay_imports_no_mlflow(small_training):
    """Rank 0 in a process of its own with ``events_dir`` set (as TorchDistributor's rank under
    the train job): it imports no MLflow, matplotlib or scikit-learn (seconds of its start and its
    end), and the launching process logs its run and model from the files."""
    import json
    import subprocess
    import sys

    from jobs.training.relay import run_relayed

    script = ("import json, sys\nfrom jobs.training.driver import train_in_process\n"
              "from jobs.training.rank import RankConfig\n"
              "result = train_in_process(RankConfig.from_json(sys.argv[1]))\n"
              "print(json.dumps({'result': result, 'modules': sorted(m for m in sys.modules "
              "if m.split('.')[0] in ('mlflow', 'matplotlib', 'sklearn'))}))\n")
    seen = {}

    def launch(job):
        done = subprocess.run([sys.executable, "-c", script, job.to_json()], capture_output=True, text=True,
                              timeout=300, check=False, cwd=Path(__file__).resolve().parents[3])
        assert done.returncode == 0, done.stderr[-3000:]
        seen.update(json.loads(done.stdout.strip().splitlines()[-1]))
        return seen["result"]

    job = small_training["new_job"]()
    result = run_relayed(job, launch)
    assert seen["modules"] == [] and seen["result"]["model_uri"] is None
    assert result["model_uri"] and result["metrics"] == seen["result"]["metrics"]
    assert run_record(small_training["uri"], job.run_id)["model"] == result["model_uri"]


def test_the_relay_forwards_as_the_ranks_train_and_what_a_dead_launcher_left_first(small_training, tmp_path):
    """Events a dead launcher did not forward (a retry of the same training: its folder under the
    checkpoints) reach the run before the new attempt's ranks start, the dead rank's final skipped;
    an event written while the ranks run reaches the run before they return; a failed launch keeps
    its own error."""
    import time

    import mlflow
    import torch

    from jobs.lake.storage import list_files
    from jobs.training.relay import FileLog, run_relayed

    job = small_training["new_job"](events_dir=str(tmp_path / "events"))
    client = mlflow.MlflowClient(small_training["uri"])
    dead = FileLog(job.events_dir)
    dead.metrics({"train_loss": 0.5}, step=0)
    dead.finish(torch.nn.Linear(2, 1), {})
    seen = {}

    def history() -> list[tuple[int, float]]:
        return [(m.step, m.value) for m in client.get_metric_history(job.run_id, "train_loss")]

    def launch(relayed):
        seen["before"], seen["files"] = history(), list_files(relayed.events_dir, "")
        FileLog(relayed.events_dir).metrics({"train_loss": 0.25}, step=1)
        deadline = time.monotonic() + 30
        while len(history()) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        seen["during"] = history()
        raise RuntimeError("the ranks failed")

    with pytest.raises(RuntimeError, match="the ranks failed"):
        run_relayed(job, launch)
    assert seen["before"] == [(0, 0.5)] and seen["files"] == []
    assert sorted(seen["during"]) == [(0, 0.5), (1, 0.25)]
    assert list_files(job.events_dir, "") == []


def test_rank_0_stops_when_the_relay_cannot_forward_its_log(small_training):
    """Forwarding that fails (here a run the store does not have; in life a tracking server gone
    past its retries) stops rank 0 at its next event, saying why, instead of training on for a
    run nothing more reaches."""
    from jobs.training.driver import train_in_process
    from jobs.training.relay import run_relayed

    job = small_training["new_job"](run_id="0" * 32, epochs=500)
    with pytest.raises(RuntimeError, match="the launching process stopped the training: could not forward rank 0's "
                                           f"log to MLflow run {job.run_id}: MlflowException"):
        run_relayed(job, train_in_process)


class TensorLedger(TorchFunctionMode):
    """Watches torch calls during a training rank: the tensors that factory functions made without
    being told a device (they land on the default device, the CPU: the wrong one for a GPU rank,
    whose NCCL collectives refuse CPU tensors), and the dtype each linear layer computed in."""

    FACTORIES = frozenset({torch.tensor, torch.as_tensor, torch.zeros, torch.ones, torch.empty, torch.full,
                           torch.arange})

    def __init__(self) -> None:
        super().__init__()
        self.unplaced: dict[int, torch.Tensor] = {}  # id -> tensor (kept alive so ids stay unique)
        self.linear_dtypes: set[torch.dtype] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in self.FACTORIES and kwargs.get("device") is None and isinstance(out, torch.Tensor):
            self.unplaced[id(out)] = out
        elif func is torch.nn.functional.linear:
            self.linear_dtypes.add(out.dtype)
        return out


COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "all_to_all_single", "send", "recv")


def record_collectives(monkeypatch) -> list[tuple[str, torch.Tensor]]:
    """Wrap torch.distributed's tensor collectives: every tensor handed to one, by name."""
    import torch.distributed as dist

    handed: list[tuple[str, torch.Tensor]] = []
    for name in COLLECTIVES:
        original = getattr(dist, name)

        def wrapper(*args, _name=name, _original=original, **kwargs):
            for value in [*args, *kwargs.values()]:
                for tensor in value if isinstance(value, list | tuple) else [value]:
                    if isinstance(tensor, torch.Tensor):
                        handed.append((_name, tensor))
            return _original(*args, **kwargs)

        monkeypatch.setattr(dist, name, wrapper)
    return handed


@pytest.mark.parametrize("data_path", ["auto", "stream"])
def test_every_tensor_a_rank_hands_to_a_collective_is_created_on_its_device(small_training, monkeypatch, data_path):
    """The GPU crash, caught on the CPU: NCCL has no CPU backend, so a tensor made without naming
    the rank's device fails there while gloo takes it. Every collective tensor must be made on the
    rank's device (here the CPU, under gloo), never left on the default device, whichever data path."""
    import mlflow

    from jobs.training.driver import train_in_process
    from jobs.training.steps import rank_device

    handed = record_collectives(monkeypatch)
    job = small_training["new_job"](**(STREAMING if data_path == "stream" else {}))
    with TensorLedger() as ledger:
        result = train_in_process(job)
    params = mlflow.MlflowClient(small_training["uri"]).get_run(job.run_id).data.params
    # auto keeps these small shares in memory (they fit in the default buffer_rows)
    assert params["training_data_path"] == ("stream" if data_path == "stream" else "memory")
    assert result and result["metrics"]["rows"] > 0
    # what the fault test counts: the run's one logged model
    assert [m.model_uri for m in logged_models(small_training["uri"], job.run_id)] == [result["model_uri"]]
    assert {name for name, _ in handed} >= {"all_reduce"}, "the rank agrees on steps and sums losses"
    unplaced = [name for name, tensor in handed if id(tensor) in ledger.unplaced]
    assert not unplaced, f"collectives given tensors created without a device: {unplaced}"
    device = rank_device(use_gpu=False)
    assert all(tensor.device == device for _, tensor in handed)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_in_that_precision_and_says_so_in_the_run(small_training, precision):
    """bf16 autocast runs on the CPU, fp16 with a loss scaler too: the steps compute in the asked
    dtype, the evaluation and the logged model stay fp32, and the run records the precision."""
    import math

    import mlflow

    from jobs.training.driver import train_in_process

    job = small_training["new_job"](precision=precision)
    with TensorLedger() as ledger:
        result = train_in_process(job)
    expected = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    assert expected in ledger.linear_dtypes and torch.float32 in ledger.linear_dtypes  # steps; evaluation
    assert all(math.isfinite(v) for v in result["metrics"].values() if v == v)
    assert 0.5 < result["metrics"]["roc_auc"] <= 1.0
    run = mlflow.MlflowClient(small_training["uri"]).get_run(job.run_id)
    assert math.isfinite(run.data.metrics["train_loss"]) and run.data.metrics["train_loss"] > 0
    assert run.data.params["training_precision"] == precision
    assert run.data.params["training_device"] == "cpu"
    model = mlflow.pyfunc.load_model(result["model_uri"]).unwrap_python_model()
    assert {p.dtype for p in model.net.parameters()} == {torch.float32}


def test_precision_auto_is_fp32_on_the_cpu_and_an_unknown_precision_is_refused(config):
    from jobs.training.steps import resolve_precision

    assert resolve_precision("auto", torch.device("cpu")) == "fp32"
    assert resolve_precision("bf16", torch.device("cpu")) == "bf16"
    with pytest.raises(ValueError, match="precision\n.*'auto', 'bf16', 'fp16' or 'fp32'"):
        dataclasses.replace(config.train, precision="fp8")


def test_a_world_of_one_trains_the_net_itself_to_ddp_s_weights_to_the_bit(config, tmp_path):
    """DDP in a world of one copies the gradients into a bucket, all-reduces them with nobody and
    divides by one: a rank without peers trains the net itself (``wrap_model``), and the same steps
    from the same start give DDP's losses and weights, to the bit."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from jobs.model.tabular import Preprocessor, build_model
    from jobs.training.steps import make_optimizer, train_batches, wrap_model

    pre = Preprocessor(categorical=["carrier", "origin"], numeric=["distance", "dep_hour"],
                       vocab={"carrier": ["AA", "B6", "UA"], "origin": ["EWR", "JFK", "LGA"]},
                       mean={"distance": 900.0, "dep_hour": 13.0}, std={"distance": 500.0, "dep_hour": 5.0})
    draw = torch.Generator().manual_seed(7)
    batches = [(torch.randint(0, 4, (256, 2), generator=draw), torch.randn(256, 2, generator=draw),
                (torch.rand(256, generator=draw) < 0.3).float()) for _ in range(12)]
    cpu = torch.device("cpu")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        trained = {}
        for name, wrap in (("ddp", DistributedDataParallel), ("plain", lambda net: wrap_model(net, 1, cpu))):
            torch.manual_seed(0)
            net = build_model(config.train.model, pre, dict(config.train.hyperparameters))
            start = {k: v.clone() for k, v in net.state_dict().items()}
            model = wrap(net)
            torch.manual_seed(1)  # the dropout masks
            totals = train_batches(model, make_optimizer(model.parameters(), 0.01, cpu),
                                   torch.nn.BCEWithLogitsLoss(reduction="sum"), batches, cpu)
            trained[name] = (model, net, start, totals)
    finally:
        dist.destroy_process_group()
    (ddp, ddp_net, ddp_start, ddp_totals), (plain, net, start, totals) = trained["ddp"], trained["plain"]
    assert isinstance(ddp, DistributedDataParallel) and plain is net
    assert all(torch.equal(start[k], ddp_start[k]) for k in start)
    weights, ddp_weights = net.state_dict(), ddp_net.state_dict()
    assert weights.keys() == ddp_weights.keys()
    assert not all(torch.equal(weights[k], start[k]) for k in weights)  # the steps trained
    assert all(torch.equal(weights[k], ddp_weights[k]) for k in weights)
    assert torch.equal(totals, ddp_totals)


USER_MODEL = '''
import torch


class Logistic(torch.nn.Module):
    """A user's own model: one embedding weight per category, a linear term per number."""

    def __init__(self, cardinalities, n_numeric):
        super().__init__()
        self.embeddings = torch.nn.ModuleList(torch.nn.Embedding(size, 1) for size in cardinalities)
        self.linear = torch.nn.Linear(n_numeric, 1)

    def forward(self, cats, nums):
        out = self.linear(nums).squeeze(1)
        for j, embedding in enumerate(self.embeddings):
            out = out + embedding(cats[:, j]).squeeze(1)
        return out


def logistic(pre, hyper):
    return Logistic(pre.cardinalities, len(pre.numeric))
'''


def test_the_model_is_chosen_by_config_and_logged_with_its_code(small_training, tmp_path, monkeypatch):
    """train.model names a function in the user's own module: the loop trains what it builds, and
    the logged pyfunc carries that module, so it loads where the module is not installed."""
    import sys

    import mlflow

    from jobs.training.driver import train_in_process

    (tmp_path / "my_models.py").write_text(USER_MODEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = train_in_process(small_training["new_job"](builder="my_models:logistic", hyper={}))
    assert 0.5 < result["metrics"]["roc_auc"] <= 1.0
    monkeypatch.delitem(sys.modules, "my_models")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])
    (tmp_path / "my_models.py").unlink()  # only the copy logged with the model is left
    model = mlflow.pyfunc.load_model(result["model_uri"])
    assert type(model.unwrap_python_model().net).__name__ == "Logistic"
    assert model.unwrap_python_model().logit_scale == 1.0  # no validation days: nothing to calibrate on


def test_rank_0_calibrates_the_mlp_on_the_validation_days_before_logging_it(spark, config, small_training):
    """With validation days and train.calibration temperature, the logged MLP carries a logit scale
    fitted on them: its log loss there is not worse than the net's own, it ranks the holdout exactly
    as the net does, and the run's final holdout metrics (and the result the driver registers by)
    are the calibrated model's."""
    import mlflow

    from jobs.metrics import evaluate
    from jobs.model.tabular import predict_proba
    from jobs.selection.bar import read_rows
    from jobs.training.driver import train_in_process

    dirs, inputs, label = small_training["dirs"], config.features.inputs, config.features.label
    job = small_training["new_job"](train_dirs=dirs[:2], validation_dirs=dirs[2:3])
    assert job.calibration == "temperature"
    result = train_in_process(job)
    model = mlflow.pyfunc.load_model(result["model_uri"])
    python_model = model.unwrap_python_model()
    run = mlflow.MlflowClient(small_training["uri"]).get_run(job.run_id)
    assert run.data.params["calibration"] == "temperature" and "calibration_note" not in run.data.params
    assert run.data.metrics["calibration_logit_scale"] == python_model.logit_scale != 1.0
    validation = read_rows(spark, dirs[2:3], inputs, label)
    assert run.data.metrics["calibration_validation_rows"] == len(validation)
    raw = predict_proba(python_model.net, python_model.pre, validation)
    assert evaluate(validation[label], model.predict(validation[inputs]))["log_loss"] <= evaluate(
        validation[label], raw)["log_loss"]
    holdout = read_rows(spark, dirs[3:], inputs, label)
    calibrated = evaluate(holdout[label], model.predict(holdout[inputs]))
    assert calibrated["roc_auc"] == pytest.approx(
        evaluate(holdout[label], predict_proba(python_model.net, python_model.pre, holdout))["roc_auc"], abs=1e-12)
    assert result["metrics"]["log_loss"] == pytest.approx(calibrated["log_loss"], abs=1e-9)
    assert run.data.metrics["holdout_log_loss"] == result["metrics"]["log_loss"]


def test_what_started_a_training_becomes_its_tags_and_summary_keys():
    from jobs.training.job import parse_args, started

    args = parse_args(["--run-date", "2013-01-28", "--trigger", "decay", "--started-by", "decay of version 3"])
    assert started(args) == {"trigger": "decay", "started_by": "decay of version 3"}
    assert started(parse_args(["--run-date", "2013-01-28", "--trigger", ""])) == {}  # a param left empty


def test_gpu_training_without_a_gpu_exits_non_zero_saying_so(tmp_path):
    """``--use-gpu true`` on a machine without CUDA: the job stops before Spark starts, saying so,
    instead of training on the CPU."""
    import subprocess
    import sys

    if torch.cuda.is_available():
        pytest.skip("a GPU here: tests/jobs/training/test_gpu.py trains on it")
    done = subprocess.run([sys.executable, "-m", "jobs.training.job", "--run-date", "2013-01-28", "--use-gpu", "true",
                           "--lake-root", str(tmp_path / "lake")], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode != 0
    assert "GPU training (--use-gpu true / train.use_gpu) was asked for, but torch sees no CUDA device" in done.stderr
    assert "--use-gpu false" in done.stderr and "SparkSession" not in done.stderr


def test_a_run_left_running_before_its_first_param_is_ended_by_the_next_start(tmp_path, monkeypatch):
    """A train job that dies right after MLflow created its run (here: the tracking server refuses
    a param name, as a server killed at that moment would fail the call) leaves it RUNNING; it names
    its owner from its creation, so the next start, once that process is gone, ends it FAILED."""
    import subprocess
    import sys

    from mlflow import MlflowClient

    from jobs.lake.layout import Lake
    from jobs.model.tabular import Preprocessor
    from jobs.training.lifecycle import OWNER_TAG
    from jobs.training.publish import open_run

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    lake = str(tmp_path / "lake")
    crash = ("import datetime as dt\nfrom jobs.lake.layout import Lake\nfrom jobs.model.tabular import Preprocessor\n"
             "from jobs.training.publish import open_run\n"
             f"open_run(Lake.at({lake!r}), dt.date(2013, 1, 28), 'flight_delay', {{'a|b': 1}}, "
             "Preprocessor([], [], {}, {}, {}), 1)\n")
    repo = Path(__file__).resolve().parents[3]
    died = subprocess.run([sys.executable, "-c", crash], capture_output=True, text=True, timeout=300, cwd=repo)
    assert died.returncode != 0 and "a|b" in died.stderr, died.stderr[-2000:]
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("flight_delay").experiment_id
    (orphan,) = client.search_runs([experiment])
    assert orphan.info.status == "RUNNING" and OWNER_TAG in orphan.data.tags, orphan.data.tags

    new = open_run(Lake.at(lake), dt.date(2013, 1, 29), "flight_delay", {"ok": 1}, Preprocessor([], [], {}, {}, {}), 1)
    ended = client.get_run(orphan.info.run_id)
    assert ended.info.status == "FAILED" and "is gone (killed)" in ended.data.tags["pipeline.failure"]
    assert client.get_run(new.run_id).info.status == "RUNNING"


def test_a_streaming_training_resumed_from_its_checkpoint_ends_as_one_that_never_stopped(small_training, tmp_path):
    """The streaming order is a function of (seed, epoch, rank): a training that stops after its
    first epoch's checkpoint and is started again ends with the metrics of one that never stopped."""
    from jobs.training.driver import train_in_process

    with first_epoch_saved(tmp_path) as (checkpoints, kept_after_one):
        straight = train_in_process(small_training["new_job"](**STREAMING, checkpoint_dir=checkpoints))
    resumed = train_in_process(small_training["new_job"](**STREAMING, checkpoint_dir=kept_after_one))
    assert resumed["metrics"] == straight["metrics"]
    assert resumed["model_uri"] != straight["model_uri"]


def test_row_groups_read_in_batches_train_the_model_whole_row_groups_train(small_training):
    """``read_batch_rows`` changes how much of a row group is decoded at once, not what the ranks
    see: the same metrics as reading every row group (training and holdout) whole. The in-process
    rank gives this process its pyarrow pool back."""
    import pyarrow as pa

    from jobs.training.driver import train_in_process

    pool = pa.default_memory_pool().backend_name
    whole = train_in_process(small_training["new_job"](**{**STREAMING, "read_batch_rows": 1_000_000}))
    batched = train_in_process(small_training["new_job"](**STREAMING))
    assert batched["metrics"] == whole["metrics"]
    assert pa.default_memory_pool().backend_name == pool


def logged_models(uri: str, run_id: str) -> list:
    """The models an MLflow run (in the store at ``uri``) logged."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    experiment = client.get_run(run_id).info.experiment_id
    return client.search_logged_models(experiment_ids=[experiment], filter_string=f"source_run_id = '{run_id}'")


def test_an_unreadable_row_group_mid_epoch_fails_the_rank_naming_the_file_and_the_run(small_training, config,
                                                                                      tmp_path):
    """A row group of the training days that cannot be read once the training runs (its footer,
    read when the rank plans its share, is intact): the rank stops naming the file, the MLflow run
    is FAILED with no model logged, and the driver's error is a data error (not retried)."""
    import shutil

    import mlflow

    from jobs.errors import DataError
    from jobs.training.driver import rank_errors, ranks_failed, train_in_process
    from jobs.training.stream import RowGroupReadError
    from tests.jobs.training.test_stream import damage_row_group

    dirs = []
    for folder in small_training["dirs"][:3]:
        dirs.append(str(shutil.copytree(folder, tmp_path / "features" / Path(folder).name)))
    damaged = sorted(Path(dirs[1]).glob("*.parquet"))[0]
    damage_row_group(damaged, 0, column=config.features.label)
    job = small_training["new_job"](**STREAMING, train_dirs=dirs, checkpoint_dir=str(tmp_path / "checkpoints"))
    with pytest.raises(RowGroupReadError, match=f"{damaged} \\(row group 0\\) cannot be read"):
        train_in_process(job)
    client = mlflow.MlflowClient(small_training["uri"])
    run = client.get_run(job.run_id)
    assert run.info.status == "FAILED"
    assert logged_models(small_training["uri"], job.run_id) == []
    said = rank_errors(job.checkpoint_dir)
    assert len(said) == 1 and str(damaged) in said[0]
    assert isinstance(ranks_failed(said), DataError)


def test_a_rank_other_than_0_imports_no_mlflow():
    """What every rank imports (loop.py and the modules it imports before its first mark,
    :data:`jobs.training.loop.RANK_MODULES`), run in a fresh interpreter: no MLflow (only rank 0
    logs: its import is a second of a rank's start), no plotting or scikit-learn (rank 0's
    evaluation and figures)."""
    import json
    import subprocess
    import sys

    from jobs.training.loop import RANK_MODULES

    assert "torch.distributed" in RANK_MODULES and "jobs.training.stream" in RANK_MODULES
    code = "\n".join(["from jobs.training.loop import import_rank_modules", "import_rank_modules()",
                      "import sys, json",
                      "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
                      "('mlflow', 'matplotlib', 'sklearn'))))"])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_the_learning_rate_schedules_start_at_the_rate_and_cosine_ends_near_zero():
    from jobs.training.steps import learning_rate_at

    total = 1000
    assert [learning_rate_at(0.01, "constant", s, total) for s in (0, 500, 999)] == [0.01] * 3
    cosine = [learning_rate_at(0.01, "cosine", s, total) for s in range(total)]
    assert cosine[0] == 0.01 and cosine[500] == pytest.approx(0.005)
    assert all(a > b for a, b in zip(cosine, cosine[1:], strict=False)) and 0 < cosine[-1] < 1e-6
    assert learning_rate_at(0.01, "cosine", 0, 1) == 0.01  # one step: the rate itself
    with pytest.raises(ValueError, match="lr_schedule\n.*'constant' or 'cosine'"):
        from jobs.config import load_config

        dataclasses.replace(load_config(None).train, lr_schedule="linear")


def test_the_validation_days_are_read_with_each_row_s_day_in_memory_and_streamed(spark, small_training, config):
    """``HoldoutRows(..., days=True)``: every labelled row with its partition's day, the same on both
    paths and as many per day as Spark counts (what a per-day metric of the validation days needs)."""
    import numpy as np

    from jobs.lake.layout import PARTITION
    from jobs.training.evaluation import HoldoutRows
    from jobs.training.stream import plan_shares

    dirs, label = small_training["dirs"][:3], config.features.label
    pre = fit_preprocessor(spark.read.parquet(*dirs), config.features, min_count=1)
    units = plan_shares(dirs, 1, label).units
    columns = [*pre.categorical, *pre.numeric, label]
    read = {path: HoldoutRows(units, columns, label, pre, torch.device("cpu"), path, 128, days=True)
            for path in ("memory", "stream")}
    assert np.array_equal(read["memory"].days, read["stream"].days)
    assert np.array_equal(read["memory"].labels, read["stream"].labels)
    rows = spark.read.option("basePath", str(Path(dirs[0]).parent)).parquet(*dirs).where(f"{label} IS NOT NULL")
    expected = {str(r[PARTITION]): r["count"] for r in rows.groupBy(PARTITION).count().collect()}
    found = dict(zip(*np.unique(read["stream"].days, return_counts=True), strict=True))
    assert found == expected and len(expected) == 3
    assert HoldoutRows(units, columns, label, pre, torch.device("cpu"), "memory", 128).days is None


def test_rank_0_logs_the_net_of_the_epoch_best_on_the_validation_days(spark, config, small_training, tmp_path):
    """train.keep_best_epoch: rank 0 scores the validation days after every epoch (logged as
    ``epoch_validation_<metric>``) and logs the best epoch's net, whose score on those days is the
    best epoch's (and a training that keeps the last epoch logs the last one's). A training resumed
    from a checkpoint after its first epoch keeps the same epoch and ends with the same metrics."""
    import mlflow

    from jobs.metrics import evaluate
    from jobs.model.tabular import predict_proba
    from jobs.selection.bar import read_rows
    from jobs.training.driver import train_in_process

    dirs, inputs, label = small_training["dirs"], config.features.inputs, config.features.label
    validation = read_rows(spark, dirs[2:3], inputs, label)
    client = mlflow.MlflowClient(small_training["uri"])
    # Large steps at a constant rate on two days: the net's ranking of the third swings by epoch.
    settings = {"train_dirs": dirs[:2], "validation_dirs": dirs[2:3], "epochs": 6, "learning_rate": 0.05,
                "lr_schedule": "constant", "calibration": "none", "selection_metric": "roc_auc"}

    def trained(**overrides) -> tuple[dict, list[float], float]:
        job = small_training["new_job"](**{**settings, **overrides})
        result = train_in_process(job)
        curve = [m.value for m in sorted(client.get_metric_history(job.run_id, "epoch_validation_roc_auc"),
                                         key=lambda m: m.step)]
        net = mlflow.pyfunc.load_model(result["model_uri"]).unwrap_python_model()
        score = evaluate(validation[label], predict_proba(net.net, net.pre, validation))["roc_auc"]
        return {**result, "run": client.get_run(job.run_id)}, curve, score

    best, curve, score = trained(keep_best_epoch=True)
    assert len(curve) == 6
    kept = max(range(6), key=lambda e: (curve[e], -e)) + 1  # the first of equals
    assert kept < 6, f"the validation curve {curve} peaks at the last epoch: the test shows nothing"
    assert best["run"].data.metrics["kept_epoch"] == kept
    assert score == pytest.approx(curve[kept - 1], abs=1e-9) and score > curve[-1]
    last, last_curve, last_score = trained(keep_best_epoch=False)
    assert last_curve == [] and "kept_epoch" not in last["run"].data.metrics
    assert last_score == pytest.approx(curve[-1], abs=1e-9)  # the same training, its last epoch

    with first_epoch_saved(tmp_path) as (checkpoints, kept_after_one):
        again, _, _ = trained(keep_best_epoch=True, checkpoint_dir=checkpoints)
    resumed, resumed_curve, _ = trained(keep_best_epoch=True, checkpoint_dir=kept_after_one)
    # the resumed run logs the first epoch's scores from the checkpoint, then its own
    assert again["metrics"] == resumed["metrics"] == best["metrics"] and resumed_curve == curve
    assert resumed["run"].data.metrics["kept_epoch"] == kept


@contextlib.contextmanager
def first_epoch_saved(tmp_path: Path):
    """(a checkpoint folder, a copy of it as it stood after the first epoch): a training killed
    after its first epoch, made from a training of the same epochs (a training of one epoch is not:
    its rate schedule is a shorter one)."""
    import shutil

    from jobs.training import checkpoints

    folder, kept = tmp_path / "checkpoints", tmp_path / "after-one-epoch"
    save = checkpoints.save_checkpoint

    def saving(where: str, state: dict) -> None:
        save(where, state)
        if state["epochs_done"] == 1:
            shutil.copytree(where, kept)

    checkpoints.save_checkpoint = saving
    try:
        yield str(folder), str(kept)
    finally:
        checkpoints.save_checkpoint = save
    assert (kept / "epoch-0001.pt").exists()


def test_a_cosine_training_resumed_from_its_checkpoint_ends_as_one_that_never_stopped(small_training, tmp_path):
    """The rate is a function of the step over the whole training: stopped after its first epoch and
    started again, a cosine training ends with the metrics of one that never stopped, and not with
    those of a constant rate."""
    from jobs.training.driver import train_in_process

    settings = {"lr_schedule": "cosine", "epochs": 3}
    with first_epoch_saved(tmp_path) as (checkpoints, kept_after_one):
        straight = train_in_process(small_training["new_job"](**settings, checkpoint_dir=checkpoints))
    resumed = train_in_process(small_training["new_job"](**settings, checkpoint_dir=kept_after_one))
    assert resumed["metrics"] == straight["metrics"]
    constant = train_in_process(small_training["new_job"](epochs=3, lr_schedule="constant"))
    assert constant["metrics"] != straight["metrics"]

"""Train the model with TorchDistributor on a window of feature partitions and register it in MLflow.

Usage::

    spark-submit jobs/train.py --run-date 2013-01-28 [--config PATH] [--lake-root PATH]
                               [--num-processes N] [--use-gpu true|false] [--local-mode true|false]
                               [--precision auto|bf16|fp16|fp32]

The window is ``train.train_days + train.holdout_days`` days ending with the run date: the model is
fitted on the first ``train_days`` and evaluated on the last ``holdout_days``. The driver fits the
preprocessing (vocabularies, normalisation statistics) with Spark, opens an MLflow run and logs the
parameters; TorchDistributor starts ``num_processes`` ranks (gloo on CPU; NCCL on GPU, one rank per
GPU, by default every GPU of the machine in local mode), each reading the feature Parquet itself and
keeping its rows on its device; steps run in ``train.precision`` (bf16 autocast by default on a GPU
that has it, fp16 with a loss scaler, fp32); rank 0 logs per-epoch metrics, plots (loss curves, ROC and
calibration curves on the holdout) and the model (pyfunc with signature, input example and the
preprocessing). The driver then registers a new model version
and tags it with the run date, the window and the holdout metrics, applies the champion gate, and
writes ``reports/training/date=<run-date>/summary.json`` (version, run, link, metrics, gate).

Resuming: rank 0 checkpoints every epoch to ``checkpoints/training/date=<run-date>/<key>/`` in the
lake, where ``key`` digests everything that shapes the training (window, hyperparameters, code
version, preprocessing). A retried attempt with the same key (an Airflow retry after the process
was killed) continues the same MLflow run from the last checkpoint instead of starting over; the
checkpoints are removed once the model is registered.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any

from jobs.config import PRECISIONS, FeatureSpec, Lake, job_parser, optional_choice, parse_bool, parse_job_args
from jobs.spark import MissingPartitionError, configure_logging, get_spark, path_exists, write_text

if TYPE_CHECKING:
    import pandas as pd
    import torch
    from pyspark.sql import DataFrame, SparkSession

    from jobs.model import Preprocessor

log = logging.getLogger("jobs.train")


def split_window(run_date: dt.date, train_days: int, holdout_days: int) -> tuple[list[dt.date], list[dt.date]]:
    """(training days, holdout days): consecutive, oldest first, the holdout ending with ``run_date``."""
    from jobs.config import days_ending

    days = days_ending(run_date, train_days + holdout_days)
    return days[:train_days], days[train_days:]


def feature_dirs(spark: SparkSession, lake: Lake, days: list[dt.date]) -> list[str]:
    dirs = [lake.partition(lake.features, day) for day in days]
    missing = [d for d in dirs if not path_exists(spark, d)]
    if missing:
        raise MissingPartitionError(
            f"{len(missing)} feature partition(s) missing, e.g. {missing[0]}: run the features job for them first"
        )
    return dirs


def fit_preprocessor(df: DataFrame, spec: FeatureSpec, min_count: int) -> Preprocessor:
    """Vocabularies (categories seen at least ``min_count`` times) and mean/std of labelled rows."""
    from pyspark.sql import functions as F

    from jobs.model import Preprocessor, safe_std

    labelled = df.where(F.col(spec.label).isNotNull())
    vocab = {}
    for col in spec.categorical:
        rows = (
            labelled.where(F.col(col).isNotNull())
            .groupBy(col)
            .count()
            .where(F.col("count") >= min_count)
            .orderBy(col)
            .collect()
        )
        vocab[col] = [r[col] for r in rows]
    stats = labelled.agg(
        *[F.mean(c).alias(f"mean_{c}") for c in spec.numeric],
        *[F.stddev_pop(c).alias(f"std_{c}") for c in spec.numeric],
    ).first()
    return Preprocessor(
        categorical=list(spec.categorical),
        numeric=list(spec.numeric),
        vocab=vocab,
        mean={c: float(stats[f"mean_{c}"] or 0.0) for c in spec.numeric},
        std={c: safe_std(stats[f"std_{c}"]) for c in spec.numeric},
    )


def shard_units(dirs: list[str], rank: int, world: int) -> list[tuple[str, int]]:
    """This rank's share of the data: (Parquet file, row group) pairs, dealt round-robin.

    Every rank lists the same files in the same order, so the shares are disjoint, cover every
    row group exactly once, and are the same from one run to the next. ``dirs`` are lake paths:
    local folders or object-store URIs (:mod:`jobs.storage`).
    """
    import pyarrow.parquet as pq

    from jobs.storage import filesystem, list_files

    units = []
    for folder in dirs:
        for uri in list_files(folder, ".parquet"):
            fs, path = filesystem(uri)
            with fs.open_input_file(path) as handle:
                units += [(uri, group) for group in range(pq.ParquetFile(handle).num_row_groups)]
    return units[rank::world]


def read_units(units: list[tuple[str, int]], columns: list[str]) -> list[Any]:
    """The Arrow tables of these (file, row group) units, reading only ``columns``."""
    import pyarrow.parquet as pq

    from jobs.storage import filesystem

    tables = []
    for uri, group in units:
        fs, path = filesystem(uri)
        with fs.open_input_file(path) as handle:
            tables.append(pq.ParquetFile(handle).read_row_group(group, columns=columns))
    return tables


def labelled_rows(tables: list[Any], columns: list[str], label: str) -> pd.DataFrame:
    """The rows of these Arrow tables (of ``columns``) that have a ``label``, as one DataFrame."""
    import pandas as pd

    if not tables:
        return pd.DataFrame(columns=columns)
    frame = pd.concat([table.to_pandas() for table in tables], ignore_index=True)
    return frame[frame[label].notna()].reset_index(drop=True)


def epoch_order(seed: int, epoch: int, rank: int, rows: int) -> torch.Tensor:
    """A rank's shuffle of its rows for an epoch, seeded by (seed, epoch, rank): a resumed training
    repeats the order of one that never stopped."""
    import torch

    return torch.randperm(rows, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch * 1009 + rank))


def rank_device(use_gpu: bool) -> torch.device:
    """The rank's device: ``cuda:<LOCAL_RANK>`` among the GPUs Spark made visible to the rank
    (TorchDistributor sets ``CUDA_VISIBLE_DEVICES``), else the CPU. No GPU is an error, never a
    silent fall back to the CPU."""
    import os

    import torch

    if not use_gpu:
        return torch.device("cpu")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "(not set)")
    if not torch.cuda.is_available():
        raise RuntimeError(
            "GPU training was asked for (train.use_gpu / --use-gpu true) but torch sees no CUDA device in this "
            f"rank (torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}, "
            f"CUDA_VISIBLE_DEVICES={visible}); train on the CPU with --use-gpu false or give the job GPUs"
        )
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if local_rank >= torch.cuda.device_count():
        raise RuntimeError(
            f"local rank {local_rank} has no GPU of its own: {torch.cuda.device_count()} visible "
            f"(CUDA_VISIBLE_DEVICES={visible}); run at most one process per GPU (--num-processes)"
        )
    return torch.device("cuda", local_rank)


def resolve_precision(requested: str, device: torch.device) -> str:
    """The arithmetic of the training steps: ``auto`` is bf16 on a GPU that supports it and fp32
    otherwise (the CPU's results stay as they were); bf16, fp16 and fp32 are taken as asked."""
    import torch

    if requested == "auto":
        return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    if requested == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise RuntimeError(f"{torch.cuda.get_device_name(device)} does not support bf16: use precision fp16 or fp32")
    return requested


def autocast(device: torch.device, precision: str) -> Any:
    """The autocast context of a training step in ``precision`` (fp32: none)."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def place_shard(tensors: tuple[torch.Tensor, ...], device: torch.device) -> tuple[torch.Tensor, ...]:
    """The rank's rows on its device, copied there once; on a GPU where they would take more than
    half of the free memory, in page-locked host memory instead (each step then copies its batch)."""
    import torch

    if device.type != "cuda":
        return tensors
    size = sum(t.numel() * t.element_size() for t in tensors)
    if size > torch.cuda.mem_get_info(device)[0] // 2:
        return tuple(t.pin_memory() for t in tensors)
    return tuple(t.to(device) for t in tensors)


def train_steps(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Any, batches: Any,
    cats: torch.Tensor, nums: torch.Tensor, labels: torch.Tensor, device: torch.device,
    precision: str = "fp32", scaler: Any = None,
) -> torch.Tensor:
    """One optimizer step per batch (index tensors into the rows, on the rows' device); returns
    [summed loss, rows] as float64 on ``device``.

    Nothing in the loop waits for the device: the loss is summed on it and read once, by the
    caller, at the end of the epoch. ``scaler``: a loss scaler (fp16)."""
    import torch

    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    rows = 0
    for batch in batches:
        c, n, y = (t[batch].to(device, non_blocking=True) for t in (cats, nums, labels))
        optimizer.zero_grad()
        with autocast(device, precision):
            loss = loss_fn(model(c, n), y)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        loss_sum += loss.detach()
        rows += len(batch)
    return torch.stack([loss_sum, torch.tensor(float(rows), dtype=torch.float64, device=device)])


CHECKPOINT_RUN = "run.json"  # the MLflow run the training logs to, written by the driver


def _epoch_file(epochs_done: int) -> str:
    return f"epoch-{epochs_done:04d}.pt"


def checkpointed_epochs(folder: str) -> int:
    """How many epochs the last checkpoint in ``folder`` has done (0: none)."""
    from jobs.storage import list_files

    names = [uri.rsplit("/", 1)[1] for uri in list_files(folder, ".pt")]
    return max((int(name[len("epoch-"):-len(".pt")]) for name in names if name.startswith("epoch-")), default=0)


def save_checkpoint(folder: str, state: dict[str, Any]) -> None:
    """Write the training state after an epoch (weights, optimizer state, loss history, the
    epoch's metrics) as ``epoch-NNNN.pt``, atomically, then drop older checkpoints. The name says
    which epoch a file holds, so there is no index that could disagree with the files."""
    import io

    import torch

    from jobs.storage import delete_file, list_files, write_bytes

    buffer = io.BytesIO()
    torch.save(state, buffer)
    latest = f"{folder}/{_epoch_file(state['epochs_done'])}"
    write_bytes(latest, buffer.getvalue())
    for uri in list_files(folder, ".pt"):
        if uri != latest:
            delete_file(uri)


def load_checkpoint(folder: str) -> dict[str, Any] | None:
    """The last saved training state, or None when there is none."""
    import io

    import torch

    from jobs.storage import read_bytes

    done = checkpointed_epochs(folder)
    data = read_bytes(f"{folder}/{_epoch_file(done)}") if done else None
    return None if data is None else torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


def exit_with_parent() -> None:
    """End this process when its parent dies.

    torchrun starts each rank in a session of its own, so killing the task's process group (an
    Airflow task killed, a container stopped) kills the launcher but leaves the ranks training and
    logging on their own, racing the retry. A watcher thread ends the rank instead.
    """
    import os
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.2)
        print(f"rank process {os.getpid()}: launcher {parent} is gone, exiting", flush=True)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def train_fn(job: dict[str, Any]) -> dict[str, Any] | None:
    """One rank of distributed training; TorchDistributor runs it in every process.

    Self-contained (imports inside, plain-data argument) so it pickles to the ranks. Each rank
    reads only its own row groups of the training partitions (:func:`shard_units`) and shuffles
    them with a generator seeded by (seed, rank, epoch); shares may differ by a row group, so each
    rank cuts its share into the same number of batches: every training row is used exactly once
    per epoch and the ranks stay in step. Only rank 0 touches MLflow.

    With ``job["checkpoint_dir"]`` set, rank 0 saves the weights, optimizer state, loss history
    and the epoch's metrics there after every epoch (:func:`save_checkpoint`), before logging
    them; a later attempt starts after the last saved epoch (every rank gets rank 0's copy), logs
    whatever the dead attempt saved but did not log, and so counts every epoch once. Seeding by epoch makes a resumed
    training the same as one that never stopped.

    Every rank returns rank 0's result: the logged model's URI, the final holdout metrics, the
    labelled training rows per epoch, the seconds each epoch's training loop took (this attempt's
    epochs) and the epoch it resumed from.
    """
    import mlflow

    from jobs.train import train_rank

    try:
        return train_rank(job)
    except BaseException:
        # MLflow ends an open run as FINISHED when the process exits: say what really happened.
        if mlflow.active_run() is not None:
            mlflow.end_run(status="FAILED")
        raise


def train_in_process(job: dict[str, Any]) -> dict[str, Any] | None:
    """:func:`train_fn` in this process as the only rank of a world of one, without TorchDistributor
    (no process started): for debugging a training and for measuring it from outside. Leaves this
    process's environment, torch threads and exception hook as they were."""
    import os
    import socket
    import sys

    import torch

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rank_env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    saved, threads, excepthook = {k: os.environ.get(k) for k in rank_env}, torch.get_num_threads(), sys.excepthook
    os.environ.update(rank_env)
    try:
        return train_fn(job)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        torch.set_num_threads(threads)
        sys.excepthook = excepthook  # the process group prefixes every traceback with "[rank0]"


def train_rank(job: dict[str, Any]) -> dict[str, Any] | None:
    """The body of :func:`train_fn`."""
    import time

    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from jobs.metrics import evaluate
    from jobs.model import Preprocessor, build_net, log_pyfunc, predict_encoded
    from jobs.train import (
        epoch_order,
        exit_with_parent,
        labelled_rows,
        load_checkpoint,
        place_shard,
        rank_device,
        read_units,
        resolve_precision,
        save_checkpoint,
        shard_units,
        train_steps,
    )

    exit_with_parent()
    torch.set_num_threads(job["threads_per_process"])
    # Every tensor this rank hands to a collective is created on ``device``: NCCL has no CPU
    # backend, so a CPU tensor that gloo takes without a word fails on a GPU.
    device = rank_device(job["use_gpu"])
    if device.type == "cuda":
        torch.cuda.set_device(device)  # the object collectives (broadcast_object_list) use the current device
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    precision = resolve_precision(job.get("precision", "fp32"), device)
    pre = Preprocessor.from_json(job["preprocessor"])
    label, epochs, seed = job["label"], job["epochs"], job["seed"]
    wanted = [*pre.categorical, *pre.numeric, label]
    checkpoint_dir = job.get("checkpoint_dir")

    units = shard_units(job["train_dirs"], rank, world)
    shard = labelled_rows(read_units(units, wanted), wanted, label)
    cats, nums = (torch.from_numpy(a) for a in pre.encode(shard))
    cats, nums, labels = place_shard((cats, nums, torch.from_numpy(shard[label].to_numpy(np.float32))), device)
    print(f"rank {rank}/{world}: {len(units)} row groups, {len(shard)} labelled rows on {device} ({precision})",
          flush=True)
    torch.manual_seed(seed)  # the same initial weights on every rank, built on the CPU whatever the device
    net = build_net(pre, job["hyper"])
    optimizer_state = scaler_state = None
    saved = [load_checkpoint(checkpoint_dir) if checkpoint_dir and rank == 0 else None]
    dist.broadcast_object_list(saved, src=0)
    state = saved[0]
    start_epoch = 0
    if state is not None:
        net.load_state_dict(state["model"])
        optimizer_state, scaler_state, start_epoch = state["optimizer"], state.get("scaler"), state["epochs_done"]
        print(f"rank {rank}: resuming after epoch {start_epoch} of {epochs} from {checkpoint_dir}", flush=True)
    net = net.to(device)
    model = DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.Adam(model.parameters(), lr=job["learning_rate"], fused=device.type == "cuda" or None)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    if scaler is not None and scaler_state is not None:
        scaler.load_state_dict(scaler_state)
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")
    # Every rank takes the same number of steps: the largest share cut into batches of at most
    # batch_size, smaller shares into as many slightly smaller batches. (With DDP's Join instead,
    # a rank that runs out skips the last optimizer steps, its Adam moments fall behind the
    # others' and the ranks' weights drift apart.)
    largest = torch.tensor([len(labels)], dtype=torch.int64, device=device)
    dist.all_reduce(largest, op=dist.ReduceOp.MAX)
    steps = max(1, -(-int(largest) // job["batch_size"]))

    result = None
    history: dict[str, list[float]] = state["history"] if state else {"train": [], "holdout": []}
    if rank == 0:
        import mlflow

        mlflow.set_tracking_uri(job["tracking_uri"])
        mlflow.start_run(run_id=job["run_id"])
        mlflow.log_params({
            "training_precision": precision,
            "training_device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        })
        holdout_units = shard_units(job["holdout_dirs"], 0, 1)  # all of it
        holdout = labelled_rows(read_units(holdout_units, wanted), wanted, label)
        holdout_inputs = [torch.from_numpy(a).to(device) for a in pre.encode(holdout)]  # encoded once
        if state is None:
            mlflow.log_metrics({"holdout_rows": float(len(holdout))})
        else:
            mlflow.set_tag("resumed_from_epoch", str(start_epoch))
            logged = {m.step for m in mlflow.MlflowClient().get_metric_history(job["run_id"], "train_loss")}
            if start_epoch - 1 not in logged:  # the last attempt died between saving and logging
                mlflow.log_metrics(state["metrics"], step=start_epoch - 1)

    epoch_seconds = []
    train_rows = state["train_rows"] if state else 0
    for epoch in range(start_epoch, epochs):
        started = time.perf_counter()
        model.train()
        batches = torch.tensor_split(epoch_order(seed, epoch, rank, len(labels)).to(labels.device), steps)
        totals = train_steps(model, optimizer, loss_fn, batches, cats, nums, labels, device, precision, scaler)
        dist.all_reduce(totals)
        loss_sum, rows = totals.tolist()  # the epoch's one wait for the device
        epoch_seconds.append(time.perf_counter() - started)
        train_rows = int(rows)  # every labelled row, once
        if rank == 0:
            train_loss = loss_sum / rows
            metrics = evaluate(holdout[label], predict_encoded(net, *holdout_inputs))
            history["train"].append(train_loss)
            history["holdout"].append(metrics["log_loss"])
            logged = {"train_loss": train_loss, **{f"holdout_{k}": v for k, v in metrics.items() if k != "rows"}}
            if epoch == 0:
                logged["train_rows"] = float(train_rows)
            if checkpoint_dir:
                save_checkpoint(checkpoint_dir, {
                    "epochs_done": epoch + 1, "model": net.state_dict(), "optimizer": optimizer.state_dict(),
                    "scaler": scaler.state_dict() if scaler is not None else None,
                    "history": history, "metrics": logged, "train_rows": train_rows,
                })
            mlflow.log_metrics(logged, step=epoch)
            print(
                f"epoch {epoch + 1}/{epochs}: train_loss={train_loss:.4f} "
                f"holdout_log_loss={metrics['log_loss']:.4f} holdout_roc_auc={metrics['roc_auc']:.4f}",
                flush=True,
            )

    if rank == 0:
        from jobs.plots import calibration_figure, loss_figure, roc_figure

        probabilities = predict_encoded(net, *holdout_inputs)
        metrics = evaluate(holdout[label], probabilities)
        mlflow.log_figure(loss_figure(history), "plots/loss_curves.png")
        if len(np.unique(holdout[label])) == 2:
            mlflow.log_figure(roc_figure(holdout[label], probabilities), "plots/roc_curve.png")
        mlflow.log_figure(calibration_figure(holdout[label], probabilities), "plots/calibration_curve.png")
        info = log_pyfunc(net.cpu(), pre, job["hyper"], holdout.head(5))
        # Detach, leaving the run RUNNING: the driver finishes it once the model is registered, so a
        # driver that dies in between leaves a run that a retry resumes (no epochs left: it logs and
        # registers the model) instead of a FINISHED run without a version.
        mlflow.end_run(status="RUNNING")
        result = {
            "model_uri": info.model_uri, "metrics": metrics, "train_loss": history["train"][-1],
            "train_rows": train_rows, "epoch_seconds": epoch_seconds, "resumed_from_epoch": start_epoch,
        }
    # In local mode every rank writes its return value to the same file, the last one winning:
    # give every rank rank 0's result so whichever writes last returns the right thing.
    shared = [result]
    dist.broadcast_object_list(shared, src=0)
    dist.destroy_process_group()
    return shared[0]


def resumable_run(mlflow_client: Any, checkpoint_dir: str) -> str | None:
    """The MLflow run an earlier attempt of this training opened and did not finish, if any.

    The attempt wrote the run's id next to its checkpoints; a run that is gone from the tracking
    store (or finished, which a successful attempt follows by removing the checkpoints) is not
    resumed, and the stale checkpoints are dropped.
    """
    from mlflow.exceptions import MlflowException

    from jobs.storage import delete_dir, read_json

    saved = read_json(f"{checkpoint_dir}/{CHECKPOINT_RUN}")
    if not saved:
        return None
    try:
        status = mlflow_client.get_run(saved["run_id"]).info.status
    except MlflowException:
        status = None
    if status in (None, "FINISHED"):
        log.warning("dropping checkpoints of run %s (%s): %s", saved["run_id"], status or "not found", checkpoint_dir)
        delete_dir(checkpoint_dir)
        return None
    mlflow_client.update_run(saved["run_id"], status="RUNNING")
    return saved["run_id"]


def discovered_gpus(script: str | None = None) -> list[str]:
    """The GPU addresses Spark will see on this machine: what the one discovery script
    (``jobs/gpu_discovery.sh``) reports, read before the session starts."""
    import subprocess

    from jobs.spark import GPU_DISCOVERY_SCRIPT

    out = subprocess.run([script or GPU_DISCOVERY_SCRIPT], check=True, capture_output=True, text=True).stdout
    return [str(address) for address in json.loads(out)["addresses"]]


def training_processes(use_gpu: bool, local_mode: bool, asked: int | None, configured: int) -> int:
    """How many ranks: ``--num-processes`` when given; on the CPU ``train.num_processes``; on GPUs
    in local mode one per GPU of this machine, on a cluster ``train.num_processes`` (one per GPU
    task slot)."""
    if asked is not None:
        return asked
    if not (use_gpu and local_mode):
        return configured
    gpus = discovered_gpus()
    if not gpus:
        raise RuntimeError(
            "GPU training was asked for (train.use_gpu / --use-gpu true) but jobs/gpu_discovery.sh finds no GPU "
            "on this machine (nvidia-smi lists none, or is missing): train with --use-gpu false, or on a machine "
            "with GPUs"
        )
    return len(gpus)


def gpu_resources(local_mode: bool, num_processes: int) -> dict[str, str]:
    """:func:`jobs.spark.gpu_conf` for this training, less what spark-submit already set."""
    from pyspark import SparkConf

    from jobs.spark import gpu_conf

    submitted = SparkConf()
    return {k: v for k, v in gpu_conf(local_mode, num_processes if local_mode else 1).items()
            if not submitted.contains(k)}


def main(argv: list[str] | None = None) -> None:
    configure_logging()
    parser = job_parser(__doc__)
    parser.add_argument("--num-processes", type=int, default=None, help="ranks (default: train.num_processes)")
    parser.add_argument("--use-gpu", type=parse_bool, default=None, help="true/false (default: train.use_gpu)")
    parser.add_argument(
        "--local-mode", type=parse_bool, default=None,
        help="true: ranks run on the driver; false: as a barrier stage on the cluster (default: train.local_mode)",
    )
    parser.add_argument(
        "--precision", type=optional_choice(PRECISIONS), default=None,
        help=f"{' | '.join(PRECISIONS)} (default: train.precision; empty: the default)",
    )
    args = parse_job_args(parser, argv)
    cfg = args.config.train
    use_gpu = cfg.use_gpu if args.extra["use_gpu"] is None else args.extra["use_gpu"]
    local_mode = cfg.local_mode if args.extra["local_mode"] is None else args.extra["local_mode"]
    num_processes = training_processes(use_gpu, local_mode, args.extra["num_processes"], cfg.num_processes)
    precision = args.extra["precision"] or cfg.precision
    batch_size = cfg.gpu_batch_size if use_gpu else cfg.batch_size
    train_days, holdout_days = split_window(args.run_date, cfg.train_days, cfg.holdout_days)

    # GPU resources must be known when the session starts; spark-submit --conf settings win.
    spark = get_spark(f"train-{args.run_date}", gpu_resources(local_mode, num_processes) if use_gpu else None)
    train_dirs = feature_dirs(spark, args.lake, train_days)
    holdout_dirs = feature_dirs(spark, args.lake, holdout_days)
    features = spark.read.option("basePath", args.lake.features).parquet(*train_dirs)
    pre = fit_preprocessor(features, args.config.features, cfg.min_category_count)
    log.info(
        "training on %s..%s, holdout %s..%s; vocabularies: %s",
        train_days[0], train_days[-1], holdout_days[0], holdout_days[-1],
        {c: len(v) for c, v in pre.vocab.items()},
    )

    import mlflow
    import mlflow.pyfunc

    from jobs.champion import apply_gate
    from jobs.config import tracking_uri
    from jobs.drift import BASELINE_ARTIFACT, build_baseline
    from jobs.storage import delete_dir, write_json
    from jobs.tracking import client, code_version, ensure_experiment, run_link, run_url

    mlflow_client = client()
    experiment_id = ensure_experiment(cfg.experiment)
    hyper = {"embedding_dim": cfg.embedding_dim, "hidden_units": list(cfg.hidden_units)}
    params = {
        "run_date": args.run_date, "train_start": train_days[0], "train_end": train_days[-1],
        "holdout_start": holdout_days[0], "holdout_end": holdout_days[-1], "features_path": args.lake.features,
        "epochs": cfg.epochs, "batch_size": batch_size, "learning_rate": cfg.learning_rate, "precision": precision,
        "seed": cfg.seed, "num_processes": num_processes, "use_gpu": use_gpu, "local_mode": local_mode,
        "min_category_count": cfg.min_category_count, "config": args.config.source, **hyper, **code_version(),
    }
    # Everything that shapes the training: an attempt resumes only a checkpoint of the same inputs.
    key = hashlib.sha256(json.dumps({**params, "preprocessor": pre.to_json()}, default=str,
                                    sort_keys=True).encode()).hexdigest()[:16]
    checkpoint_dir = args.lake.checkpoint("training", args.run_date, key)
    run_id = resumable_run(mlflow_client, checkpoint_dir)
    if run_id:
        log.info("resuming MLflow run %s after epoch %s of %s (checkpoint %s)", run_id,
                 checkpointed_epochs(checkpoint_dir), cfg.epochs, checkpoint_dir)
    else:
        run = mlflow_client.create_run(
            experiment_id, run_name=f"train-{args.run_date}", tags={"run_date": str(args.run_date)}
        )
        run_id = run.info.run_id
        for name, value in params.items():
            mlflow_client.log_param(run_id, name, str(value))
        if "git_commit" in params:
            mlflow_client.set_tag(run_id, "mlflow.source.git.commit", params["git_commit"].removesuffix("-dirty"))
        write_json(f"{checkpoint_dir}/{CHECKPOINT_RUN}", {"run_id": run_id})
    log.info("MLflow run: %s", run_link(experiment_id, run_id))

    job = {
        "run_id": run_id, "tracking_uri": tracking_uri(), "preprocessor": pre.to_json(),
        "train_dirs": train_dirs, "holdout_dirs": holdout_dirs, "label": args.config.features.label,
        "hyper": hyper, "epochs": cfg.epochs, "batch_size": batch_size, "learning_rate": cfg.learning_rate,
        "precision": precision, "seed": cfg.seed, "use_gpu": use_gpu, "threads_per_process": 1,
        "checkpoint_dir": checkpoint_dir,
    }
    from pyspark.ml.torch.distributor import TorchDistributor

    try:
        result = TorchDistributor(num_processes=num_processes, local_mode=local_mode, use_gpu=use_gpu).run(
            train_fn, job
        )
        if not result:
            raise RuntimeError("training returned no result from rank 0")
        version = mlflow.register_model(result["model_uri"], cfg.model_name)
    except BaseException:
        mlflow_client.set_terminated(run_id, status="FAILED")
        raise
    metrics = result["metrics"]
    label = args.config.features.label
    holdout = (
        spark.read.parquet(*holdout_dirs)
        .select(*args.config.features.inputs, label)
        .where(f"`{label}` IS NOT NULL")
        .toPandas()
    )
    # The registered version's own pyfunc on the holdout: the drift baseline's prediction bins (which
    # travel with the run before the version can become champion) and the gate's challenger score.
    predictions = mlflow.pyfunc.load_model(result["model_uri"]).predict(holdout[args.config.features.inputs])
    baseline = build_baseline(features, pre, predictions, args.config.score.drift.bins)
    mlflow_client.log_dict(run_id, baseline, BASELINE_ARTIFACT)
    decision = apply_gate(
        mlflow_client, cfg.model_name, str(version.version), holdout, args.config.features.inputs, label,
        cfg.promotion_metric, cfg.promotion_margin, predictions,
    )
    train_window, holdout_window = f"{train_days[0]}..{train_days[-1]}", f"{holdout_days[0]}..{holdout_days[-1]}"
    for key, value in {
        "run_date": args.run_date, "train_window": train_window, "holdout_window": holdout_window,
        **{f"holdout_{k}": round(v, 6) for k, v in metrics.items()},
    }.items():
        mlflow_client.set_model_version_tag(cfg.model_name, version.version, key, str(value))
    mlflow_client.set_terminated(run_id, status="FINISHED")
    delete_dir(checkpoint_dir)  # the model is registered: a new attempt for this day starts afresh
    log.info(
        "registered %s version %s from run %s; holdout: %s",
        cfg.model_name, version.version, run_id, json.dumps({k: round(v, 4) for k, v in metrics.items()}),
    )
    summary = {
        "model_name": cfg.model_name, "model_version": str(version.version), "run_id": run_id,
        "experiment_id": experiment_id, "run_url": run_url(experiment_id, run_id),
        "train_window": train_window, "holdout_window": holdout_window, "metrics": metrics, "gate": decision.tags(),
    }
    write_text(spark, args.lake.report("training", args.run_date, "summary.json"), json.dumps(summary, indent=2))
    log.info(
        "champion gate: version %s %s: %s", version.version,
        "is the new champion" if decision.promote else "stays a challenger", decision.reason,
    )


if __name__ == "__main__":
    main()


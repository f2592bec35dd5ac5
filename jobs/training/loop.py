"""One rank of distributed training: what TorchDistributor runs in every process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from jobs.errors import DataError

if TYPE_CHECKING:
    import torch

    from jobs.training.rank import RankConfig


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


def wrap_model(net: torch.nn.Module, world: int, device: torch.device) -> torch.nn.Module:
    """What a rank trains: ``net`` in DDP when it has peers to average its gradients with, ``net``
    itself in a world of one. DDP on one rank only copies the gradients into a bucket, all-reduces
    them with nobody and divides by one: the same weights to the bit (a test says so), at a cost per
    step that a small model feels (measured: docs/bench/scale.md)."""
    if world == 1:
        return net
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)


def make_optimizer(
    params: Any, learning_rate: float, device: torch.device, weight_decay: float = 0.0
) -> torch.optim.Optimizer:
    """The training's optimizer: AdamW (Adam with decoupled weight decay; plain Adam at 0), fused on
    a GPU (one kernel for all parameters)."""
    import torch

    return torch.optim.AdamW(params, lr=learning_rate, weight_decay=weight_decay, fused=device.type == "cuda" or None)


def make_scaler(precision: str, device: torch.device) -> Any:
    """The loss scaler fp16 steps need (None in any other precision)."""
    import torch

    return torch.amp.GradScaler(device.type) if precision == "fp16" else None


def learning_rate_at(base: float, schedule: str, step: int, total: int) -> float:
    """The learning rate of a training's ``step`` (0-based, over every epoch) of ``total``:
    ``constant``: ``base`` throughout; ``cosine``: from ``base`` at the first step down a half cosine
    towards 0 at the last (``train.lr_schedule``). A function of the step alone, so a training
    resumed after an epoch steps at the rates of one that never stopped."""
    import math

    if schedule == "constant" or total <= 1:
        return base
    if schedule == "cosine":
        return base * 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))
    raise ValueError(f"unknown learning rate schedule {schedule!r}")


def train_steps(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Any, batches: Any,
    cats: torch.Tensor, nums: torch.Tensor, labels: torch.Tensor, device: torch.device,
    precision: str = "fp32", scaler: Any = None,
) -> torch.Tensor:
    """One optimizer step per batch (index tensors into the rows, on the rows' device); returns
    [summed loss, rows] as float64 on ``device`` (:func:`train_batches`)."""
    rows = ((cats[batch], nums[batch], labels[batch]) for batch in batches)
    return train_batches(model, optimizer, loss_fn, rows, device, precision, scaler)


def batch_loss(loss_fn: Any, logits: Any, labels: Any) -> Any:
    """The loss of a batch: ``loss_fn`` of one logit per row, or, for a model that gives one per
    member in training ([n, members]: :class:`jobs.model.tabular.TabularEnsemble`), each member's
    loss on the same labels, averaged over the members (so every member learns from its own error
    alone, and the loss reads per row as a single net's does)."""
    if logits.dim() == 2:
        return sum(loss_fn(logits[:, member], labels) for member in range(logits.shape[1])) / logits.shape[1]
    return loss_fn(logits, labels)


def train_batches(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: Any, batches: Any, device: torch.device,
    precision: str = "fp32", scaler: Any = None, lr_at: Any = None,
) -> torch.Tensor:
    """One optimizer step per batch of (category indices, numbers, labels) tensors, wherever they
    are; returns [summed loss, rows] as float64 on ``device``.

    Nothing in the loop waits for the device: the loss is summed on it and read once, by the
    caller, at the end of the epoch. ``scaler``: a loss scaler (fp16); ``lr_at``: the learning rate
    of the epoch's n-th step (None: the optimizer's as it is)."""
    import torch

    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    rows = 0
    for step, batch in enumerate(batches):
        c, n, y = (t.to(device, non_blocking=True) for t in batch)
        if lr_at is not None:
            rate = lr_at(step)
            for group in optimizer.param_groups:
                group["lr"] = rate
        optimizer.zero_grad()
        with autocast(device, precision):
            loss = batch_loss(loss_fn, model(c, n), y)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        loss_sum += loss.detach()
        rows += len(y)
    return torch.stack([loss_sum, torch.tensor(float(rows), dtype=torch.float64, device=device)])


def seed_epoch(seed: int, epoch: int, rank: int) -> None:
    """Seed torch's global generator, which draws the dropout masks, for ``epoch`` of ``rank``: an
    epoch draws the same masks whether the training ran through or resumed from a checkpoint
    before it (a checkpoint holds no generator state)."""
    import torch

    torch.manual_seed(seed * 1_000_003 + epoch * 1009 + rank + 500_009)  # apart from the shuffle's seeds


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


def train_fn(job: RankConfig) -> dict[str, Any] | None:
    """One rank of distributed training; TorchDistributor runs it in every process.

    Self-contained (imports inside; its argument, :class:`jobs.training.rank.RankConfig`, frozen plain
    data) so it pickles to the ranks. Each rank
    reads only its own row groups of the training partitions (:func:`shard_units`) and shuffles
    them with a generator seeded by (seed, rank, epoch); shares may differ by a row group, so each
    rank cuts its share into the same number of batches: every training row is used exactly once
    per epoch and the ranks stay in step. ``job.data_path`` says whether a rank holds its share in
    memory or streams it through a bounded buffer (:mod:`jobs.training.stream`; ``auto`` by its
    size); rank 0 logs which as ``training_data_path``. Only rank 0 logs: to MLflow itself, or,
    with ``job.events_dir`` set (:func:`jobs.training.relay.run_relayed`), through files that the
    launching process forwards and from which it logs the model.

    With ``job.checkpoint_dir`` set, rank 0 saves the weights, optimizer state, loss history
    and the epoch's metrics there after every epoch (:func:`save_checkpoint`), before logging
    them; a later attempt starts after the last saved epoch (every rank gets rank 0's copy), logs
    whatever the dead attempt saved but did not log, and so counts every epoch once. Seeding by epoch makes a resumed
    training the same as one that never stopped.

    Every rank returns rank 0's result: the logged model's URI and the final holdout metrics.
    Everything else a run measures (per-epoch loss and metrics, ``train_rows``, ``epoch_seconds``
    of each training loop, ``resumed_from_epoch``) is in the MLflow run.

    What a rank's start costs (docs/bench/training.md): ranks never import MLflow under a relay
    (rank 0 otherwise), and
    a rank leaves with its objects frozen out of the interpreter's final garbage collections
    (``gc.freeze``). DDP stays where there are peers: its constructor imports ``torch._dynamo``
    (one to three seconds), but so does the optimizer's first step (torch 2.13's ``torch.optim``
    imports it on every ``step``), so a hand-made gradient all-reduce would save nothing; a world of
    one trains the net itself (:func:`wrap_model`).
    """
    import gc
    import sys
    import time

    entered = time.time()
    from jobs.training.loop import note_rank_error, train_rank

    try:
        result = train_rank(job, entered)
    except BaseException as err:
        note_rank_error(job.checkpoint_dir, err)
        # MLflow ends an open run as FINISHED when the process exits: say what really happened.
        mlflow = sys.modules.get("mlflow")  # imported by rank 0 only
        if mlflow is not None and mlflow.active_run() is not None:
            from jobs.tracking import best_effort_calls

            with best_effort_calls():  # the server may be what failed: the error in hand is the news
                mlflow.end_run(status="FAILED")
        raise
    # The rank exits once it returns: frozen, the objects of torch's (and rank 0's MLflow's) import
    # graph are left out of the interpreter's final collections, most of a second of its exit.
    gc.freeze()
    return result


RANK_ERROR = "rank-{rank}.error"  # in the checkpoint folder: what ended a rank, in one line
DATA_ERROR_NOTE = "data error: "  # after "rank N: " in that line when it was a DataError: a retry would fail the same


class RankDataError(DataError):
    """A training rank stopped on a data error (an unreadable row group): its line says which."""


def note_rank_error(checkpoint_dir: str | None, err: BaseException) -> None:
    """Write what ended this rank, in one line, into the training's checkpoint folder (in the lake,
    which the driver reads wherever the rank ran): TorchDistributor itself says only "failed during
    training", the cause being in the rank's output. Never raises over ``err``."""
    import os

    if not checkpoint_dir:
        return
    try:
        from jobs.errors import headline
        from jobs.lake.storage import write_text

        rank = os.environ.get("RANK", "0")
        kind = DATA_ERROR_NOTE if isinstance(err, DataError) else ""
        write_text(f"{checkpoint_dir}/{RANK_ERROR.format(rank=rank)}", f"rank {rank}: {kind}{headline(err)}")
    except Exception:  # the rank's own error is what matters
        pass


def ranks_failed(said: list[str]) -> Exception:
    """The driver's error for ranks that wrote ``said`` (:func:`rank_errors`): a :class:`RankDataError`
    (not retried) when any rank stopped on a data error, else a RuntimeError (a fault, retried)."""
    data = [line for line in said if line.split(": ", 1)[-1].startswith(DATA_ERROR_NOTE)]
    # The data error first: its peers' lines say only that it went away ("Connection closed by peer").
    text = f"training failed: {'; '.join([*data, *(line for line in said if line not in data)])}"
    return RankDataError(text) if data else RuntimeError(text)


def rank_errors(checkpoint_dir: str, *, clear: bool = False) -> list[str]:
    """The lines :func:`note_rank_error` wrote for the ranks of the last attempt, rank by rank;
    with ``clear``, remove them (before an attempt starts)."""
    from jobs.lake.storage import delete_file, list_files, read_bytes

    found = []
    for path in list_files(checkpoint_dir, ".error"):
        if clear:
            delete_file(path)
        else:
            found.append((read_bytes(path) or b"").decode(errors="replace").strip())
    return found


class _HeldBack:
    """``stream`` until a line of it starts a Python traceback; from there on, lines only counted."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.held = stream, 0

    def write(self, text: str) -> int:
        if self.held or "Traceback (most recent call last):" in text:
            self.held += text.count("\n") or 1
            return len(text)
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding...
        return getattr(self.stream, name)


@contextmanager
def ranks_output_until_a_failure() -> Iterator[None]:
    """The ranks' output (TorchDistributor copies it to this process's stdout) up to a rank's
    traceback; below ``PIPELINE_LOG_LEVEL=DEBUG`` what follows (the rank's traceback, torchrun's
    own and its failure table: 50 lines and more) is held back and counted in one line: the rank's
    error is told in one line by the job (:func:`note_rank_error`, :func:`ranks_failed`)."""
    import os
    import sys

    if os.environ.get("PIPELINE_LOG_LEVEL", "INFO").upper() == "DEBUG":
        yield
        return
    stream = sys.stdout
    sys.stdout = held = _HeldBack(stream)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout = stream
        if held.held:
            stream.write(f"({held.held} lines of the ranks' output from their first traceback on held back: "
                         "PIPELINE_LOG_LEVEL=DEBUG shows them)\n")
            stream.flush()


def train_in_process(job: RankConfig) -> dict[str, Any] | None:
    """:func:`train_fn` in this process as the only rank of a world of one, without TorchDistributor
    (no process started): for debugging a training and for measuring it from outside. Leaves this
    process's environment, torch threads, pyarrow's memory pool and exception hook as they were
    (glibc's mmap threshold, once a rank has fixed it, stays fixed: glibc cannot be asked for it)."""
    import os
    import socket
    import sys

    import pyarrow as pa
    import torch

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rank_env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    saved, threads, excepthook = {k: os.environ.get(k) for k in rank_env}, torch.get_num_threads(), sys.excepthook
    pool = pa.default_memory_pool()
    os.environ.update(rank_env)
    try:
        return train_fn(job)
    finally:
        import gc

        gc.unfreeze()  # train_fn freezes them for a rank about to exit: this process goes on
        import torch.distributed as dist

        if dist.is_initialized():  # a rank that failed leaves its group: the next training here needs its own
            dist.destroy_process_group()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        torch.set_num_threads(threads)
        pa.set_memory_pool(pool)
        sys.excepthook = excepthook  # the process group prefixes every traceback with "[rank0]"


TIMING_MARKS_ENV = "PIPELINE_TRAINING_MARKS"  # a file: rank 0 writes its timing marks there (benchmarks.training)


def train_rank(job: RankConfig, entered: float | None = None) -> dict[str, Any] | None:
    """The body of :func:`train_fn` (``entered``: when the rank entered it, ``time.time()``)."""
    import datetime as dt
    import time

    import numpy as np
    import torch
    import torch.distributed as dist

    from jobs.metrics import evaluate
    from jobs.model.tabular import Preprocessor, build_model
    from jobs.training.allocation import set_rank_allocation
    from jobs.training.checkpoints import load_checkpoint, save_checkpoint
    from jobs.training.data import epoch_batches, labelled_rows, place_shard, read_units, step_count
    from jobs.training.loop import (
        exit_with_parent,
        learning_rate_at,
        make_optimizer,
        make_scaler,
        rank_device,
        resolve_precision,
        seed_epoch,
        train_batches,
        wrap_model,
    )
    from jobs.training.relay import rank_log
    from jobs.training.stream import StreamingShard, plan_shares, resolve_data_path

    marks = {"entered": entered or time.time(), "imported": time.time()}  # when each phase ended
    exit_with_parent()
    torch.set_num_threads(job.threads_per_process)
    # Before the rank's first Arrow buffer: what was allocated before stays where it was.
    allocation = set_rank_allocation(job.arrow_memory_pool, job.malloc_mmap_threshold)
    # Every tensor this rank hands to a collective is created on ``device``: NCCL has no CPU
    # backend, so a CPU tensor that gloo takes without a word fails on a GPU.
    device = rank_device(job.use_gpu)
    # A rank whose peer died waits this long in a collective, not gloo's 30 minutes (train.collective_timeout_s).
    timeout = dt.timedelta(seconds=job.collective_timeout_s)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # the object collectives (broadcast_object_list) use the current device
        dist.init_process_group("nccl", device_id=device, timeout=timeout)
    else:
        dist.init_process_group("gloo", timeout=timeout)
    rank, world = dist.get_rank(), dist.get_world_size()
    marks["group"] = time.time()
    precision = resolve_precision(job.precision, device)
    pre = Preprocessor.from_json(job.preprocessor)
    label, epochs, seed = job.label, job.epochs, job.seed
    wanted = [*pre.categorical, *pre.numeric, label]
    checkpoint_dir = job.checkpoint_dir

    # Every rank plans every share from the footers (the same files, the same order), so all know
    # the largest share without a collective and choose the same data path.
    plan = plan_shares(job.train_dirs, world, label)
    units, counts = plan.share(rank)
    # The train job refuses such a window before the ranks start; every rank checks every share,
    # so all stop together rather than some waiting in a collective for the others.
    plan.refuse_empty(f"the training partitions {job.train_dirs[0]}...")
    data_path = resolve_data_path(job.data_path, max(plan.share_rows), job.buffer_rows)
    if data_path == "memory":
        shard = labelled_rows(read_units(units, wanted), wanted, label)
        cats, nums = (torch.from_numpy(a) for a in pre.encode(shard))
        cats, nums, labels = place_shard((cats, nums, torch.from_numpy(shard[label].to_numpy(np.float32))), device)
        share_rows = len(labels)
    else:
        stream = StreamingShard(units, counts, wanted, label, pre,
                                steps=step_count(max(plan.share_rows), job.batch_size), buffer_rows=job.buffer_rows,
                                read_ahead=job.read_ahead, seed=seed, rank=rank, batch_rows=job.read_batch_rows)
        share_rows = stream.rows
    print(f"rank {rank}/{world}: {len(units)} row groups, {share_rows} labelled rows on {device} ({precision}, "
          f"{data_path})", flush=True)
    torch.manual_seed(seed)  # the same initial weights on every rank, built on the CPU whatever the device
    net = build_model(job.builder, pre, job.hyper)
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
    model = wrap_model(net, world, device)
    optimizer = make_optimizer(model.parameters(), job.learning_rate, device, job.weight_decay)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    scaler = make_scaler(precision, device)
    if scaler is not None and scaler_state is not None:
        scaler.load_state_dict(scaler_state)
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")
    # Every rank takes the same number of steps: the largest share cut into batches of at most
    # batch_size, smaller shares into as many slightly smaller batches. (With DDP's Join instead,
    # a rank that runs out skips the last optimizer steps, its Adam moments fall behind the
    # others' and the ranks' weights drift apart.)
    largest = torch.tensor([share_rows], dtype=torch.int64, device=device)
    dist.all_reduce(largest, op=dist.ReduceOp.MAX)
    steps = step_count(int(largest), job.batch_size)
    if data_path == "stream" and steps != stream.steps:  # the ranks planned from footers that differed
        raise RuntimeError(f"rank {rank}: {steps} steps agreed by the ranks, {stream.steps} planned from the "
                           "footers: the training partitions changed while the ranks started")

    result = None
    history: dict[str, list[float]] = state["history"] if state else {"train": [], "holdout": []}
    # train.keep_best_epoch: the epoch whose net scored best on the validation days so far, its weights
    best: dict[str, Any] | None = state.get("best") if state else None
    validation = None
    marks["ready"] = time.time()
    if rank == 0:
        # MLflow itself in the job's own process; files the launcher forwards under TorchDistributor
        # or torchrun (jobs.training.relay), so this rank imports no MLflow
        run_log = rank_log(job)
        marks["log_opened"] = time.time()
        holdout_plan = plan_shares(job.holdout_dirs, 1, label)  # all of it
        holdout_path = resolve_data_path(job.data_path, holdout_plan.share_rows[0], job.buffer_rows)
        run_log.params({
            "training_precision": precision,
            "training_device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "training_data_path": data_path, "holdout_data_path": holdout_path,
            **allocation,
        })
        holdout = HoldoutRows(holdout_plan.units, wanted, label, pre, device, holdout_path, job.read_batch_rows)
        if job.keep_best_epoch and job.validation_dirs:
            validation = validation_rows(job, wanted, pre, device)
        if state is None:
            run_log.metrics({"holdout_rows": float(len(holdout.labels))})
        else:  # whatever the last attempt saved but died before logging, logged now
            run_log.resumed(start_epoch, state["metrics"])

    marks["first_step"] = time.time()
    for epoch in range(start_epoch, epochs):
        started = time.perf_counter()
        model.train()
        seed_epoch(seed, epoch, rank)
        if data_path == "memory":
            batches = ((cats[b], nums[b], labels[b]) for b in epoch_batches(seed, epoch, rank, len(labels), steps,
                                                                            labels.device))
        else:
            batches = (tuple(torch.from_numpy(a) for a in batch) for batch in stream.epoch(epoch))
        lr_at = None if job.lr_schedule == "constant" else (
            lambda step, done=epoch * steps: learning_rate_at(job.learning_rate, job.lr_schedule, done + step,
                                                              steps * epochs))
        totals = train_batches(model, optimizer, loss_fn, batches, device, precision, scaler, lr_at)
        dist.all_reduce(totals)
        loss_sum, rows = totals.tolist()  # the epoch's one wait for the device
        loop_seconds = time.perf_counter() - started  # the training steps and the all-reduce, not evaluation
        if rank == 0:
            train_loss = loss_sum / rows
            metrics = evaluate(holdout.labels, holdout.predict(net))
            history["train"].append(train_loss)
            history["holdout"].append(metrics["log_loss"])
            logged = {"train_loss": train_loss, "epoch_seconds": loop_seconds,
                      **{f"holdout_{k}": v for k, v in metrics.items() if k != "rows"}}
            if epoch == 0:
                logged["train_rows"] = rows  # every labelled row, once
            if lr_at is not None:
                logged["learning_rate"] = lr_at(steps - 1)  # the epoch's last step's
            if validation is not None:
                chosen = evaluate(validation.labels, validation.predict(net), validation.days)[job.selection_metric]
                logged[f"epoch_validation_{job.selection_metric}"] = chosen
                if improves(job.selection_metric, chosen, best):
                    best = {"epoch": epoch + 1, "score": chosen,
                            "model": {k: v.detach().clone() for k, v in net.state_dict().items()}}
            if checkpoint_dir:
                save_checkpoint(checkpoint_dir, {
                    "epochs_done": epoch + 1, "model": net.state_dict(), "optimizer": optimizer.state_dict(),
                    "scaler": scaler.state_dict() if scaler is not None else None,
                    "history": history, "metrics": logged, "best": best,
                })
            run_log.metrics(logged, step=epoch)
            print(
                f"epoch {epoch + 1}/{epochs}: train_loss={train_loss:.4f} "
                f"holdout_log_loss={metrics['log_loss']:.4f} holdout_roc_auc={metrics['roc_auc']:.4f}",
                flush=True,
            )

    marks["trained"] = time.time()
    if rank == 0:
        from jobs.model.calibration import apply_scale

        if validation is not None:
            kept = best["epoch"] if best is not None else epochs  # no epoch scored (one class): the last
            if kept < epochs:
                net.load_state_dict(best["model"])
            run_log.metrics({"kept_epoch": float(kept)})
            print(f"kept the net of epoch {kept}/{epochs}, the best on the validation days by "
                  f"{job.selection_metric}", flush=True)
        calibration = fit_calibration(job, net, wanted, pre, device, validation)
        # The logged model's holdout metrics: the calibrated probabilities, as its pyfunc gives them.
        probabilities = apply_scale(holdout.predict(net), calibration["logit_scale"])
        metrics = evaluate(holdout.labels, probabilities)
        # The plots and the model: logged here, or by the launcher from the weights (FileLog). The run
        # stays RUNNING: the driver finishes it once the model is registered, so a driver that dies in
        # between leaves a run that a retry resumes (no epochs left: it logs and registers the model)
        # instead of a FINISHED run without a version.
        model_uri = run_log.finish(net, {"calibration": calibration, "history": history, "labels": holdout.labels,
                                         "probabilities": probabilities, "head": holdout.head, "metrics": metrics})
        result = {"model_uri": model_uri, "metrics": metrics}
        marks["logged"] = time.time()
    # In local mode every rank writes its return value to the same file, the last one winning:
    # give every rank rank 0's result so whichever writes last returns the right thing.
    shared = [result]
    dist.broadcast_object_list(shared, src=0)
    # Let gloo's worker threads finish with the broadcast before the group goes away. Its work
    # objects hold tensors that Python let go of, so a worker needs the GIL to free them, under the
    # group's mutex; the group's destructor (run when the DDP model, if any, is freed, GIL held) takes that
    # mutex: if the worker is not done by then, both wait forever (pytorch/pytorch#56297; seen here
    # under load as a rank hung at the end of training). The barrier and the sleep wait without
    # the GIL; a barrier's work holds no Python tensors.
    dist.barrier()
    time.sleep(0.2)
    dist.destroy_process_group()
    marks["done"] = time.time()
    if rank == 0:
        write_marks(marks)
    return shared[0]


def fit_calibration(job: RankConfig, net: Any, columns: list[str], pre: Any, device: Any,
                    validation: HoldoutRows | None = None) -> dict[str, Any]:
    """Rank 0's calibration of the trained ``net`` (:func:`jobs.model.calibration.calibrate`) on the
    labelled rows of the validation days (``job.validation_dirs``, or ``validation`` when rank 0
    holds them already), read as the holdout is (:class:`HoldoutRows`: in memory or streamed by their
    size); not read when ``job.calibration`` is ``none`` or there are no validation days."""
    from jobs.model.calibration import calibrate

    if job.calibration == "none" or not job.validation_dirs:
        return calibrate(job.calibration, [], [])
    validation = validation or validation_rows(job, columns, pre, device)
    return calibrate(job.calibration, validation.labels, validation.predict(net))


def validation_rows(job: RankConfig, columns: list[str], pre: Any, device: Any) -> HoldoutRows:
    """The labelled rows of the validation days (``job.validation_dirs``) with each row's day, read as
    the holdout is."""
    from jobs.training.stream import plan_shares, resolve_data_path

    plan = plan_shares(job.validation_dirs, 1, job.label)
    path = resolve_data_path(job.data_path, plan.share_rows[0], job.buffer_rows)
    return HoldoutRows(plan.units, columns, job.label, pre, device, path, job.read_batch_rows, days=True)


def improves(metric: str, score: float, best: dict[str, Any] | None) -> bool:
    """Whether ``score`` (of ``metric``, a promotion metric) beats ``best``'s: a NaN never does,
    anything else beats none; a tie keeps the earlier epoch."""
    import math

    from jobs.metrics import LOWER_IS_BETTER

    if math.isnan(score):
        return False
    if best is None:
        return True
    return score < best["score"] if metric in LOWER_IS_BETTER else score > best["score"]


def write_marks(marks: dict[str, float]) -> None:
    """Rank 0's timing marks (``time.time()`` at the end of each phase of :func:`train_rank`) as JSON
    to the file :data:`TIMING_MARKS_ENV` names, where it is set: how the training benchmark splits
    a launch into its phases."""
    import json
    import os

    path = os.environ.get(TIMING_MARKS_ENV)
    if path:
        with open(path, "w") as f:
            json.dump(marks, f)


class HoldoutRows:
    """Rank 0's holdout: its labels, the first rows (the logged model's input example) and the
    model's probabilities on it (:meth:`predict`). ``memory``: encoded once and kept on the
    device; ``stream``: read again at every evaluation, ``batch_rows`` rows of a row group at a
    time, so only the labels and the probabilities (two numbers a row) stay."""

    def __init__(self, units: list[tuple[str, int]], columns: list[str], label: str, pre: Any, device: Any,
                 path: str, batch_rows: int, days: bool = False) -> None:
        import numpy as np
        import torch

        from jobs.lake.layout import partition_of
        from jobs.training.data import labelled_rows, read_units
        from jobs.training.stream import labelled_frames

        def day(uri: str) -> str:
            found = partition_of(uri)
            return found[1].isoformat() if found else ""

        self.units, self.columns, self.label, self.pre, self.device, self.path = (
            units, columns, label, pre, device, path)
        self.batch_rows = batch_rows
        self.inputs: list[torch.Tensor] | None = None
        # Copies, not views: a float column of a frame is a view of the block that holds all its float
        # columns, so a kept label column (or head) would keep every feature of its rows alive. Kept
        # per streamed batch, that was most of the holdout's features (about 270 MiB at 600,000 rows).
        # ``days``: each labelled row's day (its partition's), for the metrics judged per day
        self.days: Any = None
        if path == "memory":
            tables = read_units(units, columns)
            rows = labelled_rows(tables, columns, label)
            self.inputs = [torch.from_numpy(a).to(device) for a in pre.encode(rows)]  # encoded once
            self.labels = rows[label].to_numpy(np.float64, copy=True)
            self.head = rows.head(5).copy()
            if days:
                counts = [int(t.column(label).to_pandas().notna().sum()) for t in tables]
                self.days = np.repeat(np.array([day(uri) for uri, _ in units], dtype=object), counts)
        else:
            labels, found, self.head = [], [], None
            for uri, group in units:
                for frame in labelled_frames(uri, group, columns, label, batch_rows):
                    labels.append(frame[label].to_numpy(np.float64, copy=True))
                    found.append(np.full(len(frame), day(uri), dtype=object))
                    if self.head is None:
                        self.head = frame.head(5).copy()
            self.labels = np.concatenate(labels) if labels else np.zeros(0)
            if days:
                self.days = np.concatenate(found) if found else np.zeros(0, dtype=object)
            if self.head is None:
                self.head = labelled_rows([], columns, label)

    def predict(self, net: Any) -> Any:
        """The probabilities of ``net`` (float64, on the host), in the order of :attr:`labels`."""
        import numpy as np
        import torch

        from jobs.model.tabular import predict_encoded
        from jobs.training.stream import encode_group

        if self.inputs is not None:
            return predict_encoded(net, *self.inputs)
        parts = []
        for uri, group in self.units:
            # Decoded in batches but predicted a row group at once, as always: float32 sums move in
            # their last bits with the batch's size, and the holdout metrics stay those of earlier runs.
            cats, nums, _ = encode_group(self.pre, uri, group, self.columns, self.label, self.batch_rows)
            if len(cats):
                parts.append(predict_encoded(net, torch.from_numpy(cats).to(self.device),
                                             torch.from_numpy(nums).to(self.device)))
        probabilities = np.concatenate(parts) if parts else np.zeros(0)
        if len(probabilities) != len(self.labels):  # the holdout changed between two reads
            from jobs.training.stream import RowGroupReadError

            raise RowGroupReadError(f"the holdout {self.units[0][0]}... held {len(self.labels)} labelled rows and "
                                    f"now {len(probabilities)}: it was rewritten while the training ran")
        return probabilities

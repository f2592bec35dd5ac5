"""One rank of distributed training: what TorchDistributor runs in every process (:func:`train_fn`).

:func:`train_rank` is the rank's life in named steps: join the process group, read the share
(:func:`load_share`), build or resume the model (:func:`build_trainer`), train the epochs
(:func:`train_epoch`; rank 0 evaluates and logs each, :mod:`jobs.training.evaluation`), leave the
group with rank 0's result (:func:`leave_group`). The step primitives are in
:mod:`jobs.training.steps`; what the launching process does around the ranks in
:mod:`jobs.training.driver`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs.errors import DataError

if TYPE_CHECKING:
    import torch

    from jobs.training.rank import RankConfig


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
    one trains the net itself (:func:`jobs.training.steps.wrap_model`).
    """
    import gc
    import sys
    import time

    entered = time.time()

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


TIMING_MARKS_ENV = "PIPELINE_TRAINING_MARKS"  # a file: rank 0 writes its timing marks there (benchmarks.training)


# The modules a rank imports before its "imported" mark (the training benchmark's first phase).
RANK_MODULES = (
    "numpy", "torch", "torch.distributed", "jobs.metrics", "jobs.model.tabular", "jobs.training.allocation",
    "jobs.training.checkpoints", "jobs.training.data", "jobs.training.evaluation", "jobs.training.relay",
    "jobs.training.steps", "jobs.training.stream",
)


def import_rank_modules() -> None:
    """Import :data:`RANK_MODULES`, what a rank needs, before it starts its clock on the work."""
    import importlib

    for name in RANK_MODULES:
        importlib.import_module(name)


@dataclass
class Share:
    """A rank's share of the training rows: in memory (``cats``, ``nums``, ``labels`` on the rank's
    device) or streamed (``stream``), by ``data_path``; ``rows``: its labelled rows."""

    data_path: str
    rows: int
    cats: Any = None
    nums: Any = None
    labels: Any = None
    stream: Any = None


@dataclass
class Trainer:
    """What a rank trains with: ``net`` (rank 0 evaluates and logs it), ``model`` (``net``, in DDP
    when there are peers), its optimizer, loss scaler and loss, the ``steps`` of every epoch, the
    epoch it starts at, the loss history and ``best``: the epoch that scored best on the validation
    days so far, with its weights (``train.keep_best_epoch``)."""

    net: Any
    model: Any
    optimizer: Any
    scaler: Any
    loss_fn: Any
    steps: int
    start_epoch: int
    history: dict[str, list[float]]
    best: dict[str, Any] | None
    resumed: dict[str, Any] | None  # what the last attempt saved of its last epoch (None: a fresh start)


def train_rank(job: RankConfig, entered: float | None = None) -> dict[str, Any] | None:
    """The body of :func:`train_fn` (``entered``: when the rank entered it, ``time.time()``): join the
    group, read the share, build or resume the model, train the epochs (rank 0 evaluating and logging
    each), rank 0 finishing the model, and leave the group with rank 0's result."""
    import time

    import_rank_modules()
    imported = time.time()
    marks = {"entered": entered or imported, "imported": imported}  # when each phase ended
    from jobs.model.tabular import Preprocessor
    from jobs.training.evaluation import finish_model, log_epoch, open_watch
    from jobs.training.steps import resolve_precision

    rank, world, device, allocation = join_group(job)
    marks["group"] = time.time()
    precision = resolve_precision(job.precision, device)
    pre = Preprocessor.from_json(job.preprocessor)
    wanted = [*pre.categorical, *pre.numeric, job.label]
    share = load_share(job, pre, wanted, rank, world, device, precision)
    trainer = build_trainer(job, pre, rank, device, precision, share)
    marks["ready"] = time.time()
    watch = None
    if rank == 0:
        watch = open_watch(job, trainer, wanted, pre, device, precision, share.data_path, allocation, marks)
    marks["first_step"] = time.time()
    for epoch in range(trainer.start_epoch, job.epochs):
        totals, seconds, lr_at = train_epoch(job, trainer, share, epoch, rank, device, precision)
        if watch is not None:
            log_epoch(job, watch, trainer, epoch, totals, seconds, lr_at)
    marks["trained"] = time.time()
    result = None
    if watch is not None:
        result = finish_model(job, watch, trainer, wanted, pre, device)
        marks["logged"] = time.time()
    result = leave_group(result)
    marks["done"] = time.time()
    if rank == 0:
        write_marks(marks)
    return result


def join_group(job: RankConfig) -> tuple[int, int, torch.device, dict[str, Any]]:
    """Set up the rank's process (a watch on its parent, its threads, how it allocates memory) and
    join the process group; returns the rank, the world's size, the rank's device and the
    allocation settings (logged by rank 0)."""
    import datetime as dt

    import torch
    import torch.distributed as dist

    from jobs.training.allocation import set_rank_allocation
    from jobs.training.steps import rank_device

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
    return dist.get_rank(), dist.get_world_size(), device, allocation


def load_share(job: RankConfig, pre: Any, wanted: list[str], rank: int, world: int, device: torch.device,
               precision: str) -> Share:
    """The rank's share of the training partitions, held in memory or streamed by its size."""
    import numpy as np
    import torch

    from jobs.training.data import labelled_rows, place_shard, read_units, step_count
    from jobs.training.stream import StreamingShard, plan_shares, resolve_data_path

    label = job.label
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
        share = Share(data_path, len(labels), cats=cats, nums=nums, labels=labels)
    else:
        stream = StreamingShard(units, counts, wanted, label, pre,
                                steps=step_count(max(plan.share_rows), job.batch_size), buffer_rows=job.buffer_rows,
                                read_ahead=job.read_ahead, seed=job.seed, rank=rank, batch_rows=job.read_batch_rows)
        share = Share(data_path, stream.rows, stream=stream)
    print(f"rank {rank}/{world}: {len(units)} row groups, {share.rows} labelled rows on {device} ({precision}, "
          f"{data_path})", flush=True)
    return share


def build_trainer(job: RankConfig, pre: Any, rank: int, device: torch.device, precision: str,
                  share: Share) -> Trainer:
    """The model, its optimizer and scaler, from rank 0's last checkpoint when there is one (every
    rank gets rank 0's copy), and the steps of an epoch, agreed by the ranks."""
    import torch
    import torch.distributed as dist

    from jobs.model.tabular import build_model
    from jobs.training.checkpoints import load_checkpoint
    from jobs.training.data import step_count
    from jobs.training.steps import make_optimizer, make_scaler, wrap_model

    world = dist.get_world_size()
    checkpoint_dir = job.checkpoint_dir
    torch.manual_seed(job.seed)  # the same initial weights on every rank, built on the CPU whatever the device
    net = build_model(job.builder, pre, job.hyper)
    optimizer_state = scaler_state = None
    saved = [load_checkpoint(checkpoint_dir) if checkpoint_dir and rank == 0 else None]
    dist.broadcast_object_list(saved, src=0)
    state = saved[0]
    start_epoch = 0
    if state is not None:
        net.load_state_dict(state["model"])
        optimizer_state, scaler_state, start_epoch = state["optimizer"], state.get("scaler"), state["epochs_done"]
        print(f"rank {rank}: resuming after epoch {start_epoch} of {job.epochs} from {checkpoint_dir}", flush=True)
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
    largest = torch.tensor([share.rows], dtype=torch.int64, device=device)
    dist.all_reduce(largest, op=dist.ReduceOp.MAX)
    steps = step_count(int(largest), job.batch_size)
    if share.data_path == "stream" and steps != share.stream.steps:  # the ranks planned from footers that differed
        raise RuntimeError(f"rank {rank}: {steps} steps agreed by the ranks, {share.stream.steps} planned from the "
                           "footers: the training partitions changed while the ranks started")
    history: dict[str, list[float]] = state["history"] if state else {"train": [], "holdout": []}
    best = state.get("best") if state else None
    resumed = state["metrics"] if state else None
    return Trainer(net, model, optimizer, scaler, loss_fn, steps, start_epoch, history, best, resumed)


def train_epoch(job: RankConfig, trainer: Trainer, share: Share, epoch: int, rank: int, device: torch.device,
                precision: str) -> tuple[list[float], float, Any]:
    """One epoch of training steps on every rank, the losses summed over the ranks; returns
    [summed loss, rows], the seconds of the steps and the all-reduce (not the evaluation), and the
    learning rate of the epoch's n-th step (None: constant)."""
    import time

    import torch
    import torch.distributed as dist

    from jobs.training.data import epoch_batches
    from jobs.training.steps import learning_rate_at, seed_epoch, train_batches

    steps, epochs = trainer.steps, job.epochs
    started = time.perf_counter()
    trainer.model.train()
    seed_epoch(job.seed, epoch, rank)
    if share.data_path == "memory":
        cats, nums, labels = share.cats, share.nums, share.labels
        batches = ((cats[b], nums[b], labels[b]) for b in epoch_batches(job.seed, epoch, rank, len(labels), steps,
                                                                        labels.device))
    else:
        batches = (tuple(torch.from_numpy(a) for a in batch) for batch in share.stream.epoch(epoch))
    lr_at = None if job.lr_schedule == "constant" else (
        lambda step, done=epoch * steps: learning_rate_at(job.learning_rate, job.lr_schedule, done + step,
                                                          steps * epochs))
    totals = train_batches(trainer.model, trainer.optimizer, trainer.loss_fn, batches, device, precision,
                           trainer.scaler, lr_at)
    dist.all_reduce(totals)
    done = totals.tolist()  # the epoch's one wait for the device
    return done, time.perf_counter() - started, lr_at


def leave_group(result: dict[str, Any] | None) -> dict[str, Any] | None:
    """Give every rank rank 0's ``result`` and leave the process group; returns that result."""
    import time

    import torch.distributed as dist

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
    return shared[0]


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

"""Benchmark: training throughput and fixed start-up cost of TorchDistributor against a plain PyTorch loop.

``python -m benchmarks.training --help`` lists its options.

Smoke size (about 3 minutes on two cores): ``--days 2 --epochs 2 --repeat 1``.

Lands the real 2013 example data for a window of days into a throw-away lake, validates it (without
GX), builds the features and fits the preprocessor once, in one local[2] session; rank 0 logs to a
throw-away MLflow store. The window is the training job's (``train.train_days`` + ``train.holdout_days``
days ending 2013-01-28); ``--days N`` sets its length instead: the holdout keeps its share of the days
(at least one) and a window longer than January ends N - 1 days after 2013-01-01. Every contender
trains the same model (``train.model``) on the same labelled training rows, with the seed, batch size,
learning rate, hyperparameters and epochs of the bundled config's train section (``--epochs``
overrides the epochs):

- ``plain loop``: one process, no torch.distributed: pyarrow reads the training row groups (in
  :func:`jobs.training.data.shard_units` order), the preprocessor encodes them, and train_fn's loop runs
  without DDP (Adam, summed BCEWithLogitsLoss, batches shuffled as rank 0 shuffles them, the loss
  totalled per batch), with one torch thread like each rank, and again with torch's default threads.
  Its fixed cost is the read, the encoding and building the model.
- ``train_fn in-process``: :func:`jobs.training.loop.train_fn` called in this process as a world of one
  (gloo), without TorchDistributor: the pipeline's own fixed cost without starting any process.
- ``TorchDistributor, N processes`` (``local_mode=True``, ``use_gpu=False``, N = 1 and 2):
  ``TorchDistributor(...).run(train_fn, job)`` as the train job launches it, rank 0 logging through
  this process (:func:`jobs.training.relay.run_relayed`), torchrun started through the train job's own
  wrapper (:class:`jobs.training.launcher.LeanTorchDistributor`). Its fixed cost is its wall time minus the
  epochs' training loops (train_fn's ``epoch_seconds``, the all-reduce included): starting torchrun
  and the rank processes (Python, torch and ``jobs`` imports), the process-group init, each rank
  reading and encoding its share, rank 0 reading the holdout, evaluating it after every epoch and at
  the end and writing its log, the final broadcast and teardown, and this process logging the plots
  and the model. Creating the MLflow run (the driver's work in the training job) is not timed.
- ``torchrun, N processes`` (N = 1 and 2): what a user would pick instead of TorchDistributor, the
  same train_fn on the same job started by ``python -m torch.distributed.run --standalone --nnodes=1
  --nproc_per_node N -m benchmarks.torchrun_rank`` (the job and the result passed as JSON files), timed
  from the outside like TorchDistributor: its fixed cost is the same list less TorchDistributor's own
  work (pickling train_fn and the job, its process wrapper, reading the result back).
- with ``--use-gpu`` (on a GPU machine): the plain loop on ``cuda`` and TorchDistributor with
  ``use_gpu=True`` (NCCL, one process per GPU, at most 2). Local mode gives the ranks the GPUs the
  driver discovered, so the session is started with ``spark.driver.resource.gpu.amount`` and
  ``jobs/runtime/gpu_discovery.sh`` as the discovery script; where torch sees no CUDA device or that
  script finds no GPU, the benchmark stops with a non-zero exit, saying so (no CPU-only run passes
  for a GPU one). The GPU rows run first, as a group of their own whose figures are written before
  the CPU rows start (a lent machine may be taken back mid-way: ``scripts/gpu_verify.sh``);
  ``--rows gpu`` runs only them, ``--rows cpu`` only the CPU rows.

``--launch`` measures the launch cost alone: train_fn in this process (no launcher: what
``train.launcher: auto`` runs for a small CPU window), TorchDistributor and torchrun with 1 and 2 processes,
each launch split into its phases from the timing marks rank 0 writes
(:data:`jobs.training.loop.TIMING_MARKS_ENV`): to rank 0 entering train_fn (the launchers and the
rank's interpreter), the rank's imports, the process group, its share and the model, rank 0's log
opened (MLflow's import and run where rank 0 logs itself) and its holdout read, the epochs'
evaluation and logging beyond their loops, the final evaluation (with the plots and model where
rank 0 logs them), the teardown, the exit back to the launcher, and the launcher logging the plots
and the model (under the relay); and TorchDistributor again as pyspark launches it, through its own
wrapper process (code ``pyspark's wrapper`` in the launcher table, against the same torchrun rows).
``--before DIR`` adds
every launcher again with the ranks importing ``jobs`` from ``DIR`` instead (a copy of the code
before a change: ``git archive <commit> | tar -x -C DIR``), the two taking turns in one process on one
window: before and after on the same machine at the same time (code that writes no marks gets only
its time to the first step).

Throughput is labelled training rows x epochs / seconds in the training loops; with several processes,
rank 0's loop, which waits for the slowest rank in the all-reduce. Steady throughput leaves the first
epoch out (with more than one). Time to first step: from the launch to rank 0 entering its first
epoch (the plain loop: to its first epoch), read off the timestamp of the ``holdout_rows`` metric rank 0
logs just before it. The launcher overhead is the fixed cost (wall time minus the epochs' loops);
the target: TorchDistributor's at most 5 s, shown beside torchrun's as a ratio. Every contender runs once as a
warm-up and then ``--repeat`` times, the contenders taking turns; its run with the smallest wall time
counts. Ratios are against the plain loop with one thread: throughput (higher is faster) and wall time.
Prints the machine and Markdown tables (every contender; the launchers' overhead side by side) and
writes ``training.json`` (settings, setup times, every run's timings, the launchers) to ``--out``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import feature_lake, machine, throwaway_home
from benchmarks.harness import Turns, arguments, markdown_table, start, stopwatch, write_results
from jobs.config import days_ending, load_config
from jobs.datasets.land_flights import FIRST_DAY
from jobs.training.rank import RankConfig

DEFAULT_RUN_DATE = dt.date(2013, 1, 28)  # the training job's example run date
LOSS_TOLERANCE = 1e-4  # plain loop vs one rank: the same rows, batches and initial weights
PYSPARK_WRAPPER_CODE = "pyspark's wrapper"  # the launcher table's code of TorchDistributor launched as pyspark does
LAUNCHER_TARGET_S = 5.0  # TorchDistributor's launcher overhead (wall time less the epochs' loops) at most
REPO = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Timing:
    """One training run: what it trained on and where its time went."""

    train_rows: int
    epoch_seconds: list[float]
    wall_s: float
    train_loss: float
    roc_auc: float | None  # the holdout's, where the contender evaluates (train_fn does)
    first_step_s: float | None = None  # from the launch to the first epoch's first step
    phases: dict[str, float] = dataclasses.field(default_factory=dict)  # the launch's, from rank 0's marks

    @property
    def loop_s(self) -> float:
        return sum(self.epoch_seconds)

    @property
    def steady_samples_per_s(self) -> float:
        """Throughput without the first epoch (its warm-up), when there are others."""
        later = self.epoch_seconds[1:]
        return self.train_rows * len(later) / sum(later) if later else self.samples_per_s

    @property
    def fixed_s(self) -> float:
        return self.wall_s - self.loop_s

    @property
    def samples_per_s(self) -> float:
        return self.train_rows * len(self.epoch_seconds) / self.loop_s


@dataclasses.dataclass(frozen=True)
class Contender:
    name: str
    processes: int
    device: str
    batch_size: int
    precision: str
    run: Callable[[], Timing]
    launcher: str = ""  # "TorchDistributor" or "torchrun" (the rows the launcher table compares), "in_process"
    code: str = ""  # "before" (--before): the ranks run that copy of the code


def window(days: int | None, train_days: int, holdout_days: int) -> tuple[list[dt.date], list[dt.date]]:
    """(training days, holdout days) of the benchmark's window; the holdout keeps its share of ``days``."""
    if days is None:
        days = train_days + holdout_days
    if not 2 <= days <= 365:
        raise SystemExit(f"--days must be between 2 and 365, got {days}")
    holdout = max(1, round(days * holdout_days / (train_days + holdout_days)))
    run_date = max(DEFAULT_RUN_DATE, FIRST_DAY + dt.timedelta(days=days - 1))
    all_days = days_ending(run_date, days)
    return all_days[:-holdout], all_days[-holdout:]


def plain_loop(job: RankConfig, device: str, threads: int) -> Timing:
    """train_fn's data path and training loop in this process, without torch.distributed: the rows
    on the device once, ``job.precision`` (resolved as a rank resolves it), fused Adam on a GPU."""
    import numpy as np
    import torch

    from jobs.model.tabular import Preprocessor, build_model
    from jobs.training.data import epoch_batches, labelled_rows, place_shard, read_units, shard_units, step_count
    from jobs.training.steps import make_optimizer, make_scaler, resolve_precision, seed_epoch, train_steps

    started = time.perf_counter()
    torch.set_num_threads(threads)
    target = torch.device(device)
    precision = resolve_precision(job.precision, target)
    pre = Preprocessor.from_json(job.preprocessor)
    label = job.label
    wanted = [*pre.categorical, *pre.numeric, label]
    frame = labelled_rows(read_units(shard_units(job.train_dirs, 0, 1), wanted), wanted, label)
    cats, nums = (torch.from_numpy(a) for a in pre.encode(frame))
    cats, nums, labels = place_shard((cats, nums, torch.from_numpy(frame[label].to_numpy(np.float32))), target)
    torch.manual_seed(job.seed)  # the initial weights of every rank
    net = build_model(job.builder, pre, job.hyper).to(target)
    optimizer = make_optimizer(net.parameters(), job.learning_rate, target, job.weight_decay)
    scaler = make_scaler(precision, target)
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")

    epoch_seconds, first_step = [], None
    for epoch in range(job.epochs):
        epoch_started = time.perf_counter()
        if epoch == 0:
            first_step = epoch_started - started
        net.train()
        seed_epoch(job.seed, epoch, 0)  # rank 0's dropout masks
        steps = step_count(len(labels), job.batch_size)
        batches = epoch_batches(job.seed, epoch, 0, len(labels), steps, labels.device)  # rank 0's, one rank
        totals = train_steps(net, optimizer, loss_fn, batches, cats, nums, labels, target, precision, scaler)
        loss_sum, rows = totals.tolist()  # waits for the device, as a rank does at the epoch's end
        epoch_seconds.append(time.perf_counter() - epoch_started)
    return Timing(int(rows), epoch_seconds, time.perf_counter() - started, loss_sum / rows, None, first_step)


def new_job(job: RankConfig, experiment_id: str, use_gpu: bool) -> RankConfig:
    """The job with a fresh MLflow run for rank 0 to log to."""
    from jobs.tracking import client

    return job.replace(run_id=client().create_run(experiment_id).info.run_id, use_gpu=use_gpu)


# The launch's phases, from rank 0's timing marks (jobs.training.loop.train_rank): (name, from, to).
PHASES = (
    ("to train_fn", "launched", "entered"), ("rank imports", "entered", "imported"),
    ("process group", "imported", "group"), ("share and model", "group", "ready"),
    ("rank 0: its log opened, holdout read", "ready", "first_step"),
    ("epochs beyond their loops", "first_step", "trained"),
    ("final evaluation, plots, model", "trained", "logged"), ("teardown", "logged", "done"),
    ("exit to the launcher", "done", "ranks_returned"), ("launcher: plots, model", "ranks_returned", "returned"),
)


def phases(marks: dict[str, float], launched: float, returned: float, loop_s: float) -> dict[str, float]:
    """Seconds of each of :data:`PHASES` from rank 0's ``marks`` (``time.time()``), the launch and
    the return seen from outside; the epochs' phase less their training loops (its evaluation and
    logging). Empty without marks (code that writes none)."""
    if not marks:
        return {}
    # ranks_returned: when the relay's launch returned (before it logged the model); else at the end
    at = {"ranks_returned": returned, **marks, "launched": launched, "returned": returned}
    spans = {name: at[end] - at[start] for name, start, end in PHASES if start in at and end in at}
    if "epochs beyond their loops" in spans:
        spans["epochs beyond their loops"] -= loop_s
    return spans


@contextlib.contextmanager
def marks_file(code: str | None) -> Iterator[Path]:
    """A file for rank 0's timing marks (named in the ranks' environment, which they inherit) and,
    with ``code``, that folder first on the ranks' ``PYTHONPATH``: they import ``jobs`` from it."""
    from jobs.config import environment

    with tempfile.TemporaryDirectory(prefix="bench-marks-") as folder:
        path = Path(folder, "marks.json")
        values = {"PIPELINE_TRAINING_MARKS": str(path)}  # jobs.training.loop.TIMING_MARKS_ENV
        if code:
            values["PYTHONPATH"] = os.pathsep.join(filter(None, [code, os.environ.get("PYTHONPATH")]))
        with environment(**values):
            yield path


def read_marks(path: Path) -> dict[str, float]:
    """Rank 0's timing marks, where it wrote them."""
    return json.loads(path.read_text()) if path.exists() else {}


def finish(job: RankConfig, result: dict[str, Any] | None, wall_s: float, launched: float,
           marks: dict[str, float] | None = None) -> Timing:
    """The run's timing, read from outside: the wall time measured here, the rest from what rank 0
    logged to MLflow (``epoch_seconds`` and ``train_loss`` per epoch, ``train_rows``); the time to
    the first step from ``launched`` (``time.time()``) to the timestamp of ``holdout_rows``, which
    rank 0 logs as it enters the first epoch; the launch's :func:`phases` from rank 0's ``marks``."""
    from jobs.tracking import client

    if not result:
        raise RuntimeError("training returned no result from rank 0")
    mlflow_client = client()
    run = mlflow_client.get_run(job.run_id)
    if "resumed_from_epoch" in run.data.tags:
        raise RuntimeError(f"training resumed after epoch {run.data.tags['resumed_from_epoch']}: not a whole run")
    epoch_seconds = [m.value for m in sorted(mlflow_client.get_metric_history(job.run_id, "epoch_seconds"),
                                             key=lambda m: m.step)]
    entered = mlflow_client.get_metric_history(job.run_id, "holdout_rows")
    first_step = entered[0].timestamp / 1000 - launched if entered else None
    if marks and "first_step" in marks:
        first_step = marks["first_step"] - launched  # rank 0's own clock, not a logged metric's millisecond
    loop_s = sum(epoch_seconds)
    return Timing(int(run.data.metrics["train_rows"]), epoch_seconds, wall_s, run.data.metrics["train_loss"],
                  result["metrics"]["roc_auc"], first_step, phases(marks or {}, launched, launched + wall_s, loop_s))


def distributed(job: RankConfig, experiment_id: str, processes: int, use_gpu: bool, code: str | None = None,
                pyspark_wrapper: bool = False) -> Timing:
    """``TorchDistributor(...).run(train_fn, job)`` in local mode as the train job launches it
    (:class:`jobs.training.launcher.LeanTorchDistributor`), timed from the outside; with ``code``, the
    ranks import ``jobs`` from that folder (:func:`marks_file`), launched as that code did (pyspark's
    own ``TorchDistributor`` where it has no ``jobs/training/launcher.py``); ``pyspark_wrapper``:
    pyspark's own ``TorchDistributor`` (torchrun started through pyspark's wrapper process)."""
    from pyspark.ml.torch.distributor import TorchDistributor

    from jobs.training.launcher import LeanTorchDistributor
    from jobs.training.loop import train_fn

    job = new_job(job, experiment_id, use_gpu)
    through_pyspark = pyspark_wrapper or (code and not Path(code, "jobs", "training", "launcher.py").exists())
    kind = TorchDistributor if through_pyspark else LeanTorchDistributor
    distributor = kind(num_processes=processes, local_mode=True, use_gpu=use_gpu)
    with marks_file(code) as marks:
        launched, started, relayed = time.time(), time.perf_counter(), {}
        result = launch(job, lambda ready: distributor.run(train_fn, ready), code, relayed)
        wall_s = time.perf_counter() - started
        return finish(job, result, wall_s, launched, {**read_marks(marks), **relayed})


def launch(job: RankConfig, start: Any, code: str | None, marks: dict[str, float]) -> dict[str, Any] | None:
    """``start(job)`` as the train job launches ranks: rank 0 logging through this process
    (:func:`jobs.training.relay.run_relayed`, which adds ``ranks_returned`` to ``marks``); with
    ``code`` (the code before a change) as that code launched them."""
    from jobs.training.relay import run_relayed

    return start(job) if code else run_relayed(job, start, marks)


def torchrun(job: RankConfig, experiment_id: str, processes: int, code: str | None = None) -> Timing:
    """train_fn under ``python -m torch.distributed.run --standalone`` (:mod:`benchmarks.torchrun_rank`),
    without TorchDistributor, timed from the outside: the job file written, the ranks run, the result read.
    With ``code``, the ranks run that copy of the code (from its folder, which ``-m`` puts first)."""
    job = new_job(job, experiment_id, use_gpu=False)
    root = code or str(REPO)
    with marks_file(None) as marks, tempfile.TemporaryDirectory(prefix="bench-torchrun-") as folder:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        job_file, result_file = Path(folder, "job.json"), Path(folder, "result.json")
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                   f"--nproc_per_node={processes}", "-m", "benchmarks.torchrun_rank", str(job_file), str(result_file)]

        def start(ready: RankConfig) -> dict[str, Any] | None:
            text = json.loads(ready.to_json())
            if code:  # code from before the relay knows no events_dir
                text.pop("events_dir", None)
            job_file.write_text(json.dumps(text))
            done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                raise RuntimeError(f"torchrun failed ({done.returncode}):\n{done.stdout[-4000:]}\n"
                                   f"{done.stderr[-4000:]}")
            return json.loads(result_file.read_text())

        launched, started, relayed = time.time(), time.perf_counter(), {}
        result = launch(job, start, code, relayed)
        wall_s = time.perf_counter() - started
        return finish(job, result, wall_s, launched, {**read_marks(marks), **relayed})


def in_process(job: RankConfig, experiment_id: str) -> Timing:
    """train_fn in this process as the only rank of a gloo group: no processes started."""
    from jobs.training.driver import train_in_process

    job = new_job(job, experiment_id, use_gpu=False)
    launched, started = time.time(), time.perf_counter()
    result = train_in_process(job)
    return finish(job, result, time.perf_counter() - started, launched)


def gpu_conf(use_gpu: bool) -> tuple[int, dict[str, str]]:
    """(GPUs TorchDistributor may use, the session conf that lets the driver own them: the job's
    :func:`jobs.runtime.gpu.gpu_conf` for local mode, with the one discovery script). ``--use-gpu``
    on a machine where torch or Spark's discovery script sees no GPU stops the benchmark, saying
    so: GPU rows are never silently left out."""
    if not use_gpu:
        return 0, {}
    from jobs.runtime.gpu import gpu_conf as job_gpu_conf
    from jobs.runtime.gpu import require_cuda
    from jobs.training.resources import discovered_gpus

    require_cuda("The training benchmark's GPU rows (--use-gpu)", "run it without --use-gpu, or on a GPU machine")
    count = len(discovered_gpus())
    if not count:
        raise SystemExit("--use-gpu: jobs/runtime/gpu_discovery.sh finds no GPU, so Spark's driver cannot own one and "
                         "TorchDistributor cannot train on it: check nvidia-smi, or run without --use-gpu")
    return count, job_gpu_conf(local_mode=True, gpus=count)


def contenders(
    job: RankConfig, experiment_id: str, default_threads: int, gpu_batch: int, gpus: int | None,
    rows: str = "all", before: str | None = None,
) -> list[Contender]:
    """The benchmark's plan, in the order it runs. With ``gpus`` (None: no GPU rows) the GPU rows
    come first: the plain loop on cuda and TorchDistributor on up to that many GPUs, in fp32 and
    bf16, with ``gpu_batch``. Then the CPU rows, all with the job's batch size: the plain loop (the
    baseline), with one thread and with torch's default threads, train_fn in-process, TorchDistributor
    and torchrun with 1 and 2 processes. ``rows``: ``all``, ``gpu`` or ``cpu`` (those alone);
    ``launch``: the CPU launchers alone (train_fn in-process, what ``train.launcher`` ``auto`` runs for a
    small window, among them), and with ``before`` each of them again on that copy of the
    code (``code="before"``)."""
    cpu_batch = job.batch_size

    def on(batch_size: int, precision: str) -> RankConfig:
        return job.replace(batch_size=batch_size, precision=precision)

    entrants = []
    if gpus is not None and rows in ("all", "gpu"):
        for batch_size, precision in ((cpu_batch, "fp32"), (gpu_batch, "fp32"), (gpu_batch, "bf16")):
            gpu_job = on(batch_size, precision)
            entrants.append(Contender("plain loop", 1, "cuda", batch_size, precision,
                                      lambda j=gpu_job: plain_loop(j, "cuda", 1)))
        for n in (1, 2):
            if n > gpus:
                continue
            for precision in ("fp32", "bf16"):
                gpu_job = on(gpu_batch, precision)
                entrants.append(Contender(
                    f"TorchDistributor, {n} GPU{'s' if n > 1 else ''}", n, "cuda", gpu_batch, precision,
                    lambda n=n, j=gpu_job: distributed(j, experiment_id, n, use_gpu=True)))
    if rows == "gpu":
        return entrants
    cpu = on(cpu_batch, "fp32")
    if rows != "launch":
        entrants.append(Contender("plain loop, 1 thread", 1, "cpu", cpu_batch, "fp32",
                                  lambda: plain_loop(cpu, "cpu", 1)))
        if default_threads > 1:
            entrants.append(Contender(f"plain loop, {default_threads} threads", 1, "cpu", cpu_batch, "fp32",
                                      lambda: plain_loop(cpu, "cpu", default_threads)))
    # what train.launcher auto runs for a small CPU window: one rank in the job's own process
    entrants.append(Contender("train_fn in-process (no TorchDistributor)", 1, "cpu", cpu_batch, "fp32",
                              lambda: in_process(cpu, experiment_id), "in_process"))
    for code in [None, before] if rows == "launch" and before else [None]:
        tag = " (before)" if code else ""
        entrants += [
            *[Contender(f"TorchDistributor, {n} process{'es' if n > 1 else ''}{tag}", n, "cpu", cpu_batch, "fp32",
                        lambda n=n, c=code: distributed(cpu, experiment_id, n, use_gpu=False, code=c),
                        "TorchDistributor", "before" if code else "") for n in (1, 2)],
            # the same launch through pyspark's own wrapper process (what LeanTorchDistributor replaces)
            *([Contender(f"TorchDistributor, {n} process{'es' if n > 1 else ''}, pyspark's wrapper", n, "cpu",
                         cpu_batch, "fp32", lambda n=n: distributed(cpu, experiment_id, n, use_gpu=False,
                                                                    pyspark_wrapper=True),
                         "TorchDistributor", PYSPARK_WRAPPER_CODE) for n in (1, 2)] if rows == "launch" and not code
              else []),
            *[Contender(f"torchrun, {n} process{'es' if n > 1 else ''}{tag}", n, "cpu", cpu_batch, "fp32",
                        lambda n=n, c=code: torchrun(cpu, experiment_id, n, code=c), "torchrun",
                        "before" if code else "") for n in (1, 2)],
        ]
    return entrants


def summarize(entrants: list[Contender], runs: dict[int, list[Timing]]) -> list[dict[str, Any]]:
    """Each measured contender's best run (the smallest wall time) against the baseline's (the plain
    loop with one thread on the CPU, or the first contender measured where it is not), and every run."""
    measured = [i for i in range(len(entrants)) if runs.get(i)]
    rows_seen = {t.train_rows for i in measured for t in runs[i]}
    assert len(rows_seen) == 1, f"the contenders trained on different numbers of rows: {sorted(rows_seen)}"
    best = {i: min(runs[i], key=lambda t: t.wall_s) for i in measured}
    base = next((i for i in measured if entrants[i].name == "plain loop, 1 thread"), measured[0])
    baseline = best[base]
    # One rank on CPU sees the same rows, batches and initial weights as the plain loop, so the same
    # losses, as long as the plain loop still shuffles like train_fn; the work is the same either way.
    if entrants[base].name == "plain loop, 1 thread":
        for i in measured:
            contender = entrants[i]
            if contender.processes == 1 and contender.device == "cpu" and not contender.name.startswith("plain"):
                if abs(best[i].train_loss - baseline.train_loss) > LOSS_TOLERANCE:
                    print(f"note: {contender.name} ended with train loss {best[i].train_loss:.6f}, the plain loop "
                          f"with {baseline.train_loss:.6f}: their shuffling (or model) differs")
    results = []
    for i in measured:
        contender, t = entrants[i], best[i]
        results.append({
            "contender": contender.name, "processes": contender.processes, "device": contender.device,
            "batch_size": contender.batch_size, "precision": contender.precision,
            "roc_auc": None if t.roc_auc is None else round(t.roc_auc, 4),
            "train_rows": t.train_rows, "epochs": len(t.epoch_seconds),
            "launcher": contender.launcher, "code": contender.code or "this",
            "samples_per_s": round(t.samples_per_s), "steady_samples_per_s": round(t.steady_samples_per_s),
            "first_step_s": None if t.first_step_s is None else round(t.first_step_s, 2),
            "loop_s": round(t.loop_s, 3), "fixed_s": round(t.fixed_s, 2),
            "phases": {k: round(v, 2) for k, v in t.phases.items()},
            "wall_s": round(t.wall_s, 2), "train_loss": round(t.train_loss, 6),
            "baseline": entrants[base].name,
            "throughput_ratio": round(t.samples_per_s / baseline.samples_per_s, 2),
            "wall_ratio": round(t.wall_s / baseline.wall_s, 1),
            "runs": [{"wall_s": r.wall_s, "epoch_seconds": r.epoch_seconds, "train_loss": r.train_loss,
                      "first_step_s": r.first_step_s, "phases": r.phases} for r in runs[i]],
        })
    return results


def launchers(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per code (this, or before with ``--before``) and process count on the CPU: TorchDistributor's
    launcher overhead (fixed cost) against torchrun's, as a ratio and a difference, and whether it
    meets :data:`LAUNCHER_TARGET_S`."""
    fixed = {(r["code"], r["launcher"], r["processes"]): r for r in results if r["launcher"] and r["device"] == "cpu"}
    out = []
    for code, _, processes in sorted({(c, "", n) for c, _, n in fixed},
                                     key=lambda k: (k[0] != "before", k[0] != PYSPARK_WRAPPER_CODE, k[2])):
        distributor = fixed.get((code, "TorchDistributor", processes))
        # pyspark's wrapper: against this code's torchrun (the same ranks)
        standalone = fixed.get(("this" if code == PYSPARK_WRAPPER_CODE else code, "torchrun", processes))
        if not (distributor and standalone):
            continue
        out.append({
            "code": code, "processes": processes,
            "torch_distributor_s": distributor["fixed_s"], "torchrun_s": standalone["fixed_s"],
            "ratio": round(distributor["fixed_s"] / standalone["fixed_s"], 2),
            "difference_s": round(distributor["fixed_s"] - standalone["fixed_s"], 2),
            "first_step_s": {"TorchDistributor": distributor["first_step_s"], "torchrun": standalone["first_step_s"]},
            "target_s": LAUNCHER_TARGET_S, "met": distributor["fixed_s"] <= LAUNCHER_TARGET_S,
        })
    return out


def plan(entrants: list[Contender]) -> list[str]:
    """The rows in the order they run: name, device, batch and precision."""
    return [f"{c.name} ({c.device}, batch {c.batch_size}, {c.precision})" for c in entrants]


def groups(entrants: list[Contender]) -> list[list[int]]:
    """The contenders' indices in the groups they are measured in, in order: the GPU rows (taking
    turns among themselves), then the CPU rows; each group's figures are written when it ends."""
    return [g for g in ([i for i, c in enumerate(entrants) if c.device == "cuda"],
                        [i for i, c in enumerate(entrants) if c.device != "cuda"]) if g]


def report(out: Path, results: list[dict[str, Any]], payload: dict[str, Any], heading: str) -> None:
    """Print the tables of what was measured so far and write ``training.json``."""
    overhead = launchers(results)
    print(heading)
    print()
    print(markdown_table(
        ["contender", "device", "batch", "precision", "samples/s (loop)", "steady samples/s", "throughput vs plain",
         "time to first step", "fixed cost (launcher overhead)", "total wall", "wall vs plain", "holdout ROC AUC"],
        [[r["contender"], r["device"], r["batch_size"], r["precision"], f"{r['samples_per_s']:,}",
          f"{r['steady_samples_per_s']:,}", f"{r['throughput_ratio']}x",
          "-" if r["first_step_s"] is None else f"{r['first_step_s']} s", f"{r['fixed_s']} s", f"{r['wall_s']} s",
          f"{r['wall_ratio']}x", "-" if r["roc_auc"] is None else f"{r['roc_auc']:.3f}"] for r in results],
    ))
    if overhead:
        print()
        print(markdown_table(
            ["code", "processes", "TorchDistributor launcher overhead", "torchrun launcher overhead",
             "TorchDistributor / torchrun", "difference", f"target: TorchDistributor <= {LAUNCHER_TARGET_S:g} s"],
            [[o["code"], o["processes"], f"{o['torch_distributor_s']} s", f"{o['torchrun_s']} s", f"{o['ratio']}x",
              f"{o['difference_s']} s", "met" if o["met"] else "not met"] for o in overhead],
        ))
    phased = [r for r in results if r["phases"]]
    if phased:
        print()
        names = [name for name, _, _ in PHASES]
        print(markdown_table(
            ["contender", *names, "first step", "fixed cost"],
            [[r["contender"], *(f"{r['phases'][n]:.2f} s" if n in r["phases"] else "-" for n in names),
              f"{r['first_step_s']} s", f"{r['fixed_s']} s"] for r in phased],
        ))
    print(flush=True)
    write_results(out, "training", {**payload, "timings": results, "launchers": overhead})


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__)
    parser.add_argument("--days", type=int, default=None, help="window length (default: train + holdout days)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs each contender trains (default: train.epochs)")
    parser.add_argument("--use-gpu", action="store_true", help="also train on the GPU (on a GPU machine): first")
    parser.add_argument("--rows", choices=("all", "gpu", "cpu"), default="all",
                        help="with --use-gpu: the GPU rows alone (gpu), the CPU rows alone (cpu), or both, GPU first")
    parser.add_argument("--launch", action="store_true",
                        help="the launch cost alone: TorchDistributor and torchrun, 1 and 2 processes, by phase")
    parser.add_argument("--before", default=None,
                        help="with --launch: a copy of the code before a change; its launchers take turns with these")
    args = parser.parse_args(argv)
    if args.rows == "gpu" and not args.use_gpu:
        parser.error("--rows gpu needs --use-gpu")
    if args.before and not args.launch:
        parser.error("--before goes with --launch")
    if args.before and not Path(args.before, "jobs", "training", "loop.py").exists():
        parser.error(f"--before {args.before}: no jobs/training/loop.py there (git archive <commit> | tar -x -C DIR)")
    out = start(args.out)

    # Rank processes inherit the environment: they log to the same throw-away store.
    home = throwaway_home("bench-training-")
    from jobs.config import tracking_uri
    from jobs.runtime.session import get_spark
    from jobs.tracking import ensure_experiment
    from jobs.training.data import feature_dirs, fit_preprocessor

    host = machine()
    default_threads = host["torch_default_threads"]
    config = load_config()
    cfg = config.train
    train_days, holdout_days = window(args.days, cfg.train_days, cfg.holdout_days)
    days = train_days + holdout_days
    epochs = args.epochs or cfg.epochs
    use_gpu = args.use_gpu and args.rows != "cpu" and not args.launch
    gpus, spark_gpu_conf = gpu_conf(use_gpu)

    setup: dict[str, float] = {}
    spark = get_spark("bench-training", {"spark.master": "local[2]", "spark.ui.enabled": "false", **spark_gpu_conf})
    # The days before the window too, so the row-count band of its first days has trailing days.
    first = max(FIRST_DAY, days[0] - dt.timedelta(days=config.validation.defaults.band_days))
    lake = feature_lake(spark, home, config, first, days, setup)
    with stopwatch(setup, "fit_preprocessor_s"):
        train_dirs, holdout_dirs = feature_dirs(spark, lake, train_days), feature_dirs(spark, lake, holdout_days)
        features = spark.read.option("basePath", lake.features).parquet(*train_dirs)
        pre = fit_preprocessor(features, config.features, cfg.min_category_count)
    experiment_id = ensure_experiment("bench-training")

    # The train job's rank config on the CPU; every contender opens its own MLflow run (new_job).
    job = RankConfig.build(dataclasses.replace(cfg, epochs=epochs, use_gpu=False), config.features.label, pre,
                           train_dirs, holdout_dirs, run_id="", tracking_uri=tracking_uri())
    cpu_batch, gpu_batch = cfg.batch_size, cfg.gpu_batch_size
    entrants = contenders(job, experiment_id, default_threads, gpu_batch, gpus if use_gpu else None,
                          "launch" if args.launch else args.rows, args.before)
    settings = {
        "train_days": [str(train_days[0]), str(train_days[-1]), len(train_days)],
        "holdout_days": [str(holdout_days[0]), str(holdout_days[-1]), len(holdout_days)],
        "epochs": epochs, "batch_size": cpu_batch, "gpu_batch_size": gpu_batch, "learning_rate": cfg.learning_rate,
        "hyper": job.hyper, "repeat": args.repeat, "use_gpu": use_gpu, "rows": args.rows, "launch": args.launch,
        "before": Path(args.before).name if args.before else None,  # no path of this machine in a report
    }
    payload = {"machine": host, "settings": settings, "setup_s": {k: round(v, 2) for k, v in setup.items()}}
    print(f"machine: {host['cpu_count']} CPUs, {host['device']}, torch {host['torch']} "
          f"({default_threads} default threads), pyspark {host['pyspark']}")
    print(f"plan, in order: {'; '.join(plan(entrants))}", flush=True)
    runs: dict[int, list[Timing]] = {}
    for group in groups(entrants):
        runs.update(Turns(args.repeat).measure({i: entrants[i].run for i in group}))
        results = summarize(entrants, runs)
        report(out, results, payload, (
            f"window: train {train_days[0]}..{train_days[-1]} ({len(train_days)} days), holdout {holdout_days[0]}.."
            f"{holdout_days[-1]}; {results[0]['train_rows']:,} labelled training rows, "
            f"{epochs} epoch{'s' * (epochs != 1)}, batch {cpu_batch} on the CPU, {gpu_batch} on a GPU; "
            f"best of {args.repeat} after a warm-up; measured so far: "
            f"{', '.join(sorted({entrants[i].device for i in runs}))}"))
    spark.stop()
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()

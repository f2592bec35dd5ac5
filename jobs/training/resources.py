"""How many ranks a training runs, who starts them, and the Spark settings that give them GPUs."""

from __future__ import annotations

import json


def discovered_gpus() -> list[str]:
    """The GPU addresses Spark will see on this machine: what the one discovery script
    (``jobs/runtime/gpu_discovery.sh``) reports, read before the session starts."""
    import subprocess

    from jobs.runtime.gpu import GPU_DISCOVERY_SCRIPT

    out = subprocess.run([GPU_DISCOVERY_SCRIPT], check=True, capture_output=True, text=True).stdout
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
            "GPU training was asked for (train.use_gpu / --use-gpu true) but jobs/runtime/gpu_discovery.sh finds "
            "no GPU on this machine (nvidia-smi lists none, or is missing): train with --use-gpu false, or on a "
            "machine with GPUs"
        )
    return len(gpus)


IN_PROCESS, TORCH_DISTRIBUTOR = "in_process", "torch_distributor"


def choose_launcher(setting: str, *, use_gpu: bool, local_mode: bool, labelled_rows: int,
                    max_rows: int) -> tuple[str, str]:
    """Who runs the ranks (``train.launcher``), and why, in words for the job's log.

    ``in_process``: one rank, in the train job's own process (:func:`jobs.training.driver.train_in_process`):
    no processes started, none of torchrun's or the ranks' imports of torch, pandas, pyarrow and
    ``jobs`` (a fixed cost of seconds, larger than a month's window's training: docs/bench/training.md).
    ``torch_distributor``: ``train.num_processes`` ranks (one per GPU) through TorchDistributor, in
    local mode or as a barrier stage on the cluster. ``auto`` takes ``in_process`` for a CPU training in local mode
    whose window holds at most ``max_rows`` labelled rows (``train.in_process_max_rows``), and
    TorchDistributor otherwise: a GPU, a cluster, or a window big enough that more ranks pay."""
    if setting == TORCH_DISTRIBUTOR:
        return TORCH_DISTRIBUTOR, "train.launcher torch_distributor"
    if setting == IN_PROCESS:
        return IN_PROCESS, "train.launcher in_process"
    if use_gpu:
        return TORCH_DISTRIBUTOR, "auto: a GPU training (one rank per GPU)"
    if not local_mode:
        return TORCH_DISTRIBUTOR, "auto: the ranks run on the cluster (train.local_mode false)"
    if labelled_rows > max_rows:
        return TORCH_DISTRIBUTOR, (f"auto: {labelled_rows:,} labelled rows, more than "
                                   f"train.in_process_max_rows {max_rows:,}")
    return IN_PROCESS, (f"auto: {labelled_rows:,} labelled rows, at most train.in_process_max_rows {max_rows:,}: "
                        "one rank in this process, no processes to start")


def rank_data_path(setting: str, launcher: str, labelled_rows: int, max_rows: int) -> str:
    """``train.data_path`` as the ranks get it: ``auto`` becomes ``memory`` for the one rank in the
    job's own process when the window holds at most ``train.in_process_max_rows`` labelled rows,
    which bound its memory already: streaming such a window only costs time (measured side by side:
    docs/studies/2026-11-27-a-ranks-share-in-memory-or-streamed.md). Otherwise the setting as it is
    (``auto``: by the share's size
    against ``train.buffer_rows``, :func:`jobs.training.stream.resolve_data_path`)."""
    if setting == "auto" and launcher == IN_PROCESS and labelled_rows <= max_rows:
        return "memory"
    return setting


def gpu_resources(local_mode: bool, num_processes: int) -> dict[str, str]:
    """:func:`jobs.runtime.gpu.gpu_conf` for this training, less what spark-submit already set."""
    from pyspark import SparkConf

    from jobs.runtime.gpu import gpu_conf

    submitted = SparkConf()
    return {k: v for k, v in gpu_conf(local_mode, num_processes if local_mode else 1).items()
            if not submitted.contains(k)}

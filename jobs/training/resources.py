"""How many ranks a training runs, and the Spark settings that give them GPUs."""

from __future__ import annotations

import json


def discovered_gpus() -> list[str]:
    """The GPU addresses Spark will see on this machine: what the one discovery script
    (``jobs/lake/gpu_discovery.sh``) reports, read before the session starts."""
    import subprocess

    from jobs.lake.spark import GPU_DISCOVERY_SCRIPT

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
            "GPU training was asked for (train.use_gpu / --use-gpu true) but jobs/lake/gpu_discovery.sh finds no GPU "
            "on this machine (nvidia-smi lists none, or is missing): train with --use-gpu false, or on a machine "
            "with GPUs"
        )
    return len(gpus)


def gpu_resources(local_mode: bool, num_processes: int) -> dict[str, str]:
    """:func:`jobs.lake.spark.gpu_conf` for this training, less what spark-submit already set."""
    from pyspark import SparkConf

    from jobs.lake.spark import gpu_conf

    submitted = SparkConf()
    return {k: v for k, v in gpu_conf(local_mode, num_processes if local_mode else 1).items()
            if not submitted.contains(k)}

"""The GPUs a job's Spark asks for: the resource settings that give TorchDistributor's ranks one
GPU each, found by the one discovery script beside this module (``gpu_discovery.sh``), and the
check that torch sees CUDA before a GPU run starts."""

from __future__ import annotations

import os
from pathlib import Path

GPU_DISCOVERY_SCRIPT = str(Path(__file__).resolve().with_name("gpu_discovery.sh"))


def gpu_conf(local_mode: bool, gpus: int, discovery_script: str = GPU_DISCOVERY_SCRIPT) -> dict[str, str]:
    """The resource settings TorchDistributor needs to put one rank on each GPU.

    ``local_mode``: the ranks run on the driver, which must own ``gpus`` GPUs (Spark's local master
    cannot schedule GPUs to tasks). Otherwise each executor owns ``gpus`` GPUs and each barrier task
    (one rank) takes one; a standalone worker must advertise its GPUs too (see the script).
    """
    if gpus < 1:
        raise ValueError(f"GPU training needs at least one GPU, got {gpus}")
    if local_mode:
        return {
            "spark.driver.resource.gpu.amount": str(gpus),
            "spark.driver.resource.gpu.discoveryScript": discovery_script,
        }
    return {
        "spark.executor.resource.gpu.amount": str(gpus),
        "spark.executor.resource.gpu.discoveryScript": discovery_script,
        "spark.task.resource.gpu.amount": "1",
    }


def require_cuda(asked: str, advice: str) -> None:
    """Fail now, saying so, when ``asked`` (a GPU run of a job, in words) finds no CUDA device for
    torch on this machine: a job asked for a GPU never falls back to the CPU without a word."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            f"{asked} was asked for, but torch sees no CUDA device on this machine (torch {torch.__version__}, "
            f"CUDA build: {torch.version.cuda or 'no'}, CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', '(not set)')}): {advice}"
        )

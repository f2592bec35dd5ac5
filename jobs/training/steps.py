"""The step primitives of a training rank: its device and precision, the model as it trains (DDP or
not), the optimizer, the loss scaler, the learning rate of a step, the training steps themselves and
the seeds of an epoch. The rank's program (:mod:`jobs.training.loop`) puts them together; the
benchmarks and studies call them alone."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


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

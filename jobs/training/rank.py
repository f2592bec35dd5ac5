"""The typed contract of a training rank: :class:`RankConfig`, everything one rank of
:func:`jobs.training.loop.train_fn` receives, built in one place (:meth:`RankConfig.build`) for the
train job, the training benchmark and the tests.

Frozen and plain data (strings, numbers, tuples, a dict of hyperparameters), so it pickles to the
ranks TorchDistributor starts, and goes through JSON for the ranks torchrun starts
(:meth:`RankConfig.to_json`, :meth:`RankConfig.from_json`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from jobs.config import TrainSpec
    from jobs.model.tabular import Preprocessor


def batch_size(train: TrainSpec) -> int:
    """A rank's batch size: ``train.gpu_batch_size`` on GPUs, ``train.batch_size`` on the CPU."""
    return train.gpu_batch_size if train.use_gpu else train.batch_size


@dataclass(frozen=True)
class RankConfig:
    """What every rank of a training needs, and nothing it must look up itself.

    ``run_id``: the MLflow run rank 0 logs to (at ``tracking_uri``); ``preprocessor``: the fitted
    :class:`jobs.model.tabular.Preprocessor` as JSON; ``train_dirs`` and ``holdout_dirs``: the
    feature partitions (lake paths) each rank reads its share of, and rank 0 evaluates on;
    ``builder`` and ``hyper``: the model (``train.model``) and its hyperparameters; ``precision``:
    ``train.precision`` (``auto`` resolved by the rank, :func:`jobs.training.steps.resolve_precision`);
    ``checkpoint_dir``: where rank 0 saves every epoch (None: no checkpoints);
    ``collective_timeout_s``: how long a rank waits in a collective for a dead peer;
    ``data_path``, ``buffer_rows``, ``read_ahead``, ``read_batch_rows``: how a rank reads its share
    (``train.data_path``, :mod:`jobs.training.stream`); ``arrow_memory_pool`` and
    ``malloc_mmap_threshold``: how the rank's process allocates memory (``train.arrow_memory_pool``,
    ``train.malloc_mmap_threshold``, :mod:`jobs.training.allocation`); ``validation_dirs`` and
    ``calibration``: the validation days' partitions rank 0 fits the model's calibration on before
    logging it, and how (``train.calibration``, :mod:`jobs.model.calibration`); ``lr_schedule``: the
    learning rate over the steps (``train.lr_schedule``); ``keep_best_epoch`` and
    ``selection_metric``: rank 0 scores the validation days after every epoch and logs the best
    epoch's net (``train.keep_best_epoch``, by ``train.promotion_metric``); ``events_dir``:
    where rank 0 writes what it logs, for the launching process to forward to MLflow
    (:mod:`jobs.training.relay`; None: rank 0 logs to MLflow itself).
    """

    run_id: str
    tracking_uri: str
    preprocessor: str
    train_dirs: tuple[str, ...]
    holdout_dirs: tuple[str, ...]
    label: str
    builder: str
    hyper: dict[str, Any]
    epochs: int
    batch_size: int
    learning_rate: float
    seed: int
    precision: str
    use_gpu: bool
    collective_timeout_s: float
    threads_per_process: int = 1  # torch threads in each rank: the ranks share the machine's cores
    checkpoint_dir: str | None = None
    data_path: str = "auto"  # memory | stream | auto (jobs.training.stream.resolve_data_path)
    buffer_rows: int = 65536
    read_ahead: int = 2
    read_batch_rows: int = 16384
    arrow_memory_pool: str = "system"  # system | mimalloc | jemalloc | default (train.arrow_memory_pool)
    malloc_mmap_threshold: int = 1048576  # bytes (train.malloc_mmap_threshold; 0: glibc's default)
    weight_decay: float = 0.0  # AdamW's (train.weight_decay)
    lr_schedule: str = "constant"  # train.lr_schedule (jobs.training.steps.learning_rate_at)
    keep_best_epoch: bool = False  # train.keep_best_epoch: rank 0 keeps the epoch best on the validation days
    selection_metric: str = "roc_auc"  # by which metric (train.promotion_metric)
    validation_dirs: tuple[str, ...] = ()
    calibration: str = "none"  # none | temperature (train.calibration)
    events_dir: str | None = None  # set by jobs.training.relay.run_relayed

    def __post_init__(self) -> None:
        # Lists (from JSON, or a caller's) become tuples: the contract stays immutable.
        object.__setattr__(self, "train_dirs", tuple(self.train_dirs))
        object.__setattr__(self, "holdout_dirs", tuple(self.holdout_dirs))
        object.__setattr__(self, "validation_dirs", tuple(self.validation_dirs))
        object.__setattr__(self, "hyper", dict(self.hyper))
        if not self.train_dirs:
            raise ValueError("a training rank needs at least one training partition (train_dirs is empty)")
        from jobs.config import (
            CALIBRATIONS,
            DATA_PATHS,
            LR_SCHEDULES,
            PROMOTION_METRICS,
            check_arrow_memory_pool,
            check_mmap_threshold,
        )

        if self.data_path not in DATA_PATHS:
            raise ValueError(f"RankConfig.data_path must be one of {', '.join(DATA_PATHS)}, got {self.data_path!r}")
        check_arrow_memory_pool(self.arrow_memory_pool, "RankConfig.arrow_memory_pool")
        check_mmap_threshold(self.malloc_mmap_threshold, "RankConfig.malloc_mmap_threshold")
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"RankConfig.calibration must be one of {', '.join(CALIBRATIONS)}, "
                             f"got {self.calibration!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"RankConfig.lr_schedule must be one of {', '.join(LR_SCHEDULES)}, "
                             f"got {self.lr_schedule!r}")
        if self.selection_metric not in PROMOTION_METRICS:
            raise ValueError(f"RankConfig.selection_metric must be one of {', '.join(PROMOTION_METRICS)}, "
                             f"got {self.selection_metric!r}")
        for name in ("epochs", "batch_size", "threads_per_process", "buffer_rows", "read_ahead", "read_batch_rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"RankConfig.{name} must be at least 1, got {getattr(self, name)}")

    @classmethod
    def build(
        cls, train: TrainSpec, label: str, preprocessor: Preprocessor, train_dirs: Iterable[str],
        holdout_dirs: Iterable[str], *, run_id: str, tracking_uri: str, checkpoint_dir: str | None = None,
        validation_dirs: Iterable[str] = (),
    ) -> RankConfig:
        """The ranks' config of a training with ``train`` (the ``train:`` settings, the run's
        overrides applied), the batch size by the device (:func:`batch_size`). The one place a rank's
        config is made from the pipeline's."""
        return cls(
            run_id=run_id, tracking_uri=tracking_uri, preprocessor=preprocessor.to_json(),
            train_dirs=tuple(train_dirs), holdout_dirs=tuple(holdout_dirs), label=label, builder=train.model,
            hyper=dict(train.hyperparameters), epochs=train.epochs,
            batch_size=batch_size(train),
            learning_rate=train.learning_rate, seed=train.seed, precision=train.precision, use_gpu=train.use_gpu,
            collective_timeout_s=train.collective_timeout_s, checkpoint_dir=checkpoint_dir,
            data_path=train.data_path, buffer_rows=train.buffer_rows, read_ahead=train.read_ahead,
            read_batch_rows=train.read_batch_rows, arrow_memory_pool=train.arrow_memory_pool,
            malloc_mmap_threshold=train.malloc_mmap_threshold,
            weight_decay=train.weight_decay, validation_dirs=tuple(validation_dirs), calibration=train.calibration,
            lr_schedule=train.lr_schedule, keep_best_epoch=train.keep_best_epoch,
            selection_metric=train.promotion_metric,
        )

    def replace(self, **changes: Any) -> RankConfig:
        """A copy with ``changes`` (another run, device, batch size or precision)."""
        return dataclasses.replace(self, **changes)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RankConfig:
        return cls(**json.loads(text))

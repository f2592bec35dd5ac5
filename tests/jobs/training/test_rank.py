"""The training rank's typed contract: built from the config in one place, frozen, and the same
after pickling (TorchDistributor) and after JSON (torchrun)."""

from __future__ import annotations

import dataclasses
import pickle

import cloudpickle
import pytest

from jobs.model.tabular import Preprocessor
from jobs.training.rank import RankConfig

PRE = Preprocessor(categorical=["carrier"], numeric=["distance"], vocab={"carrier": ["AA", "UA"]},
                   mean={"distance": 900.0}, std={"distance": 500.0})


def built(config, **train) -> RankConfig:
    return RankConfig.build(dataclasses.replace(config.train, **train), config.features.label, PRE,
                            ["lake/features/a", "lake/features/b"], ["lake/features/c"], run_id="run-1",
                            tracking_uri="sqlite:///mlflow.db", checkpoint_dir="lake/checkpoints/x")


def test_the_rank_config_is_the_train_settings_with_the_batch_size_of_its_device(config):
    cfg = config.train
    job = built(config)
    assert (job.epochs, job.learning_rate, job.seed, job.builder, job.hyper) == (
        cfg.epochs, cfg.learning_rate, cfg.seed, cfg.model, dict(cfg.hyperparameters))
    assert (job.precision, job.collective_timeout_s, job.use_gpu) == (cfg.precision, cfg.collective_timeout_s,
                                                                      cfg.use_gpu)
    assert job.label == config.features.label and Preprocessor.from_json(job.preprocessor) == PRE
    assert job.train_dirs == ("lake/features/a", "lake/features/b") and job.holdout_dirs == ("lake/features/c",)
    assert job.run_id == "run-1" and job.checkpoint_dir == "lake/checkpoints/x" and job.threads_per_process == 1
    assert (job.data_path, job.buffer_rows, job.read_ahead) == (cfg.data_path, cfg.buffer_rows, cfg.read_ahead)
    streaming = built(config, data_path="stream", buffer_rows=1000, read_ahead=3)
    assert (streaming.data_path, streaming.buffer_rows, streaming.read_ahead) == ("stream", 1000, 3)
    assert (job.read_batch_rows, job.arrow_memory_pool) == (cfg.read_batch_rows, cfg.arrow_memory_pool)
    assert cfg.arrow_memory_pool == "system"  # the shipped config's: the flatter peak (docs/bench/scale.md)
    assert job.malloc_mmap_threshold == cfg.malloc_mmap_threshold == 1 << 20
    pooled = built(config, read_batch_rows=512, arrow_memory_pool="mimalloc", malloc_mmap_threshold=0)
    assert (pooled.read_batch_rows, pooled.arrow_memory_pool, pooled.malloc_mmap_threshold) == (512, "mimalloc", 0)
    assert built(config, use_gpu=False).batch_size == cfg.batch_size
    on_gpu = built(config, use_gpu=True)
    assert on_gpu.batch_size == cfg.gpu_batch_size != cfg.batch_size and on_gpu.use_gpu


def test_the_rank_config_is_frozen_and_survives_pickle_and_json(config):
    job = built(config)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.epochs = 1  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(job)) == job
    assert cloudpickle.loads(cloudpickle.dumps(job)) == job  # what TorchDistributor uses
    assert RankConfig.from_json(job.to_json()) == job  # what torchrun's ranks read
    changed = job.replace(run_id="run-2", precision="bf16")
    assert (changed.run_id, changed.precision, job.run_id) == ("run-2", "bf16", "run-1")


def test_a_rank_config_without_training_partitions_or_epochs_is_refused(config):
    with pytest.raises(ValueError, match="at least one training partition"):
        built(config).replace(train_dirs=[])
    with pytest.raises(ValueError, match="epochs must be at least 1"):
        built(config).replace(epochs=0)


def test_a_data_path_buffer_or_memory_pool_the_rank_cannot_use_is_refused(config):
    with pytest.raises(ValueError, match="data_path\n.*'auto', 'memory' or 'stream'"):
        dataclasses.replace(config.train, data_path="disk")
    with pytest.raises(ValueError, match="buffer_rows\n.*greater than or equal to 1"):
        dataclasses.replace(config.train, buffer_rows=0)
    with pytest.raises(ValueError, match="data_path must be one of"):
        built(config).replace(data_path="disk")
    with pytest.raises(ValueError, match="read_ahead must be at least 1"):
        built(config).replace(read_ahead=0)
    with pytest.raises(ValueError, match="read_batch_rows\n.*greater than or equal to 1"):
        dataclasses.replace(config.train, read_batch_rows=0)
    with pytest.raises(ValueError, match="arrow_memory_pool\n.*'system', 'mimalloc', 'jemalloc' or 'default'"):
        dataclasses.replace(config.train, arrow_memory_pool="tcmalloc")
    with pytest.raises(ValueError, match="arrow_memory_pool must be one of"):
        built(config).replace(arrow_memory_pool="tcmalloc")
    with pytest.raises(ValueError, match="malloc_mmap_threshold\n.*greater than or equal to 0"):
        dataclasses.replace(config.train, malloc_mmap_threshold=-1)
    with pytest.raises(ValueError,
                       match="RankConfig.malloc_mmap_threshold must be between 0 .glibc's default. and 33554432 bytes"):
        built(config).replace(malloc_mmap_threshold=64 << 20)

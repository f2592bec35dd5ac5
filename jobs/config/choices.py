"""The closed sets of values the config's settings choose from: the schema validates against them and
the stages import them from here (the config package imports no stage)."""

from __future__ import annotations

from jobs.metrics import CATALOGUE, REALIZED

PRECISIONS = ("auto", "bf16", "fp16", "fp32")  # train.precision: arithmetic of the training steps
DATA_PATHS = ("auto", "memory", "stream")  # train.data_path: how a rank reads its share
LAUNCHERS = ("auto", "torch_distributor", "in_process")  # train.launcher: who runs the ranks
LR_SCHEDULES = ("constant", "cosine")  # train.lr_schedule: the learning rate over a training's steps
ARROW_MEMORY_POOLS = ("system", "mimalloc", "jemalloc", "default")  # train.arrow_memory_pool
CALIBRATIONS = ("none", "temperature")  # train.calibration
MAX_MMAP_THRESHOLD = 32 * 1024 * 1024  # train.malloc_mmap_threshold: glibc's ceiling on 64-bit
# train.promotion_metric: what the gate, the bar and the sweep's choice compare: the catalogue's
# metrics with a direction, but accuracy (at a fixed 0.5 threshold it judges no probability model)
PROMOTION_METRICS = tuple(m for m, found in CATALOGUE.items() if found.lower_is_better is not None and m != "accuracy")
# monitoring.decay.metric: a served day's metrics with a direction
REALIZED_METRICS = tuple(m for m in REALIZED if CATALOGUE[m].lower_is_better is not None)
EVIDENCE = ("holdout", "live")  # monitoring.promotion_evidence: what makes a gate's winner champion
FAMILIES = ("mlp", "xgboost")  # sweep.families
BASELINE_KINDS = ("logistic_regression", "gbt")  # baselines[].kind
VALIDATION_F1 = "validation_f1"  # evaluation.threshold: the F1-best threshold on the validation days
DEFAULT_MODEL = "jobs.model.tabular:build_net"  # train.model
# An xgboost candidate's params where the config names none (XGBoost's scikit-learn names); a param
# set of sweep.xgboost is laid over them.
XGBOOST_DEFAULTS = {"n_estimators": 300, "max_depth": 6, "learning_rate": 0.05, "subsample": 0.8,
                    "colsample_bytree": 0.8, "min_child_weight": 5.0}


def check_arrow_memory_pool(name: str, what: str = "train.arrow_memory_pool") -> None:
    """A ValueError naming ``what`` unless ``name`` is one of :data:`ARROW_MEMORY_POOLS`."""
    if name not in ARROW_MEMORY_POOLS:
        raise ValueError(f"{what} must be one of {', '.join(ARROW_MEMORY_POOLS)}, got {name!r}")


def check_mmap_threshold(nbytes: int, what: str = "train.malloc_mmap_threshold") -> None:
    """A ValueError naming ``what`` unless ``nbytes`` is a threshold glibc takes (0: its default)."""
    if not 0 <= nbytes <= MAX_MMAP_THRESHOLD:
        raise ValueError(f"{what} must be between 0 (glibc's default) and {MAX_MMAP_THRESHOLD} bytes "
                         f"(glibc's ceiling), got {nbytes}")

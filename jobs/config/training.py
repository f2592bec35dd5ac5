"""What a training does and compares: the ``train`` section (window, net, launch, gate), the evaluation
report, the MLlib baselines every candidate must beat, and the sweep's space."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator, model_validator

from jobs.config.base import section, setting
from jobs.config.choices import (
    ARROW_MEMORY_POOLS,
    BASELINE_KINDS,
    CALIBRATIONS,
    DATA_PATHS,
    DEFAULT_MODEL,
    FAMILIES,
    LAUNCHERS,
    LR_SCHEDULES,
    MAX_MMAP_THRESHOLD,
    PRECISIONS,
    PROMOTION_METRICS,
    VALIDATION_F1,
    XGBOOST_DEFAULTS,
)

# The default model's hyperparameters; a config's are laid over them when train.model is the default.
NET_HYPERPARAMETERS: dict[str, Any] = {"embedding_dim": 6, "hidden_units": [32, 32], "dropout": 0.3,
                                       "wide": "onehot", "members": 2}


def _choice(values: tuple[str, ...]) -> Any:
    return Literal[values]  # type: ignore[valid-type]


@section
class TrainSpec:
    """The ``train`` section: the window, the net and its training, who runs the ranks, the gate."""

    model_name: str = setting(doc="the registered model's name in MLflow")
    experiment: str = setting(doc="the MLflow experiment of the pipeline's runs")
    train_days: int = setting(18, "training window: the days the model is fitted on (at least)", ge=1)
    max_train_days: int | None = setting(180, "an expanding window: the training days reach back over earlier days "
                                              "with features, up to this many (null: exactly train_days)", ge=1)
    validation_days: int = setting(3, "days after the training days: the report's threshold, the sweep's choice",
                                   ge=0)
    holdout_days: int = setting(7, "evaluation window: the last days up to and including the run date", ge=1)
    epochs: int = setting(8, "passes over the training days", ge=1)
    batch_size: int = setting(512, "rows per step and rank on the CPU", ge=1)
    gpu_batch_size: int = setting(2048, "rows per step and rank on a GPU", ge=1)
    learning_rate: float = setting(0.001, "AdamW's step size", gt=0)
    weight_decay: float = setting(0.001, "AdamW's decoupled weight decay (0: plain Adam)", ge=0, lt=1)
    lr_schedule: _choice(LR_SCHEDULES) = setting("cosine", "constant, or cosine from learning_rate down to 0")
    keep_best_epoch: bool = setting(False, "log the epoch's net that scored best on the validation days")
    calibration: _choice(CALIBRATIONS) = setting("temperature", "temperature: a logit scale fitted on the "
                                                                "validation days; none: as the model gives them")
    model: str = setting(DEFAULT_MODEL, "module:function(preprocessor, hyperparameters) -> torch module")
    hyperparameters: dict[str, Any] = setting(NET_HYPERPARAMETERS, "the model's hyperparameters (the default "
                                                                   "model's: each laid over its default)")
    min_category_count: int = setting(5, "rarer categories share the unknown index", ge=1)
    clip_to_training_range: bool = setting(False, "inputs clip each number to its range in the training window")
    seed: int = setting(13, "of the shuffle, the initial weights and the trees")
    num_processes: int = setting(2, "ranks (TorchDistributor) or XGBoost workers", ge=1)
    local_mode: bool = setting(True, "true: ranks run on the driver; false: a barrier stage on the cluster")
    launcher: _choice(LAUNCHERS) = setting("auto", "who runs the ranks (auto: one rank in the job's process for a "
                                                   "small local CPU window)")
    in_process_max_rows: int = setting(250_000, "auto launches in process up to this many labelled rows", ge=0)
    use_gpu: bool = setting(False, "one rank per GPU the Spark resources give the job (NCCL)")
    precision: _choice(PRECISIONS) = setting("auto", "arithmetic of the steps (auto: bf16 on a GPU that has it)")
    collective_timeout_s: int = setting(300, "seconds a rank waits in a collective for a peer", ge=1)
    data_path: _choice(DATA_PATHS) = setting("auto", "memory, stream, or auto: how a rank reads its share")
    buffer_rows: int = setting(65536, "a streaming rank's shuffle buffer, in rows", ge=1)
    read_ahead: int = setting(2, "row groups a streaming rank reads ahead of its steps", ge=1)
    read_batch_rows: int = setting(16384, "rows of a row group decoded at once by a streaming rank", ge=1)
    arrow_memory_pool: _choice(ARROW_MEMORY_POOLS) = setting("system", "pyarrow's allocator in the ranks")
    malloc_mmap_threshold: int = setting(1048576, "bytes from which glibc maps a block on its own in the ranks "
                                                  "(0: glibc's default)", ge=0, le=MAX_MMAP_THRESHOLD)
    promotion_metric: _choice(PROMOTION_METRICS) = setting("roc_auc", "the holdout metric of the gate, the bar "
                                                                      "and the sweep's choice")
    promotion_margin: float = setting(0.002, "how much better than the champion a new version must be")
    require_approval: bool = setting(False, "a winning version waits for a person before it becomes champion")

    @model_validator(mode="before")
    @classmethod
    def _merged_hyperparameters(cls, data: Any) -> Any:
        """From a file (a mapping), the default model's hyperparameters merge over its defaults key
        by key, as every mapping of the config does; in code a TrainSpec takes the mapping it is given."""
        if isinstance(data, dict) and data.get("model", DEFAULT_MODEL) == DEFAULT_MODEL:
            return {**data, "hyperparameters": {**NET_HYPERPARAMETERS, **(data.get("hyperparameters") or {})}}
        return data

    @model_validator(mode="after")
    def _rules(self) -> TrainSpec:
        if self.launcher == "in_process" and not self.local_mode:
            raise ValueError("train.launcher in_process runs the one rank in the train job's own process: it needs "
                             "train.local_mode true (a cluster's ranks run on its executors: use torch_distributor "
                             "or auto)")
        if self.max_train_days is not None and self.max_train_days < self.train_days:
            raise ValueError(f"train.max_train_days ({self.max_train_days}) must be at least train.train_days "
                             f"({self.train_days}), or null for a fixed window")
        hyper = self.hyperparameters
        dropout = hyper.get("dropout", 0.0)
        if not (isinstance(dropout, (int, float)) and not isinstance(dropout, bool) and 0 <= dropout < 1):
            raise ValueError(f"train.hyperparameters.dropout must be a number in [0, 1), got {dropout!r}")
        if hyper.get("wide", False) not in (False, True, "onehot"):
            raise ValueError(f"train.hyperparameters.wide must be true, false or onehot, got {hyper['wide']!r}")
        members = hyper.get("members", 1)
        if not (isinstance(members, int) and not isinstance(members, bool) and members >= 1):
            raise ValueError(f"train.hyperparameters.members must be a whole number of nets, at least 1, "
                             f"got {members!r}")
        return self

    @property
    def window_days(self) -> int:
        """The days a training reads at least: training, validation and holdout days."""
        return self.train_days + self.validation_days + self.holdout_days

    @property
    def reach_days(self) -> int:
        """The most training days a window fits on: ``max_train_days`` (an expanding window) or ``train_days``."""
        return self.max_train_days or self.train_days

    def with_overrides(self, **changes: Any) -> TrainSpec:
        """These settings changed for one run; an explicit ``train_days`` asks for a window of that
        length, so it drops ``max_train_days`` unless that is given too."""
        import dataclasses

        if "train_days" in changes:
            changes.setdefault("max_train_days", None)
        if isinstance(changes.get("hyperparameters"), dict):  # laid over the config's, key by key
            changes["hyperparameters"] = {**self.hyperparameters, **changes["hyperparameters"]}
        return dataclasses.replace(self, **changes)


@section
class EvaluationSpec:
    """The evaluation report of every candidate and baseline."""

    segments: list[str] = setting([], "feature columns the metrics are broken down by")
    threshold: float | _choice((VALIDATION_F1,)) = setting(
        VALIDATION_F1, "the confusion matrix's threshold: a probability, or validation_f1 (F1-best on the "
                       "validation days)")
    calibration_bins: int = setting(10, "bins of the calibration table and ECE", ge=2)
    min_segment_rows: int = setting(30, "smaller segments are pooled as (other)", ge=1)
    plots: bool = setting(True, "the report's figures beside its tables")

    @field_validator("threshold")
    @classmethod
    def _threshold(cls, value: float | str) -> float | str:
        if not isinstance(value, str) and not 0.0 < value < 1.0:
            raise ValueError(f"a probability must lie strictly between 0 and 1, got {value}")
        return value

    @property
    def chosen_on_validation(self) -> bool:
        return self.threshold == VALIDATION_F1


@section
class BaselineSpec:
    """One Spark MLlib baseline: its name (its MLflow run), kind and the estimator's own params."""

    name: str = setting(doc="the baseline's MLflow run and comparison row")
    kind: _choice(BASELINE_KINDS) = setting(doc="logistic_regression or gbt")
    params: dict[str, Any] = setting({}, "the pyspark.ml estimator's params")
    promote: bool = setting(False, "it may serve: beating the sweep's candidate, it goes to the gate in its place")


DEFAULT_BASELINES = (
    BaselineSpec(name="logistic_regression", kind="logistic_regression",
                 params={"maxIter": 50, "regParam": 0.001}, promote=True),
    BaselineSpec(name="gbt", kind="gbt", params={"maxIter": 30, "maxDepth": 5, "stepSize": 0.1}, promote=True),
)


@section
class SweepSpec:
    """The sweep's space: the MLP's candidates are the first ``size`` combinations of the values
    (learning_rate, width, depth, epochs, the base config's first); the xgboost family adds one
    candidate per param set of ``xgboost``, each over :data:`XGBOOST_DEFAULTS`."""

    families: list[_choice(FAMILIES)] = setting(["mlp", "xgboost"], "the model families the sweep trains")
    size: int = setting(1, "MLP candidates", ge=1)
    learning_rate: list[float] = setting([0.001], "the MLP's learning rates to try")
    width: list[int] = setting([32], "hidden layer widths to try")
    depth: list[int] = setting([2], "numbers of hidden layers to try")
    epochs: list[int] = setting([8], "epochs to try")
    blend: list[str] = setting(["logistic_regression", "xgboost", "mlp"],
                               "members of a blend candidate (families or baseline names); []: none")
    xgboost: list[dict[str, Any]] = setting(
        [{"n_estimators": 400, "max_depth": 3, "learning_rate": 0.05, "subsample": 0.8, "colsample_bytree": 0.8,
          "min_child_weight": 50}], "one xgboost candidate per param set (XGBoost's scikit-learn names)")

    @field_validator("xgboost", mode="before")
    @classmethod
    def _one_set(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _rules(self) -> SweepSpec:
        if not self.families or len(set(self.families)) != len(self.families):
            raise ValueError(f"sweep.families must be a list of distinct families of {', '.join(FAMILIES)}, "
                             f"got {self.families}")
        if self.blend and (len(self.blend) < 2 or len(set(self.blend)) != len(self.blend)):
            raise ValueError(f"sweep.blend must name two or more distinct members (sweep families or baselines), "
                             f"got {self.blend}")
        if not self.xgboost:
            raise ValueError("sweep.xgboost must be a dict of params or a non-empty list of them")
        return self

    def xgboost_params(self) -> list[dict[str, Any]]:
        """Each xgboost candidate's params: its param set over :data:`XGBOOST_DEFAULTS`."""
        return [{**XGBOOST_DEFAULTS, **params} for params in self.xgboost]

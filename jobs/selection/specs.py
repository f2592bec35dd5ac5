"""What a training compares, as typed config: the evaluation report's settings, the MLlib
baselines every candidate must beat, and the hyperparameter sweep's space.

The sections ``evaluation``, ``baselines`` and ``sweep`` of ``jobs/pipeline.yaml``; all of them are
optional (an older config gets the defaults: no baselines, no sweep, a 0.5 threshold).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

VALIDATION_F1 = "validation_f1"  # threshold policy: the F1-best threshold on the validation days
BASELINE_KINDS = ("logistic_regression", "gbt")
FAMILIES = ("mlp", "xgboost")  # the sweep's model families (jobs.selection.sweep.candidates)
# An xgboost candidate's params where the config names none (SparkXGBClassifier's, i.e. XGBoost's
# scikit-learn names); a param set of sweep.xgboost is laid over them.
XGBOOST_DEFAULTS: dict[str, Any] = {"n_estimators": 300, "max_depth": 6, "learning_rate": 0.05, "subsample": 0.8,
                                    "colsample_bytree": 0.8, "min_child_weight": 5.0}


@dataclass(frozen=True)
class EvaluationSpec:
    """The evaluation report of every candidate (:mod:`jobs.selection.evaluation`).

    ``threshold``: a probability in (0, 1) (configured), or ``validation_f1``: the threshold with
    the best F1 on the validation days (``train.validation_days``), never on the holdout.
    ``segments``: columns of the feature rows the report breaks the metrics down by.
    """

    segments: list[str] = field(default_factory=list)
    threshold: float | str = 0.5
    calibration_bins: int = 10
    min_segment_rows: int = 30  # smaller segments are folded into "(other)"
    plots: bool = True  # the report's figures (ROC, PR, calibration, ...) beside its tables; the replay turns them off

    def __post_init__(self) -> None:
        if isinstance(self.threshold, str):
            if self.threshold != VALIDATION_F1:
                raise ValueError(f"evaluation.threshold must be a probability or {VALIDATION_F1!r}, "
                                 f"got {self.threshold!r}")
        elif not 0.0 < float(self.threshold) < 1.0:
            raise ValueError(f"evaluation.threshold must lie strictly between 0 and 1, got {self.threshold}")

    @property
    def chosen_on_validation(self) -> bool:
        return self.threshold == VALIDATION_F1


@dataclass(frozen=True)
class BaselineSpec:
    """One Spark MLlib baseline: a ``name`` (its MLflow run and comparison row), a ``kind``
    (logistic_regression or gbt) and the estimator's own params (pyspark.ml names)."""

    name: str
    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    promote: bool = False  # it may serve: beating the sweep's candidate, it goes to the gate in its place

    def __post_init__(self) -> None:
        if self.kind not in BASELINE_KINDS:
            raise ValueError(f"baseline {self.name!r}: kind must be one of {', '.join(BASELINE_KINDS)}, "
                             f"got {self.kind!r}")


@dataclass(frozen=True)
class SweepSpec:
    """The hyperparameter sweep's space. ``families``: which model families it trains. The MLP's
    candidates are the first ``size`` combinations of the values (in order: learning_rate, hidden
    width, depth, epochs), the base config's first; the xgboost family adds one candidate per param
    set of ``xgboost`` (a dict, or a list of them), each over :data:`XGBOOST_DEFAULTS`."""

    size: int = 2
    learning_rate: list[float] = field(default_factory=list)
    width: list[int] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    families: list[str] = field(default_factory=lambda: ["mlp"])
    xgboost: list[dict[str, Any]] = field(default_factory=lambda: [{}])
    # A blend candidate (jobs.selection.blend): the mean of the probabilities of the best run of
    # each member, a sweep family or a baseline's name; empty: none.
    blend: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        unknown = [f for f in self.families if f not in FAMILIES]
        if unknown or not self.families or len(set(self.families)) != len(self.families):
            raise ValueError(f"sweep.families must be a list of distinct families of {', '.join(FAMILIES)}, "
                             f"got {self.families}")
        if self.blend and (len(self.blend) < 2 or len(set(self.blend)) != len(self.blend)):
            raise ValueError(f"sweep.blend must name two or more distinct members (sweep families or baselines), "
                             f"got {self.blend}")
        if isinstance(self.xgboost, dict):  # one param set
            object.__setattr__(self, "xgboost", [self.xgboost])
        if not self.xgboost or not all(isinstance(p, dict) for p in self.xgboost):
            raise ValueError(f"sweep.xgboost must be a dict of params or a non-empty list of them, got {self.xgboost}")

    def xgboost_params(self) -> list[dict[str, Any]]:
        """Each xgboost candidate's params: its param set over :data:`XGBOOST_DEFAULTS`."""
        return [{**XGBOOST_DEFAULTS, **params} for params in self.xgboost]


def baseline_specs(raw: Any) -> tuple[BaselineSpec, ...]:
    """The ``baselines`` section: a list of ``{name, kind, params}``; names are unique."""
    specs = tuple(BaselineSpec(**item) for item in (raw or []))
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"baselines: names must be unique, got {names}")
    return specs


def evaluation_spec(raw: Any) -> EvaluationSpec:
    raw = dict(raw or {})
    raw["segments"] = list(raw.get("segments") or [])
    return EvaluationSpec(**raw)


def sweep_spec(raw: Any) -> SweepSpec:
    raw = dict(raw or {})
    if raw.get("xgboost") is None:
        raw.pop("xgboost", None)
    return SweepSpec(**raw)

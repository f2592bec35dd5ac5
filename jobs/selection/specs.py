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
    promote: bool = False  # register it and put it through the champion gate (a baseline as champion)

    def __post_init__(self) -> None:
        if self.kind not in BASELINE_KINDS:
            raise ValueError(f"baseline {self.name!r}: kind must be one of {', '.join(BASELINE_KINDS)}, "
                             f"got {self.kind!r}")


@dataclass(frozen=True)
class SweepSpec:
    """The hyperparameter sweep's space: the candidates are the first ``size`` combinations of
    the values (in order: learning_rate, hidden width, depth, epochs), the base config's first."""

    size: int = 2
    learning_rate: list[float] = field(default_factory=list)
    width: list[int] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)


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
    return SweepSpec(**dict(raw or {}))

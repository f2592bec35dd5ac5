"""The ``monitoring:`` section of the pipeline config, typed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

EVIDENCE = ("holdout", "live")  # what makes a version that won the gate champion
METRICS = ("roc_auc", "pr_auc", "log_loss", "brier", "ece")  # the realized metrics of a monitored day


@dataclass(frozen=True)
class DecaySpec:
    """When the champion's realized quality counts as decayed (see :mod:`jobs.monitoring.decay`)."""

    window_days: int = 7  # monitored days with outcomes the verdict pools
    metric: str = "roc_auc"  # one of METRICS
    margin: float = 0.03  # worse than the holdout by more than this (and the interval excludes the holdout)
    max_ece: float = 0.10  # or the expected calibration error above this (its interval wholly above)

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"monitoring.decay.metric must be one of {', '.join(METRICS)}, got {self.metric!r}")
        if self.window_days < 1:
            raise ValueError(f"monitoring.decay.window_days must be at least 1, got {self.window_days}")


@dataclass(frozen=True)
class MonitoringSpec:
    label_delay_days: int = 0  # day D's outcomes land with day D + this many days' ingest
    challengers: int = 2  # recent non-champion versions scored in shadow beside the champion
    bootstrap: int = 200  # resamples of a day's rows for the 95% intervals
    seed: int = 13  # of the bootstrap: a re-run writes the same intervals
    decay: DecaySpec = field(default_factory=DecaySpec)
    # holdout: the gate (and a person) decide; live: a winner waits until it beats the champion on
    # live_days shadow-scored days (jobs.monitoring.challengers)
    promotion_evidence: str = "holdout"
    live_days: int = 7  # K: the monitored days the live comparison pools

    def __post_init__(self) -> None:
        if self.label_delay_days < 0:
            raise ValueError(f"monitoring.label_delay_days cannot be negative, got {self.label_delay_days}")
        if self.challengers < 0:
            raise ValueError(f"monitoring.challengers cannot be negative, got {self.challengers}")
        if self.promotion_evidence not in EVIDENCE:
            raise ValueError(f"monitoring.promotion_evidence must be one of {', '.join(EVIDENCE)}, "
                             f"got {self.promotion_evidence!r}")
        if self.live_days < 1:
            raise ValueError(f"monitoring.live_days must be at least 1, got {self.live_days}")


def monitoring_spec(raw: Any) -> MonitoringSpec:
    raw = dict(raw or {})
    decay = DecaySpec(**dict(raw.pop("decay", None) or {}))
    return MonitoringSpec(**raw, decay=decay)

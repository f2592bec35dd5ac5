"""What serving does and watches: the ``score`` section (batches, the recent-outcome shift, drift), the
``monitoring`` section (the monitor, challengers, decay) and how MLflow calls behave (``tracking``)."""

from __future__ import annotations

import os
from typing import Literal

from jobs.config.base import section, setting
from jobs.config.choices import EVIDENCE, REALIZED_METRICS


@section
class DriftSpec:
    """``score.drift``: when a scored day's inputs count as moved from the champion's training window."""

    psi_threshold: float = setting(0.2, "population stability index of a monitored feature above which it drifts",
                                   gt=0)
    prediction_psi_threshold: float | None = setting(None, "the predictions' PSI that is drift (null: reported, "
                                                           "not alerted on)")
    unknown_share_threshold: float = setting(0.05, "rise in the share of categories the model does not know", gt=0)
    bins: int = setting(10, "bins of a numeric feature (deciles of the training window)", ge=2)
    ignore: list[str] = setting([], "features (fnmatch patterns) reported, not alerted on")
    alpha: float = setting(0.01, "the chance that a day drawn from the training window's own rows is called "
                                 "drifted: a feature's move must also be this unlikely as sampling noise", gt=0, le=1)
    min_expected_rows: float = setting(5, "bins expecting fewer of a day's rows are pooled before they are compared",
                                       ge=0)
    min_rows: int = setting(100, "a day with fewer rows is judged with the days before it (pool_days), or not "
                                 "at all (status too_few_rows)", ge=1)
    pool_days: int = setting(7, "a day of fewer than min_rows rows is judged on its rows and those of the days "
                                "before it scored by the same model, up to this many days in all (1: not pooled)",
                             ge=1)
    plot: bool = setting(True, "a plot beside each day's drift report")

    def ignores(self, column: str) -> bool:
        """Whether ``column`` is reported only: named in ``ignore``, or matching a pattern there (``hist_*``)."""
        from fnmatch import fnmatchcase

        return any(fnmatchcase(column, pattern) for pattern in self.ignore)


@section
class ShiftSpec:
    """``score.recent_shift``: the landed days to match (0: off), how fast a day's weight in the
    match halves with its age, the share of the solved intercept applied, and the fewest labelled
    rows it is solved on."""

    days: int = setting(14, "landed days whose realized rate a day's level is matched to (0: off)", ge=0)
    half_life_days: float = setting(4.0, "a reference day's rows weigh 2 ** (-age / this); 0: all days alike", ge=0)
    strength: float = setting(1.0, "share of the solved intercept applied", gt=0, le=1)
    min_rows: int = setting(100, "fewer labelled rows landed: not shifted, saying why", ge=1)


@section
class ScoreSpec:
    """The ``score`` section: batches, the recent-outcome shift and drift."""

    batch_size: int = setting(16384, "rows per model call in predict_batch_udf", ge=1)
    use_gpu: bool = setting(False, "Python workers load the model on a GPU")
    gpu_batch_size: int = setting(262144, "on a GPU: rows per model call, and per Arrow batch", ge=1)
    rows_per_task: int = setting(500_000, "rows a scoring task takes at least (0: as Spark split the files)", ge=0)
    recent_shift: ShiftSpec = setting(ShiftSpec(), "the recent-outcome shift of a day's level")
    drift: DriftSpec = setting(DriftSpec(), "drift of a scored day against the training window")


@section
class DecaySpec:
    """``monitoring.decay``: when the champion's realized quality counts as decayed."""

    window_days: int = setting(7, "the champion's last monitored days with outcomes, pooled", ge=1)
    metric: Literal[REALIZED_METRICS] = setting("roc_auc", "the realized metric judged")  # type: ignore[valid-type]
    margin: float = setting(0.03, "decayed: worse than its holdout by more than this, the interval excluding it")
    max_ece: float = setting(0.10, "or calibration gone: ECE above this, its interval wholly above", gt=0)


@section
class MonitoringSpec:
    """The ``monitoring`` section: the monitor of served days, challengers, decay."""

    label_delay_days: int = setting(0, "day D's outcomes land with the ingest of this many open days of "
                                         "the feed after D", ge=0)
    challengers: int = setting(2, "recent versions that are not champion, scored in shadow beside it", ge=0)
    bootstrap: int = setting(200, "resamples of a day's rows for each metric's 95% interval", ge=1)
    seed: int = setting(13, "of the bootstrap: a re-run writes the same intervals")
    decay: DecaySpec = setting(DecaySpec(), "when the champion counts as decayed")
    promotion_evidence: Literal[EVIDENCE] = setting(  # type: ignore[valid-type]
        "holdout", "holdout: the gate decides; live: a winner waits until it beats the champion on live days")
    live_days: int = setting(7, "the monitored days the live comparison pools", ge=1)
    max_rate_gap: float = setting(0.10, "a day whose mean served probability lies further than this from its "
                                        "realized rate (and outside its 95% interval) is flagged miscalibrated",
                                  gt=0, le=1)


TRACKING_ENV = {  # TrackingSpec field -> MLflow's environment variable (mlflow/environment_variables.py)
    "request_timeout": "MLFLOW_HTTP_REQUEST_TIMEOUT",
    "max_retries": "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
    "backoff_factor": "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
    "backoff_jitter": "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER",
}


@section
class TrackingSpec:
    """How MLflow calls behave when the tracking server is slow or gone: each setting maps to the
    MLflow environment variable in :data:`TRACKING_ENV` (one already set in the environment wins). A
    failed request (refused, timed out, or answered 408, 429, 500, 502, 503 or 504) is tried again
    after 0, then ``backoff_factor`` * 2**(n-1) s (urllib3's waits)."""

    request_timeout: int = setting(30, "seconds one HTTP request may take", ge=1)
    max_retries: int = setting(6, "retries of a failed request", ge=0)
    backoff_factor: int = setting(1, "retry n waits about backoff_factor * 2**(n-1) s", ge=0)
    backoff_jitter: float = setting(0.5, "plus up to this many seconds at random", ge=0)
    check_timeout: float = setting(10, "seconds the up-front check of the server waits", gt=0)

    @property
    def retry_waits(self) -> list[float]:
        """The waits before each retry, jitter aside (none before the first, then
        ``backoff_factor`` * 2**(n-1), at most 120 s)."""
        return [0.0] + [min(120.0, self.backoff_factor * 2.0 ** (n - 1)) for n in range(2, self.max_retries + 1)]

    @property
    def give_up_after(self) -> float:
        """Seconds a call to a server that refuses connections takes to fail: every wait with its
        largest jitter. A server that accepts but never answers adds ``request_timeout`` per try."""
        return sum(self.retry_waits) + self.max_retries * self.backoff_jitter

    def apply(self) -> dict[str, str]:
        """Bound every MLflow HTTP call of this process and of the processes it starts: set the
        MLflow variables of these settings that the environment does not set already. Returns what
        is in effect."""
        for name, variable in TRACKING_ENV.items():
            os.environ.setdefault(variable, str(getattr(self, name)))
        return {variable: os.environ[variable] for variable in TRACKING_ENV.values()}


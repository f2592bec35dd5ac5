"""The recent-outcome shift: day D's probabilities moved by one logit intercept so that the model's
mean probability over the last days whose outcomes have landed equals their realized rate.

A window's model is calibrated on its validation days (``train.calibration``), and stays so until
the world moves: in the week of 2013-04-21 (the FAA furloughs) a model trained before it predicted a
fraction of the delays that came. The flights that land each day say so the next morning. Before
day D is scored, the score job scores the days
``D - 1 - L - (days - 1) .. D - 1 - L`` (``L``: ``monitoring.label_delay_days``; only days whose
outcomes have landed, :func:`jobs.monitoring.outcomes.outcomes_in`) with the same model, and finds
the intercept ``delta`` for which ``mean(sigmoid(logit(p) + delta))`` over their labelled rows is
their share of positive labels (:func:`solve_shift`), each reference day's rows weighted
``2 ** (-age / half_life_days)`` (``age``: days before ``D - 1 - L``; ``half_life_days`` 0: all
alike), so the last days count most and a surge a week old fades; D's probabilities are then
``sigmoid(logit(p) + strength * delta)``. One number per day and model: it moves no flight past
another within the day, so the day's ranking (its ROC AUC) is the model's own; only the level
moves. Nothing of day D or later is read: a day's shift is as point-in-time as its history
features. Why this rule, and what it does over a year: docs/monitoring.md, "The recent-outcome
shift", and the study it links.

The reference days' predictions are aggregated in Spark into counts of rows and positives per
logit bin of :data:`BIN_WIDTH` (bounded by the bins, not the rows), and solved on the driver.
Each scored day's shift, with the days, rows and rates it came from, goes into its scoring summary.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from jobs.config import FeedCalendar, ShiftSpec

BIN_WIDTH = 0.01  # logit units: a bin's rows share its centre (an error of at most 0.005 in a logit)
EDGE = 1e-7  # probabilities are clipped to [EDGE, 1 - EDGE] before their logit
LIMIT = 10.0  # a shift is solved within [-LIMIT, LIMIT]


def reference_days(day: dt.date, spec: ShiftSpec, label_delay_days: int, features_days: set[dt.date],
                   calendar: FeedCalendar | None = None) -> list[dt.date]:
    """The days whose outcomes ``day``'s shift matches: up to ``spec.days`` days ending with
    ``day - 1 - label_delay_days`` that have features and whose outcomes have landed, oldest first
    (open days of ``calendar``, which count the delay too; default: every day)."""
    from jobs.config import FeedCalendar
    from jobs.monitoring.outcomes import outcomes_in

    calendar = calendar or FeedCalendar()
    found = calendar.open_days_ending(last_landed(day, label_delay_days, calendar), spec.days)
    return [d for d in found if d in features_days and outcomes_in(features_days, d, label_delay_days, calendar)]


def last_landed(day: dt.date, label_delay_days: int, calendar: FeedCalendar) -> dt.date:
    """The last day whose outcomes have landed before ``day`` is scored: ``day - 1 - L`` in the
    open days of ``calendar``."""
    return calendar.shifted(day, -(1 + label_delay_days))


def logit_of(probability: Column) -> Column:
    """Spark expression: the logit of a probability column, clipped to [EDGE, 1 - EDGE]."""
    from pyspark.sql import functions as F

    p = F.least(F.greatest(probability, F.lit(EDGE)), F.lit(1.0 - EDGE))
    return F.log(p / (1.0 - p))


def logit_bins(predictions: DataFrame, label: str) -> dict[dt.date, list[tuple[float, int, int]]]:
    """Per day (the ``date`` partition column) of ``predictions`` (a ``probability`` and a ``label``
    column), the labelled rows as ``(bin centre, rows, positives)`` in logit bins of
    :data:`BIN_WIDTH`, ordered by bin."""
    from pyspark.sql import functions as F

    from jobs.lake.layout import PARTITION, partition_value

    labelled = predictions.where(F.col(label).isNotNull())
    rows = (labelled.groupBy(PARTITION, F.round(logit_of(F.col("probability")) / BIN_WIDTH).cast("long").alias("bin"))
            .agg(F.count(F.lit(1)).alias("rows"), F.sum(F.col(label).cast("double")).alias("positives"))
            .collect())
    found: dict[dt.date, list[tuple[float, int, int]]] = {}
    for row in sorted(rows, key=lambda r: (str(r[PARTITION]), r["bin"])):
        found.setdefault(partition_value(row[PARTITION]), []).append(
            (row["bin"] * BIN_WIDTH, int(row["rows"]), int(round(row["positives"]))))
    return found


def weighted(bins: dict[dt.date, list[tuple[float, int, int]]], reference: list[dt.date], last: dt.date,
             half_life_days: float) -> list[tuple[float, float, float]]:
    """The reference days' bins pooled, each day's rows and positives weighted
    ``2 ** (-(last - day) / half_life_days)`` (``half_life_days`` 0: weight 1)."""
    found = []
    for day in reference:
        weight = 0.5 ** ((last - day).days / half_life_days) if half_life_days else 1.0
        found += [(z, n * weight, k * weight) for z, n, k in bins.get(day, [])]
    return found


def solve_shift(bins: list[tuple[float, float, float]]) -> float:
    """The intercept ``delta`` for which the rows' mean of ``sigmoid(logit + delta)`` equals their
    share of positives (``bins``: ``(logit, rows, positives)``, the rows weighted or not), by bisection within
    [-LIMIT, LIMIT]: the mean rises with ``delta``. All positive or all negative rows (no finite
    answer) give the limit's side."""
    rows = sum(n for _, n, _ in bins)
    target = sum(k for _, _, k in bins) / rows

    def mean(delta: float) -> float:
        return sum(n / (1.0 + math.exp(-(z + delta))) for z, n, _ in bins) / rows

    low, high = -LIMIT, LIMIT
    for _ in range(60):  # 20 / 2**60: far below any bin's width
        middle = (low + high) / 2
        if mean(middle) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def day_shifts(bins: dict[dt.date, list[tuple[float, int, int]]], days: list[dt.date], spec: ShiftSpec,
               label_delay_days: int, features_days: set[dt.date],
               calendar: FeedCalendar | None = None) -> dict[dt.date, dict[str, Any]]:
    """Each of ``days``' shift: ``{"logit_shift", "days", "rows", "realized_rate", "predicted_rate"}``
    from the reference days' bins (``bins``, per day; the rates weighted as the match weighs the
    days), or a ``logit_shift`` of 0 with the ``reason``
    where fewer than ``spec.min_rows`` labelled rows have landed (the first days of a lake)."""
    from jobs.config import FeedCalendar

    calendar = calendar or FeedCalendar()
    found = {}
    for day in days:
        reference = reference_days(day, spec, label_delay_days, features_days, calendar)
        rows = sum(n for d in reference for _, n, _ in bins.get(d, []))
        entry: dict[str, Any] = {"days": [d.isoformat() for d in reference], "rows": rows,
                                 "half_life_days": spec.half_life_days, "strength": spec.strength}
        if rows < spec.min_rows:
            entry.update(logit_shift=0.0, reason=f"{rows} labelled rows landed in the {spec.days} days before "
                                                 f"(at least {spec.min_rows} needed): not shifted")
        else:
            pooled = weighted(bins, reference, last_landed(day, label_delay_days, calendar), spec.half_life_days)
            weight = sum(n for _, n, _ in pooled)
            delta = solve_shift(pooled)
            entry.update(realized_rate=round(sum(k for _, _, k in pooled) / weight, 6),
                         predicted_rate=round(sum(n / (1.0 + math.exp(-z)) for z, n, _ in pooled) / weight, 6),
                         solved=round(delta, 6), logit_shift=round(spec.strength * delta, 4))
        found[day] = entry
    return found


def offset_of(day: Column, shifts: dict[dt.date, dict[str, Any]]) -> Column:
    """Spark expression: the ``logit_shift`` of the row's day (0.0 for a day without one)."""
    from pyspark.sql import functions as F

    offset = F.lit(0.0)
    for d, entry in shifts.items():
        if entry["logit_shift"]:
            offset = F.when(day == F.lit(d), F.lit(float(entry["logit_shift"]))).otherwise(offset)
    return offset


def shifted(probability: Column, day: Column, shifts: dict[dt.date, dict[str, Any]]) -> Column:
    """Spark expression: ``probability`` moved by its day's ``logit_shift`` (days without one, or
    with 0, unchanged): :func:`served_probability` in Spark."""
    from pyspark.sql import functions as F

    if not any(entry["logit_shift"] for entry in shifts.values()):
        return probability
    offset = offset_of(day, shifts)
    return F.when(offset == 0.0, probability).otherwise(1.0 / (1.0 + F.exp(-(logit_of(probability) + offset))))


def served_probability(model_probability: Any, logit_shift: Any) -> Any:
    """What a prediction row's ``probability`` is made of, outside Spark: the model's own
    probability (``model_probability``, what the registered version predicts for the row's
    features) moved by the day's ``logit_shift`` (clipped to [EDGE, 1 - EDGE] first); numpy arrays
    or numbers. The predictions' contract: docs/scoring.md."""
    import numpy as np

    p = np.clip(np.asarray(model_probability, dtype=np.float64), EDGE, 1.0 - EDGE)
    shift = np.asarray(logit_shift, dtype=np.float64)
    moved = 1.0 / (1.0 + np.exp(-(np.log(p / (1.0 - p)) + shift)))
    return np.where(shift == 0.0, np.asarray(model_probability, dtype=np.float64), moved)


def with_shifts(predictions: DataFrame, shifts: dict[dt.date, dict[str, Any]]) -> DataFrame:
    """``predictions`` (rows of :func:`jobs.scoring.predictor.score_features`) with each day's
    ``probability`` moved by its shift (the ``date`` partition names the day), and beside it what
    made it: ``model_probability`` (the model's own) and ``logit_shift`` (the day's, 0.0 unshifted)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType

    from jobs.lake.layout import PARTITION

    day = F.col(PARTITION).cast(DateType())
    columns: list[Any] = []
    for name in predictions.columns:
        if name == "probability":
            columns += [shifted(F.col(name), day, shifts).alias("probability"), F.col(name).alias("model_probability"),
                        offset_of(day, shifts).alias("logit_shift")]
        else:
            columns.append(F.col(name))
    return predictions.select(*columns)

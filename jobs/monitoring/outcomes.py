"""Outcomes meet predictions: a day's prediction rows joined with the outcomes of the same day.

The outcome of a row is the config's label (``features.label``) in the features partition of the
day the row was scored for: the feature builder writes it beside the model inputs (for the example
data: arriving more than 15 minutes late; null for a cancelled flight, which has no outcome).
With ``monitoring.label_delay_days = L`` the outcomes of day D count as arrived once day D + L's
features are in the lake (they land with D + L's ingest): :func:`outcomes_in`.

Rows are matched on the config's id columns (``features.id_columns``), nulls equal to nulls (a
flight without a tail number is still the same flight). Every prediction row is kept: one without
a features row or with a null label has no outcome, and is counted as such, never dropped.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

    from jobs.config import FeatureSpec, FeedCalendar
    from jobs.lake.layout import Lake

PROBABILITY = "probability"
MODEL_PROBABILITY = "model_probability"  # a prediction row's: the model's own, before the day's shift
OUTCOME = "outcome"  # the joined rows' label column (1.0, 0.0, or null: no outcome)
MATCHED = "matched"  # whether a features row of the day matched the prediction row
MODEL = ("model_name", "model_version", "model_run_id")  # a prediction row's model identity


@dataclass(frozen=True)
class PredictionSource:
    """Where a role's predictions of every day live: the served ones (``champion``) in the
    predictions zone; shadow scorers add a source of their own (``challenger``)."""

    role: str
    zone: str  # a date-partitioned zone of prediction rows (id columns, probability, model identity)


def prediction_sources(lake: Lake) -> list[PredictionSource]:
    """Every source of prediction rows the monitor judges, the served one first, then each
    challenger version's shadow predictions (``shadow/version=V``, :mod:`jobs.monitoring.challengers`)."""
    from jobs.lake.layout import shadow_version
    from jobs.lake.storage import entries

    versions = sorted((v for name, folder in entries(lake.shadow) if folder and (v := shadow_version(name))),
                      key=lambda v: (len(v), v))
    return [PredictionSource("champion", lake.predictions),
            *[PredictionSource("challenger", lake.shadow_predictions(v)) for v in versions]]


def outcomes_in(features_days: set[dt.date], day: dt.date, label_delay_days: int,
                calendar: FeedCalendar | None = None) -> bool:
    """Whether day ``day``'s outcomes have landed: day ``day + label_delay_days`` has features (the
    delay counted in open days of ``calendar``; default: every day)."""
    from jobs.config import FeedCalendar

    return (calendar or FeedCalendar()).shifted(day, label_delay_days) in features_days


def joined_rows(spark: SparkSession, lake: Lake, source: PredictionSource, days: dict[dt.date, bool],
                       spec: FeatureSpec, segments: list[str]) -> dict[dt.date, pd.DataFrame]:
    """Each day's prediction rows of ``source`` (``days``: day -> whether its outcomes are in) with
    the model identity, ``probability``, the ``segments`` columns, ``matched`` and ``outcome``
    (a day awaiting its outcomes: no segments, no match, outcome null), as pandas (a day is small:
    the metrics are computed on the driver). One Spark query for the days with outcomes and one
    for those without: a window of days costs a join, not one a day."""
    import pandas as pd
    from pyspark.sql import functions as F

    from jobs.lake.files import read_days
    from jobs.lake.integrity import check_unique_keys
    from jobs.lake.layout import PARTITION

    ids = list(dict.fromkeys(spec.id_columns))
    found: dict[dt.date, pd.DataFrame] = {}
    for with_outcomes in (True, False):
        chosen = sorted(day for day, arrived in days.items() if arrived == with_outcomes)
        if not chosen:
            continue
        # each partition checked (a damaged or doubled file), then one row per entity and day:
        # a repeated row would be judged twice
        read = read_days(spark, source.zone, chosen)
        # the model's own probability beside the served one (older predictions lack it: null)
        own = F.col(MODEL_PROBABILITY) if MODEL_PROBABILITY in read.columns else F.lit(None).cast("double")
        predictions = read.select(*ids, PROBABILITY, own.alias(MODEL_PROBABILITY), *MODEL, PARTITION)
        check_unique_keys(predictions, ids, f"the {source.role}'s predictions", source.zone)
        if not with_outcomes:  # awaiting the outcomes: the estimate needs the probabilities only
            joined = predictions.select("*", F.lit(False).alias(MATCHED), F.lit(None).cast("double").alias(OUTCOME))
        else:
            features = read_days(spark, lake.features, chosen)
            wanted = list(dict.fromkeys([*ids, *[c for c in segments if c not in ids]]))
            # One outcome per entity and day: a repeated one would duplicate the predictions it meets.
            check_unique_keys(features, ids, "the outcomes (features)", lake.features)
            outcomes = (features.select(*wanted, PARTITION, F.col(spec.label).cast("double").alias(OUTCOME))
                        .withColumn(MATCHED, F.lit(True)))
            p, o = predictions.alias("p"), outcomes.alias("o")
            condition = [F.col(f"p.`{c}`").eqNullSafe(F.col(f"o.`{c}`")) for c in ids]
            condition.append(F.col(f"p.{PARTITION}") == F.col(f"o.{PARTITION}"))
            joined = p.join(o, condition, "left").select(
                *[F.col(f"p.`{c}`").alias(c) for c in ids], F.col(f"p.{PROBABILITY}").alias(PROBABILITY),
                F.col(f"p.{MODEL_PROBABILITY}").alias(MODEL_PROBABILITY), *[F.col(f"p.{c}").alias(c) for c in MODEL],
                *[F.col(f"o.`{c}`").alias(c) for c in segments if c not in ids],
                F.coalesce(F.col(f"o.{MATCHED}"), F.lit(False)).alias(MATCHED), F.col(f"o.{OUTCOME}").alias(OUTCOME),
                F.col(f"p.{PARTITION}").alias(PARTITION),
            )
        frame = joined.toPandas()
        of_day = pd.to_datetime(frame[PARTITION]).dt.date
        for day in chosen:
            found[day] = frame[(of_day == day).to_numpy()].drop(columns=[PARTITION]).reset_index(drop=True)
    return found


def features_days(spark: SparkSession, lake: Lake) -> set[dt.date]:
    """The days the features zone holds."""
    from jobs.lake.files import list_partitions

    return set(list_partitions(spark, lake.features))


"""Shadow scoring: the day's features scored by each challenger, kept apart from the served predictions.

After the score job has written the champion's predictions (``predictions/date=D/``, untouched
here), :func:`score_shadow` scores the same features with every challenger that
:func:`jobs.monitoring.challengers.challenger_versions` picks (up to ``monitoring.challengers``) and
writes each one's rows, shaped as the served ones, to ``shadow/version=V/date=D/``: those days'
partitions of that version replaced, nothing else (a re-run writes the same rows again). The
monitor compares them with the champion on the outcomes. A challenger that fails to load or score
is logged and skipped: shadow scoring never fails the served scoring. A challenger whose files
are missing or unreadable is found on the driver before its Spark work
(:func:`jobs.registry.check_version`): one warning naming the version, its artifact URI and what to
do, no trace, nothing written for it, and the day's report (``reports/scoring/date=D/summary.json``,
its ``shadow`` entries) records it with ``"damaged": true`` and that message as its ``error``. It
gathers no live evidence meanwhile, so it is never promoted on it.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.config import PipelineConfig
    from jobs.lake.layout import Lake
    from jobs.tracking import ModelRef

log = logging.getLogger("jobs.scoring.shadow")


def score_shadow(spark: SparkSession, lake: Lake, config: PipelineConfig, features: DataFrame, days: list[dt.date],
                 served: ModelRef, batch_size: int, use_gpu: bool = False,
                 landed: set[dt.date] | None = None) -> dict[dt.date, list[dict[str, Any]]]:
    """Score ``features`` (the days', as the served scoring read them) with each challenger that is
    not ``served``, into its shadow zone, all days in one pass per challenger, each with its own
    recent-outcome shift (``landed``: the features zone's days, as the served scoring listed them);
    per day, one ``{"model_version", "rows", "path"}`` (or ``"error"``) per challenger."""
    from jobs.lake.layout import PARTITION, partition_value
    from jobs.monitoring.challengers import challenger_versions
    from jobs.registry import CHALLENGER, DamagedModelError, check_version
    from jobs.scoring.predictor import model_preprocessor, served_predictions
    from jobs.tracking import client
    from jobs.validation.partitions import zone_writer

    mlflow_client = client()
    chosen = challenger_versions(mlflow_client, served.name, config.monitoring.challengers,
                                 config.train.promotion_margin)
    done: dict[dt.date, list[dict[str, Any]]] = {day: [] for day in days}
    for ref in chosen:
        if ref.version == served.version:
            continue
        target = lake.shadow_predictions(ref.version)
        try:
            load_uri = check_version(mlflow_client, ref.name, ref.version, CHALLENGER)
            preprocessor = model_preprocessor(load_uri)
            # its own shift, as it would be served: the live comparison judges what each would serve
            with served_predictions(spark, lake, config, features, days, ref, load_uri, preprocessor, batch_size,
                                    use_gpu, landed) as (predictions, shifts):
                # one writer of the version's days; staging a killed score job left there is removed first
                with zone_writer(spark, lake, f"shadow-{ref.version}", target, days, f"shadow-{days[-1]}"):
                    predictions.write.mode("overwrite").partitionBy(PARTITION).parquet(target)
            written = spark.read.option("basePath", target).parquet(*[lake.partition(target, d) for d in days])
            counts = written.groupBy(PARTITION).count().collect()
            rows = {partition_value(r[PARTITION]): int(r["count"]) for r in counts}
        except DamagedModelError as err:  # found on the driver: one line says it all
            log.warning("shadow scoring skips %s", err)
            for day in days:
                done[day].append({"model_version": ref.version, "damaged": True, "error": str(err)})
            continue
        except Exception as err:  # a broken challenger must not fail the served scoring
            log.exception("shadow scoring of %s version %s failed; the served predictions stand", ref.name,
                          ref.version)
            for day in days:
                done[day].append({"model_version": ref.version, "error": f"{type(err).__name__}: {err}"})
            continue
        for day in days:
            log.info("shadow: %s version %s scored %d rows of %s into %s", ref.name, ref.version, rows.get(day, 0),
                     day, target)
            done[day].append({"model_version": ref.version, "rows": rows.get(day, 0),
                              "path": lake.partition(target, day),
                              **({"logit_shift": shifts[day]["logit_shift"]} if day in shifts else {})})
    return done

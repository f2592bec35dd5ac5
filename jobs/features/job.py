"""Build the model's features for a window of days and write them to the features zone.

``spark-submit jobs/features/job.py --help`` lists its options.

Reads the validated zone (what the validate job let through): the daily tables for the ``--days`` days
ending with the run date (and the days before them that their history features read), and each
reference table's latest snapshot up to the run date; calls the dataset's builder
(``features.builder`` in the config, e.g. :func:`jobs.datasets.flights.build_features`), adds the
point-in-time history and calendar columns (:mod:`jobs.features.history`) and writes Parquet to
``features/date=YYYY-MM-DD/``, one file per day. Only the partitions of the window are replaced
(dynamic partition overwrite), so re-running a day or backfilling a range is idempotent. The job
checks that the builder kept exactly one row per input row of the feed.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

from jobs.config import PipelineConfig, WindowArgs, import_object, job_parser, parse_job_args
from jobs.features import lineage
from jobs.features.declared import declared_rows
from jobs.features.history import add_calendar, add_history, history_days
from jobs.lake.files import MissingPartitionError, list_partitions, read_days
from jobs.lake.layout import PARTITION, Lake
from jobs.runner import run_job
from jobs.runtime.session import configure_logging, get_spark
from jobs.validation.partitions import check_not_failed, failed_days, zone_writer

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("jobs.features.job")


def read_inputs(
    spark: SparkSession, lake: Lake, config: PipelineConfig, days: list[dt.date]
) -> dict[str, DataFrame]:
    """Every configured table from the validated zone: daily ones for ``days`` and for the days
    before them that their history reads (:func:`jobs.features.history.history_days`), reference
    ones as of the last day (their latest snapshot on or before it). A day of ``days`` (or a
    snapshot newer than the one found) whose last validation failed is an error, not a missing or
    older partition; an earlier day that is missing or failed is a gap in the history, counted."""

    earlier = history_days(config.features, days, config.monitoring.label_delay_days, config.feed_calendar)
    tables = {}
    for name, spec in config.tables.items():
        path = lake.validated(name)
        available = list_partitions(spark, path)
        if spec.daily:
            check_not_failed(lake, name, days)
            wanted = [d for d in days if d in available]
            missing = sorted(set(days) - set(wanted))
            if missing and spec.required:
                raise MissingPartitionError(
                    f"no validated partition of {name!r} for {', '.join(map(str, missing))} under {path}: "
                    "run the validate job for those days first"
                )
            failed = failed_days(lake, name) if earlier else {}
            gaps = [d for d in earlier if d in failed]
            if gaps:
                log.warning("%s: %d earlier day(s) failed validation (%s): their history counts as a gap",
                            name, len(gaps), ", ".join(map(str, gaps)))
            wanted = sorted({*wanted, *(d for d in earlier if d in available and d not in failed)})
        else:
            as_of = [d for d in available if d <= max(days)]
            # A snapshot that failed after the one found would be read in its place: fail instead.
            check_not_failed(lake, name, [d for d in failed_days(lake, name) if d <= max(days) and
                                          (not as_of or d >= as_of[-1])])
            if not as_of:
                raise MissingPartitionError(
                    f"no validated snapshot of {name!r} on or before {max(days)} under {path}: "
                    "run the validate job first"
                )
            wanted = as_of[-1:]
        if wanted:
            tables[name] = read_days(spark, path, wanted)
        else:
            tables[name] = spark.createDataFrame([], f"{spec.ddl()}, date date")
    return tables


def build_features(
    tables: dict[str, DataFrame], config: PipelineConfig, days: list[dt.date] | None = None
) -> DataFrame:
    """The rows of ``days`` (default: every day of the tables): the configured builder's, checked
    for every model input and the label, with the history and calendar columns
    (:mod:`jobs.features.history`) computed from the tables' earlier days too."""
    from pyspark.sql import functions as F

    spec = config.features
    if spec.builder is None:
        features = declared_rows(tables, config)
    else:
        features = import_object(spec.builder)(tables, spec)
    missing = [c for c in [PARTITION, *spec.categorical, *spec.numeric, spec.label] if c not in features.columns]
    if missing:
        raise ValueError(f"feature builder {spec.builder or 'of features.joins/expressions'} did not produce "
                         f"columns {missing}")
    if spec.history is not None:
        features = add_history(features, spec, config.monitoring.label_delay_days, days, config.feed_calendar)
    if days is not None:
        features = features.where(F.col(PARTITION).isin(list(days)))
    if spec.calendar is not None:
        if days is None:
            days = [r[0] for r in features.select(PARTITION).distinct().collect()]
        features = add_calendar(features, spec.calendar, list(days))
    return features


def write_features(features: DataFrame, path: str) -> None:
    """Replace the window's partitions, one Parquet file per day."""
    (
        features.repartition(PARTITION)
        .sortWithinPartitions(*[c for c in features.columns if c != PARTITION][:3])
        .write.mode("overwrite")
        .partitionBy(PARTITION)
        .parquet(path)
    )


def rebuild_days(spark: SparkSession, lake: Lake, config: PipelineConfig, days: list[dt.date]) -> list[dt.date]:
    """``days`` and the later days of the features zone whose history reads them and whose inputs
    changed since they were built (:func:`jobs.features.lineage.stale_days`), when their feed is
    validated: re-running the ingest of an earlier day brings the later days it feeds up to date."""
    feed = config.validation.feed
    validated = lineage.versions(lake, feed)
    later = [d for d in lineage.stale_days(lake, config, days, list_partitions(spark, lake.features))
             if d in validated]
    if later:
        log.warning("rebuilding the features of %d later day(s) whose history changed: %s", len(later),
                    ", ".join(map(str, later)))
    return sorted({*days, *later})


def main(argv: list[str] | None = None) -> None:
    from pyspark.sql import functions as F

    configure_logging()
    args = parse_job_args(job_parser(__doc__, window=True), argv, WindowArgs)
    if args.nothing_open(log, "features"):
        return
    spark = get_spark(f"features-{args.run_date}", connect=True)
    lake, config = args.lake, args.config
    days = rebuild_days(spark, lake, config, args.window)
    taken = lineage.snapshot(lake, config, days)  # before reading: a change meanwhile leaves the days stale
    tables = read_inputs(spark, lake, config, days)
    feed = config.validation.feed
    rows_in = tables[feed].where(F.col(PARTITION).isin(days)).count()
    features = build_features(tables, config, days).cache()
    try:
        rows_out = features.count()
        if rows_out != rows_in:
            raise RuntimeError(
                f"feature builder changed the row count: {rows_in} {feed} rows in, {rows_out} feature rows out "
                "(a join on a non-unique key?)"
            )
        # one writer per day of the zone; staging a killed features job left is removed first
        with zone_writer(spark, lake, "features", lake.features, days, f"features-{args.run_date}"):
            write_features(features, lake.features)
            lineage.record(lake, taken, f"features-{args.run_date}")  # after the rows it describes
        labelled = features.where(features[config.features.label].isNotNull()).count()
    finally:
        features.unpersist()  # a shared Spark Connect server would keep it cached after the job
    log.info(
        "wrote %d feature rows (%d labelled) for %s to %s", rows_out, labelled,
        f"{days[0]}..{days[-1]}" if len(days) == (days[-1] - days[0]).days + 1 else ", ".join(map(str, days)),
        lake.features,
    )


if __name__ == "__main__":
    run_job(main)

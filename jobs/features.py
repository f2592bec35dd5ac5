"""Build the model's features for a window of days and write them to the features zone.

Usage::

    spark-submit jobs/features.py --run-date 2013-01-28 [--days 28] [--config PATH] [--lake-root PATH]

Reads the daily raw tables for the DAYS days ending with the run date and the reference tables,
calls the dataset's builder (``features.builder`` in the config, e.g.
:func:`jobs.datasets.flights.build_features`) and writes Parquet to ``features/date=YYYY-MM-DD/``,
one file per day. Only the partitions of the window are replaced (dynamic partition overwrite),
so re-running a day or backfilling a range is idempotent. The job checks that the builder kept
exactly one row per input row of the feed.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING

from jobs.config import Lake, PipelineConfig, import_object, job_parser, parse_job_args
from jobs.spark import configure_logging, get_spark, read_raw

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("jobs.features")


def read_inputs(
    spark: SparkSession, lake: Lake, config: PipelineConfig, days: list[dt.date]
) -> dict[str, DataFrame]:
    """Every configured raw table: daily ones for ``days``, reference ones whole."""
    return {
        name: read_raw(spark, lake, spec, days if spec.daily else None, config.csv_options)
        for name, spec in config.tables.items()
    }


def build_features(tables: dict[str, DataFrame], config: PipelineConfig) -> DataFrame:
    """Apply the configured builder and check its output has every model input and the label."""
    builder = import_object(config.features.builder)
    features = builder(tables, config.features)
    missing = [c for c in ["date", *config.features.inputs, config.features.label] if c not in features.columns]
    if missing:
        raise ValueError(f"feature builder {config.features.builder} did not produce columns {missing}")
    return features


def write_features(features: DataFrame, path: str) -> None:
    """Replace the window's partitions, one Parquet file per day."""
    (
        features.repartition("date")
        .sortWithinPartitions(*[c for c in features.columns if c != "date"][:3])
        .write.mode("overwrite")
        .partitionBy("date")
        .parquet(path)
    )


def main(argv: list[str] | None = None) -> None:
    configure_logging()
    args = parse_job_args(job_parser(__doc__), argv)
    spark = get_spark(f"features-{args.run_date}")
    tables = read_inputs(spark, args.lake, args.config, args.window)
    feed = args.config.validation.table
    rows_in = tables[feed].count()
    features = build_features(tables, args.config).cache()
    rows_out = features.count()
    if rows_out != rows_in:
        raise RuntimeError(
            f"feature builder changed the row count: {rows_in} {feed} rows in, {rows_out} feature rows out "
            "(a join on a non-unique key?)"
        )
    write_features(features, args.lake.features)
    labelled = features.where(features[args.config.features.label].isNotNull()).count()
    log.info(
        "wrote %d feature rows (%d labelled) for %s..%s to %s",
        rows_out, labelled, args.window[0], args.run_date, args.lake.features,
    )


if __name__ == "__main__":
    main()

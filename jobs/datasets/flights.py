"""The example dataset's own code: NYC flights 2013, will a flight arrive more than 15 minutes late?

A user adapting the pipeline writes a module like this one (a suite and a feature builder) and
names its functions in the pipeline config (``validation.suite`` and ``features.builder``).
Features use only what is known before departure (schedule, route, plane, weather at the origin
in the scheduled hour): no departure delay, so the model can score a day's flights ahead of time.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from great_expectations.expectations import Expectation
    from pyspark.sql import DataFrame

    from jobs.config import FeatureSpec, TableSpec

LATE_MINUTES = 15
WEATHER_COLUMNS = ["temp", "dewp", "humid", "wind_dir", "wind_speed", "precip", "pressure", "visib"]
KEY_COLUMNS = ["year", "month", "day", "carrier", "flight", "origin", "dest", "sched_dep_time", "hour", "minute"]


def flights_suite(table: TableSpec, days: list[dt.date]) -> list[Expectation]:
    """Expectations for a window of raw flights partitions; any failure stops the run."""
    import great_expectations.expectations as gxe

    return [
        gxe.ExpectTableColumnsToMatchOrderedList(column_list=[*table.columns, "date"]),
        gxe.ExpectTableRowCountToBeBetween(min_value=1),
        # every requested day has rows, and no other day does
        gxe.ExpectColumnDistinctValuesToEqualSet(column="date", value_set=list(days)),
        gxe.UnexpectedRowsExpectation(
            unexpected_rows_query="SELECT * FROM {batch} WHERE make_date(year, month, day) <> date",
            description="year, month and day of every row match the partition's date",
        ),
        *[gxe.ExpectColumnValuesToNotBeNull(column=c) for c in [*KEY_COLUMNS, "distance"]],
        gxe.ExpectColumnValuesToBeBetween(column="distance", min_value=0, strict_min=True),
        gxe.ExpectColumnValuesToBeBetween(column="sched_dep_time", min_value=0, max_value=2359),
        gxe.ExpectColumnValuesToBeBetween(column="hour", min_value=0, max_value=23),
        gxe.ExpectColumnValuesToMatchRegex(column="origin", regex=r"^[A-Z]{3}$"),
        gxe.ExpectColumnValuesToMatchRegex(column="dest", regex=r"^[A-Z]{3}$"),
    ]


def build_features(tables: dict[str, DataFrame], spec: FeatureSpec) -> DataFrame:
    """One row per flight: pre-departure features and the label, keyed by ``date`` and the ids.

    Joins are left joins on unique keys, so no flight is dropped or duplicated: weather is
    averaged per origin and hour first (the source has a few duplicated hours), planes and
    airports are unique per tail number and airport code.
    """
    from pyspark.sql import functions as F

    flights = tables["flights"]
    weather = (
        tables["weather"]
        .groupBy("origin", "year", "month", "day", "hour")
        .agg(*[F.avg(c).alias(c) for c in WEATHER_COLUMNS])
    )
    planes = tables["planes"].select(
        "tailnum", F.col("year").alias("plane_year"), "manufacturer", "seats", "engines"
    )
    airports = tables["airports"].select(
        F.col("faa").alias("dest"), F.col("lat").alias("dest_lat"), F.col("lon").alias("dest_lon")
    )
    joined = (
        flights.join(weather, ["origin", "year", "month", "day", "hour"], "left")
        .join(planes, "tailnum", "left")
        .join(airports, "dest", "left")
    )
    derived = {
        "dep_hour": F.col("hour"),
        "dep_minute_of_day": F.col("hour") * 60 + F.col("minute"),
        "day_of_week": F.dayofweek("date"),
        "plane_age": F.col("year") - F.col("plane_year"),
        spec.label: F.when(F.col("arr_delay").isNull(), F.lit(None)).otherwise(
            (F.col("arr_delay") > LATE_MINUTES).cast("double")
        ),
    }
    joined = joined.withColumns(derived)
    ids = [c for c in spec.id_columns if c not in spec.inputs]
    return joined.select(
        "date",
        *[F.col(c) for c in ids],
        *[F.col(c).cast("string").alias(c) for c in spec.categorical],
        *[F.col(c).cast("double").alias(c) for c in spec.numeric],
        F.col(spec.label).cast("double").alias(spec.label),
    )

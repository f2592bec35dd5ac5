"""A zone's partitions checked before a job reads them, and the keys of rows checked where they are
joined: a damaged file or a file copied twice is a data error that names the file, its partition
and the command that rebuilds the day, before anything is written or judged.

- :func:`check_partitions`: every data file of each partition ends as Parquet does (its magic bytes,
  a footer no longer than the file), and no two files hold the same bytes. The second is decided
  on the files, not the rows: two files of a partition with the same size are compared byte for
  byte (two files Spark wrote are of different sizes all but always, so this reads nothing more
  than a listing and eight bytes a file), which is exact for "a file copied twice" and costs no
  Spark job, where a count of repeated keys would cost one over every row of every partition read.
- :func:`check_unique_keys`: one Spark aggregation, where rows are joined on a key (the monitor's
  predictions and outcomes, the score job's features): repeated rows that a copy did not make
  (two different files holding the same rows) are found there, named by the key and the count.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import defaultdict
from typing import TYPE_CHECKING

from jobs.errors import DataError, damaged_parquet
from jobs.lake import storage
from jobs.lake.layout import PARTITION, partition_name, rebuild_command

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from pyspark.sql import DataFrame

MAGIC = b"PAR1"  # how a Parquet file begins and ends
TAIL = 8  # a Parquet file ends with its footer's length (4 bytes, little-endian) and MAGIC
CHUNK = 1 << 20


class DamagedFileError(DataError):
    """A file of a zone that is truncated, damaged or not Parquet."""


class RepeatedRowsError(DataError):
    """A partition whose rows are there twice: a file copied, or rows that repeat their key."""


def data_files(folder: str) -> list[tuple[str, int]]:
    """(path, size) of the files directly in the partition ``folder`` that a Parquet reader reads
    (Spark and pyarrow skip names starting with ``.`` or ``_``: checksums, ``_SUCCESS``)."""
    return [(f"{folder.rstrip('/')}/{name}", size) for name, _mtime, size in storage.files_under(folder)
            if "/" not in name and not name.startswith((".", "_"))]


def tail_problem(path: str, size: int) -> str | None:
    """Why the file's last bytes are not a Parquet file's, or None when they are."""
    if size < len(MAGIC) + TAIL:
        return f"{size} bytes: too short for Parquet"
    fs, where = storage.filesystem(path)
    with fs.open_input_file(where) as handle:
        tail = handle.read_at(TAIL, size - TAIL)
    if tail[4:] != MAGIC:
        return "no Parquet magic bytes at its end"
    footer = int.from_bytes(tail[:4], "little")
    if footer > size - TAIL - len(MAGIC):
        return f"its footer claims {footer} bytes of a file of {size}"
    return None


def digest(path: str) -> bytes:
    fs, where = storage.filesystem(path)
    hashed = hashlib.blake2b(digest_size=32)
    with fs.open_input_stream(where) as stream:
        while chunk := stream.read(CHUNK):
            hashed.update(chunk)
    return hashed.digest()


def footer_rows(path: str) -> int:
    import pyarrow.parquet as pq

    fs, where = storage.filesystem(path)
    with fs.open_input_file(where) as handle:
        return pq.ParquetFile(handle).metadata.num_rows


def rebuild_advice(path: str) -> str:
    command = rebuild_command(path)
    return f"rebuild the day: {command}" if command else "restore the partition from where it came from"


def check_partitions(folders: Iterable[str]) -> None:
    """Refuse, before anything reads them, the partitions ``folders`` of a zone when one holds a
    file that is not Parquet (:class:`DamagedFileError`) or two files with the same bytes
    (:class:`RepeatedRowsError`); a folder that does not exist is left to the reader."""
    for folder in folders:
        files = data_files(folder)
        for path, size in files:
            if (problem := tail_problem(path, size)) is not None:
                raise DamagedFileError(damaged_parquet(path, problem))
        same_size: dict[int, list[str]] = defaultdict(list)
        for path, size in files:
            same_size[size].append(path)
        for paths in same_size.values():
            if len(paths) < 2:
                continue
            first: dict[bytes, str] = {}
            for path in paths:
                if (original := first.setdefault(digest(path), path)) != path:
                    raise RepeatedRowsError(
                        f"{path} is a copy of {original} (the same bytes) in the partition {folder}: its "
                        f"{footer_rows(path)} rows would be read twice. Move the copy out of the lake, or "
                        f"{rebuild_advice(path)}; then run the task again")


def check_unique_keys(rows: DataFrame, keys: Sequence[str], what: str, zone: str, keys_from: str = "") -> None:
    """Refuse ``rows`` (of ``what``, read from the date-partitioned ``zone``) when a key (``keys``
    and the partition column, nulls equal to nulls) has more than one row: one Spark aggregation;
    the error names the key, how many keys and rows repeat, and the days. ``keys_from``: the config
    key that names ``keys``, which the error points at too (distinct rows the key does not tell
    apart)."""
    from pyspark.sql import functions as F

    key = list(dict.fromkeys([*keys, PARTITION]))
    repeated = rows.groupBy(*key).count().where(F.col("count") > 1)
    found = repeated.agg(F.count(F.lit(1)).alias("keys"), F.sum("count").alias("rows"),
                         F.sort_array(F.collect_set(F.col(PARTITION).cast("string"))).alias("days"),
                         F.first(F.struct(*key)).alias("example")).first()
    if not found or not found["keys"]:
        return
    days = list(found["days"])
    folder = f"{zone}/{partition_name(dt.date.fromisoformat(days[0]))}"
    example = ", ".join(f"{c}={v!r}" for c, v in found["example"].asDict().items())
    raise RepeatedRowsError(
        f"{what}: {found['keys']} key(s) of ({', '.join(key)}) repeat, on {found['rows']} rows (e.g. {example}), "
        f"in {len(days)} partition(s) of {zone} ({', '.join(days)}): a row of a key must be there once, or it "
        f"would be counted twice. Look for a file that repeats another's rows in {folder}, move it out of the "
        f"lake, or {rebuild_advice(folder)}; then run the task again"
        + (f". If the rows differ, the key does not tell them apart: list the columns that do in {keys_from} "
           f"(now {list(keys)})" if keys_from else ""))

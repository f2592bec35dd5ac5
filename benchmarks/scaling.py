"""Bigger inputs made from the real rows: a folder of date partitions at N times its size
(:func:`resample_days`), or all of them as one day's partition (:func:`one_partition`), with the source
files' schema; for benchmarks that need more rows than the example dataset has."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from jobs.lake.layout import PARTITION, partition_day, partition_name

if TYPE_CHECKING:
    import pyarrow as pa

JITTER = 0.05  # the scaled-up set's noise on continuous inputs, in standard deviations of the day


def resample_days(source: str, target: str, factor: float, numeric: list[str], seed: int = 13) -> int:
    """Write ``factor`` x the rows of every date partition under ``source`` to ``target``; returns the rows.

    Each day keeps its own rows (one copy per whole unit of ``factor``, the first as it is) and adds
    bootstrap resamples of them, with the continuous columns of ``numeric`` jittered by JITTER of the
    day's standard deviation (nulls stay null; integer-valued columns are resampled, not jittered).
    One file per date partition, the source files' schema (Spark's metadata included).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if factor <= 0:
        raise ValueError(f"the scale factor must be positive, got {factor}")
    written = 0
    for folder in sorted(p for p in Path(source).iterdir() if p.is_dir() and partition_day(p.name) is not None):
        files = sorted(f for f in folder.glob("*.parquet") if not f.name.startswith((".", "_")))
        day = pa.concat_tables([pq.read_table(f) for f in files])
        n = day.num_rows
        wanted = round(factor * n)
        rng = np.random.default_rng([seed, partition_day(folder.name).toordinal()])
        copies = [day] if wanted >= n else []
        left = wanted - n * len(copies)
        while left > 0:
            take = min(n, left)
            copies.append(jitter(day.take(rng.integers(0, n, take)), day, numeric, rng))
            left -= take
        (Path(target) / folder.name).mkdir(parents=True, exist_ok=True)
        table = pa.concat_tables(copies) if copies else day.slice(0, 0)
        pq.write_table(table, Path(target) / folder.name / "part-00000.parquet", compression="snappy")
        written += table.num_rows
    return written


def one_partition(source: str, target: str, day: dt.date) -> int:
    """Write every date partition under ``source`` as the single partition ``day`` under ``target``
    (one file); returns the rows."""
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    table = pads.dataset(source, format="parquet", partitioning="hive", exclude_invalid_files=True).to_table()
    folder = Path(target) / partition_name(day)
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.drop_columns([PARTITION]), folder / "part-00000.parquet", compression="snappy")
    return table.num_rows


def jitter(sample: pa.Table, day: pa.Table, numeric: list[str], rng: np.random.Generator) -> pa.Table:
    """``sample`` with each continuous column of ``numeric`` moved by normal noise of JITTER of its
    standard deviation in ``day``; nulls, and columns of whole numbers only, are left as they are."""
    import pyarrow as pa

    for col in numeric:
        if col not in sample.column_names:
            continue
        reference = day[col].to_numpy(zero_copy_only=False).astype(np.float64)
        finite = reference[np.isfinite(reference)]
        if finite.size < 2 or np.all(np.mod(finite, 1.0) == 0.0):
            continue
        values = sample[col].to_numpy(zero_copy_only=False).astype(np.float64)
        noisy = values + rng.normal(0.0, JITTER * float(finite.std()), len(values))
        index = sample.column_names.index(col)
        column = pa.array(noisy, type=sample.schema.field(col).type, mask=np.isnan(values))
        sample = sample.set_column(index, sample.schema.field(col), column)
    return sample


def folder_bytes(path: str) -> int:
    """The bytes of every file under ``path``."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())

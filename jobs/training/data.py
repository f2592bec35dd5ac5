"""The training window's data: its days, the preprocessor fitted with Spark, and each rank's share
of the feature Parquet, read with pyarrow (no Spark in the ranks)."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs.errors import DataError
from jobs.lake.files import MissingPartitionError, path_exists
from jobs.lake.integrity import check_partitions

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    import pandas as pd
    import torch
    from pyspark.sql import DataFrame, SparkSession

    from jobs.config import FeatureSpec, FeedCalendar, TrainSpec
    from jobs.lake.layout import Lake
    from jobs.model.tabular import Preprocessor


def split_window(run_date: dt.date, train_days: int, holdout_days: int, calendar: FeedCalendar | None = None,
                 ) -> tuple[list[dt.date], list[dt.date]]:
    """(training days, holdout days): the open days of ``calendar`` (default: every day), oldest
    first, the holdout ending with the last open day on or before ``run_date``; a closed day is
    skipped, not counted, so a window of N days holds N days with rows."""
    from jobs.config import FeedCalendar

    days = (calendar or FeedCalendar()).open_days_ending(run_date, train_days + holdout_days)
    return days[:train_days], days[train_days:]


def split_validation(run_date: dt.date, train_days: int, validation_days: int, holdout_days: int,
                     calendar: FeedCalendar | None = None) -> tuple[list[dt.date], list[dt.date], list[dt.date]]:
    """(training, validation, holdout days): open days, oldest first, the holdout ending with the
    last open day on or before ``run_date``; the validation days (possibly none) sit between the
    other two."""
    train, rest = split_window(run_date, train_days, validation_days + holdout_days, calendar)
    return train, rest[:validation_days], rest[validation_days:]


def training_window(run_date: dt.date, train: TrainSpec, featured: Iterable[dt.date],
                    calendar: FeedCalendar | None = None) -> tuple[list[dt.date], list[dt.date], list[dt.date]]:
    """(training, validation, holdout days) of a training on ``run_date`` (:func:`split_validation`,
    open days of ``calendar``); with ``train.max_train_days``, the training days go on back over
    the open days before them that have features (``featured``: the features zone's days), up to
    the first gap, at most ``max_train_days`` in all: an expanding window over the history the
    lake holds. Closed days are passed over, never a gap."""
    from jobs.config import FeedCalendar

    calendar = calendar or FeedCalendar()
    days, validation, holdout = split_validation(run_date, train.train_days, train.validation_days,
                                                 train.holdout_days, calendar)
    featured = set(featured)
    cap = train.reach_days
    while len(days) < cap and (earlier := calendar.open_days_ending(days[0] - dt.timedelta(days=1), 1)[0]) in featured:
        days.insert(0, earlier)
    return days, validation, holdout


def featured_days(spark: SparkSession, lake: Lake, train: TrainSpec) -> list[dt.date]:
    """The features zone's days, when an expanding window needs them (none otherwise: no listing)."""
    from jobs.lake.files import list_partitions

    return list_partitions(spark, lake.features) if train.max_train_days else []


def feature_dirs(spark: SparkSession, lake: Lake, days: list[dt.date]) -> list[str]:
    from jobs.features.lineage import check_fresh

    dirs = [lake.partition(lake.features, day) for day in days]
    missing = [d for d in dirs if not path_exists(spark, d)]
    if missing:
        raise MissingPartitionError(
            f"{len(missing)} feature partition(s) missing, e.g. {missing[0]}: run the features job for them first"
        )
    check_fresh(lake, days)  # a day whose history changed since it was built is refused, not trained on
    check_partitions(dirs)  # a damaged file or one copied twice: a data error before Spark or a rank reads it
    return dirs


WINDOW_PARTS = ("train", "validation", "holdout")


@dataclass(frozen=True)
class Window:
    """A training's window in the lake: the days and feature partitions of each part (``train``,
    ``validation``, ``holdout``), as :func:`open_window` found them."""

    days: dict[str, list[dt.date]]
    dirs: dict[str, list[str]]
    features_path: str

    def span(self, part: str) -> str:
        """``first..last`` day of the part, empty where it has none."""
        found = self.days[part]
        return f"{found[0]}..{found[-1]}" if found else ""

    @property
    def described(self) -> str:
        """The training days as an error names them."""
        return f"training window {self.span('train')} ({self.features_path})"


def open_window(spark: SparkSession, lake: Lake, train: TrainSpec, run_date: dt.date,
                calendar: FeedCalendar | None = None) -> Window:
    """The window of a training on ``run_date`` (:func:`training_window`, in the feed's open days),
    each of its feature partitions there and fresh (:func:`feature_dirs`)."""
    found = training_window(run_date, train, featured_days(spark, lake, train), calendar)
    days = dict(zip(WINDOW_PARTS, found, strict=True))
    dirs = {part: feature_dirs(spark, lake, days[part]) for part in ("train", "holdout", "validation")}
    return Window(days, {part: dirs[part] for part in WINDOW_PARTS}, lake.features)


class LabelError(DataError):
    """A training window whose labels cannot train or evaluate a classifier."""


class FeatureStatsError(DataError):
    """Numeric features whose mean or standard deviation is not finite."""


def check_labels(df: DataFrame, label: str, window: str, *, both_classes: bool = True) -> int:
    """Fail before any training when ``window``'s rows have no label, or (``both_classes``) only one
    class: one small Spark job instead of a failure deep inside the ranks. Returns the labelled rows."""
    from pyspark.sql import functions as F

    counts = df.agg(F.count(F.lit(1)).alias("rows"), F.count(label).alias("labelled"),
                    F.countDistinct(label).alias("classes")).first()
    if counts["labelled"] == 0:
        raise LabelError(
            f"{window}: none of its {counts['rows']} feature rows has a label ({label} is null in all of them): "
            "check that the label's source columns arrive (validation, features job), or train on another window "
            "(--run-date, train.train_days)"
        )
    if both_classes and counts["classes"] < 2:
        value = df.where(F.col(label).isNotNull()).select(label).first()[0]
        raise LabelError(
            f"{window}: all {counts['labelled']} labelled rows have {label} = {value}: a classifier needs both "
            "classes; train on a longer or another window (train.train_days, --run-date) or check the label's "
            "definition (features.builder)"
        )
    return int(counts["labelled"])


def fit_preprocessor(
    df: DataFrame, spec: FeatureSpec, min_count: int, window: str = "the training window", clip: bool = False,
    local_max_rows: int = 0, labelled_rows: int | None = None,
) -> Preprocessor:
    """Vocabularies (categories seen at least ``min_count`` times), mean/std of labelled rows and,
    with ``clip`` (``train.clip_to_training_range``), their range, which encoding clips to.

    A window of at most ``local_max_rows`` labelled rows (``train.in_process_max_rows``) is counted in
    this process from its columns in Arrow (:func:`_local_statistics`, the same figures): Spark's two
    wide aggregations of a long window cost seconds a job, and four to five jobs of a training fit
    the same window's preprocessor (docs/studies/2026-11-28-a-windows-model-selection-profiled.md).
    ``labelled_rows``: the window's labelled rows where the caller has counted them
    (:func:`check_labels`), not counted again.

    A numeric feature whose mean or standard deviation is NaN or infinite (NaN or infinite values,
    or values so large that their sum overflows) fails with a :class:`FeatureStatsError` naming the
    feature(s) and ``window``: standardising by it would turn the feature into zeros or NaN."""
    from pyspark.sql import functions as F

    from jobs.model.tabular import Preprocessor, safe_std

    labelled = df.where(F.col(spec.label).isNotNull())
    if local_max_rows and (labelled.count() if labelled_rows is None else labelled_rows) <= local_max_rows:
        columns = labelled.select(*spec.categorical, *[F.col(c).cast("double").alias(c) for c in spec.model_numeric])
        vocab, stats = _local_statistics(columns.toArrow(), spec, min_count, clip)
    else:
        vocab, stats = _spark_statistics(labelled, spec, min_count, clip)
    bad = {c: (stats[f"mean_{c}"], stats[f"std_{c}"]) for c in spec.model_numeric
           if any(v is not None and not math.isfinite(v) for v in (stats[f"mean_{c}"], stats[f"std_{c}"]))}
    if bad:
        listed = ", ".join(f"{c} (mean {m}, std {s})" for c, (m, s) in bad.items())
        raise FeatureStatsError(
            f"{window}: numeric feature(s) with non-finite statistics: {listed}. Their labelled rows hold NaN, "
            "infinite or absurdly large values (near the float maximum), and standardising by these statistics "
            "would zero the feature. Find the rows (e.g. isnan(col) or abs(col) > 1e300 in the features), add a "
            "rule that quarantines them (jobs/validation/rules.py), or drop the feature from features.numeric"
        )
    return Preprocessor(
        categorical=list(spec.categorical),
        numeric=list(spec.model_numeric),
        vocab=vocab,
        mean={c: float(stats[f"mean_{c}"] or 0.0) for c in spec.model_numeric},
        std={c: safe_std(stats[f"std_{c}"]) for c in spec.model_numeric},
        **({"low": _finite(stats, "low", spec.model_numeric), "high": _finite(stats, "high", spec.model_numeric)}
           if clip else {}),
    )


def _spark_statistics(labelled: DataFrame, spec: FeatureSpec, min_count: int, clip: bool
                      ) -> tuple[dict[str, list[Any]], Any]:
    """:func:`fit_preprocessor`'s vocabularies and statistics (``mean_<c>``, ``std_<c>``, with ``clip``
    ``low_<c>`` and ``high_<c>``) by Spark: every categorical column counted in one pass (grouping
    sets), the numbers in another."""
    from pyspark.sql import functions as F

    vocab: dict[str, list[Any]] = {col: [] for col in spec.categorical}
    if spec.categorical:  # every column's counts in one pass over the window (grouping sets), not one each
        flags = [F.grouping(col).alias(f"_grouping_{i}") for i, col in enumerate(spec.categorical)]
        counted = (labelled.groupingSets([[col] for col in spec.categorical], *spec.categorical)
                   .agg(F.count("*").alias("_count"), *flags).where(F.col("_count") >= min_count).collect())
        for row in counted:
            i = [row[f"_grouping_{i}"] for i in range(len(spec.categorical))].index(0)  # the column grouped by
            if (value := row[spec.categorical[i]]) is not None:
                vocab[spec.categorical[i]].append(value)
        vocab = {col: sorted(values) for col, values in vocab.items()}
    stats = labelled.agg(
        *[F.mean(c).alias(f"mean_{c}") for c in spec.model_numeric],
        *[F.stddev_pop(c).alias(f"std_{c}") for c in spec.model_numeric],
        *[F.min(c).alias(f"low_{c}") for c in (spec.model_numeric if clip else [])],
        *[F.max(c).alias(f"high_{c}") for c in (spec.model_numeric if clip else [])],
    ).first()
    return vocab, stats


def _local_statistics(table: Any, spec: FeatureSpec, min_count: int, clip: bool
                      ) -> tuple[dict[str, list[Any]], dict[str, Any]]:
    """:func:`_spark_statistics` of the labelled rows as an Arrow table (numbers as doubles), with
    Spark's rules: nulls skipped, a NaN or an overflowing sum makes the mean NaN or infinite, a
    column without values has None."""
    import pyarrow.compute as pc

    vocab = {}
    for col in spec.categorical:
        counted = pc.value_counts(table.column(col)).to_pylist()
        vocab[col] = sorted(c["values"] for c in counted if c["values"] is not None and c["counts"] >= min_count)
    stats: dict[str, Any] = {}
    for col in spec.model_numeric:
        values = table.column(col)
        stats[f"mean_{col}"] = pc.mean(values).as_py()
        stats[f"std_{col}"] = pc.stddev(values, ddof=0).as_py()
        if clip:
            low_high = pc.min_max(values)
            stats[f"low_{col}"], stats[f"high_{col}"] = low_high["min"].as_py(), low_high["max"].as_py()
    return vocab, stats


def _finite(stats: Any, kind: str, columns: list[str]) -> dict[str, float]:
    """The finite ``kind`` (low, high) statistics of ``columns``: none for a column without values."""
    found = {c: stats[f"{kind}_{c}"] for c in columns}
    return {c: float(v) for c, v in found.items() if v is not None and math.isfinite(float(v))}


def shard_units(dirs: Sequence[str], rank: int, world: int) -> list[tuple[str, int]]:
    """This rank's share of the data: (Parquet file, row group) pairs, dealt round-robin.

    Every rank lists the same files in the same order, so the shares are disjoint, cover every
    row group exactly once, and are the same from one run to the next. ``dirs`` are lake paths:
    local folders or object-store URIs (:mod:`jobs.lake.storage`).
    """
    import pyarrow.parquet as pq

    from jobs.lake.storage import filesystem, list_files

    units = []
    for folder in dirs:
        for uri in list_files(folder, ".parquet"):
            fs, path = filesystem(uri)
            with fs.open_input_file(path) as handle:
                units += [(uri, group) for group in range(pq.ParquetFile(handle).num_row_groups)]
    return units[rank::world]


def read_units(units: list[tuple[str, int]], columns: list[str]) -> list[Any]:
    """The Arrow tables of these (file, row group) units, reading only ``columns``; a unit that
    cannot be read fails naming its file, partition and the command that rebuilds the day."""
    from jobs.training.stream import read_group

    return [read_group(uri, group, columns) for uri, group in units]


def labelled_rows(tables: list[Any], columns: list[str], label: str) -> pd.DataFrame:
    """The rows of these Arrow tables (of ``columns``) that have a ``label``, as one DataFrame."""
    import pandas as pd

    if not tables:
        return pd.DataFrame(columns=columns)
    frame = pd.concat([table.to_pandas() for table in tables], ignore_index=True)
    return frame[frame[label].notna()].reset_index(drop=True)


def epoch_order(seed: int, epoch: int, rank: int, rows: int) -> torch.Tensor:
    """A rank's shuffle of its rows for an epoch, seeded by (seed, epoch, rank): a resumed training
    repeats the order of one that never stopped."""
    import torch

    return torch.randperm(rows, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch * 1009 + rank))


def step_count(rows: int, batch_size: int) -> int:
    """Optimizer steps per epoch for ``rows`` rows in batches of at most ``batch_size`` (at least one)."""
    return max(1, -(-rows // batch_size))


def epoch_batches(seed: int, epoch: int, rank: int, rows: int, steps: int, device: Any) -> tuple[torch.Tensor, ...]:
    """The epoch's batches of a rank: its shuffle (:func:`epoch_order`), moved to ``device`` once,
    cut into ``steps`` index tensors of as equal sizes as can be."""
    import torch

    return torch.tensor_split(epoch_order(seed, epoch, rank, rows).to(device), steps)


def place_shard(tensors: tuple[torch.Tensor, ...], device: torch.device) -> tuple[torch.Tensor, ...]:
    """The rank's rows on its device, copied there once; on a GPU where they would take more than
    half of the free memory, in page-locked host memory instead (each step then copies its batch)."""
    import torch

    if device.type != "cuda":
        return tensors
    size = sum(t.numel() * t.element_size() for t in tensors)
    if size > torch.cuda.mem_get_info(device)[0] // 2:
        return tuple(t.pin_memory() for t in tensors)
    return tuple(t.to(device) for t in tensors)

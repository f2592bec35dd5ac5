"""A rank's share of the training Parquet, streamed: its row groups in a seeded order per epoch,
read ahead by a background thread (at most ``read_ahead`` row groups), decoded ``read_batch_rows``
rows at a time and encoded as they arrive, and drawn into batches from a shuffle buffer of at most
``buffer_rows`` rows. A rank's memory is then set by those settings, not by the window.

Everything a rank streams is planned from the Parquet footers before the first row is read: the
labelled rows of each row group (the row count less the label's null count), so every rank knows
every rank's share, cuts its own into the same number of batches as the largest share needs
(DDP steps in lockstep), and decides when to refill the buffer from counts, never from timing. An
epoch's batches are a pure function of (seed, epoch, rank) and the files: a training resumed from
a checkpoint repeats the order of one that never stopped.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs.config import DATA_PATHS
from jobs.errors import DataError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from jobs.model.tabular import Preprocessor

Unit = tuple[str, int]  # (Parquet file, row group), as jobs.training.data.shard_units deals them
READ_BATCH_ROWS = 16384  # rows of a row group decoded at once (train.read_batch_rows)


class RowGroupReadError(DataError):
    """A row group of the training or holdout Parquet that cannot be read (damaged, truncated, or
    rewritten while the training ran)."""


class EmptyShareError(DataError):
    """A training window that leaves a rank without a labelled row."""


def unreadable(uri: str, group: int | None, err: BaseException | str) -> RowGroupReadError:
    """The error for a file (one of its row groups) that cannot be read, naming it and what to do."""
    from jobs.lake.layout import partition_of, rebuild_command

    where = f"{uri} (row group {group})" if group is not None else uri
    found = partition_of(uri)
    cause = f"{type(err).__name__}: {err}" if isinstance(err, BaseException) else err
    command = rebuild_command(uri) or "the features job for its day"
    return RowGroupReadError(
        f"{where} cannot be read: {cause}. The file{f' (in the partition {found[0]})' if found else ''} is "
        "truncated, damaged or not Parquet, or was rewritten or removed while the training ran: rebuild the day "
        f"({command}), then run the training again"
    )


@dataclass(frozen=True)
class SharePlan:
    """Every row group of a window with its labelled rows (from the footers), and how they are
    dealt to ``world`` ranks (round-robin, as :func:`jobs.training.data.shard_units`)."""

    units: tuple[Unit, ...]
    labelled: tuple[int, ...]
    world: int

    def share(self, rank: int) -> tuple[list[Unit], list[int]]:
        """A rank's row groups and their labelled rows."""
        return list(self.units[rank::self.world]), list(self.labelled[rank::self.world])

    @property
    def share_rows(self) -> list[int]:
        """Labelled rows of each rank's share, rank by rank."""
        return [sum(self.labelled[rank::self.world]) for rank in range(self.world)]

    def refuse_empty(self, window: str) -> None:
        """Raise :class:`EmptyShareError`, saying why, when a rank would get no labelled row: its
        collectives would wait for steps it cannot take."""
        rows = self.share_rows
        empty = [rank for rank, n in enumerate(rows) if n == 0]
        if not empty:
            return
        groups = [len(self.units[rank::self.world]) for rank in empty]
        raise EmptyShareError(
            f"{window}: {len(empty)} of {self.world} ranks would get no labelled row (rank {empty[0]}: "
            f"{groups[0]} row group(s)): the window has {len(self.units)} row group(s) with "
            f"{sum(self.labelled)} labelled rows, and row groups are dealt whole, round-robin, to the ranks. "
            "Train with fewer processes (--num-processes, train.num_processes) or on a longer window "
            "(train.train_days), or write the features in more row groups"
        )


def plan_shares(dirs: Sequence[str], world: int, label: str) -> SharePlan:
    """The window's row groups and labelled rows from the Parquet footers alone; a row group whose
    footer has no null count for ``label`` has its label column read. A file whose footer cannot be
    read fails with :class:`RowGroupReadError` naming it."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from jobs.lake.storage import filesystem, list_files

    units: list[Unit] = []
    labelled: list[int] = []
    for folder in dirs:
        for uri in list_files(folder, ".parquet"):
            fs, path = filesystem(uri)
            try:
                with fs.open_input_file(path) as handle:
                    parquet = pq.ParquetFile(handle)
                    column = parquet.schema_arrow.get_field_index(label)
                    for group in range(parquet.num_row_groups):
                        meta = parquet.metadata.row_group(group)
                        stats = meta.column(column).statistics if column >= 0 else None
                        if stats is not None and stats.has_null_count:
                            count = meta.num_rows - stats.null_count
                        else:
                            table = parquet.read_row_group(group, columns=[label])
                            count = int(pc.sum(pc.is_valid(table.column(0))).as_py() or 0)
                        units.append((uri, group))
                        labelled.append(count)
            except DataError:
                raise
            except Exception as err:  # noqa: BLE001 - pyarrow's errors do not name the file
                raise unreadable(uri, None, err) from err
    return SharePlan(tuple(units), tuple(labelled), world)


def resolve_data_path(setting: str, largest_share: int, buffer_rows: int) -> str:
    """``memory`` or ``stream``: ``auto`` keeps a share in memory when it fits in the buffer anyway
    (memory would be bounded by ``buffer_rows`` either way, and the in-memory path is the faster),
    and streams a larger one."""
    if setting not in DATA_PATHS:
        raise ValueError(f"train.data_path must be one of {', '.join(DATA_PATHS)}, got {setting!r}")
    if setting != "auto":
        return setting
    return "memory" if largest_share <= buffer_rows else "stream"


def batch_sizes(rows: int, steps: int) -> list[int]:
    """``rows`` cut into ``steps`` batches of as equal sizes as can be (as torch.tensor_split cuts)."""
    small, extra = divmod(rows, steps)
    return [small + 1] * extra + [small] * (steps - extra)


def epoch_generator(seed: int, epoch: int, rank: int, stream: int = 0) -> np.random.Generator:
    """A generator of a rank's epoch, seeded by (seed, epoch, rank) alone; ``stream`` tells apart
    the generators of one epoch (the row-group order, the draws)."""
    import numpy as np

    return np.random.default_rng([seed, epoch, rank, stream])


def read_group(uri: str, group: int, columns: list[str]) -> Any:
    """One row group's ``columns`` as an Arrow table; any failure a :class:`RowGroupReadError`
    naming the file and row group."""
    import pyarrow.parquet as pq

    from jobs.lake.storage import filesystem

    try:
        fs, path = filesystem(uri)
        with fs.open_input_file(path) as handle:
            return pq.ParquetFile(handle).read_row_group(group, columns=columns)
    except Exception as err:  # noqa: BLE001 - pyarrow's errors do not name the file
        raise unreadable(uri, group, err) from err


def read_batches(uri: str, group: int, columns: list[str], batch_rows: int) -> Iterator[Any]:
    """One row group's ``columns`` as Arrow record batches of at most ``batch_rows`` rows, in the
    row group's order; any failure a :class:`RowGroupReadError` naming the file and row group.

    Decoding a whole row group at once costs memory in proportion to the row group, which the
    writer chose, not the training: batches keep it to ``batch_rows`` rows at a time."""
    import pyarrow.parquet as pq

    from jobs.lake.storage import filesystem

    try:
        fs, path = filesystem(uri)
        with fs.open_input_file(path) as handle:
            yield from pq.ParquetFile(handle).iter_batches(batch_size=batch_rows, row_groups=[group], columns=columns)
    except Exception as err:  # noqa: BLE001 - pyarrow's errors do not name the file
        raise unreadable(uri, group, err) from err


def labelled_frames(uri: str, group: int, columns: list[str], label: str, batch_rows: int,
                    ) -> Iterator[pd.DataFrame]:
    """The labelled rows of a row group as pandas, at most ``batch_rows`` rows of the file at a
    time, in the row group's order (a batch without a labelled row yields nothing)."""
    import pyarrow.compute as pc

    for batch in read_batches(uri, group, columns, batch_rows):
        batch = batch.filter(pc.is_valid(batch.column(label)))
        if batch.num_rows:
            yield batch.to_pandas()


Encoded = tuple["np.ndarray", "np.ndarray", "np.ndarray"]  # category indices, numbers, labels


def encode_frame(pre: Preprocessor, frame: pd.DataFrame, label: str) -> Encoded:
    import numpy as np

    cats, nums = pre.encode(frame)
    return cats, nums, frame[label].to_numpy(np.float32)


def encode_group(pre: Preprocessor, uri: str, group: int, columns: list[str], label: str, batch_rows: int,
                 expected: int | None = None) -> Encoded:
    """The labelled rows of a row group, encoded, read ``batch_rows`` rows at a time
    (:func:`labelled_frames`): the same arrays, row for row, as encoding the whole group at once,
    since encoding goes row by row. With ``expected``, a count that differs from the footer's (the
    file changed since the plan) is a :class:`RowGroupReadError`."""
    import numpy as np
    import pandas as pd

    parts = [encode_frame(pre, frame, label) for frame in labelled_frames(uri, group, columns, label, batch_rows)]
    rows = sum(len(part[2]) for part in parts)
    if expected is not None and rows != expected:
        raise unreadable(uri, group, f"it holds {rows} labelled rows where the plan had {expected}")
    if not parts:
        return encode_frame(pre, pd.DataFrame({c: pd.Series(dtype=object) for c in columns}), label)
    if len(parts) == 1:
        return parts[0]
    return tuple(np.concatenate(arrays) for arrays in zip(*parts, strict=True))  # type: ignore[return-value]


class ReadAhead:
    """A background thread reading, filtering and encoding row groups in the given order into a
    queue of at most ``depth`` groups. :meth:`get` returns them in that order, or raises what the
    thread met (a :class:`RowGroupReadError`); :meth:`close` stops the thread."""

    def __init__(self, units: Sequence[Unit], counts: Sequence[int], columns: list[str], label: str,
                 pre: Preprocessor, depth: int, batch_rows: int = READ_BATCH_ROWS) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._args = (list(units), list(counts), columns, label, pre, batch_rows)
        self.read = self.taken = self.peak_ahead = 0  # groups read, handed out, most read and not yet handed out
        self._thread = threading.Thread(target=self._run, name="parquet-read-ahead", daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        units, counts, columns, label, pre, batch_rows = self._args
        try:
            for (uri, group), count in zip(units, counts, strict=True):
                if self._stop.is_set():
                    return
                item = encode_group(pre, uri, group, columns, label, batch_rows, count)
                self.read += 1
                self.peak_ahead = max(self.peak_ahead, self.read - self.taken)
                if not self._put(item):
                    return
        except BaseException as err:  # handed to the consumer, which raises it in the rank
            self._put(err)

    def get(self) -> Encoded:
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        self.taken += 1
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


class ShuffleBuffer:
    """Encoded rows waiting to be drawn into batches. A draw takes rows at random positions and
    fills their places from the end, so it costs the batch, not the buffer. ``rows``: held now;
    ``peak_rows``: the most held at once."""

    def __init__(self) -> None:
        self._arrays: list[np.ndarray] | None = None
        self.rows = self.peak_rows = 0

    def add(self, batch: Encoded) -> None:
        import numpy as np

        n = len(batch[2])
        if self._arrays is None:
            self._arrays = [np.empty((max(n, 1), *a.shape[1:]), dtype=a.dtype) for a in batch]
        capacity = len(self._arrays[0])
        if self.rows + n > capacity:  # grows to the most held, which the caller bounds
            grown = max(self.rows + n, 2 * capacity)
            self._arrays = [np.concatenate([a[: self.rows], np.empty((grown - self.rows, *a.shape[1:]), a.dtype)])
                            for a in self._arrays]
        for store, values in zip(self._arrays, batch, strict=True):
            store[self.rows: self.rows + n] = values
        self.rows += n
        self.peak_rows = max(self.peak_rows, self.rows)

    def take(self, rng: np.random.Generator, size: int) -> Encoded:
        import numpy as np

        if self._arrays is None:
            raise ValueError("a draw from a buffer that never held a row")
        n = self.rows
        picked = rng.choice(n, size, replace=False)
        out = tuple(a[picked] for a in self._arrays)
        tail = n - size
        holes = picked[picked < tail]
        survivors = np.setdiff1d(np.arange(tail, n), picked, assume_unique=True)
        for a in self._arrays:
            a[holes] = a[survivors]
        self.rows = tail
        return out


class StreamingShard:
    """A rank's share, streamed epoch by epoch (:meth:`epoch`): ``steps`` batches per epoch that
    hold every labelled row of the share once.

    The buffer takes the next row group while it holds fewer rows than the next batch, or while
    the group fits in ``buffer_rows``: it holds at most ``max(buffer_rows, batch + a row group)``
    rows, and the read-ahead at most ``read_ahead`` more row groups. A row group is decoded
    ``batch_rows`` rows at a time (:func:`encode_group`) and handed over whole: the order and the
    batches do not depend on ``batch_rows``."""

    def __init__(self, units: Sequence[Unit], counts: Sequence[int], columns: list[str], label: str,
                 pre: Preprocessor, *, steps: int, buffer_rows: int, read_ahead: int, seed: int, rank: int,
                 batch_rows: int = READ_BATCH_ROWS) -> None:
        self.units, self.counts = list(units), list(counts)
        self.columns, self.label, self.pre = columns, label, pre
        self.steps, self.buffer_rows, self.read_ahead, self.batch_rows = steps, buffer_rows, read_ahead, batch_rows
        self.seed, self.rank = seed, rank
        self.rows = sum(self.counts)
        self.peak_rows = self.peak_ahead = 0  # the most rows the buffer held, groups read ahead, of any epoch

    def order(self, epoch: int) -> list[int]:
        """The epoch's order of the share's row groups (indices into ``units``)."""
        return [int(i) for i in epoch_generator(self.seed, epoch, self.rank).permutation(len(self.units))]

    def epoch(self, epoch: int) -> Iterator[Encoded]:
        """The epoch's batches, as numpy arrays (category indices, numbers, labels)."""
        order = [i for i in self.order(epoch) if self.counts[i] > 0]
        # Draws use a generator of their own, so the row-group order does not depend on how many draws were made.
        rng = epoch_generator(self.seed, epoch, self.rank, stream=1)
        reader = ReadAhead([self.units[i] for i in order], [self.counts[i] for i in order], self.columns,
                           self.label, self.pre, self.read_ahead, self.batch_rows)
        buffer = ShuffleBuffer()
        pending = [self.counts[i] for i in order]
        try:
            for size in batch_sizes(self.rows, self.steps):
                while pending and (buffer.rows < size or buffer.rows + pending[0] <= self.buffer_rows):
                    buffer.add(reader.get())
                    pending.pop(0)
                yield buffer.take(rng, size)
        finally:
            reader.close()
            self.peak_rows = max(self.peak_rows, buffer.peak_rows)
            self.peak_ahead = max(self.peak_ahead, reader.peak_ahead)


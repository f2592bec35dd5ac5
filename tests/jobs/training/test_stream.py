"""The streaming data path of a training rank (jobs/training/stream.py) on real Parquet files written
with pyarrow: seeded order, every labelled row once per epoch, bounded memory, equal steps per rank,
and unreadable row groups or empty shares refused saying why. No Spark, no torch.distributed."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from jobs.lake.layout import partition_name
from jobs.model.tabular import Preprocessor
from jobs.training.stream import (
    EmptyShareError,
    RowGroupReadError,
    StreamingShard,
    batch_sizes,
    plan_shares,
    resolve_data_path,
)

COLUMNS = ["row", "carrier", "distance", "label"]


def preprocessor(ids: int) -> Preprocessor:
    """Encodes ``row`` as a category whose index is the row's id + 1: a batch says which rows it holds."""
    return Preprocessor(categorical=["row", "carrier"], numeric=["distance"],
                        vocab={"row": [f"{i:06d}" for i in range(ids)], "carrier": ["AA", "UA"]},
                        mean={"distance": 0.0}, std={"distance": 1.0})


def write_days(root: Path, groups_per_day: list[int], rows_per_group: int = 10) -> tuple[list[str], set[int]]:
    """One Parquet file a day of ``groups_per_day[d]`` row groups; every fifth row has no label.
    Returns the day folders and the ids of the labelled rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    dirs, labelled, next_id = [], set(), 0
    for d, groups in enumerate(groups_per_day):
        folder = root / partition_name(dt.date(2013, 1, 1) + dt.timedelta(days=d))
        folder.mkdir(parents=True)
        ids = list(range(next_id, next_id + groups * rows_per_group))
        next_id += len(ids)
        label = [None if i % 5 == 0 else float(i % 2) for i in ids]
        labelled |= {i for i in ids if i % 5}
        pq.write_table(pa.table({"row": [f"{i:06d}" for i in ids], "carrier": ["AA" if i % 3 else "UA" for i in ids],
                                 "distance": [float(i) for i in ids], "label": label}),
                       folder / "part-0.parquet", row_group_size=rows_per_group)
        dirs.append(str(folder))
    return dirs, labelled


def damage_row_group(path: str | Path, group: int, column: str = "label") -> None:
    """Overwrite the first page header of a row group's ``column``: its footer stays readable, the
    row group does not."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    column = parquet.metadata.row_group(group).column(parquet.schema_arrow.get_field_index(column))
    start = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
    with open(path, "r+b") as handle:
        handle.seek(start)
        handle.write(b"\xff" * 24)


def shard(dirs: list[str], rank: int = 0, world: int = 1, *, batch_size: int = 8, buffer_rows: int = 25,
          read_ahead: int = 1, seed: int = 7, ids: int = 1000, batch_rows: int = 4096) -> StreamingShard:
    """A rank's streaming shard with the steps the train loop gives it (the largest share's)."""
    from jobs.training.data import step_count

    plan = plan_shares(dirs, world, "label")
    units, counts = plan.share(rank)
    return StreamingShard(units, counts, COLUMNS, "label", preprocessor(ids),
                          steps=step_count(max(plan.share_rows), batch_size), buffer_rows=buffer_rows,
                          read_ahead=read_ahead, seed=seed, rank=rank, batch_rows=batch_rows)


def row_ids(batch) -> list[int]:
    return [int(i) - 1 for i in batch[0][:, 0]]


def epoch_ids(stream: StreamingShard, epoch: int) -> list[list[int]]:
    return [row_ids(batch) for batch in stream.epoch(epoch)]


def test_the_plan_counts_labelled_rows_from_the_footers(tmp_path):
    import pyarrow.parquet as pq

    dirs, labelled = write_days(tmp_path, [3, 1, 2])
    plan = plan_shares(dirs, 2, "label")
    assert len(plan.units) == 6 and sum(plan.labelled) == len(labelled)
    for (uri, group), count in zip(plan.units, plan.labelled, strict=True):
        table = pq.ParquetFile(uri).read_row_group(group)
        assert count == table.num_rows - table.column("label").null_count
    assert plan.share_rows == [sum(plan.share(r)[1]) for r in (0, 1)] and sum(plan.share_rows) == len(labelled)


def test_without_statistics_in_the_footer_the_plan_reads_the_label_column(tmp_path):
    import pyarrow.parquet as pq

    dirs, labelled = write_days(tmp_path, [2, 1])
    for folder in dirs:  # the same rows, written without column statistics
        path = Path(folder) / "part-0.parquet"
        pq.write_table(pq.read_table(path), path, row_group_size=10, write_statistics=False)
        assert pq.ParquetFile(path).metadata.row_group(0).column(3).statistics is None
    assert plan_shares(dirs, 1, "label").labelled == (8, 8, 8)
    assert sorted(i for batch in epoch_ids(shard(dirs), 0) for i in batch) == sorted(labelled)


@pytest.mark.parametrize("batch_rows", [3, 4096])
def test_a_file_rewritten_with_other_rows_after_the_plan_fails_naming_it(tmp_path, batch_rows):
    """The steps were agreed on the footers' counts: a row group that now holds another number of
    labelled rows would break the ranks' lockstep, so it stops the rank instead, however many
    batches the row group is read in."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    dirs, _ = write_days(tmp_path, [2, 2])
    stream = shard(dirs, batch_rows=batch_rows)
    path = Path(dirs[1]) / "part-0.parquet"
    table = pq.read_table(path)
    pq.write_table(table.set_column(3, "label", pc.if_else(pc.equal(table["label"], 1.0), None, table["label"])),
                   path, row_group_size=10)
    with pytest.raises(RowGroupReadError, match=f"{path} \\(row group \\d\\) cannot be read: it holds 4 labelled rows "
                                                "where the plan had 8"):
        list(stream.epoch(0))


def test_an_epoch_holds_every_labelled_row_once_in_equal_steps_and_a_bounded_buffer(tmp_path):
    dirs, labelled = write_days(tmp_path, [3, 1, 2])
    stream = shard(dirs, batch_size=8, buffer_rows=25, read_ahead=1)
    batches = epoch_ids(stream, 0)
    seen = [i for batch in batches for i in batch]
    assert sorted(seen) == sorted(labelled)  # each once, none unlabelled
    assert len(batches) == stream.steps == -(-len(labelled) // 8)
    assert [len(b) for b in batches] == batch_sizes(len(labelled), stream.steps)
    # Memory: never more rows in the buffer than buffer_rows (row groups of 8 labelled rows here), and
    # never more than read_ahead row groups read ahead, plus the one the reader is handing over.
    assert 8 < stream.peak_rows <= 25
    assert 1 <= stream.peak_ahead <= 2
    # The buffer shuffles across row groups: batches mix rows of several groups (of 10 ids each).
    assert any(len({i // 10 for i in batch}) > 1 for batch in batches)


def test_a_small_buffer_holds_no_more_than_it_is_given(tmp_path):
    dirs, labelled = write_days(tmp_path, [4, 4], rows_per_group=50)  # 40 labelled rows a group
    stream = shard(dirs, batch_size=16, buffer_rows=100, ids=1000)
    assert sorted(i for batch in epoch_ids(stream, 3) for i in batch) == sorted(labelled)
    assert 40 < stream.peak_rows <= 100  # of 320 rows in the share


def test_the_order_is_a_function_of_seed_epoch_and_rank(tmp_path):
    dirs, _ = write_days(tmp_path, [3, 1, 2])
    first = shard(dirs)
    again = [epoch_ids(first, e) for e in range(3)]
    resumed = shard(dirs)  # a fresh process that starts at epoch 2, as a resumed training does
    assert epoch_ids(resumed, 2) == again[2]
    assert again[0] == epoch_ids(shard(dirs), 0)
    assert again[0] != again[1] and again[1] != again[2]  # each epoch its own shuffle
    assert epoch_ids(shard(dirs, seed=8), 0) != again[0]


def test_row_groups_read_in_batches_stream_the_same_batches_as_whole_row_groups(tmp_path, monkeypatch):
    """``read_batch_rows`` bounds how much of a row group is decoded and turned into pandas at once;
    the row groups' order, the batches and every value in them stay those of reading each row group
    whole, epoch after epoch and in a fresh process that starts at a later epoch (a resume)."""
    import numpy as np

    import jobs.training.stream as stream_module

    dirs, labelled = write_days(tmp_path, [3, 1, 2])  # row groups of 10 rows, every fifth unlabelled
    decoded: list[int] = []
    read_batches = stream_module.read_batches

    def counted(uri, group, columns, batch_rows):
        for batch in read_batches(uri, group, columns, batch_rows):
            decoded.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(stream_module, "read_batches", counted)

    def epochs(batch_rows: int, first: int = 0) -> list[list[tuple]]:
        stream = shard(dirs, batch_rows=batch_rows)
        return [[tuple(a.copy() for a in batch) for batch in stream.epoch(e)] for e in range(first, 3)]

    def same(a: list[list[tuple]], b: list[list[tuple]]) -> bool:
        return [[len(x) for x in e] for e in a] == [[len(x) for x in e] for e in b] and all(
            np.array_equal(x, y) for ea, eb in zip(a, b, strict=True) for ba, bb in zip(ea, eb, strict=True)
            for x, y in zip(ba, bb, strict=True))

    whole = epochs(4096)
    assert max(decoded) == 10  # a whole row group at once
    assert sorted(int(i) - 1 for batch in whole[0] for i in batch[0][:, 0]) == sorted(labelled)
    for batch_rows in (1, 3):  # with 1, some batches hold no labelled row at all
        decoded.clear()
        assert same(epochs(batch_rows), whole)
        assert max(decoded) == batch_rows and len(decoded) == 3 * 6 * -(-10 // batch_rows)
    assert same(epochs(3, first=2), whole[2:])


def test_ranks_take_the_same_number_of_steps_over_unequal_shares(tmp_path):
    dirs, labelled = write_days(tmp_path, [3, 1, 3])  # 7 row groups: shares of 3, 2 and 2
    for world in (2, 3):
        streams = [shard(dirs, rank, world, batch_size=8) for rank in range(world)]
        assert len({s.rows for s in streams}) > 1, "the shares must differ for this test to mean anything"
        per_rank = [epoch_ids(s, 1) for s in streams]
        assert len({len(batches) for batches in per_rank}) == 1  # lockstep
        assert len(per_rank[0]) == -(-max(s.rows for s in streams) // 8)
        everything = [i for batches in per_rank for batch in batches for i in batch]
        assert sorted(everything) == sorted(labelled)


def test_an_unreadable_row_group_mid_epoch_fails_naming_the_file_and_the_group(tmp_path):
    dirs, _ = write_days(tmp_path, [3, 2])
    damaged = f"{dirs[1]}/part-0.parquet"
    damage_row_group(damaged, 1)
    stream = shard(dirs, buffer_rows=25)  # planned from the footers, which are intact
    batches = stream.epoch(0)
    with pytest.raises(RowGroupReadError) as raised:
        for _ in batches:
            pass
    assert f"{damaged} (row group 1) cannot be read" in str(raised.value)
    assert "rebuild the day" in str(raised.value)


def test_a_file_truncated_after_the_plan_fails_naming_it(tmp_path):
    dirs, _ = write_days(tmp_path, [2, 2])
    stream = shard(dirs)
    truncated = Path(dirs[0]) / "part-0.parquet"
    truncated.write_bytes(truncated.read_bytes()[:100])  # rewritten while the training ran
    with pytest.raises(RowGroupReadError, match=f"{truncated} \\(row group \\d\\) cannot be read"):
        list(stream.epoch(0))
    with pytest.raises(RowGroupReadError, match=f"{truncated} cannot be read"):  # and at the next start
        plan_shares(dirs, 1, "label")


def test_a_share_without_labelled_rows_is_refused_saying_why(tmp_path):
    dirs, _ = write_days(tmp_path, [1, 1])
    with pytest.raises(EmptyShareError, match=r"1 of 3 ranks would get no labelled row \(rank 2: 0 row group"):
        plan_shares(dirs, 3, "label").refuse_empty("training window 2013-01-01..2013-01-02")
    plan_shares(dirs, 2, "label").refuse_empty("window")  # one row group each: accepted


def test_the_data_path_is_memory_for_a_share_that_fits_the_buffer():
    assert resolve_data_path("auto", 1000, 65536) == "memory"
    assert resolve_data_path("auto", 70000, 65536) == "stream"
    assert resolve_data_path("stream", 10, 65536) == "stream"
    with pytest.raises(ValueError, match="train.data_path must be one of"):
        resolve_data_path("disk", 10, 10)


def test_a_rank_that_stopped_on_a_data_error_fails_the_job_as_a_data_error(tmp_path, monkeypatch):
    """What a rank writes when it stops (note_rank_error) tells the driver whether a retry would
    help: an unreadable row group is a data error (not retried), anything else a fault."""
    from jobs.errors import DataError
    from jobs.training.driver import rank_errors, ranks_failed
    from jobs.training.loop import note_rank_error

    folder = str(tmp_path / "checkpoints")
    for rank, err in (("0", RuntimeError("Connection closed by peer")),
                      ("1", RowGroupReadError("/lake/features/date=2013-01-02/part-0.parquet (row group 1) ..."))):
        monkeypatch.setenv("RANK", rank)
        note_rank_error(folder, err)
    failed = ranks_failed(rank_errors(folder))
    assert isinstance(failed, DataError)
    assert str(failed).startswith("training failed: rank 1: data error: RowGroupReadError: /lake/features/"
                                  "date=2013-01-02/part-0.parquet (row group 1)"), "the cause first, then its peers"
    assert "rank 0: RuntimeError: Connection closed by peer" in str(failed)
    rank_errors(folder, clear=True)
    note_rank_error(folder, ConnectionError("the tracking server is gone"))
    failed = ranks_failed(rank_errors(folder))
    assert type(failed) is RuntimeError and "ConnectionError" in str(failed)


def write_holdout(root: Path, groups: int, rows_per_group: int, numbers: int = 20) -> tuple[list[str], Preprocessor]:
    """A day of ``groups`` row groups with ``numbers`` float features (every tenth label missing)
    and the preprocessor that encodes them."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(3)
    n = groups * rows_per_group
    names = [f"n{i}" for i in range(numbers)]
    columns = {name: rng.normal(size=n) for name in names}
    columns["carrier"] = pa.array(["AA" if i % 3 else "UA" for i in range(n)])
    columns["label"] = pa.array((rng.random(n) < 0.3).astype(float), mask=np.arange(n) % 10 == 0)
    folder = root / partition_name(dt.date(2013, 12, 25))
    folder.mkdir(parents=True)
    pq.write_table(pa.table(columns), folder / "part-0.parquet", row_group_size=rows_per_group)
    pre = Preprocessor(categorical=["carrier"], numeric=names, vocab={"carrier": ["AA", "UA"]},
                       mean=dict.fromkeys(names, 0.0), std=dict.fromkeys(names, 1.0))
    return [str(folder)], pre


def test_a_streamed_holdout_keeps_its_labels_not_its_features(tmp_path):
    """Rank 0 keeps a streamed holdout's labels for every evaluation. A label column taken from a
    pandas frame is a view of the block of all its float columns: kept batch after batch, it held
    every feature of the holdout (about 270 MiB at 100x's 600,000 rows). Read through a pool that
    counts, reading the holdout must peak near a few batches, not near the holdout."""
    import numpy as np
    import pyarrow as pa
    import torch

    from jobs.training.evaluation import HoldoutRows

    dirs, pre = write_holdout(tmp_path, groups=20, rows_per_group=5000)  # 16 MB of float features
    units = plan_shares(dirs, 1, "label").units
    columns = ["carrier", *pre.numeric, "label"]
    counted = pa.proxy_memory_pool(pa.system_memory_pool())
    before = pa.default_memory_pool()
    pa.set_memory_pool(counted)
    try:
        holdout = HoldoutRows(list(units), columns, "label", pre, torch.device("cpu"), "stream", batch_rows=1000)
    finally:
        pa.set_memory_pool(before)
    assert len(holdout.labels) == 90_000 and holdout.labels.dtype == np.float64
    assert counted.bytes_allocated() == 0, "nothing Arrow allocated is kept (the head is a copy)"
    assert counted.max_memory() < 5_000_000, f"peaked at {counted.max_memory():,} bytes reading the holdout"


def test_a_streamed_holdout_read_in_batches_gives_scikit_learns_metrics(tmp_path):
    """Decoded in batches, the holdout's labels and probabilities are those of reading each row group
    whole (the probabilities to the bit: a row group is still predicted at once), and the logged
    metrics are scikit-learn's on the same rows."""
    import numpy as np
    import pyarrow.parquet as pq
    import torch
    from sklearn.metrics import average_precision_score, brier_score_loss, log_loss, roc_auc_score

    from jobs.metrics import evaluate
    from jobs.model.tabular import build_net
    from jobs.training.evaluation import HoldoutRows

    dirs, pre = write_holdout(tmp_path, groups=4, rows_per_group=500)
    units = list(plan_shares(dirs, 1, "label").units)
    columns = ["carrier", *pre.numeric, "label"]
    torch.manual_seed(0)
    net = build_net(pre, {"embedding_dim": 2, "hidden_units": [8]})
    whole = HoldoutRows(units, columns, "label", pre, torch.device("cpu"), "stream", batch_rows=10_000)
    batched = HoldoutRows(units, columns, "label", pre, torch.device("cpu"), "stream", batch_rows=64)
    p = batched.predict(net)
    assert np.array_equal(batched.labels, whole.labels) and np.array_equal(p, whole.predict(net))
    table = pq.read_table(dirs[0])
    y = table.column("label").drop_null().to_numpy()
    assert np.array_equal(batched.labels, y)
    metrics = evaluate(batched.labels, p)
    clipped = np.clip(p, 1e-7, 1 - 1e-7)
    # jobs.metrics computes them with numpy: scikit-learn's within rounding
    assert metrics["roc_auc"] == pytest.approx(roc_auc_score(y, clipped), abs=1e-12)
    assert metrics["pr_auc"] == pytest.approx(average_precision_score(y, clipped), abs=1e-12)
    assert metrics["log_loss"] == pytest.approx(log_loss(y, clipped), abs=1e-12)
    assert metrics["brier"] == pytest.approx(brier_score_loss(y, clipped), abs=1e-12)
    assert metrics["rows"] == len(y) == 1800

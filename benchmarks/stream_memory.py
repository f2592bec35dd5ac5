"""Benchmark: peak memory of one rank's data path, in memory against streaming, as the share grows.

``python -m benchmarks.stream_memory --help`` lists its options.

Writes synthetic feature Parquet of the flights' shape (4 categorical and 18 numeric columns, a
label missing on 3% of rows, row groups of 10,000 rows) at each scale of ``--rows``, then runs two
epochs of each data path over it in a fresh process (one rank, world of one) and reads that
process's peak resident set (``ru_maxrss``): ``memory`` reads the share, keeps its labelled rows
and encodes them into tensors, as ``train.data_path: memory`` does, then gathers each epoch's
batches; ``stream`` iterates :class:`jobs.training.stream.StreamingShard` with ``--buffer-rows``
and a read-ahead of two row groups. No model: only the data path. The ``baseline`` row is a
process that imports the same modules and reads nothing. Prints a table and writes
``stream_memory.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CATEGORICAL = ["carrier", "origin", "dest", "manufacturer"]
NUMERIC = [f"n{i}" for i in range(18)]
LABEL = "label"
GROUP_ROWS = 10_000


def write_window(folder: Path, rows: int, seed: int = 0) -> None:
    """``rows`` synthetic feature rows in one Parquet file of row groups of GROUP_ROWS."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    with pq.ParquetWriter(folder / "part-0.parquet", schema=_schema()) as writer:
        for start in range(0, rows, GROUP_ROWS):
            n = min(GROUP_ROWS, rows - start)
            columns = {c: pa.array([f"{c[:2].upper()}{v}" for v in rng.integers(0, 100, n)]) for c in CATEGORICAL}
            columns |= {c: pa.array(rng.normal(size=n)) for c in NUMERIC}
            label = rng.integers(0, 2, n).astype(float)
            columns[LABEL] = pa.array(label, mask=rng.random(n) < 0.03)
            writer.write_table(pa.table(columns, schema=_schema()), row_group_size=GROUP_ROWS)


def _schema():
    import pyarrow as pa

    return pa.schema([*(pa.field(c, pa.string()) for c in CATEGORICAL),
                      *(pa.field(c, pa.float64()) for c in NUMERIC), pa.field(LABEL, pa.float64())])


def preprocessor():
    from jobs.model.tabular import Preprocessor

    return Preprocessor(categorical=CATEGORICAL, numeric=NUMERIC,
                        vocab={c: [f"{c[:2].upper()}{v}" for v in range(100)] for c in CATEGORICAL},
                        mean=dict.fromkeys(NUMERIC, 0.0), std=dict.fromkeys(NUMERIC, 1.0))


def one_epoch(path: str, folder: str, batch_size: int, buffer_rows: int, epochs: int = 2) -> dict:
    """``epochs`` epochs of a data path in this process: rows seen per epoch, seconds to load (the
    in-memory path's read and encoding) and of each epoch, peak RSS (MiB)."""
    import resource

    import numpy as np
    import torch

    from jobs.training.data import epoch_batches, labelled_rows, read_units, step_count
    from jobs.training.stream import StreamingShard, plan_shares

    torch.set_num_threads(1)  # as a rank (train.num_processes ranks share the cores)
    wanted = [*CATEGORICAL, *NUMERIC, LABEL]
    pre = preprocessor()
    started = time.perf_counter()
    seen, seconds, held, load = [], [], None, 0.0
    if path != "baseline":
        plan = plan_shares([folder], 1, LABEL)
        units, counts = plan.share(0)
        steps = step_count(sum(counts), batch_size)
        if path == "memory":
            shard = labelled_rows(read_units(units, wanted), wanted, LABEL)
            cats, nums = (torch.from_numpy(a) for a in pre.encode(shard))
            labels = torch.from_numpy(shard[LABEL].to_numpy(np.float32))
            del shard
            load = time.perf_counter() - started
            for epoch in range(epochs):
                began, rows = time.perf_counter(), 0
                for batch in epoch_batches(0, epoch, 0, len(labels), steps, labels.device):
                    _, _, y = cats[batch], nums[batch], labels[batch]  # the batch a step gathers
                    rows += len(y)
                seen.append(rows)
                seconds.append(round(time.perf_counter() - began, 2))
        else:
            stream = StreamingShard(units, counts, wanted, LABEL, pre, steps=steps, buffer_rows=buffer_rows,
                                    read_ahead=2, seed=0, rank=0)
            for epoch in range(epochs):
                began, rows = time.perf_counter(), 0
                for batch in stream.epoch(epoch):
                    rows += len(torch.from_numpy(batch[2]))
                seen.append(rows)
                seconds.append(round(time.perf_counter() - began, 2))
            held = stream.peak_rows
    return {"path": path, "rows": seen, "load_seconds": round(load, 2), "epoch_seconds": seconds,
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "buffer_peak_rows": held}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the smallest scale (default: %(default)s)")
    parser.add_argument("--scales", default="1,10", help="multiples of --rows, comma-separated (default: %(default)s)")
    parser.add_argument("--buffer-rows", type=int, default=65536,
                        help="the streaming shard's buffer, in rows (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=512, help="rows per batch (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=None, help="the folder stream_memory.json goes to (default: none)")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # path folder: the child's work
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one_epoch(args.one[0], args.one[1], args.batch_size, args.buffer_rows)))
        return
    results = []
    with tempfile.TemporaryDirectory(prefix="stream-memory-") as home:
        for scale in (int(s) for s in args.scales.split(",")):
            folder = Path(home) / f"x{scale}"
            write_window(folder, args.rows * scale)
            for path in ("baseline", "memory", "stream"):
                out = subprocess.run([sys.executable, "-m", "benchmarks.stream_memory", "--one", path, str(folder),
                                      "--buffer-rows", str(args.buffer_rows), "--batch-size", str(args.batch_size)],
                                     check=True, capture_output=True, text=True).stdout
                result = {"scale": scale, "window_rows": args.rows * scale, **json.loads(out.splitlines()[-1])}
                results.append(result)
                print(f"x{scale:<3} {args.rows * scale:>9} rows  {path:<8} peak RSS {result['peak_rss_mib']:>8} MiB"
                      f"  load {result['load_seconds']} s, epochs {result['epoch_seconds']} s,"
                      f" rows seen per epoch {result['rows']}"
                      + (f"  buffer peak {result['buffer_peak_rows']} rows" if result["buffer_peak_rows"] else ""),
                      flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "stream_memory.json").write_text(json.dumps({"buffer_rows": args.buffer_rows,
                                                                 "results": results}, indent=1))


if __name__ == "__main__":
    main()

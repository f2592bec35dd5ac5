"""What the training-at-scale benchmark (:mod:`benchmarks.training_scale`) runs in processes of their
own: a training rank that records its own peak memory, the plain PyTorch ``DataLoader`` peer, and the two
measurements the capacity model (:mod:`studies.capacity`) takes as inputs (the all-reduce on
gloo, the read rate).

The benchmark starts these itself (``--help`` lists them; the all-reduce runs under
``python -m torch.distributed.run --standalone --nproc_per_node 2``). Top-level imports are light:
a TorchDistributor rank imports this module to unpickle :func:`train_and_measure`, and its start
is part of what the benchmark times.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.training.rank import RankConfig

ALLREDUCE_CALLS = 60  # timed calls per size, after ALLREDUCE_WARMUP
ALLREDUCE_WARMUP = 10
ALLREDUCE_SIZES = (1, 16, 256)  # multiples of the model's parameter count


def peak_rss_mib() -> float:
    """This process's peak resident set so far (``ru_maxrss``, KiB on Linux), in MiB."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def train_and_measure(job: RankConfig, folder: str) -> dict[str, Any] | None:
    """:func:`jobs.training.loop.train_fn`, then this rank's peak RSS (over its whole life: imports,
    its share, the model, rank 0's MLflow and plots) written to ``folder/rank-<RANK>.json``, measured
    in the rank itself. What TorchDistributor runs in the benchmark's rows."""
    from jobs.training.loop import train_fn

    result = train_fn(job)
    rank = int(os.environ.get("RANK", "0"))
    Path(folder, f"rank-{rank}.json").write_text(json.dumps(
        {"rank": rank, "peak_rss_mib": round(peak_rss_mib(), 1), "pid": os.getpid()}))
    return result


def rank_peaks(folder: str | Path) -> list[float]:
    """The peak RSS (MiB) every rank wrote to ``folder``, rank by rank."""
    found = sorted((json.loads(p.read_text()) for p in Path(folder).glob("rank-*.json")), key=lambda r: r["rank"])
    return [r["peak_rss_mib"] for r in found]


def peer(job: RankConfig, launched: float) -> dict[str, Any]:
    """The peer a user would write instead: one process, one torch thread, a plain
    ``torch.utils.data.DataLoader`` over an ``IterableDataset`` that reads the same Parquet row
    groups with pyarrow (in a seeded order per epoch), keeps the labelled rows, encodes them with
    the same preprocessor and yields batches of ``job.batch_size`` shuffled within the row group;
    the same model, AdamW and summed loss as a rank, no torch.distributed. Then the holdout's ROC
    AUC, read a row group at a time. ``launched``: when its process was started (``time.time()``)."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    from jobs.lake.storage import list_files
    from jobs.metrics import evaluate
    from jobs.model.tabular import Preprocessor, build_model, predict_encoded
    from jobs.training.steps import batch_loss, make_optimizer

    torch.set_num_threads(job.threads_per_process)
    pre = Preprocessor.from_json(job.preprocessor)
    label, size = job.label, job.batch_size
    wanted = [*pre.categorical, *pre.numeric, label]

    def row_groups(dirs: tuple[str, ...]) -> list[tuple[str, int]]:
        files = [f for d in dirs for f in list_files(d, ".parquet")]
        return [(f, g) for f in files for g in range(pq.ParquetFile(f).num_row_groups)]

    def labelled(uri: str, group: int) -> Any:
        table = pq.ParquetFile(uri).read_row_group(group, columns=wanted)
        return table.filter(pc.is_valid(table.column(label))).to_pandas()

    class RowGroups(IterableDataset):
        def __init__(self, units: list[tuple[str, int]], epoch: int) -> None:
            self.units, self.epoch = units, epoch

        def __iter__(self):
            rng = np.random.default_rng([job.seed, self.epoch])
            for i in rng.permutation(len(self.units)):
                frame = labelled(*self.units[i])
                cats, nums = pre.encode(frame)
                y = frame[label].to_numpy(np.float32)
                order = rng.permutation(len(y))
                for start in range(0, len(y), size):
                    picked = order[start:start + size]
                    yield torch.from_numpy(cats[picked]), torch.from_numpy(nums[picked]), torch.from_numpy(y[picked])

    units = row_groups(job.train_dirs)
    torch.manual_seed(job.seed)
    net = build_model(job.builder, pre, job.hyper)
    optimizer = make_optimizer(net.parameters(), job.learning_rate, torch.device("cpu"), job.weight_decay)
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")
    epoch_seconds, rows, first_step, loss_sum = [], 0, None, 0.0
    for epoch in range(job.epochs):
        started, rows, loss_sum = time.perf_counter(), 0, 0.0
        net.train()
        for cats, nums, y in DataLoader(RowGroups(units, epoch), batch_size=None, num_workers=0):
            if first_step is None:
                first_step = time.time() - launched
            optimizer.zero_grad()
            loss = batch_loss(loss_fn, net(cats, nums), y)
            loss.backward()
            optimizer.step()
            loss_sum += float(loss.detach())
            rows += len(y)
        epoch_seconds.append(time.perf_counter() - started)
    labels, probabilities = [], []
    for uri, group in row_groups(job.holdout_dirs):
        frame = labelled(uri, group)
        if len(frame):
            labels.append(frame[label].to_numpy(np.float64))
            probabilities.append(predict_encoded(net, *(torch.from_numpy(a) for a in pre.encode(frame))))
    metrics = evaluate(np.concatenate(labels), np.concatenate(probabilities))
    return {"train_rows": rows, "epoch_seconds": epoch_seconds, "train_loss": loss_sum / max(rows, 1),
            "roc_auc": metrics["roc_auc"], "first_step_s": first_step, "peak_rss_mib": [round(peak_rss_mib(), 1)],
            "wall_s": time.time() - launched}


def read_rate(job: RankConfig, max_rows: int) -> dict[str, Any]:
    """The data path without a model, one process, one thread: the footers planned
    (:func:`jobs.training.stream.plan_shares`: seconds per file), then row groups read with pyarrow,
    their labelled rows kept and encoded as a rank does (:func:`jobs.training.stream.encode_group`,
    ``job.read_batch_rows`` rows at a time), up to ``max_rows`` rows: rows/s and bytes on disk per row."""
    import torch

    from jobs.lake.storage import list_files
    from jobs.model.tabular import Preprocessor
    from jobs.training.allocation import set_rank_allocation
    from jobs.training.stream import encode_group, plan_shares

    torch.set_num_threads(1)
    set_rank_allocation(job.arrow_memory_pool, job.malloc_mmap_threshold)
    pre = Preprocessor.from_json(job.preprocessor)
    wanted = [*pre.categorical, *pre.numeric, job.label]
    files = [f for d in job.train_dirs for f in list_files(d, ".parquet")]
    started = time.perf_counter()
    plan = plan_shares(job.train_dirs, 1, job.label)
    plan_s = time.perf_counter() - started
    rows = groups = 0
    started = time.perf_counter()
    for (uri, group), count in zip(plan.units, plan.labelled, strict=True):
        rows += len(encode_group(pre, uri, group, wanted, job.label, job.read_batch_rows, count)[2])
        groups += 1
        if rows >= max_rows:
            break
    read_s = time.perf_counter() - started
    disk = sum(os.path.getsize(f) for f in files)
    return {"rows": rows, "row_groups": groups, "seconds": read_s, "rows_per_s": rows / read_s,
            "files": len(files), "plan_s": plan_s, "footer_s_per_file": plan_s / len(files),
            "window_rows": sum(plan.labelled), "bytes_on_disk": disk, "bytes_per_row": disk / sum(plan.labelled),
            "row_group_count": len(plan.units)}


def allreduce(out: str, parameters: int) -> None:
    """Under torchrun: the seconds of one all-reduce (sum) of float32 tensors of ``parameters`` x
    each of :data:`ALLREDUCE_SIZES` elements on gloo, the median of :data:`ALLREDUCE_CALLS` after a
    warm-up; rank 0 writes them to ``out``."""
    import statistics

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    found = []
    for multiple in ALLREDUCE_SIZES:
        tensor = torch.ones(parameters * multiple, dtype=torch.float32)
        for _ in range(ALLREDUCE_WARMUP):
            dist.all_reduce(tensor)
        seconds = []
        for _ in range(ALLREDUCE_CALLS):
            dist.barrier()
            started = time.perf_counter()
            dist.all_reduce(tensor)
            seconds.append(time.perf_counter() - started)
        found.append({"elements": parameters * multiple, "bytes": 4 * parameters * multiple,
                      "median_s": statistics.median(seconds), "min_s": min(seconds)})
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps({"world": dist.get_world_size(), "backend": "gloo", "parameters": parameters,
                                         "sizes": found}))
    dist.destroy_process_group()


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    measures = parser.add_subparsers(dest="what", required=True, metavar="MEASURE")
    job_help = "a jobs.training.rank.RankConfig as JSON, in a file"
    out_help = "where the figures go (JSON)"
    peer_parser = measures.add_parser("peer", help="the plain PyTorch DataLoader peer of a rank, its peak memory")
    peer_parser.add_argument("job", metavar="JOB", help=job_help)
    peer_parser.add_argument("out", metavar="OUT", help=out_help)
    peer_parser.add_argument("launched", metavar="LAUNCHED", type=float,
                             help="when the benchmark started this process (time.time())")
    read_parser = measures.add_parser("read", help="the data path without a model: rows/s, bytes per row")
    read_parser.add_argument("job", metavar="JOB", help=job_help)
    read_parser.add_argument("out", metavar="OUT", help=out_help)
    read_parser.add_argument("max_rows", metavar="MAX_ROWS", type=int, nargs="?", default=1_000_000,
                             help="rows to read at most (default: %(default)s)")
    reduce_parser = measures.add_parser("allreduce", help="one all-reduce on gloo, under torch.distributed.run")
    reduce_parser.add_argument("out", metavar="OUT", help=out_help + ", by rank 0")
    reduce_parser.add_argument("parameters", metavar="P", type=int, help="the model's parameter count")
    return parser


def main(argv: list[str] | None = None) -> None:
    from jobs.training.rank import RankConfig

    args = parser().parse_args(argv)
    if args.what == "allreduce":
        allreduce(args.out, args.parameters)
        return
    job = RankConfig.from_json(Path(args.job).read_text())
    found = peer(job, args.launched) if args.what == "peer" else read_rate(job, args.max_rows)
    Path(args.out).write_text(json.dumps(found, default=float))


if __name__ == "__main__":
    main()

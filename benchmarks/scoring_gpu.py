"""Benchmark: scoring on a GPU against the CPU, from the model alone to the whole Spark job.

``python -m benchmarks.scoring_gpu --help`` lists its options.

Setup (timed, reported apart): January 2013 is landed into a throw-away lake, validated (without GX)
and turned into features; the scoring benchmark's model (:func:`benchmarks.scoring.model.registered_model`)
is trained, logged with ``log_pyfunc``, registered and resolved as the score job resolves it. A day of
``--rows`` rows is made from January's features (:func:`benchmarks.scaling.resample_days`: bootstrap
resamples with the continuous inputs jittered) as one day's partition, one file in row groups of
262,144 rows.

Rows, each on the CPU and, where torch sees CUDA, on the GPU (``cuda:0``), best of ``--repeat``
after a warm-up:

- ``model alone``: the net on encoded inputs already where it runs (on the GPU: device tensors,
  ``torch.cuda.synchronize`` before the clock stops), per batch size. The CPU row uses one torch
  thread, as each Spark Python worker does.
- ``prediction function``: what a Spark Python worker calls per batch, host arrays in and host
  float64 out: the score job's (:func:`jobs.scoring.predictor.make_encoded_predict_fn`: one array per encoded
  input, copied into the model's input buffers, page-locked on the GPU) and the raw-column one
  (:func:`jobs.scoring.predictor.make_predict_fn`: a pandas DataFrame of raw columns through the pyfunc).
- ``PCIe bound``: the pinned host-to-device copy rate, measured (256 MiB, best of 5), divided by
  the bytes of one encoded input row: the prediction function cannot beat it on the GPU.
- ``whole job``: :func:`jobs.scoring.predictor.score_features` on the big day and the job's write, in one warm
  ``local[N]`` session (N = the machine's cores, ``spark.sql.files.maxPartitionBytes`` 16 MiB so
  every core has work): the job on the CPU (``score.batch_size``, Arrow's 10,000-row batches), the
  job on the GPU (``score.gpu_batch_size``, Arrow batches of as many rows, every worker's model on
  ``cuda:0``), and the raw-column job on the CPU (the path before inputs were encoded by Spark).

Checks: the GPU's probabilities equal the CPU's to :data:`TOLERANCE` (1e-5, max abs diff, for the
prediction function and the whole job); a larger difference exits non-zero after the results are
written. Prints the machine and Markdown tables, writes ``scoring_gpu.json`` and ``scoring_gpu.png``
(rows/s against batch size, log-log, with the PCIe bound) to ``--out``. Without CUDA it stops,
saying so, unless ``--cpu-smoke`` asks for the CPU rows alone (a smoke run of the same code, not
a GPU figure).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import feature_lake, machine, throwaway_home
from benchmarks.harness import (
    Line,
    arguments,
    best_of,
    comma_list,
    line_plot,
    markdown_table,
    start,
    stopwatch,
    write_results,
)
from benchmarks.scaling import one_partition, resample_days
from benchmarks.scoring.baseline import arrow_dataset, encode_arrow
from benchmarks.scoring.model import registered_model
from benchmarks.scoring.scales import DAY, Scale
from benchmarks.scoring.spark import ARROW_BATCH, DEFAULT_ARROW_BATCH, write_predictions
from jobs.config import days_ending, load_config
from jobs.datasets.land_flights import FIRST_DAY
from jobs.lake.layout import partition_name

JANUARY = days_ending(dt.date(2013, 1, 31), 31)
ROW_GROUP = 262144
TOLERANCE = 1e-5  # max abs difference of the GPU's probabilities from the CPU's
PCIE_PROBE_BYTES = 256 << 20


def pcie_bytes_per_s(repeat: int) -> float:
    """The pinned host-to-device copy rate of cuda:0."""
    import torch

    host = torch.empty(PCIE_PROBE_BYTES, dtype=torch.uint8, pin_memory=True)
    device = torch.empty_like(host, device="cuda")
    seconds = best_of(max(repeat, 5), lambda: device.copy_(host, non_blocking=True), torch.cuda.synchronize)
    return PCIE_PROBE_BYTES / seconds


def encoded_host_arrays(pre: Any, table: Any) -> list[np.ndarray]:
    """What Spark hands the score job's prediction function: int32 codes, then float32 z-scores."""
    cats, nums = encode_arrow(pre, table)
    return [*(np.ascontiguousarray(cats[:, j], dtype=np.int32) for j in range(cats.shape[1])),
            *(np.ascontiguousarray(nums[:, j]) for j in range(nums.shape[1]))]


def function_rows(pre: Any, load_uri: str, table: Any, inputs: list[str], batches: list[int], repeat: int,
                  devices: list[str]) -> list[dict[str, Any]]:
    """Rows/s of the model alone and of both prediction functions, per device and batch size."""
    import torch

    from jobs.scoring.predictor import load_model, make_encoded_predict_fn, make_predict_fn

    encoded = encoded_host_arrays(pre, table)
    raw = [table[c].to_numpy(zero_copy_only=False) for c in inputs]
    k, m = len(pre.categorical), len(pre.numeric)
    rows = []
    for device in devices:
        gpu = device == "cuda"
        sync = torch.cuda.synchronize if gpu else (lambda: None)
        job_fn = make_encoded_predict_fn(load_uri, k, m, use_gpu=gpu)()
        raw_fn = make_predict_fn(load_uri, inputs, use_gpu=gpu)()
        torch.set_num_threads(1)  # a Spark Python worker's torch (the pyfunc sets it too)
        net = load_model(load_uri, gpu).unwrap_python_model().net
        all_cats = torch.from_numpy(np.stack(encoded[:k])).to(device).T
        all_nums = torch.from_numpy(np.stack(encoded[k:])).to(device).T
        for size in batches:

            def model_alone(cats: Any = all_cats[:size], nums: Any = all_nums[:size], net: Any = net) -> Any:
                with torch.inference_mode():
                    return torch.sigmoid(net(cats, nums))

            part = [a[:size] for a in encoded]
            raw_part = [a[:size] for a in raw]
            for name, action in (("model alone", model_alone),
                                 ("prediction function (score job: encoded inputs)",
                                  lambda p=part, f=job_fn: f(*p)),
                                 ("prediction function (raw columns, pyfunc)", lambda p=raw_part, f=raw_fn: f(*p))):
                seconds = best_of(repeat, action, sync)
                rows.append({"stage": name, "device": device, "batch": size, "seconds": seconds,
                             "rows_per_s": size / seconds})
        if gpu:
            on_cpu = make_encoded_predict_fn(load_uri, k, m)()(*[a[: batches[-1]] for a in encoded])
            on_gpu = job_fn(*[a[: batches[-1]] for a in encoded])
            rows.append({"stage": "check", "device": device,
                         "max_abs_diff_vs_cpu": float(np.max(np.abs(on_gpu - on_cpu)))})
    return rows


def job_rows(spark: Any, config: Any, ref: Any, load_uri: str, pre: dict[str, Any], root: str, out: Path,
             repeat: int, gpu: bool) -> list[dict[str, Any]]:
    """Seconds of the whole score job on the big day: CPU, GPU (when there is one), raw columns."""
    from jobs.scoring.predictor import score_features

    spec = config.features
    features = spark.read.option("basePath", root).parquet(f"{root}/{partition_name(DAY)}")
    rows = features.count()
    variants = [("score job, CPU", False, config.score.batch_size, DEFAULT_ARROW_BATCH, pre),
                ("score job, raw columns to the pyfunc, CPU", False, config.score.batch_size, DEFAULT_ARROW_BATCH,
                 None)]
    if gpu:
        variants.insert(1, ("score job, GPU", True, config.score.gpu_batch_size, config.score.gpu_batch_size, pre))
    results = []
    for name, use_gpu, batch_size, arrow_batch, preprocessor in variants:
        spark.conf.set(ARROW_BATCH, str(arrow_batch))
        predictions = score_features(features, spec, ref, load_uri, batch_size, DAY, use_gpu, preprocessor)
        target = str(out / name.replace(" ", "_").replace(",", ""))
        seconds = best_of(repeat, lambda p=predictions, t=target: write_predictions(p, t))
        results.append({"stage": name, "device": "cuda" if use_gpu else "cpu", "rows": rows, "batch": batch_size,
                        "arrow_batch": arrow_batch, "seconds": seconds, "rows_per_s": rows / seconds,
                        "output": target})
    reference = probabilities(spark, results[0]["output"])
    for r in results[1:]:
        r["max_abs_diff_vs_cpu_job"] = float(np.max(np.abs(probabilities(spark, r["output"]) - reference)))
    return results


def probabilities(spark: Any, path: str) -> np.ndarray:
    """The probabilities of a predictions folder, sorted: the generated day repeats rows, so no key
    lines up two outputs row by row, and sorted values are compared instead."""
    return np.sort(spark.read.parquet(path).select("probability").toPandas()["probability"].to_numpy())


def plot(functions: list[dict[str, Any]], bound_rows_per_s: float | None, path: Path) -> None:
    """Rows/s against batch size, log-log: a line per stage and device (the CPU's dashed), and the
    PCIe bound where there is one."""
    line_plot(
        path,
        [Line(f"{stage}, {device}", [r["batch"] for r in group], [r["rows_per_s"] for r in group],
              dashed=device != "cuda") for (stage, device), group in sorted(group_by(functions).items())],
        xlabel="rows per call (batch size)", ylabel="rows/s", title="Scoring throughput against batch size", log=True,
        levels={"PCIe bound (pinned copy rate / row bytes)": bound_rows_per_s} if bound_rows_per_s else None,
    )


def group_by(rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The rows with a batch size, per (stage, device)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if "batch" in r:
            groups.setdefault((r["stage"], r["device"]), []).append(r)
    return groups


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, repeat=3)
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of the big day (default: %(default)s)")
    parser.add_argument("--batches", default="1024,4096,16384,65536,262144,1048576",
                        help="the batch sizes of the model and the prediction function, comma-separated\n"
                             "(default: %(default)s)")
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="without CUDA, run the CPU rows alone instead of stopping (not a GPU figure)")
    args = parser.parse_args(argv)
    import torch

    if not (torch.cuda.is_available() or args.cpu_smoke):
        from jobs.runtime.gpu import require_cuda

        require_cuda("The GPU scoring benchmark", "run it on a GPU machine, or with --cpu-smoke for the CPU rows alone")
    out = start(args.out)
    home = throwaway_home("bench-scoring-gpu-")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers need this interpreter's packages
    try:
        run(home, out, args.rows, args.repeat, sorted(comma_list(args.batches, int)))
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run(home: Path, out: Path, big_rows: int, repeat: int, batches: list[int]) -> None:
    import pyarrow.parquet as pq
    import torch

    from jobs.runtime.session import get_spark
    from jobs.scoring.predictor import model_preprocessor

    host = machine()
    gpu = torch.cuda.is_available()
    if not gpu:
        print("no CUDA device (--cpu-smoke): the CPU rows only, a smoke run, not a GPU figure")
    config = load_config()
    cores = os.cpu_count() or 2
    setup: dict[str, float] = {}
    spark = get_spark("bench-scoring-gpu", {
        "spark.master": f"local[{cores}]", "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
        "spark.sql.files.maxPartitionBytes": str(16 << 20),
        # Each task turns an Arrow batch of rows into on-heap columns in the JVM: with
        # score.gpu_batch_size rows a batch and one task per core, the default 1 GiB heap ran out
        # (java.lang.OutOfMemoryError, 16 tasks, the first run on an H200 machine).
        "spark.driver.memory": f"{max(2, cores // 2)}g",
    })
    lake = feature_lake(spark, home, config, FIRST_DAY, JANUARY, setup)
    with stopwatch(setup, "train_and_log_s"):
        preprocessor, hyper, ref, load_uri = registered_model(spark, lake, config)

    spread, root = str(home / "spread"), str(home / "big-day")
    with stopwatch(setup, "generate_big_day_s"):
        january_rows = sum(pq.ParquetFile(f).metadata.num_rows for f in Path(lake.features).rglob("*.parquet"))
        resample_days(lake.features, spread, big_rows / january_rows, config.features.numeric, seed=config.train.seed)
        one_partition(spread, root, DAY)
        shutil.rmtree(spread)
        big = next(Path(root).rglob("*.parquet"))
        pq.write_table(pq.read_table(big), big, row_group_size=ROW_GROUP, compression="snappy")

    table = arrow_dataset(Scale("big", "big", root, [DAY])).to_table().slice(0, max(batches))
    devices = ["cpu", "cuda"] if gpu else ["cpu"]
    functions = function_rows(preprocessor, load_uri, table, config.features.inputs, batches, repeat, devices)
    bound = None
    if gpu:
        row_bytes = 4 * (len(preprocessor.categorical) + len(preprocessor.numeric))
        bound = pcie_bytes_per_s(repeat) / row_bytes
        setup["pcie_gb_per_s"] = bound * row_bytes / 1e9
    jobs = job_rows(spark, config, ref, load_uri, model_preprocessor(load_uri), root, home / "predictions", repeat,
                    gpu)
    spark.stop()

    print(f"machine: {host['cpu_count']} CPUs, {host['device']}, torch {host['torch']}, pyspark {host['pyspark']}")
    print(f"setup: {', '.join(f'{k} {v:.1f}' for k, v in setup.items())}")
    if bound:
        print(f"PCIe bound: {bound:,.0f} rows/s ({setup['pcie_gb_per_s']:.1f} GB/s pinned host-to-device, "
              f"{4 * (len(preprocessor.categorical) + len(preprocessor.numeric))} bytes per encoded row)")
    print()
    print(markdown_table(["stage", "device", *(f"batch {b:,}" for b in batches)],
                         [[stage, device, *(f"{r['rows_per_s'] / 1e6:.2f}M" for r in group)]
                          for (stage, device), group in group_by(functions).items()]))
    for r in functions:
        if r["stage"] == "check":
            print(f"\nprediction function, GPU vs CPU: max abs diff {r['max_abs_diff_vs_cpu']:.1e}")
    print()
    cpu_job = jobs[0]["seconds"]
    print(markdown_table(
        [f"whole job, {jobs[0]['rows']:,} rows in one day, local[{cores}]", "batch", "Arrow batch", "seconds",
         "rows/s", "vs CPU job", "max abs diff vs CPU job"],
        [[r["stage"], f"{r['batch']:,}", f"{r['arrow_batch']:,}", f"{r['seconds']:.2f}", f"{r['rows_per_s']:,.0f}",
          f"{cpu_job / r['seconds']:.2f}x",
          "-" if r.get("max_abs_diff_vs_cpu_job") is None else f"{r['max_abs_diff_vs_cpu_job']:.1e}"] for r in jobs],
    ))
    plot(functions, bound, out / "scoring_gpu.png")
    write_results(out, "scoring_gpu", {
        "machine": host, "setup_s": setup, "pcie_bound_rows_per_s": bound, "functions": functions,
        "jobs": [{k: v for k, v in r.items() if k != "output"} for r in jobs],
        "settings": {"rows": big_rows, "repeat": repeat, "batches": batches, "cores": cores,
                     "model": dataclasses.asdict(ref), "hyper": hyper},
    })
    check_agreement(functions, jobs)


def check_agreement(functions: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> None:
    """Exit non-zero, naming them, where the GPU's probabilities differ from the CPU's by more than
    :data:`TOLERANCE` (prediction function or whole job)."""
    diffs = [(f"prediction function on {r['device']}", r["max_abs_diff_vs_cpu"])
             for r in functions if r["stage"] == "check"]
    diffs += [(r["stage"], r["max_abs_diff_vs_cpu_job"]) for r in jobs
              if r["device"] == "cuda" and r.get("max_abs_diff_vs_cpu_job") is not None]
    off = [f"{name}: {diff:.1e}" for name, diff in diffs if not diff <= TOLERANCE]
    if off:
        raise SystemExit(f"GPU probabilities differ from the CPU's by more than {TOLERANCE:g} (max abs): "
                         f"{'; '.join(off)}; the figures above are not valid")


if __name__ == "__main__":
    main()

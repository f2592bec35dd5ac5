"""Benchmark: training at lake scale. The year's flights at 1x, 10x and 100x, streamed by the ranks,
against a plain PyTorch DataLoader over the same Parquet.

``python -m benchmarks.training_scale --help`` lists its options. ``make bench-scale`` runs it with
``--scales 1,10``; the 100x row is run by hand, for hours
(``make bench-scale SCALES=100 CONTENDERS=2 CLUSTER_SCALE=0``).

The window is the last ``--days`` days of 2013 (the whole year by default): the real example data
landed, validated (without GX) and turned into features by the pipeline's own jobs in one local[2]
session, the preprocessor fitted on the training days (all but the last ``train.holdout_days``),
at 1x. Each scale's feature Parquet is then made from those feature rows by the scale-up
generator's rule (:func:`jobs.datasets.multiplied_flights.multiply_day`, applied to each day's feature rows
as the other benchmarks apply it to the validated zone): copy 0 the real rows, copy k the same rows
with ``flight + k * 10000`` and the tail numbers shuffled within each carrier; the features of a
copy are its original's (not recomputed), the preprocessor the 1x one (a copy has its original's
values: the same means, deviations and vocabularies). Every scale, 1x included, is written the
same way: one file per day, row groups of at most :data:`GROUP_ROWS` rows. The holdout days are
scaled too (the year at Nx).

Rows, per scale (``--contenders``; each runs once, no warm-up: a 10x run takes minutes):

- ``peer``: a plain ``torch.utils.data.DataLoader`` over the same Parquet in one process
  (:func:`benchmarks.training_scale_rank.peer`): what a user would write instead;
- ``1``, ``2``: TorchDistributor in local mode with that many ranks, each running
  :func:`jobs.training.loop.train_fn` with the config's ``train.data_path`` (``auto``: a share
  larger than ``train.buffer_rows`` streams);
- at ``--cluster-scale`` (0: none), TorchDistributor with ``local_mode=False`` on a standalone
  cluster of two workers of one core each (started here with pyspark's ``spark-class``): the ranks
  are a barrier stage's tasks, as ``train.local_mode: false`` runs them.

Each row: training rows, epochs, rows/s per rank (training rows x epochs / rank 0's training loops
/ ranks), peak RSS of every rank (``ru_maxrss`` read in the rank itself as train_fn returns:
:func:`benchmarks.training_scale_rank.train_and_measure`), time from the launch to the first step, the
holdout's ROC AUC (rank 0's final evaluation), which data path ran. Targets: the largest scale's
peak memory per rank within :data:`MEMORY_RATIO` x of 1x and under :data:`MEMORY_CAP_MIB` MiB;
the peer's rows/s at most :data:`THROUGHPUT_RATIO` x one streaming rank's.

Then the capacity model's inputs (:mod:`studies.capacity`): the all-reduce of the model's
parameters (and 16 and 256 times as many floats) on gloo with 2 local ranks, and the read rate
(footers planned, row groups read and encoded, no model) of one process over the largest scale up
to 10x. Writes ``scale.json``, ``scale-memory.png`` and ``scale-rows-per-s.png`` to ``--out`` and
prints the table. ``--data DIR`` keeps the built and scaled features there (``DIR/last-<days>-days``) for the next run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.harness import Line, comma_list, line_plot, markdown_table, start, stopwatch, write_results

REPO = Path(__file__).resolve().parents[1]
GROUP_ROWS = 16_384  # rows per Parquet row group in the scaled windows, at every scale
MEMORY_RATIO = 1.2  # the largest scale's peak RSS per rank over 1x's, at most
MEMORY_CAP_MIB = 2048  # and below this
THROUGHPUT_RATIO = 1.25  # the peer's rows/s over one streaming rank's, at most
CONTENDERS = ("peer", "1", "2")
READ_ROWS = 1_000_000  # rows the read-rate measurement reads at most
LOOPBACK = "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class Row:
    """One measured row of the plan: a contender at a scale."""

    scale: float
    contender: str  # peer | local | cluster
    processes: int

    @property
    def name(self) -> str:
        if self.contender == "peer":
            return "DataLoader peer, 1 process"
        where = "local" if self.contender == "local" else "standalone cluster, 2 workers"
        return f"TorchDistributor {where}, {self.processes} rank{'s' * (self.processes > 1)}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--out", default="benchmarks/results", help="the results folder (default: %(default)s)")
    parser.add_argument("--scales", default="1,10",
                        help="flights per real flight, comma-separated (1,10,100; default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=1, help="epochs each contender trains (default: %(default)s)")
    parser.add_argument("--days", type=int, default=365,
                        help="the window: the last N days of 2013 (default: %(default)s)")
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help="peer (the DataLoader), 1 and 2 (TorchDistributor ranks, local mode)\n"
                             "(default: %(default)s)")
    parser.add_argument("--cluster-scale", type=float, default=1.0,
                        help="the scale of the one standalone-cluster point (0: none; default: %(default)g)")
    parser.add_argument("--data", default=None, help="keep the features here and reuse them (default: thrown away)")
    parser.add_argument("--no-inputs", action="store_true", help="skip the capacity model's all-reduce and read rate")
    args = parser.parse_args(argv)
    args.scales = sorted(comma_list(args.scales, float))
    args.contenders = comma_list(args.contenders)
    if not args.scales or any(s <= 0 for s in args.scales):
        parser.error(f"--scales must be positive factors, got {args.scales}")
    unknown = set(args.contenders) - set(CONTENDERS)
    if unknown:
        parser.error(f"--contenders: unknown {sorted(unknown)}; choose from {', '.join(CONTENDERS)}")
    if not 8 <= args.days <= 365:
        parser.error(f"--days must be between 8 and 365 (7 holdout days and at least one to train on), got {args.days}")
    if args.epochs < 1:
        parser.error("--epochs must be at least 1")
    if args.cluster_scale < 0:
        parser.error("--cluster-scale must be 0 (none) or a factor")
    return args


def plan(scales: list[float], contenders: list[str], cluster_scale: float) -> list[Row]:
    """The rows in the order they run: per scale (ascending) the peer, then the local ranks; the
    cluster point last (its session replaces the local one). The cluster's scale need not be
    among ``scales``."""
    rows = [Row(s, "peer" if c == "peer" else "local", 1 if c == "peer" else int(c))
            for s in scales for c in CONTENDERS if c in contenders]
    if cluster_scale:
        rows.append(Row(cluster_scale, "cluster", 2))
    return rows


def scale_features(source_dirs: list[str], target: Path, factor: float, seed: int = 13) -> dict[str, Any]:
    """Each day's feature rows of ``source_dirs`` multiplied ``factor`` times by the generator's rule
    (:func:`jobs.datasets.multiplied_flights.multiply_day`), written under ``target`` one file a day in row
    groups of :data:`GROUP_ROWS`; returns the rows, bytes and seconds. Kept when already there."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.datasets.multiplied_flights import multiply_day
    from jobs.lake.layout import partition_day

    done = target / "_scaled.json"
    if done.exists():
        return json.loads(done.read_text())
    started, rows = time.perf_counter(), 0
    for source in source_dirs:
        folder = Path(source)
        day = partition_day(folder.name)
        files = sorted(f for f in folder.glob("*.parquet") if not f.name.startswith((".", "_")))
        table = pa.concat_tables([pq.ParquetFile(f).read() for f in files])
        scaled = multiply_day(table.to_pandas(), factor, seed, day.toordinal())
        out = target / folder.name
        out.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pandas(scaled, schema=table.schema, preserve_index=False),
                       out / "part-00000.parquet", row_group_size=GROUP_ROWS)
        rows += len(scaled)
    found = {"factor": factor, "rows": rows, "seconds": round(time.perf_counter() - started, 1),
             "bytes": sum(f.stat().st_size for f in target.rglob("*.parquet"))}
    done.write_text(json.dumps(found))
    return found


def base_window(data: Path, days: int) -> dict[str, Any]:
    """The 1x features of the last ``days`` days of 2013 under ``data`` (built with the pipeline's
    jobs in a local[2] session unless there already), the preprocessor fitted on the training days
    and the (training, holdout) day lists: ``data/window.json``."""
    meta = data / "window.json"
    if meta.exists():
        return json.loads(meta.read_text())
    from benchmarks.common import feature_lake
    from jobs.config import days_ending, load_config
    from jobs.datasets.land_flights import FIRST_DAY, LAST_DAY
    from jobs.runtime.session import get_spark
    from jobs.training.data import fit_preprocessor

    config = load_config()
    window = days_ending(LAST_DAY, days)
    holdout = config.train.holdout_days
    setup: dict[str, float] = {}
    spark = get_spark("bench-scale", {"spark.master": "local[2]", "spark.ui.enabled": "false"})
    first = max(FIRST_DAY, window[0] - dt.timedelta(days=config.validation.defaults.band_days))
    lake = feature_lake(spark, data / "home", config, first, window, setup)
    with stopwatch(setup, "fit_preprocessor_s"):
        train_dirs = [lake.partition(lake.features, d) for d in window[:-holdout]]
        features = spark.read.option("basePath", lake.features).parquet(*train_dirs)
        pre = fit_preprocessor(features, config.features, config.train.min_category_count)
    found = {"train_days": [str(d) for d in window[:-holdout]], "holdout_days": [str(d) for d in window[-holdout:]],
             "features": str(Path(lake.features).relative_to(data)), "preprocessor": pre.to_json(),
             "setup_s": {k: round(v, 1) for k, v in setup.items()}}
    meta.write_text(json.dumps(found))
    return found


def scaled_dirs(data: Path, window: dict[str, Any], factor: float) -> tuple[list[str], list[str], dict[str, Any]]:
    """(training dirs, holdout dirs, what was written) of the window at ``factor``."""
    from jobs.lake.layout import partition_name

    target = data / f"x{factor:g}"
    days = [*window["train_days"], *window["holdout_days"]]
    source = [str(data / window["features"] / partition_name(dt.date.fromisoformat(d))) for d in days]
    written = scale_features(source, target, factor)
    dirs = [str(target / partition_name(dt.date.fromisoformat(d))) for d in days]
    train = dirs[:len(window["train_days"])]
    written = {**written, "train_row_groups": row_groups(train)}
    return train, dirs[len(window["train_days"]):], written


def row_groups(dirs: list[str]) -> int:
    """Parquet row groups under ``dirs`` (from the footers)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).num_row_groups for d in dirs for f in sorted(Path(d).glob("*.parquet")))


def run_distributed(job: Any, experiment_id: str, processes: int, local_mode: bool) -> dict[str, Any]:
    """TorchDistributor over :func:`benchmarks.training_scale_rank.train_and_measure` (train_fn, then each
    rank's peak RSS), timed from outside as the training benchmark times it."""
    from benchmarks.training import finish, launch, marks_file, new_job, read_marks
    from benchmarks.training_scale_rank import rank_peaks, train_and_measure
    from jobs.tracking import client
    from jobs.training.launcher import LeanTorchDistributor

    job = new_job(job, experiment_id, use_gpu=False)
    distributor = LeanTorchDistributor(num_processes=processes, local_mode=local_mode, use_gpu=False)
    with marks_file(None) as marks, tempfile.TemporaryDirectory(prefix="bench-scale-rss-") as folder:
        launched, started, relayed = time.time(), time.perf_counter(), {}
        # as the train job launches them: rank 0 logs through this process (jobs.training.relay)
        result = launch(job, lambda ready: distributor.run(train_and_measure, ready, folder), None, relayed)
        wall_s = time.perf_counter() - started
        timing = finish(job, result, wall_s, launched, {**read_marks(marks), **relayed})
        peaks = rank_peaks(folder)
    run = client().get_run(job.run_id).data
    params = run.params
    evaluation = timing.phases.get("epochs beyond their loops")
    return {"train_rows": timing.train_rows, "epoch_seconds": timing.epoch_seconds, "wall_s": wall_s,
            "train_loss": timing.train_loss, "roc_auc": timing.roc_auc, "first_step_s": timing.first_step_s,
            "peak_rss_mib": peaks, "data_path": params.get("training_data_path"),
            "holdout_data_path": params.get("holdout_data_path"), "holdout_rows": run.metrics.get("holdout_rows"),
            "evaluation_s_per_epoch": None if evaluation is None else evaluation / len(timing.epoch_seconds)}


def retried(action: Any, tries: int = 2) -> Any:
    """``action()``, once more after a failure: on a shared machine the port TorchDistributor chose
    for the ranks' rendezvous can be taken before torchrun binds it (EADDRINUSE)."""
    for attempt in range(tries):
        try:
            return action()
        except Exception as err:  # noqa: BLE001 - the last attempt raises it
            if attempt == tries - 1:
                raise
            print(f"attempt {attempt + 1} failed ({type(err).__name__}: {str(err)[:200]}); once more", flush=True)
    raise AssertionError("unreachable")


def run_in_process(what: str, job: Any, *extra: str) -> dict[str, Any]:
    """``python -m benchmarks.training_scale_rank <what> JOB OUT ...`` in a fresh process (its own peak RSS)."""
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as folder:
        job_file, out = Path(folder, "job.json"), Path(folder, "out.json")
        job_file.write_text(job.to_json())
        done = subprocess.run([sys.executable, "-m", "benchmarks.training_scale_rank", what, str(job_file), str(out),
                               *extra], cwd=REPO, capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"benchmarks.training_scale_rank {what} failed:\n{done.stdout[-3000:]}\n"
                               f"{done.stderr[-3000:]}")
        return json.loads(out.read_text())


def measure_allreduce(parameters: int) -> dict[str, Any]:
    """The all-reduce of the model's parameters on gloo, 2 local ranks (torchrun)."""
    with tempfile.TemporaryDirectory(prefix="bench-scale-allreduce-") as folder:
        out = Path(folder, "allreduce.json")
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                               "--nproc_per_node=2", "-m", "benchmarks.training_scale_rank", "allreduce", str(out),
                               str(parameters)], cwd=REPO, capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"the all-reduce measurement failed:\n{done.stderr[-3000:]}")
        return json.loads(out.read_text())


def cluster_env(work: Path) -> dict[str, str]:
    """The master's and workers' environment: pyspark's folder as SPARK_HOME, this Python and this
    checkout on the executors, ports on loopback."""
    import pyspark

    return {**os.environ, "SPARK_HOME": str(Path(pyspark.__file__).parent), "SPARK_LOCAL_IP": LOOPBACK,
            "PYSPARK_PYTHON": sys.executable, "SPARK_WORKER_DIR": str(work / "worker"),
            "SPARK_LOG_DIR": str(work / "logs"), "PYTHONPATH": rank_pythonpath()}


def rank_pythonpath() -> str:
    """This checkout first on the path, so that ranks unpickle :mod:`benchmarks.training_scale_rank`."""
    paths = [str(REPO), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    return os.pathsep.join(dict.fromkeys(filter(None, paths)))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def standalone_cluster(work: Path, workers: int = 2, cores: int = 1, memory: str = "2g",
                       timeout: float = 120) -> Iterator[str]:
    """A standalone master and ``workers`` workers of ``cores`` cores on loopback, started with
    pyspark's ``spark-class``; yields the master's URL once every worker is alive, stops them all."""
    work.mkdir(parents=True, exist_ok=True)
    env = cluster_env(work)
    spark_class = str(Path(env["SPARK_HOME"]) / "bin" / "spark-class")
    port, ui = _free_port(), _free_port()
    url = f"spark://{LOOPBACK}:{port}"
    processes: list[subprocess.Popen] = []

    def launch(*args: str) -> None:
        with (work / "cluster.log").open("ab") as log:
            processes.append(subprocess.Popen([spark_class, *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, start_new_session=True))

    def alive() -> int:
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{ui}/json/", timeout=2) as answer:
                return int(json.load(answer).get("aliveworkers", 0))
        except OSError:
            return 0

    try:
        launch("org.apache.spark.deploy.master.Master", "--host", LOOPBACK, "--port", str(port),
               "--webui-port", str(ui))
        for _ in range(workers):
            launch("org.apache.spark.deploy.worker.Worker", url, "--cores", str(cores), "--memory", memory,
                   "--webui-port", str(_free_port()), "--work-dir", str(work / "worker"))
        deadline = time.monotonic() + timeout
        while alive() < workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                raise RuntimeError(f"the standalone cluster did not start: {work / 'cluster.log'}")
            time.sleep(1)
        yield url
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def measured(row: Row, found: dict[str, Any], rows: int, written: dict[str, Any]) -> dict[str, Any]:
    """A row's figures: rows/s per rank from rank 0's training loops, the largest rank's peak RSS."""
    loop_s = sum(found["epoch_seconds"])
    epochs = len(found["epoch_seconds"])
    peaks = found["peak_rss_mib"]
    return {
        "scale": row.scale, "contender": row.name, "kind": row.contender, "processes": row.processes,
        "window_rows": rows, "train_rows": found["train_rows"], "row_groups": written.get("train_row_groups"),
        "epochs": epochs, "loop_s": round(loop_s, 2),
        "rows_per_s_per_rank": round(found["train_rows"] * epochs / loop_s / row.processes),
        "peak_rss_mib": peaks, "peak_rss_mib_max": max(peaks) if peaks else None,
        "first_step_s": None if found["first_step_s"] is None else round(found["first_step_s"], 1),
        "roc_auc": None if found["roc_auc"] is None else round(found["roc_auc"], 4),
        "wall_s": round(found["wall_s"], 1), "train_loss": round(found["train_loss"], 5),
        "data_path": found.get("data_path", "DataLoader"), "holdout_data_path": found.get("holdout_data_path"),
        "evaluation_s_per_epoch": found.get("evaluation_s_per_epoch"), "holdout_rows": found.get("holdout_rows"),
        "bytes_on_disk": written.get("bytes"),
    }


def targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets from the measured rows: per local contender, the largest scale's peak
    RSS per rank (the largest rank's) against 1x's and the cap; per scale, the peer's rows/s over
    one streaming rank's. A target lacking one of its rows is not measured (None)."""
    found = []
    local = [r for r in results if r["kind"] == "local"]
    for processes in sorted({r["processes"] for r in local}):
        mine = {r["scale"]: r for r in local if r["processes"] == processes}
        top = max(mine)
        if 1.0 in mine and top > 1.0:
            ratio = mine[top]["peak_rss_mib_max"] / mine[1.0]["peak_rss_mib_max"]
            met = ratio <= MEMORY_RATIO and mine[top]["peak_rss_mib_max"] < MEMORY_CAP_MIB
            value = round(ratio, 3)
        else:
            met = value = None
        found.append({"target": f"peak RSS per rank at {top:g}x within {MEMORY_RATIO}x of 1x and under "
                                f"{MEMORY_CAP_MIB} MiB ({processes} rank{'s' * (processes > 1)})",
                      "value": value, "peak_mib": mine[top]["peak_rss_mib_max"], "met": met})
    peers = {r["scale"]: r for r in results if r["kind"] == "peer"}
    ranks = {r["scale"]: r for r in local if r["processes"] == 1}
    for scale in sorted(set(peers) & set(ranks)):
        ratio = peers[scale]["rows_per_s_per_rank"] / ranks[scale]["rows_per_s_per_rank"]
        found.append({"target": f"DataLoader peer / one streaming rank, rows/s, at {scale:g}x: at most "
                                f"{THROUGHPUT_RATIO}x", "value": round(ratio, 2), "met": ratio <= THROUGHPUT_RATIO})
    return found


def table(results: list[dict[str, Any]]) -> str:
    return markdown_table(
        ["scale", "contender", "training rows", "epochs", "rows/s per rank", "peak RSS per rank (MiB)",
         "time to first step", "holdout ROC AUC", "data path", "wall"],
        [[f"{r['scale']:g}x", r["contender"], f"{r['train_rows']:,}", r["epochs"], f"{r['rows_per_s_per_rank']:,}",
          " / ".join(f"{p:,.0f}" for p in r["peak_rss_mib"]), f"{r['first_step_s']} s",
          "-" if r["roc_auc"] is None else f"{r['roc_auc']:.3f}", r["data_path"], f"{r['wall_s']} s"]
         for r in results])


def plots(out: Path, results: list[dict[str, Any]]) -> list[Path]:
    """Peak RSS per rank against training rows (the target: flat) and rows/s per rank against rows."""
    names = list(dict.fromkeys(r["contender"] for r in results))

    def lines(value: str) -> list[Line]:
        return [Line(n, [r["train_rows"] for r in results if r["contender"] == n],
                     [r[value] for r in results if r["contender"] == n], dashed=n.startswith("DataLoader"))
                for n in names]

    others = [Line(f"{n}: rank 1 (no MLflow)", [r["train_rows"] for r in results if r["contender"] == n],
                   [r["peak_rss_mib"][1] for r in results if r["contender"] == n], dashed=True)
              for n in names if all(len(r["peak_rss_mib"]) > 1 for r in results if r["contender"] == n)]
    return [
        line_plot(out / "scale-memory.png", lines("peak_rss_mib_max") + others, xlabel="training rows",
                  ylabel="peak RSS per rank (MiB)", log=True,
                  title="Peak memory per rank against rows (target: flat)",
                  levels={f"{MEMORY_CAP_MIB} MiB cap": MEMORY_CAP_MIB}),
        line_plot(out / "scale-rows-per-s.png", lines("rows_per_s_per_rank"), xlabel="training rows",
                  ylabel="rows/s per rank", title="Training rows/s per rank against rows", log=True),
    ]


def report(out: Path, payload: dict[str, Any]) -> None:
    results = payload["rows"]
    print(table(results))
    for target in payload["targets"]:
        verdict = {True: "met", False: "not met", None: "not measured"}[target["met"]]
        print(f"- {target['target']}: {target['value']}: **{verdict}**")
    print(flush=True)
    if results:
        plots(out, results)
    write_results(out, "scale", payload)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = start(args.out)
    from benchmarks.common import machine, throwaway_home
    from jobs.config import load_config, tracking_uri
    from jobs.model.tabular import Preprocessor, build_model
    from jobs.runtime.session import get_spark
    from jobs.tracking import ensure_experiment
    from jobs.training.rank import RankConfig

    os.environ["PYTHONPATH"] = rank_pythonpath()  # the ranks unpickle benchmarks.training_scale_rank
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the cluster's Python workers: this venv
    home = throwaway_home("bench-scale-")
    # one folder per window: the features, the preprocessor and the scaled copies are the window's
    data = (Path(args.data).resolve() if args.data else home / "data") / f"last-{args.days}-days"
    data.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    rows_planned = plan(args.scales, args.contenders, args.cluster_scale)
    print(f"plan, in order: {'; '.join(f'{r.scale:g}x {r.name}' for r in rows_planned)}", flush=True)
    config = load_config()
    cfg = config.train
    window = base_window(data, args.days)
    pre = Preprocessor.from_json(window["preprocessor"])
    experiment_id = ensure_experiment("bench-scale")
    spark = get_spark("bench-scale", {"spark.master": "local[2]", "spark.ui.enabled": "false"})
    host = machine()
    payload: dict[str, Any] = {
        "machine": host, "load_average_before": [round(x, 2) for x in load_before],
        "settings": {"scales": args.scales, "epochs": args.epochs, "days": args.days, "contenders": args.contenders,
                     "cluster_scale": args.cluster_scale, "batch_size": cfg.batch_size,
                     "arrow_memory_pool": cfg.arrow_memory_pool, "read_batch_rows": cfg.read_batch_rows,
                     "malloc_mmap_threshold": cfg.malloc_mmap_threshold,
                     "malloc_mmap_threshold_env": os.environ.get("MALLOC_MMAP_THRESHOLD_"),
                     "arrow_default_memory_pool_env": os.environ.get("ARROW_DEFAULT_MEMORY_POOL"),
                     "data_path": cfg.data_path,
                     "buffer_rows": cfg.buffer_rows, "read_ahead": cfg.read_ahead, "group_rows": GROUP_ROWS,
                     "train_days": [window["train_days"][0], window["train_days"][-1], len(window["train_days"])],
                     "holdout_days": [window["holdout_days"][0], window["holdout_days"][-1]]},
        "setup_s": window["setup_s"], "written": {}, "rows": [], "targets": [], "inputs": {},
    }

    def job_at(scale: float) -> RankConfig:
        train_dirs, holdout_dirs, written = scaled_dirs(data, window, scale)
        payload["written"][f"{scale:g}"] = written
        return RankConfig.build(dataclasses.replace(cfg, epochs=args.epochs, use_gpu=False), config.features.label,
                                pre, train_dirs, holdout_dirs, run_id="", tracking_uri=tracking_uri())

    def record(row: Row, found: dict[str, Any]) -> None:
        written = payload["written"][f"{row.scale:g}"]
        payload["rows"].append(measured(row, found, written["rows"], written))
        payload["targets"] = targets(payload["rows"])
        payload["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        last = payload["rows"][-1]
        print(f"{row.scale:g}x {row.name}: {last['train_rows']:,} rows, {last['rows_per_s_per_rank']:,} rows/s per "
              f"rank, peak RSS {last['peak_rss_mib']} MiB, first step {last['first_step_s']} s, ROC AUC "
              f"{last['roc_auc']}, load {payload['load_average_after']}", flush=True)
        write_results(out, "scale", payload)

    for row in [r for r in rows_planned if r.contender != "cluster"]:
        job = job_at(row.scale)
        if row.contender == "peer":
            record(row, run_in_process("peer", job, str(time.time())))
        else:
            record(row, run_distributed(job, experiment_id, row.processes, local_mode=True))
    if not args.no_inputs:
        largest = max([s for s in args.scales if s <= 10] or [min(args.scales)])
        job = job_at(largest)
        parameters = sum(p.numel() for p in build_model(job.builder, pre, job.hyper).parameters())
        payload["inputs"] = {"parameters": parameters, "batch_size": job.batch_size,
                             "allreduce": measure_allreduce(parameters),
                             "read": {"scale": largest, **run_in_process("read", job, str(READ_ROWS))}}
        write_results(out, "scale", payload)
    spark.stop()
    for row in [r for r in rows_planned if r.contender == "cluster"]:
        job = job_at(row.scale)
        with standalone_cluster(home / "cluster") as url:
            cluster = get_spark("bench-scale-cluster", {
                "spark.master": url, "spark.ui.enabled": "false", "spark.executor.memory": "1g",
                "spark.executor.cores": "1", "spark.cores.max": "2", "spark.executorEnv.PYTHONPATH": rank_pythonpath()})
            try:
                record(row, retried(lambda j=job, r=row: run_distributed(j, experiment_id, r.processes,
                                                                       local_mode=False)))
            finally:
                cluster.stop()
    report(out, payload)
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Train the model with TorchDistributor on a window of feature partitions and register it in MLflow.

Usage::

    spark-submit jobs/train.py --run-date 2013-01-28 [--config PATH] [--lake-root PATH]
                               [--num-processes N] [--use-gpu true|false] [--local-mode true|false]

The window is ``train.train_days + train.holdout_days`` days ending with the run date: the model is
fitted on the first ``train_days`` and evaluated on the last ``holdout_days``. The driver fits the
preprocessing (vocabularies, normalisation statistics) with Spark, opens an MLflow run and logs the
parameters; TorchDistributor starts ``num_processes`` ranks (gloo on CPU, NCCL on GPU), each
reading the feature Parquet itself; rank 0 logs per-epoch metrics, plots (loss curves, ROC and
calibration curves on the holdout) and the model (pyfunc with signature, input example and the
preprocessing). The driver then registers a new model version
and tags it with the run date, the window and the holdout metrics, applies the champion gate, and
writes ``reports/training/date=<run-date>/summary.json`` (version, run, link, metrics, gate).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.config import FeatureSpec, Lake, job_parser, parse_job_args
from jobs.spark import MissingPartitionError, configure_logging, get_spark, path_exists, write_text

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.model import Preprocessor

log = logging.getLogger("jobs.train")


def split_window(run_date: dt.date, train_days: int, holdout_days: int) -> tuple[list[dt.date], list[dt.date]]:
    """(training days, holdout days): consecutive, oldest first, the holdout ending with ``run_date``."""
    from jobs.config import days_ending

    days = days_ending(run_date, train_days + holdout_days)
    return days[:train_days], days[train_days:]


def feature_dirs(spark: SparkSession, lake: Lake, days: list[dt.date]) -> list[str]:
    dirs = [lake.partition(lake.features, day) for day in days]
    missing = [d for d in dirs if not path_exists(spark, d)]
    if missing:
        raise MissingPartitionError(
            f"{len(missing)} feature partition(s) missing, e.g. {missing[0]}: run the features job for them first"
        )
    return dirs


def fit_preprocessor(df: DataFrame, spec: FeatureSpec, min_count: int) -> Preprocessor:
    """Vocabularies (categories seen at least ``min_count`` times) and mean/std of labelled rows."""
    from pyspark.sql import functions as F

    from jobs.model import Preprocessor, safe_std

    labelled = df.where(F.col(spec.label).isNotNull())
    vocab = {}
    for col in spec.categorical:
        rows = (
            labelled.where(F.col(col).isNotNull())
            .groupBy(col)
            .count()
            .where(F.col("count") >= min_count)
            .orderBy(col)
            .collect()
        )
        vocab[col] = [r[col] for r in rows]
    stats = labelled.agg(
        *[F.mean(c).alias(f"mean_{c}") for c in spec.numeric],
        *[F.stddev_pop(c).alias(f"std_{c}") for c in spec.numeric],
    ).first()
    return Preprocessor(
        categorical=list(spec.categorical),
        numeric=list(spec.numeric),
        vocab=vocab,
        mean={c: float(stats[f"mean_{c}"] or 0.0) for c in spec.numeric},
        std={c: safe_std(stats[f"std_{c}"]) for c in spec.numeric},
    )


def evaluate(labels: Any, probabilities: Any) -> dict[str, float]:
    """Holdout metrics of a binary classifier; AUCs are NaN when the holdout has a single class."""
    import numpy as np
    from sklearn.metrics import average_precision_score, brier_score_loss, log_loss, roc_auc_score

    y = np.asarray(labels, dtype=np.float64)
    p = np.clip(np.asarray(probabilities, dtype=np.float64), 1e-7, 1 - 1e-7)
    both = len(np.unique(y)) == 2
    return {
        "log_loss": float(log_loss(y, p, labels=[0.0, 1.0])),
        "roc_auc": float(roc_auc_score(y, p)) if both else float("nan"),
        "pr_auc": float(average_precision_score(y, p)) if both else float("nan"),
        "brier": float(brier_score_loss(y, p)),
        "accuracy": float(np.mean((p >= 0.5) == (y == 1.0))),
        "positive_rate": float(np.mean(y)),
        "rows": float(len(y)),
    }


def shard_units(dirs: list[str], rank: int, world: int) -> list[tuple[str, int]]:
    """This rank's share of the data: (Parquet file, row group) pairs, dealt round-robin.

    Every rank lists the same files in the same order, so the shares are disjoint, cover every
    row group exactly once, and are the same from one run to the next.
    """
    import pyarrow.parquet as pq

    units = []
    for folder in dirs:
        for path in sorted(Path(folder).glob("*.parquet")):
            units += [(str(path), group) for group in range(pq.ParquetFile(path).num_row_groups)]
    return units[rank::world]


def train_fn(job: dict[str, Any]) -> dict[str, Any] | None:
    """One rank of distributed training; TorchDistributor runs it in every process.

    Self-contained (imports inside, plain-data argument) so it pickles to the ranks. Each rank
    reads only its own row groups of the training partitions (:func:`shard_units`) and shuffles
    them with its own seeded generator; shares may differ by a row group, which DDP's ``Join``
    absorbs, so every training row is used exactly once per epoch. Only rank 0 touches MLflow.
    Every rank returns rank 0's result: the logged model's URI and the final holdout metrics.
    """
    import os
    import time

    import numpy as np
    import pandas as pd
    import pyarrow.parquet as pq
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel

    from jobs.model import Preprocessor, build_net, log_pyfunc, predict_proba
    from jobs.train import evaluate, shard_units

    torch.set_num_threads(job["threads_per_process"])
    use_gpu = job["use_gpu"]
    dist.init_process_group("nccl" if use_gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if use_gpu else "cpu")
    pre = Preprocessor.from_json(job["preprocessor"])
    label = job["label"]
    wanted = [*pre.categorical, *pre.numeric, label]

    def labelled(tables: list[Any]) -> pd.DataFrame:
        """The rows of these Arrow tables that have a label, as one DataFrame."""
        if not tables:
            return pd.DataFrame(columns=wanted)
        frame = pd.concat([table.to_pandas() for table in tables], ignore_index=True)
        return frame[frame[label].notna()].reset_index(drop=True)

    units = shard_units(job["train_dirs"], rank, world)
    shard = labelled([pq.ParquetFile(path).read_row_group(group, columns=wanted) for path, group in units])
    cats, nums = (torch.from_numpy(a) for a in pre.encode(shard))
    labels = torch.from_numpy(shard[label].to_numpy(np.float32))
    print(f"rank {rank}/{world}: {len(units)} row groups, {len(shard)} labelled rows", flush=True)
    torch.manual_seed(job["seed"])  # the same initial weights on every rank
    net = build_net(pre, job["hyper"]).to(device)
    model = DistributedDataParallel(net, device_ids=[device.index] if use_gpu else None)
    shuffle = torch.Generator().manual_seed(job["seed"] * 1009 + rank)
    optimizer = torch.optim.Adam(model.parameters(), lr=job["learning_rate"])
    loss_fn = torch.nn.BCEWithLogitsLoss(reduction="sum")

    result = None
    if rank == 0:
        import mlflow

        mlflow.set_tracking_uri(job["tracking_uri"])
        mlflow.start_run(run_id=job["run_id"])
        holdout = labelled([pq.read_table(folder, columns=wanted) for folder in job["holdout_dirs"]])
        mlflow.log_metrics({"holdout_rows": float(len(holdout))})
        history: dict[str, list[float]] = {"train": [], "holdout": []}

    epoch_seconds = []
    for epoch in range(job["epochs"]):
        started = time.perf_counter()
        model.train()
        totals = torch.zeros(2, dtype=torch.float64, device=device)
        order = torch.randperm(len(labels), generator=shuffle)
        with Join([model]):
            for start in range(0, len(order), job["batch_size"]):
                batch = order[start : start + job["batch_size"]]
                c, n, y = cats[batch].to(device), nums[batch].to(device), labels[batch].to(device)
                optimizer.zero_grad()
                loss = loss_fn(model(c, n), y)
                loss.backward()
                optimizer.step()
                totals += torch.tensor([loss.item(), len(y)], dtype=torch.float64, device=device)
        dist.all_reduce(totals)
        epoch_seconds.append(time.perf_counter() - started)
        if rank == 0 and epoch == 0:
            mlflow.log_metric("train_rows", float(totals[1]))  # every labelled row, once
        if rank == 0:
            train_loss = float(totals[0] / totals[1])
            probabilities = predict_proba(net, pre, holdout)
            metrics = evaluate(holdout[label], probabilities)
            history["train"].append(train_loss)
            history["holdout"].append(metrics["log_loss"])
            mlflow.log_metrics(
                {"train_loss": train_loss, **{f"holdout_{k}": v for k, v in metrics.items() if k != "rows"}},
                step=epoch,
            )
            print(
                f"epoch {epoch + 1}/{job['epochs']}: train_loss={train_loss:.4f} "
                f"holdout_log_loss={metrics['log_loss']:.4f} holdout_roc_auc={metrics['roc_auc']:.4f}",
                flush=True,
            )

    if rank == 0:
        from jobs.plots import calibration_figure, loss_figure, roc_figure

        mlflow.log_figure(loss_figure(history), "plots/loss_curves.png")
        if len(np.unique(holdout[label])) == 2:
            mlflow.log_figure(roc_figure(holdout[label], probabilities), "plots/roc_curve.png")
        mlflow.log_figure(calibration_figure(holdout[label], probabilities), "plots/calibration_curve.png")
        info = log_pyfunc(net.cpu(), pre, job["hyper"], holdout.head(5))
        mlflow.end_run()
        result = {
            "model_uri": info.model_uri, "metrics": metrics, "train_loss": train_loss,
            "train_rows": int(totals[1]), "epoch_seconds": epoch_seconds,
        }
    # In local mode every rank writes its return value to the same file, the last one winning:
    # give every rank rank 0's result so whichever writes last returns the right thing.
    shared = [result]
    dist.broadcast_object_list(shared, src=0)
    dist.destroy_process_group()
    return shared[0]


def _bool(text: str) -> bool:
    return text.lower() in ("1", "true", "yes")


def main(argv: list[str] | None = None) -> None:
    configure_logging()
    parser = job_parser(__doc__)
    parser.add_argument("--num-processes", type=int, default=None, help="ranks (default: train.num_processes)")
    parser.add_argument("--use-gpu", type=_bool, default=None, help="true/false (default: train.use_gpu)")
    parser.add_argument(
        "--local-mode", type=_bool, default=None,
        help="true: ranks run on the driver; false: as a barrier stage on the cluster (default: train.local_mode)",
    )
    args = parse_job_args(parser, argv)
    cfg = args.config.train
    num_processes = args.extra["num_processes"] or cfg.num_processes
    use_gpu = cfg.use_gpu if args.extra["use_gpu"] is None else args.extra["use_gpu"]
    local_mode = cfg.local_mode if args.extra["local_mode"] is None else args.extra["local_mode"]
    train_days, holdout_days = split_window(args.run_date, cfg.train_days, cfg.holdout_days)

    spark = get_spark(f"train-{args.run_date}")
    train_dirs = feature_dirs(spark, args.lake, train_days)
    holdout_dirs = feature_dirs(spark, args.lake, holdout_days)
    features = spark.read.option("basePath", args.lake.features).parquet(*train_dirs)
    pre = fit_preprocessor(features, args.config.features, cfg.min_category_count)
    log.info(
        "training on %s..%s, holdout %s..%s; vocabularies: %s",
        train_days[0], train_days[-1], holdout_days[0], holdout_days[-1],
        {c: len(v) for c, v in pre.vocab.items()},
    )

    import mlflow

    from jobs.champion import apply_gate
    from jobs.config import tracking_uri
    from jobs.tracking import client, ensure_experiment, run_link, run_url

    mlflow_client = client()
    experiment_id = ensure_experiment(cfg.experiment)
    run = mlflow_client.create_run(
        experiment_id, run_name=f"train-{args.run_date}", tags={"run_date": str(args.run_date)}
    )
    run_id = run.info.run_id
    log.info("MLflow run: %s", run_link(experiment_id, run_id))
    hyper = {"embedding_dim": cfg.embedding_dim, "hidden_units": list(cfg.hidden_units)}
    params = {
        "run_date": args.run_date, "train_start": train_days[0], "train_end": train_days[-1],
        "holdout_start": holdout_days[0], "holdout_end": holdout_days[-1], "features_path": args.lake.features,
        "epochs": cfg.epochs, "batch_size": cfg.batch_size, "learning_rate": cfg.learning_rate,
        "seed": cfg.seed, "num_processes": num_processes, "use_gpu": use_gpu, "local_mode": local_mode,
        "min_category_count": cfg.min_category_count, "config": args.config.source, **hyper,
    }
    for key, value in params.items():
        mlflow_client.log_param(run_id, key, str(value))

    job = {
        "run_id": run_id, "tracking_uri": tracking_uri(), "preprocessor": pre.to_json(),
        "train_dirs": train_dirs, "holdout_dirs": holdout_dirs, "label": args.config.features.label,
        "hyper": hyper, "epochs": cfg.epochs, "batch_size": cfg.batch_size, "learning_rate": cfg.learning_rate,
        "seed": cfg.seed, "use_gpu": use_gpu, "threads_per_process": 1,
    }
    from pyspark.ml.torch.distributor import TorchDistributor

    try:
        result = TorchDistributor(num_processes=num_processes, local_mode=local_mode, use_gpu=use_gpu).run(
            train_fn, job
        )
        if not result:
            raise RuntimeError("training returned no result from rank 0")
        version = mlflow.register_model(result["model_uri"], cfg.model_name)
    except BaseException:
        mlflow_client.set_terminated(run_id, status="FAILED")
        raise
    metrics = result["metrics"]
    label = args.config.features.label
    holdout = (
        spark.read.parquet(*holdout_dirs)
        .select(*args.config.features.inputs, label)
        .where(f"`{label}` IS NOT NULL")
        .toPandas()
    )
    decision = apply_gate(
        mlflow_client, cfg.model_name, str(version.version), holdout, args.config.features.inputs, label,
        cfg.promotion_metric, cfg.promotion_margin,
    )
    train_window, holdout_window = f"{train_days[0]}..{train_days[-1]}", f"{holdout_days[0]}..{holdout_days[-1]}"
    for key, value in {
        "run_date": args.run_date, "train_window": train_window, "holdout_window": holdout_window,
        **{f"holdout_{k}": round(v, 6) for k, v in metrics.items()},
    }.items():
        mlflow_client.set_model_version_tag(cfg.model_name, version.version, key, str(value))
    mlflow_client.set_terminated(run_id, status="FINISHED")
    log.info(
        "registered %s version %s from run %s; holdout: %s",
        cfg.model_name, version.version, run_id, json.dumps({k: round(v, 4) for k, v in metrics.items()}),
    )
    summary = {
        "model_name": cfg.model_name, "model_version": str(version.version), "run_id": run_id,
        "experiment_id": experiment_id, "run_url": run_url(experiment_id, run_id),
        "train_window": train_window, "holdout_window": holdout_window, "metrics": metrics, "gate": decision.tags(),
    }
    write_text(spark, args.lake.report("training", args.run_date, "summary.json"), json.dumps(summary, indent=2))
    log.info(
        "champion gate: version %s %s: %s", version.version,
        "is the new champion" if decision.promote else "stays a challenger", decision.reason,
    )


if __name__ == "__main__":
    main()


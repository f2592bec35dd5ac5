"""Train the model with TorchDistributor on a window of feature partitions and register it in MLflow.

Usage: ``spark-submit jobs/training/job.py --help`` (the options are listed in docs/configuration.md,
generated from the parser). The run-time overrides (``--epochs 5``, or ``--overrides JSON`` as the
DAG passes them) change the ``train.*`` setting of the same name for this run
(:data:`jobs.config.RUN_OVERRIDES`).

The window is ``train.train_days + train.validation_days + train.holdout_days`` days ending with the
run date: the model is fitted on the first ``train_days`` (with ``train.max_train_days``, on every
earlier day the features zone holds too, up to that many: :func:`jobs.training.data.training_window`)
and evaluated on the last ``holdout_days``;
the validation days between them choose the report's threshold (:mod:`jobs.selection.evaluation`). The driver fits the
preprocessing (vocabularies, normalisation statistics) with Spark, opens an MLflow run and logs the
parameters; TorchDistributor starts ``num_processes`` ranks (gloo on CPU; NCCL on GPU, one rank per
GPU, by default every GPU of the machine in local mode), each reading the feature Parquet itself and
keeping its rows on its device, or streaming them through a bounded buffer (``train.data_path``,
:mod:`jobs.training.stream`; a window that would leave a rank without rows is refused first); steps
run in ``train.precision`` (bf16 autocast by default on a GPU
that has it, fp16 with a loss scaler, fp32); rank 0 logs per-epoch metrics, plots (loss curves, ROC and
calibration curves on the holdout) and the model (pyfunc with signature, input example and the
preprocessing): under TorchDistributor through files this process forwards to the run as the epochs
end, and the plots and the model logged here from rank 0's weights (:mod:`jobs.training.relay`: the
ranks import no MLflow). The driver then registers a new model version and tags it with the run date, the
window and the holdout metrics, logs the evaluation report, checks that the candidate beats the best
MLlib baseline of the same window (:mod:`jobs.selection.bar`: otherwise it stops before the gate,
saying why), applies the champion gate, and writes ``reports/training/date=<run-date>/summary.json``
(version, run, link, metrics, gate). With ``require_approval`` a winning version is tagged
``awaiting_approval`` instead of becoming champion.

Resuming: rank 0 checkpoints every epoch to ``checkpoints/training/date=<run-date>/<key>/`` in the
lake, where ``key`` digests everything that shapes the training (window, hyperparameters, code
version, preprocessing). A retried attempt with the same key (an Airflow retry after the process
was killed) continues the same MLflow run from the last checkpoint instead of starting over; the
checkpoints are removed once the model is registered.

A sweep candidate (``--parent-run-id``) is trained, reported on and left unregistered; with
``--family xgboost`` it is an XGBoost candidate instead of the MLP (:mod:`jobs.selection.trees`:
SparkXGBClassifier on ``num_processes`` workers, the same window and preprocessor, no ranks or
checkpoints). The promotion job (``jobs/promotion/job.py``) registers and gates the sweep's chosen
run, whatever its family.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs.config import FAMILIES, JobArgs, add_overrides, job_parser, parse_job_args, resolved
from jobs.runner import run_job
from jobs.runtime.gpu import require_cuda
from jobs.runtime.session import configure_logging, get_spark
from jobs.selection.bar import FAMILY
from jobs.timings import phase
from jobs.tracking import check_tracking_server
from jobs.training.data import WINDOW_PARTS, Window, check_labels, fit_preprocessor, open_window
from jobs.training.driver import rank_errors, ranks_failed, ranks_output_until_a_failure, train_in_process
from jobs.training.lifecycle import failed_on_error, terminate_on_signal
from jobs.training.loop import train_fn
from jobs.training.publish import open_run, publish
from jobs.training.rank import RankConfig, batch_size
from jobs.training.relay import run_relayed
from jobs.training.resources import IN_PROCESS, choose_launcher, gpu_resources, rank_data_path, training_processes
from jobs.training.stream import plan_shares, resolve_data_path

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("jobs.training.job")
CONFIG_ARTIFACT = "config/resolved.json"  # in the run: the resolved config and its files


@dataclass(frozen=True)
class TrainArgs(JobArgs):
    """The train job's options; ``config.train`` carries the overrides already."""

    started_by: str | None
    overrides: dict[str, Any]  # the train.* settings this run changes (config.train has them already)
    parent_run_id: str | None = None  # a sweep candidate: train and report, register nothing
    candidate_name: str | None = None
    trigger: str | None = None  # what kind of event started the run: person, decay, drift or schedule
    training_id: str | None = None  # the training the run is part of: the bar compares it with its runs only
    family: str = "mlp"  # the candidate's model family (jobs.config.FAMILIES)
    xgboost_params: dict | None = None  # an xgboost candidate's params (jobs.selection.trees)


def _text(value: str) -> str | None:
    """An identifier from another task's output: empty where that task had none (no DAG run)."""
    return value or None


def _json_object(value: str) -> dict[str, Any]:
    found = json.loads(value)
    if not isinstance(found, dict):
        raise ValueError(f"not a JSON object: {value!r}")
    return found


def parse_args(argv: list[str] | None = None) -> TrainArgs:
    parser = job_parser(__doc__)
    add_overrides(parser)
    parser.add_argument("--started-by", default=None,
                        help="what started the run (a schedule, a drift event, a person): an MLflow tag")
    parser.add_argument("--trigger", type=_text, default=None,
                        help="the kind of event that started the run (person, decay, drift, schedule): an MLflow tag")
    parser.add_argument("--parent-run-id", type=_text, default=None,
                        help="train as a sweep candidate under this MLflow run: report, do not register")
    parser.add_argument("--candidate-name", type=_text, default=None, help="the sweep candidate's name")
    parser.add_argument("--training-id", type=_text, default=None,
                        help="the training the run belongs to (<pipeline>_train's run): an MLflow tag the bar and the "
                             "sweep match")
    parser.add_argument("--family", choices=FAMILIES, default="mlp",
                        help="the model family: mlp (TorchDistributor) or xgboost (SparkXGBClassifier, a sweep "
                             "candidate only: with --parent-run-id)")
    parser.add_argument("--xgboost-params", type=_json_object, default=None,
                        help="an xgboost candidate's params, a JSON object over the defaults (default: sweep.xgboost's "
                             "first set)")
    args = parse_job_args(parser, argv, TrainArgs)
    if args.family == "xgboost" and not args.parent_run_id:
        # registration and the gate go through the promotion job, as the sweep's best of any family does
        parser.error("--family xgboost trains a sweep candidate: give --parent-run-id")
    return args


def started(args: TrainArgs) -> dict[str, str]:
    """What started the run, as MLflow tags and summary keys: ``trigger`` and ``started_by`` (those given)."""
    return {k: v for k, v in {"trigger": args.trigger, "started_by": args.started_by}.items() if v}


def main(argv: list[str] | None = None) -> None:
    configure_logging()
    args = parse_args(argv)
    if args.config.train.use_gpu and args.config.train.local_mode:  # the ranks run here: this machine's GPUs
        require_cuda("GPU training (--use-gpu true / train.use_gpu)",
                     "train on the CPU with --use-gpu false, or run the job on a machine with GPUs")
    terminate_on_signal()  # SIGTERM or a dead parent: end the run as FAILED and stop the ranks
    # MLflow's calls are bounded (parse_job_args applied tracking.*); a tracking server that does not
    # answer fails the job now, saying so.
    with phase("tracking server"):
        check_tracking_server(timeout=args.config.tracking.check_timeout)
    cfg, spec = args.config.train, args.config.features
    num_processes = training_processes(cfg.use_gpu, cfg.local_mode, args.overrides.get("num_processes"),
                                       cfg.num_processes)

    # Fit the preprocessing on the training days with Spark. GPU resources must be known when the
    # session starts; spark-submit --conf settings win.
    spark = get_spark(f"train-{args.run_date}",
                      gpu_resources(cfg.local_mode, num_processes) if cfg.use_gpu else None)
    with phase("window"):
        window = open_window(spark, args.lake, cfg, args.run_date, args.config.feed_calendar)
    features = spark.read.option("basePath", args.lake.features).parquet(*window.dirs["train"])
    # Labels first: a window without them fails here, in seconds, not inside the ranks.
    with phase("labels"):
        labelled_rows = check_labels(features, spec.label, window.described)
        check_labels(spark.read.option("basePath", args.lake.features).parquet(*window.dirs["holdout"]), spec.label,
                     f"holdout window {window.span('holdout')} ({args.lake.features})", both_classes=False)
    TRAINERS[args.family](spark, args, window, features, labelled_rows, num_processes)


def train_mlp(spark: SparkSession, args: TrainArgs, window: Window, features: DataFrame, labelled_rows: int,
              num_processes: int) -> None:
    """An MLP on the window with TorchDistributor's ranks (or as one rank in this process): a sweep
    candidate's report under ``--parent-run-id``, else registered, gated and summarised."""
    cfg, spec = args.config.train, args.config.features
    use_gpu, local_mode = cfg.use_gpu, cfg.local_mode
    train_days, holdout_days = window.days["train"], window.days["holdout"]
    train_dirs, validation_dirs, holdout_dirs = (window.dirs[part] for part in ("train", "validation", "holdout"))
    train_window, windows = window.described, (window.span("train"), window.span("holdout"))
    # Each rank's share from the Parquet footers: a rank left without a labelled row is refused here,
    # saying why, not found out by ranks waiting for each other.
    with phase("shares"):
        plan = plan_shares(train_dirs, num_processes, spec.label)
    launcher, why = choose_launcher(cfg.launcher, use_gpu=use_gpu, local_mode=local_mode,
                                    labelled_rows=sum(plan.share_rows), max_rows=cfg.in_process_max_rows)
    log.info("launcher: %s (%s)", launcher, why)
    if launcher == IN_PROCESS and num_processes != 1:
        num_processes = 1
        plan = plan_shares(train_dirs, num_processes, spec.label)
    plan.refuse_empty(f"{train_window} on {num_processes} ranks")
    data_path = rank_data_path(cfg.data_path, launcher, sum(plan.share_rows), cfg.in_process_max_rows)
    log.info("labelled rows per rank: %s; data path: %s (train.data_path %s, buffer_rows %s)", plan.share_rows,
             resolve_data_path(data_path, max(plan.share_rows), cfg.buffer_rows), cfg.data_path, cfg.buffer_rows)
    with phase("preprocessor"):
        pre = fit_preprocessor(features, spec, cfg.min_category_count, train_window, cfg.clip_to_training_range,
                               cfg.in_process_max_rows, labelled_rows)
    log.info("training on %s..%s, holdout %s..%s; vocabularies: %s", train_days[0], train_days[-1],
             holdout_days[0], holdout_days[-1], {c: len(v) for c, v in pre.vocab.items()})

    # Open (or resume) the MLflow run with everything that shapes the training as its parameters.
    from jobs.config import tracking_uri

    params = run_params(args, window, num_processes, launcher)
    tags = {**started(args), FAMILY: "mlp"}
    if args.parent_run_id:
        tags["mlflow.parentRunId"] = args.parent_run_id
    with phase("open run"):
        run = open_run(args.lake, args.run_date, cfg.experiment, params, pre, cfg.epochs, tags)
    from jobs.selection.identity import data_fingerprint, identity_tags
    from jobs.tracking import client

    # Which training, config and data version the run is of: the bar and the sweep compare it with
    # runs of the same only. Set on a resumed run too: the attempt's own.
    with phase("fingerprint"):
        data = data_fingerprint(spark, [*train_dirs, *validation_dirs, *holdout_dirs])
        for key, value in identity_tags(args.config, data, args.training_id).items():
            client().set_tag(run.run_id, key, value)
        # the config as the run saw it, every default filled in, and the files it was merged from
        client().log_dict(run.run_id, {"layers": list(args.config.layers), "config": resolved(args.config)},
                          CONFIG_ARTIFACT)

    # Train: TorchDistributor runs train_fn in every rank (or this process runs it as the only rank);
    # rank 0 logs to the run (through this process under TorchDistributor) and the model is logged.
    rank = RankConfig.build(cfg, spec.label, pre, train_dirs, holdout_dirs, run_id=run.run_id,
                            tracking_uri=tracking_uri(), checkpoint_dir=run.checkpoint_dir,
                            validation_dirs=validation_dirs).replace(data_path=data_path)
    # Any failure from here on, SIGTERM included, ends the run as FAILED (a retry still resumes it).
    with failed_on_error(client(), run.run_id):
        result = launch_ranks(rank, launcher, num_processes, cfg, run.checkpoint_dir)
        if not result:
            raise RuntimeError("training returned no result from rank 0")
        if args.parent_run_id:  # a sweep candidate: the report, no registration
            from jobs.selection.sweep import finish_candidate

            with phase("candidate report"):
                finish_candidate(spark, args.config, run.run_id, result, holdout_dirs, validation_dirs,
                                 args.run_date, windows[1], args.candidate_name or run.run_id, run.checkpoint_dir,
                                 family="mlp")
            return
        # Register, gate and report.
        from jobs.scoring.drift import feature_bins

        with phase("feature bins"):
            bins = feature_bins(features, pre, args.config.score.drift.bins, cfg.in_process_max_rows)
        publish(spark, args.lake, args.config, args.run_date, run, result, bins, holdout_dirs, windows,
                validation_dirs=validation_dirs, started=started(args))


def run_params(args: TrainArgs, window: Window, num_processes: int, launcher: str) -> dict[str, Any]:
    """The MLflow run's parameters: everything that shapes the training."""
    from jobs.tracking import code_version

    cfg = args.config.train
    train_days, holdout_days = window.days["train"], window.days["holdout"]
    return {
        "run_date": args.run_date, "train_start": train_days[0], "train_end": train_days[-1],
        "holdout_start": holdout_days[0], "holdout_end": holdout_days[-1], "features_path": args.lake.features,
        "epochs": cfg.epochs, "batch_size": batch_size(cfg), "learning_rate": cfg.learning_rate,
        "precision": cfg.precision, "weight_decay": cfg.weight_decay, "lr_schedule": cfg.lr_schedule,
        "keep_best_epoch": cfg.keep_best_epoch,
        "seed": cfg.seed, "num_processes": num_processes, "use_gpu": cfg.use_gpu, "local_mode": cfg.local_mode,
        "launcher": launcher,
        "min_category_count": cfg.min_category_count, "config": args.config.source, "model": cfg.model,
        "data_path": cfg.data_path, "buffer_rows": cfg.buffer_rows, "read_ahead": cfg.read_ahead,
        "read_batch_rows": cfg.read_batch_rows, "arrow_memory_pool": cfg.arrow_memory_pool,
        "malloc_mmap_threshold": cfg.malloc_mmap_threshold,
        **cfg.hyperparameters, **code_version(),
    }


def launch_ranks(rank: RankConfig, launcher: str, num_processes: int, cfg: Any, checkpoint_dir: str) -> Any:
    """Rank 0's result: TorchDistributor runs train_fn in every rank (or this process runs it as
    the only rank); a failure the ranks explained is raised with what they said."""
    rank_errors(checkpoint_dir, clear=True)  # what an earlier attempt's ranks said
    try:
        if launcher == IN_PROCESS:  # its own error, as it is: no rank output to read it from
            with phase("ranks"):
                return train_in_process(rank)
        from jobs.training.launcher import LeanTorchDistributor

        distributor = LeanTorchDistributor(num_processes=num_processes, local_mode=cfg.local_mode,
                                           use_gpu=cfg.use_gpu)
        with ranks_output_until_a_failure(), phase("ranks"):
            # rank 0 logs through files beside the checkpoints, forwarded from here as they come
            return run_relayed(rank.replace(events_dir=f"{checkpoint_dir}/events"),
                               lambda job: distributor.run(train_fn, job))
    except RuntimeError as err:  # "TorchDistributor failed during training": the ranks say why
        said = rank_errors(checkpoint_dir)
        if said:
            raise ranks_failed(said) from err
        raise



def train_xgboost(spark: SparkSession, args: TrainArgs, window: Window, features: DataFrame, labelled_rows: int,
                  num_workers: int) -> None:
    """An xgboost sweep candidate (:mod:`jobs.selection.trees`) on the job's window (``labelled_rows``:
    its labelled training rows, as :func:`check_labels` counted them): the same preprocessor and
    identity tags as an MLP candidate's, ``num_workers`` XGBoost workers."""
    from jobs.config import XGBOOST_DEFAULTS
    from jobs.selection.identity import data_fingerprint, identity_tags
    from jobs.selection.trees import train_candidate

    cfg, spec = args.config.train, args.config.features
    pre = fit_preprocessor(features, spec, cfg.min_category_count, window.described, cfg.clip_to_training_range,
                           cfg.in_process_max_rows, labelled_rows)
    # plan_sweep passes a whole param set; one given by hand goes over the defaults as sweep.xgboost's do
    params = ({**XGBOOST_DEFAULTS, **args.xgboost_params} if args.xgboost_params is not None
              else args.config.sweep.xgboost_params()[0])
    dirs, windows = window.dirs, {part: window.span(part) for part in WINDOW_PARTS}
    identity = identity_tags(args.config, data_fingerprint(spark, [d for part in dirs.values() for d in part]),
                             args.training_id)
    found = train_candidate(spark, args.config, args.run_date, dirs, windows, pre, params,
                            args.candidate_name or "xgboost", args.parent_run_id or "", num_workers, identity,
                            started(args))
    log.info("xgboost candidate %s: run %s, holdout %s", args.candidate_name, found["run_id"],
             json.dumps({k: round(v, 4) for k, v in found["metrics"].items()}))

# The one dispatch on --family: each trains a candidate of its family on the window main opened.
TRAINERS: dict[str, Callable[[SparkSession, TrainArgs, Window, DataFrame, int, int], None]] = {
    "mlp": train_mlp, "xgboost": train_xgboost}


if __name__ == "__main__":
    run_job(main)

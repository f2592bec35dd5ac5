"""Promote the training's chosen candidate: register it, put it to the bar and the champion gate.

Usage: ``spark-submit jobs/promotion/job.py --help``. Nothing is trained: ``--candidate-run`` is a
finished sweep candidate (of any family) trained on the window of ``--run-date``, which the
run-time overrides (``--overrides JSON`` as the DAG passes them) shape as they shape the train job's.

With ``sweep.blend``, the blend of its members goes in the candidate's place where it beats it
(:mod:`jobs.selection.blend_candidate`); a baseline that may serve (``promote: true``) and beats it does too
(:func:`jobs.selection.bar.in_its_place`). The one chosen is registered under ``train.model_name``,
with the drift baseline of the window (the bins a baseline of the same training logged, else binned
here with the preprocessor the chosen model carries: :func:`jobs.selection.baseline_training.logged_feature_bins`),
checked against the best MLlib baseline of the same window (:mod:`jobs.selection.bar`: otherwise it
stops before the gate, saying why), and sent to the champion gate; the job writes
``reports/training/date=<run-date>/summary.json`` (version, run, link, metrics, gate), as a train job
that registers does (:func:`jobs.training.publish.publish`). With ``require_approval`` a winning
version is tagged ``awaiting_approval`` instead of becoming champion.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs.config import JobArgs, add_overrides, job_parser, parse_job_args
from jobs.runner import run_job
from jobs.runtime.session import configure_logging, get_spark
from jobs.timings import phase
from jobs.tracking import check_tracking_server
from jobs.training.data import Window, fit_preprocessor, open_window
from jobs.training.lifecycle import terminate_on_signal
from jobs.training.publish import TrainingRun, publish

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("jobs.promotion.job")


@dataclass(frozen=True)
class PromoteArgs(JobArgs):
    """The promotion job's options; ``config.train`` carries the overrides already."""

    candidate_run: str  # the finished sweep candidate to register and gate
    started_by: str | None
    overrides: dict[str, Any]  # the train.* settings this run changes (config.train has them already)
    trigger: str | None = None  # what kind of event started the run: person, decay, drift or schedule


def _text(value: str) -> str | None:
    """An identifier from another task's output: empty where that task had none (no DAG run)."""
    return value or None


def parse_args(argv: list[str] | None = None) -> PromoteArgs:
    parser = job_parser(__doc__)
    add_overrides(parser)
    parser.add_argument("--candidate-run", required=True,
                        help="the finished sweep candidate run to register, then bar and gate")
    parser.add_argument("--started-by", default=None,
                        help="what started the run (a schedule, a drift event, a person): an MLflow tag")
    parser.add_argument("--trigger", type=_text, default=None,
                        help="the kind of event that started the run (person, decay, drift, schedule): an MLflow tag")
    return parse_job_args(parser, argv, PromoteArgs)


def started(args: PromoteArgs) -> dict[str, str]:
    """What started the run, as MLflow tags and summary keys: ``trigger`` and ``started_by`` (those given)."""
    return {k: v for k, v in {"trigger": args.trigger, "started_by": args.started_by}.items() if v}


def main(argv: list[str] | None = None) -> None:
    configure_logging()
    args = parse_args(argv)
    terminate_on_signal()  # SIGTERM or a dead parent: stop where it is
    with phase("tracking server"):  # a tracking server that does not answer fails the job now, saying so
        check_tracking_server(timeout=args.config.tracking.check_timeout)
    spark = get_spark(f"promote-{args.run_date}")
    with phase("window"):
        window = open_window(spark, args.lake, args.config.train, args.run_date, args.config.feed_calendar)
    promote(spark, args, window)


def promote(spark: SparkSession, args: PromoteArgs, window: Window) -> None:
    """The sweep's chosen run (or the blend of ``sweep.blend`` where it beats it, or a baseline that
    may serve and beats it) registered, barred and gated. Nothing is trained: the window is binned
    for the drift baseline only where no baseline of the same training logged those bins
    (:func:`jobs.selection.baseline_training.logged_feature_bins`), with the preprocessor the chosen model
    carries (an MLP's; fitted on the window where it carries none, as an XGBoost pyfunc)."""
    from jobs.model.tabular import Preprocessor
    from jobs.scoring.drift import feature_bins
    from jobs.scoring.predictor import model_preprocessor
    from jobs.selection.bar import in_its_place
    from jobs.selection.baseline_training import logged_feature_bins
    from jobs.selection.sweep import candidate_result
    from jobs.tracking import client

    cfg, forward = args.config.train, args.candidate_run
    windows = (window.span("train"), window.span("holdout"))
    validation_dirs, holdout_dirs = window.dirs["validation"], window.dirs["holdout"]
    if args.config.sweep.blend:  # the blend of sweep.blend's members, if it beats the sweep's choice
        from jobs.selection.blend_candidate import blend_candidate, preferred

        with phase("blend"):
            blend = blend_candidate(spark, args.config, args.candidate_run, args.run_date,
                                    {"validation": validation_dirs, "holdout": holdout_dirs}, windows[1])
            forward = preferred(args.config, client(), args.candidate_run, blend)
    # the better family serves: a baseline that may (promote: true) and beats it goes in its place
    with phase("chosen"):
        serving = in_its_place(args.config, client(), forward, args.run_date, windows[1])
        chosen = serving.info.run_id if serving is not None else forward
        result, experiment_id = candidate_result(chosen)
    with phase("feature bins"):
        bins = logged_feature_bins(client(), args.candidate_run, args.run_date, windows[1])
        if bins is None:  # binned here: with the preprocessor the chosen model carries, fitted only if none
            features = spark.read.option("basePath", args.lake.features).parquet(*window.dirs["train"])
            logged = model_preprocessor(result["model_uri"])
            pre = Preprocessor(**logged) if logged else fit_preprocessor(
                features, args.config.features, cfg.min_category_count, window.described,
                cfg.clip_to_training_range, cfg.in_process_max_rows)
            bins = feature_bins(features, pre, args.config.score.drift.bins, cfg.in_process_max_rows)
    # no checkpoints to drop: a folder no training uses
    run = TrainingRun(chosen, experiment_id, args.lake.checkpoint("training", args.run_date, "promoted"))
    publish(spark, args.lake, args.config, args.run_date, run, result, bins, holdout_dirs, windows,
            validation_dirs=validation_dirs, started=started(args))


if __name__ == "__main__":
    run_job(main)

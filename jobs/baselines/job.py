"""Train the Spark MLlib baselines the PyTorch model must beat, on the same window.

Usage: ``spark-submit jobs/baselines/job.py --help`` (the window's overrides are the train
job's: ``--train-days``, ``--max-train-days``, ``--holdout-days`` or ``--overrides JSON``).

Each baseline of the config's ``baselines`` (logistic regression, gradient-boosted trees) is fitted
with pyspark.ml on the training days' feature partitions, encoded as the PyTorch model encodes them
(the same preprocessor, fitted the same way: one-hot categories for logistic regression, each
category's index for the trees, z-scored numbers: :data:`jobs.model.baseline.DESIGNS`), and evaluated on
the same validation and holdout days with the same code (:func:`jobs.metrics.evaluate`, the
report of :mod:`jobs.selection.evaluation`). Each is logged as its own MLflow run, tagged
``candidate_kind=baseline`` with its name and holdout window, and with the training it belongs to
(``--training-id``) and the fingerprints of the config and of the window's data
(:mod:`jobs.selection.identity`): the promotion job's bar compares its candidate with these runs only,
with its params, metrics, report, drift baseline and the model: a pyfunc with signature that needs no
Spark to predict (:mod:`jobs.model.baseline`). A baseline with ``promote: true`` may serve: when it
beats the sweep's chosen candidate on the holdout, the promotion job (``jobs/promotion/job.py``) registers it
under ``train.model_name`` and gates it in the candidate's place (:func:`jobs.selection.bar.in_its_place`);
scoring then serves it unchanged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from jobs.config import WINDOW_OVERRIDES, JobArgs, add_overrides, job_parser, parse_job_args
from jobs.runner import run_job
from jobs.runtime.session import configure_logging, get_spark

log = logging.getLogger("jobs.baselines.job")


@dataclass(frozen=True)
class BaselinesArgs(JobArgs):
    started_by: str | None
    training_id: str | None = None


def parse_args(argv: list[str] | None = None) -> BaselinesArgs:
    parser = job_parser(__doc__)
    parser.add_argument("--started-by", default=None, help="what started the run: an MLflow tag")
    parser.add_argument("--training-id", type=lambda text: text or None, default=None,
                        help="the training these baselines belong to (<pipeline>_train's run): an MLflow tag the "
                             "bar matches")
    add_overrides(parser, WINDOW_OVERRIDES)  # the window, as the train job's options of the same name
    return parse_job_args(parser, argv, BaselinesArgs)


def main(argv: list[str] | None = None) -> None:
    configure_logging()
    args = parse_args(argv)
    if not args.config.baselines:
        log.info("no baselines configured (baselines: in %s): nothing to train", args.config.source)
        return
    from jobs.selection.baseline_training import train_baselines

    spark = get_spark(f"baselines-{args.run_date}")
    train_baselines(spark, args.lake, args.config, args.run_date, args.started_by, args.training_id)


if __name__ == "__main__":
    run_job(main)

"""Score a day's features with a registered model and write the predictions to the lake.

``spark-submit jobs/scoring/job.py --help`` lists its options.

Resolves the model version once, on the driver (the version the ``champion`` alias of
``train.model_name`` points at, unless ``--model-version`` names one) and checks its files there: a
version whose artifacts are missing or unreadable stops the job before any Spark work as a data error
naming it and the command that moves the alias (:mod:`jobs.registry`). Then scores ``features/date=<run-date>``
with ``predict_batch_udf``: each Python worker loads the model once (on a GPU with ``score.use_gpu``)
and calls it on batches of ``score.batch_size`` rows (``score.gpu_batch_size`` on a GPU), the inputs
passed as plain columns, encoded by Spark when the model carries its preprocessor (a model logged
by :func:`jobs.model.tabular.log_pyfunc`), raw for any other pyfunc. Predictions go to
``predictions/date=<run-date>/``, replacing only that day's partition; every row carries the model
name, version and run id, the run date and the scoring time. Then measures the day's drift
against the model's training window (:mod:`jobs.scoring.drift`) into ``reports/drift/date=<run-date>/``,
and scores the day in shadow with the challengers (:mod:`jobs.scoring.shadow`) into ``shadow/``.
With ``--days N`` the job does that for each of the N days ending with the run date, in one pass:
the model resolved and loaded once, the Spark jobs grouped by day (a backfill, or the replay's days
that one version serves: :mod:`orchestration.replay`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs.config import WindowArgs, job_parser, parse_bool, parse_job_args
from jobs.features.lineage import check_fresh
from jobs.lake.files import MissingPartitionError, path_exists, read_days
from jobs.lake.integrity import check_partitions, check_unique_keys
from jobs.lake.layout import DRIFT_PLOT, DRIFT_REPORT, PARTITION, partition_value
from jobs.lake.storage import delete_file, write_bytes, write_text
from jobs.monitoring.outcomes import features_days
from jobs.runner import run_job
from jobs.runtime.gpu import require_cuda
from jobs.runtime.session import configure_logging, get_spark, local_mode
from jobs.scoring.predictor import model_preprocessor, resolve_model, served_predictions
from jobs.scoring.shadow import score_shadow
from jobs.timings import phase, preload
from jobs.validation.partitions import zone_writer

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.config import DriftSpec, PipelineConfig
    from jobs.lake.layout import Lake
    from jobs.tracking import ModelRef

log = logging.getLogger("jobs.scoring.job")


@dataclass(frozen=True)
class ScoreArgs(WindowArgs):
    """The days ending with the run date (``--days``, one by default), each scored as its own day."""

    model_version: str | None  # a registered version; None: the champion
    use_gpu: bool | None  # None: score.use_gpu


def refuse_failed_day(lake: Lake, feed: str, day: dt.date) -> None:
    """Refuse a day whose feed failed validation since its features were built: they come from raw
    data that no longer passes (a re-delivered day), so nothing is served from them."""
    from jobs.validation.partitions import FailedValidationError, check_not_failed

    try:
        check_not_failed(lake, feed, [day])
    except FailedValidationError as err:
        raise FailedValidationError(
            f"not scoring {day}: its features were built before the day's raw data failed validation. {err}; "
            "then the ingest (validate and features) of the day, and score it again") from err


def main(argv: list[str] | None = None) -> None:
    configure_logging()
    parser = job_parser(__doc__, window=True)
    parser.add_argument("--model-version", default=None, help="a registered version (default: the champion)")
    parser.add_argument("--use-gpu", type=parse_bool, default=None, help="true/false (default: score.use_gpu)")
    args = parse_job_args(parser, argv, ScoreArgs)
    if args.nothing_open(log, "score"):
        return
    preload("mlflow.pyfunc")  # the model lookup and load need it, after the session starts
    spark = get_spark(f"score-{args.run_date}", connect=True)
    lake, config = args.lake, args.config
    use_gpu = config.score.use_gpu if args.use_gpu is None else args.use_gpu
    if use_gpu and local_mode(spark):  # the Python workers run here
        require_cuda("GPU scoring (--use-gpu true / score.use_gpu)",
                     "score on the CPU with --use-gpu false, or run the job where the executors have GPUs")
    for day in args.window:  # every day's features first: a backfill stops before writing anything
        source = lake.partition(lake.features, day)
        if not path_exists(spark, source):
            raise MissingPartitionError(f"no features for {day}: expected {source}; run the features job first")
        refuse_failed_day(lake, config.validation.feed, day)
    check_partitions(lake.partition(lake.features, day) for day in args.window)  # before the model loads
    check_fresh(lake, args.window)  # features whose history changed since they were built are not served
    with phase("model load"):  # on the driver: the registry lookup and the preprocessor
        model, load_uri = resolve_model(config.train.model_name, args.model_version)
        preprocessor = model_preprocessor(load_uri)
    batch_size = config.score.gpu_batch_size if use_gpu else config.score.batch_size
    if use_gpu:  # one Arrow batch per model call, not Arrow's default of 10,000 rows
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(batch_size))
    days = args.window
    log.info("scoring %s with %s version %s (run %s) on %s, %s, in batches of %d",
             days[0] if len(days) == 1 else f"{len(days)} days, {days[0]}..{days[-1]},", model.name,
             model.version, model.run_id, "GPUs" if use_gpu else "the CPU",
             "inputs encoded by Spark" if preprocessor else "raw inputs to the pyfunc", batch_size)
    score_days(spark, lake, config, days, model, load_uri, preprocessor, batch_size, use_gpu)


def score_days(spark: SparkSession, lake: Lake, config: PipelineConfig, days: list[dt.date], model: ModelRef,
               load_uri: str, preprocessor: dict[str, Any] | None, batch_size: int,
               use_gpu: bool) -> list[dict[str, Any]]:
    """Score the days' features in one pass, write their predictions (each day's partition replaced,
    no other), then each day's drift report, shadow predictions and
    ``reports/scoring/date=D/summary.json``; returns the summaries, oldest day first.

    A day is what it would be scored alone: the Spark jobs (the scoring, the counts, the drift's
    bins) are grouped by day, not run once per day."""
    features = read_days(spark, lake.features, days)  # each partition checked: a damaged or doubled file
    # one row per entity and day: a repeated one would be served (and judged) twice
    check_unique_keys(features, config.features.id_columns, "the features to score", lake.features,
                      keys_from="features.id_columns")
    landed = features_days(spark, lake)  # listed once: for each model's shift
    with contextlib.ExitStack() as scoring:
        # the phase: the pass that scores the days with their reference days and solves the shifts
        # (jobs.scoring.shift); the write below reads its kept rows
        with phase("recent shift"):
            predictions, shifts = scoring.enter_context(served_predictions(
                spark, lake, config, features, days, model, load_uri, preprocessor, batch_size, use_gpu, landed))
        # one writer of the days' predictions; staging a killed score job left is removed first
        with zone_writer(spark, lake, "predictions", lake.predictions, days, f"score-{days[-1]}"):
            predictions.write.mode("overwrite").partitionBy(PARTITION).parquet(lake.predictions)

    targets = [lake.partition(lake.predictions, day) for day in days]
    written = spark.read.option("basePath", lake.predictions).parquet(*targets)
    stats = {partition_value(row[PARTITION]): row for row in
             written.groupBy(PARTITION).agg({"probability": "avg", "*": "count"}).collect()}
    summaries = []
    for day, target in zip(days, targets, strict=True):
        row = stats.get(day)
        summary = {
            "run_date": day.isoformat(),
            "model_name": model.name,
            "model_version": model.version,
            "model_run_id": model.run_id,
            "rows": int(row["count(1)"]) if row else 0,
            "mean_probability": float((row["avg(probability)"] if row else None) or 0.0),
            "path": target,
        }
        if day in shifts:
            summary["recent_shift"] = shifts[day]
            log.info("%s: logit shift %+.4f from %s", day, shifts[day]["logit_shift"],
                     shifts[day].get("reason") or f"{shifts[day]['rows']} landed rows of {len(shifts[day]['days'])} "
                     f"days, realized {shifts[day]['realized_rate']:.3f} against {shifts[day]['predicted_rate']:.3f}")
        log.info("wrote %d predictions to %s (mean probability %.3f)", summary["rows"], summary["path"],
                 summary["mean_probability"])
        summaries.append(summary)
    with phase("drift"):
        drifts = report_drift(spark, lake, days, model, features, written, config.score.drift)
    with phase("shadow"):  # the challengers, after the served predictions are written (jobs.scoring.shadow)
        shadows = score_shadow(spark, lake, config, features, days, model, batch_size, use_gpu, landed)
    for summary, day in zip(summaries, days, strict=True):
        summary["drift"], summary["shadow"] = drifts.get(day), shadows.get(day, [])
        write_text(lake.report("scoring", day), json.dumps(summary, indent=2))
    return summaries


def earlier_reports(lake: Lake, day: dt.date, count: int) -> list[tuple[str, dict[str, Any]]]:
    """(day, drift report) of the ``count`` newest days before ``day`` that have one, newest first."""
    from jobs.lake.layout import partition_day
    from jobs.lake.storage import entries, read_json

    before = sorted((found for name, folder in entries(lake.reports("drift"))
                     if folder and (found := partition_day(name)) is not None and found < day), reverse=True)
    reports = [(other.isoformat(), read_json(lake.report("drift", other, DRIFT_REPORT))) for other in before[:count]]
    return [(other, report) for other, report in reports if report is not None]


def report_drift(
    spark: SparkSession, lake: Lake, days: list[dt.date], model: ModelRef, features: DataFrame,
    predictions: DataFrame, spec: DriftSpec,
) -> dict[dt.date, dict[str, Any]]:
    """Measure each day's drift against the model's baseline (one Spark job for the days' inputs,
    one for their predictions); write ``reports/drift/date=D/`` (``drift.json``, and ``drift.png``
    unless ``spec.plot`` is off).
    Returns each day's headline (drifted, reasons); nothing without a baseline."""
    import io

    from jobs.scoring.drift import drift_figure, headline, load_baseline, measure_days, with_pooled

    baseline = load_baseline(model.run_id)
    if baseline is None:
        log.warning("no drift baseline with %s version %s (run %s): drift not measured", model.name,
                    model.version, model.run_id)
        return {}
    done = {}
    for day, measured in sorted(measure_days(baseline, features, predictions, spec, days).items()):
        report = {"run_date": day.isoformat(), "model_name": model.name, "model_version": model.version,
                  "model_run_id": model.run_id, **measured}
        if report["status"] == "too_few_rows" and spec.pool_days > 1:  # the days before: written first
            report = with_pooled(baseline, report, earlier_reports(lake, day, spec.pool_days - 1), spec)
        path = lake.report("drift", day, DRIFT_REPORT)
        write_text(path, json.dumps(report, indent=2))
        if spec.plot:
            image = io.BytesIO()
            drift_figure(report).savefig(image, format="png")
            write_bytes(lake.report("drift", day, DRIFT_PLOT), image.getvalue())
        else:  # no picture of an earlier scoring left beside this one's report
            delete_file(lake.report("drift", day, DRIFT_PLOT))
        line = headline(report)
        log.info("drift of %s against the training window: %s (report: %s)", day, line, path)
        done[day] = {"drifted": report["drifted"], "status": report["status"], "reasons": report["reasons"],
                     "headline": line, "report": path}
    return done


if __name__ == "__main__":
    run_job(main)


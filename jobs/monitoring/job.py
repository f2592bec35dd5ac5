"""Judge scored days on their outcomes: the monitoring zone and one MLflow monitoring run per model version.

``spark-submit jobs/monitoring/job.py --help`` lists its options.

With ``monitoring.label_delay_days = L``, the outcomes of day D land with day D + L's ingest
(:func:`jobs.monitoring.outcomes.outcomes_in`). A run for run date D writes two days (one when L is 0;
with ``--days N``, those of each of the N days ending with D, oldest first):

- day D - L, whose outcomes have just landed: every model version that scored it, its predictions
  joined with the outcomes (:mod:`jobs.monitoring.outcomes`), the realized metrics with bootstrap
  95% intervals, by evaluation segment too, and the estimate made before the outcomes with its
  error (:mod:`jobs.monitoring.quality`); skipped, with a warning, when D - L was never scored;
- day D itself, just scored: with L > 0 its outcomes are not in yet (status ``awaiting_outcomes``,
  the estimate only).

Each day goes to ``monitoring/date=<day>/monitoring.json`` (replaced whole and atomically: a re-run
writes the same numbers, the bootstrap is seeded; the entry of a champion whose day a new one
re-scored stays, ``role: replaced``), and each version's numbers to its MLflow
monitoring run (experiment ``<train.experiment>-monitoring``, tag ``monitoring_of=<name>/<version>``)
at step = the day as days since 1970-01-01, so MLflow's charts show a champion's life. A day
without any outcome (every flight cancelled) says ``no_outcomes`` with no metrics; prediction rows
without an outcome are counted, never dropped. A run date that was never scored is a data error
that says which scoring run to trigger. The monitor is the monitoring zone's only writer.

Challengers scored in shadow (``shadow/version=V/``, :mod:`jobs.scoring.shadow`) are judged the
same way (``role: challenger``) and compared with the champion on the rows both scored: the decay
metric's paired bootstrap difference (``comparison``), per day and pooled over the pair's last
``monitoring.live_days`` compared days (:func:`jobs.monitoring.challengers.live_evidence`).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import zlib
from typing import TYPE_CHECKING, Any

from jobs.config import FeedCalendar, PipelineConfig, WindowArgs, dag_id, job_parser, parse_job_args, pipeline_name
from jobs.errors import DataError
from jobs.lake.files import path_exists
from jobs.lake.storage import read_json, write_text
from jobs.monitoring.outcomes import MATCHED, MODEL_PROBABILITY, OUTCOME, PROBABILITY, PredictionSource
from jobs.runner import run_job
from jobs.runtime.session import configure_logging, get_spark
from jobs.timings import phase, preload

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("jobs.monitoring.job")

MONITORING_OF = "monitoring_of"  # the tag that finds a model version's monitoring run
EXPERIMENT_SUFFIX = "-monitoring"  # the monitoring experiment is the training experiment's name + this
HOLDOUT_PREFIX = "holdout_"  # a training run's holdout metrics (jobs.training.loop, jobs.selection.baseline_training)
EPOCH = dt.date(1970, 1, 1)


class NeverScoredError(DataError, LookupError):
    """The day to monitor has no predictions: it must be scored first."""


def monitored_days(run_date: dt.date, label_delay_days: int, calendar: FeedCalendar | None = None) -> list[dt.date]:
    """The days a run for ``run_date`` writes: the day whose outcomes just landed (``label_delay_days``
    open days of ``calendar`` before; default: every day open), then the run date."""
    landed = (calendar or FeedCalendar()).shifted(run_date, -label_delay_days)
    return list(dict.fromkeys([landed, run_date]))


def day_step(day: dt.date) -> int:
    """A day as MLflow's step: days since 1970-01-01."""
    return (day - EPOCH).days


def _seed(base: int, *parts: Any) -> list[int]:
    """A resampling seed for one day, version and segment: stable across runs and processes."""
    return [base, zlib.crc32("/".join(map(str, parts)).encode())]


def _finite(values: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in values.items() if isinstance(v, int | float) and math.isfinite(v)}


def model_entry(rows: pd.DataFrame, *, role: str, arrived: bool, holdout: dict[str, float], config: PipelineConfig,
                day: dt.date) -> dict[str, Any]:
    """One model version's entry of a day's record (``monitoring.json``) from its joined rows
    (:func:`jobs.monitoring.outcomes.joined_rows`): counts, realized metrics and segments when
    the outcomes have ``arrived``, and the estimate."""
    from jobs.monitoring.quality import estimate, estimate_error, level_check, metrics_with_intervals
    from jobs.selection.evaluation import segment_order, segment_values

    spec, evaluation = config.monitoring, config.evaluation
    name, version = str(rows["model_name"].iloc[0]), str(rows["model_version"].iloc[0])
    # Spark returns a join's rows in no fixed order; the seeded bootstrap needs one.
    ids = list(dict.fromkeys(config.features.id_columns))
    rows = rows.sort_values([*ids, PROBABILITY, OUTCOME], na_position="last", kind="mergesort").reset_index(drop=True)
    has_outcome = rows[OUTCOME].notna() & arrived
    judged = rows[has_outcome]
    estimated = estimate(rows[PROBABILITY])
    entry: dict[str, Any] = {
        "model_name": name, "model_version": version, "role": role, "status": "awaiting_outcomes",
        "rows": int(len(rows)), "rows_with_outcome": int(has_outcome.sum()),
        "predictions_without_outcome": int(len(rows) - has_outcome.sum()),
        # of those: no features row of the day matched the prediction's ids (the rest: a null label)
        "predictions_unmatched": int((~rows[MATCHED].astype(bool)).sum()) if arrived else 0,
        "holdout": holdout, "metrics": {}, "segments": [], "estimate": {**estimated, "error": None},
    }
    if not arrived:
        return entry
    if judged.empty:
        entry["status"] = "no_outcomes"
        return entry
    entry["status"] = "ok"
    bins = evaluation.calibration_bins
    entry["metrics"] = metrics_with_intervals(judged[OUTCOME], judged[PROBABILITY], spec.bootstrap,
                                              _seed(spec.seed, day, name, version), bins)
    entry["estimate"]["error"] = estimate_error(entry["metrics"], estimated)
    own = judged[MODEL_PROBABILITY] if MODEL_PROBABILITY in judged.columns else None
    entry["level"] = level_check(judged[OUTCOME], judged[PROBABILITY], own, spec.max_rate_gap)
    matched = rows[rows[MATCHED].astype(bool)]
    for column in evaluation.segments:
        if column not in matched.columns:
            continue
        values = segment_values(matched[column], evaluation.min_segment_rows)
        for value in sorted(values.unique(), key=segment_order):
            part = matched[(values == value).to_numpy()]
            scored = part[part[OUTCOME].notna()]
            entry["segments"].append({
                "segment": column, "value": value, "rows": int(len(part)), "rows_with_outcome": int(len(scored)),
                "metrics": metrics_with_intervals(scored[OUTCOME], scored[PROBABILITY], spec.bootstrap,
                                                  _seed(spec.seed, day, name, version, column, value), bins),
            })
    return entry


def day_record(day: dt.date, label_delay_days: int, arrived: bool, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """A day's ``monitoring.json``: the contract of docs/monitoring.md."""
    return {"day": day.isoformat(), "label_delay_days": label_delay_days, "outcomes": "in" if arrived else "awaiting",
            "models": entries}


def holdout_metrics(run_id: str) -> dict[str, float]:
    """The holdout metrics the version's training run logged (``holdout_roc_auc`` ...), without
    the prefix; empty when the run is gone."""
    from mlflow.exceptions import MlflowException

    from jobs.config import REALIZED_METRICS as METRICS
    from jobs.tracking import client

    if not run_id:
        return {}
    try:
        logged = client().get_run(run_id).data.metrics
    except MlflowException:
        log.warning("the training run %s is gone: no holdout metrics to compare with", run_id)
        return {}
    return _finite({m: logged.get(f"{HOLDOUT_PREFIX}{m}") for m in METRICS})


def monitoring_run(experiment_id: str, name: str, version: str, model_run_id: str) -> str:
    """The version's monitoring run (found by its ``monitoring_of`` tag, else created)."""
    from jobs.tracking import client

    mlflow_client = client()
    tag = f"{name}/{version}"

    def oldest() -> str | None:
        found = mlflow_client.search_runs([experiment_id], filter_string=f"tags.{MONITORING_OF} = '{tag}'",
                                          order_by=["attributes.start_time ASC"], max_results=10)
        return min(found, key=lambda r: (r.info.start_time, r.info.run_id)).info.run_id if found else None

    if (run_id := oldest()) is not None:
        return run_id
    run = mlflow_client.create_run(experiment_id, run_name=f"monitoring {tag}", tags={
        MONITORING_OF: tag, "model_name": name, "model_version": version, "model_run_id": model_run_id})
    winner = oldest()
    if winner is not None and winner != run.info.run_id:  # a concurrent day's task created one first
        mlflow_client.delete_run(run.info.run_id)
        return winner
    return run.info.run_id


def comparison(challenger: pd.DataFrame, champion: pd.DataFrame, config: PipelineConfig, day: dt.date,
               ) -> dict[str, Any] | None:
    """A challenger's shadow rows against the champion's served rows of the same day: the decay
    metric's paired bootstrap difference (challenger minus champion, 95% interval) on the rows
    both scored that have an outcome; None when there are none or the metric is undefined."""
    from jobs.monitoring.quality import paired_difference

    ids = list(dict.fromkeys(config.features.id_columns))
    mine = challenger[challenger[OUTCOME].notna()][[*ids, PROBABILITY, OUTCOME]].drop_duplicates(ids)
    theirs = champion[[*ids, PROBABILITY]].drop_duplicates(ids)
    both = mine.merge(theirs, on=ids, suffixes=("", "_champion"))  # pandas matches null ids to null ids
    both = both.sort_values([*ids, PROBABILITY], na_position="last", kind="mergesort").reset_index(drop=True)
    metric, spec = config.monitoring.decay.metric, config.monitoring
    name, version = str(challenger["model_name"].iloc[0]), str(challenger["model_version"].iloc[0])
    difference = paired_difference(both[OUTCOME], both[PROBABILITY], both[f"{PROBABILITY}_champion"], metric,
                                   spec.bootstrap, _seed(spec.seed, day, name, version, "paired"),
                                   config.evaluation.calibration_bins)
    if difference is None:
        return None
    return {"metric": metric, "champion_version": str(champion["model_version"].iloc[0]), "difference": difference,
            "rows": int(len(both))}


REPLACED = "replaced"  # an entry of a champion whose predictions of the day a new champion re-scored


def with_replaced(record: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    """``record`` with the served entries of the day's previous record (``old``) whose version no
    longer scores the day kept as ``role: replaced``: a promotion re-scores the day with the new
    champion, and the one it replaced keeps its judged day (the page and its history show it)."""
    if not old:
        return record
    current = {(e.get("model_name"), str(e.get("model_version"))) for e in record["models"]}
    kept = [{**entry, "role": REPLACED} for entry in old.get("models", [])
            if entry.get("role") in ("champion", REPLACED)
            and (entry.get("model_name"), str(entry.get("model_version"))) not in current]
    return {**record, "models": [*record["models"], *kept]} if kept else record


def with_pooled(record: dict[str, Any], history: list[dict[str, Any]], live_days: int) -> dict[str, Any]:
    """``record`` with each challenger's comparison pooled over its last ``live_days`` compared
    days (``history``: the earlier days' records, and this one): ``comparison.pooled``."""
    from jobs.monitoring.challengers import CHALLENGER, live_evidence

    earlier = [r for r in history if r["day"] < record["day"]]
    for entry in record["models"]:
        found = entry.get("comparison")
        if entry["role"] != CHALLENGER or not found:
            continue
        evidence = live_evidence([*earlier, record], entry["model_name"], found["champion_version"],
                                 entry["model_version"], live_days)
        found["pooled"] = {k: evidence[k] for k in ("days", "difference", "rows", "beats")}
    return record


def run_metrics(entry: dict[str, Any]) -> dict[str, float]:
    """An entry's numbers as MLflow metrics: each metric with ``_low``/``_high``, the counts, the
    holdout (a flat line beside the realized one), ``estimated_*`` and ``estimate_error_*``; a
    challenger's ``vs_champion_<metric>`` difference with its interval."""
    found: dict[str, float] = {k: float(entry[k]) for k in ("rows", "rows_with_outcome", "predictions_without_outcome")}
    if compared := entry.get("comparison"):
        key, difference = f"vs_champion_{compared['metric']}", compared["difference"]
        found.update({key: difference["value"], f"{key}_low": difference["low"], f"{key}_high": difference["high"]})
    for name, value in entry["metrics"].items():
        found.update({name: value["value"], f"{name}_low": value["low"], f"{name}_high": value["high"]})
    found.update({f"{HOLDOUT_PREFIX}{k}": v for k, v in entry["holdout"].items()})
    estimated = entry["estimate"]
    found.update({f"estimated_{k}": v for k, v in estimated.items() if k != "error"})
    found.update({f"estimate_error_{k}": v for k, v in (estimated["error"] or {}).items()})
    return found


def log_entry(experiment_id: str, entry: dict[str, Any], day: dt.date, model_run_id: str,
              runs: dict[tuple[str, str], str] | None = None) -> str:
    """Log an entry's numbers to its version's monitoring run at step = the day; the run id.
    ``runs`` ((name, version) -> run id) saves looking the run up again for the next day."""
    from mlflow.entities import Metric

    from jobs.tracking import client

    runs = {} if runs is None else runs
    key = (entry["model_name"], entry["model_version"])
    if key not in runs:
        runs[key] = monitoring_run(experiment_id, entry["model_name"], entry["model_version"], model_run_id)
    run_id = runs[key]
    timestamp = int(dt.datetime.combine(day, dt.time(), dt.UTC).timestamp() * 1000)  # the day, not the run
    metrics = [Metric(k, v, timestamp, day_step(day)) for k, v in run_metrics(entry).items()]
    mlflow_client = client()
    mlflow_client.log_batch(run_id, metrics=metrics)
    mlflow_client.set_terminated(run_id, status="FINISHED")
    return run_id


def monitor_day(config: PipelineConfig, day: dt.date, arrived: bool,
                sources: list[tuple[PredictionSource, pd.DataFrame]], experiment_id: str,
                runs: dict[tuple[str, str], str] | None = None) -> dict[str, Any] | None:
    """The day's record from each source's joined rows of the day
    (:func:`~jobs.monitoring.outcomes.joined_rows`; sources without rows that day left out), every
    version that scored it judged and logged (``runs``: the monitoring runs found so far, filled
    in); None when no source scored the day."""
    entries = []
    holdouts: dict[str, dict[str, float]] = {}
    served: dict[str, pd.DataFrame] = {}  # the champion's rows of the day, by model name
    for source, rows in sources:
        for (name, version, run_id), part in rows.groupby(["model_name", "model_version", "model_run_id"],
                                                          dropna=False, sort=True):
            run_id = "" if run_id is None or (isinstance(run_id, float) and math.isnan(run_id)) else str(run_id)
            if run_id not in holdouts:
                holdouts[run_id] = holdout_metrics(run_id)
            if source.role == "champion":
                served[str(name)] = part
            elif str(name) in served and str(served[str(name)]["model_version"].iloc[0]) == str(version):
                continue  # a challenger promoted since: its served rows are judged already
            entry = model_entry(part, role=source.role, arrived=arrived, holdout=holdouts[run_id], config=config,
                                day=day)
            if source.role != "champion" and arrived and str(name) in served:
                if (compared := comparison(part, served[str(name)], config, day)) is not None:
                    entry["comparison"] = compared
            entry["mlflow_run_id"] = log_entry(experiment_id, entry, day, run_id, runs)
            entry["mlflow_experiment_id"] = experiment_id
            entries.append(entry)
            log.info("%s: %s version %s (%s): %s, %d rows, %d with an outcome%s", day, name, version, source.role,
                     entry["status"], entry["rows"], entry["rows_with_outcome"],
                     f", ROC AUC {entry['metrics']['roc_auc']['value']:.3f}" if "roc_auc" in entry["metrics"] else "")
            if (entry.get("level") or {}).get("flagged"):
                log.warning("%s%s: %s version %s (%s): MISCALIBRATED: %s. Nothing retrains on the level alone: "
                            "if it persists, retrain (trigger %s) or read docs/monitoring.md (\"The served level\") "
                            "for score.recent_shift", f"pipeline {pipeline_name()}, " if pipeline_name() else "", day,
                            name, version, source.role, entry["level"]["reason"], dag_id("train"))
    if not entries:
        return None
    return day_record(day, config.monitoring.label_delay_days, arrived, entries)


def never_scored(day: dt.date, path: str) -> NeverScoredError:
    conf = json.dumps({"run_date": day.isoformat()})
    return NeverScoredError(
        f"day {day} was never scored: no predictions under {path}. Score it first: trigger {dag_id('score')} with "
        f"{conf} (airflow dags trigger {dag_id('score')} --conf '{conf}'), which monitors it after scoring"
    )


def main(argv: list[str] | None = None) -> None:
    configure_logging()
    args = parse_job_args(job_parser(__doc__, window=True), argv, WindowArgs)
    if args.nothing_open(log, "monitor"):
        return
    preload("mlflow")
    spark = get_spark(f"monitor-{args.run_date}", connect=True)
    lake, config = args.lake, args.config
    from jobs.monitoring.outcomes import features_days, joined_rows, outcomes_in, prediction_sources
    from jobs.tracking import ensure_experiment

    for run_date in args.window:  # every day scored first: a backfill stops before judging anything
        served = lake.partition(lake.predictions, run_date)
        if not path_exists(spark, served):
            raise never_scored(run_date, served)
    delay = config.monitoring.label_delay_days
    landed = features_days(spark, lake)
    experiment_id = ensure_experiment(f"{config.train.experiment}{EXPERIMENT_SUFFIX}")
    sources = prediction_sources(lake)
    from jobs.monitoring.challengers import HISTORY_FACTOR, monitoring_records

    # a closed day of the feed (feed_calendar) was never scored: nothing to judge, no warning
    calendar = config.feed_calendar
    judged = dict.fromkeys(day for run_date in args.window for day in monitored_days(run_date, delay, calendar))
    days = {day: outcomes_in(landed, day, delay, calendar) for day in judged if calendar.is_open(day)}
    with phase("monitor join"):  # one query for the window's days, not one a day
        joined = {source.zone: joined_rows(spark, lake, source, scored, config.features,
                                                  config.evaluation.segments)
                  for source in sources
                  if (scored := {d: a for d, a in days.items() if path_exists(spark, lake.partition(source.zone, d))})}
    runs: dict[tuple[str, str], str] = {}
    for day, arrived in days.items():
        of_day = [(source, joined[source.zone][day]) for source in sources if day in joined.get(source.zone, {})]
        with phase(f"monitor {day}"):
            record = monitor_day(config, day, arrived, of_day, experiment_id, runs)
        if record is None:
            log.warning("day %s was never scored: nothing to judge on its outcomes (%s)", day,
                        never_scored(day, lake.partition(lake.predictions, day)))
            continue
        live_days = config.monitoring.live_days
        if any("comparison" in entry for entry in record["models"]):
            history = monitoring_records(lake, day - dt.timedelta(days=1), HISTORY_FACTOR * live_days)
            record = with_pooled(record, history, live_days)
        path = lake.monitoring_report(day)
        record = with_replaced(record, read_json(path))
        write_text(path, json.dumps(record, indent=2, allow_nan=False))
        log.info("wrote %s (outcomes %s)", path, record["outcomes"])


if __name__ == "__main__":
    run_job(main)

"""The Model health page's data: the lake's monitoring zone and reports read into one dict.

Pure reading, no Airflow and no MLflow registry: the monitoring zone (``monitoring.json`` per day),
the decay verdicts (``reports/decay``), the drift reports (``reports/drift``) and the training
summaries (``reports/training``). A model version deleted from the registry keeps its history here,
because the lake keeps its days.

Each zone is listed once per call (one listing on an object store) and a file is parsed again only
when its modification time or size changed (:class:`DocumentCache`), so a year of days costs a
listing and the new days.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

from jobs.lake.layout import DECAY_REPORT, DRIFT_REPORT, MONITORING_REPORT, SUMMARY, Lake, partition_day
from jobs.lake.storage import files_under, read_bytes

READERS = 8  # files read at once: an object store answers each read slowly, a local disk does not care


class DocumentCache:
    """Parsed JSON documents by path, kept while the file's modification time and size stay the same."""

    def __init__(self) -> None:
        self._documents: dict[str, tuple[tuple[int, int], Any]] = {}
        self._lock = threading.Lock()

    def read(self, found: list[tuple[str, tuple[int, int]]]) -> dict[str, Any]:
        """The document of each ``(path, stamp)``: cached ones as they are, the others read (in
        parallel) and kept. A file that vanished or does not parse maps to None."""
        with self._lock:
            known = {path: self._documents[path][1] for path, stamp in found
                     if path in self._documents and self._documents[path][0] == stamp}
        missing = [(path, stamp) for path, stamp in found if path not in known]
        if missing:
            with ThreadPoolExecutor(min(READERS, len(missing))) as pool:
                parsed = list(pool.map(lambda item: _parse(item[0]), missing))
            with self._lock:
                for (path, stamp), document in zip(missing, parsed, strict=True):
                    self._documents[path] = (stamp, document)
                    known[path] = document
        return known


def _parse(path: str) -> Any:
    data = read_bytes(path)
    if data is None:
        return None
    try:  # NaN or Infinity would break the JSON API: they read as "no value"
        return json.loads(data, parse_constant=lambda _: None)
    except ValueError:
        return None


CACHE = DocumentCache()


def dated_files(folder: str, name: str) -> list[tuple[dt.date, str, tuple[int, int]]]:
    """(day, path, stamp) of every ``<folder>/<day's partition>/<name>``, oldest first."""
    found = []
    for relative, mtime, size in files_under(folder):
        partition, _, file = relative.partition("/")
        day = partition_day(partition)
        if day is not None and file == name:
            found.append((day, f"{folder}/{relative}", (mtime, size)))
    return sorted(found)


def _documents(files: list[tuple[dt.date, str, tuple[int, int]]], first: dt.date, last: dt.date,
               cache: DocumentCache, problems: list[str]) -> list[tuple[dt.date, dict[str, Any]]]:
    wanted = [(day, path, stamp) for day, path, stamp in files if first <= day <= last]
    parsed = cache.read([(path, stamp) for _, path, stamp in wanted])
    documents = []
    for day, path, _ in wanted:
        document = parsed.get(path)
        if isinstance(document, dict):
            documents.append((day, document))
        else:
            problems.append(f"{path}: not readable JSON (skipped; the job that writes it rewrites it when re-run)")
    return documents


def mlflow_run_url(experiment_id: Any, run_id: Any) -> str:
    """The run's page in the MLflow UI (``MLFLOW_UI_URL``), or "" without a run or a UI address."""
    from jobs.tracking import run_url

    return run_url(str(experiment_id), str(run_id)) if experiment_id and run_id else ""


def airflow_run_path(dag_id: str, run_id: str | None) -> str:
    """The Airflow UI's page of a DAG run, relative to the UI's base (the DAG's runs without a run id,
    the DAGs without a DAG)."""
    if not dag_id:
        return "dags"
    return f"dags/{dag_id}/runs/{quote(run_id, safe='')}" if run_id else f"dags/{dag_id}/runs"


def model_health(lake: Lake, *, metric: str = "roc_auc", window_days: int = 7, model: str | None = None,
                 days: int | None = None, airflow_runs: dict[str, dict[str, str]] | None = None,
                 train_dag: str = "", cache: DocumentCache = CACHE) -> dict[str, Any]:
    """Everything the Model health page shows, per model: its versions (champion, challengers, and
    every version that scored a day in range, deleted ones included) with their daily realized
    metrics, intervals, estimates and holdout values; the decay verdicts; the drift PSI per
    feature and day; the retrainings with what started them and their links.

    ``days``: only the last N days up to the latest monitored day (default: every day); ``model``:
    one model's name; ``metric``: the headline metric (the decay rule's); ``window_days``: the
    days the "realized" summary of a version pools (the decay window); ``airflow_runs``: the
    training runs Airflow knows by the last day of their window (``airflow_run_id``, ``trigger``,
    ``started_by``), for the summaries that do not say them; ``train_dag``: the pipeline's train
    DAG, which the retrainings link to.
    """
    started = time.perf_counter()
    problems: list[str] = []
    runs = {"airflow_runs": airflow_runs or {}, "train_dag": train_dag}
    monitored = dated_files(lake.monitoring, MONITORING_REPORT)
    reports = {kind: dated_files(lake.reports(kind), name)
               for kind, name in (("decay", DECAY_REPORT), ("drift", DRIFT_REPORT), ("training", SUMMARY))}
    every_day = [day for day, _, _ in monitored] + [day for files in reports.values() for day, _, _ in files]
    last = max(every_day, default=dt.date.min)
    # a lake without any report yet (a pipeline that has not run) shows nothing, not an error
    first = last - dt.timedelta(days=days - 1) if days and every_day else dt.date.min
    records = _documents(monitored, first, last, cache, problems)
    decay = _documents(reports["decay"], first, last, cache, problems)
    drift = _documents(reports["drift"], first, last, cache, problems)
    training = _documents(reports["training"], first, last, cache, problems)

    names = sorted({str(e.get("model_name")) for _, r in records for e in r.get("models") or []}
                   | {str(d.get("model_name")) for _, d in decay + drift + training if d.get("model_name")})
    if model is not None:
        names = [name for name in names if name == model]
    models = [_model(name, metric, window_days, records, decay, drift, training, runs) for name in names]
    shown = [day for day, _ in records]
    return {
        "metric": metric,
        "window_days": window_days,
        "range": {"first": shown[0].isoformat() if shown else None, "last": shown[-1].isoformat() if shown else None,
                  "monitored_days": len(shown)},
        "models": models,
        "problems": problems,
        "read_ms": round((time.perf_counter() - started) * 1000, 1),
    }


def _version(entry: dict[str, Any], name: str) -> dict[str, Any]:
    return {"model_name": name, "model_version": str(entry.get("model_version")), "roles": Counter(),
            "first_day": None, "last_day": None, "holdout": {}, "days": [], "comparison": None}


def _model(name: str, metric: str, window_days: int, records: list[tuple[dt.date, dict[str, Any]]],
           decay: list[tuple[dt.date, dict[str, Any]]], drift: list[tuple[dt.date, dict[str, Any]]],
           training: list[tuple[dt.date, dict[str, Any]]], runs: dict[str, Any]) -> dict[str, Any]:
    from jobs.monitoring.decay import pooled, verdicts

    versions: dict[str, dict[str, Any]] = {}
    timeline = []
    for day, record in records:
        champion = None
        for entry in record.get("models") or []:
            if entry.get("model_name") != name:
                continue
            version = versions.setdefault(str(entry.get("model_version")), _version(entry, name))
            role = entry.get("role") or "champion"
            champion = version["model_version"] if role == "champion" else champion
            version["roles"][role] += 1
            version["first_day"] = version["first_day"] or day.isoformat()
            version["last_day"] = day.isoformat()
            version["holdout"] = entry.get("holdout") or version["holdout"]
            version["mlflow_run_id"] = entry.get("mlflow_run_id") or version.get("mlflow_run_id")
            version["mlflow_experiment_id"] = entry.get("mlflow_experiment_id") or version.get("mlflow_experiment_id")
            if role == "challenger" and entry.get("comparison"):  # the latest live comparison with the champion
                version["comparison"] = entry["comparison"]
            version["days"].append({
                "day": day.isoformat(), "role": role, "status": entry.get("status"),
                "rows": entry.get("rows"), "rows_with_outcome": entry.get("rows_with_outcome"),
                "predictions_without_outcome": entry.get("predictions_without_outcome"),
                "metrics": entry.get("metrics") or {}, "estimate": entry.get("estimate"),
                "level": entry.get("level"),
            })
        timeline.append({"day": day.isoformat(), "outcomes": record.get("outcomes"), "champion": champion})
    latest = next((t["day"] for t in reversed(timeline) if t["champion"]), None)
    champion = next((t["champion"] for t in reversed(timeline) if t["champion"]), None)
    challengers = sorted({v["model_version"] for v in versions.values() if v["model_version"] != champion
                          and any(d["day"] == latest and d["role"] == "challenger" for d in v["days"])},
                         key=_version_order)
    for version in versions.values():
        ok = [d for d in version["days"] if d["status"] == "ok"]
        version["realized"] = pooled(ok[-window_days:], metric)
        version["level"] = next((d["level"] for d in reversed(ok) if d.get("level")), None)  # the latest day's
        version["roles"] = dict(version["roles"])
        version["is_champion"] = version["model_version"] == champion
        version["is_challenger"] = version["model_version"] in challengers
        version["mlflow_url"] = mlflow_run_url(version.get("mlflow_experiment_id"), version.get("mlflow_run_id"))
    ordered = sorted(versions.values(), key=lambda v: (not v["is_champion"], not v["is_challenger"],
                                                       _version_order(v["model_version"])))
    return {
        "model_name": name, "champion": champion, "challengers": challengers, "latest_day": latest,
        "versions": ordered, "timeline": timeline,
        "decay": [_decay(day, verdict) for day, report in decay for verdict in verdicts(report)
                  if verdict.get("model_name") in (name, None)],
        "miscalibrated": [{"day": d["day"], "model_version": v["model_version"], "role": d["role"], **d["level"]}
                          for v in ordered for d in v["days"] if (d.get("level") or {}).get("flagged")],
        "drift": _drift([(day, report) for day, report in drift if report.get("model_name") in (name, None)]),
        "retrainings": [_retraining(day, summary, runs["airflow_runs"].get(day.isoformat()) or {}, runs["train_dag"])
                        for day, summary in training if summary.get("model_name") in (name, None)],
    }


def _version_order(version: str) -> tuple[int, str]:
    """Newest first: the numeric versions the registry gives, descending."""
    return (-int(version), "") if version.isdigit() else (0, version)


def _decay(day: dt.date, report: dict[str, Any]) -> dict[str, Any]:
    keys = ("model_version", "decayed", "triggered", "status", "reasons", "metric_name", "holdout", "margin",
            "max_ece", "metric", "ece", "days")
    return {"day": day.isoformat(), **{key: report.get(key) for key in keys}}


def _drift(reports: list[tuple[dt.date, dict[str, Any]]]) -> dict[str, Any]:
    features: dict[str, bool] = {}
    days = []
    threshold = None
    for day, report in reports:
        found = report.get("features") or {}
        for feature, entry in found.items():
            features[feature] = features.get(feature, False) or bool(entry.get("monitored", True))
        threshold = (report.get("thresholds") or {}).get("psi", threshold)
        days.append({"day": day.isoformat(), "status": report.get("status"), "drifted": report.get("drifted"),
                     "model_version": report.get("model_version"), "reasons": report.get("reasons") or [],
                     "psi": {feature: entry.get("psi") for feature, entry in found.items()},
                     "prediction_psi": (report.get("prediction") or {}).get("psi")})
    # Monitored features first, then the rest; alphabetical within each.
    ordered = sorted(features, key=lambda f: (not features[f], f))
    return {"features": ordered, "monitored": features, "threshold": threshold, "days": days}


def _retraining(day: dt.date, summary: dict[str, Any], run: dict[str, str], train_dag: str) -> dict[str, Any]:
    gate = summary.get("gate") or {}
    airflow_run_id = summary.get("airflow_run_id") or run.get("airflow_run_id")
    return {
        "day": day.isoformat(), "model_version": str(summary.get("model_version")),
        "trigger": summary.get("trigger") or run.get("trigger") or "unknown",
        "started_by": summary.get("started_by") or run.get("started_by") or "",
        "gate_decision": gate.get("gate_decision"), "gate_reason": gate.get("gate_reason"),
        "mlflow_run_id": summary.get("run_id"), "mlflow_experiment_id": summary.get("experiment_id"),
        "mlflow_url": mlflow_run_url(summary.get("experiment_id"), summary.get("run_id")) or summary.get("run_url", ""),
        "airflow_run_id": airflow_run_id, "airflow_path": airflow_run_path(train_dag, airflow_run_id),
        "holdout": summary.get("metrics") or {},
    }

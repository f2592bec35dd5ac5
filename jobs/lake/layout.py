"""The lake's layout, in one place: zones, the partition column and folders, report and checkpoint
file names, and where the lake is (``LAKE_ROOT``).

Every job, the Airflow plugin, the benchmarks and the tests ask this module for a path or a name;
nothing else spells them. The lake is a local folder or any Hadoop/fsspec URI (``s3a://...``)::

    raw/<table>/date=YYYY-MM-DD/<table>.csv        the daily feed as it arrived (never modified)
    raw/<table>/<table>.csv                        a reference table
    validated/<table>/date=.../                    rows that passed validation, typed
    quarantine/<table>/date=.../                   rows that did not, as text, with the rules they broke
    features/date=.../                             one row per entity: model inputs + label
    predictions/date=.../                          the model's probability per row (the champion's: served)
    shadow/version=<V>/date=.../                   a challenger version's probabilities, scored in shadow
    monitoring/date=.../monitoring.json            a monitored day: each version's realized metrics
    reports/<kind>/date=.../<file>                 validation, training, scoring and drift reports
    reports/validation/failed/<table>/date=....json   the mark of a day whose validation failed
    locks/<table>/date=....lock                    the run writing a day's validated and quarantine partitions
    checkpoints/<kind>/date=.../<key>/             state a retried run resumes from
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT_ENV = "LAKE_ROOT"  # where the lake is; default: $PIPELINE_HOME/lake
PARTITION = "date"  # the partition column of every dated zone; a source column may not use the name
# Names of columns the validate job adds to a table's own start with this; a source column may not.
RESERVED_PREFIX = "_"

SUMMARY = "summary.json"  # a job's report of one run (validation, training, scoring)
VALIDATION_PAGE = "report.html"  # the validation report for a person
DRIFT_REPORT, DRIFT_PLOT = "drift.json", "drift.png"
MONITORING_REPORT = "monitoring.json"  # a monitored day: every version's realized metrics (jobs.monitoring)
DECAY_REPORT = "decay.json"  # the decay verdict of a monitored day (reports/decay/)
CHECKPOINT_RUN = "run.json"  # beside a training's checkpoints: the MLflow run they belong to


SHADOW_VERSION = "version"  # shadow/<SHADOW_VERSION>=<model version>/: one zone per challenger version


DEFAULT_HOME = Path.cwd() / ".pipeline"


def pipeline_home() -> Path:
    """Where the embedded defaults keep their state (lake, MLflow store, Airflow): ``$PIPELINE_HOME``."""
    return Path(os.environ.get("PIPELINE_HOME", DEFAULT_HOME))


def partition_name(day: dt.date) -> str:
    """The folder of a day's partition: ``date=YYYY-MM-DD``."""
    return f"{PARTITION}={day.isoformat()}"


def partition_day(name: str) -> dt.date | None:
    """The day of a partition folder's name, or None for any other name."""
    prefix = f"{PARTITION}="
    if not name.startswith(prefix):
        return None
    try:
        return dt.date.fromisoformat(name.removeprefix(prefix))
    except ValueError:
        return None


def partition_value(value: Any) -> dt.date:
    """A ``date`` column's value read from partition folders as a date: Spark infers the folders'
    type, a date or (where inference is off) a string."""
    return value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))


def shadow_version(name: str) -> str | None:
    """The model version of a shadow zone's folder name (``version=3``), or None for any other name."""
    prefix = f"{SHADOW_VERSION}="
    if not name.startswith(prefix):
        return None
    return name.removeprefix(prefix) or None


def checkpoint_file(epochs_done: int) -> str:
    """A training checkpoint's file name: it says which epoch the file holds."""
    return f"epoch-{epochs_done:04d}.pt"


def checkpoint_epochs(name: str) -> int | None:
    """The epochs a checkpoint file name says it holds, or None for any other file."""
    if not (name.startswith("epoch-") and name.endswith(".pt")):
        return None
    digits = name[len("epoch-"):-len(".pt")]
    return int(digits) if digits.isdigit() else None


# The command that writes a zone's partition of a day again, by the zone's folder names: what a
# damaged or doubled file's error tells the user to run (jobs.errors.damaged_parquet).
REBUILD = {
    "features": "spark-submit jobs/features/job.py --run-date {day} --days 1",
    "predictions": "spark-submit jobs/scoring/job.py --run-date {day}",
    "shadow": "spark-submit jobs/scoring/job.py --run-date {day} (the day's shadow scoring runs with it)",
    "validated": ("the day's ingest: spark-submit jobs/validation/job.py --run-date {day} --days 1, then "
                  "spark-submit jobs/features/job.py --run-date {day} --days 1"),
}
REBUILD["quarantine"] = REBUILD["validated"]


def partition_of(path: str) -> tuple[str, dt.date] | None:
    """(the partition folder, its day) holding the file or folder ``path`` (any lake path or URI),
    or None when no folder of the path is a day's partition."""
    parts = path.rstrip("/").split("/")
    for at in range(len(parts) - 1, -1, -1):
        if (day := partition_day(parts[at])) is not None:
            return "/".join(parts[: at + 1]), day
    return None


def rebuild_command(path: str) -> str | None:
    """The command that writes again the partition holding ``path`` (its zone's job for its day), or
    None for a path outside the dated zones."""
    found = partition_of(path)
    if found is None:
        return None
    folder, day = found
    parents = ["", "", *folder.split("/")[:-1]]
    # validated/<table>/ and quarantine/<table>/, shadow/version=V/; then features/ and predictions/
    nested = parents[-2] in ("validated", "quarantine") or (parents[-2] == "shadow" and shadow_version(parents[-1]))
    zone = parents[-2] if nested else parents[-1]
    return REBUILD[zone].format(day=day.isoformat()) if zone in REBUILD else None


@dataclass(frozen=True)
class Lake:
    """Every path in the lake derives from here (see the module docstring for the layout)."""

    root: str

    @classmethod
    def at(cls, root: str | None = None) -> Lake:
        """The lake at ``root``, else at ``$LAKE_ROOT``, else under ``$PIPELINE_HOME``; a local
        ``file://`` URI becomes a plain path."""
        where = root or os.environ.get(ROOT_ENV) or str(pipeline_home() / "lake")
        return cls(where.removeprefix("file://").rstrip("/"))

    def raw_table(self, table: str) -> str:
        return f"{self.root}/raw/{table}"

    def raw_partition(self, table: str, day: dt.date) -> str:
        return f"{self.raw_table(table)}/{partition_name(day)}"

    def raw_file(self, table: str, day: dt.date | None = None) -> str:
        folder = self.raw_partition(table, day) if day else self.raw_table(table)
        return f"{folder}/{table}.csv"

    def validated(self, table: str) -> str:
        return f"{self.root}/validated/{table}"

    def quarantine(self, table: str) -> str:
        return f"{self.root}/quarantine/{table}"

    @property
    def features(self) -> str:
        return f"{self.root}/features"

    @property
    def predictions(self) -> str:
        return f"{self.root}/predictions"

    @property
    def shadow(self) -> str:
        """The shadow zone: challengers' predictions, kept apart from the served ones."""
        return f"{self.root}/shadow"

    def shadow_predictions(self, version: str) -> str:
        """A challenger version's date-partitioned predictions: ``shadow/version=V`` (rows as in
        ``predictions/``; written by the score job's shadow step only)."""
        return f"{self.shadow}/{SHADOW_VERSION}={version}"

    @property
    def monitoring(self) -> str:
        return f"{self.root}/monitoring"

    def partition(self, zone_path: str, day: dt.date) -> str:
        return f"{zone_path}/{partition_name(day)}"

    def monitoring_report(self, day: dt.date) -> str:
        """A monitored day's record: ``monitoring/date=D/monitoring.json`` (written by the monitor job only)."""
        return f"{self.partition(self.monitoring, day)}/{MONITORING_REPORT}"

    def lock(self, table: str, day: dt.date) -> str:
        """The lock file of the run writing ``table``'s validated and quarantine partitions of ``day``."""
        return f"{self.root}/locks/{table}/{partition_name(day)}.lock"

    def locks(self, table: str) -> str:
        """The folder of ``table``'s partition locks."""
        return f"{self.root}/locks/{table}"

    def validation_failure(self, table: str, day: dt.date) -> str:
        """The mark left when ``table``'s partition of ``day`` failed validation (removed when it passes)."""
        return f"{self.root}/reports/validation/failed/{table}/{partition_name(day)}.json"

    def checkpoint(self, kind: str, day: dt.date, key: str) -> str:
        """Where a job keeps state to resume from; ``key`` tells its inputs apart (e.g. a digest)."""
        return f"{self.root}/checkpoints/{kind}/{partition_name(day)}/{key}"

    def reports(self, kind: str) -> str:
        """The folder of every day's reports of ``kind`` (one partition per day)."""
        return f"{self.root}/reports/{kind}"

    def report(self, kind: str, day: dt.date, name: str = SUMMARY) -> str:
        """A report file of a run for ``day``: ``kind`` is ``training``, ``scoring``, ``drift`` or
        ``decay`` (validation: :meth:`validation_report`)."""
        return f"{self.reports(kind)}/{partition_name(day)}/{name}"

    def validation_report(self, day: dt.date, days: int, name: str = SUMMARY) -> str:
        """The report of a validation run over the ``days`` days ending with ``day``."""
        return f"{self.root}/reports/validation/{partition_name(day)}/days={days}/{name}"

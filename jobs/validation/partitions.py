"""The partitions a validation run writes: one writer per day, staging a killed run left behind,
and the mark of a day that failed validation.

- **Locks.** Before it reads a row, a run that writes takes a lock file per table and day
  (``locks/<table>/date=D.lock``, created atomically) holding its owner: run id, pid, host, start.
  A second run of the same day fails at once naming the first. A lock whose owner is dead (same
  host, no such process) is taken over with a warning; one held from another host is not (the
  message says which file to delete once that run is known to be gone).
- **Staging.** Spark writes a partition to ``.spark-staging-*`` (and ``_temporary``) beside the
  zone's partitions and moves it into place at the end; a run killed mid-write leaves them behind.
  A run that holds its locks removes them when no other live run holds a lock on the same table.
- **Failed days.** When a run's batch checks fail, each failed day's ``validated/`` partition is
  removed and a mark (``reports/validation/failed/<table>/date=D.json``) says why; readers of the
  validated zone (:func:`check_not_failed`) then fail with "failed validation", not a stale day.
  A later run that passes the day removes the mark.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from jobs.errors import DataError
from jobs.lake import storage
from jobs.lake.layout import partition_day

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.lake.layout import Lake

log = logging.getLogger("jobs.validation.job")

STAGING_PREFIXES = (".spark-staging-", "_temporary")  # what Spark leaves beside a zone's partitions


class ConcurrentRunError(RuntimeError):
    """Another run is writing the same partition. Not a :class:`DataError`: once that run ends, a
    retry goes through."""


class FailedValidationError(DataError):
    """A day a reader needs failed validation: its validated partition was removed."""


@dataclass(frozen=True)
class Owner:
    """Who holds a lock."""

    run_id: str
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)
    started: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    token: str = field(default_factory=lambda: uuid.uuid4().hex)

    def describe(self) -> str:
        return f"run {self.run_id!r} (pid {self.pid} on {self.host}, started {self.started})"

    def dead(self) -> bool:
        """Whether the owner is known to be gone: on this host, its process no longer exists."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


def _read_owner(path: str) -> Owner | None:
    try:
        data = storage.read_json(path)
    except (OSError, ValueError):
        return None
    return Owner(**data) if isinstance(data, dict) else None


def _break_stale(path: str, stale: Owner) -> None:
    """Remove a dead owner's lock, unless someone replaced it in the meantime."""
    if _read_owner(path) == stale:
        storage.delete_file(path)


@dataclass
class PartitionLocks:
    """The locks of one run on (table, day) pairs; release them with :meth:`release`."""

    lake: Lake
    owner: Owner
    held: list[tuple[str, dt.date]] = field(default_factory=list)

    def acquire(self, partitions: list[tuple[str, dt.date]]) -> None:
        """Lock every (table, day), or none: fail naming the run that holds one already."""
        try:
            for table, day in sorted(set(partitions)):
                self._acquire(table, day)
        except BaseException:
            self.release()
            raise

    def _acquire(self, table: str, day: dt.date) -> None:
        path = self.lake.lock(table, day)
        payload = json.dumps(asdict(self.owner)).encode()
        for _ in range(3):
            if storage.create_exclusive(path, payload):
                self.held.append((table, day))
                return
            other = _read_owner(path)
            if other is None:  # removed by its owner a moment ago, or unreadable
                continue
            if not other.dead():
                raise ConcurrentRunError(
                    f"{table} partition {day} is being written by another {other.describe()}: this run "
                    f"({self.owner.run_id!r}) stopped before reading anything. Wait for it to end; if it "
                    f"is gone, delete {path}"
                )
            log.warning("%s partition %s: taking over the lock of %s, which is no longer running (%s)",
                        table, day, other.describe(), path)
            _break_stale(path, other)
        raise ConcurrentRunError(f"could not lock {table} partition {day} ({path}): it keeps changing hands")

    def release(self) -> None:
        for table, day in self.held:
            path = self.lake.lock(table, day)
            if _read_owner(path) == self.owner:
                storage.delete_file(path)
        self.held.clear()

    def others_alive(self, table: str) -> list[Owner]:
        """Live owners other than this run of any lock on ``table``."""
        owners = (_read_owner(p) for p in storage.list_files(self.lake.locks(table), ".lock"))
        return [o for o in owners if o is not None and o != self.owner and not o.dead()]


def clean_staging(spark: SparkSession, locks: PartitionLocks, table: str, zones: list[str]) -> list[str]:
    """Remove Spark's staging folders left in ``zones`` (a table's validated and quarantine
    folders) by a run that died; only when no other live run holds a lock on ``table``."""
    from jobs.lake.files import delete_path, list_entries

    found = [f"{zone}/{name}" for zone in zones for name, _ in list_entries(spark, zone)
             if name.startswith(STAGING_PREFIXES)]
    if not found:
        return []
    others = locks.others_alive(table)
    if others:
        log.info("%s: staging folders left as they are while %s writes the table", table, others[0].describe())
        return []
    removed = []
    for path in found:
        delete_path(spark, path)
        removed.append(path)
    log.warning("%s: removed staging left behind by a run that did not finish: %s", table, ", ".join(removed))
    return removed


@contextmanager
def zone_writer(spark: SparkSession, lake: Lake, name: str, zone: str, days: list[dt.date],
                run_id: str) -> Iterator[PartitionLocks]:
    """Hold the locks of the ``days`` a job replaces in a zone the validation does not write
    (``name``: ``features``, ``predictions``) while it writes them, and first remove the Spark
    staging a killed writer of the zone left there (as :func:`clean_staging`); released at the end."""
    locks = PartitionLocks(lake, Owner(run_id))
    locks.acquire([(name, day) for day in days])
    try:
        clean_staging(spark, locks, name, [zone])
        yield locks
    finally:
        locks.release()


def mark_failed(
    spark: SparkSession, lake: Lake, table: str, day: dt.date, run_id: str, problems: list[str], report: str
) -> None:
    """Remove ``table``'s validated partition of ``day`` and leave the mark saying why."""
    from jobs.lake.files import delete_path

    if delete_path(spark, lake.partition(lake.validated(table), day)):
        log.warning("%s partition %s failed validation: removed its validated partition", table, day)
    storage.write_json(lake.validation_failure(table, day),
                       {"table": table, "partition": day.isoformat(), "run_id": run_id, "problems": problems,
                        "report": report})


def clear_failed(lake: Lake, table: str, day: dt.date) -> None:
    """The day passed: remove its failure mark, if any."""
    storage.delete_file(lake.validation_failure(table, day))


def failed_days(lake: Lake, table: str) -> dict[dt.date, dict]:
    """The marks of ``table``'s days that failed their last validation, by day."""
    folder = lake.validation_failure(table, dt.date(2000, 1, 1)).rsplit("/", 1)[0]
    marks = {}
    for path in storage.list_files(folder, ".json"):
        day = partition_day(path.rsplit("/", 1)[1].removesuffix(".json"))
        if day is not None:
            marks[day] = storage.read_json(path) or {}
    return marks


def check_not_failed(lake: Lake, table: str, days: list[dt.date]) -> None:
    """Fail when one of ``days`` of ``table`` failed its last validation (see the module docstring)."""
    marks = failed_days(lake, table)
    bad = [d for d in sorted(set(days)) if d in marks]
    if bad:
        first = marks[bad[0]]
        problems = "; ".join(first.get("problems") or []) or "see the report"
        raise FailedValidationError(
            f"{table} for {', '.join(map(str, bad))} failed validation (run {first.get('run_id')!r}: {problems}); "
            f"its validated data was removed so nothing reads it. Fix the raw data and run the validate job "
            f"for those days again (report: {first.get('report')})"
        )

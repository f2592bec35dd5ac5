"""What a day's features were computed from, and whether that data has changed since.

A features partition of day D reads the validated partitions of D and, for its history features
(:mod:`jobs.features.history`), the feed's partitions of the days before D that its history
reaches. The features job records the **version** of each of them as it found them (before it
read them) in ``reports/lineage/date=D/features.json``; a version digests the names and sizes of
the partition's data files (Spark names every file it writes anew, so a re-validated day has a
new version) and is null for a day the zone did not hold (a gap).

A features day is **stale** when one of its inputs has changed since: re-validated (another
version), removed (failed validation) or landed where there was a gap. Readers refuse a stale day
(:func:`check_fresh`: the train job and the baselines through
:func:`jobs.training.data.feature_dirs`, the score job) with a data error that names the day, the
input that changed and the command that rebuilds it; the features job rebuilds, beside its own
days, the later days its days' history feeds that are stale (:func:`stale_days`), so re-running the
ingest of an earlier day brings the later days it feeds up to date. A day without a record
(features written before lineage was kept, or by a test's own writer) is not checked.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import TYPE_CHECKING, Any

from jobs.config.env import dag_id
from jobs.errors import DataError
from jobs.lake import storage
from jobs.lake.layout import partition_day

if TYPE_CHECKING:
    from collections.abc import Iterable

    from jobs.config import PipelineConfig
    from jobs.lake.layout import Lake

RECORD = "features.json"
KIND = "lineage"  # reports/lineage/date=D/features.json


class StaleFeaturesError(DataError):
    """A features day whose inputs changed after it was built: rebuild it, do not read it."""


def versions(lake: Lake, table: str) -> dict[dt.date, str]:
    """The version of each of ``table``'s validated partitions, by day, from one listing."""
    files: dict[dt.date, list[str]] = {}
    for path, _mtime, size in storage.files_under(lake.validated(table)):
        folder, _, name = path.rpartition("/")
        day = partition_day(folder)
        if day is not None and "/" not in folder and not name.startswith((".", "_")):
            files.setdefault(day, []).append(f"{name}:{size}")
    return {day: hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()[:16] for day, names in files.items()}


def inputs(config: PipelineConfig, day: dt.date) -> dict[str, list[dt.date]]:
    """The validated partitions day ``day``'s features read: each daily table's of the day, and
    the feed's of the days its history reads (:func:`jobs.features.history.history_days`)."""
    from jobs.features.history import history_days

    wanted = {name: [day] for name, spec in config.tables.items() if spec.daily}
    feed = config.validation.feed
    wanted[feed] = [*history_days(config.features, [day], config.monitoring.label_delay_days,
                                 config.feed_calendar), day]
    return wanted


def snapshot(lake: Lake, config: PipelineConfig, days: Iterable[dt.date]) -> dict[dt.date, dict]:
    """The inputs of each of ``days`` with their versions now (null: not in the zone)."""
    found = {name: versions(lake, name) for name, spec in config.tables.items() if spec.daily}
    return {day: {table: {d.isoformat(): found[table].get(d) for d in read}
                  for table, read in inputs(config, day).items()}
            for day in days}


def record(lake: Lake, taken: dict[dt.date, dict], run_id: str) -> None:
    """Keep each day's inputs as :func:`snapshot` found them before the job read them: data that
    changed while the job ran makes the day stale, never a day marked fresh that is not."""
    for day, read in taken.items():
        storage.write_json(lake.report(KIND, day, RECORD), {"day": day.isoformat(), "run_id": run_id, "inputs": read})


def changes(lake: Lake, days: Iterable[dt.date]) -> dict[dt.date, list[str]]:
    """For each of ``days`` with a record whose inputs changed since: what changed, in words."""
    found: dict[dt.date, list[str]] = {}
    current: dict[str, dict[dt.date, str]] = {}
    for day in days:
        kept: Any = storage.read_json(lake.report(KIND, day, RECORD))
        if not isinstance(kept, dict):
            continue
        for table, read in (kept.get("inputs") or {}).items():
            if table not in current:  # one listing of a table for all the days (not setdefault: it lists every time)
                current[table] = versions(lake, table)
            now = current[table]
            for when, recorded in read.items():
                version = now.get(dt.date.fromisoformat(when))
                if version == recorded:
                    continue
                what = ("was validated again" if recorded and version else "was removed (failed validation?)"
                        if recorded else "has landed (it was a gap)")
                found.setdefault(day, []).append(f"{table} of {when} {what}")
    return found


def stale_days(lake: Lake, config: PipelineConfig, days: list[dt.date], featured: Iterable[dt.date]) -> list[dt.date]:
    """The days of the features zone (``featured``) after ``days`` whose history reads one of
    ``days`` and whose inputs changed since they were built: the ones to rebuild with them."""
    later = [d for d in featured if d > min(days, default=d) and d not in days
             and set(days) & set(inputs(config, d)[config.validation.feed])]
    return sorted(changes(lake, later))


def check_fresh(lake: Lake, days: Iterable[dt.date]) -> None:
    """Refuse features days whose inputs changed since they were built (:class:`StaleFeaturesError`)."""
    stale = changes(lake, days)
    if not stale:
        return
    first = min(stale)
    listed = ", ".join(str(d) for d in sorted(stale))
    raise StaleFeaturesError(
        f"the features of {listed} are stale: {first}'s were built before {'; '.join(stale[first][:3])}. "
        f"Rebuild them before they are read: run the ingest of the changed day again ({dag_id('ingest')}, or "
        f"spark-submit jobs/features/job.py --run-date {max(stale)} --days {(max(stale) - first).days + 1})"
    )

"""Reference tables that have not changed are not validated again.

A reference table (airlines, airports, planes: a snapshot, not a daily feed) is usually the same
file night after night; validating it again costs a Spark pass and GX for nothing. Its
**fingerprint** digests the raw file's bytes and everything else that decides its validation: the
declared columns and types, its rules, the CSV options, whether GX runs, and the fingerprints of the
tables its rules refer to. When a snapshot is written, its fingerprint goes beside it
(``validated/<table>/date=D/_fingerprint.json``; Spark skips files starting with ``_``). A later run
whose raw file has the same fingerprint as the latest snapshot on or before its run date (one that
no later failure mark shadows) reuses that snapshot: it reads nothing raw, writes nothing, takes
the rules' reference values from the snapshot, and says so in the report (``unchanged_since``).
The features job reads the latest snapshot on or before a day, so it reads the reused one. A
snapshot with a damaged or copied file (:func:`jobs.lake.integrity.check_partitions`) is never
reused: the table is validated again, and a run on the snapshot's own day writes it anew.

Off with ``validation.skip_unchanged: false``. Daily tables are always validated.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from typing import TYPE_CHECKING, Any

from jobs.errors import DataError
from jobs.lake import storage
from jobs.lake.files import list_partitions
from jobs.lake.integrity import check_partitions
from jobs.lake.layout import Lake
from jobs.validation.partitions import failed_days

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.config import PipelineConfig, TableSpec
    from jobs.validation.rules import TableSuite

log = logging.getLogger(__name__)

SIDECAR = "_fingerprint.json"


def fingerprint(raw: bytes, spec: TableSpec, suite: TableSuite, config: PipelineConfig,
                references: dict[str, str]) -> str:
    """The digest of a reference table's raw bytes and of what its validation depends on;
    ``references``: the fingerprints of the tables its rules refer to, by name."""
    digest = hashlib.sha256(raw)
    decides = (repr(spec), repr(suite), sorted(config.csv_options.items()), config.validation.great_expectations,
               sorted(references.items()))
    digest.update(repr(decides).encode())
    return digest.hexdigest()


def sidecar(lake: Lake, table: str, day: dt.date) -> str:
    """Where the fingerprint of ``table``'s snapshot of ``day`` is kept."""
    return f"{lake.partition(lake.validated(table), day)}/{SIDECAR}"


def record(lake: Lake, table: str, day: dt.date, digest: str, run_id: str) -> None:
    """Keep the fingerprint of the snapshot just written (after its rows, so a snapshot never
    carries a fingerprint it was not written from)."""
    storage.write_json(sidecar(lake, table, day), {"fingerprint": digest, "run_id": run_id})


def unchanged_since(spark: SparkSession, lake: Lake, table: str, run_date: dt.date, digest: str) -> dt.date | None:
    """The day of the latest snapshot on or before ``run_date`` that passed with fingerprint
    ``digest``, when no failure mark after it shadows it; None when the table must be validated."""
    snapshots = [d for d in list_partitions(spark, lake.validated(table)) if d <= run_date]
    if not snapshots:
        return None
    latest = snapshots[-1]
    if any(latest < day <= run_date for day in failed_days(lake, table)):
        return None
    kept: Any = storage.read_json(sidecar(lake, table, latest))
    if not (isinstance(kept, dict) and kept.get("fingerprint") == digest):
        return None
    try:
        check_partitions([lake.partition(lake.validated(table), latest)])
    except DataError as err:
        log.warning("%s: its snapshot of %s is not reused, the table is validated again: %s", table, latest, err)
        return None
    return latest

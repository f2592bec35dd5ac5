"""A job's report of a day read back from the lake: the ``summary.json`` the score and promotion
jobs write under ``reports/<kind>/date=D/``, which the DAGs' tasks, the replay and the demo's
summary read."""

from __future__ import annotations

import datetime as dt
from typing import Any

from jobs.lake.layout import Lake


def read_report(lake: Lake, kind: str, run_date: dt.date | str) -> dict[str, Any]:
    """A job's ``summary.json`` for a day (``kind``: training or scoring), from any lake URI."""
    from jobs.lake.storage import read_json  # pyarrow, only once a report is read

    day = run_date if isinstance(run_date, dt.date) else dt.date.fromisoformat(run_date)
    path = lake.report(kind, day)
    report = read_json(path)
    if report is None:
        raise FileNotFoundError(f"no {kind} report for {day} at {path}: did the {kind} job run for that day?")
    return report

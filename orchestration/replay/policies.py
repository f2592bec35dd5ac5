"""The retraining policies a replay compares, and what each does when a served day ends.

A policy is which of the train DAG's triggers it listens to: the weekly schedule
(:data:`~orchestration.decisions.TRAINING_SCHEDULE`), the ``scoring_drift`` Asset, the ``model_decay``
Asset. The DAG listens to all three (``default``); ``never`` keeps the first champion all year. The
events themselves come from :func:`~orchestration.decisions.drift_event` and
:func:`~orchestration.decisions.decay_event`, the window and the words of a retraining from
:func:`~orchestration.decisions.training_plan`: the functions the DAGs' tasks call.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Policy:
    name: str
    weekly: bool = False  # the train DAG's schedule
    drift: bool = False  # a scoring_drift event
    decay: bool = False  # a model_decay event

    def describe(self) -> str:
        triggers = [name for name, on in (("weekly", self.weekly), ("drift", self.drift), ("decay", self.decay)) if on]
        return " or ".join(triggers) if triggers else "never retrain"


POLICIES = {policy.name: policy for policy in (
    Policy("never"),
    Policy("weekly", weekly=True),
    Policy("drift", drift=True),
    Policy("decay", decay=True),
    Policy("default", weekly=True, drift=True, decay=True),
)}


def retraining(policy: Policy, day: dt.date, drift: dict[str, Any] | None,
               decay: dict[str, Any] | None) -> dict[str, str] | None:
    """The training run ``policy`` starts once ``day`` has been served and judged, as
    :func:`~orchestration.decisions.training_plan` plans it for the train DAG (``run_date``,
    ``trigger``, ``started_by``), or None. ``drift``, ``decay``: the day's events' extras (None
    when the day raised none). One run a day at most: where the DAG would start a scheduled run
    and an event's run the same night, the replay starts the event's (decay before drift)."""
    from orchestration.decisions import scheduled_training_end, training_plan

    drifts = [drift] if policy.drift and drift else []
    decays = [decay] if policy.decay and decay else []
    scheduled = scheduled_training_end(day) if policy.weekly else None
    if not (drifts or decays or scheduled):
        return None
    return training_plan(None, drifts, scheduled, decays)

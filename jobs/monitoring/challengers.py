"""Champion and challengers on live data: which versions are scored in shadow beside the champion,
and the live evidence of a challenger against the champion on the realized outcomes.

- :func:`challenger_versions`: up to ``monitoring.challengers`` registered versions that are not
  champion, newest first: those that won the gate and wait (a person's approval, tag
  ``gate_decision=awaiting_approval``, or live evidence, ``awaiting_live_evidence``), then those
  that lost the gate by less than its margin (``rejected`` with a holdout score within
  ``gate_margin`` of the champion's; not those a person rejected). The score job scores them in
  shadow (``shadow/version=V/``), the monitor compares each with the champion on the same rows
  (a ``comparison`` block in the challenger's entry of ``monitoring.json``).
- :func:`live_evidence`: the last ``monitoring.live_days`` (K) monitored days of one (champion,
  challenger) pair pooled: the difference of the decay metric (challenger minus champion) with a
  95% interval, and ``beats``: K days compared and the interval wholly on the better side of 0.
- :func:`live_promotion`: with ``monitoring.promotion_evidence: live``, the one decision that
  moves the ``champion`` alias to a version that won on the holdout: only when its live evidence
  beats the champion (``<pipeline>_score``'s ``promote_challenger`` task calls it every run).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from typing import TYPE_CHECKING, Any

from jobs.metrics import LOWER_IS_BETTER, better
from jobs.monitoring.decay import Z95

if TYPE_CHECKING:
    from jobs.config import PipelineConfig
    from jobs.lake.layout import Lake
    from jobs.tracking import ModelRef

log = logging.getLogger(__name__)

CHALLENGER = "challenger"  # a monitoring entry's role for shadow predictions
HISTORY_FACTOR = 4  # records read for K live days: days without outcomes or a comparison are skipped


def _score(tags: dict[str, str], key: str) -> float | None:
    try:
        value = float(tags.get(key, ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def near_miss(tags: dict[str, str], margin: float) -> bool:
    """Whether a version's gate tags say it lost to the champion by less than the margin (the
    ``gate_margin`` it was held to, else ``margin``): rejected by the gate itself, not by a person,
    both scores defined, and the shortfall under the margin."""
    from jobs.selection.gate import REJECTED

    if tags.get("gate_decision") != REJECTED or tags.get("gate_approved_by"):
        return False
    challenger, champion = _score(tags, "gate_challenger_score"), _score(tags, "gate_champion_score")
    held_to = _score(tags, "gate_margin")
    held_to = margin if held_to is None else held_to
    if challenger is None or champion is None:
        return False
    gain = better(str(tags.get("gate_metric")), challenger, champion)
    return -held_to < gain < held_to


def challenger_versions(client: Any, name: str, limit: int, margin: float) -> list[ModelRef]:
    """Up to ``limit`` registered versions of ``name`` that are not the champion, to score in
    shadow: those awaiting approval or live evidence, then the near misses of the gate
    (:func:`near_miss`, ``margin``: ``train.promotion_margin`` for versions tagged before
    ``gate_margin`` existed); newest first within each."""
    from jobs.selection.gate import AWAITING_APPROVAL, AWAITING_LIVE, current_champion
    from jobs.tracking import ModelRef

    if limit <= 0:
        return []
    champion = current_champion(client, name)
    serving = None if champion is None else str(champion.version)
    versions = sorted(client.search_model_versions(f"name = '{name}'"), key=lambda v: int(v.version), reverse=True)
    waiting, missed = [], []
    for version in versions:
        if str(version.version) == serving:
            continue
        tags = dict(version.tags or {})
        if tags.get("gate_decision") in (AWAITING_APPROVAL, AWAITING_LIVE):
            waiting.append(version)
        elif near_miss(tags, margin):
            missed.append(version)
    return [ModelRef.of(v) for v in [*waiting, *missed][:limit]]


def monitoring_records(lake: Lake, last: dt.date | None = None, days: int | None = None) -> list[dict[str, Any]]:
    """The monitoring zone's daily records (``monitoring.json``), oldest first: up to ``last``
    (default: all), the latest ``days`` of them (default: all)."""
    from jobs.lake.layout import partition_day
    from jobs.lake.storage import entries, read_json

    found = sorted(d for d in (partition_day(name) for name, _ in entries(lake.monitoring))
                   if d is not None and (last is None or d <= last))
    if days is not None:
        found = found[-days:] if days > 0 else []
    return [record for d in found if (record := read_json(lake.monitoring_report(d))) is not None]


def compared_days(records: list[dict[str, Any]], name: str, champion: str, challenger: str) -> list[dict[str, Any]]:
    """The challenger's comparison blocks against ``champion``, with their ``day``, oldest first."""
    found = []
    for record in sorted(records, key=lambda r: r["day"]):
        for entry in record.get("models", []):
            comparison = entry.get("comparison") or {}
            if (entry.get("role") == CHALLENGER and entry.get("model_name") == name
                    and str(entry.get("model_version")) == str(challenger)
                    and str(comparison.get("champion_version")) == str(champion) and comparison.get("difference")):
                found.append({**comparison, "day": record["day"]})
    return found


def pool_differences(days: list[dict[str, Any]]) -> dict[str, float] | None:
    """The rows-weighted mean of daily paired differences, its 95% interval from the days' own
    intervals (as :func:`jobs.monitoring.decay.pooled` pools a metric); None without any."""
    parts = []
    for day in days:
        diff, weight = day["difference"], day.get("rows") or 0
        if weight <= 0:
            continue
        se = max((float(diff["high"]) - float(diff["low"])) / (2 * Z95), 0.0)
        parts.append((float(diff["value"]), se, float(weight)))
    if not parts:
        return None
    total = sum(w for _, _, w in parts)
    mean = sum(v * w for v, _, w in parts) / total
    se = math.sqrt(sum((w / total) ** 2 * s ** 2 for _, s, w in parts))
    return {"value": mean, "low": mean - Z95 * se, "high": mean + Z95 * se}


def live_evidence(records: list[dict[str, Any]], name: str, champion: str, challenger: str,
                  live_days: int) -> dict[str, Any]:
    """The challenger against the champion on their last ``live_days`` compared days: ``days``,
    ``difference`` (challenger minus champion, pooled, with its 95% interval; None without a
    compared day), ``rows`` and ``beats``: ``live_days`` days compared and the interval wholly
    on the challenger's better side of 0; ``summary`` says it in words."""
    days = compared_days(records, name, champion, challenger)[-live_days:]
    metric = days[-1]["metric"] if days else None
    difference = pool_differences(days)
    beats = False
    if difference is not None and len(days) >= live_days:
        beats = difference["high"] < 0 if metric in LOWER_IS_BETTER else difference["low"] > 0
    evidence: dict[str, Any] = {
        "model_name": name, "champion_version": str(champion), "challenger_version": str(challenger),
        "metric": metric, "live_days": live_days, "days": [d["day"] for d in days],
        "rows": int(sum(d.get("rows") or 0 for d in days)), "difference": difference, "beats": beats,
    }
    if difference is None:
        evidence["summary"] = (f"no live evidence yet: version {challenger} has not been compared with champion "
                               f"v{champion} on any monitored day")
    else:
        span = f"{days[0]['day']}..{days[-1]['day']}"
        verdict = ("beats the champion" if beats else
                   f"does not beat the champion yet ({len(days)} of {live_days} days)" if len(days) < live_days
                   else "does not beat the champion")
        evidence["summary"] = (f"version {challenger} vs champion v{champion} on {len(days)} live day(s) {span}: "
                               f"{metric} difference {difference['value']:+.4f} (95% interval {difference['low']:+.4f}"
                               f"..{difference['high']:+.4f}): {verdict}")
    return evidence


def promotion_decision(evidence_mode: str, gate_decision: str, evidence: dict[str, Any] | None) -> dict[str, Any]:
    """Whether a version becomes champion now: when the gate (or a person) promoted it (with
    ``live`` evidence the gate promotes only the first version); with ``live``, else only a version
    that won on the holdout (awaiting live evidence) and whose live ``evidence`` beats the
    champion. ``{"promote", "reason"}``."""
    from jobs.selection.gate import AWAITING_LIVE, PROMOTED

    if gate_decision == PROMOTED:  # holdout evidence; or live, the first version (no champion to compare with)
        return {"promote": True, "reason": "the gate promoted it"}
    if evidence_mode == "holdout":
        return {"promote": False, "reason": f"holdout evidence: the gate says {gate_decision}"}
    if gate_decision != AWAITING_LIVE:
        return {"promote": False, "reason": f"not awaiting live evidence (gate: {gate_decision})"}
    if evidence is None or not evidence["beats"]:
        return {"promote": False, "reason": evidence["summary"] if evidence else "no live evidence yet"}
    return {"promote": True, "reason": f"live evidence: {evidence['summary']}"}


def live_promotion(client: Any, lake: Lake, config: PipelineConfig, up_to: dt.date | None = None,
                   ) -> dict[str, Any] | None:
    """With ``monitoring.promotion_evidence: live``: the newest version awaiting live evidence
    whose evidence (monitored days up to ``up_to``) beats the current champion becomes champion
    (alias moved, version tagged ``promoted`` with the evidence). Returns what was promoted (model,
    versions, evidence), None when nothing was (or the evidence mode is ``holdout``)."""
    from jobs.selection.gate import PROMOTED, current_champion, promote_version, reconcile

    spec, name = config.monitoring, config.train.model_name
    if spec.promotion_evidence != "live":
        return None
    reconcile(client, name)  # a champion left awaiting live evidence by a cut-short promotion is no challenger
    champion = current_champion(client, name)
    if champion is None:
        return None
    records = monitoring_records(lake, up_to, HISTORY_FACTOR * spec.live_days)
    for ref in challenger_versions(client, name, spec.challengers, config.train.promotion_margin):
        tags = dict(client.get_model_version(name, ref.version).tags or {})
        evidence = live_evidence(records, name, str(champion.version), ref.version, spec.live_days)
        decision = promotion_decision("live", tags.get("gate_decision", ""), evidence)
        log.info("%s version %s: %s", name, ref.version, decision["reason"])
        if not decision["promote"]:
            continue
        promote_version(client, name, ref.version, {"gate_decision": PROMOTED, "gate_reason": decision["reason"],
                                                    "gate_live_days": ",".join(evidence["days"])})
        return {"model_name": name, "model_version": ref.version, "replaced": str(champion.version),
                "evidence": evidence}
    return None

"""The champion gate: a new model version becomes ``champion`` only when it beats the current one.

Both versions are scored by the same code (their MLflow pyfuncs) on the same rows, the new
version's holdout window; the chosen metric must improve by at least the configured margin. The
first version ever registered becomes champion. An undefined metric (NaN: a holdout of one class
has no ROC AUC) is handled explicitly (:func:`undefined_metric_decision`): the first version still
becomes champion, with a warning; a challenger whose metric is undefined never replaces a
champion. The decision, both scores and the reason are
recorded as tags on the new version and returned for the task log. Registry stages are
deprecated in MLflow 3: the champion is an alias (``models:/<name>@champion``).

A promotion is two registry writes that no transaction joins: the alias moves first, then the
decision tags follow (``gate_decision`` last, :func:`promote_version`), so a process killed between
them leaves a champion whose tags do not say ``promoted`` yet, never a version tagged ``promoted``
that scoring does not serve. :func:`reconcile` finds such a champion and completes its tags, saying
so; the gate runs it first, as do ``<pipeline>_train``'s ``plan_training`` and the live promotion.

With ``train.require_approval`` a winning version does not move the alias itself: it is tagged
``awaiting_approval`` and the training DAG asks a person (an Airflow human-in-the-loop task, with
the comparison in front of them); :func:`record_approval` then moves the alias or keeps the champion.

With ``monitoring.promotion_evidence: live`` the holdout is not enough: a winning version (approved
by a person first, when approval is required) is tagged ``awaiting_live_evidence``, scored in
shadow beside the champion every day, and becomes champion only once its live evidence beats the
champion on ``monitoring.live_days`` days (:func:`jobs.monitoring.challengers.live_promotion`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from jobs.metrics import LOWER_IS_BETTER, better
from jobs.registry import CHAMPION, current_champion

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

# gate_decision tag values
PROMOTED, REJECTED, AWAITING_APPROVAL = "promoted", "rejected", "awaiting_approval"
AWAITING_LIVE = "awaiting_live_evidence"  # won on the holdout; champion once it beats the champion live


@dataclass(frozen=True)
class GateDecision:
    promote: bool
    metric: str
    challenger_score: float
    champion_score: float | None
    champion_version: str | None
    reason: str
    warning: str = ""  # set when the decision rests on an undefined metric
    awaiting_approval: bool = False  # it won, and a person decides whether it becomes champion
    margin: float | None = None  # the margin it was held to (a near miss: lost by less than it)
    awaiting_live: bool = False  # it won on the holdout, and waits for live evidence (promotion_evidence: live)

    @property
    def outcome(self) -> str:
        if self.awaiting_approval:
            return AWAITING_APPROVAL
        if self.awaiting_live:
            return AWAITING_LIVE
        return PROMOTED if self.promote else REJECTED

    def tags(self) -> dict[str, str]:
        """What the new version carries so anyone can see why it was (not) promoted."""
        return {
            "gate_decision": self.outcome,
            "gate_metric": self.metric,
            "gate_challenger_score": f"{self.challenger_score:.6f}",
            "gate_champion_score": "" if self.champion_score is None else f"{self.champion_score:.6f}",
            "gate_champion_version": self.champion_version or "",
            "gate_reason": self.reason,
            **({"gate_margin": f"{self.margin:g}"} if self.margin is not None else {}),
            **({"gate_warning": self.warning} if self.warning else {}),
        }


def decide(
    metric: str, challenger: float, champion: float | None, margin: float, champion_version: str | None = None
) -> GateDecision:
    """Promote when there is no champion, or the challenger is better by at least ``margin``."""
    if not math.isfinite(challenger):
        return undefined_metric_decision(metric, challenger, champion, champion_version)
    if champion is None:
        return GateDecision(True, metric, challenger, None, None, "no champion yet: the first model becomes champion")
    if not math.isfinite(champion):
        return GateDecision(True, metric, challenger, champion, champion_version,
                            f"champion v{champion_version} has {metric} {champion} on this holdout")
    gain = better(metric, challenger, champion)
    direction = "lower" if metric in LOWER_IS_BETTER else "higher"
    promote = gain >= margin
    reason = (f"{metric} {challenger:.4f} vs champion v{champion_version} {champion:.4f}: "
              f"{direction} is better, improvement {gain:+.4f} {'>=' if promote else '<'} margin {margin}")
    return GateDecision(promote, metric, challenger, champion, champion_version, reason, margin=margin)


def undefined_metric_decision(
    metric: str, challenger: float, champion: float | None, champion_version: str | None
) -> GateDecision:
    """The gate when the challenger's ``metric`` is undefined (NaN, e.g. ROC AUC on a holdout of one
    class): the first version becomes champion as documented, with a warning; otherwise the
    champion stays, whether its own score is defined or not."""
    undefined = f"challenger {metric} is undefined ({challenger}) on this holdout"
    if champion is None:
        warning = (f"{undefined}: promoted only because there is no champion yet; check the holdout window "
                   f"(one class only?) and retrain on a window with both classes")
        return GateDecision(True, metric, challenger, None, None,
                            f"no champion yet: the first model becomes champion although its {metric} is undefined",
                            warning)
    state = "defined" if math.isfinite(champion) else "undefined too"
    return GateDecision(False, metric, challenger, champion, champion_version,
                        f"{undefined}; champion v{champion_version}'s {metric} is {state} ({champion}): "
                        "a challenger with an undefined metric never replaces the champion",
                        f"{undefined}: not compared")


def score_version(model_uri: str, holdout: pd.DataFrame, inputs: list[str], label: str) -> dict[str, float]:
    """Holdout metrics of a logged model, computed through its pyfunc like scoring does."""
    import mlflow.pyfunc

    from jobs.metrics import days_of, evaluate

    probabilities = mlflow.pyfunc.load_model(model_uri).predict(holdout[inputs])
    return evaluate(holdout[label], probabilities, days_of(holdout))


def score_champion(client: Any, name: str, version: str, holdout: pd.DataFrame, inputs: list[str],
                   label: str) -> dict[str, float]:
    """The champion's holdout metrics, as :func:`score_version` measures them, once its files are
    checked and it loads (:func:`jobs.registry.load_version`). A champion that cannot load cannot be
    compared: that is a data error naming it and the command that moves the alias
    (:class:`jobs.registry.DamagedModelError`), never a promotion unopposed nor a stack trace."""
    from jobs.metrics import days_of, evaluate
    from jobs.registry import load_version

    return evaluate(holdout[label], load_version(client, name, version, CHAMPION).predict(holdout[inputs]),
                    days_of(holdout))




def apply_gate(
    client: Any, name: str, version: str, holdout: pd.DataFrame, inputs: list[str], label: str,
    metric: str, margin: float, probabilities: Any = None, require_approval: bool = False,
    live_evidence: bool = False,
) -> GateDecision:
    """Compare ``version`` with the champion on ``holdout``, move the alias if it wins, tag it.
    A champion whose files are missing or do not load stops the gate with a data error naming it
    (:func:`score_champion`): ``version`` stays registered, untagged, and nothing moves.

    ``probabilities``: ``version``'s pyfunc predictions on ``holdout`` when the caller has them
    (otherwise the version is loaded and scored here). ``require_approval``: a winner is only
    tagged ``awaiting_approval``; :func:`record_approval` moves the alias once a person approves.
    ``live_evidence`` (``monitoring.promotion_evidence: live``): a winner that would replace a
    champion is tagged ``awaiting_live_evidence`` instead (after a person's approval, when one is
    required); the first version still becomes champion at once."""
    from jobs.metrics import days_of, evaluate

    reconcile(client, name)  # an earlier promotion cut short: its champion's tags first
    if probabilities is None:
        challenger = score_version(f"models:/{name}/{version}", holdout, inputs, label)[metric]
    else:
        challenger = evaluate(holdout[label], probabilities, days_of(holdout))[metric]
    champion = current_champion(client, name)
    champion_score = None
    if champion is not None:
        champion_score = score_champion(client, name, str(champion.version), holdout, inputs, label)[metric]
    decision = decide(metric, challenger, champion_score, margin,
                      None if champion is None else str(champion.version))
    if decision.promote and require_approval:
        decision = replace(decision, promote=False, awaiting_approval=True)
    elif decision.promote and live_evidence and champion is not None:
        decision = replace(decision, promote=False, awaiting_live=True)
    if decision.promote:
        promote_version(client, name, version, decision.tags())
    else:
        tag_version(client, name, version, decision.tags())
    if decision.warning:
        log.warning("champion gate for %s version %s: %s", name, version, decision.warning)
    log.info("champion gate for %s version %s: %s (%s)", name, version, decision.outcome, decision.reason)
    return decision


DECISION = "gate_decision"
RECONCILED = "gate_reconciled"  # what reconcile found and did, on the version it fixed


def tag_version(client: Any, name: str, version: str, tags: dict[str, str]) -> None:
    """Set a version's decision tags, ``gate_decision`` last: one that says ``promoted`` is only
    ever written after the reason and scores it stands for."""
    for key, value in sorted(tags.items(), key=lambda item: item[0] == DECISION):
        client.set_model_version_tag(name, version, key, value)


def promote_version(client: Any, name: str, version: str, tags: dict[str, str]) -> None:
    """Make ``version`` champion: the alias first, then its decision ``tags``. Killed between the
    two, the alias (what scoring serves) is right and :func:`reconcile` completes the tags; the
    other order could leave a version tagged ``promoted`` that nothing serves."""
    client.set_registered_model_alias(name, CHAMPION, version)
    tag_version(client, name, version, tags)


def reconcile(client: Any, name: str) -> str | None:
    """Make the decision tags agree with the ``champion`` alias: a champion whose ``gate_decision``
    is not ``promoted`` was promoted by a process that died between moving the alias and tagging
    it (:func:`promote_version`); it is tagged ``promoted`` now, with a note in ``gate_reconciled``
    (and as its ``gate_reason`` when the reason was never written). Returns the note, None when
    alias and tags agree (or there is no champion).

    A version tagged ``promoted`` that the alias is not on is left alone: a former champion, or
    one a person rolled the alias back from; the gate never leaves one otherwise."""
    champion = current_champion(client, name)
    if champion is None:
        return None
    tags = dict(champion.tags or {})
    if tags.get(DECISION) == PROMOTED:
        return None
    note = (f"the {CHAMPION} alias points at version {champion.version}, whose {DECISION} was "
            f"{tags.get(DECISION, '(none)')!r}: the process that moved the alias died before its decision tags "
            f"were written; tagged {PROMOTED} to agree with the alias")
    fixed = {RECONCILED: note, DECISION: PROMOTED}
    if "gate_reason" not in tags or tags.get(DECISION) in (AWAITING_APPROVAL, AWAITING_LIVE):
        fixed["gate_reason"] = f"{note}; before: {tags.get('gate_reason', '(none)')}"
    tag_version(client, name, str(champion.version), fixed)
    log.warning("reconciled %s: %s", name, note)
    return note


class ApprovalError(RuntimeError):
    """An approval that can no longer be applied as it was asked for."""


def record_approval(client: Any, name: str, version: str, approved: bool, by: str, compared_with: str,
                    live_evidence: bool = False) -> str:
    """A person's answer to a version ``awaiting_approval``: approved, it becomes champion; rejected,
    the champion stays. Either way the version is tagged with the outcome and who decided.
    ``live_evidence`` (``monitoring.promotion_evidence: live``): approved, it is tagged
    ``awaiting_live_evidence`` and stays a challenger until its live evidence beats the champion.

    ``compared_with``: the champion version the person saw in the comparison ('' for none). If the
    alias moved since (another version was promoted meanwhile) the approval no longer holds: the
    comparison is stale, so nothing moves and :class:`ApprovalError` says what to do."""
    tags = client.get_model_version(name, version).tags
    if tags.get("gate_decision") != AWAITING_APPROVAL:
        raise ApprovalError(f"{name} version {version} is not awaiting approval "
                            f"(gate_decision: {tags.get('gate_decision')!r})")
    champion = current_champion(client, name)
    now = "" if champion is None else str(champion.version)
    if approved and now != compared_with:
        raise ApprovalError(
            f"{name} version {version} was compared with champion {compared_with or '(none)'}, but the champion is "
            f"now {now or '(none)'}: the comparison is stale, nothing was promoted; train again to compare anew"
        )
    outcome = PROMOTED if approved else REJECTED
    if approved and live_evidence and champion is not None:
        outcome = AWAITING_LIVE
    reason = f"{'approved' if approved else 'rejected'} by {by}; gate: {tags.get('gate_reason', '')}"
    answer = {"gate_decision": outcome, "gate_reason": reason, "gate_approved_by": by}
    if outcome == PROMOTED:
        promote_version(client, name, version, answer)
    else:
        tag_version(client, name, version, answer)
    log.info("%s version %s %s by %s", name, version, outcome, by)
    return outcome

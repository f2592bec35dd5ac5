"""One replay's home (``--home``): its options and their check, its folders (the shared lake, each
policy's lake with the shared zones linked in), its own MLflow store, the config files its jobs
read, and its bookkeeping: the resumable state (``state.json``), the seconds each stage took, the
progress (``progress.json``). What runs in it is :mod:`orchestration.replay.engine`'s.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import logging
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestration.replay.policies import POLICIES

log = logging.getLogger("orchestration.replay")

FIRST_DAY, LAST_DAY = dt.date(2013, 2, 1), dt.date(2013, 12, 31)
SHARED_ZONES = ("raw", "validated", "quarantine", "features")
PROFILE = "replay"  # jobs/config/profiles/replay.yaml: no shadow scoring, no pictures


def days_between(first: dt.date, last: dt.date) -> list[dt.date]:
    """Every day from ``first`` to ``last``, both in."""
    return [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]


def _write_json(path: Path, data: Any) -> None:
    """Replace ``path`` atomically: a replay killed mid-write keeps the previous state."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)


def _read(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def config_of(args: list[str]) -> Any:
    """The config the jobs load from these options (:meth:`ReplayHome._write_config`)."""
    from jobs.config import load_config

    named = dict(zip(args[::2], args[1::2], strict=True))
    return load_config(named["--config"], profiles=[named["--profile"]], overlays=())


@dataclass
class ReplayHome:
    """One replay's home: its folder, its span of served days, the policies and the model selection's
    size; where things are, and what is done so far."""

    home: Path
    start: dt.date = FIRST_DAY
    end: dt.date = LAST_DAY
    policies: tuple[str, ...] = tuple(POLICIES)
    base_config: str | None = None
    sweep_size: int | None = None  # None: the config's sweep.size
    baselines: int | None = None  # None: every baseline of the config
    segment_days: int = 14
    land_with: str = "jobs.datasets.land_flights"  # a module: main(--from, --to, --lake-root), FIRST_DAY
    state: dict[str, Any] = field(default_factory=dict)
    began: float = field(default_factory=time.monotonic)
    _served_at_start: int = field(default=0, init=False, repr=False)  # policy-days served before this process

    def __post_init__(self) -> None:
        from jobs.config import load_config

        self.home = Path(self.home).resolve()
        unknown = sorted(set(self.policies) - set(POLICIES))
        if unknown:
            raise ValueError(f"unknown policy {', '.join(unknown)}: choose from {', '.join(POLICIES)}")
        if self.end < self.start:
            raise ValueError(f"--end {self.end} is before --start {self.start}")
        self.base = load_config(self.base_config, profiles=[PROFILE], overlays=())
        found = _read(self.home / "state.json")
        setup = self.setup()
        if found and found.get("setup") != setup:
            raise ValueError(f"{self.home} holds a replay with other settings ({found.get('setup')}): resume it "
                             f"with those, or give another --home")
        self.state = found or {"setup": setup, "prepared": [], "trained": {}, "policies": {}, "seconds": {}}
        self.lake_root = self.home / "lake"
        self.config_args = self._write_config(None)
        self.tracking_uri = f"sqlite:///{self.home / 'mlflow.db'}"

    @contextmanager
    def store(self) -> Any:
        """The home's own MLflow store for the block: the jobs run in this process and read
        ``MLFLOW_TRACKING_URI`` and ``PIPELINE_MLFLOW_ARTIFACTS``; both are put back after it."""
        import mlflow

        wanted = {"MLFLOW_TRACKING_URI": self.tracking_uri, "PIPELINE_MLFLOW_ARTIFACTS": str(self.home / "mlartifacts")}
        before = {name: os.environ.get(name) for name in wanted}
        previous_uri = mlflow.get_tracking_uri()
        os.environ.update(wanted)
        mlflow.set_tracking_uri(self.tracking_uri)
        try:
            yield
        finally:
            mlflow.set_tracking_uri(previous_uri)  # first: MLflow 3 writes MLFLOW_TRACKING_URI too
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def setup(self) -> dict[str, Any]:
        # "store": a home replayed before it had a store of its own has its runs elsewhere: not resumable
        return {"start": self.start.isoformat(), "end": self.end.isoformat(), "config": self.base.source,
                "sweep_size": self.sweep_size, "baselines": self.baselines, "segment_days": self.segment_days,
                "store": "home", "lake_from": self.lake_from.isoformat()}

    # --- where things are ---------------------------------------------------------------------

    @property
    def first_training(self) -> dt.date:
        """The first champion's window ends the day before the first served day."""
        return self.start - dt.timedelta(days=1)

    @property
    def lake_from(self) -> dt.date:
        """The first day the shared lake holds: as far back as the first window can reach (the
        expanding window's ``train.max_train_days``, its validation and holdout days), not before
        the example data's first day. A replay that starts in July trains its first champion on
        the months before, as a replay from February has them by July (it held the first window's
        28 days only, so its windows grew from there)."""
        train = self.base.train
        reach = train.reach_days + train.validation_days + train.holdout_days
        return max(self.landing.FIRST_DAY, self.first_training - dt.timedelta(days=reach - 1))

    @property
    def landing(self) -> Any:
        """The module that lands the example data (``land_with``)."""
        return importlib.import_module(self.land_with)

    def policy_lake(self, policy: str) -> Path:
        return self.home / "policies" / policy / "lake"

    def model_name(self, policy: str) -> str:
        return f"{self.base.train.model_name}-replay-{policy}"

    def _write_config(self, policy: str | None) -> list[str]:
        """The jobs' config options for a policy (its own registered model) or the shared runs: a file
        of the replay's own settings over the base pipeline (its model selection as asked, its
        experiment), and the replay profile."""
        import dataclasses

        from jobs.config import write_overlay

        changes: dict[str, Any] = {"train": {"experiment": f"{self.base.train.experiment}-replay"}}
        if self.baselines is not None:
            changes["baselines"] = [dataclasses.asdict(spec) for spec in self.base.baselines[: self.baselines]]
        if self.sweep_size is not None:
            changes["sweep"] = {"size": self.sweep_size}
        if policy is not None:
            changes["train"]["model_name"] = self.model_name(policy)
        config = write_overlay(self.home / "configs" / f"{policy or 'shared'}.yaml", changes, base=self.base.source)
        return ["--config", str(config), "--profile", PROFILE]

    def _policy_lake(self, policy: str) -> Path:
        """The policy's lake: the shared zones linked in, the validation reports too (the score
        job reads the failed-day marks); everything it writes its own."""
        root = self.policy_lake(policy)
        (root / "reports").mkdir(parents=True, exist_ok=True)
        for zone in SHARED_ZONES:
            (self.lake_root / zone).mkdir(parents=True, exist_ok=True)
            if not (root / zone).exists():
                (root / zone).symlink_to(self.lake_root / zone)
        (self.lake_root / "reports" / "validation").mkdir(parents=True, exist_ok=True)
        if not (root / "reports" / "validation").exists():
            (root / "reports" / "validation").symlink_to(self.lake_root / "reports" / "validation")
        return root

    # --- bookkeeping ---------------------------------------------------------------------------

    def save(self) -> None:
        _write_json(self.home / "state.json", self.state)

    @contextmanager
    def timed(self, stage: str, policy: str | None = None) -> Any:
        """Add the block's seconds to ``stage``'s total (the policy's, or the shared one's), and
        the phases the jobs in it marked (:func:`jobs.timings.phase`: ``score/drift``, ...)."""
        from jobs import timings

        timings.take_phases()  # what ran before the block is not its
        began = time.monotonic()
        try:
            yield
        finally:
            seconds = self.state["seconds"] if policy is None else self.state["policies"][policy]["seconds"]
            seconds[stage] = round(seconds.get(stage, 0.0) + time.monotonic() - began, 3)
            phases = self.state.setdefault("phases", {}).setdefault(policy or "shared", {})
            for name, spent in timings.take_phases().items():
                key = f"{stage}/{name.split(' 20')[0]}"  # "monitor 2013-02-01" counts as monitor/monitor
                phases[key] = round(phases.get(key, 0.0) + spent, 3)

    def progress(self, policy: str, day: dt.date) -> None:
        """One line and ``progress.json``: where the replay is and when it should end, from the
        pace of the days served so far in this process."""
        total = len(self.policies) * len(days_between(self.start, self.end))
        done = sum(len(self.state["policies"].get(p, {}).get("served", {})) for p in self.policies)
        elapsed = time.monotonic() - self.began
        served_now = done - self._served_at_start
        rate = elapsed / served_now if served_now else None
        left = (total - done) * rate if rate else None
        expected = None
        if left:
            expected = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=left)).isoformat(timespec="seconds")
        line = {"policy": policy, "policy_index": self.policies.index(policy) + 1, "policies": len(self.policies),
                "day": day.isoformat(), "days_served": done, "days_total": total, "elapsed_s": round(elapsed, 1),
                "expected_end": expected}
        _write_json(self.home / "progress.json", line)
        log.info("replay %s (%d/%d): served up to %s, %d/%d policy-days, %s elapsed%s", policy,
                 line["policy_index"], len(self.policies), day, done, total, dt.timedelta(seconds=int(elapsed)),
                 f", expected end {expected}" if expected else "")

"""Replay the days of the example data one after another under each retraining policy.

``python -m orchestration.replay --help`` lists its options.

What does not depend on the policy runs once, in a shared lake (``<home>/lake``): the raw data of
every day landed, validated and turned into features (the validate and features jobs over a month
at a time), and each training window's model selection (the baselines job, the sweep's candidates
through the train job, the best on the validation days: what a train DAG runs before
``promote_candidate``, planned by the same :mod:`orchestration.training_sequence`). Each policy
has its own lake (``<home>/policies/<policy>/lake``: the shared
zones linked in, its own predictions, monitoring and reports), its own registered model
(``<train.model_name>-replay-<policy>``) and serves the days in order. Each home has its own MLflow
store (``<home>/mlflow.db``, artifacts in ``<home>/mlartifacts``), whatever ``MLFLOW_TRACKING_URI``
says: two replays never share runs, versions or aliases, so a replay in a fresh home starts from an
empty registry and gets the same first champion as any other (a shared store let a baseline that
an earlier replay logged stop the first champion of one run with ``--baselines 0``). Within a home,
each window's model selection is a training of its own (``training_id``): the bar and the sweep
compare its runs only. Then each policy goes through its days:

- the champion scores the days up to the next point where the policy may retrain (a segment: up to
  ``--segment-days``, or the end of the week under the weekly schedule) in one score job
  (``--days``), and the monitor judges them in one monitor job (the example's outcomes land with
  the day: ``monitoring.label_delay_days`` 0);
- then, day by day, the same decisions as the DAGs: the day's drift event
  (:func:`~orchestration.decisions.drift_event`), decay event (:func:`~orchestration.decisions.decay_event`)
  and the training the policy starts (:func:`~orchestration.replay.policies.retraining`); a
  retraining registers the window's selected candidate under the policy's model and puts it
  through the bar and the gate (the promotion job, as ``promote_candidate`` runs it); a new
  champion serves from the next day on, and the segment's later days, scored by the old one, are
  scored again by it.

Progress goes to the log and to ``<home>/progress.json`` (policy, simulated day, elapsed, expected
end). Everything done is recorded in ``<home>/state.json`` after each step, so a replay killed
midway goes on from its last finished day when started again with the same options.

Exit status: 0 when the replay ran to its end (the report's paths on stdout); ``78``
(:data:`STOPPED_EXIT`, EX_CONFIG of sysexits.h) when it stopped as it may by design, saying why
and what to change in one line: the first model did not become champion (the bar or the gate
stopped it, :class:`ReplayStopped`), so no policy has a model to serve with these options; 2 for
options argparse refuses; 1 for anything else (a fault, with its traceback).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from orchestration.replay.home import FIRST_DAY, LAST_DAY, ReplayHome, config_of, days_between
from orchestration.replay.policies import POLICIES, Policy, retraining
from orchestration.replay.report import write_report

log = logging.getLogger("orchestration.replay")

PREPARE_CHUNK_DAYS = 31  # days per validate and features job while the shared lake is prepared
NO_OVERRIDES = "{}"  # the jobs' --overrides: a replay changes no setting per run, as a DAG run with no params
STOPPED_EXIT = 78  # EX_CONFIG of sysexits.h: the options give no first champion (see above)


class ReplayStopped(RuntimeError):
    """The replay cannot go on with its options (its first model did not become champion): an
    expected stop, told in one line with what to change, not a fault."""


class Replay(ReplayHome):
    """One replay's steps: the shared lake prepared and each window's model selection made once,
    then every policy's days served, its retrainings promoted under its own model."""

    # --- the shared part -------------------------------------------------------------------------

    def prepare(self) -> None:
        """Land, validate and build the features of every day a window or a served day needs, a
        month per job, once for every policy."""
        from jobs.features import job as features_job
        from jobs.validation import job as validate_job

        first = self.lake_from
        days = days_between(first, self.end)
        if not self.state["prepared"]:
            with self.timed("land"):
                self.landing.main(["--from", first.isoformat(), "--to", self.end.isoformat(),
                                   "--lake-root", str(self.lake_root)])
        for i in range(0, len(days), PREPARE_CHUNK_DAYS):
            chunk = days[i:i + PREPARE_CHUNK_DAYS]
            if chunk[-1].isoformat() in self.state["prepared"]:
                continue
            common = ["--run-date", chunk[-1].isoformat(), "--days", str(len(chunk)),
                      *self.config_args, "--lake-root", str(self.lake_root)]
            log.info("replay: validating and building features for %s..%s", chunk[0], chunk[-1])
            with self.timed("validate"):
                validate_job.main(common)
            with self.timed("features"):
                features_job.main(common)
            self.state["prepared"].append(chunk[-1].isoformat())
            self.save()

    def selected_candidate(self, run_date: dt.date, started_by: str) -> str:
        """The window's candidate run, trained once for every policy: the baselines, the sweep's
        candidates through the train job and the best of them on the validation days."""
        import uuid

        from jobs.baselines import job as baselines_job
        from jobs.training import job as train_job
        from orchestration.training_sequence import baselines_args, choose_candidate, plan_candidates

        key = run_date.isoformat()
        if key in self.state["trained"]:
            return self.state["trained"][key]["run_id"]
        config = config_of(self.config_args)
        where = [*self.config_args, "--lake-root", str(self.lake_root)]
        # one training: the baselines and candidates of this attempt, compared with each other only
        training = f"replay/{key}/{uuid.uuid4().hex[:12]}"
        began = time.monotonic()
        with self.timed("baselines"):
            baselines_job.main(["--run-date", key, *baselines_args(started_by, training, NO_OVERRIDES), *where])
        with self.timed("candidates"):
            planned = plan_candidates(config, key, started_by, training)
            for args in planned:
                train_job.main([*args, *where])
            best = choose_candidate(config, planned)
        parent = planned[0][planned[0].index("--parent-run-id") + 1]
        self.state["trained"][key] = {"run_id": best["run_id"], "parent_run_id": parent, "candidates": len(planned),
                                      "training_id": training, "seconds": round(time.monotonic() - began, 3),
                                      "chosen_family": best["family"], "holdout": family_scores(config, training)}
        self.save()
        return best["run_id"]

    # --- one policy ------------------------------------------------------------------------------

    def promote(self, policy: str, plan: dict[str, str]) -> dict[str, Any]:
        """The window's candidate registered under the policy's model, through the bar and the gate
        (the promotion job); what became of it."""
        from jobs.lake.layout import Lake
        from jobs.lake.reports import read_report
        from jobs.promotion import job as promotion_job
        from orchestration.training_sequence import promotion_args

        run_id = self.selected_candidate(dt.date.fromisoformat(plan["run_date"]), plan["started_by"])
        with self.timed("gate", policy):
            promotion_job.main(["--run-date", plan["run_date"],
                                *promotion_args(run_id, plan["started_by"], plan["trigger"], NO_OVERRIDES),
                                *self._write_config(policy), "--lake-root", str(self.policy_lake(policy))])
        summary = read_report(Lake(str(self.policy_lake(policy))), "training", plan["run_date"])
        gate = summary.get("gate") or {}
        # the promotion may have added a candidate of the window (sweep.blend): its holdout score too
        trained = self.state["trained"][plan["run_date"]]
        trained["holdout"] = family_scores(config_of(self.config_args), trained["training_id"])
        self.save()
        # run_id: the window's candidate; registered_run_id: what was registered (a baseline in its place)
        return {**plan, "version": summary.get("model_version"), "run_id": run_id,
                "registered_run_id": summary.get("run_id"), "family": summary.get("model_family"),
                "outcome": gate.get("gate_decision"),
                "reason": gate.get("gate_reason")}

    def segment_end(self, policy: Policy, day: dt.date) -> dt.date:
        """The last day the current champion surely serves if nothing else happens: the segment
        ends at ``--segment-days``, at the end of the replay, and where the weekly schedule fires."""
        from orchestration.decisions import scheduled_training_end

        last = min(self.end, day + dt.timedelta(days=self.segment_days - 1))
        if policy.weekly:
            last = next((d for d in days_between(day, last) if scheduled_training_end(d)), last)
        return last

    def serve(self, name: str) -> None:
        """Serve the policy's days from where it stands to the end."""
        from jobs.lake.layout import Lake
        from jobs.lake.storage import delete_dir
        from jobs.monitoring import job as monitor_job
        from jobs.scoring import job as score_job
        from orchestration.decisions import decay_event, drift_event

        policy = POLICIES[name]
        config_args = self._write_config(name)
        config = config_of(config_args)
        lake = Lake(str(self._policy_lake(name)))
        state = self.state["policies"].setdefault(
            name, {"next": self.start.isoformat(), "champion": None, "served": {}, "trainings": [], "seconds": {},
                   "segments": []})
        if state["champion"] is None:  # every policy starts with the same first champion: January's
            first = self.promote(name, {"run_date": self.first_training.isoformat(), "trigger": "person",
                                        "started_by": f"the replay: the first champion, window up to "
                                                      f"{self.first_training}"})
            if first["outcome"] != "promoted":
                reason = " ".join(str(first["reason"]).split())  # one line, whatever the gate wrote
                raise ReplayStopped(
                    f"the replay's first model (window up to {self.first_training}) did not become champion: "
                    f"{first['outcome']}: {reason}. Give the model selection more (--sweep-size, the "
                    f"config's sweep), replay with the bar open (--baselines 0) or start on another day (--start), "
                    f"in another --home (this one keeps its options: {self.home})")
            state["champion"] = first["version"]
            state["trainings"].append({**first, "day": self.first_training.isoformat()})
            self.save()
        day = dt.date.fromisoformat(state["next"])
        while day <= self.end:
            last = self.segment_end(policy, day)
            window = ["--run-date", last.isoformat(), "--days", str((last - day).days + 1),
                      *config_args, "--lake-root", lake.root]
            began = time.monotonic()
            with self.timed("score", name):
                score_job.main(window)
            with self.timed("monitor", name):
                monitor_job.main(window)
            served_s, decided = time.monotonic() - began, 0.0
            for served in days_between(day, last):
                state["served"][served.isoformat()] = state["champion"]
                deciding = time.monotonic()
                with self.timed("decide", name):
                    drift, _ = drift_event(lake, served.isoformat(), False)
                    _, decay = decay_event(lake, config, served, config.train.model_name, state["champion"])
                    plan = retraining(policy, served, drift, decay)
                decided += time.monotonic() - deciding
                state["next"] = (served + dt.timedelta(days=1)).isoformat()
                if plan is None:
                    continue
                outcome = self.promote(name, plan)
                state["trainings"].append({**outcome, "day": served.isoformat()})
                log.info("replay %s: %s started a retraining on %s: version %s %s (%s)", name, plan["trigger"],
                         served, outcome["version"], outcome["outcome"], outcome["reason"])
                if outcome["outcome"] == "promoted":
                    state["champion"] = outcome["version"]
                    for later in days_between(served + dt.timedelta(days=1), last):  # the old champion's, never served
                        for folder in (lake.partition(lake.predictions, later), lake.partition(lake.monitoring, later),
                                       *(lake.partition(lake.reports(kind), later)
                                         for kind in ("scoring", "drift", "decay"))):
                            delete_dir(folder)
                    break
            # the soak's figure: what serving a day costs as the lake, the registry and the runs grow
            state["segments"].append({"first": day.isoformat(), "last": last.isoformat(),
                                      "days": (last - day).days + 1, "scored_s": round(served_s, 3),
                                      "decided_s": round(decided, 3)})
            self.save()
            self.progress(name, dt.date.fromisoformat(state["next"]) - dt.timedelta(days=1))
            day = dt.date.fromisoformat(state["next"])

    def run(self) -> dict[str, Any]:
        """Prepare the shared lake, then serve every policy's days; returns the report."""
        self.home.mkdir(parents=True, exist_ok=True)
        self._served_at_start = sum(len(p.get("served", {})) for p in self.state["policies"].values())
        self.save()
        with self.store():
            self.prepare()
            for name in self.policies:
                self.serve(name)
            return write_report(self)


def family_scores(config: Any, training: str) -> dict[str, float]:
    """The holdout promotion metric of each family of one training: the MLP's and XGBoost's
    candidate that the validation days chose (the sweep's rule, within the family), and each
    baseline (by name)."""
    from jobs.selection.bar import better
    from jobs.selection.identity import TRAINING_ID, training_id
    from jobs.tracking import client

    metric = config.train.promotion_metric
    mlflow_client = client()
    experiment = mlflow_client.get_experiment_by_name(config.train.experiment)
    query = f"tags.{TRAINING_ID} = '{training_id(training)}' and attributes.status = 'FINISHED'"
    runs = mlflow_client.search_runs([experiment.experiment_id], query)
    chosen: dict[str, tuple[float | None, float]] = {}
    for run in runs:
        tags, metrics = run.data.tags, run.data.metrics
        kind = tags.get("candidate_kind")
        name = tags.get("candidate_name") if kind == "baseline" else tags.get("model_family", "mlp")
        holdout, validation = metrics.get(f"holdout_{metric}"), metrics.get(f"validation_{metric}")
        if kind not in ("baseline", "candidate") or holdout is None:
            continue
        if name not in chosen or (validation is not None and (chosen[name][0] is None or
                                                              better(metric, validation, chosen[name][0]))):
            chosen[name] = (validation, holdout)
    return {name: round(holdout, 4) for name, (_, holdout) in sorted(chosen.items())}


def main(argv: list[str] | None = None) -> None:
    from jobs.runtime.session import CONSOLE_PROGRESS_ENV, configure_logging

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--start", type=dt.date.fromisoformat, default=FIRST_DAY,
                        help="the first served day (default: %(default)s)")
    parser.add_argument("--end", type=dt.date.fromisoformat, default=LAST_DAY,
                        help="the last served day (default: %(default)s)")
    parser.add_argument("--policy", action="append", choices=list(POLICIES), default=None,
                        help="a policy to replay (repeat for several; default: all of them)")
    parser.add_argument("--home", default=None, help="the replay's folder (default: $PIPELINE_HOME/replay)")
    parser.add_argument("--config", default=None,
                        help="the pipeline: a folder or a YAML file (default: $PIPELINE_CONFIG or the bundled flights)")
    parser.add_argument("--sweep-size", type=int, default=None,
                        help="sweep candidates per training window (default: the config's sweep.size)")
    parser.add_argument("--baselines", type=int, default=None,
                        help="the config's first N MLlib baselines per training window, the bar (default: all)")
    parser.add_argument("--segment-days", type=int, default=14,
                        help="days scored and judged in one job while the champion stays (default 14)")
    parser.add_argument("--land-with", default=Replay.land_with,
                        help="the module that lands the pipeline's example data (default: %(default)s; "
                             "jobs.datasets.land_bikeshare for pipelines/bikeshare)")
    args = parser.parse_args(argv)
    configure_logging()
    os.environ.setdefault(CONSOLE_PROGRESS_ENV, "0")  # the console shows the replay's progress lines, not Spark's bars
    home = args.home or os.path.join(os.environ.get("PIPELINE_HOME", ".pipeline"), "replay")
    replay = Replay(Path(home), args.start, args.end, tuple(args.policy or POLICIES), args.config,
                    args.sweep_size, args.baselines, args.segment_days, land_with=args.land_with)
    try:
        report = replay.run()
    except ReplayStopped as stop:  # expected with some options: one line and its own exit status
        log.debug("where the replay stopped", exc_info=True)
        # on stderr itself, last: importing Airflow (the DAGs' decisions) sends log records elsewhere
        sys.stdout.flush()
        print(f"replay stopped (exit {STOPPED_EXIT}): {stop}", file=sys.stderr, flush=True)
        raise SystemExit(STOPPED_EXIT) from None
    print(json.dumps({"report": {name: str(replay.home / path) for name, path in report["paths"].items()}}, indent=2))

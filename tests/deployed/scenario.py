"""The one deployed stack the tests under ``tests/deployed/`` share, and the lake and config it
runs on: started once (``conftest.py``), used by every module here, stopped by the last test.

The stack (``tests/stack.py``: PostgreSQL behind Airflow and an MLflow server, Airflow's API server,
scheduler, DAG processor and triggerer, a Spark standalone cluster and a shared Spark Connect
server, all real processes on loopback) runs as deployed: the schedules on, the nightly jobs
(validate, features, score, monitor) on the Connect server, training's driver its own on the
standalone cluster.

Its lake is its own: a copy of the session lake's raw and validated zones, two days' raw flights
changed (``DECAY_DAY``'s outcomes turned around for the flights from ``TURNED``, ``DRIFT_DAY``'s
distances four times too long), and the features of the first champion's window (``TRAIN_DATE``).
The first champion is trained through the REST API with a person's approval
(``test_stack.py``); the backfills then score, monitor and retrain (``test_backfill.py``). The
config promotes every retraining (``promotion_margin: -1``), so what scores each day is known in
advance, and judges decay day by day (``window_days: 1``).

The stack serves two pipelines (``PIPELINES_DIR``: :func:`write_pipelines`): the flights of this
scenario, whose DAGs every module drives, and the bundled bikeshare pipeline on the same short
window under a model of its own (``BIKES_MODEL``), its lake ``$LAKE_ROOT/bikeshare`` empty and its
DAGs paused until ``test_two_pipelines.py`` runs a night of each at the same time.

Not a test module.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from tests.stack import Stack, running_stack

DAGS = ["flights_ingest", "flights_score", "flights_train"]
MODEL = "stack_model"
BIKES = "bikeshare"  # the second pipeline the stack serves (pipelines/bikeshare)
BIKES_DAGS = [f"{BIKES}_{stage}" for stage in ("ingest", "score", "train")]
BIKES_MODEL = "stack_bikes"  # its registered model and MLflow experiment
TRAIN_DATE = dt.date(2013, 1, 7)  # the first champion: trains on 01-01..01-05, evaluates on 01-06..01-07
TRAIN_DAYS, HOLDOUT_DAYS = 5, 2
DAYS = [dt.date(2013, 1, 8), dt.date(2013, 1, 9), dt.date(2013, 1, 10)]  # backfilled
DECAY_DAY = DAYS[1]  # its outcomes turn around for the flights from TURNED
DRIFT_DAY = DAYS[2]  # its flights arrive with every distance four times too long
TURNED = {"EWR", "JFK"}  # two of the three airports: about two thirds of a day's flights
KEYS = ["carrier", "flight", "origin", "sched_dep_time"]  # a flight's key in the raw data and the predictions
TRAIN_TIMEOUT = 420  # two epochs of 5 days on one rank: about a minute, with room for a loaded machine


def copy_lake(lake, features_zone, root: Path):
    """A lake of its own under ``root`` for a stack: the session ``lake``'s raw and validated zones
    and, from ``features_zone``, the features of the first champion's window (``TRAIN_DATE``)."""
    import shutil

    from jobs.lake.layout import Lake

    own = Lake(str(root))
    for zone in ("raw", "validated"):
        shutil.copytree(f"{lake.root}/{zone}", f"{own.root}/{zone}")
    window = [TRAIN_DATE - dt.timedelta(days=n) for n in reversed(range(TRAIN_DAYS + HOLDOUT_DAYS))]
    features_zone.copy(window, own.features)
    return own


def prepare_lake(lake, features_zone, root: Path):
    """The stack's own lake under ``root`` (:func:`copy_lake`) with the two days changed."""
    own = copy_lake(lake, features_zone, root)
    make_drift(own.raw_file("flights", DRIFT_DAY))
    turn_outcomes(own.raw_file("flights", DECAY_DAY))
    return own


def stack_config(config_patch, folder: Path, model: str, train: dict[str, Any] | None = None, *,
                 name: str = "pipeline", base: Path | None = None, **sections: Any) -> Path:
    """A stack's ``<name>.yaml`` for the pipeline ``base`` (default: the bundled flights): the
    first champion's short window (``TRAIN_DAYS`` + ``HOLDOUT_DAYS``), two epochs on one rank, one
    candidate, no baselines, registered as ``model``; ``train`` and ``sections`` changed on top
    (:meth:`tests.conftest.ConfigPatch.write`). GX's cross-check is tested on its own; on a stack
    it only adds time."""
    return config_patch.write(
        folder, name=name, base=base,
        train={"train_days": TRAIN_DAYS, "validation_days": 0, "holdout_days": HOLDOUT_DAYS, "epochs": 2,
               "num_processes": 1, "model_name": model, **(train or {})},
        baselines=[], validation={"great_expectations": False},
        evaluation={"threshold": 0.5, "segments": []},
        sweep={"size": 1, "families": ["mlp"], "blend": [], "learning_rate": [], "width": [], "depth": [],
               "epochs": []},
        **sections,
    )


def stack_env(lake, config: Path, home: Path, pipelines: Path | None = None) -> dict[str, str]:
    """What a stack's processes (and this one, calling the jobs' own functions) are pointed with:
    its lakes' root (``lake``'s folder is named after its pipeline), its config, its MLflow
    artifacts under ``home``; and no wait for raw data, so that a
    scheduled ingest run of a day without any (yesterday's) skips at once, whatever the hour.
    With ``pipelines`` (:func:`write_pipelines`) the stack serves every pipeline of that folder;
    ``config`` stays the one this process's calls of the jobs' functions read."""
    env = {"PIPELINE_RAW_WAIT_HOURS": "0", "LAKE_ROOT": str(Path(lake.root).parent),
           "PIPELINE_CONFIG": str(config), "PIPELINE_MLFLOW_ARTIFACTS": str(home / "mlartifacts")}
    if pipelines is not None:
        env["PIPELINES_DIR"] = str(pipelines)
    return env


def write_pipelines(config_patch, folder: Path) -> Path:
    """``folder`` as a deployment's pipelines: ``flights.yaml``, the scenario's
    (:func:`write_config`), and ``bikeshare.yaml``, the bundled bikeshare pipeline on the same
    short window (:func:`stack_config`) as ``BIKES_MODEL``, its experiment of that name too, every
    retraining promoted as the flights' are."""
    from jobs.config.files import PIPELINES

    write_config(config_patch, folder)
    stack_config(config_patch, folder, BIKES_MODEL, train={"experiment": BIKES_MODEL, "promotion_margin": -1.0},
                 name=BIKES, base=PIPELINES / BIKES)
    return folder


def write_config(config_patch, folder: Path) -> Path:
    """The scenario's ``flights.yaml`` (:func:`stack_config`): every retraining is promoted.

    Decay is judged on each day alone, on log loss: a 2-epoch model of 5 days ranks flights barely
    better than chance (holdout ROC AUC about 0.55), so turned outcomes hardly move its ROC AUC,
    but its probabilities (about 0.2 where most flights are now late) are badly wrong: log loss
    about 1.0 against 0.55 on its holdout, while a normal day stays within a few hundredths. The
    margin is far from both; calibration (ECE) is left out of the rule here."""
    return stack_config(config_patch, folder, MODEL, train={"promotion_margin": -1.0}, name="flights",
                        monitoring={"decay": {"window_days": 1, "metric": "log_loss", "margin": 0.25,
                                              "max_ece": 1.0}})


def make_drift(path: str) -> None:
    """Rewrite a day's raw flights (in the stack's own copy) with every distance times four:
    still valid rows, but a distribution the champion never saw."""
    flights = pd.read_csv(path, dtype=str, keep_default_na=False)
    flights["distance"] = [str(float(value) * 4) for value in flights["distance"]]
    flights.to_csv(path, index=False)


def turn_outcomes(path: str) -> None:
    """Rewrite a day's raw flights (in the stack's own copy) with the outcomes of the flights from
    TURNED turned around: late (over 15 minutes) becomes on time and on time late. The model's
    inputs (times, route, distance, plane, weather) stay as they were; a cancelled flight stays
    without an outcome."""
    flights = pd.read_csv(path, dtype=str, keep_default_na=False)
    turned = flights["origin"].isin(TURNED) & (flights["arr_delay"] != "")
    late = pd.to_numeric(flights["arr_delay"], errors="coerce") > 15
    flights.loc[turned & late, "arr_delay"] = "-5"
    flights.loc[turned & ~late, "arr_delay"] = "60"
    flights.to_csv(path, index=False)


def locks(lake) -> list[Path]:
    """Every file left under the lake's locks (a writer that did not release its day)."""
    return [p for p in Path(lake.root, "locks").rglob("*") if p.is_file()]


def staging(*folders: Path) -> list[Path]:
    """What Spark's writes left staged under ``folders`` (the prefixes the jobs clean up)."""
    from jobs.validation.partitions import STAGING_PREFIXES

    return [p for folder in folders for p in folder.rglob("*") if p.name.startswith(STAGING_PREFIXES)]


def check_day_once(lake, day, run_id: str) -> None:
    """The day once: every raw row validated or quarantined, one feature row per validated flight,
    the report of run ``run_id``, no lock and no staging left behind."""
    raw = len(pd.read_csv(lake.raw_file("flights", day), dtype=str, keep_default_na=False))
    validated = pq.read_table(lake.partition(lake.validated("flights"), day)).num_rows
    quarantine = Path(lake.partition(lake.quarantine("flights"), day))
    quarantined = pq.read_table(quarantine).num_rows if quarantine.exists() else 0
    assert raw == validated + quarantined, (raw, validated, quarantined)
    assert pq.read_table(lake.partition(lake.features, day)).num_rows == validated
    report = json.loads(Path(lake.validation_report(day, 1)).read_text())
    assert report["run_id"] == run_id and report["success"], report["run_id"]
    assert locks(lake) == []
    assert staging(*(Path(lake.root, zone) for zone in ("validated", "quarantine", "features"))) == []


class RunningStack:
    """The shared stack, and a way to stop it before the session ends (the last test does). While
    it runs, ``patch`` (a pytest MonkeyPatch) holds this process's environment changes for it;
    stopping undoes them."""

    def __init__(self, home: Path, lake, env: dict[str, str], patch: Any, **options: Any) -> None:
        self.home, self.lake, self._patch = home, lake, patch  # the lake: prepare_lake's
        self._context = running_stack(home, env, **options)
        self.stack: Stack = self._context.__enter__()
        self.stopped = False

    def stop(self) -> None:
        """Stop every part of the stack and undo the environment changes (once; the fixture's
        teardown and the folder's end call it again)."""
        if self.stopped:
            return
        self.stopped = True
        try:
            self._context.__exit__(None, None, None)
        finally:
            import os

            import mlflow

            self._patch.undo()
            # The jobs' MLflow client set the global URI, and mlflow.set_tracking_uri also writes it
            # to os.environ: point both back at the session's store.
            mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])

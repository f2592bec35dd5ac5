"""Shared fixtures: the pipeline environment on a throw-away PIPELINE_HOME, one local[2] session,
a lake with a few days of the real example data landed in it, and the config patched for a test.

GPU tests carry the ``gpu`` marker: skipped where torch sees no CUDA device, and failed instead
with ``PIPELINE_REQUIRE_GPU=1`` (what ``scripts/gpu_verify.sh`` sets), so a GPU run cannot pass by
skipping. The compose stack's tests carry the ``compose`` marker: skipped unless ``-m`` selects
them (``make compose-smoke``).

The environment comes from ``scripts/env.sh`` (the same file ``make demo`` uses), evaluated with
a temporary PIPELINE_HOME before anything imports Airflow, MLflow or Spark.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks.common import pipeline_environment
from tests import jit

REPO = Path(__file__).resolve().parents[1]
# One home per test process. Under pytest-xdist (``make test`` runs two workers) each worker has its
# own, inside the home of the process that started it: its own lake, MLflow store and Airflow
# database. Imported a second time under another name (``from tests.conftest import ...``: pytest
# imports this file as ``conftest``), it changes nothing: the environment the fixtures have set
# since (a test's LAKE_ROOT, PIPELINE_CONFIG) stays, and no home is nested in the worker's.
SET_UP_BY = "PIPELINE_TEST_PROCESS"  # the process that set the environment up
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
AGAIN = os.environ.get(SET_UP_BY) == str(os.getpid())
RUN_HOME = Path(os.environ.get("PIPELINE_TEST_HOME") or tempfile.mkdtemp(prefix="pipeline-tests-"))
SESSION_HOME = RUN_HOME
if AGAIN and WORKER:
    RUN_HOME = SESSION_HOME.parent
elif WORKER:
    SESSION_HOME = RUN_HOME / WORKER
    SESSION_HOME.mkdir(parents=True, exist_ok=True)


# Read before the environment is rebuilt (it drops PIPELINE_* settings), and kept for subprocesses.
REQUIRE_GPU = os.environ.get("PIPELINE_REQUIRE_GPU", "") == "1"
if not AGAIN:
    _environment = pipeline_environment(SESSION_HOME)  # from this process's environment: before clearing it
    os.environ.clear()
    os.environ.update(_environment)
    if REQUIRE_GPU:
        os.environ["PIPELINE_REQUIRE_GPU"] = "1"
    os.environ["PIPELINE_TEST_HOME"] = str(SESSION_HOME)
    os.environ[SET_UP_BY] = str(os.getpid())
    # The interpreter running the tests is the venv's: its bin (spark-submit, airflow) comes first.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    # The JVMs the tests start compile with C1 only; this process's session keeps every tier (tests/jit.py).
    _submit_opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if jit.ONE_JOB not in _submit_opts.split():  # an xdist worker has it from the controller already
        os.environ["SPARK_SUBMIT_OPTS"] = f"{_submit_opts} {jit.ONE_JOB}".strip()

# Days of real data the tests land: enough for a tiny training window and a scoring day.
FIRST_DAY = dt.date(2013, 1, 1)
LAST_DAY = dt.date(2013, 1, 10)


def cuda_devices() -> int:
    """GPUs torch sees here (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--backfill-days", type=int, default=0,
                     help="run tests/load/: backfill this many days on the deployed stack (make backfill-90)")
    parser.addoption("--retrain-every", type=int, default=0,
                     help="tests/load/: a retraining trigger every this many backfilled days, alternately decay "
                          "and drift (make backfill-retrain); 0: none, every day scored by the first champion")
    compose = parser.getgroup("compose", "the compose stack (make compose-smoke: pytest -m compose)")
    compose.addoption("--compose-write-env", action="store_true",
                      help="no .env: write one with fresh random secrets without asking (WRITE_ENV=1)")
    compose.addoption("--compose-faults", default="", metavar="all|NAMES",
                      help="also crash containers: all, or some of scheduler,postgres,worker,connect (FAULTS=1: all)")
    compose.addoption("--compose-nights", action="store_true",
                      help="also time a night of each pipeline alone and both at once (NIGHTS=1)")
    compose.addoption("--compose-shots", default="", metavar="FOLDER",
                      help="where the screenshots go (default .pipeline/compose/screenshots; SHOTS=docs refreshes "
                           "the documentation's)")
    compose.addoption("--compose-keep", action="store_true", help="leave the stack up at the end")
    compose.addoption("--compose-reuse", action="store_true",
                      help="keep the volumes of an earlier run (with -k, one step on a stack left up)")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under pytest-xdist (``make test`` runs two workers): a module's tests run on one worker, so
    its module-scoped fixtures are set up once, and ``tests/deployed/`` as a whole, in its order
    (one stack). xdist's own ``loadgroup`` marks do not reach the test ids under pytest 9."""
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _scope(nodeid)

    return ByModule(config, log)


def _scope(nodeid: str) -> str:
    """What one worker runs whole: a test's module, or ``tests/deployed`` for any test under it."""
    path = nodeid.split("::", 1)[0]
    return "tests/deployed" if path.startswith("tests/deployed/") else path


# The modules that take minutes on this machine, longest first, after tests/deployed/ (measured under
# two workers, 2026-11-26).
LONGEST_FIRST = [
    "tests/test_e2e.py",
    "tests/test_replay.py",
    "tests/jobs/training/test_train_resume.py",
    "tests/jobs/test_faults_data.py",
    "tests/jobs/training/test_faults_train.py",
    "tests/jobs/training/test_train_on_cluster.py",
    "tests/jobs/validation/test_validate.py",
    "tests/jobs/training/test_train.py",
]


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the order modules go to the workers in: first the longest that uses the
    session lake (tests/deployed/, one stack and half an hour, when it runs), whose worker builds
    the lake (:func:`built_once`) while the other runs the modules that do not use it; then
    LONGEST_FIRST, so that the short modules fill in at the end and no worker is left finishing a
    long one alone; then the rest. A stable sort: each module's tests keep their order."""
    if not WORKER:
        return
    with_lake = {_scope(item.nodeid) for item in items if "lake" in item.fixturenames}
    longest = ["tests/deployed", *LONGEST_FIRST]

    def longest_rank(scope: str) -> int:
        return longest.index(scope) if scope in longest else len(longest)

    # ties broken by name: each worker collects on its own and must come to the same order (a set's
    # order of strings differs between processes)
    first = min(with_lake, key=lambda scope: (longest_rank(scope), scope), default="")

    def rank(item: pytest.Item) -> tuple[int, int]:
        scope = _scope(item.nodeid)
        if scope == first:
            return 0, 0
        return (2, longest_rank(scope)) if scope in with_lake else (1, 0)

    items.sort(key=rank)


def compose_selected(markexpr: str) -> bool:
    """Whether ``-m`` asks for the ``compose`` tests by name: the expression selects a test marked
    ``compose`` alone and no test without a marker (``-m "not e2e"`` selects both: not by name)."""
    import re

    words = re.findall(r"\(|\)|[^\s()]+", markexpr)
    if not words:
        return False

    def selects(markers: set[str]) -> bool:
        text = " ".join(w if w in ("and", "or", "not", "(", ")") else str(w in markers) for w in words)
        try:
            return bool(eval(text, {"__builtins__": {}}))  # noqa: S307 (only True, False, and/or/not, parentheses)
        except SyntaxError:
            return False

    return selects({"compose"}) and not selects(set())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A ``compose`` test not asked for with ``-m compose``: skipped (it builds and runs the compose
    stack: by hand only). A ``gpu`` test without a GPU: skipped, or with PIPELINE_REQUIRE_GPU=1
    failed. Both before their fixtures start anything."""
    if item.get_closest_marker("compose") is not None and not compose_selected(item.config.option.markexpr or ""):
        pytest.skip("the compose stack, by hand: make compose-smoke (pytest -m compose)")
    if item.get_closest_marker("gpu") is None or cuda_devices():
        return
    if REQUIRE_GPU:
        pytest.fail("PIPELINE_REQUIRE_GPU=1 but torch sees no CUDA device here: a GPU test may not skip on a GPU "
                    "run (check the driver, CUDA_VISIBLE_DEVICES and that torch is a CUDA build)", pytrace=False)
    pytest.skip("no GPU here: run on a GPU machine (bash scripts/gpu_verify.sh)")


@pytest.fixture(scope="session")
def spark():
    """The one SparkSession of the test run: local[2], like the embedded default."""
    from jobs.runtime.session import get_spark

    # 2 GiB of heap: the suite's one JVM holds every test's cached frames, and the features job's
    # history joins (seven keys, the flight number's among them) once ran it out of Java heap at 1 GiB
    session = get_spark("tests", {"spark.master": "local[2]", "spark.ui.enabled": "false",
                                  "spark.driver.memory": "2g", **jit.SESSION})
    yield session
    session.stop()


@pytest.fixture(scope="session")
def landed_days() -> tuple[dt.date, dt.date]:
    """The first and last day the ``lake`` fixture holds."""
    return FIRST_DAY, LAST_DAY


@pytest.fixture(scope="session")
def lake(spark, config_without_gx):
    """A lake with the real example data for FIRST_DAY..LAST_DAY landed in the raw zone and
    validated (reference snapshots dated FIRST_DAY, so every day sees them). Read-only for tests.
    Landed and validated once for the run (:func:`built_once`), then copied to this process's lake."""
    from jobs.config import days_ending
    from jobs.datasets.land_flights import land
    from jobs.lake.layout import Lake
    from jobs.validation.job import validate

    def build(root: Path) -> None:
        shared = Lake(str(root))
        land(shared, FIRST_DAY, LAST_DAY)
        days = days_ending(LAST_DAY, (LAST_DAY - FIRST_DAY).days + 1)
        report = validate(spark, shared, config_without_gx, days, FIRST_DAY, "tests")
        assert report.success and report.written, report.summary()

    lake = Lake.at()  # $LAKE_ROOT, from scripts/env.sh under the test home
    shutil.copytree(built_once("lake", build), lake.root, dirs_exist_ok=True)  # a worker's own copy
    return lake


def built_once(name: str, build: Callable[[Path], None]) -> Path:
    """``<run home>/shared/<name>``, filled by ``build``: called by the first test process of the run
    that asks (under pytest-xdist, one of the workers) while the others wait on a lock file, so
    what every worker needs the same is made once. Read-only once built."""
    import fcntl

    folder = RUN_HOME / "shared" / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        built = folder.parent / f"{name}.built"
        if not built.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed build left
            build(folder)
            built.touch()
    return folder


class FeaturesZone:
    """The features of every day the ``lake`` fixture holds, written once by the features job's
    own functions (``read_inputs``, ``build_features``, ``write_features``). A day's features
    depend on that day's rows and the reference snapshots only, so any set of days read from here
    is what building those days alone gives. Read-only: a test reads days (:meth:`frame`) or copies
    them into a lake of its own (:meth:`copy`)."""

    def __init__(self, spark, path: Path, columns: list[str]) -> None:
        self.spark, self.path, self.columns = spark, path, columns

    def frame(self, days: list[dt.date]):
        """The features of ``days``: a Spark DataFrame with build_features' columns, in its order."""
        from pyspark.sql import functions as F

        from jobs.lake.layout import PARTITION

        return self.spark.read.parquet(str(self.path)).where(F.col(PARTITION).isin(list(days))).select(*self.columns)

    def copy(self, days: list[dt.date], zone: Path | str) -> Path:
        """``days``' partitions copied into the features zone ``zone`` (a lake's ``features/``),
        replacing what that zone held for them."""
        import shutil

        from jobs.lake.layout import partition_name

        zone = Path(zone)
        for day in days:
            shutil.rmtree(zone / partition_name(day), ignore_errors=True)
            shutil.copytree(self.path / partition_name(day), zone / partition_name(day))
        return zone


@pytest.fixture(scope="session")
def features_zone(spark, lake, config) -> FeaturesZone:
    """:class:`FeaturesZone`: FIRST_DAY..LAST_DAY's features, built once for the whole run (every
    worker's, :func:`built_once`)."""
    from jobs.config import days_ending
    from jobs.features.job import build_features, read_inputs, write_features

    def build(root: Path) -> None:
        days = days_ending(LAST_DAY, (LAST_DAY - FIRST_DAY).days + 1)
        features = build_features(read_inputs(spark, lake, config, days), config, days)
        write_features(features, str(root / "features"))
        (root / "columns.json").write_text(json.dumps(features.columns))

    root = built_once("features-zone", build)
    return FeaturesZone(spark, root / "features", json.loads((root / "columns.json").read_text()))


@pytest.fixture(scope="session")
def config():
    from jobs.config import load_config

    return load_config()


class ConfigPatch:
    """The one way a test changes the pipeline's config: in memory for a function it calls
    (:meth:`replace`), or as a file for a job it starts (:meth:`write`: the bundled pipeline named,
    and only the changes listed, as a deployment's file is).

    A section given as a dict changes only the settings it names (``train={"epochs": 2}``); any
    other value takes the section's place (``baselines=[]``, ``tables={...}``). An explicit
    ``train.train_days`` asks for a window of that length (``TrainSpec.with_overrides``).
    """

    def replace(self, config, **sections):
        """``config`` with ``sections`` changed; dicts go as deep as the sections do
        (``score={"drift": {"psi_threshold": 0.1}}``); checked as a loaded config is."""
        import dataclasses

        changes = {}
        for name, value in sections.items():
            current = getattr(config, name)
            if name == "train" and isinstance(value, dict):
                value = current.with_overrides(**value)
            elif isinstance(value, dict) and dataclasses.is_dataclass(current):
                value = self.replace(current, **value)
            changes[name] = value
        return dataclasses.replace(config, **changes)

    def write(self, folder: Path, *, name: str = "pipeline", base: Path | None = None, **sections) -> Path:
        """``folder/<name>.yaml``: the pipeline ``base`` (default: the bundled flights) with
        ``sections`` changed setting by setting (in nested sections too); a job reads it with
        ``--config`` or ``PIPELINE_CONFIG``, a deployment serves it as ``name`` from ``PIPELINES_DIR``."""
        from jobs.config import DEFAULT_CONFIG, load_config, write_overlay

        base = base or DEFAULT_CONFIG
        train = sections.get("train")
        if isinstance(train, dict) and "train_days" in train:  # a window of that length, as --train-days asks
            reach = load_config(base, profiles=(), overlays=()).train.with_overrides(**train).max_train_days
            sections = {**sections, "train": {**train, "max_train_days": reach}}
        return write_overlay(Path(folder) / f"{name}.yaml", sections, base=base)


@pytest.fixture(scope="session")
def config_patch() -> ConfigPatch:
    """:class:`ConfigPatch`: a test's config, changed in memory or written for a job."""
    return ConfigPatch()


@pytest.fixture(scope="session")
def config_without_gx(config, config_patch):
    """The config with GX's cross-check off: it is tested on its own, elsewhere it only adds time."""
    return config_patch.replace(config, validation={"great_expectations": False})


@pytest.fixture
def small_disk():
    """``mount(folder, size)``: a filesystem of ``size`` (a tmpfs, e.g. ``"1m"``) mounted on the
    empty ``folder``, unmounted at the end; the test is skipped where nothing can be mounted (not
    root, or a container without CAP_SYS_ADMIN). ``fill(folder)`` then leaves about 4 KiB free in
    a dot file, which Spark's readers skip. For the full-disk tests."""
    import subprocess

    mounted: list[Path] = []

    def mount(folder: Path, size: str = "1m") -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a small filesystem here: {done.stderr.strip()}")
        mounted.append(folder)
        return folder

    def fill(folder: Path) -> Path:
        free = os.statvfs(folder)
        filler = folder / ".filler"
        filler.write_bytes(b"\0" * max(free.f_bavail * free.f_frsize - 4096, 0))
        return filler

    mount.fill = fill  # type: ignore[attr-defined]
    yield mount
    for folder in reversed(mounted):
        # lazy: a JVM of the session may still hold a file of it open; the mount goes once it lets go
        subprocess.run(["umount", "--lazy", str(folder)], check=True)

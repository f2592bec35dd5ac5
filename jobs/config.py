"""One typed configuration for every job, and each job's typed command line.

Three tiers, no overlap:
- infrastructure from the environment: ``LAKE_ROOT`` (:mod:`jobs.lake.layout`), ``MLFLOW_TRACKING_URI``,
  ``PIPELINE_MLFLOW_ARTIFACTS``;
- run parameters from the command line (``--run-date`` and friends, see :func:`job_parser`);
- job tunables from ``jobs/pipeline.yaml`` (or ``--config PATH`` / ``PIPELINE_CONFIG``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import yaml

from jobs.features.history import CalendarSpec, HistorySpec
from jobs.lake.layout import ROOT_ENV, Lake, pipeline_home
from jobs.model.calibration import METHODS as CALIBRATIONS  # train.calibration
from jobs.monitoring.spec import MonitoringSpec, monitoring_spec
from jobs.scoring.drift import DriftSpec
from jobs.scoring.shift import ShiftSpec
from jobs.selection.specs import BaselineSpec, EvaluationSpec, SweepSpec, baseline_specs, evaluation_spec, sweep_spec

DEFAULT_CONFIG = Path(__file__).with_name("pipeline.yaml")
TRAINING_WINDOW = "train"
PRECISIONS = ("auto", "bf16", "fp16", "fp32")  # of training steps: see jobs.training.loop.resolve_precision
DATA_PATHS = ("auto", "memory", "stream")  # how a rank reads its share: see jobs.training.stream.resolve_data_path
# who runs the ranks: see jobs.training.resources.choose_launcher
LAUNCHERS = ("auto", "torch_distributor", "in_process")
LR_SCHEDULES = ("constant", "cosine")  # the learning rate over a training's steps (jobs.training.loop.learning_rate_at)
# pyarrow's allocator in a rank: see jobs.training.allocation
ARROW_MEMORY_POOLS = ("system", "mimalloc", "jemalloc", "default")
MAX_MMAP_THRESHOLD = 32 * 1024 * 1024  # train.malloc_mmap_threshold: glibc's ceiling on 64-bit


def check_arrow_memory_pool(name: str, what: str = "train.arrow_memory_pool") -> None:
    """A ValueError naming ``what`` unless ``name`` is one of :data:`ARROW_MEMORY_POOLS` (the
    config, a rank's config and :mod:`jobs.training.allocation` check it alike)."""
    if name not in ARROW_MEMORY_POOLS:
        raise ValueError(f"{what} must be one of {', '.join(ARROW_MEMORY_POOLS)}, got {name!r}")


def check_mmap_threshold(nbytes: int, what: str = "train.malloc_mmap_threshold") -> None:
    """A ValueError naming ``what`` unless ``nbytes`` is a threshold glibc takes (0: its default)."""
    if not 0 <= nbytes <= MAX_MMAP_THRESHOLD:
        raise ValueError(f"{what} must be between 0 (glibc's default) and {MAX_MMAP_THRESHOLD} bytes "
                         f"(glibc's ceiling), got {nbytes}")
DEFAULT_MODEL = "jobs.model.tabular:build_net"  # train.model when the config names none


@dataclass(frozen=True)
class TableSpec:
    """A raw table: its columns with Spark SQL types, and whether it arrives as daily partitions."""

    name: str
    columns: dict[str, str]
    daily: bool
    required: bool = True  # False: a missing daily partition means "no rows that day", with a warning
    # Floating-point columns where NaN, infinities and huge magnitudes are data, not errors.
    allow_non_finite: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        odd = [c for c in self.allow_non_finite if self.columns.get(c) not in ("double", "float")]
        if odd:
            raise ValueError(f"tables.{self.name}.allow_non_finite: {odd} are not double or float columns")

    def ddl(self) -> str:
        """The Spark DDL schema string, in file column order."""
        return ", ".join(f"`{c}` {t}" for c, t in self.columns.items())


@dataclass(frozen=True)
class TableLimits:
    """When a table's batch fails validation as a whole, beyond its rules."""

    max_quarantine_rate: float  # a day quarantining a larger share of its rows fails the run
    row_count_band: tuple[float, float]  # a day's rows / median of the trailing days must lie within
    band_days: int  # trailing days the band compares with (needs at least 3 of them in the raw zone)


@dataclass(frozen=True)
class ValidationSpec:
    suites: str  # "module:function" returning {table: TableSuite}
    feed: str  # the daily table whose rows become feature rows
    defaults: TableLimits
    great_expectations: bool = True  # also run every rule as a GX expectation (report + cross-check)
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    skip_unchanged: bool = True  # a reference table whose raw file passed unchanged is not validated again
    gx_pandas_max_rows: int = 200_000  # GX runs on pandas in the driver for a table's window up to this size

    def limits(self, table: str) -> TableLimits:
        """The table's limits: the defaults with its overrides applied."""
        values = {**self.defaults.__dict__, **self.overrides.get(table, {})}
        values["row_count_band"] = tuple(values["row_count_band"])
        return TableLimits(**values)


@dataclass(frozen=True)
class FeatureSpec:
    builder: str
    id_columns: list[str]
    categorical: list[str]
    numeric: list[str]
    label: str
    label_description: str = "the positive class"  # what a probability is of, in reports for people
    # Point-in-time label history and calendar columns the features job adds to the builder's rows
    # (jobs/features/history.py); None: none.
    history: HistorySpec | None = None
    calendar: CalendarSpec | None = None

    def __post_init__(self) -> None:
        if isinstance(self.history, dict):
            object.__setattr__(self, "history", HistorySpec(**self.history))
        if isinstance(self.calendar, dict):
            object.__setattr__(self, "calendar", CalendarSpec(**self.calendar))
        clash = set(self.derived) & {*self.categorical, *self.numeric, *self.id_columns, self.label}
        if clash:
            raise ValueError(f"features: the builder's columns {sorted(clash)} have the names of history or "
                             "calendar columns; rename them or turn features.history / features.calendar off")

    @property
    def derived(self) -> list[str]:
        """The numeric inputs the features job adds to the builder's (history, calendar)."""
        return [*(self.history.columns() if self.history else []), *(self.calendar.columns() if self.calendar else [])]

    @property
    def model_numeric(self) -> list[str]:
        """Every numeric model input: the builder's (``numeric``), then the derived ones."""
        return [*self.numeric, *self.derived]

    @property
    def inputs(self) -> list[str]:
        """Model input columns, in the order the model expects them."""
        return [*self.categorical, *self.model_numeric]


@dataclass(frozen=True)
class TrainSpec:
    model_name: str
    experiment: str
    train_days: int
    holdout_days: int
    epochs: int
    batch_size: int
    learning_rate: float
    min_category_count: int
    seed: int
    num_processes: int
    local_mode: bool
    use_gpu: bool
    promotion_metric: str
    promotion_margin: float
    require_approval: bool = False  # a winning version waits for a person before it becomes champion
    gpu_batch_size: int = 2048
    precision: str = "auto"
    collective_timeout_s: int = 300  # how long a rank waits in a collective for a peer (gloo's default: 30 min)
    model: str = DEFAULT_MODEL  # module:function(preprocessor, hyperparameters) -> torch module
    validation_days: int = 0  # between the training and the holdout days: threshold and sweep choices
    # An expanding window: the training days reach back past train_days over every earlier day the
    # lake has features for (without a gap), up to this many days. None: exactly train_days.
    max_train_days: int | None = None
    # encoding clips each number to its range in the training window (jobs.model.tabular.Preprocessor)
    clip_to_training_range: bool = False
    data_path: str = "auto"  # how a rank reads its share: memory, stream, or auto (jobs.training.stream)
    # who runs the ranks: torch_distributor, in_process (one rank in the job's own process), or auto
    # (in_process for a local CPU window of at most in_process_max_rows labelled rows)
    launcher: str = "torch_distributor"
    in_process_max_rows: int = 250_000
    buffer_rows: int = 65536  # a streaming rank's shuffle buffer, in rows
    read_ahead: int = 2  # row groups a streaming rank reads ahead of its steps
    read_batch_rows: int = 16384  # rows of a row group decoded and converted at once by a streaming rank
    arrow_memory_pool: str = "system"  # pyarrow's allocator in the ranks (ARROW_MEMORY_POOLS)
    malloc_mmap_threshold: int = 1048576  # bytes; glibc maps larger blocks on their own in the ranks (0: its default)
    weight_decay: float = 0.0  # AdamW's decoupled weight decay (0: plain Adam)
    lr_schedule: str = "constant"  # constant, or cosine: from learning_rate down to 0 over the training's steps
    # true: the logged net is the epoch's whose validation days scored best by promotion_metric (rank 0
    # evaluates them after every epoch), not the last epoch's; no validation days: the last epoch's
    keep_best_epoch: bool = False
    # temperature: every family's model is logged with a logit scale fitted on the validation days
    # (jobs.model.calibration); none: probabilities as the model gives them
    calibration: str = "none"
    hyperparameters: dict[str, Any] = field(default_factory=lambda: {"embedding_dim": 6, "hidden_units": [64, 32]})

    def __post_init__(self) -> None:
        from jobs.selection.gate import PROMOTION_METRICS

        if self.precision not in PRECISIONS:
            raise ValueError(f"train.precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.promotion_metric not in PROMOTION_METRICS:
            raise ValueError(f"train.promotion_metric must be one of {', '.join(PROMOTION_METRICS)}, "
                             f"got {self.promotion_metric!r}")
        if self.calibration not in CALIBRATIONS:
            raise ValueError(f"train.calibration must be one of {', '.join(CALIBRATIONS)}, got {self.calibration!r}")
        if self.data_path not in DATA_PATHS:
            raise ValueError(f"train.data_path must be one of {', '.join(DATA_PATHS)}, got {self.data_path!r}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"train.lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got {self.lr_schedule!r}")
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"train.launcher must be one of {', '.join(LAUNCHERS)}, got {self.launcher!r}")
        if self.launcher == "in_process" and not self.local_mode:
            raise ValueError("train.launcher in_process runs the one rank in the train job's own process: it needs "
                             "train.local_mode true (a cluster's ranks run on its executors: use torch_distributor "
                             "or auto)")
        if self.in_process_max_rows < 0:
            raise ValueError(f"train.in_process_max_rows must be at least 0, got {self.in_process_max_rows}")
        check_arrow_memory_pool(self.arrow_memory_pool)
        check_mmap_threshold(self.malloc_mmap_threshold)
        for name in ("buffer_rows", "read_ahead", "read_batch_rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be at least 1, got {getattr(self, name)}")
        if self.validation_days < 0:
            raise ValueError(f"train.validation_days must be at least 0, got {self.validation_days}")
        if self.max_train_days is not None and self.max_train_days < self.train_days:
            raise ValueError(f"train.max_train_days ({self.max_train_days}) must be at least train.train_days "
                             f"({self.train_days}), or null for a fixed window")
        for name in ("train_days", "holdout_days", "epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be at least 1, got {getattr(self, name)}")
        if not self.learning_rate > 0:
            raise ValueError(f"train.learning_rate must be positive, got {self.learning_rate}")
        if not 0 <= self.weight_decay < 1:
            raise ValueError(f"train.weight_decay must be in [0, 1), got {self.weight_decay}")
        dropout = self.hyperparameters.get("dropout", 0.0)
        if not (isinstance(dropout, (int, float)) and 0 <= dropout < 1):
            raise ValueError(f"train.hyperparameters.dropout must be a number in [0, 1), got {dropout!r}")
        wide = self.hyperparameters.get("wide", False)
        if wide not in (False, True, "onehot"):
            raise ValueError(f"train.hyperparameters.wide must be true, false or onehot, got {wide!r}")
        members = self.hyperparameters.get("members", 1)
        if not (isinstance(members, int) and not isinstance(members, bool) and members >= 1):
            raise ValueError(f"train.hyperparameters.members must be a whole number of nets, at least 1, "
                             f"got {members!r}")

    @property
    def window_days(self) -> int:
        return self.train_days + self.validation_days + self.holdout_days


@dataclass(frozen=True)
class TrackingSpec:
    """How MLflow calls behave when the tracking server is slow or gone: each setting maps to the
    MLflow environment variable in :data:`TRACKING_ENV` (a variable already set in the environment
    wins). A failed request (refused, timed out, or answered 408, 429, 500, 502, 503 or 504: a
    server whose database is down answers 503) is tried again after 0, 2, 4, 8, 16 and 32 s
    (``backoff_factor`` * 2**(n-1) from the second retry, as urllib3 waits): the defaults ride out a
    database restart of 30 s and report a server that is really gone within :attr:`give_up_after`
    (about 65 s when its port refuses), not MLflow's 4 minutes."""

    request_timeout: int = 30  # seconds one HTTP request may take
    max_retries: int = 6  # retries of a failed request
    backoff_factor: int = 1  # retry n waits about backoff_factor * 2**(n-1) s
    backoff_jitter: float = 0.5  # plus up to this many seconds at random
    check_timeout: float = 10  # the up-front check of the server (jobs.tracking.check_tracking_server)

    @property
    def retry_waits(self) -> list[float]:
        """The waits before each retry, jitter aside (urllib3's: none before the first, then
        ``backoff_factor`` * 2**(n-1), at most 120 s)."""
        return [0.0] + [min(120.0, self.backoff_factor * 2.0 ** (n - 1)) for n in range(2, self.max_retries + 1)]

    @property
    def give_up_after(self) -> float:
        """Seconds a call to a server that refuses connections takes to fail: every wait with its
        largest jitter. A server that accepts but never answers adds ``request_timeout`` per try."""
        return sum(self.retry_waits) + self.max_retries * self.backoff_jitter

    def apply(self) -> dict[str, str]:
        """Bound every MLflow HTTP call of this process and of the processes it starts (the training
        ranks inherit the environment): set the MLflow variables of these settings
        (:data:`TRACKING_ENV`) that the environment does not set already. Returns what is in effect."""
        for name, variable in TRACKING_ENV.items():
            os.environ.setdefault(variable, str(getattr(self, name)))
        return {variable: os.environ[variable] for variable in TRACKING_ENV.values()}


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """Set these environment variables for the block (and the processes it starts), then put back
    what was there before, unset ones unset again."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


TRACKING_ENV = {  # TrackingSpec field -> MLflow's environment variable (mlflow/environment_variables.py)
    "request_timeout": "MLFLOW_HTTP_REQUEST_TIMEOUT",
    "max_retries": "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
    "backoff_factor": "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
    "backoff_jitter": "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER",
}


@dataclass(frozen=True)
class ScoreSpec:
    batch_size: int
    use_gpu: bool = False
    gpu_batch_size: int = 262144
    drift: DriftSpec = field(default_factory=DriftSpec)
    recent_shift: ShiftSpec = field(default_factory=lambda: ShiftSpec(days=0))  # off unless configured
    # rows a scoring task takes at least: fewer rows go to fewer tasks, each of which starts a Python
    # worker that loads the model (jobs.scoring.predictor.scoring_tasks); 0: as Spark split the files
    rows_per_task: int = 500_000

    def __post_init__(self) -> None:
        if self.rows_per_task < 0:
            raise ValueError(f"score.rows_per_task must be 0 (Spark's split) or more, got {self.rows_per_task}")


@dataclass(frozen=True)
class PipelineConfig:
    dataset: str
    tables: dict[str, TableSpec]
    validation: ValidationSpec
    features: FeatureSpec
    train: TrainSpec
    score: ScoreSpec
    csv_options: dict[str, str] = field(default_factory=dict)
    tracking: TrackingSpec = field(default_factory=TrackingSpec)
    source: str = field(default="", compare=False)
    evaluation: EvaluationSpec = field(default_factory=EvaluationSpec)
    baselines: tuple[BaselineSpec, ...] = ()
    sweep: SweepSpec = field(default_factory=SweepSpec)
    monitoring: MonitoringSpec = field(default_factory=MonitoringSpec)


def load_config(path: str | os.PathLike[str] | None = None) -> PipelineConfig:
    """Read the pipeline config; ``path`` defaults to ``$PIPELINE_CONFIG`` or the bundled YAML."""
    path = Path(path or os.environ.get("PIPELINE_CONFIG") or DEFAULT_CONFIG)
    raw: dict[str, Any] = yaml.safe_load(path.read_text())
    try:
        tables = {
            name: TableSpec(
                name=name,
                columns=dict(spec["columns"]),
                daily=bool(spec["daily"]),
                required=bool(spec.get("required", True)),
                allow_non_finite=tuple(spec.get("allow_non_finite") or ()),
            )
            for name, spec in raw["tables"].items()
        }
        config = PipelineConfig(
            dataset=raw["dataset"],
            tables=tables,
            validation=_validation_spec(raw["validation"]),
            features=FeatureSpec(**raw["features"]),
            train=TrainSpec(**raw["train"]),
            score=_score_spec(raw["score"]),
            csv_options={k: str(v) for k, v in (raw.get("csv_options") or {}).items()},
            tracking=TrackingSpec(**(raw.get("tracking") or {})),
            source=str(path),
            evaluation=evaluation_spec(raw.get("evaluation")),
            baselines=baseline_specs(raw.get("baselines")),
            sweep=sweep_spec(raw.get("sweep")),
            monitoring=monitoring_spec(raw.get("monitoring")),
        )
        if config.evaluation.chosen_on_validation and config.train.validation_days < 1:
            raise ValueError("evaluation.threshold is chosen on the validation days: set train.validation_days")
        return config
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"invalid pipeline config {path}: {exc}") from exc


def _score_spec(raw: dict[str, Any]) -> ScoreSpec:
    raw = dict(raw)
    drift = raw.pop("drift", None) or {}
    shift = ShiftSpec(**(raw.pop("recent_shift", None) or {"days": 0}))
    return ScoreSpec(**raw, drift=DriftSpec(**{**drift, "ignore": list(drift.get("ignore") or [])}), recent_shift=shift)


def _validation_spec(raw: dict[str, Any]) -> ValidationSpec:
    raw = dict(raw)
    overrides = raw.pop("tables", None) or {}
    suites, feed, use_gx = raw.pop("suites"), raw.pop("feed"), bool(raw.pop("great_expectations", True))
    skip_unchanged = bool(raw.pop("skip_unchanged", True))
    pandas_max_rows = int(raw.pop("gx_pandas_max_rows", 200_000))
    raw["row_count_band"] = tuple(raw["row_count_band"])
    spec = ValidationSpec(suites, feed, TableLimits(**raw), use_gx, overrides, skip_unchanged, pandas_max_rows)
    for table in overrides:
        spec.limits(table)  # unknown keys fail here, at load time
    return spec


def import_object(ref: str) -> Callable[..., Any]:
    """Import ``package.module:attribute``, the form config uses to name user code."""
    module, _, attr = ref.partition(":")
    if not attr:
        raise ValueError(f"expected 'module:attribute', got {ref!r}")
    return getattr(importlib.import_module(module), attr)


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{pipeline_home() / 'mlflow.db'}"


def artifact_root() -> str:
    return os.environ.get("PIPELINE_MLFLOW_ARTIFACTS") or str(pipeline_home() / "mlartifacts")


def days_ending(run_date: dt.date, days: int) -> list[dt.date]:
    """The ``days`` consecutive dates that end with ``run_date``, oldest first."""
    if days < 1:
        raise ValueError(f"a window needs at least one day, got {days}")
    return [run_date - dt.timedelta(days=n) for n in range(days - 1, -1, -1)]


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from exc


def parse_bool(text: str) -> bool:
    """A command-line true/false."""
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"not true or false: {text!r}")


def optional(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """A command-line value of ``kind``, or the empty string for "the config's" (what an Airflow
    template renders for a param left empty)."""

    def parse(text: str) -> Any:
        return kind(text) if text else None

    parse.__name__ = getattr(kind, "__name__", "value")  # argparse names the type in its errors
    return parse


def optional_choice(choices: tuple[str, ...]) -> Callable[[str], str | None]:
    """A command-line value from ``choices``, or the empty string for "the config's" (what an
    Airflow template renders for a param left empty)."""

    def parse(text: str) -> str | None:
        if not text:
            return None
        if text not in choices:
            raise argparse.ArgumentTypeError(f"not one of {', '.join(choices)}: {text!r}")
        return text

    return parse


def job_parser(description: str | None, *, window: bool = False) -> argparse.ArgumentParser:
    """The CLI contract every job shares: an explicit run date, the config and the lake; with
    ``window``, the window of days ending with the run date (``--days``). A job adds its own options
    and parses with :func:`parse_job_args` into its own :class:`JobArgs` subclass."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--run-date", type=_date, required=True, help="the day the run is for (YYYY-MM-DD)")
    if window:
        parser.add_argument(
            "--days",
            default="1",
            help="window length: the DAYS days ending with --run-date (default 1);\n"
            f"'{TRAINING_WINDOW}' means the training window of the config (train_days + holdout_days)",
        )
    parser.add_argument("--config", default=None, help="pipeline YAML (default: $PIPELINE_CONFIG or bundled)")
    parser.add_argument("--lake-root", default=None, help=f"lake root (default: ${ROOT_ENV})")
    return parser


ArgsT = TypeVar("ArgsT", bound="JobArgs")


@dataclass(frozen=True)
class JobArgs:
    """The parsed CLI contract every job shares; each job's own options are fields of a subclass."""

    run_date: dt.date
    config: PipelineConfig
    lake: Lake


@dataclass(frozen=True)
class WindowArgs(JobArgs):
    """A job over a window of days ending with the run date (``--days``)."""

    days: int

    @property
    def window(self) -> list[dt.date]:
        return days_ending(self.run_date, self.days)


def parse_job_args(
    parser: argparse.ArgumentParser, argv: list[str] | None = None, kind: type[ArgsT] = JobArgs,  # type: ignore[assignment]
    train_overrides: tuple[str, ...] = (),
) -> ArgsT:
    """Parse ``argv`` into ``kind``: its fields are the shared ones and the job's own options (the
    parser's destinations); an option the job did not declare is refused by the parser. Options
    named in ``train_overrides`` are not fields: given (not None), each replaces the ``train.*``
    setting of its name in the config."""
    ns = vars(parser.parse_args(argv))
    overrides = {name: value for name in train_overrides if (value := ns.pop(name)) is not None}
    if "train_days" in overrides:
        overrides.setdefault("max_train_days", None)  # a window asked for by its length is that long
    config = load_config(ns.pop("config"))
    config.tracking.apply()  # every job's MLflow calls fail within seconds when the server is gone
    if overrides:
        try:
            config = replace(config, train=replace(config.train, **overrides))
        except ValueError as err:
            parser.error(str(err))
    lake = Lake.at(ns.pop("lake_root"))
    if "days" in ns:
        days_arg = ns.pop("days")
        if days_arg == TRAINING_WINDOW:
            ns["days"] = config.train.window_days
        elif days_arg.isdigit() and int(days_arg) >= 1:
            ns["days"] = int(days_arg)
        else:
            parser.error(f"--days takes a whole number of at least 1 or '{TRAINING_WINDOW}', got {days_arg!r}")
    return kind(config=config, lake=lake, **ns)

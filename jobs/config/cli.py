"""Every job's command line: the contract they share (run date, the config's files, the lake) and the
run-time overrides of ``train.*`` settings, declared once in :data:`RUN_OVERRIDES`.

An override's type, bounds, choices and help come from its field in :class:`jobs.config.TrainSpec`;
from the one list are made the DAG's ``Param`` schemas (:func:`param_schema`), each job's options
(``--epochs 5``, :func:`add_overrides`) and the one renderer that hands a run's params to a job
(:func:`override_json`, passed as ``--overrides JSON``: only what was given, so "not given" is
absent, never an empty string).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from jobs.config.env import days_ending
from jobs.config.files import ConfigError, describe, load_config
from jobs.config.pipeline import PipelineConfig
from jobs.config.training import TrainSpec
from jobs.lake.layout import ROOT_ENV, Lake

# The train.* settings a run may change, in the order the DAG shows them. One line adds one.
RUN_OVERRIDES = (
    "train_days",
    "max_train_days",
    "holdout_days",
    "epochs",
    "learning_rate",
    "weight_decay",
    "lr_schedule",
    "keep_best_epoch",
    "hyperparameters",
    "num_processes",
    "use_gpu",
    "local_mode",
    "launcher",
    "precision",
    "promotion_metric",
    "promotion_margin",
    "require_approval",
)
WINDOW_OVERRIDES = ("train_days", "max_train_days", "holdout_days")  # what shapes a training's window
TRAINING_WINDOW = "train"  # --days train: the config's training window


SCHEMAS: dict[str, dict[str, Any]] = TypeAdapter(TrainSpec).json_schema()["properties"]  # every train.* setting


def _json_type(schema: dict[str, Any]) -> str:
    if "type" in schema:
        return schema["type"]
    if "enum" in schema:
        return "string"
    kinds = [s.get("type") for s in schema.get("anyOf", []) if s.get("type") != "null"]
    return kinds[0] if kinds else "string"


def _value_schema(name: str) -> dict[str, Any]:
    """A setting's schema for its values: the branch that is not null when it may be null."""
    schema = SCHEMAS[name]
    return next((s for s in schema.get("anyOf", []) if s.get("type") != "null"), schema)


def param_schema(name: str) -> dict[str, Any]:
    """The JSON schema of an override's DAG ``Param`` (null: not given, the config's setting)."""
    schema, inner = SCHEMAS[name], _value_schema(name)
    out: dict[str, Any] = {"type": ["null", _json_type(schema)], "description": schema.get("description", "")}
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in inner:
            out[key] = inner[key]
    if "enum" in inner:
        out["enum"] = [None, *inner["enum"]]
    return out


def parse_bool(text: str) -> bool:
    """A command-line true/false."""
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"not true or false: {text!r}")


def _parser_of(name: str) -> Any:
    kind = _json_type(SCHEMAS[name])
    if kind == "boolean":
        return parse_bool
    if kind == "object":
        return json.loads
    if kind in ("integer", "number"):
        return int if kind == "integer" else float
    return str


def add_overrides(parser: argparse.ArgumentParser, names: Iterable[str] | None = None) -> None:
    """Each override of ``names`` as an option of the job (``--train-days N``), and ``--overrides
    JSON`` (what the DAGs pass: :func:`override_json`); an option given wins over the JSON."""
    names = tuple(RUN_OVERRIDES if names is None else names)
    group = parser.add_argument_group("run-time overrides of train.* settings (default: the config's)")
    group.add_argument("--overrides", default=None, metavar="JSON",
                       help="a JSON object of the settings below to change, e.g. {\"epochs\": 5}")
    for name in names:
        group.add_argument(f"--{name.replace('_', '-')}", dest=f"override_{name}", type=_parser_of(name),
                           default=None, choices=_value_schema(name).get("enum"),
                           help=SCHEMAS[name].get("description", ""))
    parser.set_defaults(_override_names=names)


def override_json(params: Mapping[str, Any], names: Iterable[str] | None = None) -> str:
    """The overrides among a run's ``params`` that are set, as the JSON ``--overrides`` takes (the
    one renderer: a DAG's templates call it as a macro, its Python tasks directly)."""
    names = RUN_OVERRIDES if names is None else names
    return json.dumps({name: params[name] for name in names if params.get(name) is not None}, sort_keys=True)


def overrides_given(ns: dict[str, Any]) -> dict[str, Any]:
    """The overrides a parsed command line gives (popped from ``ns``): ``--overrides``, then each option."""
    names = ns.pop("_override_names", ())
    text = ns.pop("overrides", None)
    given: dict[str, Any] = {}
    if text:
        try:
            given = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"--overrides: not a JSON object ({err}): {text!r}") from None
        if not isinstance(given, dict):
            raise ConfigError(f"--overrides: a JSON object of settings, got {text!r}")
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise ConfigError(f"--overrides: {unknown} are not overrides this job takes ({', '.join(names)})")
    for name in names:
        value = ns.pop(f"override_{name}", None)
        if value is not None:
            given[name] = value
    return {k: v for k, v in given.items() if v is not None}


def apply_overrides(config: PipelineConfig, overrides: Mapping[str, Any]) -> PipelineConfig:
    """``config`` with these ``train.*`` settings changed for one run, checked as the config is."""
    if not overrides:
        return config
    try:
        return dataclasses.replace(config, train=config.train.with_overrides(**overrides))
    except ValidationError as err:
        raise ConfigError(describe(err, {}, "--overrides", "invalid run-time override", ("train",))) from None


def with_empty_days(config: PipelineConfig, lake: Lake, last: dt.date | None = None) -> PipelineConfig:
    """``config`` whose ``feed_calendar`` also closes the feed's empty days up to ``last`` (the raw
    partitions landed without rows, :func:`jobs.lake.raw.empty_partitions`) when it has
    ``empty_days``; ``config`` itself otherwise."""
    calendar = config.feed_calendar
    if not calendar.empty_days:
        return config
    from jobs.lake.raw import empty_partitions

    empty = empty_partitions(lake, config.validation.feed, last)
    return dataclasses.replace(config, feed_calendar=calendar.with_closed(empty)) if empty else config


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from exc


def job_parser(description: str | None, *, window: bool = False) -> argparse.ArgumentParser:
    """The CLI contract every job shares: an explicit run date, the config's files and the lake;
    with ``window``, the window of days ending with the run date (``--days``). A job adds its own
    options and parses with :func:`parse_job_args` into its own :class:`JobArgs` subclass."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--run-date", type=_date, required=True, help="the day the run is for (YYYY-MM-DD)")
    if window:
        parser.add_argument("--days", default="1",
                            help="window length: the DAYS days ending with --run-date (default 1);\n"
                                 f"'{TRAINING_WINDOW}' means the config's training window (train_days + "
                                 "validation_days + holdout_days)")
    parser.add_argument("--config", default=None,
                        help="the pipeline: a folder with dataset.yaml, or one YAML file (default: $PIPELINE_CONFIG "
                             "or the bundled pipelines/flights)")
    parser.add_argument("--profile", action="append", default=None,
                        help="a profile laid over it (demo, replay...; repeat for more; default: $PIPELINE_PROFILES)")
    parser.add_argument("--overlay", action="append", default=None,
                        help="a YAML file laid over it last (repeat for more; default: $PIPELINE_OVERLAYS)")
    parser.add_argument("--lake-root", default=None, help=f"lake root (default: ${ROOT_ENV})")
    return parser


ArgsT = TypeVar("ArgsT", bound="JobArgs")


@dataclasses.dataclass(frozen=True)
class JobArgs:
    """The parsed CLI contract every job shares; each job's own options are fields of a subclass."""

    run_date: dt.date
    config: PipelineConfig
    lake: Lake


@dataclasses.dataclass(frozen=True)
class WindowArgs(JobArgs):
    """A job over a window of days ending with the run date (``--days``): the open ones of the
    feed's calendar (``feed_calendar``); a closed day is passed over, not missing."""

    days: int

    @property
    def window(self) -> list[dt.date]:
        """The window's open days, oldest first (every day of it with the default calendar)."""
        return self.config.feed_calendar.open_days(days_ending(self.run_date, self.days))

    def nothing_open(self, log: logging.Logger, job: str) -> bool:
        """Log the window's closed days; True when none of its days is open (the job has nothing
        to do and succeeds)."""
        span = days_ending(self.run_date, self.days)
        closed = [day for day in span if not self.config.feed_calendar.is_open(day)]
        if closed:
            log.info("%s: %s closed for the feed (feed_calendar): no rows to expect, passed over", job,
                     ", ".join(map(str, closed)))
        if len(closed) == len(span):
            log.info("%s: no open day in %s..%s: nothing to do", job, span[0], span[-1])
            return True
        return False


def parse_job_args(parser: argparse.ArgumentParser, argv: list[str] | None = None,
                   kind: type[ArgsT] = JobArgs) -> ArgsT:  # type: ignore[assignment]
    """Parse ``argv`` into ``kind``: its fields are the shared ones and the job's own options (the
    parser's destinations). The overrides the job takes (:func:`add_overrides`) change ``config.train``
    and are recorded in ``kind``'s ``overrides`` field when it has one. A config mistake raises
    :class:`ConfigError` (a usage error: the job exits without a retry)."""
    ns = vars(parser.parse_args(argv))
    overrides = overrides_given(ns)
    config = load_config(ns.pop("config"), profiles=ns.pop("profile"), overlays=ns.pop("overlay"))
    config.tracking.apply()  # every job's MLflow calls fail within seconds when the server is gone
    config = apply_overrides(config, overrides)
    lake = Lake.at(ns.pop("lake_root"))
    config = with_empty_days(config, lake, ns["run_date"])
    if "days" in ns:
        days_arg = ns.pop("days")
        if days_arg == TRAINING_WINDOW:
            ns["days"] = config.train.window_days
        elif days_arg.isdigit() and int(days_arg) >= 1:
            ns["days"] = int(days_arg)
        else:
            parser.error(f"--days takes a whole number of at least 1 or '{TRAINING_WINDOW}', got {days_arg!r}")
    if "overrides" in {f.name for f in dataclasses.fields(kind)}:
        ns["overrides"] = overrides
    return kind(config=config, lake=lake, **ns)

"""The whole config of a pipeline: its sections and the rules between them, checked when it loads."""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import field_validator, model_validator

from jobs.config.base import section, setting
from jobs.config.dataset import FeatureSpec, FeedCalendar, TableSpec, ValidationSpec
from jobs.config.env import import_object
from jobs.config.serving import MonitoringSpec, ScoreSpec, TrackingSpec
from jobs.config.training import DEFAULT_BASELINES, BaselineSpec, EvaluationSpec, SweepSpec, TrainSpec
from jobs.lake.layout import PARTITION as RESERVED_COLUMN


@section
class PipelineConfig:
    """A pipeline's config: the dataset's description and the tunables of every stage."""

    dataset: str = setting(doc="the dataset's name, in reports and run params")
    tables: dict[str, TableSpec] = setting(doc="the raw tables by name")
    feed_calendar: FeedCalendar = setting(FeedCalendar(), "the days the feed has rows (default: every day)")
    validation: ValidationSpec = setting(doc="the rules' module, the feed, the limits of a day's batch")
    features: FeatureSpec = setting(doc="the feature builder, its columns and label")
    train: TrainSpec = setting(doc="the training window, the net, the launch and the gate")
    csv_options: dict[str, str] = setting({}, "Spark CSV reader options of the raw files")
    score: ScoreSpec = setting(ScoreSpec(), "nightly scoring, the recent-outcome shift and drift")
    tracking: TrackingSpec = setting(TrackingSpec(), "how MLflow calls behave when the server is slow or gone")
    evaluation: EvaluationSpec = setting(EvaluationSpec(), "the evaluation report of every candidate")
    baselines: tuple[BaselineSpec, ...] = setting(DEFAULT_BASELINES, "the MLlib baselines a candidate must beat")
    sweep: SweepSpec = setting(SweepSpec(), "the hyperparameter sweep's space and its blend")
    monitoring: MonitoringSpec = setting(MonitoringSpec(), "the monitor of served days, challengers and decay")
    # where it was read from: the pipeline's file or folder, and every file merged, in order
    source: str = dataclasses.field(default="", compare=False, repr=False)
    layers: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)

    @field_validator("tables", mode="before")
    @classmethod
    def _named(cls, tables: Any) -> Any:
        if isinstance(tables, dict):
            return {name: {"name": name, **spec} if isinstance(spec, dict) else spec for name, spec in tables.items()}
        return tables

    @field_validator("csv_options", mode="before")
    @classmethod
    def _text(cls, options: Any) -> Any:
        if isinstance(options, dict):  # YAML's true and 1 are what Spark's reader takes as "true" and "1"
            return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}
        return options

    @model_validator(mode="after")
    def _rules(self) -> PipelineConfig:
        _check_tables(self)
        _check_declared_rules(self)
        _check_columns(self)
        _check_selection(self)
        return self


def _check_tables(config: PipelineConfig) -> None:
    feed = config.tables.get(config.validation.feed)
    if feed is None:
        raise ValueError(f"validation.feed: {config.validation.feed!r} is not a table of `tables` "
                         f"({', '.join(config.tables)})")
    if not feed.daily:
        raise ValueError(f"validation.feed: the feed {feed.name!r} must be a daily table (daily: true)")
    unknown = sorted(set(config.validation.tables) - set(config.tables))
    if unknown:
        raise ValueError(f"validation.tables: {unknown} are not tables of `tables` ({', '.join(config.tables)})")
    for table in config.tables.values():
        odd = [c for c in table.columns if c == RESERVED_COLUMN or c.startswith("_")]
        if odd:
            raise ValueError(f"tables.{table.name}.columns: {odd}: a column may not be named {RESERVED_COLUMN!r} (the "
                             "lake's partition column) or start with '_' (the validate job's own); rename it")


def _check_declared_rules(config: PipelineConfig) -> None:
    """``validation.rules``: rules or a module at least; every table, column and rule named exists."""
    spec = config.validation
    if spec.suites is None and not spec.rules:
        raise ValueError("validation: no rules: write them under validation.rules.<table> (not_null, ranges, values, "
                         "references, patterns, conditions) or name a module's function in validation.suites")
    for name, rules in spec.rules.items():
        where = f"validation.rules.{name}"
        table = config.tables.get(name)
        if table is None:
            raise ValueError(f"{where}: {name!r} is not a table of `tables` ({', '.join(config.tables)})")
        missing = [c for c in dict.fromkeys(rules.named_columns()) if c not in table.columns]
        if missing:
            raise ValueError(f"{where}: {missing} are not columns of the table ({', '.join(table.columns)})")
        if rules.date is not None and not table.daily:
            raise ValueError(f"{where}.date: {name} is a reference table (daily: false); only a daily table's rows "
                             "have a day")
        for column, reference in rules.references.items():
            other, _, other_column = reference.partition(".")
            if other_column not in getattr(config.tables.get(other), "columns", {}):
                raise ValueError(f"{where}.references.{column}: {reference!r} is not a table.column of `tables`")
        for column, (low, high) in rules.ranges.items():
            if low is not None and high is not None and low > high:
                raise ValueError(f"{where}.ranges.{column}: [{low}, {high}]: the minimum is above the maximum")
        names = [rule[0] for rule in rules.declared()]
        unknown = [n for n in rules.warn if n not in names]
        if unknown:
            raise ValueError(f"{where}.warn: {unknown} are not rules of the table ({', '.join(names)})")


def declared_columns(config: PipelineConfig) -> list[str]:
    """Without a builder: the feature rows' columns, in order: the feed's, each join's added ones,
    the expressions', the label. Raises ValueError naming the key where a table, key or column the
    config names does not exist, or two columns would share a name."""
    spec = config.features
    columns = list(config.tables[config.validation.feed].columns)
    for k, join in enumerate(spec.joins):
        where = f"features.joins[{k}]"
        table = config.tables.get(join.table)
        if table is None:
            raise ValueError(f"{where}.table: {join.table!r} is not a table of `tables` ({', '.join(config.tables)})")
        missing = [c for c in join.on if c not in columns]
        if missing:
            raise ValueError(f"{where}.on: {missing} are not columns of the rows so far ({', '.join(columns)})")
        missing = [c for c in join.right_keys() if c not in table.columns]
        if missing:
            raise ValueError(f"{where}.on: {missing} are not columns of {join.table} ({', '.join(table.columns)}): "
                             "name the table's key under rename")
        added = join.added(table)
        missing = [c for c in added if c not in table.columns]
        if missing:
            raise ValueError(f"{where}.columns: {missing} are not columns of {join.table}")
        clash = [join.prefix + c for c in added if join.prefix + c in columns]
        if clash:
            raise ValueError(f"{where}: {clash} are columns already: give the join a prefix, or name its columns")
        columns += [join.prefix + c for c in added]
    for name in spec.expressions:
        if name in columns:
            raise ValueError(f"features.expressions.{name}: a column of that name is there already: rename it")
        columns.append(name)
    if spec.label_expression is not None:
        if spec.label in columns:
            raise ValueError(f"features.label_expression: the label {spec.label!r} is a column already: name the "
                             "label column apart (features.label) or drop the expression")
        columns.append(spec.label)
    return columns


def _check_columns(config: PipelineConfig) -> None:
    """Every column the config names exists where it is read: segments and history keys among the
    builder's columns, and those among the tables' or the builder's declared ones."""
    spec = config.features
    rows = {*spec.id_columns, *spec.categorical, *spec.numeric, spec.label}
    if spec.history:
        for name, columns in spec.history.keys.items():
            missing = [c for c in columns if c not in rows]
            if missing:
                raise ValueError(f"features.history.keys.{name}: {missing} are not columns of the builder's rows "
                                 "(features.id_columns, categorical, numeric or label): add them there or fix the key")
    missing = [c for c in config.evaluation.segments if c not in rows | set(spec.derived)]
    if missing:
        raise ValueError(f"evaluation.segments: {missing} are not feature columns (features.id_columns, categorical, "
                         "numeric, or a history or calendar column): name columns the feature rows have")
    if spec.builder is None:
        found = declared_columns(config)
        where = (f"are not columns of the feature rows (the feed {config.validation.feed}'s, the joins', the "
                 f"expressions', the label): {', '.join(found)}")
    elif spec.joins or spec.expressions or spec.label_expression is not None:
        raise ValueError(f"features: joins, expressions and label_expression make the rows without a builder; "
                         f"{spec.builder} makes them here: drop one or the other")
    else:
        provided = _builder_provides(spec.builder)
        if provided is None:
            return
        found = [*{c for table in config.tables.values() for c in table.columns}, *provided]
        where = (f"are in no table and not among the columns {spec.builder} declares it adds (its `provides`): fix "
                 "the name, or add the column to the builder and its `provides`")
    for key in ("label", "id_columns", "categorical", "numeric"):
        value = getattr(spec, key)
        missing = [c for c in ([value] if isinstance(value, str) else value) if c not in found]
        if missing:
            raise ValueError(f"features.{key}: {missing} {where}")


def _builder_provides(builder: str) -> tuple[str, ...] | None:
    """The columns the builder declares it adds to its tables' (its ``provides`` attribute), or
    None when it declares none (its columns are then met when the features job runs)."""
    try:
        function = import_object(builder)
    except ValueError as err:
        raise ValueError(f"features.builder: {err}") from err
    except (ImportError, AttributeError) as err:
        raise ValueError(f"features.builder: cannot import {builder!r} ({err}): is its module on the Python "
                         "path, and the function's name right?") from err
    provided = getattr(function, "provides", None)
    return tuple(provided) if provided is not None else None


def _check_selection(config: PipelineConfig) -> None:
    if config.evaluation.chosen_on_validation and config.train.validation_days < 1:
        raise ValueError("train.validation_days: evaluation.threshold validation_f1 is chosen on the validation "
                         "days: set train.validation_days to 1 or more, or evaluation.threshold to a probability")
    names = [spec.name for spec in config.baselines]
    if len(set(names)) != len(names):
        raise ValueError(f"baselines: names must be unique, got {names}")

"""The dataset's description: its raw tables, the days its feed has rows, the rules' module and the
limits of a day's batch, the feature builder, its columns and label, and the point-in-time history
and calendar features."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import field_validator, model_validator

from jobs.config.base import section, setting

SPARK_TYPES = tuple("string int integer bigint long smallint tinyint double float boolean date timestamp".split())
DATE_TYPE, TIMESTAMP_TYPE = SPARK_TYPES[-2:]  # the types a column holding a day may have


@section
class TableSpec:
    """A raw table: its columns with Spark SQL types, and whether it arrives as daily partitions."""

    name: str = setting(doc="the table's name (its key under `tables`)")
    columns: dict[str, str] = setting(doc="column -> Spark SQL type, in the file's column order")
    daily: bool = setting(doc="true: one raw partition per day; false: one reference file")
    required: bool = setting(True, doc="false: a missing daily partition means no rows that day, with a warning")
    allow_non_finite: tuple[str, ...] = setting(
        (), doc="floating-point columns where NaN, infinities and huge magnitudes are data, not errors")

    @field_validator("columns")
    @classmethod
    def _types(cls, columns: dict[str, str]) -> dict[str, str]:
        odd = {c: t for c, t in columns.items() if t.lower() not in SPARK_TYPES and not t.lower().startswith("decimal")}
        if odd:
            raise ValueError(f"unknown Spark SQL types {odd}: use one of {', '.join(SPARK_TYPES)} or decimal(p,s)")
        if not columns:
            raise ValueError("a table needs at least one column")
        return columns

    @model_validator(mode="after")
    def _non_finite(self) -> TableSpec:
        odd = [c for c in self.allow_non_finite if self.columns.get(c) not in ("double", "float")]
        if odd:
            raise ValueError(f"tables.{self.name}.allow_non_finite: {odd} are not double or float columns")
        return self

    def ddl(self) -> str:
        """The Spark DDL schema string, in file column order."""
        return ", ".join(f"`{c}` {t}" for c, t in self.columns.items())


FEED_DAYS = ("every", "weekdays")


@section
class FeedCalendar:
    """``feed_calendar``: the days the feed has rows. A closed day is neither a missing partition
    nor a day to wait for: validation, features, scoring and the monitor pass over it, a training
    window, the history features' windows and the label delay count only open days.

    With ``empty_days``, a day whose raw partition of the feed landed without rows is an empty day,
    closed like the others once it has landed (:meth:`with_closed`, from the raw zone: see
    :func:`jobs.config.cli.feed_calendar`); a day whose partition has not landed is still late."""

    days: Literal[FEED_DAYS] = setting("every", "every: rows every calendar day; weekdays: Monday to "  # type: ignore[valid-type]
                                                "Friday only")
    closed: tuple[dt.date, ...] = setting((), "days the feed has no rows by design (holidays, shutdowns), YYYY-MM-DD")
    empty_days: bool = setting(False, "true: a landed raw partition of the feed without rows is an empty day, passed "
                                      "over like a closed one (a partition not landed is still waited for)")

    @property
    def every_day(self) -> bool:
        """Whether every calendar day is open (the default calendar, before any empty day is known)."""
        return self.days == "every" and not self.closed

    def with_closed(self, days: Iterable[dt.date]) -> FeedCalendar:
        """This calendar with ``days`` closed too (the empty days found in the raw zone)."""
        more = set(days) - set(self.closed)
        return dataclasses.replace(self, closed=tuple(sorted({*self.closed, *more}))) if more else self

    def is_open(self, day: dt.date) -> bool:
        """Whether the feed has rows on ``day``."""
        return not (self.days == "weekdays" and day.weekday() >= 5) and day not in self.closed

    def open_days(self, days: Iterable[dt.date]) -> list[dt.date]:
        """The open days among ``days``, in their order."""
        return [day for day in days if self.is_open(day)]

    def open_between(self, first: dt.date, last: dt.date) -> list[dt.date]:
        """The open days from ``first`` to ``last``, both included, oldest first."""
        return self.open_days(first + dt.timedelta(days=n) for n in range((last - first).days + 1))

    def open_days_ending(self, day: dt.date, count: int) -> list[dt.date]:
        """The ``count`` open days that end on or before ``day``, oldest first: a window of N days
        holds N days with rows, however many closed days lie among them."""
        if count < 1:
            raise ValueError(f"a window needs at least one day, got {count}")
        found: list[dt.date] = []
        while len(found) < count:  # terminates: weekdays are open, and the closed days are finitely many
            if self.is_open(day):
                found.append(day)
            day -= dt.timedelta(days=1)
        return found[::-1]

    def shifted(self, day: dt.date, count: int) -> dt.date:
        """The open day ``count`` open days after ``day`` (before it when negative; ``day`` itself
        when 0): with ``monitoring.label_delay_days = L``, day D's outcomes land with the ingest of
        ``shifted(D, L)``, the L-th open day after D."""
        step = dt.timedelta(days=1 if count > 0 else -1)
        for _ in range(abs(count)):
            day += step
            while not self.is_open(day):
                day += step
        return day

    def ordinals(self, first: dt.date, last: dt.date) -> dict[dt.date, int]:
        """Each open day from ``first`` to ``last`` numbered in open days (consecutive open days
        differ by one): the day number of the history features' windows."""
        return {day: n for n, day in enumerate(self.open_between(first, last))}


@dataclasses.dataclass(frozen=True)
class TableLimits:
    """When a table's batch fails validation as a whole, beyond its rules: ``validation``'s limits
    with the table's own laid over them (:meth:`ValidationSpec.limits`); checked where they are set."""

    max_quarantine_rate: float
    row_count_band: tuple[float, float]
    band_days: int


@section
class LimitsOverride:
    """A table's own limits, laid over ``validation``'s."""

    max_quarantine_rate: float | None = setting(None, "the table's own share of rows that may be quarantined",
                                                ge=0, le=1)
    row_count_band: tuple[float, float] | None = setting(None, "the table's own row-count band")
    band_days: int | None = setting(None, "the table's own trailing days for the band", ge=1)


@section
class RulesSpec:
    """``validation.rules.<table>``: a table's rules written in the config (a row breaking one is
    quarantined with the rule's name, or counted only where ``warn`` names the rule)."""

    date: str | None = setting(None, "a daily table: the column (or SQL expression) of the day a row is about, "
                                     "which must be its partition's")
    key: list[str] = setting([], "the columns that tell a row apart (a daily table's with its date column): "
                                 "unique, shown in the report")
    not_null: list[str] = setting([], "columns that must have a value")
    ranges: dict[str, tuple[float | None, float | None]] = setting(
        {}, "column -> [min, max], both included; null: open on that side")
    values: dict[str, list[Any]] = setting({}, "column -> the values it may take")
    references: dict[str, str] = setting({}, "column -> table.column whose values it must be one of")
    patterns: dict[str, str] = setting({}, "column -> a regular expression its text must match")
    conditions: dict[str, str] = setting({}, "rule name -> a Spark SQL condition every row must meet")
    warn: list[str] = setting([], "names of the rules above whose breaking rows pass, counted")

    def named_columns(self) -> list[str]:
        """The columns the rules name directly (not those inside a SQL expression)."""
        return [*self.key, *self.not_null, *self.ranges, *self.values, *self.references, *self.patterns]

    def declared(self) -> list[tuple[str, str, str, Any]]:
        """Each rule as ``(name, kind, column, argument)``, ``kind`` one of not_null, range, values,
        reference, pattern, condition (no ``column``; the argument its SQL) and unique (the key)."""
        return [*((f"{c}_not_null", "not_null", c, None) for c in self.not_null),
                *((f"{c}_in_range", "range", c, bounds) for c, bounds in self.ranges.items()),
                *((f"{c}_in_values", "values", c, tuple(v)) for c, v in self.values.items()),
                *((f"{c}_in_{ref.replace('.', '_')}", "reference", c, ref) for c, ref in self.references.items()),
                *((f"{c}_matches", "pattern", c, regex) for c, regex in self.patterns.items()),
                *((name, "condition", "", sql) for name, sql in self.conditions.items()),
                *([("_".join(self.key) + "_unique", "unique", "", tuple(self.key))] if self.key else [])]


@section
class ValidationSpec:
    """The ``validation`` section: the rules (in the config, from a module, or both), the feed, and
    the limits of a day's batch."""

    suites: str | None = setting(None, "module:function returning {table: TableSuite}: rules written in Python")
    rules: dict[str, RulesSpec] = setting({}, "table -> its rules written here (see validation.rules.<table>)")
    feed: str = setting(doc="the daily table whose rows become feature rows")
    great_expectations: bool = setting(True, "also run each rule as a GX expectation (report and cross-check)")
    gx_pandas_max_rows: int = setting(200_000, "GX on pandas in the driver for a table's window up to this many "
                                                "rows (0: on Spark)", ge=0)
    skip_unchanged: bool = setting(True, "a reference table whose raw file passed unchanged is not validated again")
    max_quarantine_rate: float = setting(0.05, "share of a day's rows that may be quarantined", ge=0, le=1)
    row_count_band: tuple[float, float] = setting((0.5, 2.0), "a day's rows / median rows of the trailing days")
    band_days: int = setting(7, "trailing days of the raw zone the band compares with", ge=1)
    tables: dict[str, LimitsOverride] = setting({}, "per-table limits, e.g. {weather: {max_quarantine_rate: 0.1}}")

    @property
    def defaults(self) -> TableLimits:
        return TableLimits(self.max_quarantine_rate, self.row_count_band, self.band_days)

    @property
    def overrides(self) -> dict[str, dict[str, Any]]:
        return {table: {k: v for k, v in dataclasses.asdict(limits).items() if v is not None}
                for table, limits in self.tables.items()}

    def limits(self, table: str) -> TableLimits:
        """The table's limits: the defaults with its overrides applied."""
        return TableLimits(**{**dataclasses.asdict(self.defaults), **self.overrides.get(table, {})})


@section
class HistorySpec:
    """``features.history``: which keys' label history, over which trailing windows of days."""

    keys: dict[str, list[str]] = setting(doc="a name -> the builder's columns that make the key "
                                             "(route: [origin, dest])")
    windows: list[int] = setting([1, 7, 28], "trailing windows, in days")
    prior_rows: float = setting(20.0, "smoothing: pseudo-rows at the window's overall rate", ge=0)
    default_prior: float = setting(0.5, "the rate where a window holds no outcomes at all", ge=0, le=1)

    @field_validator("windows")
    @classmethod
    def _windows(cls, windows: list[int]) -> list[int]:
        windows = sorted(set(windows))
        if not windows or windows[0] < 1:
            raise ValueError(f"windows must be whole days >= 1, got {windows}")
        return windows

    @field_validator("keys")
    @classmethod
    def _keys(cls, keys: dict[str, list[str]]) -> dict[str, list[str]]:
        bad = [name for name, cols in keys.items() if not cols or name in ("all", "days")]
        if bad:
            raise ValueError(f"keys {bad} need columns and may not be named 'all' or 'days'")
        return keys

    def columns(self) -> list[str]:
        cols = []
        for w in self.windows:
            cols += [f"hist_all_{w}d_rate", f"hist_days_{w}d"]
            for key in self.keys:
                cols += [f"hist_{key}_{w}d_rate", f"hist_{key}_{w}d_log_rows"]
        return cols

    def reach(self, label_delay_days: int) -> int:
        """How many days before a day its history reaches back."""
        return self.windows[-1] + label_delay_days


@section
class CalendarSpec:
    """``features.calendar``: the day of the year and the nearness of public holidays."""

    holidays: str | None = setting(None, "a country code of the holidays package (US); null: no holiday columns")
    max_days: int = setting(30, "distances to a holiday are capped here", ge=1)
    day_of_year: bool = setting(False, "day_of_year as an input (a time index a linear model extrapolates)")

    def columns(self) -> list[str]:
        return [*(["day_of_year"] if self.day_of_year else []),
                *(["days_to_holiday", "days_since_holiday"] if self.holidays else [])]


@section
class JoinSpec:
    """``features.joins[]``: a table's columns added to the feed's rows, matched on keys."""

    table: str = setting(doc="the table joined (a daily one is matched on its day too)")
    on: list[str] = setting(doc="key columns, named alike in the rows so far and the table")
    columns: list[str] | None = setting(None, "the table's columns added (null: all but the keys)")
    prefix: str = setting("", "put before each added column's name (dest_ for an airport joined on dest)")
    rename: dict[str, str] = setting({}, "the rows' key column -> the table's, where they are named apart")

    def right_keys(self) -> list[str]:
        return [self.rename.get(k, k) for k in self.on]

    def added(self, table: TableSpec) -> list[str]:
        """The table's columns the join adds (before the prefix): ``columns``, or all but its keys."""
        return self.columns if self.columns is not None else [c for c in table.columns if c not in self.right_keys()]


@section
class FeatureSpec:
    """The ``features`` section: how the rows are made (a builder in Python, or the feed's rows with
    joins, expressions and a label expression written here), their columns and label, the history
    and the calendar."""

    builder: str | None = setting(None, "module:function(tables, spec) -> DataFrame, one row per prediction "
                                        "(null: the feed's rows with features.joins and features.expressions)")
    joins: list[JoinSpec] = setting([], "without a builder: tables joined to the feed's rows, in order")
    expressions: dict[str, str] = setting({}, "without a builder: column -> Spark SQL expression, in order (each "
                                              "may use the ones before)")
    label_expression: str | None = setting(None, "Spark SQL giving the label column: 1, 0, or null for no label")
    label: str = setting(doc="the label column: 1.0, 0.0, or null for no label")
    id_columns: list[str] = setting([], "columns copied to every prediction row to tell its entity")
    categorical: list[str] = setting([], "the builder's categorical inputs")
    numeric: list[str] = setting([], "the builder's numeric inputs")
    label_description: str = setting("the positive class", "what a probability is of, in reports for people")
    history: HistorySpec | None = setting(None, "point-in-time label history by keys (null: none)")
    calendar: CalendarSpec | None = setting(None, "calendar columns (null: none)")

    @model_validator(mode="after")
    def _clash(self) -> FeatureSpec:
        if not self.categorical and not self.numeric and not self.derived:
            raise ValueError("features: name at least one input column (categorical or numeric)")
        clash = set(self.derived) & {*self.categorical, *self.numeric, *self.id_columns, self.label}
        if clash:
            raise ValueError(f"features: the builder's columns {sorted(clash)} have the names of history or "
                             "calendar columns; rename them or turn features.history / features.calendar off")
        return self

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

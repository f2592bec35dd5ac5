"""What a sample of a table's rows shows, for the draft of a pipeline (:mod:`jobs.datasets.scaffold`):
each column's Spark SQL type as the validate job would parse its text, its nulls, bounds and few
values; a key the sample holds once per row; the columns whose values all lie in another table's
unique column; and the rules these make. A sample shows what it holds, not what the source allows:
everything here is a draft for a person to review.

The types follow Spark's casts of text (ANSI): a column is ``int`` (or ``bigint``) when every value
is a whole number without a leading zero (a code such as ``007`` stays ``string``), ``double`` when
every value is a number (``NaN`` and ``Infinity`` included), ``boolean`` for ``true``/``false``,
``date`` for ``YYYY-MM-DD``, ``timestamp`` for a date with a time of day, and ``string`` otherwise.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from jobs.config.dataset import DATE_TYPE, TIMESTAMP_TYPE

SAMPLE_ROWS = 100_000  # the rows read of each file
FEW_VALUES = 20  # a string column with at most this many distinct values is a category
KEY_WIDTH = 2  # the most columns a key is looked for among, beside a daily table's date column

WHOLE = re.compile(r"[+-]?\d+")
NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
NON_FINITE = frozenset({"nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"})
BOOLEAN = frozenset({"true", "false"})
DATE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
TIMESTAMP = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})[T ](\d{1,2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?"
                       r"(Z|[+-]\d{2}:?\d{2})?")
UTC_OFFSETS = frozenset({None, "Z", "+00:00", "+0000", "-00:00", "-0000"})
INT_LIMITS = {"int": 2**31, "bigint": 2**63}
NUMERIC = ("int", "bigint", "double")
KEY_TYPES = ("string", "int", "bigint", "boolean", DATE_TYPE, TIMESTAMP_TYPE)


class ScaffoldError(ValueError):
    """A sample or a draft that cannot be made; the message says which and what to do."""


@dataclasses.dataclass(frozen=True)
class ColumnProfile:
    """One column of a sample: its type, how many values are missing, how many distinct ones there
    are (``values``: them, sorted, when there are few), the bounds of a numeric one (finite values),
    whether it holds each row once and without a gap (``unique``), and what the rules must know:
    NaN or infinities in it, timestamps with a UTC offset."""

    name: str
    type: str
    nulls: int
    distinct: int
    values: tuple[Any, ...] = ()
    low: int | float | None = None
    high: int | float | None = None
    unique: bool = False
    non_finite: bool = False
    offset: bool = False

    @property
    def category(self) -> bool:
        """A string or boolean column of few distinct values."""
        return self.type == "boolean" or (self.type == "string" and 0 < self.distinct <= FEW_VALUES)


@dataclasses.dataclass(frozen=True)
class TableSample:
    """The first rows of a table's file: their text (a null where the file has no value), each
    column's profile, and whether the file holds more rows than were read."""

    name: str
    path: Path
    text: pd.DataFrame
    columns: dict[str, ColumnProfile]
    truncated: bool

    @property
    def rows(self) -> int:
        return len(self.text)


def read_sample(name: str, path: str | Path, null_values: Sequence[str] = ("",),
                rows: int = SAMPLE_ROWS) -> TableSample:
    """The first ``rows`` rows of the CSV at ``path`` (a header line first), profiled; the texts of
    ``null_values`` are nulls, as Spark's reader makes them."""
    path = Path(path)
    if not path.is_file():
        raise ScaffoldError(f"{name}: no file {path}")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, nrows=rows + 1)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ScaffoldError(f"{name}: {path} is not a CSV file with a header line ({err})") from None
    truncated = len(frame) > rows
    if frame.empty:
        raise ScaffoldError(f"{name}: {path} has a header and no rows: a draft needs rows to learn from")
    frame = frame.head(rows)
    text = frame.mask(frame.isin(list(null_values)))
    return TableSample(name, path, text, {c: profile(c, text[c]) for c in text.columns}, truncated)


def profile(name: str, text: pd.Series) -> ColumnProfile:
    """A column's profile from its text (nulls as nulls)."""
    present = text.dropna().astype(str).str.strip()
    kind = column_type(present)
    nulls = int(text.isna().sum())
    distinct = present.nunique() if kind == "string" else parsed(present, kind).nunique()
    unique = nulls == 0 and distinct == len(text)
    if kind in NUMERIC:
        numbers = parsed(present, kind)
        finite = numbers[numbers.map(lambda v: v == v and abs(v) != float("inf"))]
        low, high = (finite.min(), finite.max()) if len(finite) else (None, None)
        return ColumnProfile(name, kind, nulls, distinct, low=_plain(low), high=_plain(high), unique=unique,
                             non_finite=len(finite) < len(numbers))
    values = tuple(sorted(present.unique())) if kind == "string" and distinct <= FEW_VALUES else ()
    offset = kind == TIMESTAMP_TYPE and not present.map(lambda v: _offset(v) in UTC_OFFSETS).all()
    return ColumnProfile(name, kind, nulls, distinct, values, unique=unique, offset=offset)


def column_type(values: pd.Series) -> str:
    """The Spark SQL type every one of ``values`` (text, nulls left out) parses as; ``string`` when
    there are none."""
    if values.empty:
        return "string"
    lower = values.str.lower()
    if lower.isin(BOOLEAN).all():
        return "boolean"
    if values.str.fullmatch(WHOLE).all():
        if values.str.lstrip("+-").str.match(r"0\d").any():
            return "string"  # a code (zip, id): its leading zeros are part of it
        largest = max(abs(int(v) + (v.startswith("-") and 1)) for v in values)  # -2**31 is an int
        return next((kind for kind, limit in INT_LIMITS.items() if largest < limit), "string")
    if (values.str.fullmatch(NUMBER) | lower.isin(NON_FINITE)).all():
        return "double"
    dates = values.str.fullmatch(DATE)
    if dates.all() and values.map(_day).notna().all():
        return DATE_TYPE
    if (dates | values.str.fullmatch(TIMESTAMP)).all() and values.map(_moment).notna().all():
        return TIMESTAMP_TYPE
    return "string"


def parsed(values: pd.Series, kind: str) -> pd.Series:
    """``values`` (text) as Python values of ``kind``, for counting and comparing."""
    if kind in ("int", "bigint"):
        return values.map(int)
    if kind == "double":
        return values.map(float)
    if kind == "boolean":
        return values.str.lower() == "true"
    if kind in (DATE_TYPE, TIMESTAMP_TYPE):
        return values.map(_moment)
    return values


def _plain(value: Any) -> int | float | None:
    """A numpy scalar as the Python number YAML writes plainly."""
    return value.item() if hasattr(value, "item") else value


def _day(text: str) -> dt.date | None:
    match = DATE.fullmatch(text)
    try:
        return dt.date(*map(int, match.groups())) if match else None
    except ValueError:
        return None


def _moment(text: str) -> dt.datetime | None:
    """The date and time of day ``text`` holds (its offset left out), or None where it holds none."""
    day = _day(text)
    if day is not None:
        return dt.datetime(day.year, day.month, day.day)
    match = TIMESTAMP.fullmatch(text)
    try:
        return dt.datetime(*(int(part or 0) for part in match.groups()[:6])) if match else None
    except ValueError:
        return None


def _offset(text: str) -> str | None:
    match = TIMESTAMP.fullmatch(text)
    return match.group(7) if match else None


def find_key(sample: TableSample, date_column: str | None = None, repeats: float = 0.0) -> list[str] | None:
    """The fewest columns that hold each row of the sample once, none of them null: a daily table's
    ``date_column`` and at most :data:`KEY_WIDTH` others (a key is checked across a window of days),
    a reference table's 1 to :data:`KEY_WIDTH` columns. Text columns are tried first, then in the
    file's order; None when no such set is found. With ``repeats``, a set whose values repeat on at
    most that share of the rows is a key too (:func:`repeated_rows` counts them)."""
    columns = sample.columns
    if date_column and columns[date_column].nulls:
        return None
    candidates = [c for c, p in columns.items() if p.type in KEY_TYPES and p.nulls == 0 and c != date_column]
    candidates.sort(key=lambda c: columns[c].type != "string")
    required = [date_column] if date_column else []
    allowed = int(sample.rows * repeats)
    for width in range(0 if date_column else 1, KEY_WIDTH + 1):
        for chosen in itertools.combinations(candidates, width):
            key = [c for c in columns if c in (*chosen, *required)]
            if math.prod(columns[c].distinct for c in key) < sample.rows - allowed:
                continue  # too few combinations of values to tell the rows apart
            if len(repeated_rows(sample, key)) <= allowed:
                return key
    return None


def repeated_rows(sample: TableSample, key: list[str]) -> pd.DataFrame:
    """The sample's rows whose ``key`` values another row has too (every row of such a key)."""
    return sample.text[sample.text.duplicated(subset=key, keep=False)]


def _comparable(sample: TableSample, column: str) -> frozenset[Any]:
    """A column's distinct values as Spark compares them (numbers by value, text as it is)."""
    return frozenset(parsed(sample.text[column].dropna().astype(str).str.strip(), sample.columns[column].type))


def find_references(samples: dict[str, TableSample], reference_tables: Sequence[str],
                    skip: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    """Per table, column -> ``table.column`` of a reference table whose values are unique in its
    sample and hold every value the column has: text columns by their values, whole numbers only
    between columns of one name (small numbers lie in any id column). ``skip``: table -> a column
    not to look at (its date column). A column of the target's name is preferred."""
    targets = {(u, c): _comparable(samples[u], c) for u in reference_tables for c, p in samples[u].columns.items()
               if p.unique and p.type in ("string", "int", "bigint")}
    found: dict[str, dict[str, str]] = {}
    for name, sample in samples.items():
        for column, p in sample.columns.items():
            if p.type not in ("string", "int", "bigint") or p.nulls == sample.rows or column == (skip or {}).get(name):
                continue
            whole, values = p.type != "string", _comparable(sample, column)
            matches = [(u, c) for (u, c), allowed in targets.items() if u != name
                       and (samples[u].columns[c].type != "string") == whole and (not whole or c == column)
                       and values <= allowed]
            if matches:
                u, c = sorted(matches, key=lambda m: m[1] != column)[0]
                found.setdefault(name, {})[column] = f"{u}.{c}"
    return found


def draft_rules(sample: TableSample, date_column: str | None, key: list[str] | None,
                references: dict[str, str], outcomes: Sequence[str] = ()) -> dict[str, Any]:
    """``validation.rules.<table>`` as the sample shows them: the date column, the key, ``not_null``
    where no value is missing (not of the ``outcomes``: a row whose outcome is not known yet has no
    label, it is no fault), ``ranges`` of the numbers seen, ``values`` of few-valued text columns
    (not an id's, one row each, nor those a reference checks), the references. The ranges and values are ``warn`` rules
    (counted, not quarantined): a sample's bounds are not the source's limits."""
    columns = sample.columns
    ranges = {c: [p.low, p.high] for c, p in columns.items() if p.type in NUMERIC and p.low is not None}
    values = {c: list(p.values) for c, p in columns.items()
              if p.type == "string" and p.values and not p.unique and c not in references}
    rules: dict[str, Any] = {
        **(dict(date=date_column) if date_column else {}),
        **({"key": key} if key else {}),
        "not_null": [c for c, p in columns.items() if p.nulls == 0 and c not in outcomes],
        "ranges": ranges,
        "values": values,
        "references": dict(references),
        "warn": [*(f"{c}_in_range" for c in ranges), *(f"{c}_in_values" for c in values)],
    }
    return {k: v for k, v in rules.items() if v}

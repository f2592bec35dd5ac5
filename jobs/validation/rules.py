"""Validation rules defined once, evaluated twice: as a Great Expectations expectation (for the
report) and as a Spark predicate (to split a table into validated and quarantined rows).

GX on Spark does not reliably hand back the failing rows, so the split cannot rest on GX's result
alone; each rule below knows both forms, and the validate job checks that GX and the split count
the same rows. A dataset module (e.g. :mod:`jobs.datasets.flights`) lists its rules per table in a
:class:`TableSuite`.

A rule's ``action`` says what a failing row means: ``quarantine`` (the row is held back, with the
rule's name) or ``warn`` (the row passes; the count is reported). Nulls never break a rule about a
value, only :class:`NotNull` does: the same convention as GX's column-map expectations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from great_expectations.expectations import Expectation
    from pyspark.sql import Column

QUARANTINE = "quarantine"
WARN = "warn"
Action = Literal["quarantine", "warn"]
# Reference values a rule may check against: "table.column" -> the values of that column.
References = dict[str, list[Any]]


@dataclass(frozen=True)
class Rule:
    """A row-level rule. Subclasses give the GX expectation and the Spark violation predicate."""

    name: str
    description: str
    action: Action = QUARANTINE

    @property
    def columns(self) -> list[str]:
        return []

    @property
    def references(self) -> list[str]:
        """The ``table.column`` references this rule needs resolved."""
        return []

    def expectation(self, refs: References) -> Expectation:
        raise NotImplementedError

    def predicate(self, refs: References) -> Column:
        """True where a row breaks the rule (may be null for a null input: treated as passing)."""
        raise NotImplementedError

    def violation(self, refs: References) -> Column:
        """True where a row breaks the rule, never null."""
        from pyspark.sql import functions as F

        return F.coalesce(self.predicate(refs), F.lit(False))


@dataclass(frozen=True)
class NotNull(Rule):
    column: str = ""

    @property
    def columns(self) -> list[str]:
        return [self.column]

    def expectation(self, refs: References) -> Expectation:
        import great_expectations.expectations as gxe

        return gxe.ExpectColumnValuesToNotBeNull(column=self.column)

    def predicate(self, refs: References) -> Column:
        from pyspark.sql import functions as F

        return F.col(self.column).isNull()


@dataclass(frozen=True)
class Between(Rule):
    column: str = ""
    min_value: float | None = None
    max_value: float | None = None
    strict_min: bool = False
    strict_max: bool = False

    @property
    def columns(self) -> list[str]:
        return [self.column]

    def expectation(self, refs: References) -> Expectation:
        import great_expectations.expectations as gxe

        return gxe.ExpectColumnValuesToBeBetween(
            column=self.column, min_value=self.min_value, max_value=self.max_value,
            strict_min=self.strict_min, strict_max=self.strict_max,
        )

    def predicate(self, refs: References) -> Column:
        from pyspark.sql import functions as F

        col, ok = F.col(self.column), F.lit(True)
        if self.min_value is not None:
            ok = ok & ((col > self.min_value) if self.strict_min else (col >= self.min_value))
        if self.max_value is not None:
            ok = ok & ((col < self.max_value) if self.strict_max else (col <= self.max_value))
        return ~ok


@dataclass(frozen=True)
class InSet(Rule):
    """The value is one of ``values``, or one of the values of a reference ``table.column``."""

    column: str = ""
    values: tuple[Any, ...] = ()
    reference: str | None = None

    @property
    def columns(self) -> list[str]:
        return [self.column]

    @property
    def references(self) -> list[str]:
        return [self.reference] if self.reference else []

    def value_set(self, refs: References) -> list[Any]:
        return sorted(refs[self.reference]) if self.reference else list(self.values)

    def expectation(self, refs: References) -> Expectation:
        import great_expectations.expectations as gxe

        return gxe.ExpectColumnValuesToBeInSet(column=self.column, value_set=self.value_set(refs))

    def predicate(self, refs: References) -> Column:
        from pyspark.sql import functions as F

        values = self.value_set(refs)
        if not values:
            return F.col(self.column).isNotNull()
        # One SQL string instead of a py4j literal per value: thousands of keys stay cheap to plan.
        return F.expr(f"NOT (`{self.column}` IN ({', '.join(_sql_literal(v) for v in values)}))")


def _sql_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


@dataclass(frozen=True)
class Matches(Rule):
    column: str = ""
    regex: str = ""

    @property
    def columns(self) -> list[str]:
        return [self.column]

    def expectation(self, refs: References) -> Expectation:
        import great_expectations.expectations as gxe

        return gxe.ExpectColumnValuesToMatchRegex(column=self.column, regex=self.regex)

    def predicate(self, refs: References) -> Column:
        from pyspark.sql import functions as F

        return ~F.col(self.column).rlike(self.regex)


@dataclass(frozen=True)
class Unique(Rule):
    """No two rows share the key: every row of a repeated key breaks the rule (which one is right
    is for a person to decide)."""

    key: tuple[str, ...] = ()

    @property
    def columns(self) -> list[str]:
        return list(self.key)

    def expectation(self, refs: References) -> Expectation:
        import great_expectations.expectations as gxe

        if len(self.key) == 1:
            return gxe.ExpectColumnValuesToBeUnique(column=self.key[0])
        return gxe.ExpectCompoundColumnsToBeUnique(column_list=list(self.key))

    def predicate(self, refs: References) -> Column:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        # GX ignores a row whose key is entirely null; so does this.
        all_null = F.lit(True)
        for c in self.key:
            all_null = all_null & F.col(c).isNull()
        return ~all_null & (F.count(F.lit(1)).over(Window.partitionBy(*self.key)) > 1)


@dataclass(frozen=True)
class Condition(Rule):
    """Any Spark SQL condition a valid row satisfies, e.g. a relation between columns."""

    sql: str = ""
    uses: tuple[str, ...] = ()

    @property
    def columns(self) -> list[str]:
        return list(self.uses)

    def expectation(self, refs: References) -> Expectation:
        import great_expectations.expectations as gxe

        return gxe.UnexpectedRowsExpectation(
            unexpected_rows_query=f"SELECT * FROM {{batch}} WHERE NOT ({self.sql})", description=self.description
        )

    def predicate(self, refs: References) -> Column:
        from pyspark.sql import functions as F

        return ~F.expr(self.sql)


def calendar_date(year: str, month: str, day: str) -> str:
    """SQL for the date of a row's year, month and day columns: null when they make no calendar
    date (February 30, month 13), where ``make_date`` would stop the whole job under ANSI mode."""
    return f"try_to_date(format_string('%04d-%02d-%02d', `{year}`, `{month}`, `{day}`), 'yyyy-MM-dd')"


def not_null(*columns: str) -> list[Rule]:
    """One :class:`NotNull` rule per column, named ``<column>_not_null``."""
    return [NotNull(name=f"{c}_not_null", description=f"{c} is present", column=c) for c in columns]


@dataclass(frozen=True)
class TableSuite:
    """What a table's rows must satisfy.

    ``partition_date``: for a daily table, a SQL expression giving the date a row is about (null
    when the row has none: use :func:`calendar_date`); every row must match the partition it
    arrived in (a hard check: a file landed under the wrong day), a row without a date is
    quarantined. ``key``: the columns that tell a row apart, shown with every example in the report.
    """

    rules: list[Rule] = field(default_factory=list)
    partition_date: str | None = None
    key: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.partition_date and "make_date(" in self.partition_date.replace(" ", "").lower():
            raise ValueError(
                f"partition_date {self.partition_date!r}: make_date fails the whole run on one impossible date "
                "(ANSI mode); use jobs.validation.rules.calendar_date(year, month, day), which gives null instead"
            )
        names = [r.name for r in self.rules]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"rule names must be unique within a table, repeated: {repeated}")

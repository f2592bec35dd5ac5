"""The rules a pipeline writes in its config (``validation.rules.<table>``) as the validate job's
:class:`~jobs.validation.rules.TableSuite` objects, beside (or instead of) a module's
(``validation.suites``): a dataset whose rules are not-null columns, ranges, sets of values,
references to another table, patterns and SQL conditions needs no Python."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from jobs.config import import_object
from jobs.validation.rules import (
    QUARANTINE,
    WARN,
    Between,
    Condition,
    InSet,
    Matches,
    NotNull,
    Rule,
    TableSuite,
    Unique,
)

if TYPE_CHECKING:
    from jobs.config import PipelineConfig, RulesSpec, TableSpec


def declared_rule(name: str, kind: str, column: str, argument: Any, table: TableSpec, action: str) -> Rule:
    """One rule of :meth:`jobs.config.RulesSpec.declared` as the validate job's rule."""
    if kind == "not_null":
        return NotNull(name=name, description=f"{column} is present", column=column, action=action)
    if kind == "range":
        low, high = argument
        bounds = f"{'-inf' if low is None else low}..{'inf' if high is None else high}"
        return Between(name=name, description=f"{column} within {bounds}", column=column, min_value=low,
                       max_value=high, action=action)
    if kind == "values":
        return InSet(name=name, description=f"{column} is one of {list(argument)}", column=column, values=argument,
                     action=action)
    if kind == "reference":
        return InSet(name=name, description=f"{column} is a value of {argument}", column=column, reference=argument,
                     action=action)
    if kind == "pattern":
        return Matches(name=name, description=f"{column} matches {argument}", column=column, regex=argument,
                       action=action)
    if kind == "unique":
        return Unique(name=name, description=f"one row per {', '.join(argument)}", key=argument, action=action)
    uses = tuple(c for c in table.columns if re.search(rf"(?<![\w.`]){re.escape(c)}(?![\w`])|`{re.escape(c)}`",
                                                       argument))
    return Condition(name=name, description=argument, sql=argument, uses=uses, action=action)


def table_suite(rules: RulesSpec, table: TableSpec) -> TableSuite:
    """A table's rules written in the config, as one suite."""
    return TableSuite(rules=[declared_rule(name, kind, column, argument, table, WARN if name in rules.warn
                                           else QUARANTINE)
                             for name, kind, column, argument in rules.declared()],
                      partition_date=_date_sql(rules.date, table), key=tuple(rules.key))


def _date_sql(date: str | None, table: TableSpec) -> str | None:
    """A date column as SQL for the day it holds (a date's, a timestamp's, a text's ``yyyy-MM-dd``
    with or without a time; null where it holds none), an expression as it is."""
    if date is None or date not in table.columns:
        return date
    return f"try_to_date(CAST(`{date}` AS STRING))"


def suites_of(config: PipelineConfig) -> dict[str, TableSuite]:
    """Every table's rules: the module's (``validation.suites``), then those written in the config
    (``validation.rules``) added to them."""
    found = dict(import_object(config.validation.suites)()) if config.validation.suites else {}
    for name, rules in config.validation.rules.items():
        written = table_suite(rules, config.tables[name])
        if name in found:
            module = found[name]
            written = TableSuite(rules=[*module.rules, *written.rules],
                                 partition_date=written.partition_date or module.partition_date,
                                 key=written.key or module.key)
        found[name] = written
    return found

"""Row rules: the job's own (well-formed line, valid UTF-8, values that parse) and the dataset's,
each a Spark predicate that flags rows and a Great Expectations expectation that counts them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobs.lake import PARTITION
from jobs.rules import QUARANTINE, WARN, References, Rule
from jobs.validation.schema import CORRUPT_RECORD

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from jobs.config import TableSpec

# Rules every table gets from the job itself, before the dataset's own.
WELL_FORMED = "well_formed_line"
VALID_UTF8 = "valid_utf8"
REPLACEMENT_CHARACTER = "\ufffd"  # what the UTF-8 decoder puts where a byte was not UTF-8


def job_rules(table: TableSpec) -> list[tuple[str, str]]:
    """The rules the job adds to every table: (name, description)."""
    rules = [
        (WELL_FORMED, "the line has exactly the declared number of fields"),
        (VALID_UTF8, "the text is valid UTF-8"),
    ]
    rules += [(parse_rule(c, t), f"{c} parses as {t}") for c, t in table.columns.items() if t != "string"]
    return rules


def parse_rule(column: str, type_: str) -> str:
    return f"{column}_is_{type_}"


def flag_rows(raw: DataFrame, table: TableSpec, rules: list[Rule], refs: References) -> DataFrame:
    """Typed columns, the raw text (``_raw``), and the names of the rules each row breaks.

    ``_rules``: the quarantine rules broken (empty = the row is valid); ``_warnings``: warn rules.
    """
    from pyspark.sql import functions as F

    typed = raw.select(
        PARTITION,
        *[(F.col(c) if t == "string" else F.col(c).try_cast(t)).alias(c) for c, t in table.columns.items()],
        F.struct(*[F.col(c) for c in table.columns], F.col(CORRUPT_RECORD)).alias("_raw"),
    )
    any_text = F.concat_ws("", *[F.col(f"_raw.{c}") for c in [*table.columns, CORRUPT_RECORD]])
    job_flags: list[tuple[str, Column]] = [
        (WELL_FORMED, F.col(f"_raw.{CORRUPT_RECORD}").isNotNull()),
        (VALID_UTF8, any_text.contains(REPLACEMENT_CHARACTER)),
    ]
    job_flags += [
        (parse_rule(c, t), F.col(f"_raw.{c}").isNotNull() & F.col(c).isNull())
        for c, t in table.columns.items()
        if t != "string"
    ]
    quarantine = job_flags + [(r.name, r.violation(refs)) for r in rules if r.action == QUARANTINE]
    warn = [(r.name, r.violation(refs)) for r in rules if r.action == WARN]

    def names(flags: list[tuple[str, Column]]) -> Column:
        if not flags:
            return F.array().cast("array<string>")
        return F.filter(F.array(*[F.when(cond, F.lit(name)) for name, cond in flags]), lambda x: x.isNotNull())

    return typed.withColumns({"_rules": names(quarantine), "_warnings": names(warn)})


def run_expectations(df: DataFrame, table: str, rules: list[Rule], refs: References) -> dict[str, dict[str, Any]]:
    """Run the rules as one GX suite over ``df``; per rule name: the expectation, GX's unexpected
    count and any error.

    Counts only (``BASIC`` without example lists): examples come from the flagged rows, which
    costs one small query per rule that found something instead of one per expectation.
    """
    import great_expectations as gx

    context = gx.get_context(mode="ephemeral")
    batch = (
        # No persist: GX would cache the frame and never release it, so a later run over the same
        # files would be validated against the stale cached rows.
        context.data_sources.add_spark(name="lake", persist=False)
        .add_dataframe_asset(name=table)
        .add_batch_definition_whole_dataframe("window")
        .get_batch(batch_parameters={"dataframe": df})
    )
    expectations = []
    for rule in rules:
        expectation = rule.expectation(refs)
        expectation.meta = {"rule": rule.name}
        expectations.append(expectation)
    kinds = {e.meta["rule"]: type(e).__name__ for e in expectations}
    suite = gx.ExpectationSuite(name=f"{table}_rules", expectations=expectations)
    result = batch.validate(suite, result_format={"result_format": "BASIC", "partial_unexpected_count": 0})
    out = {}
    for item in result.results:
        details = item.result or {}
        error = None
        for info in [item.exception_info or {}, *(item.exception_info or {}).values()]:
            if isinstance(info, dict) and info.get("raised_exception"):
                error = info.get("exception_message") or "metric computation raised"
                break
        unexpected = details.get("unexpected_count")
        if unexpected is None and isinstance(details.get("observed_value"), int):
            unexpected = details["observed_value"]  # UnexpectedRowsExpectation reports its count here
        rule = item.expectation_config.meta["rule"]
        out[rule] = {"expectation": kinds[rule], "unexpected": unexpected, "error": error}
    return out


def examples(flagged: DataFrame, rule: str, columns: list[str], limit: int = 3) -> list[dict[str, Any]]:
    """A few rows that broke ``rule``, as the text they arrived as (the rule's columns, or all)."""
    from pyspark.sql import functions as F

    hit = F.array_contains("_rules", rule) | F.array_contains("_warnings", rule)
    rows = flagged.where(hit).select("_raw.*").limit(limit).collect()
    return [{k: v for k, v in r.asDict().items() if (k in columns if columns else v is not None)} for r in rows]

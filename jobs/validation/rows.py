"""Row rules: the job's own (well-formed line, valid UTF-8, values that parse) and the dataset's,
each a Spark predicate that flags rows and a Great Expectations expectation that counts them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobs.lake.layout import PARTITION
from jobs.validation.rules import QUARANTINE, WARN, References, Rule
from jobs.validation.schema import CORRUPT_RECORD, RECORD, SOURCE_FILE

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from jobs.config import TableSpec

# Rules every table gets from the job itself, before the dataset's own.
WELL_FORMED = "well_formed_line"
VALID_UTF8 = "valid_utf8"
REPLACEMENT_CHARACTER = "\ufffd"  # what the UTF-8 decoder puts where a byte was not UTF-8
ROW_DATE = "row_date_is_a_calendar_date"
# Larger magnitudes are no measurement: a few of them overflow a sum of squares (a standard
# deviation) to infinity. A column that means it lists itself under allow_non_finite.
MAX_MAGNITUDE = 1e15
FLOATING = ("double", "float")


def job_rules(table: TableSpec, partition_date: str | None = None) -> list[tuple[str, str]]:
    """The rules the job adds to every table: (name, description)."""
    rules = [
        (WELL_FORMED, "the record has exactly the declared number of fields"),
        (VALID_UTF8, "the text is valid UTF-8"),
    ]
    rules += [(parse_rule(c, t), f"{c} parses as {t}") for c, t in table.columns.items() if t != "string"]
    rules += [(finite_rule(c), f"{c} is a finite number (not NaN or infinite) of magnitude at most {MAX_MAGNITUDE:g}")
              for c in finite_columns(table)]
    if partition_date:
        rules.append((ROW_DATE, f"the row's date ({partition_date}) is a calendar date"))
    return rules


def parse_rule(column: str, type_: str) -> str:
    return f"{column}_is_{type_}"


def finite_rule(column: str) -> str:
    return f"{column}_is_finite"


def finite_columns(table: TableSpec) -> list[str]:
    """The floating-point columns whose values must be finite (all but ``allow_non_finite``)."""
    return [c for c, t in table.columns.items() if t in FLOATING and c not in table.allow_non_finite]


def flag_rows(
    raw: DataFrame, table: TableSpec, rules: list[Rule], refs: References, partition_date: str | None = None
) -> DataFrame:
    """Typed columns, the raw text (``_raw``), where the row came from (``_source_file``,
    ``_record``), and the names of the rules each row breaks.

    ``_rules``: the quarantine rules broken (empty = the row is valid); ``_warnings``: warn rules.
    ``partition_date``: the suite's SQL for a row's date; a row for which it gives no date (an
    impossible one, such as February 30) breaks :data:`ROW_DATE`.
    """
    from pyspark.sql import functions as F

    typed = raw.select(
        PARTITION,
        *[(F.col(c) if t == "string" else F.col(c).try_cast(t)).alias(c) for c, t in table.columns.items()],
        F.struct(*[F.col(c) for c in table.columns], F.col(CORRUPT_RECORD)).alias("_raw"),
        SOURCE_FILE, RECORD,
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
    job_flags += [(finite_rule(c), F.isnan(c) | (F.abs(c) > MAX_MAGNITUDE)) for c in finite_columns(table)]
    if partition_date:
        job_flags.append((ROW_DATE, F.expr(partition_date).isNull()))
    job_flags = [(name, F.coalesce(cond, F.lit(False))) for name, cond in job_flags]
    quarantine = job_flags + [(r.name, r.violation(refs)) for r in rules if r.action == QUARANTINE]
    warn = [(r.name, r.violation(refs)) for r in rules if r.action == WARN]

    def names(flags: list[tuple[str, Column]]) -> Column:
        if not flags:
            return F.array().cast("array<string>")
        return F.filter(F.array(*[F.when(cond, F.lit(name)) for name, cond in flags]), lambda x: x.isNotNull())

    return typed.withColumns({"_rules": names(quarantine), "_warnings": names(warn)})


def run_expectations(df: DataFrame, table: str, rules: list[Rule], refs: References, *, rows: int | None = None,
                     pandas_max_rows: int = 0) -> dict[str, dict[str, Any]]:
    """Run the rules as one GX suite over ``df``; per rule name: the expectation, GX's unexpected
    count and any error.

    Counts only (``BASIC`` without example lists): examples come from the flagged rows, which
    costs one small query per rule that found something instead of one per expectation.

    When ``df`` has ``rows`` <= ``pandas_max_rows`` (a night's batch), GX runs on a pandas copy of it
    in this process: each expectation then costs milliseconds instead of Spark jobs
    (docs/bench/validation.md). The SQL expectations (``UnexpectedRowsExpectation``: GX runs them
    on SQL engines only) still run on Spark.
    """
    from jobs.timings import phase

    with phase("GX context"):
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        context = gx.get_context(mode="ephemeral")
        # no tqdm "Calculating Metrics" bars: in a task log or the replay's console they garble the lines
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
    expectations = []
    for rule in rules:
        expectation = rule.expectation(refs)
        expectation.meta = {"rule": rule.name}
        expectations.append(expectation)
    kinds = {e.meta["rule"]: type(e).__name__ for e in expectations}
    on_pandas = rows is not None and rows <= pandas_max_rows
    sql = [e for e in expectations if kinds[e.meta["rule"]] == "UnexpectedRowsExpectation"]
    engines = {"spark": sql, "pandas": [e for e in expectations if e not in sql]} if on_pandas else \
        {"spark": expectations}
    results = []
    for engine, chosen in engines.items():
        if not chosen:
            continue
        with phase("GX context"):
            if engine == "pandas":
                source, frame = context.data_sources.add_pandas(name="driver"), nan_as_infinity(df).toPandas()
            else:  # No persist: GX would cache the frame and never release it, so a later run over the
                # same files would be validated against the stale cached rows.
                source, frame = context.data_sources.add_spark(name="lake", persist=False), df
            batch = (source.add_dataframe_asset(name=table).add_batch_definition_whole_dataframe("window")
                     .get_batch(batch_parameters={"dataframe": frame}))
        suite = gx.ExpectationSuite(name=f"{table}_rules_{engine}", expectations=chosen)
        with phase("GX expectations"):
            results += batch.validate(suite, result_format={"result_format": "BASIC",
                                                            "partial_unexpected_count": 0}).results
    out = {}
    for item in results:
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


def nan_as_infinity(df: DataFrame) -> DataFrame:
    """``df`` with every NaN of its floating-point columns as +infinity, for GX on pandas: pandas
    cannot tell NaN from null, so GX would skip a NaN as missing, where Spark (the split, and GX on
    Spark) orders NaN above every number, exactly as +infinity compares. Both then count it alike."""
    from pyspark.sql import functions as F

    floating = {name for name, kind in df.dtypes if kind in FLOATING}
    return df.select(*[F.when(F.isnan(name), F.lit(float("inf"))).otherwise(F.col(name)).alias(name)
                       if name in floating else F.col(name) for name in df.columns])


def examples(
    flagged: DataFrame, rule: str, columns: list[str], key: tuple[str, ...] = (), limit: int = 3
) -> list[dict[str, Any]]:
    """A few rows that broke ``rule``, as the text they arrived as (the rule's columns, or all),
    with where to find them: the file, the record number and the table's key columns."""
    from pyspark.sql import functions as F

    hit = F.array_contains("_rules", rule) | F.array_contains("_warnings", rule)
    rows = flagged.where(hit).select(SOURCE_FILE, RECORD, "_raw.*").orderBy(SOURCE_FILE, RECORD).limit(limit).collect()
    shown = {SOURCE_FILE, RECORD, *key, *columns}
    return [{k: v for k, v in r.asDict().items() if (k in shown if columns else v is not None)} for r in rows]

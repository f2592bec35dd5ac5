"""The feature rows a pipeline writes in its config, without a builder in Python: the feed's rows
(``validation.feed``), each of ``features.joins`` adding a table's columns matched on keys (a daily
table on its day too, a reference table as of the run), then ``features.expressions`` in order and
the label from ``features.label_expression``, each a Spark SQL expression. A name the config gets
wrong is refused when it loads (:func:`jobs.config.pipeline.declared_columns`); an expression
Spark cannot read fails here, before any row is read, naming its key."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from jobs.config import ConfigError
from jobs.lake.layout import PARTITION

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from jobs.config import PipelineConfig


def declared_rows(tables: dict[str, DataFrame], config: PipelineConfig) -> DataFrame:
    """The feed's rows with the config's joins, expressions and label (one row per feed row as
    long as every join's keys are unique in its table: the features job checks the count)."""
    from pyspark.sql import functions as F

    spec = config.features
    rows = tables[config.validation.feed]
    for join in spec.joins:
        table = config.tables[join.table]
        chosen = [F.col(r).alias(f"_key_{i}") for i, r in enumerate(join.right_keys())]
        chosen += [F.col(c).alias(join.prefix + c) for c in join.added(table)]
        condition = [rows[left] == F.col(f"_key_{i}") for i, left in enumerate(join.on)]
        if table.daily:
            chosen.append(F.col(PARTITION).alias("_key_day"))
            condition.append(rows[PARTITION] == F.col("_key_day"))
        other = tables[join.table].select(*chosen)
        rows = rows.join(other, on=condition, how="left").drop(*[c for c in other.columns if c.startswith("_key_")])
    for name, sql in spec.expressions.items():
        rows = _analysed(rows, lambda r, name=name, sql=sql: r.withColumn(name, F.expr(sql)),
                         f"features.expressions.{name} ({sql})")
    if spec.label_expression is not None:
        rows = _analysed(rows, lambda r: r.withColumn(spec.label, F.expr(spec.label_expression).cast("double")),
                         f"features.label_expression ({spec.label_expression})")
    return rows


def _analysed(rows: DataFrame, step: Callable[[DataFrame], DataFrame], where: str) -> DataFrame:
    """``step(rows)`` once Spark has resolved its plan (its schema), or a :class:`ConfigError`
    naming the config's key where it cannot (a column that is not there, SQL that does not parse)."""
    try:
        found = step(rows)
        found.schema  # noqa: B018 (resolves the plan: Spark Connect analyses lazily)
    except Exception as err:  # AnalysisException, ParseException, on classic Spark or Connect
        lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
        raise ConfigError(f"{where}: Spark cannot read it: {lines[0] if lines else type(err).__name__}. The feature "
                          f"rows' columns so far: {', '.join(rows.columns)}") from None
    return found

"""Point-in-time history and calendar features, added to the dataset builder's rows by the features job.

History: for a row of day D and each configured key (``features.history.keys``, e.g. the route),
the label's rate and the number of labelled rows over trailing windows of days
(``features.history.windows``) that end with day ``D - 1 - monitoring.label_delay_days``: only
outcomes that have landed before D's predictions are made. A feed whose calendar closes days
(``feed_calendar``) counts the windows and the delay in its open days, so a window of N days holds
N days that can have rows, and an outcome that lands after a weekend is not read before it has.
Rates are smoothed towards the rate of all rows of the same window (``prior_rows`` pseudo-rows at
that rate), so a key seen once or never gets the prior and a key seen often its own rate. A window
with no outcomes at all (the lake's first days) gives ``default_prior``; ``hist_days_<w>d`` says
how many of the window's days had outcomes, so a missing day is counted, not filled with zeros, and
the first days are flagged.

Computed in Spark with window functions over (key, day number) whose frame ends before the day,
in one query whatever the number of days built: the rows of the days before the window are read
from the validated zone by the features job (:func:`history_days`).

Calendar: ``day_of_year`` (unless ``features.calendar.day_of_year`` is false) and the days to the
next and since the last public holiday of ``features.calendar.holidays`` (a country code of the
``holidays`` package), capped at ``max_days``.

Columns: ``hist_<key>_<w>d_rate``, ``hist_<key>_<w>d_log_rows`` (log1p of the labelled rows) for
every key and window, ``hist_all_<w>d_rate`` and ``hist_days_<w>d`` per window, then the calendar's.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from jobs.config import FeedCalendar
from jobs.lake.layout import PARTITION, partition_value

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from jobs.config import CalendarSpec, FeatureSpec


def history_days(spec: FeatureSpec, days: list[dt.date], label_delay_days: int,
                 calendar: FeedCalendar | None = None) -> list[dt.date]:
    """The days before each of ``days`` whose outcomes its history reads, that are not among
    ``days`` themselves (none without history): the open days of ``calendar`` (default: every
    day) the windows reach, less the ``label_delay_days`` newest, whose outcomes have not landed."""
    if spec.history is None:
        return []
    reach = spec.history.reach(label_delay_days)
    calendar = calendar or FeedCalendar()
    wanted = {earlier for day in days
              for earlier in calendar.open_days_ending(day - dt.timedelta(days=1), reach)[: reach - label_delay_days]}
    return sorted(wanted - set(days))


def add_history(rows: DataFrame, spec: FeatureSpec, label_delay_days: int,
                built_days: list[dt.date] | None = None, calendar: FeedCalendar | None = None) -> DataFrame:
    """``rows`` (the builder's, over the days built and the days before them) with the history
    columns of :class:`HistorySpec`, each from the outcomes of earlier days only; only the rows of
    ``built_days`` when given (the earlier days' rows are read for their outcomes). With a
    ``calendar`` that closes days, the windows and the delay count its open days."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from jobs.runtime.session import local_mode

    history = spec.history
    assert history is not None
    # Every key's branch reads the builder's rows: in local mode computed once (its joins and the
    # Parquet scans), not once per key; eager, so the query below starts from these blocks, freed
    # with the frame. On a cluster a lost executor would take such blocks with it and fail the job,
    # so there each branch computes them again (Spark's lineage can).
    if local_mode(rows.sparkSession):
        rows = rows.localCheckpoint()
    label, delay = spec.label, label_delay_days
    numbers = day_numbers(rows, calendar)

    def trailing(w: int, keys: list[str]) -> Any:
        # the w days ending label_delay_days before the day before: outcomes landed by the day's predictions
        return Window.partitionBy(*keys).orderBy("_day").rangeBetween(-(w + delay), -(1 + delay))

    def counts(frame: DataFrame, keys: list[str]) -> DataFrame:
        found = frame.groupBy(*keys, PARTITION).agg(F.count(label).alias("_n"), F.sum(label).alias("_pos"))
        if numbers is None:
            return found.withColumn("_day", F.unix_date(F.col(PARTITION)))
        return found.join(F.broadcast(numbers), PARTITION)

    # Over all rows, per day: a range join of the (few) days, not a window without a partition,
    # which Spark warns about on every run.
    days = counts(rows, [])
    past = days.select(*[F.col(c).alias(f"_past{c}") for c in ("_day", "_n", "_pos")])
    reach = history.reach(delay)
    landed = (past["_past_day"] >= days["_day"] - reach) & (past["_past_day"] <= days["_day"] - 1 - delay)
    days = days.join(past, landed, "left")
    overall = []
    for w in history.windows:
        within = F.col("_past_day") >= F.col("_day") - w - delay
        n, pos = F.sum(F.when(within, F.col("_past_n"))), F.sum(F.when(within, F.col("_past_pos")))
        overall += [F.when(n > 0, pos / n).otherwise(F.lit(history.default_prior)).alias(f"hist_all_{w}d_rate"),
                    F.count(F.when(within & (F.col("_past_n") > 0), 1)).cast("double").alias(f"hist_days_{w}d")]
    days = days.groupBy(PARTITION).agg(*overall)
    priors: dict[int, Column] = {w: F.col(f"hist_all_{w}d_rate") for w in history.windows}

    def built(frame: DataFrame) -> DataFrame:
        return frame if built_days is None else frame.where(F.col(PARTITION).isin(list(built_days)))

    out = built(rows).join(built(days), PARTITION, "left")
    for key, cols in history.keys.items():
        known = rows.where(" AND ".join(f"`{c}` IS NOT NULL" for c in cols))
        sums = {}
        for w in history.windows:
            sums[f"_{key}_n{w}"] = F.sum("_n").over(trailing(w, cols))
            sums[f"_{key}_pos{w}"] = F.sum("_pos").over(trailing(w, cols))
        per_key = built(counts(known, cols).withColumns(sums).drop("_n", "_pos", "_day"))
        # rows whose key has a null part match nothing: no history, the prior
        out = out.join(per_key, [*cols, PARTITION], "left")
    derived = {}
    for w in history.windows:
        for key in history.keys:
            n = F.coalesce(F.col(f"_{key}_n{w}"), F.lit(0))
            pos = F.coalesce(F.col(f"_{key}_pos{w}"), F.lit(0.0))
            derived[f"hist_{key}_{w}d_rate"] = ((pos + history.prior_rows * priors[w]) /
                                               (n + history.prior_rows)).cast("double")
            derived[f"hist_{key}_{w}d_log_rows"] = F.log1p(n).cast("double")
    derived = {name: derived.get(name, F.col(name).cast("double")) for name in history.columns()}
    return out.select(*rows.columns, *[expr.alias(name) for name, expr in derived.items()])


def day_numbers(rows: DataFrame, calendar: FeedCalendar | None) -> DataFrame | None:
    """(``date``, ``_day``): the open days of ``calendar`` over the span of ``rows`` numbered in open
    days, the history windows' day number; None when every day is open (the day number is then the
    date's own, with no join)."""
    if calendar is None or calendar.every_day:
        return None
    present = sorted(partition_value(r[0]) for r in rows.select(PARTITION).distinct().collect())
    numbers = calendar.ordinals(present[0], present[-1]) if present else {}
    return rows.sparkSession.createDataFrame(list(numbers.items()), f"{PARTITION} date, _day int")


def calendar_rows(spec: CalendarSpec, days: list[dt.date]) -> list[tuple]:
    """(day, day of year, days to the next holiday, days since the last) of each day, the distances
    capped; without the columns ``spec`` leaves out."""
    table = []
    holidays: list[dt.date] = []
    if spec.holidays and days:
        import holidays as package

        years = range(min(days).year - 1, max(days).year + 2)
        holidays = sorted(package.country_holidays(spec.holidays, years=years))
    for day in sorted(set(days)):
        row: list[Any] = [day, *([float(day.timetuple().tm_yday)] if spec.day_of_year else [])]
        if spec.holidays:
            ahead = [(h - day).days for h in holidays if h >= day]
            behind = [(day - h).days for h in holidays if h <= day]
            row += [float(min(ahead[0] if ahead else spec.max_days, spec.max_days)),
                    float(min(behind[-1] if behind else spec.max_days, spec.max_days))]
        table.append(tuple(row))
    return table


def add_calendar(rows: DataFrame, spec: CalendarSpec, days: list[dt.date]) -> DataFrame:
    """``rows`` with the calendar's columns for their day (``days``: the days the rows are of)."""
    from pyspark.sql import functions as F

    schema = ", ".join([f"{PARTITION} date", *[f"{c} double" for c in spec.columns()]])
    calendar = rows.sparkSession.createDataFrame(calendar_rows(spec, days), schema)
    return rows.join(F.broadcast(calendar), PARTITION, "left").select(*rows.columns, *spec.columns())

"""Draft a new pipeline's folder from samples of its CSV files: ``pipelines/<name>/dataset.yaml``
(the tables with their columns' types, starting rules, the feature rows and the label) and
``tunables.yaml`` (its own MLflow names, the report's segments), checked by loading them with the
project's loader, then what to review and the commands that land the data and run it.

``python -m jobs.datasets.scaffold --help`` lists its options.

A table with the ``--date-column`` is daily (its rows land by that day), the others are reference
tables; the feed is the first daily table (or ``--feed``). The rules and the lists are what a
sample shows (:mod:`jobs.datasets.sample`), a draft for a person: ranges are the bounds seen,
written as warn rules until someone sets the real ones. The label's inputs (every column the label
expression reads) are left out of the model's inputs: they are its outcome. An existing folder is
replaced only with ``--force``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import math
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from jobs.config.dataset import DATE_TYPE, TIMESTAMP_TYPE
from jobs.config.files import DATASET_FILE, PIPELINES, TUNABLES_FILE, ConfigError, load_config
from jobs.config.pipeline import PipelineConfig
from jobs.config.pipelines import NAME, NAME_RULE, discover, find
from jobs.config.training import SweepSpec, TrainSpec
from jobs.datasets.draft_text import DEMO_FILE, dataset_text, demo_text, report, tunables_text
from jobs.datasets.landing import LandingError, days_of, table_argument
from jobs.datasets.sample import (
    NUMERIC,
    SAMPLE_ROWS,
    ColumnProfile,
    ScaffoldError,
    TableSample,
    draft_rules,
    find_key,
    find_references,
    read_sample,
    repeated_rows,
)
from jobs.lake.layout import PARTITION, RESERVED_PREFIX

LABEL_DESCRIPTION = "TODO: what a probability is of (the positive class), in words for the reports"
WORD = re.compile(r"`([^`]+)`|([A-Za-z_][A-Za-z0-9_]*)")
KEY_REPEATS = 0.01  # the share of a daily table's sample rows a drafted key may repeat on
STEPS_PER_EPOCH = 40  # the MLP's steps an epoch over a first window that the drafted batch size aims at
MIN_STEPS = 400  # the fewest steps over a first window that the drafted epochs give the MLP
LARGE_STEP = 0.01  # the learning rate of a small window's second candidate
MAX_EPOCHS = 60  # the most epochs drafted (each epoch is also evaluated on the holdout days)
MIN_BATCH = 32
QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")  # SQL string literals: no column inside


@dataclasses.dataclass
class Draft:
    """A pipeline's draft: its two files' contents, the samples they come from, the feed and its
    days, and what a person must look at (``left_out``: column -> why it is no model input)."""

    name: str
    dataset: dict[str, Any]
    tunables: dict[str, Any]
    samples: dict[str, TableSample]
    date_column: str
    feed: str
    days: list[dt.date] = dataclasses.field(default_factory=list)
    left_out: dict[str, str] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def daily(self) -> list[str]:
        return [t for t, spec in self.dataset["tables"].items() if spec["daily"]]


def label_columns(expression: str, columns: list[str]) -> list[str]:
    """The columns of ``columns`` that a Spark SQL ``expression`` names (as a word or in backticks;
    Spark matches names without regard to case), in the order of ``columns``."""
    words = {(quoted or bare).lower() for quoted, bare in WORD.findall(QUOTED.sub(" ", expression))}
    return [c for c in columns if c.lower() in words]


def check_names(name: str, samples: dict[str, TableSample]) -> None:
    """A pipeline name the deployment serves, and no column the lake or the validate job reserves."""
    if not NAME.fullmatch(name):
        raise ScaffoldError(f"--name {name!r}: a pipeline's name is {NAME_RULE} (it prefixes the DAG ids and the lake)")
    reserved = [f"{t}.{c}" for t, s in samples.items() for c in s.columns
                if c.lower() == PARTITION or c.startswith(RESERVED_PREFIX)]
    if reserved:
        raise ScaffoldError(f"column(s) {', '.join(reserved)}: a column may not be named {PARTITION!r} (the lake's "
                            f"partition column) or start with {RESERVED_PREFIX!r} (the validate job's own). Rename "
                            "them in the files before landing (e.g. date -> <table>_date), then run the scaffold on "
                            "the renamed files; jobs.datasets.landing.land_frame lands a renamed pandas frame")


def daily_tables(samples: dict[str, TableSample], date_column: str, feed: str | None) -> tuple[list[str], str]:
    """The tables holding ``date_column`` (it must hold dates or timestamps there), and the feed."""
    daily = [t for t, s in samples.items() if date_column in s.columns]
    if not daily:
        listed = "; ".join(f"{t}: {', '.join(s.columns)}" for t, s in samples.items())
        raise ScaffoldError(f"--date-column {date_column!r}: no table has that column ({listed}): name the column "
                            "of the day a row is about")
    for table in daily:
        column = samples[table].columns[date_column]
        if column.type not in (DATE_TYPE, TIMESTAMP_TYPE):
            examples = samples[table].text[date_column].dropna().head(3).tolist()
            raise ScaffoldError(f"--date-column {date_column!r}: {table}.{date_column} holds no dates (it reads as "
                                f"{column.type}, e.g. {examples}): name a column of dates (YYYY-MM-DD) or timestamps")
    if feed is not None and feed not in daily:
        raise ScaffoldError(f"--feed {feed!r}: the feed is a daily table, one with {date_column!r}: "
                            f"{', '.join(daily)}")
    return daily, feed or daily[0]


def tables_section(samples: dict[str, TableSample], daily: list[str]) -> dict[str, Any]:
    """``tables``: each one's columns and types, daily or not, its NaN-holding double columns."""
    tables = {}
    for name, sample in samples.items():
        spec: dict[str, Any] = {"daily": name in daily, "columns": {c: p.type for c, p in sample.columns.items()}}
        non_finite = [c for c, p in sample.columns.items() if p.non_finite]
        if non_finite:
            spec["allow_non_finite"] = non_finite
        tables[name] = spec
    return tables


def joins_for(references: dict[str, str], samples: dict[str, TableSample], columns: list[str]
              ) -> tuple[list[dict[str, Any]], dict[str, ColumnProfile]]:
    """``features.joins`` for the feed's references to reference tables, adding their few-valued and
    numeric columns, and the added columns' profiles by the name they get in the rows. A table
    joined twice, or whose columns are there already, gets the key's name as a prefix."""
    joins, added = [], {}
    counts = {target.partition(".")[0]: 0 for target in references.values()}
    for target in references.values():
        counts[target.partition(".")[0]] += 1
    for column, target in references.items():
        table, _, key = target.partition(".")
        usable = {c: p for c, p in samples[table].columns.items() if c != key and (p.type in NUMERIC or p.category)}
        if not usable:
            continue
        prefix = f"{column}_" if counts[table] > 1 or set(usable) & {*columns, *added} else ""
        joins.append({"table": table, "on": [column], **({"rename": {column: key}} if column != key else {}),
                      "columns": list(usable), **({"prefix": prefix} if prefix else {})})
        added.update({prefix + c: p for c, p in usable.items()})
    return joins, added


def feature_lists(columns: dict[str, ColumnProfile], date_column: str, label_reads: list[str]
                  ) -> tuple[dict[str, list[str]], dict[str, str]]:
    """id_columns, categorical and numeric from the feature rows' columns, and why each other column
    is left out of them."""
    lists: dict[str, list[str]] = {"id_columns": [], "categorical": [], "numeric": []}
    left_out = {}
    for name, p in columns.items():
        if name in label_reads:
            left_out[name] = "the label reads it: an outcome, not an input"
        elif name == date_column:
            left_out[name] = "the date column: the row's day, not an input"
        elif p.type in NUMERIC:
            lists["numeric"].append(name)
        elif p.category:
            lists["categorical"].append(name)
        elif p.type == "string" and p.distinct:
            lists["id_columns"].append(name)
        elif p.type in (DATE_TYPE, TIMESTAMP_TYPE):
            left_out[name] = f"a {p.type}: derive inputs from it under features.expressions (e.g. hour({name}))"
        else:
            left_out[name] = "no value in the sample"
    return lists, left_out


def draft_pipeline(name: str, samples: dict[str, TableSample], date_column: str, label_expression: str, *,
                   feed: str | None = None, label: str = "label", null_value: str | None = None) -> Draft:
    """The draft of pipeline ``name`` from the tables' samples (see the module)."""
    check_names(name, samples)
    daily, feed = daily_tables(samples, date_column, feed)
    reference = [t for t in samples if t not in daily]
    references = find_references(samples, reference, {t: date_column for t in daily})
    joins, added = joins_for(references.get(feed, {}), samples, list(samples[feed].columns))
    rows = {**samples[feed].columns, **added}
    reads = label_columns(label_expression, list(rows))
    if not reads:
        raise ScaffoldError(f"--label {label_expression!r} names no column of the feature rows (the feed {feed}'s "
                            f"and the joined ones: {', '.join(rows)}): the label is computed from them")
    if label.lower() in {c.lower() for c in rows}:
        raise ScaffoldError(f"--label-name {label!r}: a column of the rows has that name: name the label apart")
    keys, near = table_keys(samples, daily, date_column)
    rules = {t: draft_rules(s, date_column if t in daily else None, keys[t], references.get(t, {}),
                            reads if t == feed else ()) for t, s in samples.items()}
    lists, left_out = feature_lists(rows, date_column, reads)
    lists["id_columns"] = id_columns(rules[feed].get("key", []), lists["id_columns"], rows[date_column])
    if not lists["categorical"] and not lists["numeric"]:
        raise ScaffoldError(f"no input column is left (left out: {left_out}): the model needs a numeric or a "
                            "few-valued text column the label does not read")
    features = {"joins": joins, "expressions": {}, "label_expression": label_expression, "label": label,
                "label_description": LABEL_DESCRIPTION, **lists, "history": None, "calendar": None}
    dataset = {"dataset": name, **({"csv_options": {"nullValue": null_value}} if null_value else {}),
               "tables": tables_section(samples, daily), "validation": {"feed": feed, "rules": rules},
               "features": features}
    tunables = {"train": {"model_name": name, "experiment": name},
                "evaluation": {"segments": lists["categorical"][:2]}}
    draft = Draft(name, dataset, tunables, samples, date_column, feed, left_out=left_out, notes=near)
    _feed_days(draft)
    _batch_size(draft)
    _notes(draft, reference, joins)
    return draft


def table_keys(samples: dict[str, TableSample], daily: list[str], date_column: str
               ) -> tuple[dict[str, list[str] | None], list[str]]:
    """Each table's key (:func:`find_key`), and a note for each daily table whose key holds but for
    a few repeated rows (at most :data:`KEY_REPEATS` of them: a source's clock that repeats an hour
    when it goes back, a row sent twice), which the key rule then quarantines as their days land."""
    keys, notes = {}, []
    for table, sample in samples.items():
        keys[table] = find_key(sample, date_column if table in daily else None)
        if keys[table] is None and table in daily:
            keys[table] = find_key(sample, date_column, repeats=KEY_REPEATS)
            if keys[table]:
                repeated = repeated_rows(sample, keys[table])
                example = ", ".join(f"{c}={v}" for c, v in repeated.iloc[0][keys[table]].items())
                notes.append(f"{table}: no set of columns tells every row of the sample apart; the key "
                             f"{keys[table]} does but for {len(repeated)} row(s) that repeat one (e.g. {example}): "
                             "the key rule quarantines such rows as their days land. If the source repeats rows "
                             "on purpose, add the column that tells them apart to the key and features.id_columns")
    return keys, notes


def id_columns(key: list[str], many_valued: list[str], date: ColumnProfile) -> list[str]:
    """The columns that tell a prediction row apart within its day: the feed's key without its date
    column (with it, when that holds a timestamp: several rows a day), then the many-valued text
    columns."""
    from_key = [c for c in key if c != date.name or date.type == TIMESTAMP_TYPE]
    return list(dict.fromkeys([*from_key, *many_valued]))


def _batch_size(draft: Draft) -> None:
    """A smaller ``train.batch_size`` where the first window's rows would give the MLP few steps: about
    :data:`STEPS_PER_EPOCH` an epoch, a power of two from :data:`MIN_BATCH` up to the default; then
    the sweep's epochs (:func:`_epochs`)."""
    if not draft.days:
        return
    defaults = TrainSpec(model_name=draft.name, experiment=draft.name)
    window, default = defaults.train_days, defaults.batch_size
    rows = int(draft.samples[draft.feed].rows / len(draft.days) * window)
    wanted = max(MIN_BATCH, rows // STEPS_PER_EPOCH)
    size = min(default, 2 ** int(math.log2(wanted)))
    steps = max(1, math.ceil(rows / size))
    if size < default:
        draft.tunables["train"]["batch_size"] = size
        draft.notes.append(f"train.batch_size {size} (the default {default}): a first window of about {rows} rows "
                           f"then makes about {steps} steps an epoch")
    _epochs(draft, steps)


def _epochs(draft: Draft, steps: int) -> None:
    """Where the sweep's default epochs give the MLP fewer than :data:`MIN_STEPS` steps over the first
    window (``steps`` an epoch), as many epochs as make about that many (at most
    :data:`MAX_EPOCHS`), and two candidates:
    :data:`LARGE_STEP` first (a sweep of one, as ``make demo``'s profile runs, trains it alone), then
    the default learning rate (which of them learns a small window better depends on the data: the
    sweep chooses on the validation days)."""
    sweep = SweepSpec()
    default = sweep.epochs[0]
    if steps * default >= MIN_STEPS:
        return
    epochs = min(MAX_EPOCHS, math.ceil(MIN_STEPS / steps))
    rates = list(dict.fromkeys([LARGE_STEP, *sweep.learning_rate]))
    draft.tunables["sweep"] = {"size": len(rates), "learning_rate": rates, "epochs": [epochs]}
    draft.notes.append(f"sweep.epochs [{epochs}] (the default {default}) and learning rates {rates}: {steps} steps "
                       f"an epoch would give the MLP {steps * default} steps over the first window; the sweep "
                       "trains one candidate per rate and keeps the better on the validation days")


def _feed_days(draft: Draft) -> None:
    """The feed's days in the sample; a feed without weekend rows over two weeks or more is drafted
    as open on weekdays; days without rows among the open ones make it a calendar of empty days
    (``empty_days``: the landing lands them without rows), and are noted."""
    text = draft.samples[draft.feed].text
    try:
        days = sorted(set(days_of(text.dropna(subset=[draft.date_column]), [draft.date_column], draft.feed)))
    except LandingError as err:
        raise ScaffoldError(str(err)) from None
    draft.days = days
    span = (days[-1] - days[0]).days + 1 if days else 0
    calendar = "weekdays" if span >= 14 and all(d.weekday() < 5 for d in days) else "every"
    if calendar == "weekdays":
        draft.dataset["feed_calendar"] = {"days": "weekdays"}
        draft.notes.append(f"{draft.feed} has no rows on a Saturday or Sunday in the sample: feed_calendar.days is "
                           "weekdays (the validate job then does not wait for weekends)")
    open_days = {days[0] + dt.timedelta(days=n) for n in range(span)}
    gaps = sorted(d for d in open_days - set(days) if calendar == "every" or d.weekday() < 5)
    if gaps:
        draft.dataset.setdefault("feed_calendar", {})["empty_days"] = True
        draft.notes.append(f"{draft.feed} has no rows on {', '.join(map(str, gaps[:10]))}"
                           f"{' ...' if len(gaps) > 10 else ''}: feed_calendar.empty_days is true (the landing writes "
                           "such a day as a file with its header only, and the jobs pass over it; a day not landed "
                           "is still late); days closed by design can also be listed under feed_calendar.closed")


def _notes(draft: Draft, reference: list[str], joins: list[dict[str, Any]]) -> None:
    """What the draft cannot know: each a line for the report."""
    samples, rules = draft.samples, draft.dataset["validation"]["rules"]
    for table, sample in samples.items():
        if sample.truncated:
            draft.notes.append(f"{table}: only the first {sample.rows} rows were read: a type, bound or key may "
                               "not hold for the rest of the file")
        if "key" not in rules[table]:
            draft.notes.append(f"{table}: no set of columns tells its rows apart in the sample: no key is declared")
            if table == draft.feed and len(draft.days) < sample.rows and not draft.dataset["features"]["id_columns"]:
                draft.notes.append(f"{table} has several rows a day and nothing tells them apart: list the columns "
                                   "that do in features.id_columns, or scoring refuses a day whose rows repeat")
    whole = [f"{t}.{c}" for t, s in samples.items() for c, p in s.columns.items() if p.type in ("int", "bigint")]
    if whole:
        draft.notes.append(f"Typed as whole numbers, as every value seen was one: {', '.join(whole)}. A value with a "
                           "fraction would not parse and its row would be quarantined: make a column double where "
                           "the source may hold one")
    column = samples[draft.feed].columns[draft.date_column]
    if column.nulls:
        draft.notes.append(f"{draft.feed}.{draft.date_column} is empty in {column.nulls} row(s): landing refuses "
                           "rows without a day: drop or fix them first")
    if column.offset:
        draft.notes.append(f"{draft.feed}.{draft.date_column} holds timestamps with a UTC offset: landing splits "
                           "by the local day, Spark reads the day in UTC: convert them to UTC before landing")
    joined = {j["table"] for j in joins}
    for table in reference:
        if table not in joined:
            draft.notes.append(f"{table} is validated, and no column of the feed joins it: add a features.joins "
                               "entry if its columns help")
    for table in draft.daily:
        if table != draft.feed:
            draft.notes.append(f"{table} is daily and not joined to the feed's rows: a features.joins entry on its "
                               "keys matches a row on its day too")


def write_pipeline(draft: Draft, folder: Path, force: bool = False) -> PipelineConfig:
    """Write the draft's two files to ``folder`` once they load as a pipeline (written beside it
    first, then moved in), and check the folder's pipelines can all be served together (no shared
    MLflow names). Returns the loaded config."""
    if folder.exists() and not force:
        raise ScaffoldError(f"{folder} exists: give --force to replace its {DATASET_FILE} and {TUNABLES_FILE}, or "
                            "another --name")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{draft.name}.", dir=folder.parent))  # hidden: not a pipeline
    try:
        (staging / DATASET_FILE).write_text(dataset_text(draft))
        (staging / TUNABLES_FILE).write_text(tunables_text(draft))
        try:
            drafted = load_config(staging, profiles=(), overlays=())
        except ConfigError as err:
            raise ScaffoldError(f"the draft does not load, a fault of the scaffold: {err}") from None
        folder.mkdir(exist_ok=True)
        for file in (DATASET_FILE, TUNABLES_FILE):
            os.replace(staging / file, folder / file)
        demo = demo_text(draft, drafted)
        (folder / DEMO_FILE).unlink(missing_ok=True)
        if demo is not None:
            (folder / DEMO_FILE).write_text(demo)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    served = find(draft.name, discover(folders=str(folder.parent)))
    if served.error:
        raise ScaffoldError(f"wrote {folder}, and it cannot be served beside the other pipelines there: "
                            f"{served.error}")
    return load_config(folder, profiles=(), overlays=())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--name", required=True, help="the pipeline's name (its folder, DAG ids and lake)")
    parser.add_argument("--table", type=table_argument, action="append", required=True, metavar="NAME=PATH.csv",
                        help="a table and a CSV sample of it (repeat for more)")
    parser.add_argument("--date-column", required=True, help="the column of the day a daily table's row is about")
    parser.add_argument("--label", required=True, help="Spark SQL over the feature rows: 1, 0, or null (no label)")
    parser.add_argument("--label-name", default="label", help="the label column's name (default: label)")
    parser.add_argument("--feed", default=None, help="the daily table whose rows become feature rows (default: the "
                                                     "first daily one)")
    parser.add_argument("--null-value", default=None, help="the text that means no value (e.g. NA); empty is one")
    parser.add_argument("--sample-rows", type=int, default=SAMPLE_ROWS,
                        help="rows read of each file (default: %(default)s)")
    parser.add_argument("--pipelines-dir", type=Path, default=PIPELINES, metavar="DIR",
                        help="the folder the pipeline's folder is written in (default: the repository's pipelines/)")
    parser.add_argument("--force", action="store_true", help="replace the files of an existing pipeline folder")
    args = parser.parse_args(argv)
    if args.sample_rows < 1:
        parser.error(f"--sample-rows {args.sample_rows}: a sample needs at least one row")
    names = [name for name, _ in args.table]
    if len(set(names)) < len(names):
        parser.error(f"--table: each table once, got {names}")
    nulls = ("", *([args.null_value] if args.null_value else []))
    try:
        samples = {name: read_sample(name, path, nulls, args.sample_rows) for name, path in args.table}
        draft = draft_pipeline(args.name, samples, args.date_column, args.label, feed=args.feed,
                               label=args.label_name, null_value=args.null_value)
        folder = args.pipelines_dir / args.name
        config = write_pipeline(draft, folder, args.force)
    except ScaffoldError as err:
        parser.error(str(err))
    sys.stdout.write(report(draft, folder, config, args.pipelines_dir.resolve() != PIPELINES.resolve()))


if __name__ == "__main__":
    main()

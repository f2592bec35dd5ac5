"""A pipeline's draft (:class:`jobs.datasets.scaffold.Draft`) as text a person reads: its
``dataset.yaml`` and ``tunables.yaml``, each section under a comment saying what it is and how it
was inferred, and the report the scaffold prints (what the sample showed, what to review, the
commands that land the data and run it)."""

from __future__ import annotations

import datetime as dt
import json
import shlex
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from jobs.config.files import DATASET_FILE, TUNABLES_FILE
from jobs.lake.layout import PARTITION, RESERVED_PREFIX, ROOT_ENV

if TYPE_CHECKING:
    from jobs.config.pipeline import PipelineConfig
    from jobs.datasets.scaffold import Draft

WIDTH = 110  # of the YAML and the report's lines
DEMO_FILE = "demo.env"  # scripts/demo.sh reads it

TABLES = ("The raw tables. A column's type is what every value of the sample parses as (one without a value in "
          f"the sample is a string: set its type). A column may not be named `{PARTITION}` or start with "
          f"`{RESERVED_PREFIX}`. A daily table lands as raw/<table>/{PARTITION}=YYYY-MM-DD/<table>.csv, a reference "
          "table as raw/<table>/<table>.csv.")
VALIDATION = ("The feed and each table's rules, inferred from the sample: not_null where no value was missing; "
              "ranges (the bounds seen) and values (the few seen) as warn rules, counted in the report and not "
              "quarantined until you set the source's real limits and take them off `warn`; references where every "
              "value lies in another table's unique column; a key where a set of columns told the rows apart (a "
              "daily table's with its date column: unique across a window of days).")
FEATURES = [
    ("joins", "reference tables the feed's columns point to (their references rule), matched on that column"),
    ("expressions", "Spark SQL columns of your own, in order (e.g. an hour from a timestamp)"),
    ("label_expression", "the label from the rows' columns: 1, 0, or null (no label); as given"),
    ("label", "the label column's name"),
    ("label_description", "WRITE what a probability is of, in the reports' words"),
    ("id_columns", "text columns of many values: copied to each prediction row to tell it, not inputs"),
    ("categorical", "text columns of few values: the model embeds them"),
    ("numeric", "number columns: the model standardises them. The columns the label reads are left out of "
                "every list: they are the outcome"),
    ("history", "off. {keys: {<name>: [<column>, ...]}} adds each key's label rate over the trailing days "
                "(point in time; docs/your-own-data.md)"),
    ("calendar", "off. {holidays: US} adds the days to and since a country's holidays"),
]


def _yaml(value: dict[str, Any], indent: int = 0, flow: bool | None = None) -> list[str]:
    """``value`` as YAML lines, indented, a key each; ``flow=None`` writes lists and mappings of plain
    values on one line (a key with a plain value stays a line of its own: no document of one mapping)."""
    lines = []
    for key, item in value.items():
        style = flow if isinstance(item, (dict, list)) else False
        text = yaml.safe_dump({key: item}, sort_keys=False, default_flow_style=style, width=WIDTH - indent,
                              allow_unicode=True)
        lines += [" " * indent + line for line in text.splitlines()]
    return lines


def _comment(text: str, indent: int = 0) -> list[str]:
    return [" " * indent + "# " + line for line in textwrap.wrap(text, WIDTH - indent - 2)]


def dataset_text(draft: Draft) -> str:
    """The draft's ``dataset.yaml``."""
    data = draft.dataset
    files = ", ".join(s.path.name for s in draft.samples.values())
    lines = [*_comment(f"The {draft.name} pipeline's dataset, drafted by `python -m jobs.datasets.scaffold` from the "
                       f"first rows of {files}. A draft: review every section (docs/your-own-data.md; every key and "
                       f"its default: docs/configuration.md). What the pipeline tunes is in {TUNABLES_FILE}."),
             *_yaml({"dataset": data["dataset"]}), ""]
    if "csv_options" in data:
        lines += [*_comment("Spark's CSV reader options: the text that means no value (an empty field is none too)"),
                  *_yaml({"csv_options": data["csv_options"]}), ""]
    lines += [*_comment(TABLES), "tables:"]
    for name, spec in data["tables"].items():
        sample = draft.samples[name]
        kind = f"daily (it has {draft.date_column})" if spec["daily"] else "a reference table"
        lines += [*_comment(f"{name}: {kind}; {sample.rows} rows read of {sample.path}", 2),
                  *_yaml({name: spec}, 2, flow=False)]
    if "feed_calendar" in data:
        lines += ["", *_comment("The days the feed has rows (every: each calendar day; weekdays: Monday to Friday); "
                                "closed: days it has none by design; empty_days: a day landed without rows is passed "
                                "over"), *_yaml({"feed_calendar": data["feed_calendar"]})]
    validation = data["validation"]
    lines += ["", *_comment(VALIDATION), "validation:", *_comment("the daily table whose rows become feature rows", 2),
              *_yaml({"feed": validation["feed"]}, 2), "  rules:"]
    for name, rules in validation["rules"].items():
        lines += [*_yaml({name: rules}, 4)]
    lines += ["", *_comment("The feature rows: the feed's rows, the joins' columns, the expressions, the label."),
              "features:"]
    for key, note in FEATURES:
        lines += [*_comment(note, 2), *_yaml({key: data["features"][key]}, 2)]
    return "\n".join(lines) + "\n"


def tunables_text(draft: Draft) -> str:
    """The draft's ``tunables.yaml``: only what the pipeline changes from the schema's defaults."""
    tunables = draft.tunables
    return "\n".join([
        *_comment(f"What the {draft.name} pipeline sets beyond the schema's defaults (docs/configuration.md lists "
                  "them all), drafted by the scaffold."),
        *_comment("Its own MLflow experiment and registered model: two pipelines may not share one."),
        *_yaml({"train": tunables["train"]}, flow=False), "",
        *_comment("The report's metrics broken down by these feature columns (a few categorical ones)."),
        *_yaml({"evaluation": tunables["evaluation"]}),
        *(["", *_comment("A small first window: more epochs than the default, and a second candidate at a larger "
                         "learning rate (the sweep keeps the better on the validation days)."),
           *_yaml({"sweep": tunables["sweep"]})] if "sweep" in tunables else []),
    ]) + "\n"


def _rules_of(column: str, rules: dict[str, Any]) -> str:
    said = [*(["not null"] if column in rules.get("not_null", []) else []),
            *([f"range {rules['ranges'][column]}"] if column in rules.get("ranges", {}) else []),
            *([f"values {rules['values'][column]}"] if column in rules.get("values", {}) else []),
            *([f"in {rules['references'][column]}"] if column in rules.get("references", {}) else [])]
    return ", ".join(said)


def _inferred(draft: Draft) -> list[str]:
    lines = ["What the sample shows (rules in brackets):"]
    for name, sample in draft.samples.items():
        rules = draft.dataset["validation"]["rules"][name]
        kind = f"daily on {draft.date_column}{', the feed' if name == draft.feed else ''}" \
            if name in draft.daily else "reference"
        key = f", key {rules['key']}" if "key" in rules else ", no key"
        lines.append(f"  {name} ({kind}): {sample.rows} rows read{key}")
        lines += [f"    {c}: {p.type}" + (f" [{said}]" if (said := _rules_of(c, rules)) else "")
                  for c, p in sample.columns.items()]
    features = draft.dataset["features"]
    joined = "; ".join(f"{j['table']} on {j['on'][0]}" for j in features["joins"]) or "none"
    lines += [f"Feature rows: the rows of {draft.feed}, joined: {joined}; {features['label']} = "
              f"{features['label_expression']}"]
    lines += [f"  {key}: {', '.join(features[key]) or '-'}" for key in ("categorical", "numeric", "id_columns")]
    lines += [f"  left out: {column} ({why})" for column, why in draft.left_out.items()]
    return lines


def _review(draft: Draft, config: PipelineConfig) -> list[str]:
    reads = [c for c, why in draft.left_out.items() if why.startswith("the label")]
    window = config.train.train_days + config.train.validation_days + config.train.holdout_days
    items = [
        "The rules are a draft from a sample: a range is the bounds seen, not a limit, and values are the ones "
        "seen; both are warn rules until you set the real ones and take them off `warn`. Check each not_null, "
        "key and reference: a row breaking one is quarantined. The columns the label reads get no not_null: a "
        "row whose outcome is not known yet has no label.",
        f"features.label_description: write what a probability of {config.features.label} is of.",
        f"Left out of the inputs as the label's: {', '.join(reads)}. A column known only once the outcome is "
        "(recorded after it, or derived from it) leaks it too: take it out of categorical and numeric.",
        f"Training needs {window} days with features (train.train_days + validation_days + holdout_days); the "
        f"sample of {draft.feed} holds {len(draft.days)} day(s).",
        *draft.notes,
    ]
    return ["Review before you run it:", *(line for item in items for line in
                                           textwrap.wrap(item, WIDTH, initial_indent="  - ", subsequent_indent="    "))]


def landing_command(draft: Draft) -> str:
    """The command that lands the draft's files (without ``--lake-root``)."""
    def table(name: str) -> str:
        kind = "daily" if name in draft.daily else "reference"
        return f"--{kind} {shlex.quote(f'{name}={draft.samples[name].path.resolve()}')}"

    return " ".join(["python -m jobs.datasets.landing", *map(table, draft.daily),
                     f"--date-column {shlex.quote(draft.date_column)}",
                     *(table(name) for name in draft.samples if name not in draft.daily)])


def demo_days(draft: Draft, config: PipelineConfig) -> tuple[dt.date, dt.date, dt.date] | None:
    """The first day of the sample, the day a first training window ends on, and the day after
    it to score; None when the sample's days do not hold a window and a day more."""
    days, window = draft.days, config.train.window_days
    if len(days) <= window:
        return None
    return days[0], days[window - 1], days[window]


def demo_text(draft: Draft, config: PipelineConfig) -> str | None:
    """The pipeline's ``demo.env`` (what ``make demo PIPELINE=<name>`` runs), or None (no window)."""
    days = demo_days(draft, config)
    if days is None:
        return None
    first, train, score = days
    return "\n".join([
        f"# make demo PIPELINE={draft.name}: land the files, ingest {first}..{score}, train on the first window "
        f"up to {train}, score {score}. Written by the scaffold.",
        f'FIRST_DAY="${{FIRST_DAY:-{first}}}"', f'TRAIN_DATE="${{TRAIN_DATE:-{train}}}"',
        f'SCORE_DATE="${{SCORE_DATE:-{score}}}"', f"LAND={shlex.quote(landing_command(draft))}", ""])


def commands(draft: Draft, folder: Path, elsewhere: bool, demo: bool) -> list[str]:
    """The commands that land the files in the pipeline's lake and run its first days."""
    lake = f'"${ROOT_ENV}/{draft.name}"'
    last, days = draft.days[-1], (draft.days[-1] - draft.days[0]).days + 1
    window = f"--config {shlex.quote(str(folder.resolve()))} --run-date {last} --days {days} --lake-root {lake}"
    conf = json.dumps({"run_date": str(last), "days": days})
    exported = [f"  export PIPELINES_DIR={shlex.quote(str(folder.parent.resolve()))}"] if elsewhere else []
    first = ["Land the data and run the first window through the DAGs (the days: demo.env):",
             *exported, f"  make demo PIPELINE={draft.name}", "or step by step:"] if demo else \
            ["Land the data and run it:"]
    return [
        *first,
        f"  source scripts/env.sh   # {ROOT_ENV} and the rest, as make demo has them",
        *exported,
        "  " + landing_command(draft).replace(" --", " \\\n      --") + f" \\\n      --lake-root {lake}",
        f"  python -m jobs.validation.job {window}",
        f"  python -m jobs.features.job {window}",
        f"or through Airflow (its DAGs: {draft.name}_ingest, {draft.name}_train, {draft.name}_score):",
        f"  airflow dags test {draft.name}_ingest --conf '{conf}'",
    ]


def report(draft: Draft, folder: Path, config: PipelineConfig, elsewhere: bool) -> str:
    """What the scaffold prints once the files are written and load."""
    demo = (folder / DEMO_FILE).exists()
    head = f"Wrote {folder / DATASET_FILE} and {folder / TUNABLES_FILE}: they load as the pipeline {draft.name}."
    return "\n".join([head, "", *_inferred(draft), "", *_review(draft, config), "",
                      *commands(draft, folder, elsewhere, demo)]) + "\n"

"""The lake's layout has one owner: jobs/lake/layout.py."""

from __future__ import annotations

import ast
import datetime as dt
from pathlib import Path

import pytest

from jobs.lake.layout import (
    PARTITION,
    Lake,
    checkpoint_epochs,
    checkpoint_file,
    partition_day,
    partition_name,
    shadow_version,
)

REPO = Path(__file__).resolve().parents[3]
# What only jobs/lake/layout.py may spell: partition folders, report, checkpoint and sidecar file names,
# the lake's environment variable, and the partition column itself.
LAKE_NAMES = ("date=", "summary.json", "report.html", "drift.json", "drift.png", "monitoring.json", "decay.json",
              "run.json", "epoch-", "LAKE_ROOT")


def string_constants(path: Path) -> list[tuple[int, str]]:
    """The string literals of a module that are not docstrings, nor a JSON schema's ``format=`` (an
    Airflow ``Param(format="date")`` names a value's kind, not the lake's partition column)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value) for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    formats = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.keyword) and node.arg == "format"}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings | formats]


@pytest.mark.parametrize("folder", ["jobs", "orchestration", "plugins", "benchmarks"])
def test_no_module_but_jobs_lake_spells_the_lakes_names(folder):
    spelled = [
        f"{path.relative_to(REPO)}:{line}: {value!r}"
        for path in sorted((REPO / folder).rglob("*.py")) if path != REPO / "jobs" / "lake" / "layout.py"
        for line, value in string_constants(path)
        if value == PARTITION or any(name in value for name in LAKE_NAMES)
    ]
    assert not spelled, "ask jobs.lake.layout instead:\n" + "\n".join(spelled)


def test_paths_derive_from_the_root_and_partitions_round_trip():
    lake = Lake("s3a://bucket/lake")
    day = dt.date(2013, 1, 2)
    assert lake.raw_file("flights", day) == "s3a://bucket/lake/raw/flights/date=2013-01-02/flights.csv"
    assert lake.raw_file("planes") == "s3a://bucket/lake/raw/planes/planes.csv"
    assert lake.partition(lake.predictions, day) == "s3a://bucket/lake/predictions/date=2013-01-02"
    assert lake.report("training", day) == "s3a://bucket/lake/reports/training/date=2013-01-02/summary.json"
    assert lake.validation_report(day, 7).endswith("/reports/validation/date=2013-01-02/days=7/summary.json")
    assert partition_day(partition_name(day)) == day
    assert partition_day("date=2013-02-30") is None and partition_day("_SUCCESS") is None
    assert checkpoint_epochs(checkpoint_file(12)) == 12 and checkpoint_epochs("run.json") is None
    shadow = lake.partition(lake.shadow_predictions("3"), day)
    assert shadow == "s3a://bucket/lake/shadow/version=3/date=2013-01-02"  # apart from predictions/
    assert shadow_version(lake.shadow_predictions("3").rsplit("/", 1)[-1]) == "3"
    assert shadow_version("version=") is None and shadow_version("date=2013-01-02") is None


def test_the_lake_is_found_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LAKE_ROOT", "file:///data/lake/")
    assert Lake.at() == Lake("/data/lake")
    assert Lake.at("s3a://b/l/") == Lake("s3a://b/l")
    monkeypatch.delenv("LAKE_ROOT")
    monkeypatch.setenv("PIPELINE_HOME", str(tmp_path))
    assert Lake.at() == Lake(str(tmp_path / "lake"))

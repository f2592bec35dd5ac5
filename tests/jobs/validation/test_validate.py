from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.datasets.flights import suites
from jobs.lake.layout import VALIDATION_PAGE, Lake, partition_name
from jobs.validation.job import main, validate
from jobs.validation.report import ValidationFailed
from jobs.validation.schema import schema_drift
from tests.jobs.bad_inputs import CASES, Case, Mutation

DAY = dt.date(2013, 1, 9)  # the 7 days before it are in the lake too: the row-count band is checked
RUN_ID = "corpus"
# The feed and the tables its rules refer to; weather has its own suite and is not needed here.
FLIGHT_SUITES = {name: suite for name, suite in suites().items() if name != "weather"}


def bad_lake(lake: Lake, root: Path, case: Case) -> Lake:
    """A lake whose raw zone is a copy of the real one with DAY's flights file broken by ``case``."""
    return broken_days(lake, root, {DAY: case.mutate})


def broken_days(lake: Lake, root: Path, mutations: dict[dt.date, Mutation]) -> Lake:
    """A lake whose raw zone is a copy of the real one with each day's flights file broken by its
    mutation (given the day's file and the day before's)."""
    bad = Lake(str(root / "lake"))
    shutil.copytree(f"{lake.root}/raw", f"{bad.root}/raw")
    for day, mutate in mutations.items():
        target = Path(bad.raw_file("flights", day))
        previous = Path(lake.raw_file("flights", day - dt.timedelta(days=1))).read_bytes()
        target.write_bytes(mutate(target.read_bytes(), previous))
    return bad


def raw_digest(lake: Lake) -> dict[str, str]:
    root = Path(lake.root, "raw")
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*.csv")}


def zone_rows(path: str, day: dt.date = DAY) -> list[dict]:
    folder = Path(path) / partition_name(day)
    if not folder.exists():
        return []
    return pq.read_table(folder).to_pylist()


def data_files(path: str) -> list[str]:
    """The sha256 of each data file in DAY's partition (file names hold a random id, contents must not)."""
    return sorted(hashlib.sha256(p.read_bytes()).hexdigest() for p in (Path(path) / partition_name(DAY)).glob("part-*"))


def validated_on_their_days(spark, lake: Lake, config, root: Path, mutations: dict[dt.date, Mutation]):
    """(the lake with each day's flights broken by its mutation (:func:`broken_days`), the raw
    zone's digest before, the report of one validation run over those days)."""
    bad = broken_days(lake, root, mutations)
    before = raw_digest(bad)
    days = sorted(mutations)
    return bad, before, validate(spark, bad, config, days, days[-1], RUN_ID, suites=FLIGHT_SUITES)


SOFT = [c for c in CASES if not c.hard]
# Each row-level case breaks a day of its own (DAY and the days before it), and one run validates
# them all, as a night's backfill of a week would: a case's rows must not leak into another's day.
SOFT_DAYS = {case.name: DAY - dt.timedelta(days=n) for n, case in enumerate(SOFT)}


@pytest.fixture(scope="module")
def soft_run(spark, lake, config_without_gx, tmp_path_factory):
    """:func:`validated_on_their_days` with every row-level case on its day."""
    return validated_on_their_days(spark, lake, config_without_gx, tmp_path_factory.mktemp("soft"),
                                   {SOFT_DAYS[c.name]: c.mutate for c in SOFT})


@pytest.mark.slow
@pytest.mark.parametrize("case", SOFT, ids=lambda c: c.name)
def test_bad_rows_are_quarantined_with_their_rules_and_nothing_is_lost(soft_run, case):
    bad, before, report = soft_run
    day = SOFT_DAYS[case.name]
    assert report.success and report.written, report.summary()

    counts = next(t for t in report.tables if t.table == "flights").partitions[day.isoformat()]
    lines = Path(bad.raw_file("flights", day)).read_bytes().rstrip(b"\n").split(b"\n")
    assert counts.rows_in == len(lines) - 1  # every data line of the file is a row, even a broken one
    assert counts.quarantined == case.quarantined
    assert counts.rows_in == counts.validated + counts.quarantined
    assert (counts.written_validated, counts.written_quarantined) == (counts.validated, counts.quarantined)

    held = zone_rows(bad.quarantine("flights"), day)
    assert len(held) == case.quarantined and len(zone_rows(bad.validated("flights"), day)) == counts.validated
    for rule, rows in case.rules.items():
        assert sum(rule in r["_rules"] for r in held) == rows, (rule, [r["_rules"] for r in held])
        assert counts.by_rule[rule] == rows
    assert {r["_run_id"] for r in held} == {RUN_ID}
    raw_text = Path(bad.raw_file("flights", day)).read_bytes().decode("utf-8", errors="replace")
    for r in held:  # held back as the text it arrived as
        assert r["_corrupt_record"] or f"{r['carrier'] or 'NA'},{r['flight']}," in raw_text
    assert raw_digest(bad) == before


# A broken header stops its table's checks for the whole run: those cases run alone. Every other
# batch check is judged per day, so those cases share one run, each on a day of its own (another
# day's rows on the first, so that the day whose rows it copies is not in the run).
HEADER_CHECK = "header_matches_schema"
BATCH = sorted((c for c in CASES if c.hard and c.check != HEADER_CHECK), key=lambda c: c.name != "another_days_rows")
BATCH_DAYS = {case.name: DAY - dt.timedelta(days=len(BATCH) - 1 - n) for n, case in enumerate(BATCH)}


@pytest.fixture(scope="module")
def batch_run(spark, lake, config_without_gx, tmp_path_factory):
    """:func:`validated_on_their_days` with every batch-level case on its day."""
    return validated_on_their_days(spark, lake, config_without_gx, tmp_path_factory.mktemp("batch"),
                                   {BATCH_DAYS[c.name]: c.mutate for c in BATCH})


@pytest.mark.parametrize("case", [c for c in CASES if c.hard], ids=lambda c: c.name)
def test_a_broken_batch_fails_naming_table_partition_check_and_what_was_seen(
    request, spark, lake, config_without_gx, tmp_path, case
):
    if case.name in BATCH_DAYS:
        bad, before, report = request.getfixturevalue("batch_run")
        day = BATCH_DAYS[case.name]
    else:
        bad, day = bad_lake(lake, tmp_path, case), DAY
        before = raw_digest(bad)
        report = validate(spark, bad, config_without_gx, [DAY], DAY, RUN_ID, suites=FLIGHT_SUITES)
    assert not report.success and not report.written
    failed = {(c.table, c.partition, c.check) for c in report.failures}
    assert ("flights", day.isoformat(), case.check) in failed, report.summary()
    message = "\n".join(c.describe() for c in report.failures if c.partition == day.isoformat())
    assert f"flights partition {day}: {case.check} failed" in message
    assert case.says.format(previous=day - dt.timedelta(days=1)) in message
    assert not Path(bad.validated("flights")).exists() and not Path(bad.quarantine("flights")).exists()
    assert raw_digest(bad) == before


def test_the_job_writes_report_and_fails_with_the_reasons(spark, lake, tmp_path):
    bad = bad_lake(lake, tmp_path, next(c for c in CASES if c.name == "renamed_column"))
    with pytest.raises(ValidationFailed) as err:
        main(["--run-date", DAY.isoformat(), "--lake-root", bad.root, "--run-id", "manual__x"])
    assert "flights partition 2013-01-09: header_matches_schema failed" in str(err.value)
    assert "nothing was written" in str(err.value)
    summary = json.loads(Path(bad.validation_report(DAY, 1)).read_text())
    assert summary["success"] is False and summary["written"] is False and summary["run_id"] == "manual__x"
    page = Path(bad.validation_report(DAY, 1, VALIDATION_PAGE)).read_text()
    assert "FAILED" in page and "renamed to" in page


@pytest.mark.slow
def test_great_expectations_and_the_split_agree_on_every_rule(spark, lake, config, tmp_path):
    broken = Case("several", lambda d, p: b"")  # combine several row-level cases in one file
    data = Path(lake.raw_file("flights", DAY)).read_bytes()
    for case in CASES:
        if not case.hard and case.name not in {"truncated_mid_line", "non_utf8_byte"}:
            data = case.mutate(data, b"")
    bad = bad_lake(lake, tmp_path, broken)
    Path(bad.raw_file("flights", DAY)).write_bytes(data)
    report = validate(spark, bad, config, [DAY], DAY, RUN_ID, suites=FLIGHT_SUITES)
    assert report.success, report.summary()
    flights = next(t for t in report.tables if t.table == "flights")
    checked = [r for r in flights.rules if r.expectation != "(job)"]
    assert all(r.gx_error is None for r in checked)
    assert {r.rule: r.gx_unexpected for r in checked} == {r.rule: r.flagged for r in checked}
    found = {r.rule for r in flights.rules if r.flagged}
    assert {"carrier_not_null", "distance_positive", "flight_key_unique", "carrier_known", "dep_time_is_int"} <= found
    assert all(r.examples for r in flights.rules if r.flagged)


@pytest.mark.slow
def test_a_rerun_rewrites_the_same_bytes_and_a_clean_rerun_clears_the_quarantine(spark, lake, config, tmp_path):
    # GX stays on here: its cross-check must see the re-delivered file, not rows cached by a run before.
    case = next(c for c in CASES if c.name == "duplicate_flights")
    bad = bad_lake(lake, tmp_path, case)
    validate(spark, bad, config, [DAY], DAY, RUN_ID, suites=FLIGHT_SUITES)
    first = data_files(bad.validated("flights")), data_files(bad.quarantine("flights"))
    validate(spark, bad, config, [DAY], DAY, RUN_ID, suites=FLIGHT_SUITES)
    assert (data_files(bad.validated("flights")), data_files(bad.quarantine("flights"))) == first
    assert all(len(files) == 1 for files in first)

    # The source re-delivers the day without the duplicates: the day's outputs are replaced exactly.
    shutil.copy(lake.raw_file("flights", DAY), bad.raw_file("flights", DAY))
    validate(spark, bad, config, [DAY], DAY, RUN_ID, suites=FLIGHT_SUITES)
    assert zone_rows(bad.quarantine("flights")) == []
    assert len(zone_rows(bad.validated("flights"))) == len(zone_rows(lake.validated("flights")))


def test_the_real_days_pass(lake, landed_days):
    """The session lake was validated by the fixture: every real flight is validated, none held back."""
    first, last = landed_days
    assert not Path(lake.quarantine("flights")).exists()
    for n in range((last - first).days + 1):
        day = first + dt.timedelta(days=n)
        lines = Path(lake.raw_file("flights", day)).read_text().rstrip("\n").split("\n")
        assert pq.read_table(Path(lake.validated("flights")) / partition_name(day)).num_rows == len(lines) - 1


@pytest.mark.parametrize(
    ("header", "problem"),
    [
        (["a", "b", "c"], ""),
        (["a", "c"], "missing column(s) ['b']"),
        (["a", "x", "c"], "'b' renamed to 'x'?"),
        (["a", "c", "b"], "columns out of order"),
        (None, "the file is empty"),
    ],
)
def test_schema_drift_in_a_header_is_described_precisely(header, problem):
    found = schema_drift(header, ["a", "b", "c"])
    assert (problem in found) if problem else found == ""


@pytest.mark.slow
def test_an_unchanged_reference_table_is_not_validated_again(spark, lake, config_without_gx, config_patch, tmp_path):
    """The fingerprint skip: a second night reuses the reference snapshots (and their values for the
    feed's rules); a changed raw file, and the setting turned off, validate the table again."""

    from jobs.validation.fingerprints import SIDECAR

    copy = Lake(str(tmp_path / "lake"))
    shutil.copytree(f"{lake.root}/raw", f"{copy.root}/raw")
    night, next_night, third = DAY - dt.timedelta(days=1), DAY, DAY + dt.timedelta(days=1)
    first = validate(spark, copy, config_without_gx, [night], night, RUN_ID, suites=FLIGHT_SUITES)
    references = {t.table for t in first.tables if t.fingerprint}
    assert references == {"airlines", "airports", "planes"}
    assert all(not t.unchanged_since for t in first.tables)
    assert (Path(copy.validated("airlines")) / partition_name(night) / SIDECAR).is_file()

    # The next night: one flight's carrier is unknown, which only the airlines values can tell.
    raw = Path(copy.raw_file("flights", next_night))
    lines = raw.read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    row = lines[1].split(",")
    row[header.index("carrier")] = "ZZ"
    raw.write_text(lines[0] + ",".join(row) + "".join(lines[2:]))
    second = validate(spark, copy, config_without_gx, [next_night], next_night, RUN_ID, suites=FLIGHT_SUITES)
    assert second.success, second.summary()
    tables = {t.table: t for t in second.tables}
    assert {n for n, t in tables.items() if t.unchanged_since == night.isoformat()} == references
    assert "airlines" in second.summary() and "not validated again" in second.summary()
    assert not (Path(copy.validated("airlines")) / partition_name(next_night)).exists()
    assert tables["flights"].partitions[next_night.isoformat()].by_rule == {"carrier_known": 1}

    # A changed airlines file is validated again (and airports, untouched, is still reused).
    airlines = Path(copy.raw_file("airlines"))
    airlines.write_text(airlines.read_text() + "ZZ,Zed Air\n")
    third_report = validate(spark, copy, config_without_gx, [third], third, RUN_ID, suites=FLIGHT_SUITES)
    tables = {t.table: t for t in third_report.tables}
    assert tables["airlines"].unchanged_since is None and tables["airlines"].rows_in == 17
    assert tables["airports"].unchanged_since == night.isoformat()
    assert (Path(copy.validated("airlines")) / partition_name(third) / SIDECAR).is_file()

    # Turned off, every reference table is validated again.
    off = config_patch.replace(config_without_gx, validation={"skip_unchanged": False})
    again = validate(spark, copy, off, [third], third, RUN_ID, suites=FLIGHT_SUITES)
    assert all(t.unchanged_since is None for t in again.tables)
    assert {t.table for t in again.tables if t.rows_in} >= references

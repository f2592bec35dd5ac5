"""Damaged zones (issue 44): a file of a zone that is truncated, not Parquet, or a copy of another,
met by every job that reads the zone (features: the validated feed; score and train: the features;
the monitor: the predictions and outcomes), is a data error (exit 65, not retried) that names the
file, its partition and the command that rebuilds the day, and the job writes nothing. Rows that
repeat their key in two different files are refused where rows are joined (the score job's
features, the monitor's predictions and outcomes), naming the key and the count. Real files, real
Spark (local), the jobs' own mains."""

from __future__ import annotations

import datetime as dt
import random
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs.errors import DATA_ERROR_EXIT, ERROR_FILE_ENV, DataError, data_problem
from jobs.lake.integrity import DamagedFileError, RepeatedRowsError, check_partitions
from jobs.lake.layout import Lake, partition_name
from tests.jobs.monitoring.test_monitor import _predictions, _write

DAY = dt.date(2013, 1, 5)
FEATURES_COMMAND = f"spark-submit jobs/features/job.py --run-date {DAY} --days 1"
INGEST_COMMAND = f"spark-submit jobs/validation/job.py --run-date {DAY} --days 1"
SCORE_COMMAND = f"spark-submit jobs/scoring/job.py --run-date {DAY}"


def data_file(folder: Path) -> Path:
    """The partition's (first) Parquet file."""
    return sorted(p for p in folder.iterdir() if p.suffix == ".parquet" and not p.name.startswith((".", "_")))[0]


def truncate(part: Path) -> Path:
    data = part.read_bytes()
    part.write_bytes(data[: len(data) // 2])  # a copy that stopped half way
    return part


def garbage(part: Path) -> Path:
    part.write_bytes(random.Random(7).randbytes(4096))  # noqa: S311 - bytes, not secrets
    return part


def copy(part: Path) -> Path:
    twin = part.with_name(f"copy-of-{part.name}")  # copied beside itself, under another name
    shutil.copyfile(part, twin)
    return twin


DAMAGE = {"truncated": truncate, "not_parquet": garbage, "copied": copy}


def damage(folder: Path, how: str) -> Path:
    """Damage the partition ``folder`` (its checksum sidecars go: the damage came from outside
    Spark); returns the file to be named."""
    for crc in folder.glob(".*.crc"):
        crc.unlink()
    return DAMAGE[how](data_file(folder))


def expect_named(message: str, file: Path, how: str, command: str) -> None:
    assert str(file) in message, message
    assert partition_name(DAY) in message and command in message, message
    if how == "copied":
        assert "is a copy of" in message and "read twice" in message, message
    else:
        assert "cannot be read as Parquet" in message, message


def exit_65(job, tmp_path: Path, monkeypatch) -> str:
    """Run ``job`` as its ``__main__`` does: it must exit 65 (not retried); returns what the
    Airflow task's failure says (the error file)."""
    from jobs.runner import run_job

    error_file = tmp_path / "error.txt"
    monkeypatch.setenv(ERROR_FILE_ENV, str(error_file))
    with pytest.raises(SystemExit) as exited:
        run_job(job)
    assert exited.value.code == DATA_ERROR_EXIT
    return error_file.read_text()


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- the check and Spark's own words ------------------------------------------------------------


@pytest.mark.parametrize("how", list(DAMAGE))
def test_a_damaged_or_copied_file_is_named_with_its_partition_and_the_rebuild(spark, tmp_path, how):
    zone = tmp_path / "features"
    rows = spark.createDataFrame([(i, DAY) for i in range(50)], "id int, date date")
    rows.coalesce(1).write.partitionBy("date").parquet(str(zone))  # one file
    folder = zone / partition_name(DAY)
    check_partitions([str(folder)])  # as Spark wrote it: nothing to say
    bad = damage(folder, how)
    with pytest.raises(DamagedFileError if how != "copied" else RepeatedRowsError) as refused:
        check_partitions([str(folder)])
    expect_named(str(refused.value), bad, how, FEATURES_COMMAND)
    if how == "copied":
        assert "50 rows" in str(refused.value)
        return
    # a reader that did not check first: Spark's error is a data problem naming the same
    with pytest.raises(Exception) as failed:  # noqa: PT011 - Py4JJavaError or a Connect exception
        spark.read.parquet(str(zone)).collect()
    expect_named(data_problem(failed.value) or str(failed.value), bad, how, FEATURES_COMMAND)


def test_a_footer_damaged_inside_is_a_data_problem_for_spark_and_for_the_training_ranks(spark, tmp_path):
    """A file whose end still looks like Parquet but whose footer is garbage passes the cheap
    check; Spark's error (thrift cannot read the footer) and pyarrow's in a rank are data errors
    naming the file."""
    from jobs.training.stream import RowGroupReadError, plan_shares

    zone = tmp_path / "features"
    rows = spark.createDataFrame([(i, DAY, 1.0) for i in range(50)], "id int, date date, y double")
    rows.coalesce(1).write.partitionBy("date").parquet(str(zone))
    folder = zone / partition_name(DAY)
    for crc in folder.glob(".*.crc"):
        crc.unlink()
    part = data_file(folder)
    body = bytearray(part.read_bytes())
    footer = int.from_bytes(body[-8:-4], "little")
    body[-8 - footer:-8] = bytes(footer)  # the footer zeroed: its length and magic kept
    part.write_bytes(bytes(body))
    check_partitions([str(folder)])
    with pytest.raises(Exception) as failed:  # noqa: PT011
        spark.read.parquet(str(zone)).collect()
    expect_named(data_problem(failed.value) or str(failed.value), part, "damaged", FEATURES_COMMAND)
    with pytest.raises(RowGroupReadError) as unread:
        plan_shares([str(folder)], 1, "y")
    assert str(part) in str(unread.value) and FEATURES_COMMAND in str(unread.value)
    assert data_problem(RuntimeError("Connection reset while reading file")) is None  # a fault stays one


# --- the jobs -------------------------------------------------------------------------------


@pytest.fixture
def damaged_feed(lake, tmp_path):
    """A copy of the session lake's validated zone, for the features job to read."""
    copy_of = Lake(str(tmp_path / "lake"))
    shutil.copytree(Path(lake.root, "validated"), Path(copy_of.root, "validated"))
    return copy_of


@pytest.mark.parametrize("how", list(DAMAGE))
def test_the_features_job_refuses_a_damaged_feed_and_writes_nothing(damaged_feed, tmp_path, monkeypatch, how):
    from jobs.features.job import main

    folder = Path(damaged_feed.validated("flights"), partition_name(DAY))
    bad = damage(folder, how)
    said = exit_65(lambda: main(["--run-date", DAY.isoformat(), "--lake-root", damaged_feed.root]), tmp_path,
                   monkeypatch)
    expect_named(said, bad, how, INGEST_COMMAND)
    assert not Path(damaged_feed.features).exists()


@pytest.mark.parametrize("how", list(DAMAGE))
def test_the_score_and_train_jobs_refuse_damaged_features_before_the_model_or_spark(
    spark, features_zone, tmp_path, monkeypatch, how,
):
    from jobs.scoring.job import main
    from jobs.training.data import feature_dirs

    lake = Lake(str(tmp_path / "lake"))
    features_zone.copy([DAY - dt.timedelta(days=1), DAY], lake.features)
    bad = damage(Path(lake.partition(lake.features, DAY)), how)
    said = exit_65(lambda: main(["--run-date", DAY.isoformat(), "--lake-root", lake.root]), tmp_path, monkeypatch)
    expect_named(said, bad, how, FEATURES_COMMAND)  # no registered model is needed to say so
    assert not Path(lake.predictions).exists()
    with pytest.raises(DataError) as refused:  # the train job's driver (and the baselines'), before the ranks
        feature_dirs(spark, lake, [DAY - dt.timedelta(days=1), DAY])
    expect_named(str(refused.value), bad, how, FEATURES_COMMAND)


def monitored_day(features_zone, config, root: Path) -> Lake:
    """A lake with DAY's features and the champion's predictions of DAY (as test_monitor's)."""
    lake = Lake(str(root))
    frame = features_zone.frame([DAY]).toPandas().drop(columns=["date"])
    _write(lake.features, DAY, frame)
    _write(lake.predictions, DAY, _predictions(frame, config, "1", "run-1", DAY, seed=1))
    return lake


@pytest.mark.parametrize("how", list(DAMAGE))
def test_the_monitor_refuses_damaged_predictions_and_judges_nothing(features_zone, config, tmp_path, monkeypatch,
                                                                     how):
    from jobs.monitoring.job import main

    lake = monitored_day(features_zone, config, tmp_path / "lake")
    bad = damage(Path(lake.partition(lake.predictions, DAY)), how)
    said = exit_65(lambda: main(["--run-date", DAY.isoformat(), "--lake-root", lake.root]), tmp_path, monkeypatch)
    expect_named(said, bad, how, SCORE_COMMAND)
    assert not Path(lake.monitoring).exists()  # nothing judged, once or twice


def rewrite_twice(folder: Path, rows: int | None = None) -> None:
    """The partition's rows (their first ``rows``) written again into a second file of other
    bytes (another writer): a copy that no byte comparison finds."""
    part = data_file(folder)
    table = pq.read_table(part)
    pq.write_table(table.slice(0, rows), folder / "part-99999-rewritten.parquet", compression="gzip")


@pytest.mark.parametrize("zone", ["predictions", "features"])
def test_rows_repeated_in_another_file_are_refused_where_they_are_joined_naming_the_key_and_count(
    features_zone, config, tmp_path, monkeypatch, zone,
):
    from jobs.monitoring.job import main

    lake = monitored_day(features_zone, config, tmp_path / "lake")
    rewrite_twice(Path(lake.partition(getattr(lake, zone), DAY)), rows=7)
    said = exit_65(lambda: main(["--run-date", DAY.isoformat(), "--lake-root", lake.root]), tmp_path, monkeypatch)
    ids = ", ".join(dict.fromkeys([*config.features.id_columns, "date"]))
    assert f"7 key(s) of ({ids}) repeat, on 14 rows" in said, said
    assert partition_name(DAY) in said and (SCORE_COMMAND if zone == "predictions" else FEATURES_COMMAND) in said
    assert not Path(lake.monitoring).exists()


def test_the_score_job_refuses_features_that_repeat_a_key_before_writing(spark, features_zone, config, tmp_path):
    from jobs.scoring.job import score_days

    lake = Lake(str(tmp_path / "lake"))
    features_zone.copy([DAY], lake.features)
    rewrite_twice(Path(lake.partition(lake.features, DAY)), rows=3)
    before = tree(Path(lake.root))
    with pytest.raises(RepeatedRowsError, match=r"the features to score: 3 key\(s\) of .* repeat, on 6 rows(.|\n)*"
                                             r"list the columns that do in features.id_columns"):
        score_days(spark, lake, config, [DAY], None, "unused", None, 64, False)  # refused before the model is used
    assert tree(Path(lake.root)) == before and not Path(lake.predictions).exists()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["truncated", "copied"])
def test_a_damaged_reference_snapshot_is_never_reused_and_its_own_day_writes_it_anew(
    spark, lake, config_without_gx, tmp_path, how,
):
    """Validate's snapshots: a reference table whose raw file has not changed reuses its snapshot
    (the fingerprint skip), unless the snapshot is damaged; then it is validated again, so the
    command the readers' error gives (the day's ingest) mends it."""
    from jobs.validation.job import validate
    from tests.jobs.validation.test_validate import FLIGHT_SUITES, RUN_ID

    copy_of = Lake(str(tmp_path / "lake"))
    shutil.copytree(f"{lake.root}/raw", f"{copy_of.root}/raw")
    assert validate(spark, copy_of, config_without_gx, [DAY], DAY, RUN_ID, suites=FLIGHT_SUITES).success
    snapshot = Path(copy_of.validated("airlines"), partition_name(DAY))
    bad = damage(snapshot, how)
    with pytest.raises(DataError) as refused:  # what the features job (read_days) says of it
        check_partitions([str(snapshot)])
    expect_named(str(refused.value), bad, how, INGEST_COMMAND)
    again = validate(spark, copy_of, config_without_gx, [DAY], DAY, RUN_ID, suites=FLIGHT_SUITES)
    assert again.success and {t.table: t for t in again.tables}["airlines"].unchanged_since is None
    check_partitions([str(snapshot)])  # written anew: nothing to say

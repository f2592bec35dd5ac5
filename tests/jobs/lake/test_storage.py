"""Lake I/O without a JVM (training ranks, Airflow tasks): atomic writes, listing, deletes."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.lake import storage


def test_writes_replace_whole_files_and_leave_no_staging_files(tmp_path):
    target = f"{tmp_path}/zone/date=2013-01-01/summary.json"
    storage.write_json(target, {"rows": 1})
    storage.write_json(target, {"rows": 2})
    assert storage.read_json(target) == {"rows": 2}
    assert [p.name for p in (tmp_path / "zone" / "date=2013-01-01").iterdir()] == ["summary.json"]
    assert storage.read_json(f"{tmp_path}/nothing.json") is None


def test_listing_and_deleting_work_the_same_on_paths_and_file_uris(tmp_path):
    folder = tmp_path / "features" / "date=2013-01-01"
    folder.mkdir(parents=True)
    for name in ("part-1.parquet", "part-0.parquet", "_SUCCESS", ".part-0.parquet.crc"):
        (folder / name).write_bytes(b"x")
    expected = ["part-0.parquet", "part-1.parquet"]
    assert [u.rsplit("/", 1)[1] for u in storage.list_files(str(folder), ".parquet")] == expected
    assert [u.rsplit("/", 1)[1] for u in storage.list_files(folder.as_uri(), ".parquet")] == expected
    assert storage.list_files(str(tmp_path / "missing"), ".parquet") == []
    storage.delete_file(f"{folder}/part-1.parquet")
    storage.delete_file(f"{folder}/part-1.parquet")  # already gone: fine
    storage.delete_dir(folder.as_uri())
    assert not folder.exists()


def test_s3a_uris_are_read_as_s3():
    fs, path = storage.filesystem("s3a://lake-bucket/features/date=2013-01-01")
    assert fs.type_name == "s3" and path == "lake-bucket/features/date=2013-01-01"


def test_training_shards_read_through_uris(tmp_path):
    from jobs.training.data import read_units, shard_units

    folder = tmp_path / "date=2013-01-01"
    folder.mkdir()
    pq.write_table(pa.table({"x": list(range(30)), "y": [0.5] * 30}), folder / "part-0.parquet", row_group_size=10)
    units = shard_units([folder.as_uri()], 0, 1)
    assert len(units) == 3
    tables = read_units(units, ["x"])
    assert sorted(v for t in tables for v in t.column("x").to_pylist()) == list(range(30))


def test_a_full_disk_fails_a_write_saying_so_and_leaves_no_staging(tmp_path, small_disk):
    import errno

    import pytest

    from jobs.errors import disk_full

    disk = small_disk(tmp_path / "disk", "64k")
    storage.write_json(f"{disk}/summary.json", {"rows": 1})
    small_disk.fill(disk)
    big = {"rows": 2, "padding": "x" * 65536}
    for write in (lambda: storage.write_json(f"{disk}/summary.json", big),
                  lambda: storage.create_exclusive(f"{disk}/other.lock", b"x" * 65536)):
        with pytest.raises(OSError) as failed:
            write()
        assert failed.value.errno == errno.ENOSPC or "No space left on device" in str(failed.value)
        assert disk_full(failed.value).startswith("the disk is full (No space left on device")
        assert sorted(p.name for p in disk.iterdir()) == [".filler", "summary.json"]  # no staging left
    assert storage.read_json(f"{disk}/summary.json") == {"rows": 1}

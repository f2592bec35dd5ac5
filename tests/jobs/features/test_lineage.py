"""The freshness check of features days on real files, without Spark: what it finds and what it lists."""

from __future__ import annotations

import datetime as dt

DAYS = [dt.date(2013, 3, 1) + dt.timedelta(days=i) for i in range(60)]
TABLES = ("flights", "weather")


def _lake(tmp_path):
    """A validated zone of two tables over DAYS (one data file a day) and a lineage record per day
    reading its own day of each table and the 28 days before it of flights, as found now."""
    from jobs.features import lineage
    from jobs.lake import storage
    from jobs.lake.layout import Lake

    lake = Lake(str(tmp_path / "lake"))
    for table in TABLES:
        for day in DAYS:
            storage.write_bytes(f"{lake.partition(lake.validated(table), day)}/part-0.parquet", b"x" * 10)
    found = {table: lineage.versions(lake, table) for table in TABLES}
    for day in DAYS:
        read = {"weather": [day], "flights": [day - dt.timedelta(days=k) for k in range(29)]}
        storage.write_json(lake.report(lineage.KIND, day, lineage.RECORD), {"day": day.isoformat(), "inputs": {
            table: {d.isoformat(): found[table].get(d) for d in days} for table, days in read.items()}})
    return lake


def test_the_check_lists_each_table_once_whatever_the_days(tmp_path, monkeypatch):
    """Sixty days, two tables: two listings (it was one per day and table: 1.3 s of a 180-day
    window's check, three checks a training job), and a re-validated day found in the days it feeds."""
    from jobs.features import lineage
    from jobs.lake import storage

    lake = _lake(tmp_path)
    listed = []
    real = storage.files_under
    monkeypatch.setattr(storage, "files_under", lambda folder: listed.append(folder) or real(folder))
    assert lineage.changes(lake, DAYS) == {}
    assert sorted(listed) == sorted(lake.validated(table) for table in TABLES)

    revalidated = DAYS[40]
    storage.write_bytes(f"{lake.partition(lake.validated('flights'), revalidated)}/part-0.parquet", b"y" * 11)
    listed.clear()
    stale = lineage.changes(lake, DAYS)
    assert sorted(stale) == [d for d in DAYS if revalidated <= d <= revalidated + dt.timedelta(days=28)]
    assert stale[revalidated + dt.timedelta(days=3)] == [f"flights of {revalidated} was validated again"]
    assert len(listed) == 2

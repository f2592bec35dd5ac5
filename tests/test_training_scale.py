"""The training-at-scale benchmark's plan, arguments, scaled windows and targets (no training: its
rows run by hand, ``make bench-scale``)."""

from __future__ import annotations

import json

import pytest

from benchmarks import training_scale


def test_the_plan_runs_the_peer_then_the_ranks_per_scale_and_the_cluster_point_last():
    args = training_scale.parse_args([])
    assert args.scales == [1.0, 10.0] and args.contenders == ["peer", "1", "2"] and args.epochs == 1
    rows = training_scale.plan(args.scales, args.contenders, args.cluster_scale)
    assert [(r.scale, r.contender, r.processes) for r in rows] == [
        (1, "peer", 1), (1, "local", 1), (1, "local", 2), (10, "peer", 1), (10, "local", 1), (10, "local", 2),
        (1, "cluster", 2)]
    assert rows[0].name == "DataLoader peer, 1 process" and "standalone cluster" in rows[-1].name
    # the 100x row by hand: two ranks, no peer, no cluster (make bench-scale SCALES=100 CONTENDERS=2 CLUSTER_SCALE=0)
    hundred = training_scale.parse_args(["--scales", "100", "--contenders", "2", "--cluster-scale", "0"])
    assert [(r.scale, r.processes) for r in training_scale.plan(hundred.scales, hundred.contenders, 0)] == [(100, 2)]
    assert training_scale.parse_args(["--scales", "10,1,100"]).scales == [1, 10, 100]


@pytest.mark.parametrize("argv, says", [
    (["--scales", "0"], "positive"), (["--contenders", "peer,3"], "unknown"), (["--days", "5"], "between 8"),
    (["--epochs", "0"], "at least 1"), (["--cluster-scale", "-1"], "cluster-scale"),
])
def test_bad_arguments_stop_before_anything_runs(argv, says, capsys):
    with pytest.raises(SystemExit):
        training_scale.parse_args(argv)
    assert says in capsys.readouterr().err


def test_a_scaled_window_is_the_generators_rule_on_each_days_feature_rows(tmp_path):
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    day = tmp_path / "features" / "date=2013-03-01"
    day.mkdir(parents=True)
    rows = pd.DataFrame({"carrier": ["UA", "UA", "AA", "AA", "B6"], "flight": [1, 2, 3, 4, 5],
                         "tailnum": ["N1", "N2", "N3", None, "N5"], "distance": [1.0, 2.0, 3.0, 4.0, 5.0],
                         "label": [1.0, 0.0, None, 1.0, 0.0]})
    pq.write_table(pa.Table.from_pandas(rows, preserve_index=False), day / "part-0.parquet")
    written = training_scale.scale_features([str(day)], tmp_path / "x3", 3)
    out = pq.ParquetFile(tmp_path / "x3" / "date=2013-03-01" / "part-00000.parquet")
    scaled = out.read().to_pandas()
    assert written["rows"] == len(scaled) == 15 and out.metadata.num_row_groups == 1
    assert sorted(scaled.flight) == sorted(f + k * 10_000 for k in range(3) for f in rows.flight)
    assert scaled.distance.sum() == 3 * rows.distance.sum() and scaled.label.isna().sum() == 3
    assert training_scale.scale_features([str(day)], tmp_path / "x3", 3) == written  # kept, not written again


def row(scale_: float, kind: str, processes: int, rows_per_s: int, peak: float) -> dict:
    return {"scale": scale_, "kind": kind, "processes": processes, "rows_per_s_per_rank": rows_per_s,
            "peak_rss_mib_max": peak}


def test_the_targets_verdicts_follow_the_measured_rows():
    found = training_scale.targets([row(1, "peer", 1, 100, 500), row(1, "local", 1, 90, 600),
                                    row(10, "peer", 1, 100, 900), row(10, "local", 1, 70, 700),
                                    row(1, "local", 2, 50, 650), row(10, "local", 2, 50, 800)])
    memory = {t["target"]: t for t in found if "peak RSS" in t["target"]}
    throughput = [t for t in found if "peer" in t["target"]]
    one, two = (next(t for k, t in memory.items() if f"({n} rank" in k) for n in (1, 2))
    assert one["value"] == round(700 / 600, 3) and one["met"] is True
    assert two["value"] == round(800 / 650, 3) and two["met"] is False  # 1.23x > 1.2x
    assert [t["value"] for t in throughput] == [round(100 / 90, 2), round(100 / 70, 2)]
    assert [t["met"] for t in throughput] == [True, False]
    (alone,) = training_scale.targets([row(10, "local", 2, 50, 800)])  # no 1x: not measured
    assert alone["met"] is None and alone["value"] is None


def test_the_report_prints_every_row_and_target_and_writes_the_json_and_both_plots(tmp_path, capsys):
    measured = [training_scale.measured(training_scale.Row(s, kind, n), {
        "train_rows": int(1000 * s), "epoch_seconds": [0.5 * s], "wall_s": 3.0 + s, "train_loss": 0.5,
        "roc_auc": 0.68, "first_step_s": 2.0, "peak_rss_mib": [500.0 + s] * n, "data_path": "stream",
    }, int(1100 * s), {"bytes": 100, "train_row_groups": 10}) for s in (1.0, 10.0) for kind, n in (("peer", 1),
                                                                                                ("local", 2))]
    assert measured[1]["rows_per_s_per_rank"] == 1000 and measured[1]["row_groups"] == 10  # 1000 rows / 0.5 s / 2
    training_scale.report(tmp_path, {"rows": measured, "targets": training_scale.targets(measured)})
    printed = capsys.readouterr().out
    assert printed.count("| 1x |") == 2 and printed.count("| 10x |") == 2 and "peak RSS per rank at 10x" in printed
    assert json.loads((tmp_path / "scale.json").read_text())["rows"] == measured
    for plot in ("scale-memory.png", "scale-rows-per-s.png"):
        assert (tmp_path / plot).stat().st_size > 1000


def test_the_rank_program_parses_what_the_benchmark_passes():
    """The command lines that run_in_process and measure_allreduce build for the rank program."""
    from benchmarks.training_scale_rank import parser

    peer = parser().parse_args(["peer", "job.json", "out.json", "1700000000.5"])
    assert (peer.what, peer.job, peer.out, peer.launched) == ("peer", "job.json", "out.json", 1700000000.5)
    assert parser().parse_args(["read", "job.json", "out.json"]).max_rows == 1_000_000
    assert parser().parse_args(["read", "job.json", "out.json", "5000"]).max_rows == 5000
    reduce = parser().parse_args(["allreduce", "out.json", "123"])
    assert (reduce.what, reduce.out, reduce.parameters) == ("allreduce", "out.json", 123)
    with pytest.raises(SystemExit):
        parser().parse_args(["sum", "out.json"])

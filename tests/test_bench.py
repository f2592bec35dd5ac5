"""``make bench``'s smoke mode in the suite: both side-by-side stages at tiny sizes in the test
session, their outputs checked equal by the stages themselves, and the report with every stage's
rows, fits, targets and plots. The full benchmarks are not run here; ``make test-fast`` skips this."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest

from benchmarks.bench import STAGES, run_settings, run_stages, write_report

DAYS = [dt.date(2013, 1, 10)]  # one day of the lake fixture: the smallest run that still fits
FACTORS = [1.0, 2.0]


@pytest.mark.e2e  # Spark's Python workers, a model trained, registered and scored three ways: tens of seconds
def test_bench_smoke_writes_every_stages_rows_and_plots(spark, lake, config, tmp_path):
    results = run_stages(spark, lake, config, DAYS, FACTORS, tmp_path / "work", repeat=1)
    assert [r["stage"] for r in results] == list(STAGES)
    features, scoring = results
    rows = [p["rows"] for p in features["points"]]
    assert rows[1] == 2 * rows[0] > 1000  # 2x the day's flights, one feature row each
    assert [p["rows"] for p in scoring["points"]] == rows
    for result in results:
        assert all(p["outputs_equal"] and all(s > 0 for s in p["seconds"].values()) for p in result["points"])
        assert set(result["fits"]) == set(result["contenders"])
        assert result["targets"]
        for target in result["targets"]:
            check_verdict(result, target)
    assert features["targets"][0]["met"] is None  # 5M rows: far beyond the smoke sizes, not extrapolated
    assert isinstance(scoring["targets"][0]["met"], bool)  # measured at the largest size

    out = tmp_path / "results"
    out.mkdir()
    report = write_report(out, run_settings(True, FACTORS, 1, DAYS, {}, {}, os.getloadavg()), results)
    text = report.read_text()
    for result in results:
        assert f"## {result['stage']}" in text
        for n in rows:
            assert f"| {n:,} |" in text
        for contender in result["contenders"]:
            assert f"{contender} (s)" in text
        for kind in ("time", "rows-per-s"):
            plot = out / f"{result['stage']}-{kind}.png"
            assert plot.stat().st_size > 1000 and plot.name in text
    assert "polars" in text and "duckdb" in text and "spark_udf" in text and "target" in text
    assert (out / "bench.json").exists()


def check_verdict(result: dict, target: dict) -> None:
    """A target's verdict is what its numbers give: not measured without a value; measured at a
    size, the ratio of that point's seconds (subject / other, or other / subject when ``faster``)
    against the bound; from the fits, its value against the bound."""
    if target["met"] is None:
        assert target["value"] is None and target["how"].startswith("not measured"), target
        return
    if target["how"].startswith("measured at"):
        point = next(p for p in result["points"] if target["how"] == f"measured at {p['rows']:,} rows")
        subject, other = point["seconds"][target["subject"]], point["seconds"][target["other"]]
        value = other / subject if target["faster"] else subject / other
        assert target["value"] == round(value, 2), target
    else:
        value = target["value"]
    assert target["met"] is (value >= target["bound"] if target["faster"] else value <= target["bound"]), target


def test_a_target_s_verdict_is_what_its_measured_ratio_gives():
    from benchmarks.features import summarize

    points = [{"rows": n, "seconds": {"spark": 2.0 + n / 1e5, "polars": 0.5 + n / 4e5}} for n in (1000, 100_000)]
    result = summarize("features", points, ["spark", "polars"], "spark", {"polars": 3.0}, 100_000)
    (target,) = result["targets"]
    assert target["how"] == "measured at 100,000 rows" and target["value"] == 4.0 and target["met"] is False
    check_verdict(result, target)
    far = summarize("features", points, ["spark", "polars"], "spark", {"polars": 3.0}, 10**9)
    check_verdict(far, far["targets"][0])
    for wrong in ({**target, "met": True}, {**target, "value": 3.0}, {**target, "met": None}):
        with pytest.raises(AssertionError):
            check_verdict(result, wrong)


@pytest.mark.slow
def test_validation_hand_aggregation_counts_what_the_validate_job_flags(spark, lake, config_without_gx):
    from benchmarks.validation import ROWS, check_counts, hand_aggregation
    from jobs.config import import_object
    from jobs.validation.job import validate

    suites = import_object(config_without_gx.validation.suites)()
    counts, refs = hand_aggregation(spark, lake, config_without_gx, suites, DAYS)
    report = validate(spark, lake, config_without_gx, DAYS, DAYS[-1], "tests", write=False)
    check_counts(counts, report, "validate")  # raises on any difference
    assert counts["flights"][ROWS] > 500 and set(refs) == {"airlines.carrier", "airports.faa", "planes.tailnum"}
    assert any(r.flagged for t in report.tables for r in t.rules)  # not a comparison of zeros only



def test_the_nightly_breakdown_adds_up_to_the_night_and_is_drawn(tmp_path):
    """benchmarks.nightly's arithmetic and report on one night of two tasks (its Airflow side is
    checked on real task instances and job timings in tests/test_e2e.py)."""
    from benchmarks.nightly import PARTS, best_nights, night_breakdown, plot, report, task_breakdown

    record = {"job": "validate", "process_started": 101.5, "main_started": 101.9, "main_ended": 110.0,
              "seconds": {"python start + imports": 0.4, "spark session": 3.0, "GX context": 1.0,
                          "GX expectations": 2.0, "work": 2.1}}
    spark_task = task_breakdown({"task": "validate_raw", "start": 100.0, "end": 111.0}, [record])
    python_task = task_breakdown({"task": "wait_for_raw", "start": 98.0, "end": 99.0}, [record])
    assert python_task["parts"] is None
    parts = spark_task["parts"]
    assert parts["spark-submit + JVM"] == 1.5 and parts["teardown"] == 1.0
    assert parts["work"] == 4.1  # the job's own extra phases count as work
    assert abs(sum(parts.values()) - 11.0) < 1e-9 and set(parts) == set(PARTS)
    night = night_breakdown({"flights_ingest": 15.0, "flights_score": 5.0}, [python_task, spark_task])
    assert night["parts_s"]["Airflow"] == 9.0 and night["wall_s"] == 20.0
    assert night["fixed_share"] == round(1 - 4.1 / 20.0, 3)
    nights = [{"mode": "before", "day": "2013-01-29", **night},
              {"mode": "before", "day": "2013-01-30", **night, "wall_s": 25.0}]
    best = best_nights(nights)
    assert best["before"]["day"] == "2013-01-29"
    text = report({"setup_s": {}, "nights": nights, "best": best})
    assert "| **total (wall)** | **20.0** |" in text and "| validate_raw | 11.0 | 1.5 |" in text
    assert plot(tmp_path / "night.png", best).stat().st_size > 1000


def test_the_health_benchmark_reads_and_renders_a_year_of_days_within_its_target(tmp_path):
    """benchmarks.health end to end at its full size (365 synthetic days, one counted run each):
    every measure is timed, the page within its target, and the results file written."""
    from benchmarks.health import TARGET_SECONDS, main

    main(["--out", str(tmp_path), "--repeat", "1"])
    results = json.loads((tmp_path / "health.json").read_text())
    assert results["days"] == 365
    assert set(results["seconds"]) == {"read (cold)", "read (warm)", "JSON", "HTML"}
    assert all(s > 0 for s in results["seconds"].values())
    assert results["seconds"]["HTML"] <= TARGET_SECONDS and results["target"]["met"] is True


def test_the_gpu_benchmarks_stop_without_cuda_instead_of_reporting_cpu_rows(tmp_path):
    import torch

    from benchmarks import scoring_gpu
    from benchmarks.training import gpu_conf

    if torch.cuda.is_available():
        pytest.skip("a GPU here: scripts/gpu_verify.sh runs the GPU benchmarks")
    assert gpu_conf(False) == (0, {})
    with pytest.raises(RuntimeError, match=r"training benchmark's GPU rows \(--use-gpu\).*no CUDA device"):
        gpu_conf(True)
    with pytest.raises(RuntimeError, match="GPU scoring benchmark.*no CUDA device.*--cpu-smoke"):
        scoring_gpu.main(["--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()  # stopped before anything ran


def test_the_gpu_scoring_benchmark_fails_where_gpu_and_cpu_probabilities_differ():
    from benchmarks.scoring_gpu import TOLERANCE, check_agreement

    functions = [{"stage": "model alone", "device": "cuda", "batch": 1024},
                 {"stage": "check", "device": "cuda", "max_abs_diff_vs_cpu": TOLERANCE / 10}]
    jobs = [{"stage": "score job, CPU", "device": "cpu"},
            {"stage": "score job, GPU", "device": "cuda", "max_abs_diff_vs_cpu_job": TOLERANCE}]
    check_agreement(functions, jobs)  # within the tolerance: passes
    jobs[1]["max_abs_diff_vs_cpu_job"] = 3e-5
    with pytest.raises(SystemExit, match=r"score job, GPU: 3\.0e-05"):
        check_agreement(functions, jobs)
    functions[1]["max_abs_diff_vs_cpu"] = float("nan")  # a NaN is no agreement either
    with pytest.raises(SystemExit, match="prediction function on cuda: nan"):
        check_agreement(functions, [])


def test_the_training_benchmark_plans_its_gpu_rows_first_and_measures_them_as_a_group_of_their_own():
    """With --use-gpu the GPU rows run (and are written) before any CPU contender: a lent GPU's
    lease may end mid-way (scripts/gpu_verify.sh); --rows gpu and --rows cpu keep one side only."""
    import dataclasses

    from benchmarks.training import PYSPARK_WRAPPER_CODE, contenders, groups, launchers, plan

    @dataclasses.dataclass(frozen=True)
    class Job:  # what contenders() reads of a RankConfig
        batch_size: int = 512
        precision: str = "auto"

        def replace(self, **changes):
            return dataclasses.replace(self, **changes)

    entrants = contenders(Job(), "0", default_threads=2, gpu_batch=2048, gpus=1)
    devices = [c.device for c in entrants]
    assert devices[0] == "cuda" and "cpu" in devices
    assert devices == sorted(devices, key=lambda d: d != "cuda"), plan(entrants)  # every cuda row first
    assert [[entrants[i].device for i in g] for g in groups(entrants)] == [
        ["cuda"] * devices.count("cuda"), ["cpu"] * devices.count("cpu")]
    assert {c.device for c in contenders(Job(), "0", 2, 2048, gpus=1, rows="gpu")} == {"cuda"}
    assert {c.device for c in contenders(Job(), "0", 2, 2048, gpus=None, rows="cpu")} == {"cpu"}
    launch = contenders(Job(), "0", 2, 2048, gpus=None, rows="launch", before="/tmp/before")
    assert {c.launcher for c in launch} == {"in_process", "TorchDistributor", "torchrun"}
    # in process, and TorchDistributor through pyspark's own wrapper: this code only
    assert sorted(c.code for c in launch) == [""] * 5 + ["before"] * 4 + ["pyspark's wrapper"] * 2
    # the launcher table pairs pyspark's wrapper with this code's torchrun, the same ranks
    measured = [{"code": code, "launcher": launcher, "processes": 1, "device": "cpu", "fixed_s": fixed,
                 "first_step_s": 1.0} for code, launcher, fixed in (
        ("this", "TorchDistributor", 4.4), ("this", "torchrun", 4.0), (PYSPARK_WRAPPER_CODE, "TorchDistributor", 5.2))]
    assert [(o["code"], o["ratio"]) for o in launchers(measured)] == [(PYSPARK_WRAPPER_CODE, 1.3), ("this", 1.1)]

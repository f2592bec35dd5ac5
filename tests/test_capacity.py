"""The capacity model's arithmetic (studies/capacity.py) against the measured points file,
docs/bench/scale/scale.json: what it predicts is recomputed here from the file's own figures."""

from __future__ import annotations

import json
import math

import pytest

from studies import capacity


@pytest.fixture(scope="module")
def points() -> dict:
    return json.loads(capacity.POINTS.read_text())


def ring(n: int, bytes_: float, alpha: float, beta: float) -> float:
    return 0.0 if n == 1 else 2 * (n - 1) * alpha + 2 * (n - 1) / n * bytes_ / beta


def test_the_capacity_model_is_fitted_on_the_one_rank_rows_and_predicts_the_others_from_the_file(points):
    import numpy as np

    model = capacity.Capacity.from_points(points)
    inputs = points["inputs"]
    ones = [r for r in points["rows"] if r["kind"] == "local" and r["processes"] == 1]
    # a and b: least squares of the one-rank loops on their rows and row groups (exact with two points)
    design = np.array([[r["train_rows"], r["row_groups"]] for r in ones], dtype=float)
    loops = np.array([r["loop_s"] / r["epochs"] for r in ones])
    fitted = design @ np.array([model.seconds_per_row, model.seconds_per_group])
    residual = np.abs(fitted - loops).max()
    assert model.seconds_per_row > 0 and model.seconds_per_group >= 0
    assert residual <= max(0.25 * loops.min(), 1e-6), (fitted, loops)
    assert model.allreduce_bytes == 4 * inputs["parameters"]
    # the fitted all-reduce passes near the measured one at the model's own size (2 ranks)
    own = inputs["allreduce"]["sizes"][0]
    assert ring(2, own["bytes"], model.alpha_local_s, model.beta_local_bytes_per_s) == pytest.approx(
        own["median_s"], rel=0.5, abs=3e-4)
    checked = capacity.check(model, points)
    pipeline = [r for r in points["rows"] if r["kind"] != "peer"]
    assert len(checked) == len(pipeline) and sum(c["calibration"] for c in checked) == len(ones)
    for c, measured in zip(checked, pipeline, strict=True):
        n = measured["processes"]
        base = (model.seconds_per_row * measured["train_rows"] + model.seconds_per_group * measured["row_groups"]) / n
        steps = math.ceil(measured["train_rows"] / n / inputs["batch_size"])
        allreduce = steps * ring(n, 4 * inputs["parameters"], model.alpha_local_s, model.beta_local_bytes_per_s)
        expected = measured["epochs"] * (base * max(1, n / points["machine"]["cpu_count"]) + allreduce)
        assert c["predicted_s"] == pytest.approx(expected, abs=0.01)
        assert c["error"] == pytest.approx(c["predicted_s"] / measured["loop_s"] - 1, abs=5e-3)  # both rounded
        one_core = measured["epochs"] * (base * n + allreduce)  # n ranks on one free core
        assert c["predicted_one_core_s"] == pytest.approx(one_core, abs=0.01)


def test_an_epoch_over_a_billion_rows_adds_the_footers_the_steps_and_rank_0s_evaluation(points):
    model = capacity.Capacity.from_points(points)
    read = points["inputs"]["read"]
    one = model.epoch(1e9, 1, "cpu")
    widest = max(points["rows"], key=lambda r: r["train_rows"])
    r1 = 1 / (model.seconds_per_row + model.seconds_per_group * widest["row_groups"] / widest["train_rows"])
    assert one["seconds"]["footers"] == pytest.approx(1e9 / (read["window_rows"] / read["files"])
                                                      * read["footer_s_per_file"])
    assert one["seconds"]["steps"] == pytest.approx(1e9 / min(r1, capacity.STORAGE_BYTES_PER_S / model.bytes_per_row))
    assert one["hours"] == pytest.approx(sum(one["seconds"].values()) / 3600)
    gpu = model.epoch(1e9, 1, "gpu")  # one GPU fed by its rank's reader: at most the measured read rate
    assert gpu["rate_per_rank"] <= min(read["rows_per_s"], capacity.GPU_BATCH / capacity.GPU_STEP_S) * (1 + 1e-9)
    for device in ("cpu", "gpu"):
        found = capacity.first_break(model, 1e9, device, capacity.NS)
        hit = [n for n in found["at"].values() if n is not None]
        assert found["first"] is None or found["at"][found["first"]] == min(hit)
        hours = [model.epoch(1e9, n, device)["hours"] for n in capacity.NS]
        assert all(b <= a for a, b in zip(hours, hours[1:], strict=False))  # more ranks never slower here

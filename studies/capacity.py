"""A capacity model of training past this machine, from what the scale benchmark measured.

``python -m studies.capacity --help`` lists its options.

Reads the measured points file (:mod:`benchmarks.training_scale`'s ``scale.json``) and predicts the hours of
one epoch over ``--rows`` rows on N CPU ranks and on N GPUs, checks the model against every measured
point of the pipeline (predicted against measured training-loop seconds), and says which limit
binds first as N grows. The arithmetic, all in :class:`Capacity`:

- **A CPU rank's work**: ``a`` seconds per row (reading, encoding, the training step: one core,
  one torch thread) and ``b`` seconds per Parquet row group (opening, decoding, the buffer's
  refill), fitted by least squares (no intercept) to the one-rank local rows at every scale
  (``loop = rows x a + row groups x b``). Ranks beyond a machine's cores share them (x ranks / cores).
- **The all-reduce** of every step (batch ``B`` rows): the model's parameters x 4 bytes in a ring,
  ``2 (N - 1) alpha + 2 (N - 1) / N x bytes / beta``; ``alpha`` and ``beta`` fitted to the gloo
  all-reduce measured with 2 local ranks (``t = 2 alpha + bytes / beta`` over three sizes) for ranks
  on one machine; between machines, :data:`NETWORK` (an assumption, stated in the output).
- **Reading**: every rank reads ``bytes_per_row`` (Parquet on disk, at the smallest scale: the
  generator's copies repeat values and compress better) at its rows/s, and the ranks
  together must stay under the lake's read bandwidth (:data:`STORAGE_BYTES_PER_S`, an assumption).
  A GPU rank is fed by its one read-ahead thread (:class:`jobs.training.stream.ReadAhead`): at most
  the measured read rate (one core reading and encoding, no model), whatever the GPU could do.
- **Serial work**: before the first step every rank reads every file's footer (measured seconds per
  file); per epoch, rank 0 evaluates the holdout alone while the others wait (measured seconds per
  holdout row): work that N does not divide.

An epoch: ``footers + steps + evaluation``; the steps ``rows / (N x rate)``, the rate a rank's
rows/s under the limits above.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

POINTS = Path(__file__).resolve().parents[1] / "docs" / "bench" / "scale" / "scale.json"
# Assumptions past this machine (nothing here measured them): a 10 Gbit/s network with 50 us per
# hop for the all-reduce between machines; a lake that serves 2 GB/s to all ranks together.
NETWORK = {"alpha_s": 50e-6, "beta_bytes_per_s": 1.25e9}
STORAGE_BYTES_PER_S = 2e9
CORES_PER_MACHINE = 16  # CPU ranks per machine past this one (one core each)
# GPU: no training throughput was measured on a GPU (docs/training.md: the lent cards' time ran out
# before the training rows). Assumed: a step of the flights MLP at the GPU batch is bound by kernel
# launches, about 2 ms (forward, backward and fused AdamW, a few dozen kernels), so 2048 rows per 2 ms.
GPU_STEP_S = 2e-3
GPU_BATCH = 2048
HOLDOUT_SHARE = 7 / 358  # holdout rows over training rows, as in the measured window (7 days after 358)
BOUND_SHARE = 0.5  # a limit "breaks" once it takes this share of the time


@dataclasses.dataclass(frozen=True)
class Capacity:
    """The model's inputs, all from the measured points file but the module's assumptions."""

    seconds_per_row: float  # a: one CPU rank, reading, encoding and training
    seconds_per_group: float  # b: per Parquet row group
    batch: int
    parameters: int
    alpha_local_s: float
    beta_local_bytes_per_s: float
    read_rows_per_s: float  # one core reading and encoding, no model
    bytes_per_row: float  # Parquet on disk, of the real rows (the smallest scale: copies compress better)
    rows_per_file: float
    rows_per_group: float  # at the largest scale measured: the layout a 1B-row epoch is assumed to have
    footer_s_per_file: float
    evaluation_s_per_row: float  # rank 0's holdout evaluation, per holdout row and epoch
    local_cores: int

    @property
    def allreduce_bytes(self) -> int:
        return 4 * self.parameters

    @property
    def r1(self) -> float:
        """Rows/s of one CPU rank at the largest scale's row groups."""
        return 1 / (self.seconds_per_row + self.seconds_per_group / self.rows_per_group)

    @classmethod
    def from_points(cls, payload: dict[str, Any]) -> Capacity:
        """The inputs from ``scale.json``: ``a`` and ``b`` from its one-rank local rows
        (:func:`calibration_rows`), the evaluation's cost per row from the local row with the
        largest holdout, the layout from the largest scale."""
        inputs, rows = payload["inputs"], payload["rows"]
        a, b = fit_rows_and_groups(calibration_rows(payload))
        alpha, beta = fit_allreduce(inputs["allreduce"]["sizes"])
        evaluated = [r for r in rows if r.get("evaluation_s_per_epoch") and r.get("holdout_rows")]
        largest = max(evaluated, key=lambda r: r["holdout_rows"]) if evaluated else None
        widest = max(rows, key=lambda r: r["train_rows"])
        read = inputs["read"]
        real = payload["written"][min(payload["written"], key=float)]  # the real rows: copies compress better
        return cls(
            seconds_per_row=a, seconds_per_group=b, batch=inputs["batch_size"], parameters=inputs["parameters"],
            alpha_local_s=alpha, beta_local_bytes_per_s=beta, read_rows_per_s=read["rows_per_s"],
            bytes_per_row=real["bytes"] / real["rows"], rows_per_file=read["window_rows"] / read["files"],
            rows_per_group=widest["train_rows"] / widest["row_groups"], footer_s_per_file=read["footer_s_per_file"],
            evaluation_s_per_row=largest["evaluation_s_per_epoch"] / largest["holdout_rows"] if largest else 0.0,
            local_cores=payload["machine"]["cpu_count"],
        )

    def allreduce_s(self, n: int, alpha: float, beta: float) -> float:
        """A ring all-reduce of the gradients over ``n`` ranks: ``2 (n-1) alpha + 2 (n-1)/n bytes / beta``."""
        if n <= 1:
            return 0.0
        return 2 * (n - 1) * alpha + 2 * (n - 1) / n * self.allreduce_bytes / beta

    def predict_loop_s(self, train_rows: int, row_groups: int, epochs: int, n: int,
                       cores: float | None = None) -> float:
        """Seconds of the training loops of a measured row on ``n`` ranks of this machine: each
        rank's share of the rows and row groups (slowed by ranks / cores beyond ``cores``, default
        the machine's), plus the loopback all-reduce of every step of the largest share."""
        share = self.seconds_per_row * train_rows / n + self.seconds_per_group * row_groups / n
        steps = math.ceil(train_rows / n / self.batch)
        allreduce = self.allreduce_s(n, self.alpha_local_s, self.beta_local_bytes_per_s)
        return epochs * (share * max(1.0, n / (cores or self.local_cores)) + steps * allreduce)

    @property
    def measured_link(self) -> dict[str, float]:
        """The all-reduce's alpha and beta as measured here (gloo, loopback, this loaded machine)."""
        return {"alpha_s": self.alpha_local_s, "beta_bytes_per_s": self.beta_local_bytes_per_s}

    def epoch(self, rows: float, n: int, device: str, link: dict[str, float] | None = None) -> dict[str, Any]:
        """One epoch over ``rows`` (in row groups of ``rows_per_group``) on ``n`` CPU ranks or ``n``
        GPUs (one rank each), their all-reduce over ``link`` (default :data:`NETWORK`; CPU ranks
        fill machines of :data:`CORES_PER_MACHINE` cores, so none is shared): the rank's rate, the
        seconds of each part, and which limit sets the rate (``bound``)."""
        link = link or NETWORK
        allreduce = self.allreduce_s(n, link["alpha_s"], link["beta_bytes_per_s"])
        if device == "cpu":
            batch, own = self.batch, "compute (a core per rank)"
            compute = self.batch / self.r1
        else:
            reader = GPU_BATCH / self.read_rows_per_s  # the one read-ahead thread that feeds the GPU
            batch, compute = GPU_BATCH, max(GPU_STEP_S, reader)
            own = "reading (the rank's reader)" if reader > GPU_STEP_S else "GPU step"
        ranks_rate = batch / (compute + allreduce)
        lake = STORAGE_BYTES_PER_S / self.bytes_per_row / n  # the lake's bandwidth shared by the ranks
        rate = min(ranks_rate, lake)
        bound = "reading (the lake)" if lake < ranks_rate else ("all-reduce" if allreduce > compute else own)
        seconds = {"footers": rows / self.rows_per_file * self.footer_s_per_file,
                   "steps": rows / (n * rate),
                   "evaluation (rank 0)": rows * HOLDOUT_SHARE * self.evaluation_s_per_row}
        return {"n": n, "device": device, "rate_per_rank": rate, "allreduce_s": allreduce, "batch": batch,
                "step_compute_s": compute, "seconds": seconds, "hours": sum(seconds.values()) / 3600, "bound": bound}


def calibration_rows(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows the model is fitted on: one TorchDistributor rank, local, at every scale."""
    found = [r for r in payload["rows"] if r["kind"] == "local" and r["processes"] == 1]
    if not found:
        raise ValueError("the points file has no one-rank local row to calibrate the model on")
    return found


def fit_rows_and_groups(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """(seconds per row, seconds per row group) of one rank: least squares without an intercept of
    ``loop_s / epochs = rows x a + row groups x b``; one point (or a negative ``b``): ``b = 0``."""
    import numpy as np

    x = np.array([[r["train_rows"], r["row_groups"]] for r in rows], dtype=float)
    y = np.array([r["loop_s"] / r["epochs"] for r in rows], dtype=float)
    if len(rows) > 1:
        (a, b), *_ = np.linalg.lstsq(x, y, rcond=None)
        if b >= 0 and a > 0:
            return float(a), float(b)
    return float(y.sum() / x[:, 0].sum()), 0.0


def fit_allreduce(sizes: list[dict[str, Any]]) -> tuple[float, float]:
    """(alpha, beta) of a ring over 2 ranks, ``t = 2 alpha + bytes / beta``, least squares over the
    measured sizes (median seconds)."""
    import numpy as np

    x = np.array([s["bytes"] for s in sizes], dtype=float)
    y = np.array([s["median_s"] for s in sizes], dtype=float)
    slope, intercept = np.polyfit(x, y, 1)
    return max(float(intercept), 0.0) / 2, 1.0 / float(slope) if slope > 0 else math.inf


def check(model: Capacity, payload: dict[str, Any]) -> list[dict[str, Any]]:
    """Predicted against measured training-loop seconds for every measured row of the pipeline
    (local and cluster ranks; the peer is another program)."""
    found = []
    for row in payload["rows"]:
        if row["kind"] == "peer":
            continue
        predicted = model.predict_loop_s(row["train_rows"], row["row_groups"], row["epochs"], row["processes"])
        one_core = model.predict_loop_s(row["train_rows"], row["row_groups"], row["epochs"], row["processes"], 1)
        found.append({"scale": row["scale"], "contender": row["contender"], "processes": row["processes"],
                      "measured_s": row["loop_s"], "predicted_s": round(predicted, 2),
                      "error": round(predicted / row["loop_s"] - 1, 3), "predicted_one_core_s": round(one_core, 2),
                      "error_one_core": round(one_core / row["loop_s"] - 1, 3),
                      "calibration": row["kind"] == "local" and row["processes"] == 1})
    return found


LIMITS = ("all-reduce", "reading (the lake's bandwidth)", "reading (every rank reads every footer)",
          "the driver (rank 0 evaluates alone)")


def first_break(model: Capacity, rows: float, device: str, ns: list[int],
                link: dict[str, float] | None = None) -> dict[str, Any]:
    """As N grows through ``ns``: the first N at which each of :data:`LIMITS` takes
    :data:`BOUND_SHARE` of the time (the all-reduce of a step's; the lake's bandwidth setting the
    rate; the footers' and rank 0's evaluation of an epoch's), and the one met first."""
    found: dict[str, int | None] = dict.fromkeys(LIMITS)
    for n in ns:
        epoch = model.epoch(rows, n, device, link)
        total = sum(epoch["seconds"].values())
        shares = dict(zip(LIMITS, (
            epoch["allreduce_s"] * epoch["rate_per_rank"] / epoch["batch"],
            1.0 if epoch["bound"] == "reading (the lake)" else 0.0,
            epoch["seconds"]["footers"] / total,
            epoch["seconds"]["evaluation (rank 0)"] / total,
        ), strict=True))
        for limit, share in shares.items():
            if found[limit] is None and share >= BOUND_SHARE:
                found[limit] = n
    met = [(n, LIMITS.index(limit), limit) for limit, n in found.items() if n is not None]
    return {"device": device, "at": found, "first": min(met)[2] if met else None}


NS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def report(model: Capacity, payload: dict[str, Any], rows: float) -> str:
    """The page's tables: the inputs, predicted against measured, the hours of an epoch over
    ``rows`` on N CPU ranks and N GPUs, and what breaks first."""
    from benchmarks.harness import markdown_table

    lines = [
        f"Inputs (from the points file): one CPU rank {model.seconds_per_row * 1e6:.2f} us a row and "
        f"{model.seconds_per_group * 1e3:.1f} ms a row group (fitted to the one-rank rows), {model.r1:,.0f} rows/s "
        f"in row groups of {model.rows_per_group:,.0f} rows; batch {model.batch}; "
        f"{model.parameters:,} parameters, {model.allreduce_bytes:,} bytes all-reduced per step; gloo on "
        f"loopback alpha {model.alpha_local_s * 1e6:.0f} us, beta {model.beta_local_bytes_per_s / 1e9:.2f} GB/s; "
        f"read and encode {model.read_rows_per_s:,.0f} rows/s on one core; {model.bytes_per_row:.0f} bytes per row "
        f"on disk, {model.rows_per_file:,.0f} rows per file, {model.footer_s_per_file * 1e3:.1f} ms per footer; "
        f"rank 0's evaluation {model.evaluation_s_per_row * 1e6:.1f} us per holdout row.",
        f"Assumed: between machines alpha {NETWORK['alpha_s'] * 1e6:.0f} us and beta "
        f"{NETWORK['beta_bytes_per_s'] / 1e9:.2f} GB/s (10 Gbit/s); the lake serves "
        f"{STORAGE_BYTES_PER_S / 1e9:g} GB/s to "
        f"all ranks; {CORES_PER_MACHINE} CPU ranks a machine; a GPU step of {GPU_STEP_S * 1e3:g} ms at batch "
        f"{GPU_BATCH}; a holdout of {HOLDOUT_SHARE:.1%} of the rows.",
        "",
        markdown_table(["scale", "contender", "measured loop (s)", "predicted (s)", "predicted / measured - 1",
                        "predicted, one free core (s)", "its error"],
                       [[f"{c['scale']:g}x", c["contender"] + (" (calibration)" if c["calibration"] else ""),
                         c["measured_s"], c["predicted_s"], f"{c['error']:+.0%}", c["predicted_one_core_s"],
                         f"{c['error_one_core']:+.0%}"] for c in check(model, payload)]),
        "",
    ]
    table = []
    for n in NS:
        cpu, here, gpu = (model.epoch(rows, n, "cpu"), model.epoch(rows, n, "cpu", model.measured_link),
                          model.epoch(rows, n, "gpu"))
        table.append([n, f"{cpu['hours']:.2f}", f"{cpu['rate_per_rank']:,.0f}", cpu["bound"], f"{here['hours']:.2f}",
                      f"{gpu['hours']:.2f}", f"{gpu['rate_per_rank']:,.0f}", gpu["bound"]])
    lines += [markdown_table(["N", "CPU ranks: hours", "rows/s per rank", "sets the rate",
                              "CPU hours, gloo as measured here", "GPUs: hours (assumed step)", "rows/s per GPU",
                              "sets the rate"], table), ""]
    for device, link, what in (("cpu", None, "CPU ranks"), ("cpu", model.measured_link, "CPU ranks, gloo as here"),
                               ("gpu", None, "GPUs")):
        found = first_break(model, rows, device, NS, link)
        at = "; ".join(f"{limit} at N = {n}" if n else f"{limit}: not by N = {NS[-1]}"
                       for limit, n in found["at"].items())
        lines.append(f"- {what}: first to take half the time: **{found['first'] or 'none'}** ({at})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--points", type=Path, default=POINTS,
                        help="the scale benchmark's scale.json (default: docs/bench/scale/scale.json)")
    parser.add_argument("--rows", type=float, default=1e9, help="rows of the epoch to predict (default: 1e9)")
    parser.add_argument("--out", type=Path, default=None, help="also write capacity.md and capacity.json here")
    args = parser.parse_args(argv)
    payload = json.loads(args.points.read_text())
    model = Capacity.from_points(payload)
    text = report(model, payload, args.rows)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "capacity.md").write_text(text + "\n")
        (args.out / "capacity.json").write_text(json.dumps({
            "inputs": dataclasses.asdict(model),
            "check": check(model, payload),
            "epochs": [model.epoch(args.rows, n, d) for d in ("cpu", "gpu") for n in NS]}, indent=1, default=str))


if __name__ == "__main__":
    main()

"""scripts/gpu_verify.sh can fail: on a machine without CUDA it stops before running anything,
saying why, with a non-zero exit (it used to run on, and exit 0 with skipped GPU tests)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts/gpu_verify.sh"


def run_script(out: Path, path: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), str(out)], env={**os.environ, "PATH": path}, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def no_cuda() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU here: the script would run every GPU check (run it by hand)")


def test_gpu_verify_stops_without_a_driver_saying_so(no_cuda, tmp_path):
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if not Path(p, "nvidia-smi").exists())
    done = run_script(tmp_path / "out", path)
    assert done.returncode == 1
    assert "gpu_verify: no nvidia-smi on PATH" in done.stderr and "run this on a GPU machine" in done.stderr
    assert not list((tmp_path / "out").glob("*.log"))  # no test or benchmark started


def test_gpu_verify_stops_when_torch_sees_no_cuda_device(no_cuda, tmp_path):
    """A driver that lists a GPU torch cannot use (a CPU build of torch, CUDA_VISIBLE_DEVICES empty):
    stopped at the torch check, before the tests."""
    fake = tmp_path / "bin"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'name, memory.total [MiB], driver_version'\necho 'Fake GPU, 1 MiB, 0.0'\n")
    smi.chmod(0o755)
    done = run_script(tmp_path / "out", f"{fake}{os.pathsep}{os.environ['PATH']}")
    assert done.returncode == 1
    assert "Fake GPU" in done.stdout
    assert "gpu_verify: torch sees no CUDA device" in done.stderr
    assert not list((tmp_path / "out").glob("*.log"))


def test_gpu_verify_refuses_an_unknown_step_before_anything_runs(tmp_path):
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GPU_VERIFY_STEPS": "tests benchmark"})
    assert done.returncode == 1
    assert "unknown step 'benchmark' in GPU_VERIFY_STEPS" in done.stderr
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_gpu_verify_runs_the_gpu_training_rows_before_any_cpu_contender(tmp_path):
    """A lease of 15 minutes ended during the CPU rows once, before the GPU rows ran: by default
    the training benchmark's GPU rows come first (alone), then the tests and the scoring
    benchmark, and the CPU contenders last, each part writing its own figures."""
    env = {**os.environ, "GPU_VERIFY_DRY_RUN": "1", "GPU_VERIFY_PYTEST_ARGS": ""}
    env.pop("GPU_VERIFY_STEPS", None)
    done = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], capture_output=True, text=True, timeout=60,
                          env=env)
    assert done.returncode == 0, done.stderr
    plan = [line.split(":", 1) for line in done.stdout.strip().splitlines()]
    assert [name for name, _ in plan] == ["training_gpu_benchmark", "gpu_tests", "scoring_gpu_benchmark",
                                          "training_cpu_benchmark"]
    commands = dict(plan)
    assert "-m benchmarks.training --use-gpu --rows gpu" in commands["training_gpu_benchmark"]
    assert "--rows cpu" in commands["training_cpu_benchmark"] and "--use-gpu" not in commands["training_cpu_benchmark"]
    outs = [command.split("--out ")[1].split()[0] for command in commands.values() if "--out " in command]
    assert len(set(outs)) == len(outs)  # each part its own figures: the two training parts apart

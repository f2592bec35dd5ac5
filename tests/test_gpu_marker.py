"""The ``gpu`` marker (tests/conftest.py): a GPU test without a GPU is skipped, and with
PIPELINE_REQUIRE_GPU=1 (what scripts/gpu_verify.sh sets) it fails, saying why, before its
fixtures start anything. Run on a real GPU test in a pytest of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GPU_TEST = "tests/jobs/scoring/test_score.py::test_gpu_scoring_equals_the_cpu"


@pytest.mark.e2e  # two pytest processes of their own: about 10 s
def test_pipeline_require_gpu_turns_a_gpu_test_s_skip_into_a_failure(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU here: the GPU test runs instead of skipping")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", GPU_TEST]
    runs = {}
    for require in ("", "1"):  # both at once: each is mostly pytest's start-up
        env = {**os.environ, "PIPELINE_TEST_HOME": str(tmp_path / f"home{require}"), "PIPELINE_REQUIRE_GPU": require}
        runs[require] = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         text=True)
    outputs = {require: (run.communicate(timeout=300)[0], run.returncode) for require, run in runs.items()}
    skipped, code = outputs[""]
    assert code == 0 and "1 skipped" in skipped and "no GPU here" in skipped, skipped[-3000:]
    failed, code = outputs["1"]
    assert code == 1 and "1 error" in failed, failed[-3000:]  # failed in its setup, before any fixture
    assert "PIPELINE_REQUIRE_GPU=1 but torch sees no CUDA device here" in failed


def test_the_job_scripts_the_gpu_test_submits_exist():
    """The GPU test is skipped here: what it submits is checked here, where it cannot skip."""
    from orchestration.spark_jobs import APPLICATIONS, JOBS_DIR
    from tests.jobs.training.test_gpu import JOBS

    assert JOBS == {job: JOBS_DIR / APPLICATIONS[job] for job in JOBS}
    assert all(path.is_file() for path in JOBS.values()), JOBS

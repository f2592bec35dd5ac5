#!/usr/bin/env bash
# The GPU checks and figures, in one go, on a machine with an NVIDIA GPU, the GPU's own figures first:
#   1. training-gpu: benchmarks.training's GPU rows (--use-gpu --rows gpu: the plain loop on cuda,
#      TorchDistributor on the GPU, fp32 and bf16), written as soon as they are measured;
#   2. tests: tests/jobs/training/test_gpu.py (train with --use-gpu true in bf16, score on GPU and CPU:
#      equal), the GPU standalone-worker test, and test_train.py / test_score.py (which include the
#      GPU-vs-CPU scoring comparison);
#   3. scoring: benchmarks.scoring_gpu (model alone, prediction functions, PCIe bound, a day scored by
#      the whole job, CPU vs GPU);
#   4. training-cpu: benchmarks.training's CPU contenders (plain loop, TorchDistributor, torchrun) on
#      the same machine, for comparison: last, as a lease that ends early loses the least there.
# Each part writes its log and figures under OUT_DIR as it finishes (the training benchmark after
# each group of rows), so a lease taken back mid-way keeps every part done.
#
#   bash scripts/gpu_verify.sh [OUT_DIR]      # default: benchmarks/results/gpu
#
# Settings (environment), for a machine lent for minutes rather than hours:
#   GPU_VERIFY_STEPS          which parts, in order (default: "training-gpu tests scoring training-cpu";
#                             "training" is the whole training benchmark, its GPU rows first)
#   GPU_VERIFY_PYTEST_ARGS    extra pytest arguments for the tests (default: "-n 4" where pytest-xdist
#                             is installed, else none)
#   GPU_VERIFY_TRAINING_ARGS  benchmarks.training's arguments after --use-gpu --rows ... (default: --repeat 1)
#   GPU_VERIFY_SCORING_ARGS   benchmarks.scoring_gpu's (default: --rows 2000000 --repeat 2)
#   GPU_VERIFY_DRY_RUN=1      print the parts' commands in the order they would run, run nothing
#
# The defaults fit a 15-minute lease with the machine's start (2-3 minutes): on a 16-core H200 the
# tests took 135 s with -n 4 and the scoring benchmark about three minutes at these sizes; the
# training benchmark's GPU rows need its one-off setup (landing and featuring the window with
# Spark) and a few runs of seconds. Where one call may run at most 10 minutes, split it in two:
# GPU_VERIFY_STEPS="training-gpu tests", then GPU_VERIFY_STEPS="scoring training-cpu".
#
# On a GPU machine with this project installed (make install), run it as it is. On one without
# network, Java, pyspark or MLflow, bring the offline kit first (scripts/devkit_build.sh builds
# .devkit1/ and .devkit2/ here; copy both in) and `source scripts/devkit_setup.sh` before this.
#
# It can fail, and says why: no CUDA device for torch (or no nvidia-smi) stops it before anything
# runs; the GPU tests run with PIPELINE_REQUIRE_GPU=1, so a GPU test that would skip fails; the
# benchmarks are run with --use-gpu / on the GPU and exit non-zero where they cannot use it or where
# GPU and CPU probabilities differ by more than 1e-5. The first failing part stops the run (its
# log's tail printed), exit status 1.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-benchmarks/results/gpu}"
mkdir -p "$out"
python="$(command -v python3)"
[ -x .venv/bin/python ] && python=.venv/bin/python
export PYTHONUNBUFFERED=1
export PIPELINE_REQUIRE_GPU=1  # tests/conftest.py: a skipped GPU test is a failure

fail() {
  echo "gpu_verify: $*" >&2
  exit 1
}

steps="${GPU_VERIFY_STEPS:-training-gpu tests scoring training-cpu}"
for s in $steps; do
  case "$s" in
    training-gpu | tests | scoring | training-cpu | training) ;;
    *) fail "unknown step '$s' in GPU_VERIFY_STEPS (the steps: training-gpu tests scoring training-cpu training)" ;;
  esac
done
dry_run="${GPU_VERIFY_DRY_RUN:-}"
pytest_args="${GPU_VERIFY_PYTEST_ARGS-}"
if [ -z "${GPU_VERIFY_PYTEST_ARGS+set}" ] && "$python" -c 'import xdist' > /dev/null 2>&1; then
  pytest_args="-n 4"
fi
training_args="${GPU_VERIFY_TRAINING_ARGS:---repeat 1}"
scoring_args="${GPU_VERIFY_SCORING_ARGS:---rows 2000000 --repeat 2}"

step() {
  local name="$1"
  shift
  if [ -n "$dry_run" ]; then
    echo "$name: $*"
    return
  fi
  echo "==> $name (log: $out/$name.log)"
  if "$@" > "$out/$name.log" 2>&1; then
    tail -n 25 "$out/$name.log"
  else
    tail -n 60 "$out/$name.log"
    fail "$name FAILED (log: $out/$name.log); stopping here"
  fi
}

run_steps() {
  for s in $steps; do
    case "$s" in
      training-gpu)
        # shellcheck disable=SC2086  # the settings are word lists
        step training_gpu_benchmark "$python" -m benchmarks.training --use-gpu --rows gpu $training_args \
          --out "$out/training-gpu" ;;
      tests)
        # shellcheck disable=SC2086
        step gpu_tests "$python" -m pytest -q -p no:cacheprovider $pytest_args tests/jobs/training/test_gpu.py \
          tests/jobs/training/test_train_on_cluster.py::test_gpu_training_on_a_standalone_worker_that_advertises_its_gpus \
          tests/jobs/training/test_train.py tests/jobs/scoring/test_score.py ;;
      scoring)
        # shellcheck disable=SC2086
        step scoring_gpu_benchmark "$python" -m benchmarks.scoring_gpu $scoring_args --out "$out" ;;
      training-cpu)
        # shellcheck disable=SC2086
        step training_cpu_benchmark "$python" -m benchmarks.training --rows cpu $training_args \
          --out "$out/training-cpu" ;;
      training)
        # shellcheck disable=SC2086
        step training_benchmark "$python" -m benchmarks.training --use-gpu --rows all $training_args \
          --out "$out/training" ;;
    esac
  done
}

if [ -n "$dry_run" ]; then  # the plan alone: no GPU needed, nothing run
  run_steps
  exit 0
fi

command -v nvidia-smi > /dev/null \
  || fail "no nvidia-smi on PATH: this machine has no NVIDIA driver, so there is no GPU to verify; run this on a GPU machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" \
  || fail "nvidia-smi finds no GPU (see $out/gpu.txt); check the driver and CUDA_VISIBLE_DEVICES"
cat "$out/gpu.txt"
"$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
  || fail "torch sees no CUDA device (is it a CUDA build? CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset})"

run_steps
echo "==> every GPU check asked for ($steps) passed; logs and figures in $out"

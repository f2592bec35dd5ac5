#!/usr/bin/env bash
# The GPU checks and figures, in one go, on a machine with an NVIDIA GPU:
#   - tests/jobs/training/test_gpu.py (train with --use-gpu true in bf16, score on GPU and CPU: equal),
#     the GPU standalone-worker test, and test_train.py / test_score.py (which include the
#     GPU-vs-CPU scoring comparison);
#   - benchmarks.training --use-gpu (CPU vs GPU, fp32 and bf16) and benchmarks.scoring_gpu
#     (model alone, prediction functions, PCIe bound, a 10M-row day: whole job CPU vs GPU).
#
#   bash scripts/gpu_verify.sh [OUT_DIR]      # default: benchmarks/results/gpu
#
# Settings (environment), for a machine lent for minutes rather than hours:
#   GPU_VERIFY_STEPS          which parts, in order (default: "tests training scoring")
#   GPU_VERIFY_PYTEST_ARGS    extra pytest arguments for the tests (e.g. "-n 4": pytest-xdist)
#   GPU_VERIFY_TRAINING_ARGS  benchmarks.training's arguments after --use-gpu (default: --repeat 2)
#   GPU_VERIFY_SCORING_ARGS   benchmarks.scoring_gpu's (default: --rows 10000000 --repeat 3)
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

steps="${GPU_VERIFY_STEPS:-tests training scoring}"
for s in $steps; do
  case "$s" in
    tests | training | scoring) ;;
    *) fail "unknown step '$s' in GPU_VERIFY_STEPS (the steps: tests training scoring)" ;;
  esac
done

step() {
  local name="$1"
  shift
  echo "==> $name (log: $out/$name.log)"
  if "$@" > "$out/$name.log" 2>&1; then
    tail -n 25 "$out/$name.log"
  else
    tail -n 60 "$out/$name.log"
    fail "$name FAILED (log: $out/$name.log); stopping here"
  fi
}

command -v nvidia-smi > /dev/null \
  || fail "no nvidia-smi on PATH: this machine has no NVIDIA driver, so there is no GPU to verify; run this on a GPU machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.txt" \
  || fail "nvidia-smi finds no GPU (see $out/gpu.txt); check the driver and CUDA_VISIBLE_DEVICES"
cat "$out/gpu.txt"
"$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
  || fail "torch sees no CUDA device (is it a CUDA build? CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset})"

for s in $steps; do
  case "$s" in
    tests)
      # shellcheck disable=SC2086  # the settings are word lists
      step gpu_tests "$python" -m pytest -q -p no:cacheprovider ${GPU_VERIFY_PYTEST_ARGS:-} tests/jobs/training/test_gpu.py \
        tests/jobs/training/test_train_on_cluster.py::test_gpu_training_on_a_standalone_worker_that_advertises_its_gpus \
        tests/jobs/training/test_train.py tests/jobs/scoring/test_score.py ;;
    training)
      # shellcheck disable=SC2086
      step training_benchmark "$python" -m benchmarks.training --use-gpu ${GPU_VERIFY_TRAINING_ARGS:---repeat 2} --out "$out" ;;
    scoring)
      # shellcheck disable=SC2086
      step scoring_gpu_benchmark "$python" -m benchmarks.scoring_gpu ${GPU_VERIFY_SCORING_ARGS:---rows 10000000 --repeat 3} --out "$out" ;;
  esac
done
echo "==> every GPU check asked for ($steps) passed; logs and figures in $out"

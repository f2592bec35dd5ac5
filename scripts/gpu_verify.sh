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
# On a GPU machine with this project installed (make install), run it as it is. On one without
# network, Java, pyspark or MLflow, bring the offline kit first (scripts/devkit_build.sh builds
# .devkit1/ and .devkit2/ here; copy both in) and `source scripts/devkit_setup.sh` before this.
# Each part writes its log to OUT_DIR; a failing part is reported and the next one still runs.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-benchmarks/results/gpu}"
mkdir -p "$out"
python="$(command -v python3)"
[ -x .venv/bin/python ] && python=.venv/bin/python
export PYTHONUNBUFFERED=1

status=0
step() {
  local name="$1"
  shift
  echo "==> $name (log: $out/$name.log)"
  if "$@" > "$out/$name.log" 2>&1; then
    tail -n 25 "$out/$name.log"
  else
    status=1
    echo "==> $name FAILED"
    tail -n 60 "$out/$name.log"
  fi
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
step gpu_tests "$python" -m pytest -q -p no:cacheprovider tests/jobs/training/test_gpu.py \
  tests/jobs/training/test_train_on_cluster.py::test_gpu_training_on_a_standalone_worker_that_advertises_its_gpus \
  tests/jobs/training/test_train.py tests/jobs/scoring/test_score.py
step training_benchmark "$python" -m benchmarks.training --use-gpu --repeat 2 --out "$out"
step scoring_gpu_benchmark "$python" -m benchmarks.scoring_gpu --rows 10000000 --repeat 3 --out "$out"
exit "$status"

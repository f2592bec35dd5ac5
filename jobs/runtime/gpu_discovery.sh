#!/usr/bin/env bash
# Spark resource discovery script for GPUs: prints this machine's NVIDIA GPUs in the form Spark
# expects, e.g. {"name": "gpu", "addresses": ["0", "1"]}. With no nvidia-smi, or no GPU, the list
# is empty (Spark then refuses to start with a GPU amount > 0, which says what is wrong).
# Used by jobs/runtime/gpu.py:gpu_conf for the driver (TorchDistributor local mode) or the executors,
# and by a standalone worker started with
#   SPARK_WORKER_OPTS="-Dspark.worker.resource.gpu.amount=N -Dspark.worker.resource.gpu.discoveryScript=<this file>"
set -euo pipefail
smi="${NVIDIA_SMI:-nvidia-smi}"
addresses=""
if command -v "$smi" > /dev/null 2>&1; then
  addresses=$("$smi" --query-gpu=index --format=csv,noheader 2>/dev/null \
    | tr -d ' \r' | grep -E '^[0-9]+$' | sed 's/.*/"&"/' | paste -sd, - || true)
fi
echo "{\"name\": \"gpu\", \"addresses\": [${addresses}]}"

#!/usr/bin/env bash
# `make airflow`: the deployed stack on this machine, for a person, until Ctrl-C: PostgreSQL (the
# database of Airflow and MLflow, kept in $PIPELINE_HOME/postgres), the MLflow UI on
# http://127.0.0.1:5000, Airflow's API server (the UI, http://127.0.0.1:8080), scheduler, DAG
# processor and triggerer (LocalExecutor), and with --spark a Spark standalone master and worker
# that the tasks submit to. The same code starts it for the tests under tests/deployed/ (tests/stack.py).
# Needs scripts/system_packages.sh (PostgreSQL); `make airflow` runs it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$PIPELINE_REPO"
mkdir -p "$PIPELINE_HOME"
if [ ! -d "$LAKE_ROOT/flights/raw/flights" ]; then
  echo "==> landing NYC flights 2013 in the raw zone of $LAKE_ROOT/flights (the flights pipeline's lake)"
  python -m jobs.datasets.land_flights --lake-root "$LAKE_ROOT/flights"
fi
exec python -m tests.stack "$@"

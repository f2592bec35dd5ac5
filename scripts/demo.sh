#!/usr/bin/env bash
# The README's first command (`make demo`): land the example data, run the training pipeline and
# then the scoring pipeline through Airflow, and print what came out. Re-running is safe: every
# step replaces its own outputs, and each training run registers one more model version.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
TRAIN_DATE="${TRAIN_DATE:-2013-01-28}"
SCORE_DATE="${SCORE_DATE:-2013-01-29}"

step() { printf '\n==> %s\n' "$*"; }

step "landing NYC flights 2013 in the raw zone of $LAKE_ROOT"
python -m jobs.datasets.land_flights

step "initialising Airflow metadata in $AIRFLOW_HOME (SQLite)"
airflow db migrate > "$PIPELINE_HOME/airflow-db-migrate.log" 2>&1 \
  || { cat "$PIPELINE_HOME/airflow-db-migrate.log"; exit 1; }

run_dag() {
  local dag_id=$1 day=$2 log="$PIPELINE_HOME/logs/$1-$2.log"
  mkdir -p "$(dirname "$log")"
  step "airflow dags test $dag_id $day (log: $log)"
  # dags test runs every task for real, in this process, with real spark-submit.
  airflow dags test "$dag_id" "$day" > "$log" 2>&1 || true
  # Show what each job said about itself, without Airflow's log prefixes.
  grep -oE "(jobs\.(validate|features|train|score): .*|epoch [0-9]+/[0-9]+: .*|[A-Za-z.]*(Error|Failed): .*)" "$log" \
    | sed -E 's/ +\[airflow[^]]*\].*$//' | cut -c1-200 || true
  local state
  state=$(airflow dags state "$dag_id" "$day" 2>/dev/null | tail -n 1)
  [ "$state" = "success" ] || { echo "$dag_id for $day ended in state '$state': see $log"; exit 1; }
  echo "$dag_id for $day: $state"
}

run_dag train_pipeline "$TRAIN_DATE"
run_dag score_pipeline "$SCORE_DATE"

step "summary"
python -m jobs.summary --run-date "$SCORE_DATE"

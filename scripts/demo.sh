#!/usr/bin/env bash
# The README's first command (`make demo`; `make demo PIPELINE=<name>` for another pipeline): land
# the pipeline's example data, then run its three DAGs through Airflow as the scheduler would chain
# them: ingest the days (validate + features), train and register a model on them, score the day
# after. Each task's progress lines are shown as they happen. Re-running is safe: every step
# replaces its own outputs, and each training run registers one more model version.
#
# A pipeline's folder may hold a `demo.env` (pipelines/flights/demo.env): its first day, training
# day and scored day, and the command that lands its data. Without one, land the data first
# (python -m jobs.datasets.landing ... --lake-root $LAKE_ROOT/<name>) and give FIRST_DAY=,
# TRAIN_DATE= and SCORE_DATE=; a value given in the environment wins over the file's.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
PIPELINE="${PIPELINE:-flights}"
step() { printf '\n==> %s\n' "$*"; }

# The demo's own, lighter model selection, so that it shows every stage in a few minutes: the demo
# profile (jobs/config/profiles/demo.yaml: the first MLlib baseline only, one MLP candidate). The
# DAGs' and the pipeline's defaults stay as they are. PIPELINE_PROFILES= (empty) runs without it.
export PIPELINE_PROFILES="${PIPELINE_PROFILES-demo}"

# Where the pipeline is (the bundled pipelines/, $PIPELINES_DIR or $PIPELINE_CONFIG), and that its
# config loads: a mistake is said here, by key, before anything runs.
SOURCE=$(python -c 'import sys
from jobs.config import ConfigError
from jobs.config.pipelines import find
try:
    pipeline = find(sys.argv[1])
except ConfigError as err:
    sys.exit(str(err))
sys.exit(pipeline.error) if pipeline.error else print(pipeline.source)' "$PIPELINE")
DEMO_ENV="$SOURCE/demo.env"
LAND=""
if [ -f "$DEMO_ENV" ]; then
  source "$DEMO_ENV"
fi
for name in FIRST_DAY TRAIN_DATE SCORE_DATE; do
  if [ -z "${!name:-}" ]; then
    echo "$PIPELINE has no $DEMO_ENV giving $name: land its data (python -m jobs.datasets.landing" \
         "... --lake-root $LAKE_ROOT/$PIPELINE) and run again with FIRST_DAY=, TRAIN_DATE= and SCORE_DATE=" >&2
    exit 2
  fi
done
# Ingest the training window and the scored day in one run: FIRST_DAY..SCORE_DATE.
INGEST_DAYS=$(( ($(date -u -d "$SCORE_DATE" +%s) - $(date -u -d "$FIRST_DAY" +%s)) / 86400 + 1 ))

# The pipeline's DAGs are <name>_*, its lake $LAKE_ROOT/<name>.
if [ -n "$LAND" ]; then
  step "landing the $PIPELINE example data in the raw zone of $LAKE_ROOT/$PIPELINE"
  eval "$LAND --lake-root \"\$LAKE_ROOT/\$PIPELINE\""
fi

step "initialising Airflow metadata in $AIRFLOW_HOME (SQLite)"
airflow db migrate > "$PIPELINE_HOME/airflow-db-migrate.log" 2>&1 \
  || { cat "$PIPELINE_HOME/airflow-db-migrate.log"; exit 1; }

# What each job and task says about itself, as it says it, without Airflow's log prefixes.
PROGRESS='(FAILED [a-z_]+ .*|jobs(\.[a-z_]+)*: .*|epoch [0-9]+/[0-9]+: .*|[A-Za-z.]*(Error|Failed|Exception): .*|(scoring|(no )?drift on) [0-9]{4}-[0-9]{2}-[0-9]{2}.*|(started by|features ready for|raw [a-z_]+ for|registered [a-z_]+ version) .*|[A-Za-z_]+ version [0-9]+ is the champion now|\| (role|candidate|baseline|champion) \|.*|sweep candidate .*|best of [0-9]+ candidates .*)'

run_dag() {
  local dag_id=$1 day=$2 conf=$3 log="$PIPELINE_HOME/logs/$1-$2.log"
  mkdir -p "$(dirname "$log")"
  step "airflow dags test $dag_id --conf '$conf' (full log: $log)"
  # dags test runs every task for real, in this process, with real spark-submit. No logical date:
  # the run is for the day in its conf, and the UI shows it started now (not in 2013).
  set +o pipefail
  airflow dags test "$dag_id" --conf "$conf" 2>&1 | tee "$log" \
    | grep --line-buffered -oE "$PROGRESS" | sed -u -E 's/ +\[airflow[^]]*\].*$//; s/ +(loc|source)=[^ ]+$//; s/\x27$//'
  local status=${PIPESTATUS[0]}
  set -o pipefail
  # dags test prints the task logs only here: file them where the UI's log tab reads them
  python scripts/dag_test_logs.py "$log" || echo "(could not file the task logs for the UI)"
  [ "$status" = 0 ] || { echo "$dag_id for $day failed: see $log"; exit 1; }
  echo "$dag_id for $day: success"
}

run_dag "${PIPELINE}_ingest" "$SCORE_DATE" "{\"run_date\": \"$SCORE_DATE\", \"days\": $INGEST_DAYS}"
run_dag "${PIPELINE}_train" "$TRAIN_DATE" "{\"run_date\": \"$TRAIN_DATE\"}"
run_dag "${PIPELINE}_score" "$SCORE_DATE" "{\"run_date\": \"$SCORE_DATE\"}"

step "summary"
PIPELINE_CONFIG="$SOURCE" python -m jobs.summary --run-date "$SCORE_DATE" --lake-root "$LAKE_ROOT/$PIPELINE"

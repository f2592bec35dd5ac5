# The environment of the embedded defaults: local Spark, SQLite, a local folder as the lake and a
# local MLflow store, all under $PIPELINE_HOME (default: .pipeline/ in the repository).
# Sourced by `make` targets and scripts/demo.sh; tests source it too, with their own PIPELINE_HOME.
# Every variable keeps a value already set, so a deployment overrides any of them.

PIPELINE_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PIPELINE_REPO
export PIPELINE_HOME="${PIPELINE_HOME:-$PIPELINE_REPO/.pipeline}"
export LAKE_ROOT="${LAKE_ROOT:-$PIPELINE_HOME/lake}"
export MLFLOW_TRACKING_URI="${MLFLOW_TRACKING_URI:-sqlite:///$PIPELINE_HOME/mlflow.db}"
export PIPELINE_MLFLOW_ARTIFACTS="${PIPELINE_MLFLOW_ARTIFACTS:-$PIPELINE_HOME/mlartifacts}"
# Where `mlflow ui --backend-store-uri $MLFLOW_TRACKING_URI` serves: task logs and Airflow's
# "MLflow run" button link there.
export MLFLOW_UI_URL="${MLFLOW_UI_URL:-http://127.0.0.1:5000}"

export AIRFLOW_HOME="${AIRFLOW_HOME:-$PIPELINE_HOME/airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="${AIRFLOW__CORE__DAGS_FOLDER:-$PIPELINE_REPO/dags}"
export AIRFLOW__CORE__PLUGINS_FOLDER="${AIRFLOW__CORE__PLUGINS_FOLDER:-$PIPELINE_REPO/plugins}"
export AIRFLOW__CORE__LOAD_EXAMPLES="${AIRFLOW__CORE__LOAD_EXAMPLES:-False}"
export AIRFLOW__CORE__EXECUTOR="${AIRFLOW__CORE__EXECUTOR:-LocalExecutor}"
# A task's calls to Airflow's execution API (its inputs, its heartbeats, its end state) ride out a
# restart of Airflow's database: 10 tries, waits drawn between 2 s and 1, 2, 4, ... 60 s (about 2
# minutes in all; a task whose API server is gone fails after that). Airflow's default, 5 tries
# from 1 s, gives up after about 10 s: a 30 s PostgreSQL restart failed a scoring task that way.
export AIRFLOW__WORKERS__EXECUTION_API_RETRIES="${AIRFLOW__WORKERS__EXECUTION_API_RETRIES:-10}"
export AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN="${AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MIN:-2}"
export AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX="${AIRFLOW__WORKERS__EXECUTION_API_RETRY_WAIT_MAX:-60}"
# The JSON form: the URI form spark://local[2] silently becomes --master yarn. (Not a ${VAR:-...}
# default: the braces of the JSON would end the expansion early.)
if [ -z "${AIRFLOW_CONN_SPARK_DEFAULT:-}" ]; then
  export AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}'
fi

# Spark's driver and its web UI listen on loopback only (the UI binds to all interfaces otherwise);
# a cluster across machines sets its own address.
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"

# Every spark-submit's JVM maps Spark's classes from the archive `make class-archive` builds for
# this environment (jobs/runtime/class_archive.py) instead of loading them one by one; a JVM that
# cannot use it (jars or Java changed since) says so in one line and starts as before.
if [ -z "${SPARK_SUBMIT_OPTS+x}" ] && [ -f "$PIPELINE_REPO/.venv/spark-classes.jsa" ]; then
  export SPARK_SUBMIT_OPTS="-XX:SharedArchiveFile=$PIPELINE_REPO/.venv/spark-classes.jsa"
fi

# OpenLineage: every spark-submit gets its Airflow task as parent job (spark.openlineage.parent*),
# so a Spark-side OpenLineage listener links its lineage to the task. Emitting needs a transport
# (AIRFLOW__OPENLINEAGE__TRANSPORT) and the openlineage-spark listener: see the README.
export AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO="${AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO:-True}"

export GX_ANALYTICS_ENABLED="${GX_ANALYTICS_ENABLED:-False}"
export MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="${MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR:-false}"
# spark-submit finds SPARK_HOME (pyspark's folder) and its Python through PATH.
export PATH="$PIPELINE_REPO/.venv/bin:$PATH"

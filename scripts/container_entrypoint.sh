#!/usr/bin/env bash
# The image's entrypoint (Dockerfile): runs the service's command. Before that, in an Airflow
# service given AIRFLOW_ADMIN_PASSWORD (from .env), it writes the file where Airflow's
# SimpleAuthManager keeps the admin's password, so that the login is the one in .env, the same
# after every restart or re-creation of the container, instead of a new random one each time.
set -euo pipefail
if [ -n "${AIRFLOW_ADMIN_PASSWORD:-}" ] && [ -n "${AIRFLOW_HOME:-}" ]; then
  file="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE:-$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated}"
  (umask 077 && python -c 'import json, os; print(json.dumps({"admin": os.environ["AIRFLOW_ADMIN_PASSWORD"]}))' > "$file")
fi
exec "$@"

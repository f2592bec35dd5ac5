#!/usr/bin/env bash
# The PostgreSQL service's init script (docker-compose.yml mounts it into /docker-entrypoint-initdb.d/):
# run once by the postgres image, on an empty data volume, as the superuser. It creates a role and
# a database owned by it for Airflow and for MLflow, with the passwords of .env. Safe to run again
# (`docker compose exec postgres bash /docker-entrypoint-initdb.d/10-databases.sh`), which also
# sets each role's password to the one in .env now.
create_database() {
  psql -v ON_ERROR_STOP=1 --no-psqlrc --username "${POSTGRES_USER:-postgres}" --dbname postgres \
    --set=name="$1" --set=password="$2" <<'SQL'
SELECT format('CREATE ROLE %I LOGIN', :'name')
  WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'name')\gexec
ALTER ROLE :"name" PASSWORD :'password';
SELECT format('CREATE DATABASE %I OWNER %I', :'name', :'name')
  WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'name')\gexec
SQL
}
create_database airflow "$AIRFLOW_DB_PASSWORD"
create_database mlflow "$MLFLOW_DB_PASSWORD"

#!/usr/bin/env bash
# The part of the official postgres image's entrypoint that docker-compose.yml relies on.
set -Eeuo pipefail

if [ "${1:0:1}" = "-" ]; then
  set -- postgres "$@"
fi
if [ "$1" != "postgres" ]; then
  exec "$@"
fi

if [ "$(id -u)" = "0" ]; then
  # Started as root: own the data folder, then run as postgres (the official image uses gosu).
  mkdir -p "$PGDATA"
  chown -R postgres:postgres "$PGDATA"
  chmod 0700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set to initialise the database}"
  user="${POSTGRES_USER:-postgres}"
  initdb --username="$user" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") -D "$PGDATA" \
    --auth-local=trust --auth-host=scram-sha-256 ${POSTGRES_INITDB_ARGS:-}
  {
    echo "listen_addresses = '*'"
  } >> "$PGDATA/postgresql.conf"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"

  # Socket only while the init scripts run: nothing outside sees a half-made server.
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
  export PGPASSWORD="$POSTGRES_PASSWORD"
  db="${POSTGRES_DB:-$user}"
  if [ "$db" != "postgres" ]; then
    psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$user" --dbname postgres -c "CREATE DATABASE \"$db\""
  fi
  shopt -s nullglob
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sh)
        if [ -x "$f" ]; then echo "$0: running $f"; "$f"; else echo "$0: sourcing $f"; . "$f"; fi ;;
      *.sql) echo "$0: running $f"; psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$user" --dbname "$db" -f "$f" ;;
      *) echo "$0: ignoring $f" ;;
    esac
  done
  unset PGPASSWORD
  pg_ctl -D "$PGDATA" -m fast -w stop
  echo "$0: PostgreSQL init process complete; ready for start up."
fi

exec "$@"

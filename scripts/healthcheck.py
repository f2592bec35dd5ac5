"""The health checks of the compose services (``healthcheck:`` in docker-compose.yml).

Each probes the service itself and exits 0 when it answers, 1 with the reason otherwise. They run
every half minute or so in every container, so they import no Airflow, Spark or MLflow: a check
costs a Python start and one request or one query.

Usage (inside the image)::

    python /opt/pipeline/scripts/healthcheck.py http URL [--json KEY.PATH=VALUE] [--text TEXT]
    python /opt/pipeline/scripts/healthcheck.py airflow-job JOB_TYPE [--max-age SECONDS]

``http``: the URL answers 2xx, and its JSON has VALUE at KEY.PATH (``metadatabase.status=healthy``)
or its body contains TEXT. ``airflow-job``: this container runs a live Airflow job of JOB_TYPE
(``SchedulerJob``, ``DagProcessorJob``, ``TriggererJob``): Airflow's metadata database holds a
running job of that type from this host whose heartbeat is at most SECONDS old, which is what
``airflow jobs check --local`` checks, without starting Airflow.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import urllib.request
from typing import Any

DB_ENV = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
HEARTBEAT_SQL = (
    "SELECT EXTRACT(EPOCH FROM (now() - max(latest_heartbeat))) FROM job "
    "WHERE job_type = %s AND hostname = %s AND state = 'running'"
)


class Unhealthy(Exception):
    """The service did not answer as a healthy one does."""


def json_path(document: Any, path: str) -> Any:
    """The value at a dotted ``path`` of a decoded JSON document (a missing key raises Unhealthy)."""
    value = document
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise Unhealthy(f"no {path} in the answer")
        value = value[key]
    return value


def check_answer(body: bytes, expect_json: str | None = None, expect_text: str | None = None) -> None:
    """Raise Unhealthy unless ``body`` holds ``expect_json`` (``KEY.PATH=VALUE``) and ``expect_text``."""
    if expect_text is not None and expect_text not in body.decode(errors="replace"):
        raise Unhealthy(f"{expect_text!r} not in the answer: {body[:200]!r}")
    if expect_json is not None:
        path, _, wanted = expect_json.partition("=")
        try:
            document = json.loads(body)
        except ValueError as exc:
            raise Unhealthy(f"not JSON: {body[:200]!r}") from exc
        found = json_path(document, path)
        if str(found) != wanted:
            raise Unhealthy(f"{path} is {found!r}, not {wanted!r}")


def check_http(url: str, expect_json: str | None = None, expect_text: str | None = None, timeout: float = 10) -> None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = response.read()
    except OSError as exc:  # refused, reset, timed out, HTTP errors
        raise Unhealthy(f"{url}: {exc}") from exc
    check_answer(body, expect_json, expect_text)


def psycopg2_dsn(sqlalchemy_url: str) -> str:
    """A libpq URL from a SQLAlchemy one: ``postgresql+psycopg2://...`` becomes ``postgresql://...``."""
    scheme, sep, rest = sqlalchemy_url.partition("://")
    if not sep or not scheme.startswith("postgresql"):
        raise Unhealthy(f"not a PostgreSQL URL: {scheme}://...")
    return f"postgresql://{rest}"


def heartbeat_verdict(age: float | None, job_type: str, max_age: float) -> None:
    """Raise Unhealthy unless a running job's last heartbeat is ``age`` seconds old, at most ``max_age``."""
    if age is None:
        raise Unhealthy(f"no running {job_type} from this host")
    if age > max_age:
        raise Unhealthy(f"{job_type}'s last heartbeat is {age:.0f} s old (more than {max_age:.0f} s)")


def check_airflow_job(job_type: str, max_age: float) -> None:
    import psycopg2

    url = os.environ.get(DB_ENV)
    if not url:
        raise Unhealthy(f"{DB_ENV} is not set")
    # Airflow names a job's host by socket.getfqdn() (core.hostname_callable's default).
    with psycopg2.connect(psycopg2_dsn(url), connect_timeout=10) as conn, conn.cursor() as cursor:
        cursor.execute(HEARTBEAT_SQL, (job_type, socket.getfqdn()))
        (age,) = cursor.fetchone()
    heartbeat_verdict(None if age is None else float(age), job_type, max_age)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="kind", required=True)
    http = sub.add_parser("http")
    http.add_argument("url")
    http.add_argument("--json", dest="expect_json")
    http.add_argument("--text", dest="expect_text")
    job = sub.add_parser("airflow-job")
    job.add_argument("job_type", choices=["SchedulerJob", "DagProcessorJob", "TriggererJob"])
    job.add_argument("--max-age", type=float, default=60)
    args = parser.parse_args(argv)
    try:
        if args.kind == "http":
            check_http(args.url, args.expect_json, args.expect_text)
        else:
            check_airflow_job(args.job_type, args.max_age)
    except Exception as exc:  # every failure is an unhealthy answer, with its reason in docker inspect
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

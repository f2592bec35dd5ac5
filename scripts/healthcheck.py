"""The health checks of the compose services (``healthcheck:`` in docker-compose.yml).

Each probes the service itself and exits 0 when it answers, 1 with the reason otherwise. They run
every half minute or so in every container, so they import no Airflow, Spark or MLflow: a check
costs a Python start and one request or one query.

Run inside the image (``--help`` lists the checks and their options). ``airflow-job`` is what
``airflow jobs check --local`` checks, without starting Airflow.

``--end-after``: the engine restarts a container whose process exits, never one that is only
unhealthy (that takes a swarm). An Airflow component can stay up without working: after a
PostgreSQL crash the scheduler was seen to stop scheduling and wait for ever ("Shutting down
LocalExecutor; waiting for running tasks to finish"). With ``--end-after``, a job whose heartbeat
(or, none, whose process) is older than that many seconds has its process killed, as a crash: the
container exits and its restart policy starts it again. It needs ``init: true`` (docker-init as
PID 1, the component its child): a container's PID 1 cannot be killed from inside.
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


def should_end(age: float | None, uptime: float, end_after: float | None) -> bool:
    """Whether a job whose last heartbeat is ``age`` seconds old (None: no running job) in a
    process up for ``uptime`` seconds is hung for good: both older than ``end_after``."""
    if end_after is None or uptime <= end_after:
        return False
    return age is None or age > end_after


def _main_process() -> tuple[int, float] | None:
    """(pid, seconds up) of the component: the oldest child of PID 1 (docker-init), or None when
    PID 1 is the component itself (no ``init: true``)."""
    import pathlib

    ticks = os.sysconf("SC_CLK_TCK")
    uptime = float(pathlib.Path("/proc/uptime").read_text().split()[0])
    children = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid, ppid, started = int(stat.parent.name), int(fields[1]), int(fields[19]) / ticks
        if ppid == 1 and pid not in (os.getpid(), os.getppid()):
            children.append((started, pid))
    if not children or "init" not in pathlib.Path("/proc/1/cmdline").read_bytes().decode(errors="replace"):
        return None
    started, pid = min(children)
    return pid, uptime - started


def check_airflow_job(job_type: str, max_age: float, end_after: float | None = None) -> None:
    import psycopg2

    url = os.environ.get(DB_ENV)
    if not url:
        raise Unhealthy(f"{DB_ENV} is not set")
    # Airflow names a job's host by socket.getfqdn() (core.hostname_callable's default).
    with psycopg2.connect(psycopg2_dsn(url), connect_timeout=10) as conn, conn.cursor() as cursor:
        cursor.execute(HEARTBEAT_SQL, (job_type, socket.getfqdn()))
        (age,) = cursor.fetchone()
    age = None if age is None else float(age)
    main = _main_process() if end_after is not None else None
    if main is not None and should_end(age, main[1], end_after):
        import signal

        os.kill(main[0], signal.SIGKILL)
        raise Unhealthy(f"{job_type} hung (heartbeat {age if age is None else round(age)} s old): "
                        f"killed process {main[0]} so that the container restarts")
    heartbeat_verdict(age, job_type, max_age)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="kind", required=True, metavar="CHECK")
    http = sub.add_parser("http", help="the URL answers 2xx (with --json and --text: and holds what they say)")
    http.add_argument("url", metavar="URL", help="what to request")
    http.add_argument("--json", dest="expect_json", metavar="KEY.PATH=VALUE",
                      help="the answer is JSON with VALUE at KEY.PATH (metadatabase.status=healthy)")
    http.add_argument("--text", dest="expect_text", metavar="TEXT", help="the answer's body contains TEXT")
    job = sub.add_parser("airflow-job", help="Airflow's metadata database holds a running job of JOB_TYPE from "
                                             "this host with a recent heartbeat")
    job.add_argument("job_type", choices=["SchedulerJob", "DagProcessorJob", "TriggererJob"], metavar="JOB_TYPE",
                     help="SchedulerJob, DagProcessorJob or TriggererJob")
    job.add_argument("--max-age", type=float, default=60, metavar="SECONDS",
                     help="the oldest heartbeat that is healthy (default: %(default)s)")
    job.add_argument("--end-after", type=float, default=None, metavar="SECONDS",
                     help="kill the component once its heartbeat is this old (see above)")
    args = parser.parse_args(argv)
    try:
        if args.kind == "http":
            check_http(args.url, args.expect_json, args.expect_text)
        else:
            check_airflow_job(args.job_type, args.max_age, args.end_after)
    except Exception as exc:  # every failure is an unhealthy answer, with its reason in docker inspect
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A long-running Spark Connect server that the jobs of every task can share.

``python -m jobs.runtime.connect_server --help`` lists its options. It runs in the foreground until
stopped (Ctrl-C, SIGTERM). Then give the Airflow workers ``PIPELINE_SPARK_REMOTE=sc://127.0.0.1:<port>``:
each task still spark-submits its job, and the job's session is a Spark Connect session on this server
(:func:`jobs.runtime.session.get_spark`), so no task pays for a new driver and a cold JVM. The server
listens on loopback unless ``--host`` says otherwise (the compose stack's ``spark-connect`` service
listens on its container's network, which only the stack's services reach): a Connect server has no
login, and whoever reaches its port runs code as its user. Its Python workers (scoring's
``predict_batch_udf``) run with this environment's Python, so start it from the same environment as
the workers (``source scripts/env.sh``).
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import time
from pathlib import Path
from typing import IO

from jobs.runtime.session import DRIVER_CONF

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def command(port: int, master: str, host: str = "127.0.0.1", conf: dict[str, str] | None = None) -> list[str]:
    """The spark-submit command line of a server on ``host:port`` with ``master`` and Spark settings ``conf``."""
    return ["spark-submit", "--class", SERVER_CLASS, "--name", "pipeline Spark Connect server", "--master", master,
            "--conf", f"spark.connect.grpc.binding.address={host}",
            "--conf", f"spark.connect.grpc.binding.port={port}",
            "--conf", "spark.ui.showConsoleProgress=false",
            *[arg for key, value in {**DRIVER_CONF, **(conf or {})}.items() for arg in ("--conf", f"{key}={value}")]]


def reachable(host: str) -> str:
    """Where a client on the server's machine reaches a server bound to ``host`` (every interface:
    loopback)."""
    return "127.0.0.1" if host == "0.0.0.0" else host


def wait_ready(port: int, process: subprocess.Popen, timeout: float = 120.0, log: Path | None = None,
               host: str = "127.0.0.1") -> None:
    """Return once the server on ``host`` accepts connections; fail if it exits or ``timeout`` passes."""
    host = reachable(host)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Spark Connect server exited with code {process.returncode}"
                               + (f": see {log}" if log else ""))
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"the Spark Connect server did not listen on port {port} within {timeout:.0f} s")


def start(port: int, master: str = "local[2]", log: Path | None = None,
          env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a server in the background and wait until it listens; its output goes to ``log``."""
    output: IO | int = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 - owned by the process
    process = subprocess.Popen(command(port, master), stdout=output, stderr=subprocess.STDOUT, env=env)
    try:
        wait_ready(port, process, log=log)
    except BaseException:
        stop(process)
        raise
    return process


def stop(process: subprocess.Popen) -> None:
    """Stop a server started by :func:`start`."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--port", type=int, default=15002,
                        help="the port the server listens on (default: %(default)s)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address the server listens on (default: %(default)s, loopback; 0.0.0.0: every "
                             "interface, only where no one else reaches them, as in a container's network)")
    parser.add_argument("--master", default="local[2]",
                        help="the Spark master the server's session runs on (default: %(default)s)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting of the server, as spark-submit's --conf (repeatable), e.g. "
                             "spark.cores.max=2 on a cluster whose cores training needs too")
    args = parser.parse_args(argv)
    conf = {}
    for setting in args.conf:
        key, sep, value = setting.partition("=")
        if not sep or not key.startswith("spark."):
            parser.error(f"--conf {setting!r}: give a Spark setting as spark.KEY=VALUE")
        conf[key] = value
    process = subprocess.Popen(command(args.port, args.master, args.host, conf))
    try:
        wait_ready(args.port, process, host=args.host)
        print(f"Spark Connect server ready: export PIPELINE_SPARK_REMOTE=sc://{reachable(args.host)}:{args.port}",
              flush=True)
        process.wait()
    finally:
        stop(process)


if __name__ == "__main__":
    main()

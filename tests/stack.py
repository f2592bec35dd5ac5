"""The deployed stack on one machine, each part a real process on loopback: PostgreSQL (the
backend of Airflow and MLflow), an MLflow tracking server, a Spark standalone master and worker,
and Airflow's API server, scheduler, DAG processor and triggerer (LocalExecutor).

Each part has a context manager that starts it under a given home folder, waits until it answers,
and stops it, whatever happens, on exit: :func:`running_postgres`, :func:`running_mlflow`,
:func:`running_spark_cluster` and (in ``tests/airflow_server.py``) ``running_airflow``.
:func:`running_stack` starts them all, wired as ``docker-compose.yml`` wires its services.

The tests use it with free ports and throw-away folders; ``make airflow`` (``scripts/stack.sh``)
runs this module's :func:`main`, which starts the same stack on fixed ports, sized for the
machine, with its database kept under ``$PIPELINE_HOME``.

Not a test module: the tests that need the stack import it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.runtime.session import REMOTE_ENV
from tests import jit
from tests.airflow_server import AirflowServer, _free_port, _kill_tree, _stop, _tail, descendants, running_airflow

LOOPBACK = "127.0.0.1"
# Debian installs each PostgreSQL major version's server programs here (not on PATH).
POSTGRES_ROOT = Path("/usr/lib/postgresql")
# The server refuses to run as root; Debian's package creates this user.
POSTGRES_USER = "postgres"


class StackError(RuntimeError):
    """A part of the stack did not start or did not answer."""


def wait_until(check: Callable[[], Any], what: str, timeout: float, *, alive: Callable[[], None] | None = None,
               log: Path | None = None) -> Any:
    """Call ``check`` every second until it returns something truthy (connection errors count as
    not yet); ``alive`` raises when the process being waited for has died."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        if alive is not None:
            alive()
        try:
            result = check()
            if result:
                return result
        except (OSError, ValueError) as exc:  # refused, reset, timed out, not JSON yet
            last = exc
        if time.monotonic() > deadline:
            tail = f"\n--- {log} ---\n{_tail(log)}" if log else ""
            raise StackError(f"{what} did not answer within {timeout:.0f} s (last error: {last}){tail}")
        time.sleep(1)


def _get(url: str, timeout: float = 5) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def _exited(name: str, process: subprocess.Popen, log: Path) -> Callable[[], None]:
    def check() -> None:
        if process.poll() is not None:
            raise StackError(f"{name} exited with code {process.returncode}\n--- {log} ---\n{_tail(log, 60)}")

    return check


def _running_as_root() -> bool:
    return os.geteuid() == 0


# --- PostgreSQL -------------------------------------------------------------------------------


def postgres_bin() -> Path:
    """The newest installed PostgreSQL's server programs (initdb, postgres)."""
    versions = [p.parent for p in POSTGRES_ROOT.glob("*/bin/postgres") if p.parent.parent.name.isdigit()]
    if not versions:
        raise StackError(f"no PostgreSQL server under {POSTGRES_ROOT}: run scripts/system_packages.sh")
    return max(versions, key=lambda b: int(b.parent.name))


@dataclass
class Postgres:
    """A running PostgreSQL cluster on loopback; :meth:`create_database` gives each service its own."""

    port: int
    folder: Path
    log: Path
    process: subprocess.Popen | None = field(repr=False)
    superuser_password: str = field(default="", repr=False)
    command: list[str] = field(default_factory=list, repr=False)
    user: dict[str, str] = field(default_factory=dict, repr=False)  # run as (root runs it as postgres)
    timeout: float = 60

    def start(self) -> Postgres:
        """Start the server (again: same port and data folder), its output appended to its log."""
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.command, cwd=self.folder, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True, **self.user)
        return self

    def ready(self) -> Postgres:
        """Wait until the server accepts logins (after a crash: once its recovery has replayed the WAL)."""
        def accepts_logins() -> bool:
            import psycopg2

            try:
                self.connect().close()
            except psycopg2.OperationalError as exc:  # "the database system is starting up", refused
                raise OSError(str(exc)) from exc
            return True

        wait_until(accepts_logins, f"PostgreSQL on port {self.port}", self.timeout,
                   alive=_exited("postgres", self.process, self.log), log=self.log)
        return self

    def stop_immediately(self) -> str:
        """``pg_ctl stop -m immediate``: every server process quits at once, open transactions and
        unwritten pages lost, as a crash would; the next start recovers from the WAL. What pg_ctl
        said."""
        done = subprocess.run([str(postgres_bin() / "pg_ctl"), "stop", "--pgdata", str(self.folder / "data"),
                               "--mode", "immediate", "--wait"], capture_output=True, text=True, timeout=60,
                              cwd=self.folder, **self.user)
        if done.returncode != 0:
            raise StackError(f"pg_ctl stop failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
        self.process.wait(timeout=30)
        return done.stdout.strip()

    def connect(self, dbname: str = "postgres") -> Any:
        """A psycopg2 connection as the superuser, in autocommit mode (CREATE DATABASE needs it)."""
        import psycopg2

        conn = psycopg2.connect(host=LOOPBACK, port=self.port, user="postgres", password=self.superuser_password,
                                dbname=dbname, connect_timeout=5)
        conn.autocommit = True
        return conn

    def create_database(self, name: str) -> str:
        """Make role ``name`` (a new password each time) and database ``name`` owned by it, unless they
        exist; return its SQLAlchemy URL (the psycopg2 driver, which Airflow and MLflow both use)."""
        from psycopg2 import sql

        password = secrets.token_urlsafe(24)  # URL-safe: it goes into the URL as it is
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,))
                if cur.fetchone() is None:
                    cur.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
                cur.execute(sql.SQL("ALTER ROLE {} PASSWORD %s").format(sql.Identifier(name)), (password,))
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone() is None:
                    cur.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name),
                                                                              sql.Identifier(name)))
        finally:
            conn.close()
        return f"postgresql+psycopg2://{name}:{password}@{LOOPBACK}:{self.port}/{name}"


@contextlib.contextmanager
def running_postgres(home: Path, *, port: int | None = None, keep: bool = False,
                     timeout: float = 60) -> Iterator[Postgres]:
    """Start a PostgreSQL cluster listening on loopback only; stop it on exit.

    ``keep=False`` (tests): a new cluster in a throw-away folder, removed on exit, without flushes
    to the disk (``fsync``): it survives its own crash (:meth:`Postgres.stop_immediately`), not the
    machine's, which a test does not need. ``keep=True`` (``make airflow``): the cluster in
    ``home/postgres``, made on the first start and used again by the next.

    As root the server runs as the ``postgres`` user, which cannot enter a test's private temporary
    folders: a throw-away cluster then lives in the system's temporary folder instead of ``home``.
    Logins need a password (scram-sha-256); the superuser's is kept in the cluster's folder.
    """
    bindir = postgres_bin()
    as_root = _running_as_root()
    if keep:
        folder = Path(home) / "postgres"
        folder.mkdir(parents=True, exist_ok=True)
    else:
        folder = Path(tempfile.mkdtemp(prefix="postgres-", dir=None if as_root else home))
    user: dict[str, Any] = {"user": POSTGRES_USER, "group": POSTGRES_USER} if as_root else {}
    if as_root:
        shutil.chown(folder, POSTGRES_USER, POSTGRES_USER)
    data, log, password_file = folder / "data", folder / "postgres.log", folder / "superuser.password"
    server: Postgres | None = None
    try:
        if not (data / "PG_VERSION").exists():
            password_file.write_text(secrets.token_urlsafe(24))
            password_file.chmod(0o600)
            if as_root:
                shutil.chown(password_file, POSTGRES_USER, POSTGRES_USER)
            init = subprocess.run(
                [str(bindir / "initdb"), "--pgdata", str(data), "--username", "postgres", "--pwfile",
                 str(password_file), "--auth", "scram-sha-256", "--encoding", "UTF8", "--locale", "C.UTF-8",
                 *([] if keep else ["--no-sync"])],
                cwd=folder, capture_output=True, text=True, timeout=120, **user,
            )
            if init.returncode != 0:
                raise StackError(f"initdb failed ({init.returncode}):\n{init.stdout}\n{init.stderr}")
        port = port or _free_port()
        settings = {"listen_addresses": LOOPBACK, "port": str(port), "unix_socket_directories": str(folder)}
        if not keep:
            # no flush to the disk (a test need not survive the machine's crash), but each commit
            # still reaches the WAL before it returns: a crash of the server loses nothing committed
            settings.update(fsync="off", full_page_writes="off")
        if as_root:
            log.touch()
            shutil.chown(log, POSTGRES_USER, POSTGRES_USER)
        options = [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]
        server = Postgres(port=port, folder=folder, log=log, process=None,
                          superuser_password=password_file.read_text().strip(),
                          command=[str(bindir / "postgres"), "-D", str(data), *options], user=user, timeout=timeout)
        server.start().ready()
        yield server
    finally:
        process = server.process if server else None  # the one running now, if it was started again
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # "fast" shutdown: roll back open transactions, then exit
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


# --- MLflow -----------------------------------------------------------------------------------


@dataclass
class MlflowServer:
    """A running MLflow tracking server: its REST API and UI at ``url``."""

    url: str
    log: Path
    process: subprocess.Popen = field(repr=False)
    timeout: float = 180
    command: list[str] = field(default_factory=list, repr=False)
    environment: dict[str, str] = field(default_factory=dict, repr=False)
    cwd: Path | None = field(default=None, repr=False)

    def health(self) -> str:
        """What ``/health`` answers: ``OK`` once the server is up."""
        return _get(f"{self.url}/health").decode().strip()

    def ready(self) -> MlflowServer:
        """Wait until ``/health`` answers OK (a new store is migrated first)."""
        wait_until(lambda: self.health() == "OK", f"the MLflow server at {self.url}", self.timeout,
                   alive=_exited("mlflow server", self.process, self.log), log=self.log)
        return self

    def start(self) -> MlflowServer:
        """Start the server (again: same port, store and artifacts), its output appended to its log."""
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.command, env=self.environment, cwd=self.cwd, stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        return self

    def kill(self) -> list[str]:
        """SIGKILL the server and its workers, as the loss of its machine would; the command lines
        killed, all gone when this returns."""
        killed = _kill_tree(self.process, "the MLflow server")
        self.process.wait(timeout=10)
        return killed


@contextlib.contextmanager
def running_mlflow(home: Path, backend_uri: str, *, artifacts: Path | None = None, port: int | None = None,
                   workers: int = 1, env: dict[str, str] | None = None, timeout: float = 180,
                   wait: bool = True) -> Iterator[MlflowServer]:
    """Start ``mlflow server`` on loopback with its store at ``backend_uri`` and artifact serving on
    (``artifacts``, default ``home/mlartifacts``); wait for ``/health`` (unless ``wait`` is false:
    then call ``ready()``); stop it on exit (the one running then, if it was started again).

    On 127.0.0.1 MLflow 3's security middleware needs no option: its default allowed hosts
    (localhost and private addresses, any port) and CORS origins (localhost) cover a local browser.
    The store's URL goes in ``MLFLOW_BACKEND_STORE_URI``, not on the command line that any process
    list shows. The server migrates a new database itself.
    """
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    port = port or _free_port()
    artifacts = artifacts or home / "mlartifacts"
    proc_env = {
        **os.environ,
        **(env or {}),
        "MLFLOW_BACKEND_STORE_URI": backend_uri,
        # The server's job runner (GenAI scorers, trace roll-ups) is 7 processes and ~1.7 GiB that
        # this pipeline never uses.
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    }
    command = ["mlflow", "server", "--host", LOOPBACK, "--port", str(port), "--workers", str(workers),
               "--serve-artifacts", "--artifacts-destination", str(artifacts)]
    server = MlflowServer(url=f"http://{LOOPBACK}:{port}", log=home / "mlflow-server.log", process=None,
                          timeout=timeout, command=command, environment=proc_env, cwd=home).start()
    try:
        yield server.ready() if wait else server
    finally:
        _stop([server.process], grace=5)  # nothing to save: every write went to the database already


# --- Spark ------------------------------------------------------------------------------------


@dataclass
class SparkCluster:
    """A running standalone master (``url``, its UI at ``ui_url``) and one worker."""

    url: str
    ui_url: str
    env: dict[str, str]
    log: Path
    processes: list[subprocess.Popen] = field(repr=False)
    worker_args: list[str] = field(repr=False, default_factory=list)
    timeout: float = 90

    def status(self) -> dict[str, Any]:
        """The master's own view (its UI's ``/json/``): workers with their state, cores, memory."""
        return json.loads(_get(f"{self.ui_url}/json/"))

    def _start(self, *args: str) -> subprocess.Popen:
        with self.log.open("ab") as out:
            process = subprocess.Popen([str(Path(self.env["SPARK_HOME"]) / "bin" / "spark-class"), *args],
                                       env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        self.processes.append(process)
        return process

    def ready(self) -> SparkCluster:
        """Wait for the master, start the worker, wait until the master counts it alive."""
        if len(self.processes) == 1:
            master = self.processes[0]
            port = int(self.url.rsplit(":", 1)[1])
            wait_until(lambda: socket.create_connection((LOOPBACK, port), timeout=1).close() is None,
                       "the Spark master", self.timeout, alive=_exited("the Spark master", master, self.log),
                       log=self.log)
            self._start(*self.worker_args)
        wait_until(lambda: self.status().get("aliveworkers", 0) >= 1, "the Spark worker", self.timeout,
                   alive=_exited("the Spark worker", self.processes[1], self.log), log=self.log)
        return self

    def kill_worker(self) -> list[str]:
        """SIGKILL the worker and everything under it (its executors, their Python workers and
        whatever those started), as when the worker's machine dies; the command lines killed."""
        return _kill_tree(self.processes[1], "the Spark worker")

    def restart_worker(self) -> SparkCluster:
        """Start the worker again (after :meth:`kill_worker`) and wait until the master counts the
        new one alive."""
        gone = {worker["id"] for worker in self.status().get("workers", [])}
        self._start(*self.worker_args)
        self.processes[1] = self.processes.pop()  # the new worker in the dead one's place
        wait_until(lambda: any(w["id"] not in gone and w["state"] == "ALIVE" for w in self.status()["workers"]),
                   "the restarted Spark worker", self.timeout,
                   alive=_exited("the Spark worker", self.processes[1], self.log), log=self.log)
        return self


def spark_cluster_env(work: Path) -> dict[str, str]:
    """The environment of the master and worker: pyspark's folder as SPARK_HOME, this Python on the
    executors, and SPARK_LOCAL_IP, which binds their ports and web UIs to loopback."""
    import pyspark

    return {
        **os.environ,
        "SPARK_HOME": str(Path(pyspark.__file__).parent),
        "SPARK_LOCAL_IP": LOOPBACK,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_WORKER_DIR": str(work / "worker"),
        "SPARK_LOG_DIR": str(work / "logs"),
    }


@contextlib.contextmanager
def running_spark_cluster(work: Path, worker_opts: str = "", *, cores: int = 2, memory: str = "3g",
                          port: int | None = None, ui_port: int | None = None, timeout: float = 90,
                          wait: bool = True) -> Iterator[SparkCluster]:
    """A standalone master and one worker of ``cores`` and ``memory`` on 127.0.0.1, started with
    pyspark's own ``spark-class`` (pyspark ships no start scripts) as docker-compose does;
    ``worker_opts`` is the worker's SPARK_WORKER_OPTS (e.g. the GPUs it advertises). With ``wait``
    false it yields once the master is launched: ``ready()`` then starts the worker and waits."""
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    port, ui_port = port or _free_port(), ui_port or _free_port()
    url = f"spark://{LOOPBACK}:{port}"
    worker_args = ["org.apache.spark.deploy.worker.Worker", url, "--cores", str(cores), "--memory", memory,
                   "--webui-port", str(_free_port()), "--work-dir", str(work / "worker")]
    cluster = SparkCluster(url=url, ui_url=f"http://{LOOPBACK}:{ui_port}",
                           env={**spark_cluster_env(work), "SPARK_WORKER_OPTS": worker_opts}, log=work / "cluster.log",
                           processes=[], worker_args=worker_args, timeout=timeout)
    try:
        cluster._start("org.apache.spark.deploy.master.Master", "--host", LOOPBACK, "--port", str(port),
                       "--webui-port", str(ui_port))
        yield cluster.ready() if wait else cluster
    finally:
        _stop(cluster.processes, grace=30)


@dataclass
class ConnectServer:
    """A shared Spark Connect server (``url``: ``sc://127.0.0.1:port``) and its log."""

    url: str
    port: int
    log: Path
    process: subprocess.Popen = field(repr=False)

    def ready(self, timeout: float = 120) -> ConnectServer:
        from jobs.runtime.connect_server import wait_ready

        wait_ready(self.port, self.process, timeout=timeout, log=self.log)
        return self


@contextlib.contextmanager
def running_connect_server(work: Path, env: dict[str, str], *, master: str = "local[2]",
                           port: int | None = None) -> Iterator[ConnectServer]:
    """A Spark Connect server as ``python -m jobs.runtime.connect_server`` runs one, launched (not yet
    ready: call ``ready()``) with the tasks' environment ``env``, which its Python workers (scoring's
    model) need: the MLflow server's address above all."""
    from jobs.runtime.connect_server import command

    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    port = port or _free_port()
    log = work / "connect-server.log"
    environment = {**spark_cluster_env(work), **env}
    argv = command(port, master)
    argv[0] = str(Path(environment["SPARK_HOME"]) / "bin" / argv[0])  # pyspark's own, whatever PATH holds
    argv[1:1] = jit.long_lived_args()  # it serves every nightly job of the run: every JIT tier
    with log.open("ab") as out:
        process = subprocess.Popen(argv, env=environment, stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield ConnectServer(url=f"sc://{LOOPBACK}:{port}", port=port, log=log, process=process)
    finally:
        _stop([process], grace=30)


# --- the whole stack --------------------------------------------------------------------------


@dataclass
class Stack:
    """The running stack: every part, and the environment its Airflow tasks get."""

    postgres: Postgres
    mlflow: MlflowServer
    spark: SparkCluster | None
    airflow: AirflowServer
    task_env: dict[str, str]
    database_urls: dict[str, str] = field(default_factory=dict, repr=False)  # database name -> SQLAlchemy URL
    connect: ConnectServer | None = None

    def secrets(self) -> dict[str, str]:
        """What must never appear in a task log, an XCom, an MLflow param or tag, a report or a page:
        the PostgreSQL passwords (the superuser's, each database role's), Airflow's JWT secret and
        API secret key, the ``admin`` password; name -> value."""
        import urllib.parse

        found = {"PostgreSQL superuser password": self.postgres.superuser_password, **self.airflow.secrets}
        for name, url in self.database_urls.items():
            found[f"password of database {name}"] = urllib.parse.urlsplit(url).password or ""
            found[f"connection string of database {name}"] = url
        passwords = self.airflow.home / "simple_auth_manager_passwords.json.generated"
        found["Airflow admin password"] = json.loads(passwords.read_text())["admin"]
        return {name: value for name, value in found.items() if value}

    def processes(self) -> list[Any]:
        """Every process of the stack now (psutil), children included: to check that none outlives it."""
        roots = [self.postgres.process, self.mlflow.process, *self.airflow.processes.values()]
        roots += self.spark.processes if self.spark else []
        roots += [self.connect.process] if self.connect else []
        return descendants(roots)


@contextlib.contextmanager
def running_stack(
    home: Path,
    env: dict[str, str] | None = None,
    *,
    spark: bool = True,
    keep: bool = False,
    airflow_port: int | None = None,
    mlflow_port: int | None = None,
    spark_port: int | None = None,
    spark_ui_port: int | None = None,
    spark_cores: int = 2,
    spark_memory: str = "3g",
    api_workers: int = 1,
    airflow_settings: dict[str, str] | None = None,
    connect: bool = False,
) -> Iterator[Stack]:
    """Start PostgreSQL, the MLflow server (its store: database ``mlflow``), the Spark cluster (when
    ``spark``) and Airflow on database ``airflow`` with its four processes; stop all on exit.

    Airflow's tasks get ``env`` and the stack's addresses: ``MLFLOW_TRACKING_URI`` and
    ``MLFLOW_UI_URL`` are the MLflow server, and the ``spark_default`` connection is the standalone
    master when there is one (``env``'s own connection otherwise). With ``connect``, a shared Spark
    Connect server (:mod:`jobs.runtime.connect_server`, ``local[2]``) runs beside them and the tasks get
    ``PIPELINE_SPARK_REMOTE``: the nightly jobs (validate, features, score, monitor) run their
    sessions there, training keeps its own driver on the cluster. Folders go under ``home``
    (Airflow's ``home/airflow``); ``keep`` keeps the database for the next start.
    """
    home = Path(home)
    with contextlib.ExitStack() as parts:
        postgres = parts.enter_context(running_postgres(home, keep=keep))
        mlflow_db, airflow_db = postgres.create_database("mlflow"), postgres.create_database("airflow")
        task_env = dict(env or {})
        # MLflow and Spark start while Airflow migrates and starts (their addresses are known at
        # once); the stack is up when all have answered.
        mlflow = parts.enter_context(
            running_mlflow(home / "mlflow", mlflow_db, port=mlflow_port, wait=False,
                           artifacts=Path(task_env.get("PIPELINE_MLFLOW_ARTIFACTS") or home / "mlartifacts"))
        )
        task_env.update(MLFLOW_TRACKING_URI=mlflow.url, MLFLOW_UI_URL=mlflow.url)
        cluster = None
        if spark:
            cluster = parts.enter_context(
                running_spark_cluster(home / "spark", cores=spark_cores, memory=spark_memory, port=spark_port,
                                      ui_port=spark_ui_port, wait=False)
            )
            task_env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": cluster.url})
        server = parts.enter_context(running_connect_server(home / "connect", task_env)) if connect else None
        if server:
            task_env[REMOTE_ENV] = server.url
        airflow = parts.enter_context(
            running_airflow(home, task_env, settings=airflow_settings, database_url=airflow_db, triggerer=True,
                            port=airflow_port, api_workers=api_workers, restart=True)
        )
        mlflow.ready()
        if cluster:
            cluster.ready()
        if server:
            server.ready()
        yield Stack(postgres=postgres, mlflow=mlflow, spark=cluster, airflow=airflow, task_env=task_env,
                    database_urls={"mlflow": mlflow_db, "airflow": airflow_db}, connect=server)


# --- make airflow -----------------------------------------------------------------------------


def machine_sizing() -> dict[str, Any]:
    """What the user's stack may take of this machine: API workers, task slots, the Spark worker."""
    import psutil

    cores = os.cpu_count() or 2
    memory_gib = psutil.virtual_memory().total / 2**30
    return {
        "api_workers": 1 if cores <= 4 else 2,
        "parallelism": max(2, cores),
        "spark_cores": cores,
        # Half the memory for the executors, the rest for the drivers, Airflow, PostgreSQL and MLflow.
        "spark_memory": f"{max(1, int(memory_gib / 2))}g",
    }


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """``make airflow``: the stack on fixed ports until Ctrl-C, its database kept in $PIPELINE_HOME."""
    parser = argparse.ArgumentParser(prog="scripts/stack.sh", description=main.__doc__)
    parser.add_argument("--airflow-port", type=int, default=8080)
    parser.add_argument("--mlflow-port", type=int, default=5000)
    parser.add_argument("--spark", action="store_true",
                        help="also start a Spark standalone master (port 7077, UI 8081) and worker, and submit "
                             "the tasks' jobs there instead of local[2]")
    parser.add_argument("--connect", action="store_true",
                        help="also start a shared Spark Connect server (local[2]) for the nightly jobs' sessions "
                             "(PIPELINE_SPARK_REMOTE); training keeps a driver of its own")
    args = parser.parse_args(argv)
    home = Path(os.environ["PIPELINE_HOME"])  # scripts/env.sh sets it
    sizing = machine_sizing()
    settings = {
        # A person's stack: the DAGs' own schedules run, and edited DAG files are parsed again.
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "True",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
        "AIRFLOW__CORE__PARALLELISM": str(sizing["parallelism"]),
    }
    # Ctrl-C and SIGTERM stop the stack (SIGINT too when started in the background, where the shell
    # has it ignored); the servers run in sessions of their own and get neither.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    logs = ["airflow/*.out", "mlflow/mlflow-server.log", "postgres/postgres.log", *(["spark/cluster.log"] * args.spark),
            *(["connect/connect-server.log"] * args.connect)]
    print(f"==> starting PostgreSQL, MLflow, {'Spark, ' if args.spark else ''}"
          f"{'Spark Connect, ' if args.connect else ''}Airflow under {home} "
          f"(logs: {', '.join(logs)})", flush=True)
    try:
        with running_stack(home, dict(os.environ), spark=args.spark, keep=True, airflow_port=args.airflow_port,
                           mlflow_port=args.mlflow_port, spark_port=7077, spark_ui_port=8081,
                           spark_cores=sizing["spark_cores"], spark_memory=sizing["spark_memory"],
                           api_workers=sizing["api_workers"], airflow_settings=settings,
                           connect=args.connect) as stack:
            lines = [
                f"Airflow UI    {stack.airflow.url}  (user admin, password in "
                f"{stack.airflow.home / 'simple_auth_manager_passwords.json.generated'})",
                f"MLflow UI     {stack.mlflow.url}",
            ]
            if stack.spark:
                lines.append(f"Spark master  {stack.spark.url}, its UI {stack.spark.ui_url}")
            if stack.connect:
                lines.append(f"Spark Connect {stack.connect.url} (the nightly jobs' sessions)")
            print("==> ready\n" + "\n".join(f"  {line}" for line in lines) + "\nCtrl-C stops everything.",
                  flush=True)
            try:
                while True:
                    stack.airflow.check_alive()
                    for name, process in [("mlflow server", stack.mlflow.process),
                                          ("postgres", stack.postgres.process)]:
                        if process.poll() is not None:
                            raise StackError(f"{name} exited with code {process.returncode}")
                    time.sleep(5)
            except KeyboardInterrupt:
                pass
            finally:
                # A second Ctrl-C must not cut the stopping short and leave servers behind.
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                print("\n==> stopping", flush=True)
    except KeyboardInterrupt:  # while starting: what had started is stopped already
        pass
    print("==> stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A running Airflow for tests: the scheduler, the DAG processor and the API server (and, if asked,
the triggerer) as real processes.

:func:`running_airflow` migrates the metadata DB (a fresh SQLite file under a throw-away
``AIRFLOW_HOME``, or the PostgreSQL database it is given), starts ``airflow scheduler``
(LocalExecutor), ``airflow dag-processor``, ``airflow api-server`` and optionally ``airflow
triggerer`` as subprocesses, waits until ``/api/v2/monitor/health`` reports them healthy, logs in as the
simple auth manager's ``admin`` (``POST /auth/token`` with the password the API server generates)
and yields an :class:`AirflowServer` with the few REST calls tests need. On exit every process it
started is stopped, task processes and their ``spark-submit`` JVMs included: the task supervisor
puts each task in a process group of its own, so signalling the servers' groups is not enough.

Not a test module: the tests that need a live Airflow import it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The scheduler's and the triggerer's log servers are left off: each would listen on every interface
# at a fixed port (8793, 8794), and the API server reads the task logs of this machine from its files.
COMPONENTS = {
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "api-server": ["api-server", "--host", "127.0.0.1"],
}
# Optional: the pipeline's operators do not defer; the deployed stack runs it all the same.
TRIGGERER = {"triggerer": ["triggerer", "--skip-serve-logs"]}
TERMINAL_RUN_STATES = {"success", "failed"}
# A task in one of these states has failed at least once: report it now rather than after the retry delay.
FAILED_TASK_STATES = {"failed", "up_for_retry", "upstream_failed"}

# Settings of the test server only: light on a 2-core machine, quick to react, and no runs but
# the ones a test asks for (with the cron schedule on, unpausing a @daily DAG would start a run
# for yesterday, a day the example lake has no data for).
SERVER_SETTINGS = {
    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__PARALLELISM": "4",
    "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
    "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
    # The DAG files do not change during a test: parse them once at start, not every 30 s.
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
    "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
}


RESTART_DELAY = 5  # seconds between two restarts of one component under the restart policy
MAX_RESTARTS = 10  # more restarts of one component than this within RESTART_WINDOW: a crash loop, reported
RESTART_WINDOW = 600


class AirflowError(RuntimeError):
    """The test server did not start, or a call or run did not go as expected."""


# Listening ports come from below the kernel's ephemeral range (``ip_local_port_range``, 32768-60999
# by default): a port taken from that range can be given, between the check and the server's bind
# (an ``airflow db migrate`` later), to any outgoing connection as its source port, and the server
# then fails with "address already in use" (seen in CI). Each xdist worker draws from a band of
# its own, so two workers never race for one port either.
PORT_LOW, PORT_BAND = 20000, 1500
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on, outside the ephemeral range, not handed out
    before by this process."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    start = PORT_LOW + (int(worker) if worker.isdigit() else 0) % 8 * PORT_BAND
    below = _ephemeral_low()
    candidates = [port for port in range(start, start + PORT_BAND) if port < below and port not in _handed_out]
    random.shuffle(candidates)
    for port in candidates:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as sock:  # a band used up (or a narrowed range): the kernel's choice
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tail(path: Path, lines: int = 40) -> str:
    if not path.exists():
        return f"({path} does not exist)"
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


@dataclass
class AirflowServer:
    """A live Airflow: its REST API at ``url`` (as ``admin``) and its processes' logs."""

    url: str
    home: Path
    logs: dict[str, Path]
    processes: dict[str, subprocess.Popen] = field(repr=False)
    token: str = field(default="", repr=False)
    secrets: dict[str, str] = field(default_factory=dict, repr=False)  # what must never show: name -> value
    commands: dict[str, list[str]] = field(default_factory=dict, repr=False)  # name -> its command line
    environment: dict[str, str] = field(default_factory=dict, repr=False)  # what every process gets
    # Restart policy (docker-compose.yml's ``restart: unless-stopped``): :meth:`check_alive` starts
    # a component that exited again, unless it was killed on purpose (:meth:`kill`); each restart
    # is recorded here as (component, exit code, when).
    restart: bool = False
    restarts: list[tuple[str, int, float]] = field(default_factory=list)
    _held: set[str] = field(default_factory=set, repr=False)  # killed on purpose: down until start()

    # --- plumbing -------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, query: dict[str, Any] | None = None) -> Any:
        """Call the API and return the decoded JSON; an HTTP error raises :class:`AirflowError` with the body."""
        url = f"{self.url}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as exc:
            raise AirflowError(f"{method} {path}: HTTP {exc.code}: {exc.read().decode(errors='replace')}") from exc
        return json.loads(payload) if payload else None

    def log_tails(self, lines: int = 30) -> str:
        """The last lines of every component's log, for error messages."""
        return "\n".join(
            f"--- {name} ({self.logs[name]}) ---\n{_tail(self.logs[name], lines)}" for name in self.processes
        )

    def start(self, name: str) -> None:
        """Start component ``name`` (a key of ``commands``), its output appended to its log."""
        self._held.discard(name)
        with self.logs[name].open("ab") as out:
            self.processes[name] = subprocess.Popen(
                self.commands[name], env=self.environment, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )

    def kill(self, name: str) -> list[str]:
        """SIGKILL component ``name`` and every process under it (for the scheduler: its executor's
        workers, the task processes they supervise and the JVMs those started), as the loss of the
        machine it runs on would; the command lines killed, all gone when this returns. Down until
        :meth:`start`: the restart policy leaves a component killed on purpose alone."""
        self._held.add(name)
        killed = _kill_tree(self.processes[name], f"airflow {name}")
        self.processes[name].wait(timeout=10)
        return killed

    def kill_task(self, ti_id: str) -> list[str]:
        """SIGKILL the executor's worker that supervises task instance ``ti_id`` (its REST ``id``) and
        every process under it (the task's own process, the JVM it started), as the loss of that
        worker would: nothing reports the try's end, the scheduler stays; the command lines killed."""
        title = f"LocalExecutor: {ti_id}"  # the worker's process title while it supervises the task
        workers = self.running(title)
        if len(workers) != 1:
            raise AirflowError(f"no single executor worker runs task instance {ti_id}: {workers}")
        return _kill_tree(workers[0], f"the worker of task instance {ti_id}")

    def running(self, text: str) -> list[Any]:
        """The processes under the scheduler (with the LocalExecutor: the executor's workers, the
        tasks' processes, the JVMs they started) whose command line holds ``text`` (psutil)."""
        import psutil

        found = []
        for proc in descendants([self.processes["scheduler"]]):
            with contextlib.suppress(psutil.Error):
                if text in " ".join(proc.cmdline()):
                    found.append(proc)
        return found

    def wait_for_command(self, text: str, timeout: float = 120, poll: float = 0.5) -> None:
        """Wait until a process under the scheduler runs a command line holding ``text``
        (:meth:`running`); a fixed sleep is too short under load."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            if self.running(text):
                return
            if time.monotonic() > deadline:
                raise AirflowError(f"no process under the scheduler ran {text!r} within {timeout:.0f} s")
            time.sleep(poll)

    def event_logs(self, dag_id: str, event: str) -> list[dict[str, Any]]:
        """Airflow's audit log entries ``event`` of ``dag_id`` (what Browse > Audit Log shows)."""
        return self.request("GET", "/api/v2/eventLogs", query={"dag_id": dag_id, "event": event})["event_logs"]

    def check_alive(self) -> None:
        """Raise if a component has exited; under the restart policy, start it again instead (not
        sooner than RESTART_DELAY after its last restart, and at most MAX_RESTARTS times within
        RESTART_WINDOW: a crash loop raises), saying so in its log."""
        for name, proc in self.processes.items():
            if proc.poll() is None or name in self._held:
                continue
            mine = [when for component, _, when in self.restarts if component == name]
            recent = [when for when in mine if time.time() - when < RESTART_WINDOW]
            if self.restart and len(recent) < MAX_RESTARTS:
                if mine and time.time() - mine[-1] < RESTART_DELAY:
                    continue  # down a little longer, as compose's back-off keeps it
                self.restarts.append((name, proc.returncode, time.time()))
                with self.logs[name].open("a") as out:
                    out.write(f"==> airflow {name} exited with code {proc.returncode}: started again "
                              "(restart policy)\n")
                self.start(name)
                continue
            raise AirflowError(f"airflow {name} exited with code {proc.returncode}\n{_tail(self.logs[name], 60)}")

    def health(self) -> dict[str, Any]:
        return self.request("GET", "/api/v2/monitor/health")

    def login(self, username: str = "admin") -> None:
        """Get a JWT for ``username`` with the password the API server generated for it."""
        passwords = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())
        self.token = ""
        reply = self.request("POST", "/auth/token", {"username": username, "password": passwords[username]})
        self.token = reply["access_token"]

    # --- DAGs, backfills, runs ------------------------------------------------------------------

    def wait_for_dag(self, dag_id: str, timeout: float = 120) -> dict[str, Any]:
        """Wait until the DAG processor has parsed ``dag_id``; import errors end the wait early."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            try:
                return self.request("GET", f"/api/v2/dags/{dag_id}")
            except AirflowError as exc:
                if "HTTP 404" not in str(exc):
                    raise
            errors = self.request("GET", "/api/v2/importErrors").get("import_errors", [])
            if errors:
                details = "\n".join(f"{e['filename']}:\n{e['stack_trace']}" for e in errors)
                raise AirflowError(f"DAG {dag_id!r} not parsed; import errors:\n{details}")
            if time.monotonic() > deadline:
                raise AirflowError(f"DAG {dag_id!r} not parsed after {timeout:.0f} s\n{self.log_tails()}")
            time.sleep(2)

    def unpause(self, dag_id: str) -> None:
        self._set_paused(dag_id, False)

    def pause(self, dag_id: str) -> None:
        """Pause ``dag_id``: the scheduler starts none of its runs (a triggered one stays queued)."""
        self._set_paused(dag_id, True)

    def _set_paused(self, dag_id: str, paused: bool) -> None:
        reply = self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": paused})
        if reply["is_paused"] is not paused:
            raise AirflowError(f"DAG {dag_id!r} is {'not ' if paused else ''}paused: {reply}")

    def backfill(
        self,
        dag_id: str,
        first: dt.date,
        last: dt.date,
        *,
        max_active_runs: int = 10,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Create a backfill of the runs whose logical dates lie in [first, last] (both ends included).

        ``dry_run`` only lists the logical dates the backfill would create runs for.
        """
        body = {
            "dag_id": dag_id,
            "from_date": f"{first.isoformat()}T00:00:00Z",
            "to_date": f"{last.isoformat()}T00:00:00Z",
            "max_active_runs": max_active_runs,
            "reprocess_behavior": "none",
        }
        return self.request("POST", "/api/v2/backfills/dry_run" if dry_run else "/api/v2/backfills", body)

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> dict[str, Any]:
        """Trigger a run of ``dag_id`` with ``conf`` as the UI's trigger form does (no logical date)."""
        return self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})

    def _every(self, path: str, key: str, query: dict[str, Any]) -> list[dict[str, Any]]:
        """Every entry of a listing, page by page (the API answers 100 at most per call)."""
        found: list[dict[str, Any]] = []
        while True:
            reply = self.request("GET", path, query={**query, "limit": 100, "offset": len(found)})
            found += reply[key]
            if not reply[key] or len(found) >= reply["total_entries"]:
                return found

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        """Every run of ``dag_id``, oldest logical date first."""
        return self._every(f"/api/v2/dags/{dag_id}/dagRuns", "dag_runs", {"order_by": "logical_date"})

    def asset_events(self) -> list[dict[str, Any]]:
        """Every Asset event, oldest first, each with the runs it created (``created_dagruns``)."""
        return self._every("/api/v2/assets/events", "asset_events", {"order_by": "timestamp"})

    def triggering_events(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """The Asset events a run of ``dag_id`` consumed (none for a run not started by an Asset)."""
        path = f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}/upstreamAssetEvents"
        return self.request("GET", path)["asset_events"]

    def queued_events(self, dag_id: str) -> list[dict[str, Any]]:
        """The Asset events queued for ``dag_id`` that no run of it has taken yet (a paused DAG's)."""
        return self.request("GET", f"/api/v2/dags/{dag_id}/assets/queuedEvents")["queued_events"]

    def task_instances(self, dag_id: str, states: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Every task instance of every run of ``dag_id`` (only those in ``states``, when given)."""
        query = {"state": list(states)} if states else {}
        return self._every(f"/api/v2/dags/{dag_id}/dagRuns/~/taskInstances", "task_instances", query)

    def wait_for_task(self, dag_id: str, run_id: str, task_id: str, state: str, timeout: float,
                      poll: float = 5) -> dict[str, Any]:
        """Wait until ``task_id`` of run ``run_id`` is in ``state``; any failed try fails the wait at once."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            tis = [ti for ti in self.task_instances(dag_id) if ti["dag_run_id"] == run_id]
            if any(ti["state"] in FAILED_TASK_STATES for ti in tis):
                raise AirflowError(f"a run of {dag_id} failed:\n{self.describe(dag_id)}")
            found = [ti for ti in tis if ti["task_id"] == task_id and ti["state"] == state]
            if found:
                return found[0]
            if time.monotonic() > deadline:
                raise AirflowError(f"{dag_id} {run_id}: {task_id} not {state} within {timeout:.0f} s\n"
                                   f"{self.describe(dag_id)}")
            time.sleep(poll)

    def wait_parked(self, dag_id: str, run_id: str, task_id: str, timeout: float = 120, poll: float = 0.5) -> None:
        """Wait until the scheduler has taken in the end of the try that parked ``task_id`` in *awaiting
        input* (its "TaskInstance Finished" line). An answer before that races it in Airflow 3.3.2:
        the scheduler then finds the answered task queued again, fails the try and retries it, asking
        again. Nothing in the REST API shows that moment; the scheduler's log does."""
        line = f"TaskInstance Finished: dag_id={dag_id}, task_id={task_id}, run_id={run_id},"
        deadline = time.monotonic() + timeout
        while line not in self.logs["scheduler"].read_text(errors="replace"):
            self.check_alive()
            if time.monotonic() > deadline:
                raise AirflowError(f"the scheduler did not log the parked try of {dag_id} {run_id} {task_id} "
                                   f"within {timeout:.0f} s\n{self.log_tails()}")
            time.sleep(poll)

    def hitl(self, dag_id: str, run_id: str, task_id: str, answer: list[str] | None = None) -> dict[str, Any]:
        """A human-in-the-loop task's request (what the UI's Required actions shows); with ``answer``,
        respond with those options as a person does there, and return the recorded response."""
        path = (f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
                f"/taskInstances/{task_id}/-1/hitlDetails")
        if answer is None:
            return self.request("GET", path)
        return self.request("PATCH", path, {"chosen_options": answer, "params_input": {}})

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, lines: int = 60,
                 map_index: int = -1) -> str:
        """The last ``lines`` lines of one try of a task's log (of a mapped task: of ``map_index``),
        as the UI shows it."""
        path = (
            f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}"
            f"/taskInstances/{task_id}/logs/{try_number}"
        )
        try:
            content = self.request("GET", path, query={"full_content": "true", "map_index": map_index})["content"]
        except AirflowError as exc:
            return f"(no log: {exc})"
        text = []
        for item in content:
            if isinstance(item, dict):
                text.append(" ".join(str(item.get(k, "")) for k in ("timestamp", "level", "event") if item.get(k)))
            else:
                text.append(str(item))
        return "\n".join(text[-lines:])

    def describe(self, dag_id: str) -> str:
        """Every run with its task states, and the log tail of each failed try."""
        out = []
        tis = self.task_instances(dag_id)
        for run in self.dag_runs(dag_id):
            states = {ti["task_id"]: ti["state"] for ti in tis if ti["dag_run_id"] == run["dag_run_id"]}
            out.append(f"{run['dag_run_id']} ({run['run_type']}): {run['state']}; tasks: {states}")
        for ti in tis:
            if ti["state"] in FAILED_TASK_STATES and ti["try_number"]:
                log = self.task_log(dag_id, ti["dag_run_id"], ti["task_id"], ti["try_number"],
                                    map_index=ti["map_index"])
                out.append(f"--- log of {ti['dag_run_id']} / {ti['task_id']} try {ti['try_number']} ---\n{log}")
        return "\n".join(out)

    def wait_for_runs(self, dag_id: str, count: int, timeout: float, poll: float = 5) -> list[dict[str, Any]]:
        """Wait until ``dag_id`` has ``count`` runs, all finished; return them, oldest logical date first.

        Any failed try (the DAG's retries included) fails the wait at once, with every run's task
        states and the failed try's log.
        """
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            runs = self.dag_runs(dag_id)
            broken = [ti for ti in self.task_instances(dag_id) if ti["state"] in FAILED_TASK_STATES]
            if broken or any(r["state"] == "failed" for r in runs):
                raise AirflowError(f"a run of {dag_id} failed:\n{self.describe(dag_id)}")
            if len(runs) >= count and all(r["state"] in TERMINAL_RUN_STATES for r in runs):
                return runs
            if time.monotonic() > deadline:
                raise AirflowError(
                    f"{dag_id}: {count} finished runs expected within {timeout:.0f} s\n"
                    f"{self.describe(dag_id)}\n{self.log_tails(20)}"
                )
            time.sleep(poll)


    def settle(self, dag_ids: list[str], done: Any, timeout: float, poll: float = 5) -> dict[str, list[dict[str, Any]]]:
        """Wait until no run of ``dag_ids`` is unfinished and ``done(runs by DAG)`` holds; return the runs.

        Runs that other DAGs' Asset events start count too: the wait ends when the chain has come
        to rest. Any failed try fails the wait at once, with the runs' task states and its log.
        """
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            runs = {dag_id: self.dag_runs(dag_id) for dag_id in dag_ids}
            for dag_id in dag_ids:
                if any(ti["state"] in FAILED_TASK_STATES for ti in self.task_instances(dag_id)):
                    raise AirflowError(f"a run of {dag_id} failed:\n{self.describe(dag_id)}")
            resting = all(r["state"] in TERMINAL_RUN_STATES for found in runs.values() for r in found)
            if resting and done(runs):
                return runs
            if time.monotonic() > deadline:
                described = "\n".join(self.describe(dag_id) for dag_id in dag_ids)
                raise AirflowError(f"{dag_ids} did not come to rest within {timeout:.0f} s\n{described}")
            time.sleep(poll)


@contextlib.contextmanager
def health_probe(airflow: AirflowServer, every: float = 2.0) -> Iterator[list[float]]:
    """While the block runs, call ``/api/v2/monitor/health`` every ``every`` seconds from a thread
    (one at a time, as a load balancer's check does); yields the list of the calls' latencies in
    seconds, filled as they answer. After the block, raise if any call failed (an HTTP error, or no
    answer within the client's 30 s)."""
    import threading

    latencies: list[float] = []
    failures: list[str] = []
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            started = time.monotonic()
            try:
                airflow.health()
                latencies.append(time.monotonic() - started)
            except (AirflowError, OSError) as exc:  # refused, timed out, HTTP 5xx
                failures.append(f"{time.strftime('%H:%M:%S')}: {exc}")
            done.wait(max(0.0, every - (time.monotonic() - started)))

    thread = threading.Thread(target=probe, name="health-probe", daemon=True)
    thread.start()
    try:
        yield latencies
    finally:
        done.set()
        thread.join(timeout=60)
    if failures:
        raise AirflowError(f"the API did not answer {len(failures)} of {len(failures) + len(latencies)} health "
                           f"calls: {failures[:5]}")


def descendants(procs: list[Any]) -> list[Any]:
    """Every process of ``procs`` now (psutil), with all its children."""
    import psutil

    found = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            parent = psutil.Process(proc.pid)
            found += [parent, *parent.children(recursive=True)]
    return found


def _kill_tree(root: Any, what: str) -> list[str]:
    """SIGKILL ``root`` (a Popen or psutil process) and every process under it; the command lines
    killed, all gone when this returns."""
    import psutil

    tree = descendants([root])
    killed = []
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            killed.append(" ".join(proc.cmdline()))
            proc.kill()
    _, alive = psutil.wait_procs(tree, timeout=30)
    if alive:
        raise AirflowError(f"{what}: still alive after SIGKILL: {alive}")
    return killed


def _stop(procs: list[subprocess.Popen], grace: float = 20) -> None:
    """SIGTERM every process started (and all their descendants, whatever their group), then SIGKILL."""
    import psutil

    tree = descendants(procs)
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)  # each component leads its own group
    for p in tree:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(tree, timeout=grace)
    for p in alive + descendants(procs):
        with contextlib.suppress(psutil.Error):
            p.kill()
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


@contextlib.contextmanager
def running_airflow(
    home: Path,
    env: dict[str, str] | None = None,
    *,
    settings: dict[str, str] | None = None,
    timeout: float = 180,
    database_url: str | None = None,
    triggerer: bool = False,
    port: int | None = None,
    api_workers: int = 1,
    restart: bool = False,
) -> Iterator[AirflowServer]:
    """Start Airflow with ``AIRFLOW_HOME`` at ``home/airflow``; stop it, whatever happens, on exit.

    The processes get this process' environment (the dags and plugins folders, the Spark
    connection, ``LAKE_ROOT``, ``MLFLOW_TRACKING_URI``, ``PATH`` ...) updated with ``env``, then
    :data:`SERVER_SETTINGS` updated with ``settings``, then what the server itself needs (its
    home, database, port, and one JWT secret shared by all its processes).

    ``database_url``: the metadata DB's SQLAlchemy URL (e.g. a PostgreSQL database of
    ``tests/stack.py``); default a SQLite file in the home. ``triggerer``: start the triggerer
    too, and wait for it to be healthy. ``port``: the API server's (default: a free one).
    ``restart``: the restart policy of a deployment (:attr:`AirflowServer.restart`).
    """
    airflow_home = Path(home) / "airflow"
    airflow_home.mkdir(parents=True, exist_ok=True)
    port = port or _free_port()
    url = f"http://127.0.0.1:{port}"
    components = {**COMPONENTS, **(TRIGGERER if triggerer else {})}
    components["api-server"] = [*components["api-server"], "--workers", str(api_workers)]
    proc_env = {**os.environ, **(env or {}), **SERVER_SETTINGS, **(settings or {})}
    proc_env.pop("AIRFLOW_CONFIG", None)
    keys = {"JWT secret": secrets.token_urlsafe(32), "API secret key": secrets.token_urlsafe(32)}
    proc_env.update(
        {
            "AIRFLOW_HOME": str(airflow_home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url or f"sqlite:///{airflow_home}/airflow.db",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": url,
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{url}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": keys["JWT secret"],
            "AIRFLOW__API__SECRET_KEY": keys["API secret key"],
        }
    )
    logs = {name: airflow_home / f"{name}.out" for name in ["db-migrate", *components]}
    with logs["db-migrate"].open("wb") as out:
        migrate = subprocess.run(
            ["airflow", "db", "migrate"], env=proc_env, stdout=out, stderr=subprocess.STDOUT, timeout=300
        )
    if migrate.returncode != 0:
        raise AirflowError(f"airflow db migrate failed ({migrate.returncode}):\n{_tail(logs['db-migrate'], 60)}")

    processes: dict[str, subprocess.Popen] = {}
    server = AirflowServer(url=url, home=airflow_home, logs=logs, processes=processes, secrets=keys,
                           commands={name: ["airflow", *args] for name, args in components.items()},
                           environment=proc_env, restart=restart)
    try:
        for name in components:
            server.start(name)
        deadline = time.monotonic() + timeout
        health: Any = None
        while True:
            server.check_alive()
            with contextlib.suppress(OSError, AirflowError, ValueError):
                health = server.health()
                parts = [health.get(k.replace("-", "_")) or {} for k in ["metadatabase", *components]
                         if k != "api-server"]
                if all(part.get("status") == "healthy" for part in parts):
                    break
            if time.monotonic() > deadline:
                raise AirflowError(
                    f"Airflow at {url} not healthy after {timeout:.0f} s (last health: {health})\n{server.log_tails()}"
                )
            time.sleep(1)
        server.login()
        yield server
    finally:
        _stop(list(processes.values()))

"""The compose stack as ``test_compose_smoke.py`` drives it: its own compose project and override,
the pipelines it serves, each step timed into a report, and the checks and faults as methods.

The stack runs the bundled flights and bikeshare pipelines with small changes (``SMOKE_CONFIG``,
``BIKES_CONFIG``: a 5-day window, two epochs, one candidate, no baselines), served from the lake
volume as a deployment's files (``$PIPELINES_DIR``, through a compose override), so that a training
takes minutes on two cores. The compose calls go through ``scripts/compose_stack.py``.

Not a test module.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import compose_stack  # noqa: E402
from compose_stack import StackError, compose, say  # noqa: E402

PROJECT = "lakeflow-smoke"
AIRFLOW = "http://127.0.0.1:8080"
MLFLOW = "http://127.0.0.1:5000"
SPARK_MASTER = "http://127.0.0.1:8081"
# The jobs whose sessions are on the spark-connect service (their applications' names start with them).
NIGHTLY_JOBS = ("validate", "features", "score", "monitor")
DAGS = ["flights_ingest", "flights_score", "flights_train"]
BIKES_DAGS = ["bikeshare_ingest", "bikeshare_score", "bikeshare_train"]
MODEL = "smoke_model"
BIKES_MODEL = "smoke_bikes"  # the bikeshare's registered model and MLflow experiment
PIPELINES_IN_LAKE = "/data/smoke/pipelines"  # the deployment's files: $PIPELINES_DIR of the job services
PIPELINES_IN_IMAGE = "/opt/pipeline/pipelines"  # the Dockerfile's copy of pipelines/
# What the smoke changes in the flights pipeline (as tests/deployed/scenario.py's stack_config does).
SMOKE_CONFIG = {
    "train": {"train_days": 5, "validation_days": 0, "holdout_days": 2, "epochs": 2, "num_processes": 2,
              "model_name": MODEL},
    "baselines": [],
    "validation": {"great_expectations": False},
    "evaluation": {"threshold": 0.5},
    "sweep": {"size": 1, "families": ["mlp"]},
}
# ... and in the bikeshare pipeline: the same short window, a model and experiment of its own, every
# retraining promoted (tests/deployed/scenario.py's write_pipelines).
BIKES_CONFIG = {
    "train": {"train_days": 5, "max_train_days": 5, "validation_days": 0, "holdout_days": 2, "epochs": 2,
              "num_processes": 1, "model_name": BIKES_MODEL, "experiment": BIKES_MODEL, "promotion_margin": -1.0},
    "baselines": [],
    "validation": {"great_expectations": False},
    "evaluation": {"threshold": 0.5, "segments": []},
    "sweep": {"size": 1, "families": ["mlp"], "blend": [], "learning_rate": [], "width": [], "depth": [],
              "epochs": []},
}
# The services that run the jobs' code.
CONFIGURED = ["airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
              "spark-master", "spark-worker", "spark-connect"]
STATE = compose_stack.STATE
REPORT = STATE / "smoke.json"


def merged(base: dict, patch: dict) -> dict:
    """``base`` with ``patch`` laid over it, mappings merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in patch.items():
        out[key] = merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def override(services: list[str] = CONFIGURED) -> dict:
    """The compose override of the smoke: its pipelines for the services that run the jobs, and no
    wait for raw data (a scheduled ingest of today, which has none, skips at once)."""
    env = {"PIPELINES_DIR": PIPELINES_IN_LAKE, "PIPELINE_RAW_WAIT_HOURS": "0"}
    return {"services": {name: {"environment": env} for name in services}}


def pipeline_file(name: str, changes: dict, patch: dict | None = None) -> str:
    """A deployment's file for the bundled pipeline ``name``: the image's folder named, ``changes``
    (and ``patch``) listed; checked against this checkout's copy of the pipeline first."""
    import yaml

    from jobs.config import load_config
    from jobs.config.files import PIPELINES

    changes = merged(changes, patch or {})
    load_config(PIPELINES / name, profiles=(), overlays=(), changes=changes)
    return yaml.safe_dump({"pipeline": f"{PIPELINES_IN_IMAGE}/{name}", **changes}, sort_keys=False)


def env_file() -> dict[str, str]:
    values = {}
    for line in (REPO / ".env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            name, value = line.split("=", 1)
            values[name.strip()] = value.strip()
    return values


class Smoke:
    """The stack of one compose project: its steps, each timed into ``report`` (written to
    ``REPORT`` after every step); compose calls go to this project with the override."""

    def __init__(self, project: str, shots: Path) -> None:
        self.project, self.shots = project, shots
        self.report: dict[str, Any] = {"steps": {}}
        STATE.mkdir(parents=True, exist_ok=True)
        self.override = STATE / "smoke.override.yml"
        self.override.write_text(json.dumps(override(), indent=2))  # JSON is YAML
        self.airflow: Any = None
        self.failed = ""  # the step that failed: the later tests build on the earlier ones

    # --- plumbing ---

    def step(self, name: str, action: Callable[[], Any]) -> Any:
        """Run ``action`` as the step ``name``: timed, printed, recorded; a failure is remembered."""
        say(name)
        started = time.monotonic()
        try:
            result = action()
        except BaseException:
            self.failed = self.failed or name
            raise
        finally:
            took = round(time.monotonic() - started, 1)
            self.report["steps"][name] = took
            print(f"    {name}: {took:.0f} s", flush=True)
            self.write()
        return result

    def write(self) -> None:
        REPORT.write_text(json.dumps(self.report, indent=2, default=str))

    def compose(self, *args: str, **kwargs) -> Any:
        return compose(self.project, "-f", str(REPO / "docker-compose.yml"), "-f", str(self.override),
                       *args, **kwargs)

    def exec(self, service: str, command: str, stdin: str | None = None) -> str:
        return self.compose("exec", "-T", service, "bash", "-c", command, input=stdin,
                            capture_output=True).stdout

    def up(self) -> None:
        cli = compose_stack.compose_cli()
        if compose_stack.is_v1(cli):
            self.compose("up", "-d", "--no-build")
            compose_stack.wait_healthy(self.project)
        else:
            self.compose("up", "-d", "--no-build", "--wait", "--wait-timeout", "600")

    def container(self, service: str) -> str:
        return self.compose("ps", "-q", service, capture_output=True).stdout.strip()

    def write_pipelines(self, flights_patch: dict | None = None) -> None:
        """The deployment's files in the lake volume (before ``up``: a one-off container of the
        image), so that the DAG processor's first parse finds both pipelines."""
        files = {"flights.yaml": pipeline_file("flights", SMOKE_CONFIG, flights_patch),
                 "bikeshare.yaml": pipeline_file("bikeshare", BIKES_CONFIG)}
        script = f"mkdir -p {PIPELINES_IN_LAKE} && cd {PIPELINES_IN_LAKE}"
        for name, text in files.items():  # base64: no quoting of the YAML in the shell
            script += f" && echo {base64.b64encode(text.encode()).decode()} | base64 -d > {name}"
        if self.container("airflow-scheduler"):
            self.exec("airflow-scheduler", script)
        else:
            self.compose("run", "--rm", "--no-deps", "-T", "--entrypoint", "bash", "airflow-init", "-c", script,
                         capture_output=True)

    def login(self) -> None:
        from tests.airflow_server import AirflowServer

        password = env_file()["AIRFLOW_ADMIN_PASSWORD"]
        home = Path(tempfile.mkdtemp(prefix="compose-smoke-"))
        (home / "simple_auth_manager_passwords.json.generated").write_text(json.dumps({"admin": password}))
        self.airflow = AirflowServer(url=AIRFLOW, home=home, logs={}, processes={})
        self.airflow.login()

    # --- the checks ---

    def hardened(self) -> dict[str, Any]:
        """Every container's user is not root; every published port is on loopback."""
        found = {}
        for container in compose_stack.containers(self.project):
            service = container["Config"]["Labels"]["com.docker.compose.service"]
            if container["State"]["Status"] != "running":
                continue
            uid = compose_stack.run(["docker", "exec", container["Id"], "id", "-u"], capture_output=True).stdout.strip()
            if uid == "0":
                raise StackError(f"{service} runs as root")
            ports = [(b["HostIp"], b["HostPort"]) for bindings in (container["NetworkSettings"]["Ports"] or {}).values()
                     for b in bindings or []]
            if any(ip != "127.0.0.1" for ip, _ in ports):
                raise StackError(f"{service} publishes {ports} beyond loopback")
            found[service] = {"uid": uid, "ports": ports, "memory_limit": container["HostConfig"]["Memory"]}
        return found

    def run_dag(self, dag_id: str, conf: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
        """Trigger ``dag_id`` and wait until every DAG has come to rest (the Assets' runs included)."""
        run_id = self.airflow.trigger(dag_id, conf)["dag_run_id"]

        def done(runs: dict[str, list[dict[str, Any]]]) -> bool:
            return any(r["dag_run_id"] == run_id and r["state"] == "success" for r in runs[dag_id])

        runs = self.airflow.settle(DAGS + BIKES_DAGS, done, timeout=timeout)
        [run] = [r for r in runs[dag_id] if r["dag_run_id"] == run_id]
        return run

    def lake_has(self, path: str, pipeline: str = "flights") -> bool:
        found = self.exec("airflow-scheduler", f"test -e /data/lake/{pipeline}/{path} && echo yes || true")
        return found.strip() == "yes"

    def inventory(self) -> dict[str, Any]:
        """What must survive a down and up: lake files, MLflow runs and versions, Airflow's runs."""
        import mlflow

        lake = int(self.exec("airflow-scheduler", "find /data/lake -type f | wc -l").strip())
        client = mlflow.MlflowClient(MLFLOW)
        experiments = client.search_experiments()
        runs = len(client.search_runs([e.experiment_id for e in experiments], max_results=1000))
        versions = {model: len(client.search_model_versions(f"name = '{model}'")) for model in (MODEL, BIKES_MODEL)}
        champions = {model: client.get_model_version_by_alias(model, "champion").version
                     for model in (MODEL, BIKES_MODEL)}
        airflow_runs = {dag_id: len(self.airflow.dag_runs(dag_id)) for dag_id in DAGS + BIKES_DAGS}
        return {"lake_files": lake, "mlflow_runs": runs, "model_versions": versions, "champions": champions,
                "airflow_runs": airflow_runs}

    def cluster_applications(self) -> list[str]:
        """The names of the applications the Spark master runs and has run (its UI's JSON)."""
        import urllib.request

        with urllib.request.urlopen(f"{SPARK_MASTER}/json/", timeout=30) as answer:
            state = json.load(answer)
        return [app["name"] for key in ("activeapps", "completedapps") for app in state.get(key, [])]

    def nightly_jobs_on_the_connect_server(self) -> dict[str, int]:
        """No nightly job ran as an application of its own on the cluster: each opened its session on
        the spark-connect service. Training did (its driver and ranks), which shows the master's
        record is there to look at."""
        names = self.cluster_applications()
        own = [name for name in names if name.split("-")[0] in NIGHTLY_JOBS]
        if own:
            raise StackError(f"nightly jobs ran as applications of their own, not on the Connect server: {own}")
        if not any(name.startswith("train-") for name in names):
            raise StackError(f"the Spark master lists no training application: {names}")
        return dict(collections.Counter(name.split("-")[0] for name in names))

    def mlflow_serves_the_champion(self) -> dict[str, Any]:
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        import mlflow

        mlflow.set_tracking_uri(MLFLOW)
        version = mlflow.MlflowClient(MLFLOW).get_model_version_by_alias(MODEL, "champion")
        with tempfile.TemporaryDirectory() as folder:
            path = mlflow.artifacts.download_artifacts(f"models:/{MODEL}@champion", dst_path=folder)
            files = sorted(p.name for p in Path(path).iterdir())
        if "MLmodel" not in files:
            raise StackError(f"the champion's artifacts lack MLmodel: {files}")
        return {"version": version.version, "run_id": version.run_id, "files": files}

    def screenshots(self) -> list[str]:
        """The Airflow UI (both pipelines' DAGs) and the Model health page, in headless Chromium."""
        from tests.browser import Page, chromium

        self.shots.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as work, chromium(Path(work)) as browser:
            page = Page(browser, folder=Path(work) / "shots", prefix="compose-")
            page.log_in(self.airflow)
            browser.get(f"{AIRFLOW}/dags")
            for dag_id in DAGS + BIKES_DAGS:
                page.text(dag_id)
            shots = {"compose-airflow.png": page.shot("airflow")}
            page.open_model_health(AIRFLOW, "flights")  # two served: the first (bikeshare) is shown
            page.text(MODEL)
            browser.switch_to.default_content()
            shots["compose-model-health.png"] = page.shot("model-health")
            for name, shot in shots.items():
                shutil.copy2(shot, self.shots / name)
        return [str(self.shots / name) for name in shots]

    # --- the faults ---

    def wait_running(self, dag_id: str, run_id: str, task_id: str, timeout: float = 600) -> None:
        self.airflow.wait_for_task(dag_id, run_id, task_id, "running", timeout=timeout, poll=2)

    def restarted(self, service: str, before: str, timeout: float = 300) -> float:
        """Seconds until ``service``'s container runs again (restarted by its policy) and is healthy."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            state = compose_stack.states(self.project).get(service, "")
            if state in ("healthy", "running"):
                return time.monotonic() - started
            time.sleep(2)
        raise StackError(f"{service} did not come back within {timeout:.0f} s ({before})")

    def crash(self, service: str) -> str:
        """SIGKILL the main process of ``service``'s container from the host, as the kernel's OOM
        killer would: a crash, which the restart policy answers. (``docker kill`` is a stop by the
        user in the engine's eyes: ``unless-stopped`` leaves such a container down.)"""
        container = self.container(service)
        pid = compose_stack.run(["docker", "inspect", "-f", "{{.State.Pid}}", container],
                                capture_output=True).stdout.strip()
        os.kill(int(pid), 9)
        time.sleep(3)
        return container

    def fault_scheduler(self, day: dt.date) -> dict[str, Any]:
        """The scheduler killed while a night's ingest runs: compose restarts it, the run finishes."""
        run_id = self.airflow.trigger("flights_ingest", {"run_date": day.isoformat()})["dag_run_id"]
        self.wait_running("flights_ingest", run_id, "validate_raw")
        container = self.crash("airflow-scheduler")
        back = self.restarted("airflow-scheduler", container)

        def done(runs: dict[str, list[dict[str, Any]]]) -> bool:
            return any(r["dag_run_id"] == run_id and r["state"] == "success" for r in runs["flights_ingest"])

        self.airflow.settle(DAGS, done, timeout=900)
        return {"back_after_s": round(back, 1), "run": run_id, "scored": self.lake_has(f"predictions/date={day}")}

    def fault_connect_server(self, day: dt.date) -> dict[str, Any]:
        """The Spark Connect server killed while a night's job has its session on it: compose
        restarts it, and the job (its client's retries, or else the task's retry: a fault) runs again
        on the new server; the night finishes and the day is scored."""
        restarts = self.restart_counts().get("spark-connect", 0)
        run_id = self.airflow.trigger("flights_ingest", {"run_date": day.isoformat()})["dag_run_id"]
        self.wait_running("flights_ingest", run_id, "validate_raw")
        time.sleep(10)  # past the job's start: its session open on the server
        container = self.crash("spark-connect")
        back = self.restarted("spark-connect", container)

        def night_over() -> bool:  # the ingest's run, then the scoring its features Asset started
            ingest = [r for r in self.airflow.dag_runs("flights_ingest") if r["dag_run_id"] == run_id]
            return bool(ingest) and ingest[0]["state"] in ("success", "failed") and (
                ingest[0]["state"] == "failed" or self.lake_has(f"monitoring/date={day}"))

        self.wait_ended(night_over, "flights_ingest", "the night")
        tries = {ti["task_id"]: ti["try_number"] for ti in self.airflow.task_instances("flights_ingest")
                 if ti["dag_run_id"] == run_id}
        [ingest] = [r for r in self.airflow.dag_runs("flights_ingest") if r["dag_run_id"] == run_id]
        if ingest["state"] != "success" or not self.lake_has(f"predictions/date={day}"):
            raise StackError(f"the night after the Connect server's crash: {ingest['state']}, tries {tries}")
        return {"back_after_s": round(back, 1), "restarted": self.restart_counts().get("spark-connect", 0) - restarts,
                "tries": tries, "scored": True}

    def wait_ended(self, ended: Callable[[], bool], dag_id: str, what: str, timeout: float = 1500) -> None:
        """Poll ``ended`` until it is true. Not ``settle()``, which fails at the first failed try: a
        fault may fail one on purpose, and its retry is what is checked."""
        deadline = time.monotonic() + timeout
        while not ended():
            if time.monotonic() > deadline:
                raise StackError(f"{what} did not end within {timeout:.0f} s:\n{self.airflow.describe(dag_id)}")
            time.sleep(5)

    def restart_counts(self) -> dict[str, int]:
        return {c["Config"]["Labels"]["com.docker.compose.service"]: c["RestartCount"]
                for c in compose_stack.containers(self.project)}

    def scheduling_again(self, since: dt.datetime, timeout: float = 600) -> float:
        """Seconds until the scheduler's heartbeat is newer than ``since`` (a scheduler that hangs
        keeps an old one)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            with contextlib.suppress(Exception):
                beat = self.airflow.health()["scheduler"]["latest_scheduler_heartbeat"]
                if beat and dt.datetime.fromisoformat(beat) > since:
                    return time.monotonic() - started
            time.sleep(5)
        raise StackError(f"the scheduler has not scheduled since {since} for {timeout:.0f} s")

    def fault_postgres(self) -> dict[str, Any]:
        """PostgreSQL killed: it restarts, the Airflow components reconnect (or, hung or exited,
        are restarted), the scheduler schedules again, and what was there before is all there."""
        before, restarts = self.inventory(), self.restart_counts()
        container = self.crash("postgres")
        crashed = dt.datetime.now(dt.UTC)
        back = self.restarted("postgres", container)
        # Past the health checks' window, so that a component that hangs is seen (and ended).
        time.sleep(90)
        scheduling = self.scheduling_again(crashed + dt.timedelta(seconds=60))
        compose_stack.wait_healthy(self.project, timeout=600)
        self.login()
        after = self.inventory()
        if after != before:
            raise StackError(f"PostgreSQL's restart lost something: {before} -> {after}")
        restarted = {name: n - restarts.get(name, 0) for name, n in self.restart_counts().items()
                     if n != restarts.get(name, 0)}
        return {"back_after_s": round(back, 1), "scheduling_again_after_s": round(90 + scheduling, 1),
                "restarted": restarted, "inventory": after}

    def fault_spark_worker(self, day: dt.date) -> dict[str, Any]:
        """The Spark worker crashes while the model trains (the sweep's candidate: its ranks are the
        worker's Python processes): the task's retry resumes from the checkpoint of the last epoch
        the first try finished."""
        # The ranks on the cluster (a barrier stage on the worker's two cores): with the config's
        # local_mode they run in the driver's process, in the scheduler's container, and a worker
        # that crashes takes no rank with it.
        self.write_pipelines({"train": {"local_mode": False}})
        try:
            return self._worker_crash_in_training(day.isoformat())
        finally:
            self.write_pipelines()

    def _worker_crash_in_training(self, day: str) -> dict[str, Any]:
        # Enough epochs that the crash falls between two of them (an epoch of 5 days takes a second or two).
        run_id = self.airflow.trigger("flights_train", {"run_date": day, "sweep_epochs": [150]})["dag_run_id"]
        self.wait_running("flights_train", run_id, "train_candidate", timeout=900)
        find = f"find /data/lake/flights/checkpoints -path '*/date={day}/*' -name 'epoch-*.pt' 2>/dev/null || true"
        deadline = time.monotonic() + 600
        while not self.exec("airflow-scheduler", find).strip():
            if time.monotonic() > deadline:
                raise StackError("no checkpoint written within 600 s")
            time.sleep(1)
        time.sleep(5)
        checkpoints = self.exec("airflow-scheduler", find).split()
        container = self.crash("spark-worker")
        back = self.restarted("spark-worker", container)

        def done() -> bool:
            return any(r["dag_run_id"] == run_id and r["state"] in ("success", "failed")
                       for r in self.airflow.dag_runs("flights_train"))

        self.wait_ended(done, "flights_train", "the training")
        [ti] = [ti for ti in self.airflow.task_instances("flights_train")
                if ti["dag_run_id"] == run_id and ti["task_id"] == "train_candidate"]
        log = self.airflow.task_log("flights_train", run_id, "train_candidate", ti["try_number"], lines=2000,
                                    map_index=ti["map_index"])
        resumed = [line.strip()[:300] for line in log.splitlines() if "resum" in line.lower()]
        if ti["state"] != "success" or ti["try_number"] < 2 or not resumed:
            raise StackError(f"the candidate's retry did not resume: {ti['state']}, try {ti['try_number']}")
        return {"back_after_s": round(back, 1), "checkpoints_at_crash": checkpoints, "state": ti["state"],
                "tries": ti["try_number"], "resumed": resumed[:3]}

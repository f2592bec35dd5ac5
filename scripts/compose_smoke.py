"""The compose stack for real, end to end (``make compose-smoke``; by hand, not in ``make test``).

``python scripts/compose_smoke.py --help`` lists its options.

On this machine, from nothing (its own compose project, whose volumes it removes first):

1. the engine and compose (installed and started if need be: ``scripts/compose_stack.py``), the
   base images without a registry, the image, ``up -d --wait``: each timed;
2. every container runs as a user that is not root, every published port is on 127.0.0.1;
3. the example data is in the lake volume (``airflow-init`` lands it); through Airflow's REST API
   with the admin password of ``.env``: the DAGs unpaused, an ingest of the first week, a first
   training (its ``champion_model`` Asset then re-scores its last day), and a night: the ingest
   of the next day, whose ``features`` Asset starts the scoring and the monitor of that day;
4. the predictions and the monitor's record of the night are in the lake; MLflow serves the
   champion (its artifacts downloaded through the server); the Airflow UI and the Model health
   page in headless Chromium, as screenshots (``--shots``);
5. ``down`` and ``up`` again: the lake, the MLflow runs, the registry and Airflow's runs are all
   still there (named volumes);
6. with ``--faults``: the scheduler killed in a run (compose restarts it and the run finishes),
   PostgreSQL killed (the stack recovers, nothing lost), the Spark worker killed during training
   (the retry resumes from its checkpoint).

The stack runs a small config (``SMOKE_CONFIG``: a 5-day window, two epochs, one candidate, no
baselines) from the lake volume through a compose override, so that a training takes minutes on
two cores. It prints each step with its time and writes them to ``.pipeline/compose/smoke.json``;
``--keep`` leaves the stack up at the end (``python scripts/compose_stack.py down --project ...``).
"""

from __future__ import annotations

import argparse
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import compose_stack  # noqa: E402
from compose_stack import StackError, compose, say  # noqa: E402

PROJECT = "lakeflow-smoke"
AIRFLOW = "http://127.0.0.1:8080"
MLFLOW = "http://127.0.0.1:5000"
DAGS = ["flights_ingest", "flights_score", "flights_train"]
MODEL = "smoke_model"
TRAIN_DATE = dt.date(2013, 1, 7)  # trains on 01-01..01-05, evaluates on 01-06..01-07
NIGHT = dt.date(2013, 1, 8)  # the night after: ingest, then scoring and monitoring of that day
FAULT_NIGHT = dt.date(2013, 1, 9)
CONFIG_IN_LAKE = "/data/smoke/pipeline.yaml"
PIPELINE_IN_IMAGE = "/opt/pipeline/pipelines/flights"  # the Dockerfile's copy of pipelines/
# What the smoke changes in the flights pipeline (as tests/deployed/scenario.py's stack_config does).
SMOKE_CONFIG = {
    "train": {"train_days": 5, "validation_days": 0, "holdout_days": 2, "epochs": 2, "num_processes": 2,
              "model_name": MODEL},
    "baselines": [],
    "validation": {"great_expectations": False},
    "evaluation": {"threshold": 0.5},
    "sweep": {"size": 1, "families": ["mlp"]},
}
# The services that run the jobs' code (the config must be in the lake before they read it:
# airflow-init lands the data with the default one).
CONFIGURED = ["airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
              "spark-master", "spark-worker"]
STATE = compose_stack.STATE


def merged(base: dict, patch: dict) -> dict:
    """``base`` with ``patch`` laid over it, mappings merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in patch.items():
        out[key] = merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def override(services: list[str] = CONFIGURED) -> dict:
    """The compose override of the smoke: its config for the services that run the jobs, and no
    wait for raw data (a scheduled ingest of today, which has none, skips at once)."""
    env = {"PIPELINE_CONFIG": CONFIG_IN_LAKE, "PIPELINE_RAW_WAIT_HOURS": "0"}
    return {"services": {name: {"environment": env} for name in services}}


class Smoke:
    """The steps, each timed into ``report``; compose calls go to this project with the override."""

    def __init__(self, project: str, shots: Path) -> None:
        self.project, self.shots = project, shots
        self.report: dict[str, Any] = {"steps": {}}
        STATE.mkdir(parents=True, exist_ok=True)
        self.override = STATE / "smoke.override.yml"
        self.override.write_text(json.dumps(override(), indent=2))  # JSON is YAML
        self.airflow: Any = None

    # --- plumbing ---

    def step(self, name: str, action: Callable[[], Any]) -> Any:
        say(name)
        started = time.monotonic()
        result = action()
        took = round(time.monotonic() - started, 1)
        self.report["steps"][name] = took
        print(f"    {name}: {took:.0f} s", flush=True)
        return result

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

        runs = self.airflow.settle(DAGS, done, timeout=timeout)
        [run] = [r for r in runs[dag_id] if r["dag_run_id"] == run_id]
        return run

    def lake_has(self, path: str) -> bool:
        return self.exec("airflow-scheduler", f"test -e /data/lake/flights/{path} && echo yes || true").strip() == "yes"

    def inventory(self) -> dict[str, Any]:
        """What must survive a down and up: lake files, MLflow runs and versions, Airflow's runs."""
        import mlflow

        lake = int(self.exec("airflow-scheduler", "find /data/lake -type f | wc -l").strip())
        client = mlflow.MlflowClient(MLFLOW)
        experiments = client.search_experiments()
        runs = len(client.search_runs([e.experiment_id for e in experiments], max_results=1000))
        versions = len(client.search_model_versions(f"name = '{MODEL}'"))
        champion = client.get_model_version_by_alias(MODEL, "champion").version
        airflow_runs = {dag_id: len(self.airflow.dag_runs(dag_id)) for dag_id in DAGS}
        return {"lake_files": lake, "mlflow_runs": runs, "model_versions": versions, "champion": champion,
                "airflow_runs": airflow_runs}

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
        """The Airflow UI (the DAGs, the training run) and the Model health page, in headless Chromium."""
        os.environ.setdefault("PIPELINE_TEST_HOME", str(STATE))
        from selenium.webdriver.common.by import By

        from tests.browser import Page, chromium

        self.shots.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as work, chromium(Path(work)) as browser:
            page = Page(browser, folder=Path(work) / "shots", prefix="compose-")
            page.log_in(self.airflow)
            browser.get(f"{AIRFLOW}/dags")
            for dag_id in DAGS:
                page.text(dag_id)
            shots = {"compose-airflow.png": page.shot("airflow")}
            browser.get(f"{AIRFLOW}/plugin/model-health")
            frame = page.wait.until(lambda d: d.find_element(By.TAG_NAME, "iframe"))
            browser.switch_to.frame(frame)
            page.text("Model health")
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

    def fault_scheduler(self) -> dict[str, Any]:
        """The scheduler killed while a night's ingest runs: compose restarts it, the run finishes."""
        run_id = self.airflow.trigger("flights_ingest", {"run_date": FAULT_NIGHT.isoformat()})["dag_run_id"]
        self.wait_running("flights_ingest", run_id, "validate_raw")
        container = self.crash("airflow-scheduler")
        back = self.restarted("airflow-scheduler", container)

        def done(runs: dict[str, list[dict[str, Any]]]) -> bool:
            return any(r["dag_run_id"] == run_id and r["state"] == "success" for r in runs["flights_ingest"])

        self.airflow.settle(DAGS, done, timeout=900)
        return {"back_after_s": round(back, 1), "run": run_id,
                "scored": self.lake_has(f"predictions/date={FAULT_NIGHT}")}

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

    def fault_spark_worker(self) -> dict[str, Any]:
        """The Spark worker crashes while the model trains (the sweep's candidate: its ranks are the
        worker's Python processes): the task's retry resumes from the checkpoint of the last epoch
        the first try finished."""
        day = NIGHT.isoformat()  # a window of its own
        # The ranks on the cluster (a barrier stage on the worker's two cores): with the config's
        # local_mode they run in the driver's process, in the scheduler's container, and a worker
        # that crashes takes no rank with it.
        on_cluster = smoke_config({"train": {"local_mode": False}})
        self.exec("airflow-scheduler", f"cat > {CONFIG_IN_LAKE}", stdin=on_cluster)
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

        def done(runs: dict[str, list[dict[str, Any]]]) -> bool:
            return any(r["dag_run_id"] == run_id and r["state"] in ("success", "failed")
                       for r in runs["flights_train"])

        # Not settle(): it fails at the first failed try, and the crash fails one on purpose.
        deadline = time.monotonic() + 1500
        while not done({"flights_train": self.airflow.dag_runs("flights_train")}):
            if time.monotonic() > deadline:
                raise StackError(f"the training did not end within 1500 s:\n{self.airflow.describe('flights_train')}")
            time.sleep(5)
        self.exec("airflow-scheduler", f"cat > {CONFIG_IN_LAKE}", stdin=smoke_config())
        [ti] = [ti for ti in self.airflow.task_instances("flights_train")
                if ti["dag_run_id"] == run_id and ti["task_id"] == "train_candidate"]
        log = self.airflow.task_log("flights_train", run_id, "train_candidate", ti["try_number"], lines=2000,
                                    map_index=ti["map_index"])
        resumed = [line.strip()[:300] for line in log.splitlines() if "resum" in line.lower()]
        if ti["state"] != "success" or ti["try_number"] < 2 or not resumed:
            raise StackError(f"the candidate's retry did not resume: {ti['state']}, try {ti['try_number']}")
        return {"back_after_s": round(back, 1), "checkpoints_at_crash": checkpoints, "state": ti["state"],
                "tries": ti["try_number"], "resumed": resumed[:3]}


FAULTS = {
    "scheduler": ("fault: the scheduler crashes in a run", "fault_scheduler"),
    "postgres": ("fault: PostgreSQL crashes", "fault_postgres"),
    "worker": ("fault: the Spark worker crashes in training", "fault_spark_worker"),
}


def faults(smoke: Smoke, report: dict[str, Any], which: list[str] | None = None) -> None:
    for name in which or list(FAULTS):
        title, method = FAULTS[name]
        report[method] = smoke.step(title, getattr(smoke, method))
        print(f"    {json.dumps(report[method], default=str)}", flush=True)


def env_file() -> dict[str, str]:
    values = {}
    for line in (REPO / ".env").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            name, value = line.split("=", 1)
            values[name.strip()] = value.strip()
    return values


def smoke_config(patch: dict | None = None) -> str:
    """A deployment's file: the image's flights pipeline named, SMOKE_CONFIG (and ``patch``) the changes."""
    import yaml

    return yaml.safe_dump({"pipeline": PIPELINE_IN_IMAGE, **merged(SMOKE_CONFIG, patch or {})}, sort_keys=False)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--project", default=PROJECT,
                        help="the compose project the smoke runs as (default: %(default)s)")
    parser.add_argument("--faults", action="store_true", help="also kill the scheduler, PostgreSQL, the Spark worker")
    parser.add_argument("--keep", action="store_true", help="leave the stack up at the end")
    parser.add_argument("--reuse", action="store_true", help="keep the project's volumes from an earlier run")
    parser.add_argument("--shots", default=str(STATE / "screenshots"),
                        help="where the screenshots go (default: .pipeline/compose/screenshots; docs/ to refresh the "
                             "documentation's)")
    parser.add_argument("--write-env", action="store_true",
                        help="no .env: write one with fresh random secrets without asking")
    parser.add_argument("--faults-only", action="store_true",
                        help="only the faults, on the stack an earlier run left up (with --keep)")
    parser.add_argument("--fault", action="append", choices=list(FAULTS), help="only this fault (repeatable)")
    args = parser.parse_args(argv)
    try:
        print(f"==> {compose_stack.ensure_env(True if args.write_env else None)}", flush=True)
    except compose_stack.StackError as exc:
        sys.exit(f"compose_smoke: {exc}")

    smoke = Smoke(args.project, Path(args.shots))
    report = smoke.report
    out = STATE / "smoke.json"
    try:
        report["engine"] = smoke.step("engine", compose_stack.ensure_engine)
        report["compose"] = smoke.step("compose", lambda: " ".join(compose_stack.compose_cli()) + ": "
                                       + compose_stack.compose_version())
        print(f"    {report['compose']}")
        if args.faults_only:
            smoke.step("build (base images, wheelhouse, image)", lambda: compose_stack.build(args.project))
            smoke.step("up -d --wait", smoke.up)
            smoke.login()
            faults(smoke, report, args.fault)
            report["result"] = "passed"
            return
        if not args.reuse:
            smoke.step("down --volumes (a fresh start)", lambda: smoke.compose("down", "--volumes", "--remove-orphans"))
        smoke.step("build (base images, wheelhouse, image)", lambda: compose_stack.build(args.project))
        smoke.step("up -d --wait", smoke.up)
        report["containers"] = smoke.step("non-root, loopback, limits", smoke.hardened)
        if not smoke.lake_has("raw/flights/date=2013-01-01/flights.csv"):
            raise StackError("airflow-init did not land the example data in the lake volume")
        smoke.exec("airflow-scheduler", f"mkdir -p $(dirname {CONFIG_IN_LAKE}) && cat > {CONFIG_IN_LAKE}",
                   stdin=smoke_config())
        smoke.step("log in with .env's password", smoke.login)
        for dag_id in DAGS:
            smoke.airflow.wait_for_dag(dag_id, timeout=300)
            smoke.airflow.unpause(dag_id)
        first = TRAIN_DATE - dt.timedelta(days=6)
        smoke.step("ingest the first week", lambda: smoke.run_dag(
            "flights_ingest", {"run_date": TRAIN_DATE.isoformat(), "days": (TRAIN_DATE - first).days + 1}))
        smoke.step("first training (and its re-scoring)", lambda: smoke.run_dag(
            "flights_train", {"run_date": TRAIN_DATE.isoformat()}, timeout=1500))
        smoke.step("a night: ingest, then scoring and monitoring by the Asset", lambda: smoke.run_dag(
            "flights_ingest", {"run_date": NIGHT.isoformat()}))
        for path in (f"predictions/date={NIGHT}", f"monitoring/date={NIGHT}"):
            if not smoke.lake_has(path):
                raise StackError(f"the night left no {path} in the lake")
        report["champion"] = smoke.step("MLflow serves the champion", smoke.mlflow_serves_the_champion)
        report["screenshots"] = smoke.step("screenshots", smoke.screenshots)
        before = smoke.step("inventory", smoke.inventory)
        smoke.step("down", lambda: smoke.compose("down"))
        smoke.step("up again", smoke.up)
        smoke.login()
        after = smoke.inventory()
        report["persistence"] = {"before": before, "after": after}
        if after != before:
            raise StackError(f"down and up lost something: {before} -> {after}")
        print(f"    all there after down and up: {after}")
        if args.faults:
            faults(smoke, report, args.fault)
        report["result"] = "passed"
    except Exception as exc:
        report["result"] = f"failed: {exc}"
        raise
    finally:
        out.write_text(json.dumps(report, indent=2, default=str))
        print(f"==> {report.get('result')}; steps and times in {out}")
        if not args.keep:
            with_stack = compose_stack.engine_answers()
            if with_stack:
                smoke.compose("down")


if __name__ == "__main__":
    main()

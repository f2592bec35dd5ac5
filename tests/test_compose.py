"""The compose stack stays in step with what the tests run locally, and stays hardened.

There is no Docker engine where the tests run, so nothing here starts the stack. Where the
``docker`` CLI has its compose plugin, ``docker compose config`` validates the file; everywhere,
the file is parsed and its variables resolved the way compose resolves them (``$$``, ``${VAR}``,
``${VAR:-default}``, ``${VAR:?message}``), so that the checks below hold on any machine:

- every secret comes from ``.env`` through ``${VAR:?message}``: no defaults, no literals, and a
  missing one stops the stack with a message that names it;
- ``.env`` is git-ignored, ``.env.example`` holds the names and no values;
- the Airflow services (with a triggerer, on the LocalExecutor) share one JWT secret;
- the Airflow and Spark services get the settings that ``scripts/env.sh`` sets locally, and only
  those plus the deployment's own, named below with the reason;
- the image runs as a non-root user that owns every volume it writes;
- every port is published on the host's loopback only (MLflow and the Spark master UI have no login);
- every service runs as a user that is not root, has a health check that probes it and a memory limit;
- MLflow tracks in its own PostgreSQL database; a ``gpu`` profile adds a Spark worker with GPUs.
"""

from __future__ import annotations

import functools
import json
import os
import re
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"
IMAGE = "lakeflow-mlops:latest"

AIRFLOW_SERVICES = {"airflow-init", "airflow-apiserver", "airflow-scheduler", "airflow-dag-processor",
                    "airflow-triggerer"}
SPARK_SERVICES = {"spark-master", "spark-worker", "spark-worker-gpu", "spark-connect"}

# What scripts/env.sh exports that the compose services do not set, and why.
LOCAL_ONLY = {
    "PATH": "the image's PATH already holds the installed tools",
    "PIPELINE_REPO": "the image sets it (Dockerfile ENV)",
    "SPARK_LOCAL_IP": "loopback only on one machine; containers reach each other by service name",
}
# What the compose Airflow services set that scripts/env.sh does not, and why.
DEPLOYMENT_ONLY = {
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "PostgreSQL here; locally Airflow's SQLite under AIRFLOW_HOME",
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": "tasks reach the API server by its service name",
    "AIRFLOW__CORE__PARALLELISM": "the task slots, sized to the scheduler container's memory; locally tests/stack.py "
                                  "sizes them to the machine's cores",
    "AIRFLOW__CORE__FERNET_KEY": "a secret from .env; locally one airflow.cfg serves every process",
    "AIRFLOW__API_AUTH__JWT_SECRET": "a secret from .env; locally one airflow.cfg serves every process",
    "AIRFLOW__API__SECRET_KEY": "a secret from .env; locally one airflow.cfg serves every process",
    "AIRFLOW_ADMIN_PASSWORD": "a secret from .env, the admin's login; locally the API server generates one",
    "PIPELINE_SPARK_REMOTE": "the spark-connect service; locally a Connect server only with make airflow CONNECT=1",
}
# What a Spark service may set besides the pipeline's settings.
SPARK_DEPLOYMENT_ONLY = {
    "SPARK_WORKER_OPTS": "the GPU worker's resources",
    "NVIDIA_DRIVER_CAPABILITIES": "what the NVIDIA runtime mounts into the GPU worker",
    "SPARK_DRIVER_MEMORY": "the Connect server's heap, where its local executors run too",
}
# Settings whose value differs on purpose even though the local value does not depend on a path.
DIFFERENT_VALUE = {"AIRFLOW_CONN_SPARK_DEFAULT": "local[2] locally, the standalone master here"}

SECRET_NAME = re.compile(r"PASSWORD|SECRET|FERNET|TOKEN|_KEY$")
REFERENCE = re.compile(r"\$(?:(?P<escaped>\$)|\{(?P<braced>[^}]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")
BRACED = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>.*))?", re.S)
CREDENTIALS_IN_URL = re.compile(r"://[^/:@\s]+:(?P<password>[^@\s]+)@")


class MissingVariable(Exception):
    """A ``${VAR:?message}`` whose variable is unset or empty: compose stops with the message."""


def _references(text: str) -> list[tuple[str, str | None, str]]:
    """The variables a compose string names: (name, operator or None, default or message)."""
    found = []
    for match in REFERENCE.finditer(text):
        if match["escaped"]:
            continue
        if match["bare"]:
            found.append((match["bare"], None, ""))
            continue
        ref = BRACED.fullmatch(match["braced"])
        assert ref and "$" not in (ref["arg"] or ""), f"a form of interpolation this test does not model: {match[0]}"
        found.append((ref["name"], ref["op"], ref["arg"] or ""))
    return found


def _interpolate(text: str, env: dict[str, str]) -> str:
    """``text`` with its variables resolved from ``env`` as compose resolves them."""

    def resolve(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        [(name, op, arg)] = _references(match[0])
        value = env.get(name)
        if op is None:
            return value or ""
        unset = value is None or (op.startswith(":") and value == "")
        if op.endswith("-"):
            return arg if unset else value
        if unset:
            raise MissingVariable(f"required variable {name} is missing a value: {arg}")
        return value

    return REFERENCE.sub(resolve, text)


def _resolved(node: Any, env: dict[str, str]) -> Any:
    """The parsed compose file with every string value interpolated (keys and comments are not)."""
    if isinstance(node, dict):
        return {key: _resolved(value, env) for key, value in node.items()}
    if isinstance(node, list):
        return [_resolved(value, env) for value in node]
    return _interpolate(node, env) if isinstance(node, str) else node


def _strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for value in node.values() for s in _strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in _strings(value)]
    return [node] if isinstance(node, str) else []


@functools.cache
def _raw() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def _env_example() -> tuple[dict[str, str], set[str]]:
    """``.env.example``'s variables with their values, and the optional ones it names in comments."""
    text = ENV_EXAMPLE.read_text()
    values = dict(re.findall(r"^([A-Z][A-Z0-9_]*)=(.*)$", text, re.M))
    optional = set(re.findall(r"^#\s*([A-Z][A-Z0-9_]*)=", text, re.M))
    return values, optional


@functools.cache
def _filled_env() -> dict[str, str]:
    """A value for each secret of ``.env.example``, as a user's ``.env`` has them."""
    return {name: secrets.token_hex(16) for name in _env_example()[0]}


def _compose() -> dict:
    """The compose file as compose sees it with a filled-in ``.env``."""
    return _resolved(_raw(), _filled_env())


@functools.cache
def _local_env() -> dict[str, str]:
    """What ``scripts/env.sh`` exports, sourced in an empty environment."""

    def exported(script: str) -> dict[str, str]:
        out = subprocess.run(["env", "-i", "bash", "-c", f"{script}env -0"], cwd=REPO, check=True,
                             capture_output=True, text=True).stdout
        return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)

    shell = exported("")
    return {k: v for k, v in exported("source scripts/env.sh && ").items() if k not in shell}


def _published(port: str | int | dict) -> tuple[str, str]:
    """(host address, host port) of one ``ports`` entry; address "" means every interface."""
    if isinstance(port, dict):
        return port.get("host_ip", ""), str(port.get("published", ""))
    parts = str(port).split(":")
    if len(parts) == 3:
        return parts[0], parts[1]
    return "", parts[0] if len(parts) == 2 else ""


def _option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def _dockerfile() -> str:
    # Continuation lines joined, so that each instruction is one line.
    return re.sub(r"\\\n\s*", " ", (REPO / "Dockerfile").read_text())


# --- one image, the same settings as the local stack --------------------------------------------


def test_every_project_service_runs_the_one_image():
    services = _compose()["services"]
    ours = {name: s for name, s in services.items() if name != "postgres"}
    assert {s["image"] for s in ours.values()} == {IMAGE}
    # Each names the build, so that `up` builds the image instead of pulling it from a registry.
    assert all(s.get("build") == "." for s in ours.values())


def test_airflow_services_get_the_variables_env_sh_sets():
    exported = set(_local_env()) - set(LOCAL_ONLY)
    for name in sorted(AIRFLOW_SERVICES):
        env = _compose()["services"][name]["environment"]
        missing = exported - set(env)
        assert not missing, f"{name} lacks {missing}"
        conn = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
        assert conn["conn_type"] == "spark" and conn["host"].startswith("spark://spark-master:")


def test_compose_and_local_stacks_name_the_same_settings():
    local = set(_local_env())
    assert set(LOCAL_ONLY) <= local, "LOCAL_ONLY names something scripts/env.sh no longer sets"
    assert re.search(r"^ENV .*\bPIPELINE_REPO=/opt/pipeline\b", _dockerfile(), re.M)
    services = _compose()["services"]
    for name in sorted(AIRFLOW_SERVICES):
        named = set(services[name]["environment"])
        assert named - local - set(DEPLOYMENT_ONLY) == set(), f"{name} sets what the local stack does not"
        assert local - set(LOCAL_ONLY) - named == set(), f"{name} lacks what the local stack sets"
        assert set(DEPLOYMENT_ONLY) <= named, f"{name} lacks a deployment setting"
    pipeline = {n for n in local if not n.startswith("AIRFLOW")} - set(LOCAL_ONLY)
    for name in sorted(SPARK_SERVICES):
        named = set(services[name]["environment"])
        assert named - set(SPARK_DEPLOYMENT_ONLY) == pipeline, f"{name}'s pipeline settings differ from the local ones"


def test_the_local_stack_restarts_airflow_components_as_compose_does(tmp_path, monkeypatch):
    """Compose restarts every Airflow service that exits (``restart: unless-stopped``); the local
    stack (``tests/stack.py``, ``make airflow``) does the same in ``check_alive``: a component that
    exited is started again and recorded, not sooner than the delay after its last restart; one
    killed on purpose stays down until started; a crash loop is reported instead of restarted."""
    from tests import airflow_server
    from tests.airflow_server import AirflowError, AirflowServer

    services = _compose()["services"]
    airflow = [name for name in services if name.startswith("airflow-") and name != "airflow-init"]
    assert len(airflow) == 4 and {services[name]["restart"] for name in airflow} == {"unless-stopped"}

    monkeypatch.setattr(airflow_server, "MAX_RESTARTS", 2)
    server = AirflowServer(url="", home=tmp_path, logs={"dag-processor": tmp_path / "dag-processor.out"},
                           processes={}, commands={"dag-processor": ["sh", "-c", "exit 3"]}, restart=True)

    def exited() -> None:
        server.processes["dag-processor"].wait(timeout=10)

    server.start("dag-processor")
    exited()
    server.check_alive()  # started again
    assert [(name, code) for name, code, _ in server.restarts] == [("dag-processor", 3)]
    exited()
    server.check_alive()  # within RESTART_DELAY: left down for now
    assert len(server.restarts) == 1
    monkeypatch.setattr(airflow_server, "RESTART_DELAY", 0)
    server.check_alive()
    assert len(server.restarts) == 2
    assert "exited with code 3: started again (restart policy)" in (tmp_path / "dag-processor.out").read_text()
    exited()
    with pytest.raises(AirflowError, match="dag-processor exited with code 3"):
        server.check_alive()  # a third exit within the window: a crash loop

    server.restarts.clear()
    server.commands["dag-processor"] = ["sleep", "30"]
    server.start("dag-processor")
    server.kill("dag-processor")  # on purpose (a test's kill): down until started
    server.check_alive()
    assert server.restarts == [] and server.processes["dag-processor"].poll() is not None


def test_settings_that_do_not_depend_on_a_path_have_the_local_value():
    fixed = {n: v for n, v in _local_env().items()
             if str(REPO) not in v and n not in LOCAL_ONLY and n not in DIFFERENT_VALUE}
    assert {"AIRFLOW__CORE__EXECUTOR", "MLFLOW_UI_URL", "GX_ANALYTICS_ENABLED"} <= set(fixed)
    env = _compose()["services"]["airflow-scheduler"]["environment"]
    assert {n: env[n] for n in fixed} == fixed


def test_spark_cluster_is_started_with_spark_class_like_the_tests():
    services = _compose()["services"]
    assert "org.apache.spark.deploy.master.Master" in services["spark-master"]["command"]
    for name in ("spark-worker", "spark-worker-gpu"):
        worker = services[name]["command"]
        assert "org.apache.spark.deploy.worker.Worker" in worker and "spark://spark-master:7077" in worker


def test_nightly_jobs_share_the_spark_connect_service():
    """The Airflow services give the jobs the spark-connect service's address; that service runs the
    project's own server module on the port named, listening beyond loopback inside the compose
    network only (nothing published), and the scheduler, whose tasks open sessions there, waits for
    it to be healthy."""
    from jobs.runtime.connect_server import SERVER_CLASS, command

    services = _compose()["services"]
    remote = urlparse(services["airflow-scheduler"]["environment"]["PIPELINE_SPARK_REMOTE"])
    assert remote.scheme == "sc" and remote.hostname in services
    server = services[remote.hostname]
    argv = server["command"]
    assert argv[:3] == ["python", "-m", "jobs.runtime.connect_server"]
    options = dict(zip(argv[3::2], argv[4::2], strict=True))
    assert options["--port"] == str(remote.port) and options["--host"] == "0.0.0.0"
    assert "ports" not in server, "a Connect server has no login: never publish it"
    assert "lake:/data" in server["volumes"]
    assert services["airflow-scheduler"]["depends_on"]["spark-connect"] == {"condition": "service_healthy"}
    assert services["airflow-scheduler"]["depends_on"]["airflow-init"] == {
        "condition": "service_completed_successfully"}
    # What the module starts with those options: spark-submit of the server class, bound as asked.
    line = command(int(options["--port"]), options["--master"], options["--host"])
    assert SERVER_CLASS in line and f"spark.connect.grpc.binding.address={options['--host']}" in line
    assert f"spark.connect.grpc.binding.port={remote.port}" in line


def test_dockerfile_copies_what_the_services_use():
    dockerfile = _dockerfile()
    for folder in ("jobs", "orchestration", "dags", "plugins", "scripts"):
        assert f"COPY {folder} ./{folder}" in dockerfile
        assert (REPO / folder).is_dir()
    env = _compose()["services"]["airflow-scheduler"]["environment"]
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/pipeline/dags"


# --- the file is valid, and refuses to start without its secrets ---------------------------------


def _compose_clis() -> dict[str, list[str]]:
    """The compose command lines installed here: v2 (the docker CLI's plugin) and v1 (``docker-compose``)."""
    found = {}
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        found["v2"] = [docker, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy:
        version = subprocess.run([legacy, "version", "--short"], capture_output=True, text=True).stdout.strip()
        if version.startswith("1."):
            found["v1"] = [legacy]
    return found


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_docker_compose_config_accepts_a_filled_env_and_refuses_an_empty_one(tmp_path, version):
    """The file is valid for Docker Compose v2 and v1 alike (``make compose-smoke`` says which ran)."""
    if version not in _compose_clis():
        pytest.skip(f"no Docker Compose {version} here (v2: the docker CLI's compose plugin; v1: docker-compose): "
                    "test_compose_file_resolves_and_is_well_formed checks the structure")
    cli = [*_compose_clis()[version], "--project-directory", str(REPO), "-f", str(COMPOSE_FILE)]
    # The caller's own environment must not fill in what the env file lacks.
    env = {k: v for k, v in os.environ.items() if k not in _filled_env()}
    filled = tmp_path / "filled.env"
    filled.write_text("".join(f"{k}={v}\n" for k, v in _filled_env().items()))
    for profile in ([], ["--profile", "gpu"]):
        run = subprocess.run([*cli, "--env-file", str(filled), *profile, "config", "--quiet"],
                             env=env, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        assert "will be ignored" not in run.stderr, run.stderr  # e.g. v1 on `configs:` outside a swarm
    empty = tmp_path / "empty.env"
    empty.write_text("")
    run = subprocess.run([*cli, "--env-file", str(empty), "config", "--quiet"], env=env, capture_output=True, text=True)
    assert run.returncode != 0 and ".env.example" in run.stderr, run.stderr


def test_compose_file_resolves_and_is_well_formed():
    compose = _compose()
    services, volumes, configs = compose["services"], set(compose["volumes"]), set(compose.get("configs", {}))
    assert set(services) == AIRFLOW_SERVICES | SPARK_SERVICES | {"postgres", "mlflow"}
    for name, service in services.items():
        assert "image" in service, name
        assert all("${" not in s for s in _strings(service)), f"{name} has an unresolved variable"
        assert set(service.get("depends_on", [])) <= set(services), f"{name} depends on an unknown service"
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            assert source.startswith(("/", ".")) or source in volumes, f"{name} mounts an undeclared volume {source}"
        assert {c["source"] for c in service.get("configs", [])} <= configs, f"{name} uses an undeclared config"
        command = service.get("command")
        assert command is None or isinstance(command, list), f"{name}: exec form, no shell parsing of the command"
    init = services["airflow-init"]
    assert init["restart"] == "no"
    for name in AIRFLOW_SERVICES - {"airflow-init"}:
        assert services[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
    assert init["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_without_env_each_secret_stops_the_stack_with_a_message_naming_it():
    names = set(_filled_env())
    assert names, ".env.example names no secret"
    for missing in sorted(names):
        env = {k: v for k, v in _filled_env().items() if k != missing}
        with pytest.raises(MissingVariable) as stopped:
            _resolved(_raw(), env)
        assert missing in str(stopped.value) and ".env.example" in str(stopped.value)
        with pytest.raises(MissingVariable):  # an empty value is refused too (the `:` of `:?`)
            _resolved(_raw(), {**env, missing: ""})


# --- no default secrets --------------------------------------------------------------------------


def test_no_default_secrets_anywhere_in_compose():
    required, optional = _env_example()
    assert all(value == "" for value in required.values()), ".env.example must hold names, not values"
    assert all(SECRET_NAME.search(name) for name in required), "a variable that is no secret: document it as optional"
    references = [ref for s in _strings(_raw()) for ref in _references(s)]
    for name, op, _ in references:
        if name in required or SECRET_NAME.search(name):
            assert name in required, f"{name} looks like a secret: list it in .env.example"
            assert op == ":?", f"{name} must be required with ${{{name}:?message}}, not {op or 'plain'}"
        else:
            assert name in optional, f"{name} is not documented in .env.example"
    assert {name for name, _, _ in references} >= set(required), "a secret of .env.example is never used"
    for name, service in _raw()["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if SECRET_NAME.search(key):
                assert REFERENCE.fullmatch(str(value)), f"{name}: {key} must come from .env, not be written here"
        for s in _strings(service):
            for url in CREDENTIALS_IN_URL.finditer(s):
                assert REFERENCE.fullmatch(url["password"]), f"{name}: a password written into {s}"


def test_env_is_git_ignored_and_the_example_is_not():
    git = shutil.which("git")
    if git is None or subprocess.run([git, "rev-parse"], cwd=REPO, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    assert subprocess.run([git, "check-ignore", "-q", ".env"], cwd=REPO).returncode == 0
    assert subprocess.run([git, "check-ignore", "-q", ".env.example"], cwd=REPO).returncode == 1


# --- the image, the network, the databases ---------------------------------------------------------


def test_image_runs_as_a_non_root_user_that_owns_what_the_services_write():
    dockerfile = _dockerfile()
    users = re.findall(r"^USER\s+(\S+)", dockerfile, re.M)
    assert users, "the Dockerfile sets no USER: the services would run as root"
    uid = users[-1].split(":")[0]
    assert uid not in ("root", "0") and uid.isdigit(), f"USER {users[-1]}: numeric and not root"
    assert re.search(rf"useradd .*--uid {uid}\b", dockerfile), f"no user with uid {uid} is created"
    [owned] = re.findall(r"chown -R \S+ ([^&\n]+)", dockerfile)
    owned_dirs = [Path(p) for p in owned.split()]

    def writable(path: str) -> bool:
        return any(Path(path) == d or d in Path(path).parents for d in owned_dirs)

    for name, service in _compose()["services"].items():
        if service["image"] != IMAGE:
            continue
        for mount in service.get("volumes", []):
            assert writable(mount.split(":")[1]), f"{name}: {mount} is not owned by the image's user"
        command = service.get("command") or []
        if "org.apache.spark.deploy.worker.Worker" in command:
            assert writable(_option(command, "--work-dir")), f"{name}: the worker's --work-dir is root's"
    assert writable(_compose()["services"]["airflow-scheduler"]["environment"]["AIRFLOW_HOME"])


def test_every_port_is_published_on_loopback_only():
    services = _compose()["services"]
    assert services["mlflow"].get("ports"), "the MLflow UI should be reachable on the host's loopback"
    assert services["airflow-apiserver"].get("ports"), "the Airflow UI should be reachable on the host's loopback"
    for name, service in services.items():
        for port in service.get("ports", []):
            address, _ = _published(port)
            assert address == "127.0.0.1", f"{name} publishes {port} beyond the host's loopback"
    for name in ("postgres", "spark-worker", "spark-worker-gpu"):
        assert not services[name].get("ports"), f"{name} is for the stack's own services only"


def test_every_service_runs_unprivileged_with_a_health_check_and_a_memory_limit():
    services = _compose()["services"]
    for name, service in services.items():
        user = service.get("user")
        if service["image"] == IMAGE:
            assert user is None, f"{name}: the image's own user (Dockerfile USER) is the one that owns its folders"
        else:
            assert user and user.split(":")[0] not in ("root", "0"), f"{name} would run as root"
        assert re.fullmatch(r"\d+[mg]", str(service.get("mem_limit", ""))), f"{name} states no memory limit"
        if name == "airflow-init":
            continue  # a one-shot: depends_on waits for it to exit 0
        test = service.get("healthcheck", {}).get("test")
        assert test and test[0] == "CMD", f"{name} has no health check (exec form)"
        if service["image"] == IMAGE:
            assert test[1:3] == ["python", "/opt/pipeline/scripts/healthcheck.py"], name
            assert (REPO / "scripts/healthcheck.py").exists()
    for name in ("airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"):
        assert services[name]["healthcheck"]["test"][3] == "airflow-job", f"{name}: a live job's heartbeat"


def test_mlflow_answers_the_host_name_the_services_use():
    services = _compose()["services"]
    tracking = services["airflow-scheduler"]["environment"]["MLFLOW_TRACKING_URI"]
    host = re.match(r"https?://([^/]+)", tracking)[1]
    assert host.split(":")[0] == "mlflow"
    # Without it in --allowed-hosts, MLflow's DNS-rebinding guard answers 403 to every service.
    allowed = _option(services["mlflow"]["command"], "--allowed-hosts").split(",")
    assert host in allowed and "*" not in allowed


def test_mlflow_tracks_in_its_own_postgres_database():
    compose = _compose()
    mlflow = compose["services"]["mlflow"]
    assert "--backend-store-uri" not in mlflow["command"], "the URI holds a password: pass it in the environment"
    backend = mlflow["environment"]["MLFLOW_BACKEND_STORE_URI"]
    assert re.fullmatch(r"postgresql\+psycopg2://mlflow:[^@]+@postgres/mlflow", backend)
    assert mlflow["depends_on"]["postgres"]["condition"] == "service_healthy"
    airflow_db = compose["services"]["airflow-scheduler"]["environment"]["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert re.fullmatch(r"postgresql\+psycopg2://airflow:[^@]+@postgres/airflow", airflow_db)
    postgres = compose["services"]["postgres"]
    # A bind mount: Docker Compose v1 ignores `configs:` outside a swarm.
    [init] = [m for m in postgres["volumes"] if ":/docker-entrypoint-initdb.d/" in m]
    source, target, mode = init.split(":")
    assert target.endswith(".sh") and mode == "ro"
    script = (REPO / source).read_text()
    for role, password in (("airflow", "AIRFLOW_DB_PASSWORD"), ("mlflow", "MLFLOW_DB_PASSWORD")):
        assert re.search(rf'^create_database {role} "\${password}"$', script, re.M)
        assert postgres["environment"][password] == _filled_env()[password]
    assert "-h" in postgres["healthcheck"]["test"], "a socket check passes while the init scripts still run"


# --- Airflow's processes, the GPU profile -------------------------------------------------------------


def test_airflow_runs_each_component_with_one_jwt_secret_on_the_local_executor():
    services = _compose()["services"]
    assert {n for n in services if n.startswith("airflow-")} == AIRFLOW_SERVICES
    commands = {tuple(services[n]["command"]) for n in AIRFLOW_SERVICES - {"airflow-init"}}
    assert commands == {("airflow", c) for c in ("api-server", "scheduler", "dag-processor", "triggerer")}
    raw = _raw()["services"]
    for key in ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__CORE__FERNET_KEY", "AIRFLOW__API__SECRET_KEY"):
        written = {raw[n]["environment"][key] for n in AIRFLOW_SERVICES}
        assert len(written) == 1, f"{key} differs between the Airflow services"
        [(_, op, _)] = _references(written.pop())
        assert op == ":?"
    for name in AIRFLOW_SERVICES:
        assert services[name]["environment"]["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"


def test_gpu_profile_adds_a_spark_worker_that_advertises_nvidia_gpus():
    services = _compose()["services"]
    assert [n for n, s in services.items() if s.get("profiles")] == ["spark-worker-gpu"], \
        "everything else starts with a plain `docker compose up`"
    worker = services["spark-worker-gpu"]
    assert worker["profiles"] == ["gpu"]
    [device] = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    opts = dict(re.findall(r"-D(\S+?)=(\S+)", worker["environment"]["SPARK_WORKER_OPTS"]))
    assert opts["spark.worker.resource.gpu.amount"] == str(device["count"])
    script = opts["spark.worker.resource.gpu.discoveryScript"]
    assert script == "/opt/pipeline/jobs/runtime/gpu_discovery.sh"  # the image's copy of jobs/ (Dockerfile COPY)
    assert os.access(REPO / "jobs/runtime/gpu_discovery.sh", os.X_OK)
    # The same count for the reservation and the worker's advertised amount: one variable.
    raw = _raw()["services"]["spark-worker-gpu"]
    assert {n for n, _, _ in _references(raw["environment"]["SPARK_WORKER_OPTS"])} == \
        {n for n, _, _ in _references(str(raw["deploy"]["resources"]["reservations"]["devices"][0]["count"]))}

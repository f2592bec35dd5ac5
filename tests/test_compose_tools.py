"""The compose stack's tools, without an engine: which base images the stack needs and how the
stand-ins are built (``scripts/base_images.py``), the wheelhouse the image installs from
(``scripts/compose_stack.py``), the services' health checks (``scripts/healthcheck.py``), the
smoke's override and pipelines (``tests/deployed/compose_smoke.py``), the first landing of every
pipeline's example data (``scripts/land_examples.sh``) and how the ``compose`` marker is selected.
``make compose-smoke`` runs them for real."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def _load(name: str):
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(REPO / "scripts"))


base_images = _load("base_images")
healthcheck = _load("healthcheck")
compose_stack = _load("compose_stack")


# --- base images ---------------------------------------------------------------------------------


def test_dockerfile_images_are_its_froms_without_its_own_stages():
    dockerfile = """\
FROM python:3.11-slim-bookworm AS build
RUN true
FROM --platform=linux/amd64 debian:bookworm
COPY --from=build /x /x
FROM build
FROM scratch
"""
    assert base_images.dockerfile_images(dockerfile) == ["python:3.11-slim-bookworm", "debian:bookworm"]


def test_compose_images_are_those_no_service_builds():
    compose = {"services": {"a": {"image": "ours:latest", "build": "."}, "b": {"image": "postgres:15-bookworm"},
                            "c": {"image": "postgres:15-bookworm"}, "d": {"build": "."}}}
    assert base_images.compose_images(compose) == ["postgres:15-bookworm"]


def test_the_stack_needs_exactly_the_images_that_have_stand_ins():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    needed = base_images.required_images(compose, (REPO / "Dockerfile").read_text())
    assert needed == ["python:3.11-slim-bookworm", "postgres:15-bookworm"]
    assert set(needed) == set(base_images.STANDINS), "a base image without a stand-in, or a stand-in for nothing"
    for image in needed:
        folder = base_images.standin_dir(image)
        dockerfile = (folder / "Dockerfile").read_text()
        assert base_images.dockerfile_images(dockerfile) == [base_images.ROOT_IMAGE], image
        for copied in (line.split()[1] for line in dockerfile.splitlines() if line.startswith("COPY ")):
            assert (folder / copied).exists(), f"{image}: COPY {copied} is not in {folder}"


def test_plan_builds_the_root_image_first_and_skips_what_exists():
    images = ["python:3.11-slim-bookworm", "postgres:15-bookworm", "no-stand-in:1"]
    nothing = base_images.plan(images, present=lambda image: False)
    assert [s.image for s in nothing] == [base_images.ROOT_IMAGE, "python:3.11-slim-bookworm", "postgres:15-bookworm"]
    assert nothing[0].commands[-1] == ("docker", "import", "--change", 'CMD ["bash"]', "-", base_images.ROOT_IMAGE)
    build = nothing[1].commands[0]
    assert build[:5] == ("docker", "build", "--pull=false", "-t", "python:3.11-slim-bookworm")
    # the official postgres image is there (a machine with a registry): only python's stand-in
    some = base_images.plan(images, present=lambda image: image == "postgres:15-bookworm")
    assert [s.image for s in some] == [base_images.ROOT_IMAGE, "python:3.11-slim-bookworm"]
    # the root image is there too: no debootstrap
    rooted = base_images.plan(images, present=lambda image: image == base_images.ROOT_IMAGE)
    assert [s.image for s in rooted] == ["python:3.11-slim-bookworm", "postgres:15-bookworm"]
    assert base_images.plan(images, present=lambda image: True) == []
    assert len(base_images.plan(images, present=lambda image: True, rebuild=True)) == 3


def test_debootstrap_makes_a_minimal_bookworm_from_debians_mirror(tmp_path):
    command = base_images.debootstrap_command(tmp_path / "root")
    assert command == ("debootstrap", "--variant=minbase", "bookworm", str(tmp_path / "root"),
                       "http://deb.debian.org/debian")


def test_the_postgres_stand_in_keeps_the_official_images_contract():
    folder = base_images.standin_dir("postgres:15-bookworm")
    dockerfile, entrypoint = (folder / "Dockerfile").read_text(), (folder / "docker-entrypoint.sh").read_text()
    assert "--uid 999" in dockerfile and "--gid 999" in dockerfile  # the official image's postgres user
    assert "PGDATA=/var/lib/postgresql/data" in dockerfile
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    postgres = compose["services"]["postgres"]
    assert "postgres:/var/lib/postgresql/data" in postgres["volumes"]
    for variable in ("POSTGRES_PASSWORD", "POSTGRES_USER", "POSTGRES_DB", "/docker-entrypoint-initdb.d/"):
        assert variable in entrypoint
    assert (folder / "docker-entrypoint.sh").stat().st_mode & 0o111


# --- the wheelhouse -------------------------------------------------------------------------------


def test_constraints_pin_what_the_venv_holds_but_the_project_itself():
    freeze = "apache-airflow==3.3.2\n-e git+https://x#egg=y\nlakeflow-mlops==0.1.0\ntorch==2.13.0+cpu\n" \
             "foo @ file:///tmp/foo.whl\n# a comment\n"
    assert compose_stack.constraints(freeze) == "apache-airflow==3.3.2\ntorch==2.13.0+cpu\n"


def test_the_build_reads_only_the_wheelhouse_and_the_dockerfile_declares_what_it_passes():
    args = compose_stack.build_args("http://172.17.0.1:47811")
    pairs = dict(args[i + 1].split("=", 1) for i in range(0, len(args), 2))
    assert pairs == {"PIP_FIND_LINKS": "http://172.17.0.1:47811/", "PIP_CONSTRAINT": "http://172.17.0.1:47811/constraints.txt",
                     "PIP_TRUSTED_HOST": "172.17.0.1", "PIP_NO_INDEX": "1"}
    dockerfile = (REPO / "Dockerfile").read_text()
    for name in pairs:
        assert f"\nARG {name}\n" in dockerfile, f"the Dockerfile does not declare ARG {name}"


def test_each_pipeline_s_packages_reach_the_venv_the_wheelhouse_and_the_image(tmp_path, monkeypatch):
    """A pipeline's packages.txt (what its landing needs, installed without dependencies): make install
    installs it, the wheelhouse downloads it, and the image installs it after copying pipelines/."""
    found = sorted((REPO / "pipelines").glob("*/packages.txt"))
    assert REPO / "pipelines" / "bikeshare" / "packages.txt" in found
    commands = []
    monkeypatch.setattr(compose_stack, "run", lambda command, **kw: commands.append(command) or
                        type("Done", (), {"stdout": "islp==0.6.0\n"})())
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "pip").touch()
    compose_stack.build_wheelhouse(venv, tmp_path / "wheels")
    downloaded = [c for c in commands if c[1:2] == ["download"] and "-r" in c]
    assert [c[c.index("-r") + 1] for c in downloaded] == [str(f) for f in found]
    assert all("--no-deps" in c for c in downloaded)
    dockerfile = (REPO / "Dockerfile").read_text()
    assert dockerfile.index("COPY pipelines") < dockerfile.index('--no-deps -r "$packages"')
    make = subprocess.run(["make", "-n", "-W", "pyproject.toml", "install"], cwd=REPO, capture_output=True, text=True)
    assert all(f"-r pipelines/{f.parent.name}/packages.txt" in make.stdout for f in found), make.stdout


# --- the secrets ------------------------------------------------------------------------------------


def test_a_written_env_gives_every_variable_the_stack_requires_a_fresh_value_of_its_kind(tmp_path, monkeypatch):
    """Every ``${VAR:?...}`` of docker-compose.yml gets a value, each one different, of the form
    .env.example asks for (a Fernet key Airflow can use, hex where it goes into a database URL);
    the file is its owner's only, never printed, and an existing .env is never overwritten."""
    import base64
    import re
    import stat

    from cryptography.fernet import Fernet

    lines = (REPO / "docker-compose.yml").read_text().splitlines()
    required = {name for line in lines if not line.lstrip().startswith("#")
                for name in re.findall(r"\$\{(\w+):\?", line)}
    assert len(required) == 7, required
    path = tmp_path / ".env"
    said = compose_stack.ensure_env(True, path=path)
    values = dict(line.split("=", 1) for line in path.read_text().splitlines()
                  if "=" in line and not line.startswith("#"))
    assert required <= set(values) and all(values.values())
    assert len(set(values.values())) == len(values)  # each its own
    assert not any(value in said for value in values.values())  # the message names no secret
    Fernet(values["AIRFLOW_FERNET_KEY"].encode())  # raises on a key Airflow could not use
    assert len(base64.urlsafe_b64decode(values["AIRFLOW_FERNET_KEY"])) == 32
    for name in ("POSTGRES_PASSWORD", "AIRFLOW_DB_PASSWORD", "MLFLOW_DB_PASSWORD"):
        assert re.fullmatch(r"[0-9a-f]{64}", values[name]), name
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "# SPARK_WORKER_GPUS=1" in path.read_text()  # an optional, commented variable left so
    before = path.read_text()
    assert compose_stack.ensure_env(True, path=path) == "secrets from .env" and path.read_text() == before
    # no .env and no yes: nothing written, the way to get one said
    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # not a terminal: no question asked
    with pytest.raises(compose_stack.StackError, match="WRITE_ENV=1.*copy .env.example"):
        compose_stack.ensure_env(None, path=tmp_path / "none" / ".env")
    assert not (tmp_path / "none").exists()


# --- health checks ----------------------------------------------------------------------------------


def test_health_answers_are_judged_by_their_json_or_text():
    body = b'{"metadatabase": {"status": "healthy"}, "scheduler": {"status": "unhealthy"}}'
    healthcheck.check_answer(body, expect_json="metadatabase.status=healthy")
    with pytest.raises(healthcheck.Unhealthy, match="unhealthy"):
        healthcheck.check_answer(body, expect_json="scheduler.status=healthy")
    with pytest.raises(healthcheck.Unhealthy, match="no triggerer.status"):
        healthcheck.check_answer(body, expect_json="triggerer.status=healthy")
    with pytest.raises(healthcheck.Unhealthy, match="not JSON"):
        healthcheck.check_answer(b"<html>", expect_json="status=ALIVE")
    healthcheck.check_answer(b"OK", expect_text="OK")
    with pytest.raises(healthcheck.Unhealthy):
        healthcheck.check_answer(b"starting", expect_text="OK")


def test_an_airflow_job_is_healthy_while_its_heartbeat_is_fresh():
    healthcheck.heartbeat_verdict(5.0, "SchedulerJob", 60)
    with pytest.raises(healthcheck.Unhealthy, match="no running TriggererJob"):
        healthcheck.heartbeat_verdict(None, "TriggererJob", 60)
    with pytest.raises(healthcheck.Unhealthy, match="61 s old"):
        healthcheck.heartbeat_verdict(61.0, "DagProcessorJob", 60)
    dsn = healthcheck.psycopg2_dsn("postgresql+psycopg2://airflow:secret@postgres/airflow")
    assert dsn == "postgresql://airflow:secret@postgres/airflow"
    with pytest.raises(healthcheck.Unhealthy):
        healthcheck.psycopg2_dsn("sqlite:////tmp/airflow.db")


def test_a_dead_service_is_unhealthy_with_its_reason(capsys):
    assert healthcheck.main(["http", "http://127.0.0.1:9/"]) == 1  # the discard port: nothing listens
    assert "unhealthy" in capsys.readouterr().err


# --- the smoke --------------------------------------------------------------------------------------


def test_the_smoke_points_the_job_services_at_its_pipelines_and_leaves_init_alone():
    from tests.deployed import compose_smoke

    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose_smoke.override()["services"]
    assert set(services) <= set(compose["services"]) and "airflow-init" not in services
    assert {s["environment"]["PIPELINES_DIR"] for s in services.values()} == {compose_smoke.PIPELINES_IN_LAKE}
    assert compose_smoke.merged({"a": {"b": 1, "c": 2}, "d": [1]}, {"a": {"b": 3}, "d": []}) == \
        {"a": {"b": 3, "c": 2}, "d": []}


def test_the_smoke_serves_both_bundled_pipelines_each_under_a_model_of_its_own():
    """Its deployment's files load against the bundled pipelines and name the image's copies."""
    from jobs.config import load_config
    from jobs.config.files import PIPELINES
    from tests.deployed import compose_smoke

    models = set()
    for name, changes in (("flights", compose_smoke.SMOKE_CONFIG), ("bikeshare", compose_smoke.BIKES_CONFIG)):
        text = yaml.safe_load(compose_smoke.pipeline_file(name, changes))
        assert text["pipeline"] == f"/opt/pipeline/pipelines/{name}"
        models.add(load_config(PIPELINES / name, profiles=(), overlays=(), changes=changes).train.model_name)
    assert models == {compose_smoke.MODEL, compose_smoke.BIKES_MODEL}


def test_init_lands_every_pipeline_with_a_landing_once(tmp_path):
    """``scripts/land_examples.sh`` (airflow-init's): a lake with a raw zone is left alone; a pipeline
    folder whose demo.env names its landing is landed."""
    folders = sorted(p.parent.name for p in (REPO / "pipelines").glob("*/demo.env"))
    assert {"flights", "bikeshare"} <= set(folders)
    for name in folders:
        (tmp_path / name / "raw").mkdir(parents=True)
    done = subprocess.run(["bash", str(REPO / "scripts/land_examples.sh")], capture_output=True, text=True,
                          env={**os.environ, "LAKE_ROOT": str(tmp_path)}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("left as it is") == len(folders), done.stdout
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert "scripts/land_examples.sh" in " ".join(compose["services"]["airflow-init"]["command"])


@pytest.mark.parametrize(("markexpr", "selected"), [
    ("compose", True), ("compose or gpu", True), ("(compose)", True), ("", False), ("not compose", False),
    ("not e2e and not slow", False), ("not (compose)", False)])
def test_compose_tests_run_only_when_m_names_the_marker(markexpr, selected):
    from tests.conftest import compose_selected

    assert compose_selected(markexpr) is selected


def test_a_component_hung_past_the_limit_is_ended_so_that_the_engine_restarts_it():
    end = healthcheck.should_end
    assert not end(200.0, uptime=1000, end_after=None)  # no --end-after: only reported
    assert not end(30.0, uptime=1000, end_after=180)  # beating
    assert not end(None, uptime=60, end_after=180)  # starting: no job yet
    assert end(None, uptime=400, end_after=180)  # up for long, no running job
    assert end(200.0, uptime=400, end_after=180)  # its heartbeat stopped
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    for name in ("airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"):
        test = compose[name]["healthcheck"]["test"]
        assert "--end-after" in test and compose[name]["init"] is True, name  # PID 1 cannot be killed from inside

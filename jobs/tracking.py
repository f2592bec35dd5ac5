"""MLflow access shared by the jobs: the tracking URI, experiments, links a person can open."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.config import TRACKING_ENV, artifact_root, dag_id, environment, load_config, tracking_uri
from jobs.errors import DataError


def client():  # noqa: ANN201 - MlflowClient, imported lazily
    """An MlflowClient on the configured tracking URI (``MLFLOW_TRACKING_URI`` or the local default),
    its calls bounded by ``tracking.*`` (already applied in a job; an Airflow task applies them here)."""
    import mlflow
    from mlflow import MlflowClient

    load_config().tracking.apply()
    mlflow.set_tracking_uri(tracking_uri())
    return MlflowClient(tracking_uri())


@contextlib.contextmanager
def best_effort_calls(retries: int = 1, timeout: int = 10) -> Iterator[None]:
    """MLflow calls on the way out of a failure (ending a run as FAILED, saying why): the tracking
    server may be what failed, and the error in hand is what the job must report, so each call
    tries ``retries`` more times at most, for ``timeout`` s each, not ``tracking.*``'s minute."""
    bounded = {TRACKING_ENV["max_retries"]: str(retries), TRACKING_ENV["request_timeout"]: str(timeout)}
    with environment(**bounded):
        yield


class TrackingServerUnavailable(RuntimeError):
    """The tracking server does not answer. Not a data error: the task is retried."""


def check_tracking_server(uri: str | None = None, timeout: float = 10) -> None:
    """Fail at once, saying what to do, when the tracking server at ``uri`` (an http(s) URI; a
    database or file store has no server) does not answer its ``/health`` within ``timeout``."""
    import requests

    uri = uri or tracking_uri()
    if not uri.startswith(("http://", "https://")):
        return
    try:
        response = requests.get(f"{uri.rstrip('/')}/health", timeout=timeout)
        response.raise_for_status()
    except requests.RequestException as err:
        raise TrackingServerUnavailable(
            f"tracking server at {uri} not reachable: {type(err).__name__}: {err}. Start it with `make airflow` "
            "(this machine's stack), `docker compose up -d mlflow` (the compose stack) or `mlflow server "
            "--backend-store-uri <store> --serve-artifacts --host <host> --port <port>`, or point "
            "MLFLOW_TRACKING_URI at a running server (unset, the jobs use a local SQLite store)"
        ) from err


def ensure_experiment(name: str) -> str:
    """The experiment's id, creating it with artifacts under ``PIPELINE_MLFLOW_ARTIFACTS``.

    An explicit artifact location keeps artifacts in one place whatever the job's working folder.
    """
    from mlflow.exceptions import MlflowException

    mlflow_client = client()
    found = mlflow_client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    root = artifact_root()
    location = root if "://" in root else Path(root).resolve().as_uri()
    try:
        return mlflow_client.create_experiment(name, artifact_location=f"{location.rstrip('/')}/{name}")
    except MlflowException:  # created meanwhile by a concurrent run
        return mlflow_client.get_experiment_by_name(name).experiment_id


def run_url(experiment_id: str, run_id: str) -> str:
    """The run's page in the MLflow UI at ``MLFLOW_UI_URL``, or "" when that is not set."""
    ui = os.environ.get("MLFLOW_UI_URL")
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}" if ui else ""


def run_link(experiment_id: str, run_id: str) -> str:
    """Where a person can look at a run: the UI address when ``MLFLOW_UI_URL`` is set."""
    url = run_url(experiment_id, run_id)
    return url or f"run {run_id} in experiment {experiment_id} at {tracking_uri()} (set MLFLOW_UI_URL for a link)"


@dataclass(frozen=True)
class ModelRef:
    """A concrete registered model version, resolved once per run."""

    name: str
    version: str
    run_id: str

    @classmethod
    def of(cls, version: Any) -> ModelRef:
        """From an MLflow ``ModelVersion``."""
        return cls(name=version.name, version=str(version.version), run_id=version.run_id or "")


class NoModelError(DataError, LookupError):
    """No registered model version to score with."""


def champion_version(name: str) -> ModelRef:
    """The version the ``champion`` alias of ``name`` points at."""
    from jobs.registry import CHAMPION, current_champion

    found = current_champion(client(), name)
    if found is None:
        raise NoModelError(
            f"model {name!r} has no {CHAMPION!r} version at {tracking_uri()}: run the training pipeline "
            f"(airflow dags trigger {dag_id('train')}, or `make demo`); its first model becomes {CHAMPION}, "
            "or pass --model-version to score with a given version"
        )
    return ModelRef.of(found)


def code_version() -> dict[str, str]:
    """What code a run used: a digest of the ``jobs`` package's source (works in any image or
    checkout), plus the git commit when the package sits in a git checkout ("-dirty" when the
    package has uncommitted changes)."""
    import hashlib
    import subprocess

    import jobs

    package = Path(jobs.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.suffix in (".py", ".yaml") and p.is_file()):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    found = {"code_version": f"sha256:{digest.hexdigest()[:16]}"}
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", *args], cwd=package, capture_output=True, text=True, check=True,
                                  timeout=10).stdout.strip()

        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--", ".")
        found["git_commit"] = commit + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass  # not a git checkout (an image, an installed package), or no git
    return found

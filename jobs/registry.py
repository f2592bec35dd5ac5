"""A registered version's files, checked on the driver before anything is scored or compared.

A version whose artifacts were deleted, or whose files are unreadable, fails every run that loads
it the same way: it is a data error (:class:`DamagedModelError`, exit 65, not retried) that names
the model, the version, its artifact URI, what is wrong and what to do, found on the driver by
:func:`check_version` before any Spark work, never a Python worker's stack trace after the job
went on a different way. The check is cheap: the version's files are listed (no weights are
downloaded), its ``MLmodel`` is read, every file a flavor names (the pyfunc's pickled model, its
artifacts, its code, a flavor's data) must be there and not empty, and the small JSON artifacts
(a preprocessor's vocabularies) must parse. A weights file that is there but corrupt passes it;
it fails where the model is loaded: in the gate on the driver as the same data error
(:func:`load_version`), in a scoring Python worker as a fault whose line names the model
(:func:`jobs.scoring.predictor.load_model`).

What to do depends on who asked for the version (:data:`CHAMPION`, :data:`ASKED`,
:data:`CHALLENGER`): move the ``champion`` alias to a version that loads (the newest former
champion whose files pass the check is named in the command) or remove it; score with another
``--model-version``; restore or delete a challenger, which shadow scoring skips meanwhile.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from jobs.errors import DataError, headline

log = logging.getLogger(__name__)

# who asked for the version: what to do differs
CHAMPION = "champion"  # the alias the gate moves and the nightly jobs score with
ASKED = "asked for"  # a version named with --model-version
CHALLENGER = "challenger"  # a version scored in shadow
# a former champion's tag (jobs.selection.gate.DECISION and PROMOTED)
DECISION, PROMOTED = "gate_decision", "promoted"
MLMODEL = "MLmodel"
# the keys of an MLmodel flavor that name a file or folder of the model
FILE_KEYS = ("python_model", "data", "model_path", "pickled_model", "model_data", "code")
LOOKED_AT = 5  # former champions checked for one to suggest, newest first


# MLflow's answers for a model that does not exist and for an alias no version has
NO_SUCH_ALIAS = {"RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"}


def current_champion(client: Any, name: str) -> Any | None:
    """The version the ``champion`` alias points at, or None when there is none: no model ``name``,
    or no version of it with the alias. Any other failure (a tracking server that does not answer)
    raises: taken for "no champion", the gate would promote a version unopposed and the night's
    scoring would fail as a data error that is never retried."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_model_version_by_alias(name, CHAMPION)
    except MlflowException as err:
        if err.error_code in NO_SUCH_ALIAS:
            return None
        raise


class DamagedModelError(DataError):
    """A registered version whose files are missing or unreadable: every run would fail on it."""


def list_files(uri: str) -> dict[str, int | None]:
    """Every file under the artifact ``uri`` (its subfolders walked), by path relative to it, with
    its size when the store says. A folder that is not there lists nothing."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    repo = get_artifact_repository(uri)
    found: dict[str, int | None] = {}
    folders: list[str | None] = [None]
    while folders:
        for info in repo.list_artifacts(folders.pop()):
            if info.is_dir:
                folders.append(info.path)
            else:
                found[info.path] = info.file_size
    return found


def named_files(flavors: dict[str, Any]) -> list[str]:
    """The files and folders an MLmodel's ``flavors`` say the model is made of."""
    named = []
    for conf in flavors.values():
        if not isinstance(conf, dict):
            continue
        named.extend(conf[key] for key in FILE_KEYS if isinstance(conf.get(key), str))
        for artifact in (conf.get("artifacts") or {}).values():  # a pyfunc's artifacts
            if isinstance(artifact, dict) and isinstance(artifact.get("path"), str):
                named.append(artifact["path"])
    return named


def problem(uri: str) -> str | None:
    """What makes the model at ``uri`` unloadable, in words naming the file; None when its files
    pass (listed, ``MLmodel`` read, every file it names there and not empty, JSON artifacts parse).
    A store that does not answer raises: a fault, retried, not a damaged model."""
    from mlflow.models import Model
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    files = list_files(uri)
    if not files:
        return "no files there: the model's folder was deleted or moved"
    if MLMODEL not in files:
        return f"no {MLMODEL} file there (it holds {len(files)} other file(s)): the model's files are incomplete"
    repo = get_artifact_repository(uri)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            flavors = Model.load(repo.download_artifacts(MLMODEL, dst_path=tmp)).flavors
        except Exception as err:  # noqa: BLE001 - YAML or MLflow's own words; any of them: unreadable
            return f"its {MLMODEL} cannot be read ({headline(err)})"
        for name in named_files(flavors):
            path = name.strip("/")
            if path in files:
                if files[path] == 0:
                    return f"{path} is empty (its {MLMODEL} names it): the file was truncated"
                if path.endswith(".json"):
                    try:
                        json.loads(Path(repo.download_artifacts(path, dst_path=tmp)).read_text(encoding="utf-8"))
                    except (ValueError, UnicodeDecodeError) as err:
                        return f"{path} is not readable JSON ({err})"
            elif not any(f.startswith(f"{path}/") for f in files):
                return f"{path} is missing (its {MLMODEL} names it): the model's files are incomplete"
    return None


def check_version(client: Any, name: str, version: str, role: str) -> str:
    """The artifact URI of ``name`` version ``version`` (where the workers load it from), once its
    files pass :func:`problem`; else :class:`DamagedModelError` saying what to do as ``role``
    (:data:`CHAMPION`, :data:`ASKED`, :data:`CHALLENGER`) asks."""
    uri = client.get_model_version_download_uri(name, version)
    found = problem(uri)
    if found is not None:
        raise damaged(client, name, version, uri, found, role)
    return uri


def load_version(client: Any, name: str, version: str, role: str) -> Any:
    """The pyfunc of ``name`` version ``version``, on this process (the gate's comparison): its
    files checked first (:func:`check_version`), and a load that fails anyway (a corrupt weights
    file) the same :class:`DamagedModelError`. A store that does not answer stays a fault."""
    import mlflow.pyfunc
    import requests

    uri = check_version(client, name, version, role)
    try:
        return mlflow.pyfunc.load_model(uri)
    except (requests.RequestException, ConnectionError, TimeoutError):
        raise
    except Exception as err:
        raise damaged(client, name, version, uri, f"it does not load ({headline(err)})", role) from err


def damaged(client: Any, name: str, version: str, uri: str, found: str, role: str) -> DamagedModelError:
    """The data error for ``name`` version ``version`` (``role``) whose files at ``uri`` have the
    problem ``found``: what is wrong, then the command that gets the runs going again."""
    who = {CHAMPION: f"the {CHAMPION}", ASKED: "asked for with --model-version",
           CHALLENGER: "a challenger"}.get(role, role)
    return DamagedModelError(f"model {name!r} version {version} ({who}) cannot be loaded from its artifacts at "
                             f"{uri}: {found}. {remedy(client, name, version, role)}")


def remedy(client: Any, name: str, version: str, role: str) -> str:
    """What to do about a damaged version, by ``role``, with the command."""
    import mlflow

    mlflow_client = f"MlflowClient({mlflow.get_tracking_uri()!r})"  # the store this job used
    if role == CHALLENGER:
        return (f"Shadow scoring skips it (the champion's predictions stand) until its files are restored; to stop "
                f"trying it, delete the version: python -c \"from mlflow import MlflowClient; "
                f"{mlflow_client}.delete_model_version({name!r}, {version!r})\"")
    other = intact_former_champion(client, name, version)
    if role == ASKED:
        instead = f"version {other} (a former champion, its files intact)" if other else "a version that loads"
        return (f"Score with {instead}: --model-version {other or '<VERSION>'}, or leave --model-version out to "
                "use the champion")
    target = other or "<VERSION>"
    which = (f"version {other}, the newest former {CHAMPION} whose files are intact" if other
             else "a version whose files are intact (no former champion's are)")
    return (f"Move the {CHAMPION!r} alias to {which}: python -c \"from mlflow import MlflowClient; "
            f"{mlflow_client}.set_registered_model_alias({name!r}, {CHAMPION!r}, {target!r})\" (or on the version's "
            f"page in the MLflow UI), then run the task again; with no version that loads, remove the alias "
            f"(.delete_registered_model_alias({name!r}, {CHAMPION!r})) and train again: its first model becomes "
            f"{CHAMPION}")


def intact_former_champion(client: Any, name: str, version: str) -> str | None:
    """The newest version other than ``version`` that the gate once promoted and whose files pass
    :func:`problem` (up to :data:`LOOKED_AT` looked at), or None."""
    try:
        versions = client.search_model_versions(f"name='{name}'")
    except Exception:  # noqa: BLE001 - only a suggestion: the error it goes into is the news
        log.debug("listing the versions of %s failed", name, exc_info=True)
        return None
    former = sorted((v for v in versions
                     if str(v.version) != str(version) and (v.tags or {}).get(DECISION) == PROMOTED),
                    key=lambda v: int(v.version), reverse=True)
    for candidate in former[:LOOKED_AT]:
        try:
            if problem(client.get_model_version_download_uri(name, candidate.version)) is None:
                return str(candidate.version)
        except Exception:  # noqa: BLE001 - as above
            log.debug("checking %s version %s failed", name, candidate.version, exc_info=True)
    return None

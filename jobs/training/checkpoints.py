"""Per-epoch training state in the lake, and the MLflow run an interrupted attempt left to resume."""

from __future__ import annotations

import logging
from typing import Any

from jobs.lake.layout import CHECKPOINT_RUN, checkpoint_epochs, checkpoint_file

log = logging.getLogger("jobs.training.job")


def checkpointed_epochs(folder: str) -> int:
    """How many epochs the last checkpoint in ``folder`` has done (0: none)."""
    from jobs.lake.storage import list_files

    epochs = [checkpoint_epochs(uri.rsplit("/", 1)[1]) for uri in list_files(folder, ".pt")]
    return max((n for n in epochs if n is not None), default=0)


def save_checkpoint(folder: str, state: dict[str, Any]) -> None:
    """Write the training state after an epoch (weights, optimizer state, loss history, the
    epoch's metrics) as ``epoch-NNNN.pt``, atomically, then drop older checkpoints. The name says
    which epoch a file holds, so there is no index that could disagree with the files."""
    import io

    import torch

    from jobs.lake.storage import delete_file, list_files, write_bytes

    buffer = io.BytesIO()
    torch.save(state, buffer)
    latest = f"{folder}/{checkpoint_file(state['epochs_done'])}"
    write_bytes(latest, buffer.getvalue())
    for uri in list_files(folder, ".pt"):
        if uri != latest:
            delete_file(uri)


def load_checkpoint(folder: str) -> dict[str, Any] | None:
    """The last saved training state, or None when there is none."""
    import io

    import torch

    from jobs.lake.storage import read_bytes

    done = checkpointed_epochs(folder)
    data = read_bytes(f"{folder}/{checkpoint_file(done)}") if done else None
    return None if data is None else torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)


def resumable_run(mlflow_client: Any, checkpoint_dir: str) -> str | None:
    """The MLflow run an earlier attempt of this training opened and did not finish, if any.

    The attempt wrote the run's id next to its checkpoints; a run that is gone from the tracking
    store (or finished, which a successful attempt follows by removing the checkpoints) is not
    resumed, and the stale checkpoints are dropped.
    """
    from mlflow.exceptions import MlflowException

    from jobs.lake.storage import delete_dir, read_json

    saved = read_json(f"{checkpoint_dir}/{CHECKPOINT_RUN}")
    if not saved:
        return None
    try:
        status = mlflow_client.get_run(saved["run_id"]).info.status
    except MlflowException:
        status = None
    if status in (None, "FINISHED"):
        log.warning("dropping checkpoints of run %s (%s): %s", saved["run_id"], status or "not found", checkpoint_dir)
        delete_dir(checkpoint_dir)
        return None
    mlflow_client.update_run(saved["run_id"], status="RUNNING")
    return saved["run_id"]

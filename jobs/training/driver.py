"""The driver's side of a training: what the launching process does around the ranks. It reads
what ended them (:func:`rank_errors`, written by :func:`jobs.training.loop.note_rank_error`) and
turns it into the job's error (:func:`ranks_failed`), holds back their tracebacks in its output
(:func:`ranks_output_until_a_failure`), and runs :func:`jobs.training.loop.train_fn` in its own
process as a world of one (:func:`train_in_process`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from jobs.training.loop import DATA_ERROR_NOTE, RankDataError, train_fn

if TYPE_CHECKING:
    from jobs.training.rank import RankConfig


def ranks_failed(said: list[str]) -> Exception:
    """The driver's error for ranks that wrote ``said`` (:func:`rank_errors`): a :class:`RankDataError`
    (not retried) when any rank stopped on a data error, else a RuntimeError (a fault, retried)."""
    data = [line for line in said if line.split(": ", 1)[-1].startswith(DATA_ERROR_NOTE)]
    # The data error first: its peers' lines say only that it went away ("Connection closed by peer").
    text = f"training failed: {'; '.join([*data, *(line for line in said if line not in data)])}"
    return RankDataError(text) if data else RuntimeError(text)


def rank_errors(checkpoint_dir: str, *, clear: bool = False) -> list[str]:
    """The lines :func:`jobs.training.loop.note_rank_error` wrote for the ranks of the last attempt, rank by rank;
    with ``clear``, remove them (before an attempt starts)."""
    from jobs.lake.storage import delete_file, list_files, read_bytes

    found = []
    for path in list_files(checkpoint_dir, ".error"):
        if clear:
            delete_file(path)
        else:
            found.append((read_bytes(path) or b"").decode(errors="replace").strip())
    return found


class _HeldBack:
    """``stream`` until a line of it starts a Python traceback; from there on, lines only counted."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.held = stream, 0

    def write(self, text: str) -> int:
        if self.held or "Traceback (most recent call last):" in text:
            self.held += text.count("\n") or 1
            return len(text)
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding...
        return getattr(self.stream, name)


@contextmanager
def ranks_output_until_a_failure() -> Iterator[None]:
    """The ranks' output (TorchDistributor copies it to this process's stdout) up to a rank's
    traceback; below ``PIPELINE_LOG_LEVEL=DEBUG`` what follows (the rank's traceback, torchrun's
    own and its failure table: 50 lines and more) is held back and counted in one line: the rank's
    error is told in one line by the job (:func:`jobs.training.loop.note_rank_error`, :func:`ranks_failed`)."""
    import os
    import sys

    if os.environ.get("PIPELINE_LOG_LEVEL", "INFO").upper() == "DEBUG":
        yield
        return
    stream = sys.stdout
    sys.stdout = held = _HeldBack(stream)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout = stream
        if held.held:
            stream.write(f"({held.held} lines of the ranks' output from their first traceback on held back: "
                         "PIPELINE_LOG_LEVEL=DEBUG shows them)\n")
            stream.flush()


def train_in_process(job: RankConfig) -> dict[str, Any] | None:
    """:func:`train_fn` in this process as the only rank of a world of one, without TorchDistributor
    (no process started): for debugging a training and for measuring it from outside. Leaves this
    process's environment, torch threads, pyarrow's memory pool and exception hook as they were
    (glibc's mmap threshold, once a rank has fixed it, stays fixed: glibc cannot be asked for it)."""
    import os
    import socket
    import sys

    import pyarrow as pa
    import torch

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rank_env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    saved, threads, excepthook = {k: os.environ.get(k) for k in rank_env}, torch.get_num_threads(), sys.excepthook
    pool = pa.default_memory_pool()
    os.environ.update(rank_env)
    try:
        return train_fn(job)
    finally:
        import gc

        gc.unfreeze()  # train_fn freezes them for a rank about to exit: this process goes on
        import torch.distributed as dist

        if dist.is_initialized():  # a rank that failed leaves its group: the next training here needs its own
            dist.destroy_process_group()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        torch.set_num_threads(threads)
        pa.set_memory_pool(pool)
        sys.excepthook = excepthook  # the process group prefixes every traceback with "[rank0]"

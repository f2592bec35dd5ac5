"""TorchDistributor as the train job starts it: in local mode through :mod:`jobs.training.torchrun_wrapper`
instead of pyspark's wrapper process, whose import of ``pyspark.ml`` delays torchrun's start in every
launch (issue 41: TorchDistributor's fixed cost against torchrun's on the same job).

Everything else is TorchDistributor's own: the pickled ``train_fn`` and the script each rank runs,
torchrun's arguments, the command's output and failure, the result read back. On a cluster
(``local_mode`` false) the barrier tasks start torchrun with pyspark's wrapper, as before. It leans
on two of pyspark 4.2's private methods (``_run``, ``_create_torchrun_command``); a pyspark whose
command has changed fails the launch saying so, and tests/jobs/training/test_launcher.py with it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pyspark.ml.torch.distributor import TorchDistributor

PYSPARK_WRAPPER = "pyspark.ml.torch.torch_run_process_wrapper"
WRAPPER = Path(__file__).with_name("torchrun_wrapper.py")


def torchrun_command(input_params: dict[str, Any], train_path: str, *args: Any) -> list[str]:
    """TorchDistributor's torchrun command with its wrapper module swapped for
    :mod:`jobs.training.torchrun_wrapper`, run as a file in isolated mode (``-I``: no user site, no
    script folder on the path), torchrun's arguments after it unchanged."""
    command = TorchDistributor._create_torchrun_command(input_params, train_path, *args)
    module = [sys.executable, "-m", PYSPARK_WRAPPER]
    if command[:3] != module:
        raise RuntimeError(
            f"TorchDistributor's torchrun command starts {command[:3]}, not {module}: this pyspark is not the "
            "one jobs/training/launcher.py was written for (pyproject.toml pins it); install that version or "
            "update the launcher to this one"
        )
    return [sys.executable, "-I", str(WRAPPER), *command[3:]]


def run_torchrun_file(input_params: dict[str, Any], train_path: str, *args: Any, **kwargs: Any) -> None:
    """TorchDistributor's ``_run_training_on_pytorch_file`` with :func:`torchrun_command`."""
    if kwargs:
        raise ValueError("a PyTorch file takes no keyword arguments")
    TorchDistributor._execute_command(torchrun_command(input_params, train_path, *args),
                                      log_streaming_client=input_params.get("log_streaming_client"))


class LeanTorchDistributor(TorchDistributor):
    """A ``TorchDistributor`` whose ``run`` in local mode launches torchrun through
    :mod:`jobs.training.torchrun_wrapper`; on a cluster, TorchDistributor's own."""

    def run(self, train_object: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.local_mode:
            return super().run(train_object, *args, **kwargs)
        return self._run(train_object, run_torchrun_file, *args, **kwargs)

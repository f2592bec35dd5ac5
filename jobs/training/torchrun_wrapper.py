"""Run ``torch.distributed.run`` (torchrun) as a child, stopping it when this process's parent dies
or sends SIGTERM, and relay its output line by line: what TorchDistributor's local mode starts
between the train job and torchrun (see :mod:`jobs.training.launcher`).

Run as a file (``python .../torchrun_wrapper.py <torchrun's arguments>``), importing the standard
library only: pyspark's own wrapper (``python -m pyspark.ml.torch.torch_run_process_wrapper``)
imports ``pyspark.ml`` first (pandas, SciPy, every MLlib module) before torchrun even starts, in
every launch (its cost: docs/bench/training.md). This one does the same
work without that import.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

STOP_GRACE_S = 0.5  # between SIGTERM and SIGKILL to torchrun, as pyspark's wrapper waits


def stop(child: subprocess.Popen) -> None:
    """SIGTERM to torchrun (which passes it to the ranks), SIGKILL if it is still there after the grace."""
    if child.poll() is not None:
        return
    try:
        child.terminate()
        time.sleep(STOP_GRACE_S)
        if child.poll() is None:
            child.kill()
    except OSError:  # gone in between
        pass


def watch_parent(child: subprocess.Popen, parent: int) -> None:
    """Stop torchrun once the process that started this one is gone (reparented: another parent id)."""
    while os.getppid() == parent:
        time.sleep(0.5)
    stop(child)


def main(argv: list[str]) -> None:
    """Exits 0 whatever torchrun's status, as pyspark's wrapper does: TorchDistributor judges the
    training by the output file rank 0 writes (none: "TorchDistributor failed during training"), and
    the train job then reads what the ranks said (:func:`jobs.training.driver.rank_errors`)."""
    parent = os.getppid()
    child = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=os.environ)

    def on_sigterm(_signum: int, _frame: object) -> None:
        stop(child)
        os._exit(0)

    signal.signal(signal.SIGTERM, on_sigterm)
    threading.Thread(target=watch_parent, args=(child, parent), name="stop-with-parent", daemon=True).start()
    try:
        assert child.stdout is not None
        for line in child.stdout:
            sys.stdout.write(line.decode(errors="replace"))
            sys.stdout.flush()
        child.wait()
    finally:
        stop(child)


if __name__ == "__main__":
    main(sys.argv[1:])

"""How the train job starts torchrun: TorchDistributor's local mode through the lean wrapper
(jobs/training/launcher.py, jobs/training/torchrun_wrapper.py), which imports no pyspark, stops
torchrun and its ranks when the process that started it dies, and relays their output."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jobs.training.launcher import PYSPARK_WRAPPER, WRAPPER, LeanTorchDistributor, torchrun_command


def test_the_command_is_pyspark_s_with_its_wrapper_swapped():
    """The same torchrun arguments as TorchDistributor's own command, after the lean wrapper run as a
    file in isolated mode; a pyspark whose command no longer starts with its wrapper fails to say so."""
    from pyspark.ml.torch.distributor import TorchDistributor

    params = {"local_mode": True, "num_processes": 2}
    theirs = TorchDistributor._create_torchrun_command(params, "/tmp/train.py", "--lr", 0.1)
    ours = torchrun_command(params, "/tmp/train.py", "--lr", 0.1)
    assert theirs[:3] == [sys.executable, "-m", PYSPARK_WRAPPER]
    assert ours == [sys.executable, "-I", str(WRAPPER), *theirs[3:]]
    assert "--nproc_per_node=2" in ours and ours[-3:] == ["/tmp/train.py", "--lr", "0.1"]


@pytest.mark.slow
def test_a_local_launch_starts_torchrun_without_importing_pyspark(spark):
    """A real launch of each: the process between the launcher and torchrun is the lean wrapper, with
    no numpy (nor anything of pyspark.ml) loaded; pyspark's own wrapper, launched the same way, has it."""
    from pyspark.ml.torch.distributor import TorchDistributor

    def rank() -> tuple[str, bool]:  # nested: pickled by value. The command line of the process that
        import os  # started torchrun (the rank's parent is torchrun's agent), and whether it has numpy loaded

        with open(f"/proc/{os.getppid()}/stat") as stat:
            launcher = int(stat.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{launcher}/cmdline", "rb") as cmdline, open(f"/proc/{launcher}/maps") as maps:
            return cmdline.read().replace(b"\0", b" ").decode(), any("numpy" in line for line in maps)

    lean = LeanTorchDistributor(num_processes=1, local_mode=True, use_gpu=False).run(rank)
    theirs = TorchDistributor(num_processes=1, local_mode=True, use_gpu=False).run(rank)
    assert str(WRAPPER) in lean[0] and PYSPARK_WRAPPER not in lean[0]
    assert lean[1] is False, "the lean wrapper loaded numpy: it imports more than the standard library"
    assert PYSPARK_WRAPPER in theirs[0] and theirs[1] is True  # what the check above would see


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is gone but for its exit status
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("ending", ["parent killed", "wrapper terminated"])
def test_the_wrapper_stops_torchrun_and_its_rank_when_its_parent_dies_or_it_is_terminated(tmp_path, ending):
    """The wrapper under a parent process, torchrun under it with one rank that prints a line and
    sleeps: the line comes through the wrapper's output; SIGKILL to the parent (the train job gone
    without a word) or SIGTERM to the wrapper (what TorchDistributor sends it) and the rank is gone
    within seconds, not left training."""
    started = tmp_path / "rank.pid"
    script = tmp_path / "rank.py"
    script.write_text(textwrap.dedent(f"""
        import os, time
        print("rank says hello", flush=True)
        open({str(started)!r}, "w").write(str(os.getpid()))
        time.sleep(120)
    """))
    wrapper = [sys.executable, "-I", str(WRAPPER), "--standalone", "--nnodes=1", "--nproc_per_node=1", str(script)]
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; child = subprocess.Popen(sys.argv[1:]); "
                               "print(child.pid, flush=True); child.wait()", *wrapper],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    rank = None
    try:
        wrapper_pid = int(parent.stdout.readline())
        seen = parent.stdout.readline()
        while "rank says hello" not in seen:  # torchrun's own lines may come first
            assert seen, "the wrapper's output ended before the rank's line"
            seen = parent.stdout.readline()
        deadline = time.monotonic() + 60
        while not started.exists() or not started.read_text():
            assert time.monotonic() < deadline, "the rank never started"
            time.sleep(0.1)
        rank = int(started.read_text())
        assert _alive(rank) and _alive(wrapper_pid)
        if ending == "parent killed":
            os.kill(parent.pid, signal.SIGKILL)
        else:
            os.kill(wrapper_pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while _alive(rank) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(rank), f"the rank outlived its launcher ({ending})"
    finally:
        for group in (parent.pid, rank):  # torchrun starts each rank in a session of its own
            if group:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)
        parent.wait(timeout=30)


def test_the_wrapper_runs_as_a_file_of_the_standard_library_alone():
    """Run by path in isolated mode: its source imports nothing outside the standard library (a
    third-party import would bring back the cost it exists to avoid, or fail under -I)."""
    import ast

    tree = ast.parse(Path(WRAPPER).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported

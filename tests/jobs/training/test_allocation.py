"""How a training rank's process allocates memory (jobs/training/allocation.py): pyarrow's pool and
glibc's mmap threshold, as the rank sets them when it starts."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.training.allocation import set_rank_allocation, use_arrow_memory_pool, use_mmap_threshold

ROOT = Path(__file__).resolve().parents[3]


def test_the_arrow_memory_pool_is_the_one_named():
    """A rank sets ``train.arrow_memory_pool`` as it starts: pyarrow then allocates from that pool."""
    import pyarrow as pa

    before = pa.default_memory_pool()
    try:
        assert use_arrow_memory_pool("system") == "system" == pa.default_memory_pool().backend_name
        held = pa.system_memory_pool().bytes_allocated()
        values = pa.array(range(100_000))  # built by pyarrow, not wrapped from numpy
        assert pa.system_memory_pool().bytes_allocated() >= held + 8 * len(values)
        assert use_arrow_memory_pool("default") == "system"  # default leaves the pool as it is
        assert use_arrow_memory_pool("mimalloc") == "mimalloc" == pa.default_memory_pool().backend_name
        with pytest.raises(ValueError, match="must be one of system, mimalloc, jemalloc, default"):
            use_arrow_memory_pool("tcmalloc")
    finally:
        pa.set_memory_pool(before)


# Run in a fresh interpreter: the threshold is process-wide (left fixed, it would change every later
# test's allocations), and a long-lived process may hold free heap chunks big enough to serve the
# block without asking the system, whatever the threshold (glibc maps only what its heap cannot
# serve). The block asked for is larger than all the free bytes of the main arena, so it cannot.
MMAP_PROBE = """
import ctypes, json
from jobs.training.allocation import use_mmap_threshold

class MallInfo2(ctypes.Structure):  # glibc's struct mallinfo2 (glibc 2.33 and later)
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                      "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
found = {"set": use_mmap_threshold(1 << 20)}
libc.free(libc.malloc(8 << 20))  # what would raise a dynamic threshold past the block's size
size = max(2 << 20, libc.mallinfo2().fordblks + (1 << 20))
mapped = libc.mallinfo2().hblkhd  # bytes in blocks mapped on their own
block = libc.malloc(size)
found["while_held"] = libc.mallinfo2().hblkhd - mapped
libc.free(block)
found["after_free"] = libc.mallinfo2().hblkhd - mapped
found["size"] = size
print(json.dumps(found))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the mmap threshold is glibc's")
def test_with_the_threshold_fixed_a_freed_block_goes_back_to_the_system():
    """By default glibc raises its mmap threshold to the largest block freed so far, so that after a
    freed 8 MiB block, a 2 MiB one comes from the heap, where it may stay resident after it is freed.
    Fixed at 1 MiB (``train.malloc_mmap_threshold``), it gets a mapping of its own, unmapped on free."""
    probe = subprocess.run([sys.executable, "-c", MMAP_PROBE], capture_output=True, text=True, timeout=60,
                           cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout)
    assert found["set"] == str(1 << 20)
    assert found["while_held"] >= found["size"]  # mapped on its own ...
    assert found["after_free"] == 0  # ... and given back when freed
    assert use_mmap_threshold(0) == "default"  # glibc's own, left as it is
    with pytest.raises(ValueError, match="between 0 .glibc's default. and 33554432 bytes"):
        use_mmap_threshold(64 << 20)


def test_a_rank_reports_the_allocation_it_runs_with():
    import pyarrow as pa

    before = pa.default_memory_pool()
    try:
        found = set_rank_allocation("system", 0)
    finally:
        pa.set_memory_pool(before)
    assert found == {"training_arrow_memory_pool": "system", "training_malloc_mmap_threshold": "default"}

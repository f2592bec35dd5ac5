"""How a training rank's process allocates memory (jobs/training/allocation.py): pyarrow's pool and
glibc's mmap threshold, as the rank sets them when it starts."""

from __future__ import annotations

import ctypes
import platform

import pytest

from jobs.training.allocation import set_rank_allocation, use_arrow_memory_pool, use_mmap_threshold


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


class MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (glibc 2.33 and later)."""

    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the mmap threshold is glibc's")
def test_with_the_threshold_fixed_a_freed_block_goes_back_to_the_system():
    """By default glibc raises its mmap threshold to the largest block freed so far, so that after a
    freed 8 MiB block, a 2 MiB one comes from the heap, where it may stay resident after it is freed.
    Fixed at 1 MiB (``train.malloc_mmap_threshold``), it gets a mapping of its own, unmapped on free."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]

    assert use_mmap_threshold(1 << 20) == str(1 << 20)
    libc.free(libc.malloc(8 << 20))  # what would raise a dynamic threshold past 2 MiB
    mapped = libc.mallinfo2().hblkhd  # bytes in blocks mapped on their own
    block = libc.malloc(2 << 20)
    try:
        assert libc.mallinfo2().hblkhd >= mapped + (2 << 20)
    finally:
        libc.free(block)
    assert libc.mallinfo2().hblkhd == mapped
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

"""How a training rank's process allocates memory: pyarrow's pool (``train.arrow_memory_pool``) and
the C library's threshold above which an allocation gets pages of its own
(``train.malloc_mmap_threshold``). Both are set as a rank starts, before its first row is read.

A streaming rank allocates and frees buffers of a few MiB for every row group it reads (Arrow's
decoded columns, the pandas frames, the encoded arrays). pyarrow's default pool (mimalloc in its
wheels) keeps freed memory for reuse, and glibc's malloc serves such buffers from its heap once
it has freed a few (its threshold for mmap rises to the largest freed), where a freed block in the
middle of the heap cannot go back to the system. Either way a rank's resident memory creeps up
with the size of the row groups and the holdout rather than staying where its buffers put it.
With the system allocator and a fixed threshold of 1 MiB, a buffer of a MiB or more is mapped
on its own and unmapped when freed (docs/bench/scale.md measured the peaks with and without).
"""

from __future__ import annotations

from jobs.config import check_arrow_memory_pool, check_mmap_threshold

M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h


def use_arrow_memory_pool(name: str) -> str:
    """Make ``name`` (one of :data:`jobs.config.ARROW_MEMORY_POOLS`) pyarrow's memory pool in this
    process; returns the backend now in use. ``default`` leaves pyarrow's own choice (its
    ``ARROW_DEFAULT_MEMORY_POOL`` environment variable, else mimalloc)."""
    import pyarrow as pa

    pools = {"system": pa.system_memory_pool, "mimalloc": pa.mimalloc_memory_pool,
             "jemalloc": pa.jemalloc_memory_pool}
    check_arrow_memory_pool(name, "the arrow memory pool")
    if name in pools:
        pa.set_memory_pool(pools[name]())
    return pa.default_memory_pool().backend_name


def use_mmap_threshold(nbytes: int) -> str:
    """Fix glibc's mmap threshold of this process at ``nbytes`` (``mallopt(M_MMAP_THRESHOLD)``, which
    also stops glibc from raising it as blocks are freed); returns the threshold now in force as
    text, or ``default`` where ``nbytes`` is 0 or the C library is not glibc (nothing changed)."""
    import ctypes
    import platform

    check_mmap_threshold(nbytes, "the mmap threshold")
    if nbytes == 0 or platform.libc_ver()[0] != "glibc":
        return "default"
    libc = ctypes.CDLL(None)  # this process's C library, already loaded
    if not libc.mallopt(M_MMAP_THRESHOLD, ctypes.c_int(nbytes)):
        return "default"
    return str(nbytes)


def set_rank_allocation(arrow_memory_pool: str, malloc_mmap_threshold: int) -> dict[str, str]:
    """Both settings of a rank, applied; returns what is in force, as the rank's MLflow params
    (``training_arrow_memory_pool``, ``training_malloc_mmap_threshold``)."""
    return {"training_arrow_memory_pool": use_arrow_memory_pool(arrow_memory_pool),
            "training_malloc_mmap_threshold": use_mmap_threshold(malloc_mmap_threshold)}

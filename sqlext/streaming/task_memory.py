"""How an executor task's Python worker takes memory while it runs an operator's step.

A task's step makes many short-lived arrays the size of a bucket's whole history (tens of MB
each). By default each one is a fresh mapping: NumPy asks glibc, which maps arrays above its
mmap threshold (at most 32 MB) and unmaps them when freed, and Arrow's own allocator (mimalloc)
hands pages back as soon as they are free. Every array then costs page faults for pages the
kernel must zero first, and a step spends a large share of its time in the kernel doing so.

While a task runs, the worker instead keeps freed memory and reuses it:

* NumPy does not advise transparent huge pages (two tasks zeroing 2 MB pages at once spent
  more in the kernel than in the step);
* glibc serves every allocation from its heap (no mmap), trims it only above 1 GB free, and
  grows it 64 MB at a time;
* Arrow allocates through glibc (the system pool), so its buffers share that heap.

A step then pays far fewer page faults (docs/performance.md has the figures). The price is a
higher peak (a freed block does not always fit the next array). When the task ends, the defaults
come back and the free heap goes back to the system (``malloc_trim``), so a worker Spark
keeps for later tasks does not hold the peak. Where the C library is not glibc, only NumPy's
advice changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from contextlib import contextmanager

import numpy as np
import pyarrow as pa

# glibc's mallopt parameters and their defaults (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4
_DEFAULTS = {_M_TRIM_THRESHOLD: 128 * 1024, _M_TOP_PAD: 128 * 1024, _M_MMAP_MAX: 65536}
_DURING_TASK = {_M_TRIM_THRESHOLD: 1 << 30, _M_TOP_PAD: 64 << 20, _M_MMAP_MAX: 0}


@functools.cache
def _glibc():
    """glibc, or None where the C library is another one (musl, macOS); looked up once a
    process (``find_library`` asks the system's linker cache)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") and \
        hasattr(libc, "gnu_get_libc_version") else None


def _huge_page_advice(on: bool) -> bool:
    """Sets whether NumPy advises huge pages for large arrays; returns the previous setting."""
    setter = getattr(getattr(np, "_core", None), "multiarray", None)
    setter = getattr(setter, "_set_madvise_hugepage", None)
    return bool(setter(on)) if setter is not None else False


@contextmanager
def task_memory():
    """Within the block, freed memory stays in the worker's heap for the next array."""
    libc, pool = _glibc(), pa.default_memory_pool()
    advised = _huge_page_advice(False)
    if libc is not None:
        for parameter, value in _DURING_TASK.items():
            libc.mallopt(parameter, value)
        pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        if libc is not None:
            pa.set_memory_pool(pool)
            for parameter, value in _DEFAULTS.items():
                libc.mallopt(parameter, value)
            libc.malloc_trim(0)
        _huge_page_advice(advised)


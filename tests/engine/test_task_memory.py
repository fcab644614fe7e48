"""How an executor task's worker takes memory: within a task, a freed large array's pages serve
the next one (no fresh page faults), Arrow allocates from the same heap, and everything is as
before once the task ends, an error included. Buffers made during the task stay valid after."""

from __future__ import annotations

import resource
import sys

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from sqlext.streaming.task_memory import _glibc, _huge_page_advice, task_memory

PAGE = resource.getpagesize()


def _faults_of_fresh_array(size: int) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    array = np.ones(size // 8, np.int64)  # every page touched
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    del array
    return faults


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's heap: elsewhere only NumPy's advice changes")
def test_a_freed_array_serves_the_next_one_within_a_task():
    size = 64 << 20
    pages = size // PAGE
    assert _glibc() is not None
    with task_memory():
        _faults_of_fresh_array(size)  # the heap grows once
        again = [_faults_of_fresh_array(size) for _ in range(3)]
    assert max(again) < pages // 10, (again, pages)
    # outside a task glibc maps an array this size afresh each time (its default): with NumPy's
    # huge-page advice off, as in a task, every page faults again
    advised = _huge_page_advice(False)
    try:
        outside = [_faults_of_fresh_array(size) for _ in range(2)]
    finally:
        _huge_page_advice(advised)
    assert min(outside) > pages // 2, (outside, pages)


def test_arrow_allocates_from_the_heap_during_a_task_and_its_pool_comes_back():
    before_pool, before_advice = pa.default_memory_pool().backend_name, _huge_page_advice(True)
    _huge_page_advice(before_advice)
    with task_memory():
        inside = pa.default_memory_pool().backend_name
        advised_inside = _huge_page_advice(False)
        made = pc.multiply(pa.array(np.arange(3_000_000)), 3)  # allocated inside, read after
    assert inside == ("system" if _glibc() is not None else before_pool)
    assert advised_inside is False
    assert pa.default_memory_pool().backend_name == before_pool
    assert _huge_page_advice(before_advice) == before_advice
    assert made[2_999_999].as_py() == 8_999_997 and pc.sum(made).as_py() == 3 * (2_999_999 * 3_000_000 // 2)


def test_an_error_in_the_task_restores_the_defaults():
    before_pool = pa.default_memory_pool().backend_name
    with pytest.raises(ValueError, match="boom"):
        with task_memory():
            raise ValueError("boom")
    assert pa.default_memory_pool().backend_name == before_pool

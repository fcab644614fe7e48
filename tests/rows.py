"""Comparing query results in tests: as multisets, or in order where the order is checked.

A row is a Spark ``Row`` or a tuple (its values in order) or a dict (its columns by name,
in any order).
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable


def row_tuple(row) -> tuple:
    """One row as a hashable tuple: a dict's (name, value) pairs sorted by name, otherwise the values."""
    if isinstance(row, dict):
        return tuple(sorted(row.items()))
    return tuple(row)


def multiset(rows: Iterable) -> Counter:
    """The rows as a multiset: what a query returns when nothing orders it (duplicates count)."""
    return Counter(row_tuple(r) for r in rows)


def added(rows: Iterable[dict], before: Iterable[dict]) -> list[dict]:
    """The rows of an output beyond those it held before (as multisets): what one incremental
    run appended."""
    return [dict(r) for r in (multiset(rows) - multiset(before)).elements()]


def ordered(rows: Iterable) -> list[tuple]:
    """The rows as tuples in the order given: for results whose order is part of the check."""
    return [row_tuple(r) for r in rows]


def portable(rows: Iterable) -> list[str]:
    """The rows as a multiset that survives JSON between processes: each row's repr, sorted."""
    return sorted(repr(row_tuple(r)) for r in rows)

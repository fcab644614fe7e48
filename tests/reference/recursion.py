"""Recursion in plain Python over lists of tuples: what RECURSIVE_EXPAND is checked against."""

from __future__ import annotations

from sqlext.udfs.recursive_expand import _one_row_per_key, level_limit_error


def semi_naive(anchor: list[tuple], step, distinct: bool, max_level: int = 10_000) -> list[tuple]:
    """Levels L0 = anchor, Lk+1 = step(Lk); UNION drops rows seen before."""
    result, seen = [], set()
    level = list(dict.fromkeys(anchor)) if distinct else list(anchor)
    seen.update(level)
    k = 0
    while level:
        if k >= max_level:
            raise OverflowError(k)
        result += level
        produced = step(level)
        if distinct:
            produced = [row for row in dict.fromkeys(produced) if row not in seen]
            seen.update(produced)
        level = produced
        k += 1
    return result


def keyed_reference(anchor: list[tuple], step_fn, key_positions: list[int], max_level: int,
                    name: str = "r") -> list[tuple]:
    """DuckDB's ``USING KEY`` over Python rows: ``step_fn(working, union)`` gives a level's
    rows from the previous level's changed rows and the current union table."""
    union: dict = {}
    working = _one_row_per_key(anchor, key_positions)
    union.update(working)
    k = 0
    while working:
        if k >= max_level:
            raise level_limit_error(name, k, max_level)
        produced = _one_row_per_key(step_fn(list(working.values()), list(union.values())), key_positions)
        working = {key: row for key, row in produced.items() if union.get(key) != row}
        union.update(working)
        k += 1
    return list(union.values())

"""Random graphs for the recursion tests, and reading the error a recursion raises."""

from __future__ import annotations

import random


def tree(rng: random.Random, nodes: int) -> list[tuple[int, int | None]]:
    """(id, parent) rows of a random tree; ids are shuffled so row order says nothing."""
    ids = list(range(1, nodes + 1))
    rng.shuffle(ids)
    rows = [(ids[0], None)] + [(ids[i], ids[rng.randrange(i)]) for i in range(1, nodes)]
    rng.shuffle(rows)
    return rows


def chain(nodes: int) -> list[tuple[int, int]]:
    return [(i, i + 1) for i in range(1, nodes)]


def dag(rng: random.Random, nodes: int, edges: int) -> list[tuple[int, int]]:
    """Edges from a lower to a higher id: shared descendants, no cycle."""
    out = set()
    while len(out) < edges:
        a, b = sorted(rng.sample(range(1, nodes + 1), 2))
        out.add((a, b))
    return sorted(out)


def cyclic(rng: random.Random, nodes: int, edges: int) -> list[tuple[int, int | None]]:
    out = [(rng.randint(1, nodes), rng.randint(1, nodes)) for _ in range(edges)]
    out.append((1, 2))
    out.append((2, 1))  # at least one cycle
    out.append((3, None))  # a NULL never joins
    out.append((None, 4))
    return out


def error_of(run):
    """The sqlext error ``run()`` raises, whether sqlext raises it itself (level by level) or
    reading the result does (the graph walk is lazy, like any Spark query)."""
    import pytest

    from sqlext.errors import find_in

    with pytest.raises(Exception) as caught:
        run()
    found = find_in(caught.value)
    assert found is not None, caught.value
    return found

"""RECURSIVE_EXPAND: semi-naive evaluation of a linear recursive CTE.

The levels are ``L0 = anchor`` and ``Lk+1 = step(Lk)``; the result is their union (``UNION
ALL``), or, with ``distinct``, the union where every level first loses its duplicates and
every row seen at an earlier level (so cyclic data ends). A level limit ``n`` allows levels
``0 .. n-1`` to hold rows, as Spark counts it: a non-empty level ``n`` is
``[RECURSION_LEVEL_LIMIT_EXCEEDED]``. With ``key`` (DuckDB's ``USING KEY``) the result keeps
one row per key: a level's row for a key replaces the key's row, and only rows that changed
go on to the next level.

Three executions give the same rows:

* **graph walk** (:func:`walk`, pure Arrow/numpy, no JVM): the step reads the previous level
  alone or joins it with one relation on an integer equality, and computes its columns in a
  small vocabulary
  (column references, integer ``+``/``-``/``*``, string ``||``/``concat``, ``CAST(.. AS STRING)``,
  ``CAST(.. AS BIGINT)`` of an integer,
  comparisons, ``AND``/``OR``/``NOT``, ``IS [NOT] NULL``). The relation is collected once,
  sorted by the join key (CSR adjacency), shipped to the workers, and each partition of seeds
  runs the whole fixpoint in one pass of vectorised code (``mapInArrow``): one Spark job in
  all, not one per level.
* **path doubling** (:mod:`sqlext.udfs.recursive_jump`, on request): one parent per node, in
  ``log2(depth) + 1`` Spark joins.
* **levels** (:func:`plan_levels`): anything else; under ``UNION ALL`` Spark's own recursion
  where it accepts the shape, else one Spark query per level over the previous level
  (checkpointed, so the plan does not grow).

>>> import pyarrow as pa
>>> edges = EdgeIndex.build(pa.table({"src": [1, 2], "dst": [2, 3]}), "src")
>>> plan = WalkPlan(name="r", columns=["n"], key_r="n", key_e="src",
...                 projections=[("col", "e", "dst")], filters=[], distinct=False, max_level=100)
>>> [b.to_pydict() for b in walk(pa.table({"n": pa.array([1], pa.int32())}), edges, plan)]
[{'n': [1]}, {'n': [2]}, {'n': [3]}]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlext.functions.recursive_expand import (
    DEFAULT_ROW_LIMIT, FUNCTION, RecursiveSpec, level_limit_error, repeats_error, row_limit_error,
)
from sqlext.errors import SqlextError
from sqlext.udfs.column_wise import sorted_unique

# A join relation up to this estimated size is collected and shipped to the workers.
# The walk collects the joined relation into the driver (as a broadcast join does); above
# this estimate, or when collecting fails, the recursion runs level by level instead. The
# embedded session's driver has Spark's default 1 GB heap: 10 million edges (about 160 MB as
# Arrow) did not fit next to everything else, so the limit stays well below.
WALK_MAX_BYTES = 64 * 1024 * 1024
WALK_MAX_ROWS = 50_000_000
# The level path collapses its union of levels into one checkpoint every this many levels.
COLLAPSE_EVERY = 32

last_path: dict = {}  # the path the last expand() took: 'walk', 'jump' or 'levels'

# ---------------------------------------------------------------------------------------
# graph walk: pure Arrow / numpy


@dataclass
class EdgeIndex:
    """The join relation sorted by its (integer, non-NULL) join key: ``table`` row ``i`` for
    key ``keys[j]`` lies in ``offsets[j] <= i < offsets[j + 1]``."""

    table: pa.Table
    keys: np.ndarray
    offsets: np.ndarray
    # dense keys (ids 0..n, the usual case): slot[key - low] is the key's position, or -1
    low: int = 0
    slot: np.ndarray | None = None

    @staticmethod
    def build(table: pa.Table, key: str) -> "EdgeIndex":
        table = table.filter(pc.is_valid(table[key]))  # a NULL key never matches
        keys = table[key].to_numpy().astype(np.int64)
        order = np.argsort(keys, kind="stable")
        return EdgeIndex._of_sorted(table.take(pa.array(order)), keys[order])

    @staticmethod
    def _of_sorted(table: pa.Table, keys: np.ndarray) -> "EdgeIndex":
        """The index of a table already in key order (``keys``: its keys, as integers)."""
        unique, offsets = EdgeIndex._runs(keys)
        return EdgeIndex(table, unique, offsets)._dense()

    @staticmethod
    def _runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sorted keys as their distinct values and the offsets where each one's rows start
        (and, last, the number of keys)."""
        starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]])) if len(keys) \
            else np.zeros(0, np.int64)
        return keys[starts], np.append(starts, len(keys)).astype(np.int64)

    def _dense(self) -> "EdgeIndex":
        """With :attr:`slot` where the keys are dense."""
        unique = self.keys
        if len(unique) and int(unique[-1]) - int(unique[0]) < 4 * len(unique) + 1024:
            self.low = int(unique[0])
            self.slot = np.full(int(unique[-1]) - self.low + 1, -1, np.int64)
            self.slot[unique - self.low] = np.arange(len(unique))
        return self

    def row_keys(self) -> np.ndarray:
        """Each row's key, in the table's (key) order."""
        return np.repeat(self.keys, np.diff(self.offsets))

    def rows_with(self, values: np.ndarray) -> np.ndarray:
        """The positions in :attr:`table` of the rows whose key is among ``values`` (integers),
        in table order."""
        values = sorted_unique(np.asarray(values, np.int64))
        pos, hit = self.positions(values, np.ones(len(values), bool))
        starts = self.offsets[pos[hit]]
        counts = self.offsets[pos[hit] + 1] - starts
        return np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))

    def changed(self, key: str, drop: np.ndarray | None = None, add: pa.Table | None = None) -> "EdgeIndex":
        """A new index (this one is left as it is): the table less the rows at positions
        ``drop``, plus the rows of ``add`` (of the table's columns; those whose key is NULL are
        left out, as :meth:`build` leaves them). The rows kept stay sorted, and the added ones
        are merged in by binary search: the cost is a pass over the table, not a sort of it."""
        if add is not None and add.num_rows:
            add = add.filter(pc.is_valid(add[key])).select(self.table.column_names).cast(self.table.schema)
        added = add[key].to_numpy().astype(np.int64) if add is not None and add.num_rows else None
        if added is not None:
            order = np.argsort(added, kind="stable")
            added, add = added[order], add.take(pa.array(order))
        if (drop is None or not len(drop)) and added is not None and (not len(self.keys) or added[0] > self.keys[-1]):
            # every added key is past the last one (new nodes of growing ids): appended as they are
            unique, offsets = EdgeIndex._runs(added)
            table = pa.concat_tables([self.table, add]).combine_chunks()
            return EdgeIndex(table, np.concatenate([self.keys, unique]),
                             np.concatenate([self.offsets[:-1], offsets + self.offsets[-1]]))._dense()
        table, keys = self.table, self.row_keys()
        rows = np.arange(len(keys))  # the rows kept, as positions in the table
        if drop is not None and len(drop):
            rows = np.delete(rows, drop)
            keys = keys[rows]
        if added is not None:
            # the new rows' places in the merged order: after the kept rows of keys up to theirs
            places = np.searchsorted(keys, added, side="right") + np.arange(len(added))
            total = len(keys) + len(added)
            old = np.ones(total, bool)
            old[places] = False
            taken = np.empty(total, np.int64)
            taken[old] = rows
            taken[places] = len(self.table) + np.arange(len(added))
            merged = np.empty(total, np.int64)
            merged[old], merged[places] = keys, added
            table, keys = pa.concat_tables([table, add]).take(pa.array(taken)), merged
        elif len(rows) < table.num_rows:
            table = table.take(pa.array(rows))
        return EdgeIndex._of_sorted(table, keys)

    @property
    def nbytes(self) -> int:
        return self.table.nbytes + self.keys.nbytes + self.offsets.nbytes + \
            (0 if self.slot is None else self.slot.nbytes)

    def positions(self, values: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each value's position among the keys, and whether it is there at all."""
        if self.slot is not None:
            shifted = values - self.low
            inside = valid & (shifted >= 0) & (shifted < len(self.slot))
            pos = np.full(len(values), -1, np.int64)
            pos[inside] = self.slot[shifted[inside]]
            return pos, pos >= 0
        pos = np.searchsorted(self.keys, values)
        hit = valid & (pos < len(self.keys))
        hit[hit] = self.keys[pos[hit]] == values[hit]
        return pos, hit


@dataclass
class WalkPlan:
    """A step the graph walk computes: ``SELECT projections FROM r JOIN e ON r.key_r =
    e.key_e WHERE filters``; expressions are small tuples (see :func:`evaluate`)."""

    name: str
    columns: list[str]
    key_r: str | None  # None: the step reads the CTE alone (no join)
    key_e: str | None
    projections: list[tuple]
    filters: list[tuple]
    distinct: bool
    max_level: int
    types: list[pa.DataType] | None = None  # output types (the anchor's); None keeps them
    key: list[str] = field(default_factory=list)  # USING KEY columns
    row_limit: int = DEFAULT_ROW_LIMIT


class NotExact(Exception):
    pass


def walk(seeds: pa.Table, edges: EdgeIndex | None, plan: WalkPlan) -> Iterator[pa.Table]:
    """Every level of the recursion from ``seeds`` (level 0 first), each as one table; with
    ``USING KEY``, the one final table of one row per key.

    Under ``UNION ALL`` a level equal to the one before (as a multiset) means the step will
    repeat it forever, which is reported at once rather than at the level limit."""
    if plan.key:
        yield from _walk_keyed(seeds, edges, plan)
        return
    seen = _Seen() if plan.distinct else None
    level = _new_rows(seeds, seen)
    previous = None
    total = 0
    k = 0
    while level.num_rows:
        if k >= plan.max_level:
            raise level_limit_error(plan.name, k, plan.max_level)
        total += level.num_rows
        if total > plan.row_limit:
            raise row_limit_error(plan.name, k, plan.row_limit)
        if previous is not None and not plan.distinct and _same_table(level, previous):
            raise repeats_error(plan.name, k)
        yield level
        previous = level
        level = _new_rows(step(level, edges, plan), seen)
        k += 1


def _same_table(a: pa.Table, b: pa.Table) -> bool:
    if a.num_rows != b.num_rows:
        return False
    keys = [(name, "ascending") for name in a.column_names]
    try:
        return a.sort_by(keys).equals(b.rename_columns(a.column_names).sort_by(keys))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # a type that does not sort
        return False


def _walk_keyed(seeds: pa.Table, edges: EdgeIndex | None, plan: WalkPlan) -> Iterator[pa.Table]:
    """``USING KEY``: one row per key; a level's row replaces its key's row, and only rows that
    changed go on to the next level (the same rules as the level-by-level path)."""
    positions = [plan.columns.index(k) for k in plan.key]
    union = _one_row_per_key(_rows(seeds), positions)
    working = dict(union)
    k = 0
    while working:
        if k >= plan.max_level:
            raise level_limit_error(plan.name, k, plan.max_level)
        level = pa.Table.from_pylist([dict(zip(plan.columns, row)) for row in working.values()],
                                     schema=seeds.schema)
        produced = _one_row_per_key(_rows(step(level, edges, plan)), positions)
        working = {key: row for key, row in produced.items() if union.get(key) != row}
        union.update(working)
        if len(union) > plan.row_limit:
            raise row_limit_error(plan.name, k, plan.row_limit)
        k += 1
    yield pa.Table.from_pylist([dict(zip(plan.columns, row)) for row in union.values()], schema=seeds.schema)


def _rows(table: pa.Table) -> list[tuple]:
    return list(zip(*(column.to_pylist() for column in table.columns)))


def _new_rows(table: pa.Table, seen: "_Seen | None") -> pa.Table:
    if seen is None or not table.num_rows:
        return table
    return seen.new_rows(table)


class _Seen:
    """The rows a walk under ``UNION`` has met, to keep only the first of each. Rows of integer
    columns (the usual ids and depths) are packed into one integer each, exactly (each
    column's value less its lowest, times the spans of the columns after it, a NULL one past
    the highest), and looked up in sorted runs of codes, each at least :data:`RUN_RATIO` times
    the next (a level's codes are a new run, merged into the runs before it that are not that
    much larger: the few rows of a walk's last levels are not merged into all the rows met); the bounds
    widen, and the rows met so far are packed again, when a level brings a value outside them.
    Rows of other types, or whose spans do not fit 62 bits, are kept as tuples in a set."""

    def __init__(self):
        self.tuples: set | None = None
        # the rows met, as the tables of them returned (read back only when the bounds widen)
        self.met: list[pa.Table] | None = None
        self.bounds: list[tuple[int, int]] | None = None
        self.runs: list[np.ndarray] = []  # sorted codes, the largest run first

    def new_rows(self, table: pa.Table) -> pa.Table:
        if self.tuples is None and self.met is None:
            if all(pa.types.is_integer(c.type) for c in table.columns):
                self.met = []
            else:
                self.tuples = set()
        if self.tuples is None:
            kept = self._packed(table)
            if kept is not None:
                return kept
        return self._as_tuples(table)

    def _as_tuples(self, table: pa.Table) -> pa.Table:
        if self.tuples is None:  # from packed rows to tuples, once
            self.tuples = set()
            for met in self.met:
                self.tuples.update(zip(*(column.to_pylist() for column in met.columns)))
            self.met = None
        keep = []
        for row in zip(*(column.to_pylist() for column in table.columns)):
            if row in self.tuples:
                keep.append(False)
            else:
                self.tuples.add(row)
                keep.append(True)
        return table.filter(pa.array(keep, pa.bool_()))

    @staticmethod
    def _numbers(columns) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
        """Integer columns as int64 values (a NULL as 0) and where they are NULL (None for a
        column without NULLs)."""
        values, nulls = [], []
        for column in columns:
            column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
            null = np.asarray(column.is_null(), dtype=bool) if column.null_count else None
            nulls.append(null)
            column = pc.fill_null(column, 0) if null is not None else column
            values.append(column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False))
        return values, nulls

    def _packed(self, table: pa.Table) -> pa.Table | None:
        values, nulls = self._numbers(table.columns)
        bounds = []
        for i, (value, null) in enumerate(zip(values, nulls)):
            present = value if null is None else value[~null]
            low = int(present.min()) if len(present) else 0
            high = int(present.max()) if len(present) else 0
            if self.bounds is not None:
                low, high = min(low, self.bounds[i][0]), max(high, self.bounds[i][1])
            bounds.append((low, high))
        if bounds != self.bounds:  # wider: room to grow, and the rows met so far packed again
            old_bounds = self.bounds or [None] * len(bounds)
            # room to grow where it fits (a column that grows by one each level, a depth, need
            # not be packed again every few levels), else less, else the bounds as they are
            for slack in (ROOM, 0, None):
                chosen = [_roomy(lo, hi, slack) if (lo, hi) != old else old
                          for (lo, hi), old in zip(bounds, old_bounds)]
                spans = [hi - lo + 2 for lo, hi in chosen]  # a code past the highest for NULL
                if np.prod([float(s) for s in spans]) < float(1 << 62):
                    break
            else:
                return None
            self.bounds = chosen
            if self.met:
                self.runs = [np.sort(self._pack(*self._numbers(pa.concat_tables(self.met).columns)))]
        codes = self._pack(values, nulls)
        # the level's distinct codes (sorted) and the first row of each: an unstable argsort
        # (far cheaper than a stable one) and the least position among equal codes
        order = np.argsort(codes)
        ordered = codes[order]
        starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
        if len(starts) == len(ordered):  # no row twice in the level (the usual case)
            unique, first = ordered, order
        else:
            unique, first = ordered[starts], np.minimum.reduceat(order, starts)
        new = np.ones(len(unique), bool)
        for run in self.runs:
            position = np.searchsorted(run, unique)
            inside = position < len(run)
            inside[inside] = run[position[inside]] == unique[inside]
            new &= ~inside
        self._add(unique[new])
        kept = table.take(pa.array(np.sort(first[new])))  # in the level's order
        self.met.append(kept)
        return kept

    def _add(self, codes: np.ndarray) -> None:
        """Sorted new codes as a run, merged with the runs before it less than :data:`RUN_RATIO`
        times its size (two sorted runs: the stable sort, a merge sort, merges them in one pass)."""
        if not len(codes):
            return
        self.runs.append(codes)
        while len(self.runs) > 1 and len(self.runs[-2]) < RUN_RATIO * len(self.runs[-1]):
            last = self.runs.pop()
            self.runs[-1] = np.sort(np.concatenate([self.runs[-1], last]), kind="stable")

    def _pack(self, values: list[np.ndarray], nulls: list[np.ndarray | None]) -> np.ndarray:
        """Each row's code: in place, column after column. The sums may pass the int64 range
        on the way (a value added before its lowest is taken away), which numpy's arithmetic
        wraps: the code, below 2**62, comes out exact."""
        code = None
        for (low, high), value, null in zip(self.bounds, values, nulls):
            if code is None:
                code = np.zeros(len(value), np.int64)
            else:
                code *= high - low + 2
            if null is not None and null.any():
                code += np.where(null, high - low + 1, value - low)
            else:
                code += value
                code -= low
        return code if code is not None else np.zeros(0, np.int64)


def distinct_rows(table: pa.Table) -> pa.Table | None:
    """The first of each distinct row of ``table`` (NULL equal to NULL), in its order, where its
    columns are integers that pack as the walk's memory of rows packs them (:class:`_Seen`):
    a sort of one number per row, not a hash of every column; None where they do not pack."""
    if table.num_rows < 2 or not table.num_columns:
        return table if table.num_rows < 2 else None
    if not all(pa.types.is_integer(c.type) for c in table.columns):
        return None
    seen = _Seen()
    seen.met = []
    return seen._packed(table)


# the room a walk's memory of rows leaves past each column's values, where it fits: 8 times
# the values' span and this much more
ROOM = 1024
# each run of codes a walk's memory of rows keeps is at least this many times the next
RUN_RATIO = 4


def _roomy(low: int, high: int, slack: int | None) -> tuple[int, int]:
    """Bounds ``low..high`` widened by 8 times their span and ``slack`` either side (not at
    all for None); the lowest stays an int64, which the packing subtracts from the values."""
    if slack is None:
        return low, high
    room = 8 * (high - low + 1) + slack
    return max(low - room, -(1 << 63)), high + room


def step(level: pa.Table, edges: EdgeIndex | None, plan: WalkPlan) -> pa.Table:
    """One application of the step: join the level with the edges, filter, project."""
    if edges is None:  # the step reads the CTE alone
        context = _Context(level, None, np.arange(level.num_rows), np.zeros(0, np.int64))
        return _filter_project(context, plan)
    key = level[plan.key_r]
    key = key.combine_chunks() if isinstance(key, pa.ChunkedArray) else key
    valid = pc.is_valid(key).to_numpy(zero_copy_only=False) if key.null_count else np.ones(len(key), bool)
    values = (pc.fill_null(key, 0) if key.null_count else key).to_numpy(zero_copy_only=False) \
        .astype(np.int64, copy=False)
    pos, hit = edges.positions(values, valid)
    rows = np.flatnonzero(hit)
    found = pos[rows]
    starts = edges.offsets[found]
    counts = edges.offsets[found + 1] - starts
    if len(counts) == 0 or counts.max() == 1:  # one edge per key met (a tree, a list): no repeats
        return _filter_project(_Context(level, edges.table, rows, starts), plan)
    total = int(counts.sum())
    r_index = np.repeat(rows, counts)
    e_index = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(total)
    return _filter_project(_Context(level, edges.table, r_index, e_index), plan)


def _filter_project(context: "_Context", plan: WalkPlan) -> pa.Table:
    for condition in plan.filters:
        mask = evaluate(condition, context)
        mask = pc.fill_null(mask, False).to_numpy(zero_copy_only=False)
        context = _Context(context.level, context.edges, context.r_index[mask],
                           context.e_index if context.edges is None else context.e_index[mask])
    arrays = [evaluate(p, context) for p in plan.projections]
    if plan.types is not None:
        try:
            arrays = [a.cast(t) if a.type != t else a for a, t in zip(arrays, plan.types)]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
            raise NotExact(str(error)) from None
    return pa.Table.from_arrays(arrays, names=plan.columns)


class _Context:
    def __init__(self, level: pa.Table, edges: pa.Table, r_index: np.ndarray, e_index: np.ndarray):
        self.level, self.edges, self.r_index, self.e_index = level, edges, r_index, e_index
        self._taken: dict = {}

    def column(self, side: str, name: str) -> pa.Array:
        if (side, name) not in self._taken:
            table, index = (self.level, self.r_index) if side == "r" else (self.edges, self.e_index)
            self._taken[side, name] = table[name].take(pa.array(index)).combine_chunks()
        return self._taken[side, name]

    @property
    def rows(self) -> int:
        return len(self.r_index)


_ARITHMETIC = {"add": pc.add_checked, "sub": pc.subtract_checked, "mul": pc.multiply_checked}
_COMPARE = {"eq": pc.equal, "neq": pc.not_equal, "lt": pc.less, "lte": pc.less_equal,
            "gt": pc.greater, "gte": pc.greater_equal}


def evaluate(node: tuple, context: _Context) -> pa.Array:
    """Evaluate one expression of the vocabulary with Spark's semantics (NULL in, NULL out;
    an integer overflow fails, as in Spark's ANSI mode)."""
    kind = node[0]
    try:
        if kind == "col":
            return context.column(node[1], node[2])
        if kind == "lit":
            return pa.array([node[1]], node[2]).take(np.zeros(context.rows, np.int64))
        if kind in _ARITHMETIC:
            return _ARITHMETIC[kind](evaluate(node[1], context), evaluate(node[2], context))
        if kind == "concat":
            parts = [evaluate(p, context) for p in node[1]]
            parts = [p.cast(pa.large_string()) for p in parts]
            return pc.binary_join_element_wise(*parts, pa.scalar("", pa.large_string()))
        if kind == "to_string":
            return evaluate(node[1], context).cast(pa.large_string())
        if kind == "cast":
            return evaluate(node[1], context).cast(node[2])
        if kind in _COMPARE:
            return _COMPARE[kind](evaluate(node[1], context), evaluate(node[2], context))
        if kind == "and":
            return pc.and_kleene(evaluate(node[1], context), evaluate(node[2], context))
        if kind == "or":
            return pc.or_kleene(evaluate(node[1], context), evaluate(node[2], context))
        if kind == "not":
            return pc.invert(evaluate(node[1], context))
        if kind == "is_null":
            return pc.is_null(evaluate(node[1], context))
        if kind == "is_not_null":
            return pc.is_valid(evaluate(node[1], context))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise NotExact(str(error)) from None
    raise NotExact(f"unknown expression {kind}")


# ---------------------------------------------------------------------------------------
# keyed recursion: one row per key


def _one_row_per_key(rows: list[tuple], key_positions: list[int]) -> dict:
    """Several rows of one key in one level: the smallest (all columns, NULLs first) wins."""
    chosen: dict = {}
    for row in sorted(rows, key=_null_first_key, reverse=True):
        chosen[tuple(row[i] for i in key_positions)] = row
    return chosen


def _null_first_key(row: tuple) -> tuple:
    return tuple((v is not None, v) for v in row)


# ---------------------------------------------------------------------------------------
# the Spark adapter


@dataclass
class Levels:
    """How the level path will run a recursion (``why``, in words) and the call that runs it."""

    why: str
    run: Callable[[], object]


OWN_LOOP = "sqlext's loop runs one Spark query per level, each level checkpointed"


def plan_levels(spark, spec: RecursiveSpec, anchor, scoped) -> Levels:
    """Semi-naive iteration, level by level.

    A ``UNION ALL`` recursion that Spark's own recursion accepts runs there, with sqlext's
    level and row limits (Spark iterates in one plan, with no query to plan per level);
    ``UNION``, ``USING KEY`` and the shapes Spark refuses run in sqlext's own loop, one Spark
    query per level. Deciding which runs only Spark's analysis of the native statement."""

    def own_loop():
        return _own_levels(spark, spec, anchor, scoped)

    if spec.distinct or spec.key:
        kind = "USING KEY" if spec.key else "UNION (distinct)"
        return Levels(f"{kind}, which Spark's own recursion does not run: {OWN_LOOP}", own_loop)
    native = _native_frame(spark, spec, anchor, scoped)
    if isinstance(native, str):
        return Levels(f"Spark's own recursion refuses this step ({native}): {OWN_LOOP}", own_loop)

    def native_then_own_loop():
        frame = _run_native(native, spec)
        return frame if frame is not None else own_loop()

    return Levels("UNION ALL in a shape Spark's own recursion accepts: Spark iterates the levels in one "
                  "plan, with sqlext's level and row limits", native_then_own_loop)


def run_levels(spark, spec: RecursiveSpec, anchor, scoped):
    """The recursion run level by level (see :func:`plan_levels`)."""
    return plan_levels(spark, spec, anchor, scoped).run()


def _own_levels(spark, spec: RecursiveSpec, anchor, scoped):
    """sqlext's own loop: one Spark query per level over the previous level."""
    from pyspark.sql import functions as F

    from sqlext.language.sqltree import fresh, helper

    working_view, union_view = fresh("rec_working_"), fresh("rec_union_")
    step_sql = substitute_step(spec.step_sql, spec.name, working_view, union_view)
    schema = anchor.schema

    def conform(frame):
        if len(frame.columns) != len(schema.fields):
            raise SqlextError(
                "UNSUPPORTED_STATEMENT", function=FUNCTION,
                reason=f"the step of {spec.name} returns {len(frame.columns)} columns, the anchor "
                       f"{len(schema.fields)}", fix="Make anchor and step return the same columns.")
        renamed = frame.toDF(*[helper(f"c{i}") for i in range(len(schema.fields))])
        return renamed.select([F.col(helper(f"c{i}")).cast(f.dataType).alias(f.name)
                               for i, f in enumerate(schema.fields)])

    step_text = scoped(step_sql)  # the same text every level: read the views anew

    def run_step(working, union=None):
        working.createOrReplaceTempView(working_view)
        if union is not None:
            union.createOrReplaceTempView(union_view)
        return conform(spark.sql(step_text))

    try:
        if spec.key:
            return _levels_keyed(spec, anchor, run_step)
        return _levels(spec, anchor, run_step)
    finally:
        spark.catalog.dropTempView(working_view)
        spark.catalog.dropTempView(union_view)


def _native_frame(spark, spec: RecursiveSpec, anchor, scoped):
    """The recursion as Spark's native ``WITH RECURSIVE`` (analysed, not run), or the error
    class with which Spark refuses its shape.

    The step's values are cast to the anchor's types, as the other paths cast them (Spark
    refuses a step of another type). Any failure to plan the statement (Spark raises some of
    them as a bare ``Py4JJavaError``, not as a ``PySparkException``) hands the recursion to
    sqlext's own loop, which reports whatever is wrong in it with the user's own text."""
    from sqlglot import exp

    from sqlext.language.dialect import parse_one, to_sql

    step = cast_projections(parse_one(spec.step_sql), anchor.schema)
    union = exp.Union(this=parse_one(spec.anchor_sql), expression=step, distinct=False)
    alias = exp.TableAlias(this=exp.to_identifier(spec.name),
                           columns=[exp.to_identifier(c) for c in spec.columns])
    cte = exp.CTE(this=union, alias=alias)
    cte.set("max_recursion_level", exp.Literal.number(spec.max_level))
    query = exp.select("*").from_(exp.to_identifier(spec.name))
    query.set("with_", exp.With(expressions=[cte], recursive=True))
    try:
        frame = spark.sql(scoped(to_sql(query)))
    except Exception as error:  # noqa: BLE001 - a shape Spark's recursion refuses: sqlext's own loop runs it
        return _error_class(error)
    if [f.dataType for f in frame.schema.fields] != [f.dataType for f in anchor.schema.fields]:
        return "its column types differ from the anchor's"
    return frame


def _error_class(error: BaseException) -> str:
    """The class Spark gave an error (``UNRESOLVED_COLUMN``), from the error itself: PySpark's
    condition, or the first bracketed word of the JVM exception's own message."""
    import re

    condition = getattr(error, "getCondition", None)
    if callable(condition) and condition():
        return condition()
    java = getattr(error, "java_exception", None)
    try:
        message = java.getMessage() if java is not None else ""
    except Exception:  # noqa: BLE001 - the JVM is gone: no class to read
        message = ""
    found = re.match(r"\s*\[([A-Z][A-Z0-9_.]*)\]", message or "")
    return found.group(1) if found else type(error).__name__


def _run_native(frame, spec: RecursiveSpec):
    """Run Spark's native recursion with sqlext's limits; None when it fails without an error
    class (sqlext's own loop runs it then)."""
    from pyspark.errors import PySparkException

    limits = {"spark.sql.cteRecursionRowLimit": str(spec.row_limit)}
    try:
        return _cut(frame, limits, measure=False)[0]
    except Exception as error:  # noqa: BLE001 - a Spark error (PySpark's or py4j's), mapped below
        error_class = _error_class(error)
        if error_class == "RECURSION_LEVEL_LIMIT_EXCEEDED":
            raise level_limit_error(spec.name, spec.max_level, spec.max_level) from None
        if error_class == "RECURSION_ROW_LIMIT_EXCEEDED":
            raise row_limit_error(spec.name, spec.max_level, spec.row_limit) from None
        if isinstance(error, PySparkException):
            raise  # a classed error of the statement itself (an overflow): the user's to see
        return None  # Spark's recursion failed without an error class: sqlext's own loop runs it


def cast_projections(step, schema):
    """``step`` (a parsed SELECT) with each column cast to the type of the schema's field in
    its position; ``step`` unchanged when that cannot be written (a ``*``, another number of
    columns, a type sqlglot does not read back).

    >>> from pyspark.sql.types import IntegerType, StructField, StructType
    >>> from sqlext.language.dialect import parse_one, to_sql
    >>> to_sql(cast_projections(parse_one("SELECT n + 1L AS m FROM r"), StructType([StructField("n", IntegerType())])))
    'SELECT CAST(n + CAST(1 AS BIGINT) AS INT) AS m FROM r'
    """
    from sqlglot import exp
    from sqlglot.errors import ParseError

    from sqlext.language.dialect import SparkExt

    projections = step.expressions if isinstance(step, exp.Select) else []
    if len(projections) != len(schema.fields) or any(p.is_star for p in projections):
        return step
    types = []
    for field in schema.fields:
        text = field.dataType.simpleString()
        try:
            to = exp.DataType.build(text, dialect=SparkExt)
        except (ParseError, ValueError):
            return step
        # only a type that reads back as written (a field name with a space, a collation: not)
        if "".join(to.sql(dialect=SparkExt).split()).lower() != "".join(text.split()).lower():
            return step
        types.append(to)
    step = step.copy()
    for projection, to in zip(step.expressions, types):
        target = projection if not isinstance(projection, exp.Alias) else projection.this
        target.replace(exp.Cast(this=target.copy(), to=to))
    return step


def _levels(spec: RecursiveSpec, anchor, run_step):
    level, (rows, digest) = _cut(anchor.distinct() if spec.distinct else anchor)
    seen = level if spec.distinct else None
    repeats_possible = not spec.distinct and not _nondeterministic(spec.step_sql)
    done, pending = None, []
    total = 0
    k = 0
    while rows:
        if k >= spec.max_level:
            raise level_limit_error(spec.name, k, spec.max_level)
        total += rows
        if total > spec.row_limit:
            raise row_limit_error(spec.name, k, spec.row_limit)
        pending.append(level)
        if len(pending) >= COLLAPSE_EVERY:
            done = _cut(_union_all([done] + pending if done is not None else pending), measure=False)[0]
            pending = []
        produced = run_step(level)
        if spec.distinct:
            produced = produced.distinct().subtract(seen)
        previous, previous_size = level, (rows, digest)
        level, (rows, digest) = _cut(produced)
        k += 1
        if repeats_possible and rows and (rows, digest) == previous_size and _same_rows(level, previous):
            # a deterministic step maps equal levels to equal levels: this one repeats forever
            raise repeats_error(spec.name, k)
        if spec.distinct and rows:
            seen = _cut(seen.union(level), measure=False)[0]
    parts = ([done] if done is not None else []) + pending
    if not parts:
        return anchor.limit(0)
    return _cut(_union_all(parts), measure=False)[0]


def _levels_keyed(spec: RecursiveSpec, anchor, run_step):
    names = anchor.columns
    lowered = [c.lower() for c in names]
    key = [names[lowered.index(k.lower())] for k in spec.key]
    union, (rows, _) = _cut(_one_per_key(anchor, key))
    working = union
    parallelism = anchor.sparkSession.sparkContext.defaultParallelism
    k = 0
    while rows:
        if k >= spec.max_level:
            raise level_limit_error(spec.name, k, spec.max_level)
        produced = _one_per_key(run_step(working, union), key)
        working, (rows, _) = _cut(_anti_join(produced, union, names))
        if rows:
            merged = _anti_join(union, working, key).unionByName(working)
            # keep the union's partitions few, or every level adds tasks to the next
            union, (size, _) = _cut(merged.coalesce(max(parallelism, 1)))
            if size > spec.row_limit:
                raise row_limit_error(spec.name, k, spec.row_limit)
        k += 1
    return union


def _anti_join(left, right, columns: list[str]):
    """Rows of ``left`` with no row of ``right`` equal (NULL-safe) on ``columns``."""
    from pyspark.sql import functions as F

    renamed = right.select([F.col(_quote(c)).alias(f"__sx_r{i}") for i, c in enumerate(columns)])
    condition = None
    for i, c in enumerate(columns):
        term = left[_quote(c)].eqNullSafe(renamed[f"__sx_r{i}"])
        condition = term if condition is None else condition & term
    return left.join(renamed, on=condition, how="left_anti")


def _one_per_key(frame, key: list[str]):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = [F.col(_quote(c)).asc_nulls_first() for c in frame.columns]
    window = Window.partitionBy(*[F.col(_quote(k)) for k in key]).orderBy(*order)
    return frame.withColumn("__sx_rank", F.row_number().over(window)) \
        .where("__sx_rank = 1").drop("__sx_rank")


def _quote(name: str) -> str:
    """A column name as ``F.col`` and ``frame[...]`` read it (they parse dots and backticks);
    only for the DataFrame API: generated SQL quotes names as sqlglot identifiers."""
    return "`" + name.replace("`", "``") + "`"


def _cut(frame, settings: dict | None = None, measure: bool = True):
    """Materialise ``frame`` and cut its lineage, so that level k's plan does not hold level
    k-1's; returns the new frame and (its row count, an order-free checksum of its rows), or
    (None, None) without ``measure`` (a job saved where the caller needs neither).

    The columns are re-aliased on top of the checkpoint: a checkpoint keeps the attribute ids
    of the plan it came from, which trips Spark's analyzer when the step joins it with a
    relation that plan also read. Constraint propagation is off while the checkpoint is made,
    so that it carries no constraints over attributes of that plan (Spark fails to map them
    when such checkpoints are unioned)."""
    from pyspark.sql import functions as F

    spark = frame.sparkSession
    settings = {"spark.sql.constraintPropagation.enabled": "false", **(settings or {})}
    before = {k: spark.conf.get(k) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        checkpointed = frame.localCheckpoint()
    finally:
        for k, v in before.items():
            spark.conf.set(k, v)
    cut = checkpointed.select([F.col(_quote(c)).alias(c) for c in checkpointed.columns])
    if not measure:
        return cut, (None, None)
    columns = [F.col(_quote(c)) for c in cut.columns]
    digest = F.xxhash64(*columns) if columns else F.lit(0)
    count, total = cut.agg(F.count(F.lit(1)), F.sum(digest.cast("decimal(38,0)"))).first()
    return cut, (count, total)


def _same_rows(a, b) -> bool:
    return a.exceptAll(b).isEmpty() and b.exceptAll(a).isEmpty()


def _nondeterministic(step_sql: str) -> bool:
    from sqlglot import exp

    from sqlext.language.dialect import parse_one

    return any(isinstance(f, exp.Rand) or f.sql_name().lower() in _NONDETERMINISTIC
               for f in parse_one(step_sql).find_all(exp.Func))


_NONDETERMINISTIC = {"rand", "randn", "random", "uuid", "shuffle", "monotonically_increasing_id",
                     "spark_partition_id", "uniform", "randstr", "current_timestamp", "now"}


def _union_all(frames):
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def reads_recurring(table, name: str) -> bool:
    """Whether ``table`` is ``recurring.<name>``: the keyed recursion's result so far, which
    exists only while the recursion runs (it is no relation of the catalogue)."""
    from sqlglot import exp

    return (isinstance(table, exp.Table) and isinstance(table.this, exp.Identifier)
            and (table.db or "").lower() == "recurring" and not table.args.get("catalog")
            and table.name.lower() == name.lower())


def substitute_step(step_sql: str, name: str, working_view: str, union_view: str) -> str:
    """The step reading ``working_view`` where it read ``name`` (keeping the alias as written,
    its column list included, or ``name`` itself, so qualified and renamed columns still
    resolve) and ``union_view`` for ``recurring.name``.

    >>> substitute_step("SELECT zzz + 1 FROM t AS t1(zzz) WHERE zzz < 3", "t", "w", "u")
    'SELECT zzz + 1 FROM w AS t1(zzz) WHERE zzz < 3'
    """
    from sqlglot import exp

    from sqlext.language.dialect import parse_one, to_sql

    tree = parse_one(step_sql)
    for table in list(tree.find_all(exp.Table)):
        reads_result = reads_recurring(table, name)
        if not reads_result and not (isinstance(table.this, exp.Identifier) and not table.db
                                     and table.name.lower() == name.lower()):
            continue
        alias = table.args.get("alias")
        if alias is None or alias.this is None:
            alias = exp.TableAlias(this=exp.to_identifier(table.alias or name),
                                   columns=alias.args.get("columns") if alias is not None else None)
        replacement = exp.Table(this=exp.to_identifier(union_view if reads_result else working_view),
                                alias=alias.copy())
        table.replace(replacement)
    return to_sql(tree)

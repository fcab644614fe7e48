"""RECURSIVE_EXPAND: semi-naive evaluation of a linear recursive CTE.

The levels are ``L0 = anchor`` and ``Lk+1 = step(Lk)``; the result is their union (``UNION
ALL``), or, with ``distinct``, the union where every level first loses its duplicates and
every row seen at an earlier level (so cyclic data ends). A level limit ``n`` allows levels
``0 .. n-1`` to hold rows, as Spark counts it: a non-empty level ``n`` is
``[RECURSION_LEVEL_LIMIT_EXCEEDED]``. With ``key`` (DuckDB's ``USING KEY``) the result keeps
one row per key: a level's row for a key replaces the key's row, and only rows that changed
go on to the next level.

Three executions give the same rows; this module is the first, what runs inside Spark's
workers over Arrow data, and :mod:`sqlext.recursion` chooses among them and drives Spark:

* **graph walk** (:func:`walk`, pure Arrow/numpy, no JVM): the step reads the previous level
  alone or joins it with one relation on an integer equality, and computes its columns in a
  small vocabulary
  (column references, integer ``+``/``-``/``*``, string ``||``/``concat``, ``CAST(.. AS STRING)``,
  ``CAST(.. AS BIGINT)`` of an integer,
  comparisons, ``AND``/``OR``/``NOT``, ``IS [NOT] NULL``). The relation is collected once,
  sorted by the join key (CSR adjacency), shipped to the workers, and each partition of seeds
  runs the whole fixpoint in one pass of vectorised code (``mapInArrow``): one Spark job in
  all, not one per level.
* **path doubling** (:mod:`sqlext.recursion.jump`, on request): one parent per node, in
  ``log2(depth) + 1`` Spark joins.
* **levels** (:func:`sqlext.recursion.levels.plan_levels`): anything else; under ``UNION
  ALL`` Spark's own recursion where it accepts the shape, else one Spark query per level over
  the previous level (checkpointed, so the plan does not grow).

>>> import pyarrow as pa
>>> edges = EdgeIndex.build(pa.table({"src": [1, 2], "dst": [2, 3]}), "src")
>>> plan = WalkPlan(name="r", columns=["n"], key_r="n", key_e="src",
...                 projections=[("col", "e", "dst")], filters=[], distinct=False, max_level=100)
>>> [b.to_pydict() for b in walk(pa.table({"n": pa.array([1], pa.int32())}), edges, plan)]
[{'n': [1]}, {'n': [2]}, {'n': [3]}]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlext.functions.recursive_expand import DEFAULT_ROW_LIMIT, level_limit_error, repeats_error, row_limit_error
from sqlext.udfs.column_wise import sorted_unique

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

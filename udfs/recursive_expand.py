"""RECURSIVE_EXPAND: semi-naive evaluation of a linear recursive CTE.

The levels are ``L0 = anchor`` and ``Lk+1 = step(Lk)``; the result is their union (``UNION
ALL``), or, with ``distinct``, the union where every level first loses its duplicates and
every row seen at an earlier level (so cyclic data ends). A level limit ``n`` allows levels
``0 .. n-1`` to hold rows, as Spark counts it: a non-empty level ``n`` is
``[RECURSION_LEVEL_LIMIT_EXCEEDED]``. With ``key`` (DuckDB's ``USING KEY``) the result keeps
one row per key: a level's row for a key replaces the key's row, and only rows that changed
go on to the next level.

Two executions give the same rows:

* **graph walk** (:func:`walk`, pure Arrow/numpy, no JVM): the step joins the previous level
  with one relation on an integer equality and computes its columns in a small vocabulary
  (column references, integer ``+``/``-``/``*``, string ``||``/``concat``, ``CAST(.. AS STRING)``,
  comparisons, ``AND``/``OR``/``NOT``, ``IS [NOT] NULL``). The relation is collected once,
  sorted by the join key (CSR adjacency), shipped to the workers, and each partition of seeds
  runs the whole fixpoint in one pass of vectorised code (``mapInArrow``): one Spark job in
  all, not one per level.
* **levels** (:func:`run_levels`): anything else, one Spark query per level over the
  previous level (checkpointed, so the plan does not grow).

>>> import pyarrow as pa
>>> edges = EdgeIndex.build(pa.table({"src": [1, 2], "dst": [2, 3]}), "src")
>>> plan = WalkPlan(name="r", columns=["n"], key_r="n", key_e="src",
...                 projections=[("col", "e", "dst")], filters=[], distinct=False, max_level=100)
>>> [b.to_pydict() for b in walk(pa.table({"n": pa.array([1], pa.int32())}), edges, plan)]
[{'n': [1]}, {'n': [2]}, {'n': [3]}]
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlext.errors import SqlextError

FUNCTION = "RECURSIVE_EXPAND"
ARGUMENTS = ["name", "columns", "anchor", "step", "distinct", "max_level", "key"]

# A join relation up to this estimated size is collected and shipped to the workers.
# The walk collects the joined relation into the driver (as a broadcast join does); above
# this estimate, or when collecting fails, the recursion runs level by level instead. The
# embedded session's driver has Spark's default 1 GB heap: 10 million edges (about 160 MB as
# Arrow) did not fit next to everything else, so the limit stays well below.
WALK_MAX_BYTES = 64 * 1024 * 1024
WALK_MAX_ROWS = 50_000_000
# The level path collapses its union of levels into one checkpoint every this many levels.
COLLAPSE_EVERY = 32

_counter = itertools.count(1)
last_path: dict = {}  # the path the last expand() took: 'walk', 'jump' or 'levels'


@dataclass
class RecursiveSpec:
    name: str
    columns: list[str]
    anchor_sql: str
    step_sql: str
    distinct: bool
    max_level: int
    key: list[str] = field(default_factory=list)


def level_limit_error(name: str, level: int, limit: int) -> SqlextError:
    return SqlextError("RECURSION_LEVEL_LIMIT_EXCEEDED", function=FUNCTION, name=name, level=level,
                       limit=limit, suggested=max(2 * limit, 100))


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
        table = table.take(pa.array(order))
        keys = keys[order]
        unique, starts = np.unique(keys, return_index=True)
        offsets = np.append(starts, len(keys)).astype(np.int64)
        index = EdgeIndex(table, unique, offsets)
        if len(unique) and int(unique[-1]) - int(unique[0]) < 4 * len(unique) + 1024:
            index.low = int(unique[0])
            index.slot = np.full(int(unique[-1]) - index.low + 1, -1, np.int64)
            index.slot[unique - index.low] = np.arange(len(unique))
        return index

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
    key_r: str
    key_e: str
    projections: list[tuple]
    filters: list[tuple]
    distinct: bool
    max_level: int
    types: list[pa.DataType] | None = None  # output types (the anchor's); None keeps them


class NotExact(Exception):
    pass


def walk(seeds: pa.Table, edges: EdgeIndex, plan: WalkPlan) -> Iterator[pa.Table]:
    """Every level of the recursion from ``seeds`` (level 0 first), each as one table."""
    seen: set | None = set() if plan.distinct else None
    level = _new_rows(seeds, seen)
    k = 0
    while level.num_rows:
        if k >= plan.max_level:
            raise level_limit_error(plan.name, k, plan.max_level)
        yield level
        level = _new_rows(step(level, edges, plan), seen)
        k += 1


def _new_rows(table: pa.Table, seen: set | None) -> pa.Table:
    if seen is None or not table.num_rows:
        return table
    keep = []
    rows = zip(*(column.to_pylist() for column in table.columns))
    for row in rows:
        if row in seen:
            keep.append(False)
        else:
            seen.add(row)
            keep.append(True)
    return table.filter(pa.array(keep, pa.bool_()))


def step(level: pa.Table, edges: EdgeIndex, plan: WalkPlan) -> pa.Table:
    """One application of the step: join the level with the edges, filter, project."""
    key = level[plan.key_r]
    valid = pc.is_valid(key).to_numpy(zero_copy_only=False)
    values = pc.fill_null(key, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    pos, hit = edges.positions(values, valid)
    rows = np.nonzero(hit)[0]
    starts = edges.offsets[pos[rows]]
    counts = edges.offsets[pos[rows] + 1] - starts
    total = int(counts.sum())
    r_index = np.repeat(rows, counts)
    e_index = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(total)
    context = _Context(level, edges.table, r_index, e_index)
    for condition in plan.filters:
        mask = evaluate(condition, context)
        mask = pc.fill_null(mask, False).to_numpy(zero_copy_only=False)
        context = _Context(level, edges.table, context.r_index[mask], context.e_index[mask])
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
# keyed recursion, plain Python (the reference the Spark version is tested against)


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


def spec_from_call(literals: dict[str, Any], anchor_sql: str) -> RecursiveSpec:
    columns = [c.strip() for c in (literals.get("columns") or "").split(",") if c.strip()]
    key = [c.strip() for c in (literals.get("key") or "").split(",") if c.strip()]
    return RecursiveSpec(
        name=literals["name"], columns=columns, anchor_sql=anchor_sql, step_sql=literals["step"],
        distinct=str(literals.get("distinct")).lower() == "true", max_level=int(literals["max_level"]),
        key=key,
    )


def expand(spark, spec: RecursiveSpec, prefix: str = "", path: str | None = None):
    """The recursion's result as a DataFrame: computed and checkpointed level by level, or a
    lazy graph walk (whose errors surface when the result is read).

    ``prefix`` is the ``WITH ...`` clause of the relations anchor and step read; ``path``
    ('auto', 'walk', 'jump' or 'levels') defaults to ``spark.sqlext.recursion.path``; the
    path that ran is left in ``last_path['path']``.
    """
    from udfs import recursive_jump, recursive_plan

    path = path or spark.conf.get("spark.sqlext.recursion.path", "auto")
    anchor = spark.sql(f"{prefix} {spec.anchor_sql}" if prefix else spec.anchor_sql)
    if spec.columns:
        if len(spec.columns) != len(anchor.columns):
            raise SqlextError(
                "UNSUPPORTED_STATEMENT", function=FUNCTION,
                reason=f"{spec.name} names {len(spec.columns)} columns but its anchor returns "
                       f"{len(anchor.columns)}", fix="Make the column list and the anchor agree.")
        anchor = anchor.toDF(*spec.columns)
    else:
        spec.columns = list(anchor.columns)
    if not spec.key and path != "levels":
        walk_frame = None if path == "jump" else \
            recursive_plan.try_walk(spark, spec, anchor, prefix, force=path == "walk")
        last_path["path"] = "walk"
        if walk_frame is None and path in ("auto", "jump"):  # one parent per node: path doubling
            walk_frame = recursive_jump.try_jump(spark, spec, anchor, prefix)
            last_path["path"] = "jump"
        if walk_frame is not None:
            return walk_frame
    last_path["path"] = "levels"
    return run_levels(spark, spec, anchor, prefix)


def run_levels(spark, spec: RecursiveSpec, anchor, prefix: str):
    """Semi-naive iteration, one Spark query per level."""
    from pyspark.sql import functions as F

    tag = next(_counter)
    working_view, union_view = f"__sx_rec_{tag}_working", f"__sx_rec_{tag}_union"
    step_sql = substitute_step(spec.step_sql, spec.name, working_view, union_view)
    schema = anchor.schema

    def conform(frame):
        if len(frame.columns) != len(schema.fields):
            raise SqlextError(
                "UNSUPPORTED_STATEMENT", function=FUNCTION,
                reason=f"the step of {spec.name} returns {len(frame.columns)} columns, the anchor "
                       f"{len(schema.fields)}", fix="Make anchor and step return the same columns.")
        renamed = frame.toDF(*[f"__sx_c{i}" for i in range(len(schema.fields))])
        return renamed.select([F.col(f"__sx_c{i}").cast(f.dataType).alias(f.name)
                               for i, f in enumerate(schema.fields)])

    def run_step(working, union=None):
        working.createOrReplaceTempView(working_view)
        if union is not None:
            union.createOrReplaceTempView(union_view)
        return conform(spark.sql(f"{prefix} {step_sql}" if prefix else step_sql))

    try:
        if spec.key:
            return _levels_keyed(spec, anchor, run_step)
        return _levels(spec, anchor, run_step)
    finally:
        spark.catalog.dropTempView(working_view)
        spark.catalog.dropTempView(union_view)


def _levels(spec: RecursiveSpec, anchor, run_step):
    level = anchor.distinct() if spec.distinct else anchor
    level = _cut(level)
    seen = level if spec.distinct else None
    done, pending = None, []
    k = 0
    while not level.isEmpty():
        if k >= spec.max_level:
            raise level_limit_error(spec.name, k, spec.max_level)
        pending.append(level)
        if len(pending) >= COLLAPSE_EVERY:
            done = _cut(_union_all([done] + pending if done is not None else pending))
            pending = []
        produced = run_step(level)
        if spec.distinct:
            produced = produced.distinct().subtract(seen)
        level = _cut(produced)
        if spec.distinct:
            seen = _cut(seen.union(level))
        k += 1
    parts = ([done] if done is not None else []) + pending
    if not parts:
        return anchor.limit(0)
    return _cut(_union_all(parts))


def _levels_keyed(spec: RecursiveSpec, anchor, run_step):
    names = anchor.columns
    key = [names[[c.lower() for c in names].index(k.lower())] for k in spec.key]
    union = _cut(_one_per_key(anchor, key))
    working = union
    k = 0
    while not working.isEmpty():
        if k >= spec.max_level:
            raise level_limit_error(spec.name, k, spec.max_level)
        produced = _one_per_key(run_step(working, union), key)
        changed = _cut(_anti_join(produced, union, names))
        union = _cut(_anti_join(union, changed, key).unionByName(changed))
        working = changed
        k += 1
    return union


def _anti_join(left, right, columns: list[str]):
    """Rows of ``left`` with no row of ``right`` equal (NULL-safe) on ``columns``."""
    from pyspark.sql import functions as F

    renamed = right.select([F.col(c).alias(f"__sx_r{i}") for i, c in enumerate(columns)])
    condition = None
    for i, c in enumerate(columns):
        term = left[c].eqNullSafe(renamed[f"__sx_r{i}"])
        condition = term if condition is None else condition & term
    return left.join(renamed, on=condition, how="left_anti")


def _one_per_key(frame, key: list[str]):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = [F.col(c).asc_nulls_first() for c in frame.columns]
    window = Window.partitionBy(*[F.col(k) for k in key]).orderBy(*order)
    return frame.withColumn("__sx_rank", F.row_number().over(window)) \
        .where("__sx_rank = 1").drop("__sx_rank")


def _cut(frame):
    """Materialise ``frame`` and cut its lineage, so that level k's plan does not hold level
    k-1's. The columns are re-aliased on top of the checkpoint: a checkpoint keeps the
    attribute ids of the plan it came from, which trips Spark's analyzer when the step joins
    it with a relation that plan also read."""
    from pyspark.sql import functions as F

    checkpointed = frame.localCheckpoint()
    return checkpointed.select([F.col(f"`{c}`").alias(c) for c in checkpointed.columns])


def _union_all(frames):
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def substitute_step(step_sql: str, name: str, working_view: str, union_view: str) -> str:
    """The step reading ``working_view`` where it read ``name`` (keeping ``name`` as the
    alias, so qualified columns still resolve) and ``union_view`` for ``recurring.name``."""
    from sqlglot import exp

    from rewrites.dialect import parse_one, to_sql

    tree = parse_one(step_sql)
    for table in list(tree.find_all(exp.Table)):
        if not isinstance(table.this, exp.Identifier) or table.name.lower() != name.lower():
            continue
        db = table.db.lower() if table.db else ""
        if db not in ("", "recurring"):
            continue
        alias = table.alias or name
        replacement = exp.Table(this=exp.to_identifier(working_view if not db else union_view),
                                alias=exp.TableAlias(this=exp.to_identifier(alias)))
        table.replace(replacement)
    return to_sql(tree)

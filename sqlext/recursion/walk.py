"""Deciding whether a recursion's step is a graph walk, compiling it, and running it.

A step is a graph walk when it is ``SELECT ... FROM r JOIN e ON r.a = e.b [AND ...] [WHERE
...]`` (either order, inner join), the join key is an integer on both sides, every column and
condition is in the vocabulary of :func:`sqlext.udfs.recursive_expand.evaluate`, and ``e`` is small
enough to collect (:func:`plan_walk`, which says why when it is not: then the recursion runs
level by level); :func:`run_walk` runs it: the relation collected into the driver and the walk
(:func:`sqlext.udfs.recursive_expand.walk`) in Spark's workers over the seeds.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import StructField, StructType
from sqlglot import exp

from sqlext.errors import SqlextError
from sqlext.functions.recursive_expand import FUNCTION, RecursiveSpec
from sqlext.language.dialect import INTEGRAL, conjuncts, parse_one, to_sql
from sqlext.language.sqltree import col, helper
from sqlext.recursion.levels import reads_recurring
from sqlext.udfs.recursive_expand import EdgeIndex, NotExact, WalkPlan, walk

# A join relation up to this estimated size is collected and shipped to the workers.
# The walk collects the joined relation into the driver (as a broadcast join does); above
# this estimate, or when collecting fails, the recursion runs level by level instead. The
# embedded session's driver has Spark's default 1 GB heap, so the limit stays well below it
# (docs/performance.md: what did not fit).
WALK_MAX_BYTES = 64 * 1024 * 1024
WALK_MAX_ROWS = 50_000_000

_UNKNOWN_SIZE = 2**62  # Spark's estimate for a relation it cannot size (defaultSizeInBytes)


class NoWalk(Exception):
    """The step is not a graph walk (the message says why)."""


@dataclass
class Walk:
    """A recursion the graph walk will run: its compiled step and, when the step joins the CTE
    with a relation, that relation's columns to collect (``edges``, a DataFrame) and Spark's
    estimate of their size; ``why`` says so in words."""

    plan: WalkPlan
    edges: object | None
    why: str


def plan_walk(spark, spec: RecursiveSpec, anchor, scoped, force: bool = False) -> Walk | str:
    """The graph walk the recursion takes, or why it takes none (``force``: raise instead).

    Nothing runs but Spark's analysis and size estimate of the joined relation (and a count
    of its rows when Spark has no estimate), so ``sqlext explain`` asks this too."""
    try:
        plan, edge_source, edge_columns = compile_walk(spark, spec, anchor, scoped)
    except NoWalk as why:
        if force:
            raise
        return str(why)
    vocabulary = "every column and condition is in the vocabulary the walk computes exactly"
    tasks = ("one task walks all anchor rows to the end (UNION and USING KEY need them together)"
             if spec.distinct or spec.key else "each task walks its anchor rows to the end")
    if edge_source is None:
        return Walk(plan, None, f"the step reads {spec.name} alone and {vocabulary}; {tasks}, one Spark job in all")
    query = exp.select(*[col(c) for c in edge_columns], copy=False).from_(edge_source.copy(), copy=False)
    edge_frame = spark.sql(scoped(to_sql(query)))
    relation = to_sql(edge_source)
    size = None
    if not force:
        size = _size_in_bytes(edge_frame)
        if size is not None and size >= _UNKNOWN_SIZE:  # no estimate (an RDD, a Python source): count
            size = edge_frame.count() * 16 * len(edge_columns)
        if size is None or size > WALK_MAX_BYTES:
            estimate = "has no size estimate" if size is None else f"is about {_size(size)}"
            return (f"the joined relation {relation} {estimate}, over the {_size(WALK_MAX_BYTES)} "
                    "the walk collects into the driver")
    held = "" if size is None else f" (about {_size(size)}, under {_size(WALK_MAX_BYTES)})"
    return Walk(plan, edge_frame,
                f"the step joins {spec.name} with {relation} on an integer key and {vocabulary}; "
                f"{relation}{held} is collected once and {tasks}, one Spark job in all")


def _size(size: int) -> str:
    """A size in bytes as a person reads it: ``512 bytes``, ``1.5 KB``, ``64 MB``."""
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if size >= scale:
            return f"{size / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{size} bytes"


def run_walk(spark, spec: RecursiveSpec, anchor, chosen: Walk, force: bool = False):
    """The walk's result, lazy like any Spark query; ``None`` when the joined relation turns out
    too large to collect (then the recursion runs level by level)."""
    index = None
    if chosen.edges is not None:
        index = _collect_edges(chosen.edges, chosen.plan, force)
        if index is None:
            return None
    chosen.plan.types = [to_arrow_type(f.dataType) for f in anchor.schema.fields]
    return _walk_frame(spark, spec, anchor, index, chosen.plan)


def _collect_edges(edge_frame, plan: WalkPlan, force: bool):
    """The joined relation's columns, collected and indexed by the join key; None when the
    driver cannot hold them."""
    try:
        table = edge_frame.toArrow()
    except Exception:  # noqa: BLE001 - the driver could not hold the edges: walk level by level
        if force:
            raise
        return None
    if table.num_rows > WALK_MAX_ROWS and not force:
        return None
    return EdgeIndex.build(table, plan.key_e)


def _walk_frame(spark, spec: RecursiveSpec, anchor, index: EdgeIndex | None, plan: WalkPlan):
    schema = StructType([StructField(f.name, f.dataType, True) for f in anchor.schema.fields])
    out_schema = pa.schema([pa.field(f.name, t) for f, t in zip(schema.fields, plan.types)])

    name = spec.name
    names = [f.name for f in anchor.schema.fields]

    def run(batches):
        batches = list(batches)
        if not batches:
            return
        seeds = pa.Table.from_batches(batches).rename_columns(names)
        if not seeds.num_rows:
            return
        try:
            for level in walk(seeds, index, plan):
                level = pa.Table.from_arrays([c.cast(t) for c, t in zip(level.columns, plan.types)],
                                             schema=out_schema)
                yield from level.to_batches(max_chunksize=200_000)
        except NotExact as error:
            raise SqlextError("RECURSION_VALUE_OUT_OF_RANGE", function=FUNCTION, name=name,
                              reason=str(error).splitlines()[0]) from None

    # mapInArrow reads its input by column name, which PySpark parses (a backtick in a name
    # breaks it): the seeds travel under helper names, renamed back inside the walk
    seeds = anchor.toDF(*[helper(f"c{i}") for i in range(len(names))])
    parallelism = spark.sparkContext.defaultParallelism
    if spec.distinct or spec.key:
        # UNION drops rows seen from any seed, USING KEY keeps one row per key over all
        # seeds: one walk over all of them
        seeds = seeds.coalesce(1)
    elif seeds.rdd.getNumPartitions() < parallelism:
        seeds = seeds.repartition(parallelism)
    # Lazy, like any Spark query: materialising millions of rows costs more than the walk
    # (errors, such as the level limit, surface when the result is read).
    return seeds.mapInArrow(run, schema)


def _size_in_bytes(frame) -> int | None:
    try:
        return int(str(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except Exception:  # noqa: BLE001 - no estimate (a Spark Connect session)
        return None


def compile_walk(spark, spec: RecursiveSpec, anchor, scoped):
    step = parse_one(spec.step_sql)
    joins = step.args.get("joins") or []
    if not isinstance(step, exp.Select) or len(joins) > 1 or not step.args.get("from_"):
        raise NoWalk("the step does not read the CTE alone or join it with exactly one relation")
    if step.args.get("distinct"):
        raise NoWalk("DISTINCT step")
    if not joins:
        return _compile_alone(spec, step, anchor)
    try:
        join, r_table, e_table = split_join(step, spec.name)
    except ValueError as why:
        raise NoWalk(str(why)) from None
    if any(reads_recurring(t, spec.name) for t in e_table.find_all(exp.Table)):
        # the result so far changes at every level: nothing to collect once
        raise NoWalk(f"the joined relation reads recurring.{spec.name}, the recursion's own result")
    alias = e_table.args.get("alias")
    if isinstance(e_table, exp.Table) and alias is not None and alias.args.get("columns"):
        # t AS t1(c1, c2) renames t's columns: read it through that alias
        e_source = exp.Subquery(this=exp.select("*").from_(e_table.copy()))
    elif isinstance(e_table, exp.Table) and isinstance(e_table.this, exp.Identifier):
        e_source = exp.Table(this=e_table.this.copy(), db=_copy(e_table.args.get("db")),
                             catalog=_copy(e_table.args.get("catalog")))
    elif isinstance(e_table, exp.Subquery) and isinstance(e_table.this, exp.Query):
        e_source = exp.Subquery(this=e_table.this.copy())
    else:
        raise NoWalk("the joined relation is not a table or a subquery")
    r_types = _cte_columns(r_table, anchor)
    try:
        e_frame = spark.sql(scoped(to_sql(exp.select("*").from_(e_source.copy()))))
    except Exception as error:  # noqa: BLE001 - the level path runs the step and reports it as written
        raise NoWalk(f"the joined relation cannot be read on its own ({type(error).__name__})") from None
    e_types = {f.name.lower(): (f.name, f.dataType.simpleString()) for f in e_frame.schema.fields}
    compiler = _Compiler(r_table.alias_or_name.lower(), e_table.alias_or_name.lower(), r_types, e_types)

    conditions = conjuncts(join.args.get("on")) + conjuncts((step.args.get("where") or exp.Where()).this)
    key = None
    filters = []
    for condition in conditions:
        if key is None and isinstance(condition, exp.EQ):
            sides = [compiler.side_of(condition.this), compiler.side_of(condition.expression)]
            if sorted(s or "" for s in sides) == ["e", "r"]:
                r_col, e_col = (condition.this, condition.expression) if sides[0] == "r" else \
                    (condition.expression, condition.this)
                (_, r_name, r_kind), (_, e_name, e_kind) = compiler.column(r_col), compiler.column(e_col)
                if r_kind == "int" and e_kind == "int":
                    key = (r_name, e_name)
                    continue
        filters.append(compiler.boolean(condition))
    if key is None:
        raise NoWalk("no integer equality between the CTE and the relation")
    plan = WalkPlan(name=spec.name, columns=list(spec.columns), key_r=key[0], key_e=key[1],
                    projections=_projections(step, spec, compiler, anchor), filters=filters,
                    distinct=spec.distinct, max_level=spec.max_level, key=list(spec.key),
                    row_limit=spec.row_limit)
    edge_columns = sorted(compiler.e_used | {key[1]})
    return plan, e_source, edge_columns


def _copy(node: exp.Expression | None) -> exp.Expression | None:
    return node.copy() if node is not None else None


def split_join(step: exp.Select, name: str):
    """The one inner join (with ON) of a step that joins the CTE ``name`` with one relation:
    (the join, the CTE's table, the relation), whichever is written first; ValueError says
    why the step is not that."""
    joins = step.args.get("joins") or []
    if len(joins) != 1:
        raise ValueError("the step does not join the CTE with exactly one relation")
    join = joins[0]
    if join.args.get("side") or (join.args.get("kind") or "").upper() not in ("", "INNER") \
            or join.args.get("using") or join.args.get("method"):
        raise ValueError("not an inner join with ON")
    first, second = step.args["from_"].this, join.this
    is_r = [isinstance(t, exp.Table) and not t.db and isinstance(t.this, exp.Identifier)
            and t.name.lower() == name.lower() for t in (first, second)]
    if is_r.count(True) != 1:
        raise ValueError("the CTE is not one side of the join")
    return (join, first, second) if is_r[0] else (join, second, first)


def _compile_alone(spec: RecursiveSpec, step: exp.Select, anchor):
    """A step that reads the CTE alone: ``SELECT ... FROM r [WHERE ...]``."""
    source = step.args["from_"].this
    if not (isinstance(source, exp.Table) and not source.db and source.name.lower() == spec.name.lower()):
        raise NoWalk("the step does not read the CTE")
    r_types = _cte_columns(source, anchor)
    compiler = _Compiler(source.alias_or_name.lower(), None, r_types, {})
    filters = [compiler.boolean(c) for c in conjuncts((step.args.get("where") or exp.Where()).this)]
    plan = WalkPlan(name=spec.name, columns=list(spec.columns), key_r=None, key_e=None,
                    projections=_projections(step, spec, compiler, anchor), filters=filters,
                    distinct=spec.distinct, max_level=spec.max_level, key=list(spec.key),
                    row_limit=spec.row_limit)
    return plan, None, []


def _cte_columns(r_table: exp.Table, anchor) -> dict:
    """The CTE's columns as the step names them (``r AS r1(a, b)`` renames them by position):
    name -> (the level's column name, its type)."""
    fields = anchor.schema.fields
    alias = r_table.args.get("alias")
    names = [c.name for c in alias.args.get("columns") or []] if alias is not None else []
    if names and len(names) != len(fields):
        raise NoWalk(f"{r_table.sql()} names {len(names)} columns, the CTE has {len(fields)}")
    return {(names[i] if names else f.name).lower(): (f.name, f.dataType.simpleString())
            for i, f in enumerate(fields)}


def _projections(step: exp.Select, spec: RecursiveSpec, compiler: "_Compiler", anchor) -> list:
    selects = step.selects
    if len(selects) != len(spec.columns) or any(isinstance(s, exp.Star) for s in selects):
        raise NoWalk("the step's columns are not listed one by one")
    targets = [f.dataType.simpleString() for f in anchor.schema.fields]
    projections = []
    for select, target in zip(selects, targets):
        node, kind = compiler.value(select.this if isinstance(select, exp.Alias) else select)
        if (kind == "int") != (target in INTEGRAL) or (kind == "str") != (target == "string"):
            raise NoWalk(f"a {kind} value for a {target} column")
        projections.append(node)
    return projections


_COMPARISONS = {exp.EQ: "eq", exp.NEQ: "neq", exp.LT: "lt", exp.LTE: "lte", exp.GT: "gt", exp.GTE: "gte"}


class _Compiler:
    def __init__(self, r_alias, e_alias, r_types, e_types):
        self.r_alias, self.e_alias = r_alias, e_alias
        self.r_types, self.e_types = r_types, e_types
        self.e_used: set[str] = set()

    def side_of(self, node) -> str | None:
        if not isinstance(node, exp.Column):
            return None
        try:
            return self.column(node)[0]
        except NoWalk:
            return None

    def column(self, node: exp.Column):
        name = node.name.lower()
        qualifier = node.table.lower() if node.table else None
        candidates = []
        if qualifier in (None, self.r_alias) and name in self.r_types:
            candidates.append(("r", self.r_types[name]))
        if qualifier in (None, self.e_alias) and name in self.e_types:
            candidates.append(("e", self.e_types[name]))
        if qualifier not in (None, self.r_alias, self.e_alias) or len(candidates) != 1 or node.args.get("db"):
            raise NoWalk(f"column {node.sql()} is ambiguous or unknown")
        side, (actual, type_name) = candidates[0]
        if type_name in INTEGRAL:
            kind = "int"
        elif type_name == "string":
            kind = "str"
        elif type_name == "boolean":
            kind = "bool"
        else:
            raise NoWalk(f"column {node.sql()} has type {type_name}")
        if side == "e":
            self.e_used.add(actual)
        return side, actual, kind

    def value(self, node) -> tuple[tuple, str]:
        if isinstance(node, exp.Paren):
            return self.value(node.this)
        if isinstance(node, exp.Column):
            side, name, kind = self.column(node)
            return ("col", side, name), kind
        if isinstance(node, exp.Literal):
            if node.is_string:
                return ("lit", node.this, pa.large_string()), "str"
            text = node.this
            if text.lstrip("-").isdigit():
                value = int(text)
                if -2**31 <= value < 2**31:
                    return ("lit", value, pa.int32()), "int"
                if -2**63 <= value < 2**63:
                    return ("lit", value, pa.int64()), "int"
            raise NoWalk(f"literal {text}")
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
            (a, ka), (b, kb) = self.value(node.this), self.value(node.expression)
            if ka != "int" or kb != "int":
                raise NoWalk("arithmetic on non-integers")
            return ({exp.Add: "add", exp.Sub: "sub", exp.Mul: "mul"}[type(node)], a, b), "int"
        if isinstance(node, (exp.DPipe, exp.Concat)):
            if isinstance(node, exp.Concat) and node.args.get("coalesce"):
                raise NoWalk("concat that skips NULLs")
            parts = [node.this, node.expression] if isinstance(node, exp.DPipe) else node.expressions
            compiled = []
            for part in parts:
                value, kind = self.value(part)
                if kind not in ("str", "int"):
                    raise NoWalk("concat of a non-string")
                compiled.append(value if kind == "str" else ("to_string", value))
            return ("concat", compiled), "str"
        if isinstance(node, exp.Cast) and node.to.this == exp.DataType.Type.BIGINT:
            value, kind = self.value(node.this)  # any integer fits a BIGINT: the cast never fails
            if kind != "int":
                raise NoWalk("cast of a non-integer to BIGINT")
            return ("cast", value, pa.int64()), "int"
        if isinstance(node, exp.Cast) and node.to.this in (exp.DataType.Type.VARCHAR, exp.DataType.Type.TEXT) \
                and not node.to.expressions:
            value, kind = self.value(node.this)
            if kind not in ("str", "int"):
                raise NoWalk("cast of a non-integer to string")
            return (value if kind == "str" else ("to_string", value)), "str"
        return self.boolean(node), "bool"

    def boolean(self, node) -> tuple:
        if isinstance(node, exp.Paren):
            return self.boolean(node.this)
        for cls, name in _COMPARISONS.items():
            if type(node) is cls:
                (a, ka), (b, kb) = self.value(node.this), self.value(node.expression)
                if ka != kb or ka not in ("int", "str"):
                    raise NoWalk("comparison of different types")
                return (name, a, b)
        if isinstance(node, exp.And):
            return ("and", self.boolean(node.this), self.boolean(node.expression))
        if isinstance(node, exp.Or):
            return ("or", self.boolean(node.this), self.boolean(node.expression))
        if isinstance(node, exp.Not):
            inner = node.this
            if isinstance(inner, exp.Is) and isinstance(inner.expression, exp.Null):
                return ("is_not_null", self.value(inner.this)[0])
            return ("not", self.boolean(inner))
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            return ("is_null", self.value(node.this)[0])
        if isinstance(node, exp.Column):
            side, name, kind = self.column(node)
            if kind == "bool":
                return ("col", side, name)
        raise NoWalk(f"expression {node.sql()} is outside the graph-walk vocabulary")

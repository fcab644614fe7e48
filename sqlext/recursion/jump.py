"""RECURSIVE_EXPAND by pointer jumping (path doubling), for recursions that follow one parent
per node: ancestors in a tree or a forest, the rest of a chain (KIP-857's canonical example).

The shape, read from the parsed step (anything else gives ``None`` and another path runs)::

    SELECT <per CTE column: r.c | e.x | r.c + <integer literal> | r.c - <integer literal>>
    FROM r JOIN e ON r.f = e.k [AND <conditions on e alone>] [WHERE <conditions on e alone>]

under ``UNION ALL``, where ``f`` (the *frontier*) is the CTE column the step joins on and is
replaced by a column of ``e``, every other CTE column is carried unchanged (``r.c`` in its own
position), replaced by a column of ``e``, or is a counter (``r.c + 1``); ``k`` is an integer
(or string) key that must be unique among the rows of ``e`` that pass the conditions, which is
checked on the data before anything else runs (a repeated key gives ``None``: the walk or the
level path runs). ``UNION`` (distinct) is not taken: it goes to the other paths.

Then a row of level ``n`` is determined by its anchor row and the ``n``-th node of the chain
``u_0 = frontier, u_{i+1} = e[u_i].p`` (as long as ``u_i`` is a key of ``e``): the carried
columns are the anchor's, the ``e`` columns those of ``e[u_{n-1}]``, a counter is the
anchor's plus ``n`` times its step. So the result is the anchor joined with, for every key
``u`` of ``e``, the list of its chain's ``e`` values, exploded. Those lists are computed by
path doubling, every round one Spark join on the executors, nothing collected::

    T_0(u) = ([e[u]],  next = e[u].p)
    T_{k+1}(u) = T_k(u) ++ T_k(next_k(u)),  next_{k+1}(u) = next_k(next_k(u))   (while open)

A row is *open* while its list holds ``2^k`` values and its chain may go on; the rounds stop
when no row is open: ``log2(depth) + 1`` rounds, or when a round closes no row (what is still
open then lies on a cycle). A list of ``max_level`` values or more (a
chain that deep, or a cycle, which never closes) reached by an anchor row is the level
limit, checked exactly before the result is returned: ``[RECURSION_LEVEL_LIMIT_EXCEEDED]``
at level ``max_level``, as Spark counts levels. The rounds never go past ``max_level``.

The result is lazy (one join of the anchor with the lists, then a map-side explode); only a
counter out of its column's range fails when it is read, with
``[RECURSION_VALUE_OUT_OF_RANGE]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import functions as F
from pyspark.sql.types import LongType
from sqlglot import exp

from sqlext.errors import message_text
from sqlext.functions.recursive_expand import level_limit_error, row_limit_error
from sqlext.language.dialect import conjuncts, parse_one, to_sql
from sqlext.recursion.levels import union_all
from sqlext.recursion.walk import split_join

FUNCTION = "RECURSIVE_EXPAND"

# Open rows up to this count are broadcast to the join with the lists (no shuffle of the
# lists, which grow to the size of the result); above it the round is a shuffled join.
BROADCAST_OPEN_ROWS = 100_000
# From the second round on, the keys jumped to are a small part of all keys, smaller each
# round: up to this many, they filter the lists map-side.
BROADCAST_TARGETS = 2_000_000

_INTEGRAL = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}

# What the last run did (for ``sqlext bench recursion`` and tests): rounds, open rows per round.
last_run: dict = {}


class _NoJump(Exception):
    pass


@dataclass
class JumpPlan:
    """``kinds[j]`` for CTE column ``j``: ``("carry",)``, ``("node", e_index)`` or
    ``("count", step)``; ``frontier`` is the CTE column joined on ``e``'s column ``key``
    (both integral, compared as BIGINT, or both strings); ``condition`` is over ``e``'s
    columns renamed ``__sx_e<i>``."""

    frontier: int
    key: int
    kinds: list[tuple]
    condition: exp.Expression | None
    integral: bool


def _e_name(i: int) -> str:
    return f"__sx_e{i}"


def _c_name(j: int) -> str:
    return f"__sx_c{j}"


# ---------------------------------------------------------------------------------------
# recognising the shape


_ALLOWED_IN_CONDITIONS = (
    exp.Column, exp.Identifier, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.And, exp.Or,
    exp.Not, exp.Is, exp.EQ, exp.NEQ, exp.NullSafeEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.In,
    exp.Between, exp.Add, exp.Sub, exp.Mul, exp.Neg, exp.Tuple, exp.DataType, exp.Cast,
)


def compile_jump(spec, anchor, e_frame, r_alias: str, e_alias: str, step: exp.Select) -> JumpPlan:
    """The plan of a step already split into its two relations, or :class:`_NoJump`."""
    r_names = [c.lower() for c in anchor.columns]
    e_names = [c.lower() for c in e_frame.columns]
    r_types = [f.dataType.simpleString() for f in anchor.schema.fields]
    e_types = [f.dataType.simpleString() for f in e_frame.schema.fields]

    def resolve(node: exp.Column) -> tuple[str, int]:
        if node.args.get("db") or node.args.get("catalog") or isinstance(node.this, exp.Star):
            raise _NoJump("qualified column")
        name, qualifier = node.name.lower(), node.table.lower() if node.table else None
        found = []
        if qualifier in (None, r_alias) and name in r_names:
            found.append(("r", r_names.index(name)))
        if qualifier in (None, e_alias) and name in e_names:
            found.append(("e", e_names.index(name)))
        if len(found) != 1 or (name in e_names and e_names.count(name) > 1):
            raise _NoJump(f"column {node.sql()} is ambiguous or unknown")
        return found[0]

    join = step.args["joins"][0]
    conditions = conjuncts(join.args.get("on")) + conjuncts((step.args.get("where") or exp.Where()).this)
    key = None
    kept = []
    for condition in conditions:
        if isinstance(condition, exp.EQ) and isinstance(condition.this, exp.Column) \
                and isinstance(condition.expression, exp.Column):
            sides = [resolve(condition.this), resolve(condition.expression)]
            if sorted(s for s, _ in sides) == ["e", "r"]:
                if key is not None:
                    raise _NoJump("two equalities between the CTE and the relation")
                key = dict(sides)
                continue
        for node in condition.walk():
            if not isinstance(node, _ALLOWED_IN_CONDITIONS):
                raise _NoJump(f"{type(node).__name__} in a condition")
        kept.append(condition.copy())
    if key is None:
        raise _NoJump("no equality between a CTE column and a column of the relation")
    frontier, key_e = key["r"], key["e"]

    renamed = []
    for condition in kept:
        wrapped = exp.Paren(this=condition)  # so that a bare boolean column can be replaced too
        for column in list(wrapped.find_all(exp.Column)):
            side, index = resolve(column)
            if side != "e":
                raise _NoJump("a condition reads the CTE")
            column.replace(exp.column(_e_name(index)))
        renamed.append(wrapped)
    condition = exp.and_(*renamed) if renamed else None

    selects = step.selects
    if len(selects) != len(r_names) or any(isinstance(s, exp.Star) for s in selects):
        raise _NoJump("the step's columns are not listed one by one")
    kinds = []
    for j, select in enumerate(selects):
        node = select.this if isinstance(select, exp.Alias) else select
        node = _unparen(node)
        if isinstance(node, exp.Column):
            side, index = resolve(node)
            if side == "r" and index == j:
                kinds.append(("carry",))
            elif side == "e":
                kinds.append(("node", index))
            else:
                raise _NoJump("a CTE column moves to another position")
            continue
        if isinstance(node, (exp.Add, exp.Sub)):
            left, right = _unparen(node.this), _unparen(node.expression)
            if isinstance(node, exp.Add) and not isinstance(left, exp.Column):
                left, right = right, left
            value = _integer(right)
            if isinstance(left, exp.Column) and value is not None and resolve(left) == ("r", j) \
                    and r_types[j] in _INTEGRAL:
                kinds.append(("count", value if isinstance(node, exp.Add) else -value))
                continue
        raise _NoJump(f"column {j + 1} of the step is not carried, taken from the relation or counted")
    if kinds[frontier][0] != "node":
        raise _NoJump("the joined CTE column is not replaced by a column of the relation")
    parent = kinds[frontier][1]
    types = (r_types[frontier], e_types[key_e], e_types[parent])
    if all(t in _INTEGRAL for t in types):
        if _INTEGRAL[types[2]] > _INTEGRAL[types[0]]:
            raise _NoJump("the next key does not fit the CTE column")  # the cast could change it
        integral = True
    elif all(t == "string" for t in types):
        integral = False
    else:
        raise _NoJump(f"join key types {types}")
    return JumpPlan(frontier=frontier, key=key_e, kinds=kinds, condition=condition, integral=integral)


def _unparen(node):
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _integer(node) -> int | None:
    node = _unparen(node)
    sign = 1
    if isinstance(node, exp.Neg):
        sign, node = -1, _unparen(node.this)
    if isinstance(node, exp.Literal) and not node.is_string and node.this.isdigit():
        return sign * int(node.this)
    return None


def _split_step(spec):
    """The step's tree, the CTE's alias, the relation's alias and the relation as SQL."""
    step = parse_one(spec.step_sql)
    if not isinstance(step, exp.Select):
        raise _NoJump("the step is not a SELECT")
    if any(step.args.get(k) for k in ("distinct", "group", "having", "qualify", "limit", "offset", "order",
                                       "windows", "laterals", "with_", "distribute", "sort", "cluster")):
        raise _NoJump("the step has a clause of its own")
    try:
        _, r_table, e_table = split_join(step, spec.name)
    except ValueError as why:
        raise _NoJump(str(why)) from None
    if isinstance(e_table, exp.Table) and isinstance(e_table.this, exp.Identifier):
        source = exp.Table(this=e_table.this.copy(), db=e_table.args.get("db"), catalog=e_table.args.get("catalog"))
    elif isinstance(e_table, exp.Subquery) and isinstance(e_table.this, exp.Query):
        source = e_table.this.copy().subquery("__sx_e")
    else:
        raise _NoJump("the joined relation is not a table or a subquery")
    r_alias = r_table.args.get("alias")
    if r_alias is not None and r_alias.args.get("columns"):
        raise _NoJump("the step renames the CTE's columns")
    if r_table.alias_or_name.lower() == e_table.alias_or_name.lower():
        raise _NoJump("both sides have one alias")
    return step, r_table.alias_or_name.lower(), e_table.alias_or_name.lower(), to_sql(exp.select("*").from_(source))


# ---------------------------------------------------------------------------------------
# running it


def plan_jump(spark, spec, anchor, scoped):
    """``(plan, joined relation)`` when the step has the shape path doubling follows, or why
    not (a string). Only Spark's analysis runs: whether the key is unique is checked on the
    data by :func:`run_jump`."""
    if spec.distinct or spec.key or spec.max_level < 1:
        return "it follows UNION ALL only" if spec.max_level >= 1 else "the level limit is below 1"
    try:
        step, r_alias, e_alias, e_sql = _split_step(spec)
        e_frame = spark.sql(scoped(e_sql))
        plan = compile_jump(spec, anchor, e_frame, r_alias, e_alias, step)
        if any(k[0] == "count" and abs(k[1]) * spec.max_level >= 2**62 for k in plan.kinds):
            raise _NoJump("a counter's step times the level limit does not fit a BIGINT")
    except _NoJump as why:
        last_run.clear()
        last_run.update(path=None, why=str(why))
        return str(why)
    return plan, e_frame


def _cut(frame):
    checkpointed = frame.localCheckpoint()
    return checkpointed.select([F.col(c).alias(c) for c in checkpointed.columns])


def run_jump(spark, spec, plan: JumpPlan, anchor, e_frame):
    e = e_frame.toDF(*[_e_name(i) for i in range(len(e_frame.columns))])
    if plan.condition is not None:
        e = e.where(F.expr(to_sql(plan.condition)))

    def as_key(column):
        return column.cast(LongType()) if plan.integral else column

    parent = plan.kinds[plan.frontier][1]
    values = sorted({kind[1] for kind in plan.kinds if kind[0] == "node"})  # e columns in the output
    arrays = {i: f"__sx_a{i}" for i in values}
    # one row per key, counting the key's rows: one parent per node is checked on the data
    # (a key twice means the step branches, which this method cannot follow)
    start = e.select(as_key(F.col(_e_name(plan.key))).alias("__sx_k"),
                     as_key(F.col(_e_name(parent))).alias("__sx_n"),
                     *[F.col(_e_name(i)).alias(arrays[i]) for i in values]) \
        .where(F.col("__sx_k").isNotNull()).groupBy("__sx_k").agg(
            F.count(F.lit(1)).alias("__sx_count"), F.first("__sx_n").alias("__sx_n"),
            *[F.array(F.first(a)).alias(a) for a in arrays.values()])
    start = _cut(start.withColumn("__sx_o", F.col("__sx_n").isNotNull()))
    if not start.where(F.col("__sx_count") > 1).isEmpty():
        last_run.clear()
        last_run.update(path=None, why="the key is not unique")
        return None
    start = start.drop("__sx_count")
    lists = [name for name in arrays.values()]
    done = []  # rows whose chain ended, one frame per round
    current = start
    opened = current.where("__sx_o")
    open_count = opened.count()
    done.append(current.where("NOT __sx_o"))
    rounds, counts, length = 0, [open_count], 1
    while open_count and length < spec.max_level:
        lookup = union_all(done + [opened])
        if rounds:  # from the second round on, few rows are jumped to: filter the lists on them
            targets = _cut(opened.select(F.col("__sx_n").alias("__sx_t")).where("__sx_t IS NOT NULL").distinct())
            if targets.count() <= BROADCAST_TARGETS:
                lookup = lookup.join(F.broadcast(targets), F.col("__sx_k") == F.col("__sx_t"), "left_semi")
        lookup = lookup.select(
            F.col("__sx_k").alias("__sx_lk"), F.col("__sx_n").alias("__sx_ln"), F.col("__sx_o").alias("__sx_lo"),
            *[F.col(a).alias(a + "l") for a in lists])
        if open_count <= BROADCAST_OPEN_ROWS:
            matched = lookup.join(F.broadcast(opened), F.col("__sx_n") == F.col("__sx_lk"), "inner")
            matched = _cut(matched.select(
                "__sx_k", F.col("__sx_ln").alias("__sx_n"),
                *[F.concat(F.col(a), F.col(a + "l")).alias(a) for a in lists], F.col("__sx_lo").alias("__sx_o")))
            ended = opened.join(F.broadcast(matched.select("__sx_k")), "__sx_k", "left_anti") \
                .withColumn("__sx_o", F.lit(False))
            current = union_all([matched, _cut(ended)])
        else:
            joined = opened.join(lookup, F.col("__sx_n") == F.col("__sx_lk"), "left")
            found = F.col("__sx_lk").isNotNull()
            current = _cut(joined.select(
                "__sx_k", F.when(found, F.col("__sx_ln")).alias("__sx_n"),
                *[F.when(found, F.concat(F.col(a), F.col(a + "l"))).otherwise(F.col(a)).alias(a) for a in lists],
                (found & F.col("__sx_lo")).alias("__sx_o")))
        opened = current.where("__sx_o")
        done.append(current.where("NOT __sx_o"))
        open_count = opened.count()
        rounds += 1
        length *= 2
        counts.append(open_count)
        if open_count and open_count == counts[-2]:
            # No row closed in this round: along a chain the rows' lengths fall by one a node,
            # so a finite chain longer than this round's lists would have closed a row in it.
            # What is still open lies on a cycle: it never closes, whatever the limit.
            break
    chains = union_all(done + [opened])  # still open here: at least max_level values

    anchor_rows = anchor.toDF(*[_c_name(j) for j in range(len(anchor.columns))])
    frontier_key = as_key(F.col(_c_name(plan.frontier)))
    too_deep = chains.where(F.col("__sx_o") | (F.size(lists[0]) >= spec.max_level)).select("__sx_k")
    if (open_count or length >= spec.max_level) and not too_deep.isEmpty():
        reached = anchor_rows.join(too_deep, frontier_key == F.col("__sx_k"), "left_semi")
        if not reached.isEmpty():
            raise level_limit_error(spec.name, spec.max_level, spec.max_level)

    last_run.clear()
    last_run.update(path="jump", rounds=rounds, open_rows=counts)
    fields = anchor.schema.fields
    joined = anchor_rows.join(chains.drop("__sx_n", "__sx_o"), frontier_key == F.col("__sx_k"), "left")
    # the row limit, as the other paths apply it: an anchor row gives itself and one row per
    # value of its chain, and no chain is longer than ``length``; only when that bound passes
    # the limit are the rows counted (one more join)
    walked = arrays[parent]
    if anchor_rows.count() * (1 + length) > spec.row_limit:
        total = joined.select(F.sum(1 + F.coalesce(F.size(walked), F.lit(0)))).first()[0] or 0
        if total > spec.row_limit:
            raise row_limit_error(spec.name, min(length, spec.max_level), spec.row_limit)
    # level 0 is the anchor row: the walked list gets a NULL in front, so that position p of
    # the exploded list is level p (flat columns and posexplode: code-generated, unlike a lambda)
    empty = F.array().cast(chains.schema[walked].dataType)
    exploded = joined.select(
        *[_c_name(j) for j in range(len(fields))], *[a for a in lists if a != walked],
        F.posexplode(F.concat(F.array(F.lit(None).cast(chains.schema[walked].dataType.elementType)),
                              F.coalesce(F.col(walked), empty))).alias("__sx_p", "__sx_v"))
    at_anchor = F.col("__sx_p") == 0
    out = []
    for j, kind in enumerate(plan.kinds):
        column = F.col(_c_name(j))
        if kind[0] == "node":
            value = F.col("__sx_v") if kind[1] == parent else F.get(F.col(arrays[kind[1]]), F.col("__sx_p") - 1)
            column = F.when(at_anchor, column).otherwise(value.cast(fields[j].dataType))
        elif kind[0] == "count":
            column = F.when(at_anchor, column).otherwise(
                _counter(column, F.col("__sx_p"), kind[1], fields[j].dataType, spec.name))
        out.append(column.alias(fields[j].name))
    return exploded.select(out)


def _counter(column, level, step: int, data_type, name: str):
    """``column + level * step`` in the column's type; out of range fails as the walk does
    (BIGINT arithmetic; a BIGINT column is added with try_add, whose NULL is the overflow)."""
    bits = _INTEGRAL[data_type.simpleString()]
    long = LongType()
    offset = level.cast(long) * F.lit(step).cast(long)  # level <= max_level: the rounds stop there
    message = message_text("RECURSION_VALUE_OUT_OF_RANGE", function=FUNCTION, name=name,
                           reason=f"{data_type.simpleString()} is {-(2 ** (bits - 1))} to {2 ** (bits - 1) - 1}")
    if bits == 64:
        value = F.try_add(column, offset)
        outside = value.isNull() & column.isNotNull()
    else:
        value = column.cast(long) + offset
        outside = (value < F.lit(-(2 ** (bits - 1)))) | (value > F.lit(2 ** (bits - 1) - 1))
    return F.when(outside, F.raise_error(F.lit(message))).otherwise(value.cast(data_type))

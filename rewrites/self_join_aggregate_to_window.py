"""Rule: a self-join feeding an aggregate becomes a window aggregate (running totals and kin).

``SELECT a.id, SUM(b.v) FROM t a JOIN t b ON a.k = b.k AND b.ts <= a.ts GROUP BY a.id``
sums, for every row ``a``, the rows of its key up to its time: the window frame
``PARTITION BY k ORDER BY ts RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW``. The rewrite
computes each row's partial aggregate over its frame in one sorted pass, then combines the
partials of the rows of each group (``SUM`` of partial sums and counts, ``MIN`` of minima,
``MAX`` of maxima, ``AVG`` as sum over count). Bounded bands (``b.ts BETWEEN a.ts - X AND
a.ts``), strict bounds on discrete types (``b.ts < a.ts``: the previous rows) and plain
equi-self-joins (the whole key) are frames too.

Why the result is the same: the join's pairs grouped by columns of ``a`` are, row ``a`` by
row ``a``, exactly the frames of those rows, so combining per-row partials over the group
gives the aggregate over the group's pairs, duplicates of ``a`` included (each duplicate
contributes its own frame, as it contributed its own pairs). Conditions on ``b`` alone
become conditions inside each partial (``SUM(IF(cond, v, NULL))``), conditions on ``a`` alone
filter the rows after the window, and a row with no partner at all (which the inner join
drops) is removed by a partner count. The rule fires only when every condition of the join
is one of these: a condition relating the two sides otherwise cannot be a frame. It leaves
``SUM``/``AVG`` of non-integral values alone (floating-point sums in another order differ in
their last digits; decimal sums of sums widen the type) and aggregates with ``DISTINCT``.

Inside a flat chain of inner joins (KIP-862's shape: ``t a JOIN t b ON ... JOIN d ON d.x =
a.y``) the pair is replaced by the window over ``a`` and the other joins stay as written. It
fires only when no condition outside the pair names ``b`` and the aggregates read ``b``
alone: each row of ``a`` then meets the same rows of the other relations whatever its
partners are, so a join that repeats (or drops) the row repeats (or drops) its whole frame,
exactly as it repeated the row's pairs; the sums of partials over the group stay the sums
over the pairs. A condition joining ``b`` to another relation would make that multiplicity
depend on ``b``, which one partial per row cannot carry: the band form takes such a query.

>>> from sqlext.language.dialect import parse_one, to_sql
>>> from sqlext.analysis.relations import MappingRelations
>>> q = parse_one("SELECT a.id, SUM(b.v) AS total FROM e a JOIN e b ON a.k = b.k AND b.ts <= a.ts GROUP BY a.id")
>>> print(to_sql(self_join_aggregate_to_window(q, MappingRelations({"e": {"id": "int", "k": "int", "ts": "int", "v": "int"}}))))
SELECT a.id, SUM(a.__sx_agg_1) AS total FROM (SELECT `id`, `k`, `ts`, `v`, SUM(`v`) OVER (PARTITION BY `k` ORDER BY `ts` RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS __sx_agg_1 FROM e WHERE NOT `k` IS NULL AND NOT `ts` IS NULL) AS a GROUP BY a.id
"""

from __future__ import annotations

from sqlglot import exp

from sqlext.language.dialect import INTEGRAL, to_sql
from sqlext.analysis.notes import Notes
from sqlext.analysis.relations import Relations, standalone_query
from sqlext.language.sqltree import halias, helper
from sqlext.analysis.self_join_edits import add_where, alias_identifier, and_all, replace_pair
from sqlext.analysis.self_join_match import SelfJoin, match_self_join

RULE = "self_join_aggregate_to_window"
PAIRS = helper("pairs")
PARTIAL = helper("agg_")
AGGREGATES = (exp.Sum, exp.Count, exp.Min, exp.Max, exp.Avg)


def self_join_aggregate_to_window(
    expression: exp.Expression, relations: Relations | None = None, notes: Notes | None = None
) -> exp.Expression:
    notes = notes if notes is not None else Notes()
    for select in list(expression.find_all(exp.Select)):
        if not select.args.get("joins"):
            continue
        aggregates = [f for f in select.find_all(exp.AggFunc) if _in_scope(f, select)]
        if not aggregates:
            continue
        join = match_self_join(select, relations)
        if isinstance(join, str):
            notes.skip(RULE, join)
            continue
        reason = _why_not(select, join, aggregates, relations)
        if reason:
            notes.skip(RULE, reason)
            continue
        _keep_output_names(select, relations)
        _rewrite(select, join, [f for f in select.find_all(exp.AggFunc) if _in_scope(f, select)])
        notes.fire(RULE, f"self-join of {join.source_sql()} feeding {len(aggregates)} aggregate(s) "
                         f"is now a window aggregate over {join.window_sql()}{join.others_note()}")
    return expression


def _why_not(select: exp.Select, join: SelfJoin, aggregates: list[exp.AggFunc], relations) -> str | None:
    a, b = join.left, join.right
    if join.rest:
        return f"the condition {to_sql(join.rest[0])} relates the two sides in a way a window frame cannot"
    mixed = join.names_right(join.outside)
    if mixed is not None:
        # the rows of the other relations a pair meets would depend on b, not on a alone, so
        # one partial per row of a could not stand for them
        return (f"the condition {to_sql(mixed)} relates {b} with another relation of the chain of joins, "
                f"so the other joins change how often each pair is counted")
    if join.band is not None and not join.band.exact:
        return f"a strict bound on {join.band.column!r} ({join.band.column_type}) is not a window frame edge"
    group = select.args.get("group")
    if group is not None and (group.args.get("rollup") or group.args.get("cube") or group.args.get("grouping_sets")):
        return "GROUPING SETS, ROLLUP and CUBE are left as written"
    if any(_in_scope(w, select) for w in select.find_all(exp.Window)):
        return "the query has window functions of its own"
    for aggregate in aggregates:
        if not isinstance(aggregate, AGGREGATES):
            return f"{aggregate.sql_name()} is not one of SUM, COUNT, MIN, MAX, AVG"
        argument = aggregate.this
        if isinstance(argument, exp.Distinct) or aggregate.args.get("distinct"):
            return f"{to_sql(aggregate)} aggregates distinct values"
        if isinstance(argument, exp.Star) and isinstance(aggregate, exp.Count):
            continue
        sides = {c.table.lower() for c in argument.find_all(exp.Column)}
        if sides != {b}:
            return f"{to_sql(aggregate)} does not aggregate columns of {b} alone"
        if isinstance(aggregate, (exp.Sum, exp.Avg)):
            kind = relations.expression_type(join.query, to_sql(_unqualified(argument)))
            if kind is None or kind.split("(")[0].lower() not in INTEGRAL:
                return f"{to_sql(aggregate)} sums {kind or 'values of unknown type'}, not integers"
    outside = _outside_aggregates(select)
    for column in outside:
        if column.table.lower() == b or (column.table.lower() != a and not join.in_chain):
            return f"{to_sql(column)} is used outside an aggregate but is not a column of {a}"
    return None


def _rewrite(select: exp.Select, join: SelfJoin, aggregates: list[exp.AggFunc]) -> None:
    condition = and_all([_unqualified(c) for c in join.right_only])
    pairs = join.window(_partial("COUNT", exp.Literal.number(1), condition, star=condition is None))
    # each distinct partial (by its SQL) is computed once, under the name it got first
    computed = {to_sql(pairs): PAIRS}
    partials = [halias(pairs, PAIRS)]
    if condition is None and _frame_holds_the_row_itself(join):
        computed, partials = {}, []  # every row is its own partner: no row lacks pairs
    replacements = []
    for aggregate in aggregates:
        argument = aggregate.this
        star = isinstance(argument, exp.Star)
        value = exp.Literal.number(1) if star else _unqualified(argument)
        names = []
        kinds = {exp.Sum: ["SUM"], exp.Count: ["COUNT"], exp.Min: ["MIN"], exp.Max: ["MAX"],
                 exp.Avg: ["SUM", "COUNT"]}[type(aggregate)]
        for kind in kinds:
            partial = join.window(_partial(kind, value, condition, star and condition is None))
            key = to_sql(partial)
            if key not in computed:  # the same partial twice is computed once
                computed[key] = f"{PARTIAL}{len(partials) + (0 if PAIRS in computed.values() else 1)}"
                partials.append(halias(partial, computed[key]))
            names.append(exp.column(computed[key], table=alias_identifier(join.left_item)))
        replacements.append((aggregate, _combine(type(aggregate), names)))
    inner = exp.select(*join.column_trees(), *partials, copy=False) \
        .from_(join.source_tree(), copy=False).where(join.not_null_condition(), copy=False)
    for aggregate, combined in replacements:
        aggregate.replace(combined)
    has_pairs = PAIRS in computed.values()
    pairs_filter = [exp.column(PAIRS, table=alias_identifier(join.left_item)) > 0] if has_pairs else []
    moved = replace_pair(select, join, exp.Subquery(
        this=inner, alias=exp.TableAlias(this=alias_identifier(join.left_item))))
    add_where(select, [*pairs_filter, *join.left_only, *moved])


def _frame_holds_the_row_itself(join: SelfJoin) -> bool:
    """Each row that passes the NULL filter is in its own frame (equal keys, offset zero inside
    the band), so it has at least one partner and the inner join keeps it."""
    band = join.band
    if band is None:
        return True
    return (band.lower is None or band.lower.offset.value <= 0) and (band.upper is None or band.upper.offset.value >= 0)


def _keep_output_names(select: exp.Select, relations: Relations) -> None:
    """Alias each unaliased projection that holds an aggregate with the name Spark gives it
    in the original query, so the rewritten query's columns are named the same."""
    unnamed = [i for i, p in enumerate(select.expressions)
               if not isinstance(p, exp.Alias) and p.find(exp.AggFunc) is not None]
    if not unnamed:
        return
    names = relations.columns(standalone_query(select), select) or []
    for i in unnamed:
        projection = select.expressions[i]
        name = names[i] if i < len(names) and names[i] else _spark_name(projection)
        projection.replace(exp.alias_(projection.copy(), name, quoted=True))


def _spark_name(node: exp.Expression) -> str:
    """The name Spark gives an unaliased expression, for the simple shapes it can be read off:
    function names in lower case, column qualifiers dropped, ``count(*)`` as ``count(1)``."""
    node = _unqualified(node)
    for column in node.find_all(exp.Column):
        column.this.set("quoted", False)
    for count in node.find_all(exp.Count):
        if isinstance(count.this, exp.Star):
            count.set("this", exp.Literal.number(1))
    text = to_sql(node)
    for aggregate in AGGREGATES:
        name = aggregate.__name__.upper()
        text = text.replace(f"{name}(", f"{name.lower()}(")
    return text


def _partial(kind: str, value: exp.Expression, condition: exp.Expression | None, star: bool) -> exp.AggFunc:
    function = {"SUM": exp.Sum, "COUNT": exp.Count, "MIN": exp.Min, "MAX": exp.Max}[kind]
    if star:
        return function(this=exp.Star())
    if condition is not None:
        return function(this=exp.If(this=condition.copy(), true=value.copy(), false=exp.null()))
    return function(this=value.copy())


def _combine(kind: type, names: list[exp.Column]) -> exp.Expression:
    """The aggregate of the group from the per-row partials (columns of the left side)."""
    if kind is exp.Count:
        return exp.Coalesce(this=exp.Sum(this=names[0]), expressions=[exp.Literal.number(0)])
    if kind is exp.Avg:
        return exp.Div(this=exp.Sum(this=names[0]),
                       expression=exp.Nullif(this=exp.Sum(this=names[1]), expression=exp.Literal.number(0)))
    return kind(this=names[0])


def _unqualified(node: exp.Expression) -> exp.Expression:
    node = node.copy()
    for column in list(node.find_all(exp.Column)):
        column.set("table", None)
        column.this.set("quoted", True)
    return node



def _in_scope(node: exp.Expression, select: exp.Select) -> bool:
    """``node`` belongs to ``select`` itself, not to a subquery inside it."""
    return node.find_ancestor(exp.Select) is select


def _outside_aggregates(select: exp.Select) -> list[exp.Column]:
    columns = []
    for part in [*select.expressions, select.args.get("group"), select.args.get("having"),
                 select.args.get("order")]:
        if part is None:
            continue
        for column in part.find_all(exp.Column):
            if column.find_ancestor(exp.AggFunc) is None and column.find_ancestor(exp.Select) is select:
                if column.table:
                    columns.append(column)
    return columns

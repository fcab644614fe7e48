"""Rule: a band self-join becomes one sorted window pass whose frame holds each row's partners.

``t a JOIN t b ON a.k = b.k AND b.ts BETWEEN a.ts - X AND a.ts + Y`` pairs every row ``a``
with the rows ``b`` of its key whose time lies in ``[a.ts - X, a.ts + Y]``. That set is the
window frame ``PARTITION BY k ORDER BY ts RANGE BETWEEN X PRECEDING AND Y FOLLOWING`` of row
``a``. The rewrite reads ``t`` once, collects each row's frame (``collect_list(struct(...))``)
and unfolds it with ``LATERAL VIEW inline``, named ``b``, so the rest of the query reads
``a.col`` and ``b.col`` as before. A sort-merge join compares every pair of rows of a key (a
hot key is quadratic, in one task); the frame touches only the pairs the band keeps.

Why the rows are the same, as a multiset: the frame of ``a`` holds exactly the rows of its
partition (same keys) whose ordering value lies in the band, each once, so each pair
``(a, b)`` of the join appears once; rows the join can never pair (NULL in a key compared
with ``=``, NULL time) are filtered before the window. Every condition the frame does not
capture exactly (strict bounds on a continuous type, bounds on other columns, conditions
relating the sides otherwise, conditions on one side) is applied to the unfolded pairs, as
the join applied it.

Inside a flat chain of inner joins (``t a JOIN t b ON <band> JOIN d ON d.x = b.y``, the shape
Kafka's optimizer also rewrites, KIP-862) the pair's rewrite becomes a derived table named
``a``, projecting ``a``'s columns under their names and the columns of ``b`` the statement
reads under fresh ones (``b.y`` elsewhere reads ``a.__sx_pair_1``). The other joins keep
their place and their ON conditions; a condition that was in ``b``'s ON clause and names
another relation moves to WHERE, the same conjunction for inner joins. The derived table holds
the pairs of the join of ``a`` and ``b`` on the pair's own conditions, so the chain's rows are
the original's, one for one.

>>> from sqlext.language.dialect import parse_one, to_sql
>>> from sqlext.analysis.relations import MappingRelations
>>> q = parse_one("SELECT a.id, b.id FROM e a JOIN e b ON a.k = b.k AND b.ts BETWEEN a.ts - 5 AND a.ts + 5")
>>> print(to_sql(band_self_join_to_window(q, MappingRelations({"e": {"id": "int", "k": "int", "ts": "int"}}))))
SELECT a.id, b.id FROM (SELECT `id`, `k`, `ts`, COLLECT_LIST(STRUCT(`id` AS `id`)) OVER (PARTITION BY `k` ORDER BY `ts` RANGE BETWEEN 5 PRECEDING AND 5 FOLLOWING) AS __sx_band FROM e WHERE NOT `k` IS NULL AND NOT `ts` IS NULL) AS a LATERAL VIEW INLINE(a.__sx_band) b AS `id`
"""

from __future__ import annotations

from sqlglot import exp

from sqlext.language.dialect import to_sql
from sqlext.analysis.notes import Notes
from sqlext.analysis.relations import Relations, standalone_query
from sqlext.language.sqltree import col, halias, helper, ident
from sqlext.analysis.self_join_edits import (
    add_where, alias_identifier, and_all, expand_chain_stars, expand_stars, replace_pair,
)
from sqlext.analysis.self_join_match import match_self_join

RULE = "band_self_join_to_window"
BAND = helper("band")
PAIR = helper("pair_")  # the columns of b a rewritten pair inside a chain of joins carries


def band_self_join_to_window(
    expression: exp.Expression, relations: Relations | None = None, notes: Notes | None = None
) -> exp.Expression:
    notes = notes if notes is not None else Notes()
    for select in list(expression.find_all(exp.Select)):
        if not select.args.get("joins"):
            continue
        join = match_self_join(select, relations)
        if isinstance(join, str):
            notes.skip(RULE, join)
            continue
        mixed = join.names_right(join.outside)
        if join.band is None and mixed is not None:
            notes.skip(RULE, f"the self-join has no band of its own: the condition {to_sql(mixed)} bounds "
                             f"{join.right} by another relation of the chain of joins, which no window "
                             f"frame over one relation can hold")
            continue
        if join.band is None:
            notes.skip(RULE, "the self-join has no band on an ordering column; its output is every "
                             "pair of a key, which the join already produces with one shuffle")
            continue
        kept = join.left_only + join.right_only + join.rest
        if not join.band.exact:
            kept += join.band.conjuncts_used
        kept = _conjuncts_in_order(select, kept)
        if join.in_chain:
            reason = _rewrite_in_chain(select, join, kept, relations)
            if reason:
                notes.skip(RULE, reason)
                continue
        else:
            expand_stars(select, join)
            _rewrite_pair(select, join, kept)
        notes.fire(RULE, f"self-join of {join.source_sql()} on {join.partition_sql()} within a band of "
                         f"{to_sql(col(join.band.column))} now reads it once: window frame "
                         f"{join.band.frame_sql()}, unfolded with LATERAL VIEW{join.others_note()}")
    return expression


def _rewrite_pair(select: exp.Select, join, kept: list[exp.Expression]) -> None:
    """Make ``select``'s FROM clause the window over the relation, unfolded as ``b``."""
    where = and_all(kept)
    select.set("joins", None)
    select.set("where", exp.Where(this=where) if where is not None else None)
    # the frame carries only the columns of b the query reads (Spark cannot prune a struct
    # inside collect_list); at least one, so that every pair is still there to count
    used = {c.name.lower() for c in select.find_all(exp.Column) if c.table.lower() == join.right}
    collected = [c for c in join.columns if c.lower() in used] or join.columns[:1]
    band = exp.ArrayAgg(this=exp.Struct(expressions=[exp.PropertyEQ(this=ident(c), expression=col(c))
                                                     for c in collected]), nulls_excluded=True)
    inner = exp.select(*join.column_trees(), halias(join.window(band), BAND), copy=False) \
        .from_(join.source_tree(), copy=False).where(join.not_null_condition(), copy=False)
    left, right = alias_identifier(join.left_item), alias_identifier(join.right_item)
    select.set("from_", exp.From(this=exp.Subquery(this=inner, alias=exp.TableAlias(this=left))))
    select.set("laterals", [exp.Lateral(
        this=exp.Anonymous(this="INLINE", expressions=[exp.column(BAND, table=left.copy())]),
        view=True,
        alias=exp.TableAlias(
            this=right,
            columns=[exp.to_identifier(c, quoted=True) for c in collected],
        ),
    )])


def _rewrite_in_chain(select: exp.Select, join, kept: list[exp.Expression], relations) -> str | None:
    """Rewrite the pair inside a chain of inner joins, or say why not (nothing changed then).

    The pair becomes one derived table named like its left side: the pair's rewrite (the
    window unfolded with LATERAL VIEW, its own conditions applied to the pairs) projecting
    every column of ``a`` under its name and each column of ``b`` the statement reads under a
    fresh name. The other joins keep their place and ON conditions; ``b.x`` elsewhere in the
    statement reads the fresh name. The derived table holds exactly the pairs the join of
    ``a`` and ``b`` on the pair's conditions holds, so the chain's product, filtered by the
    remaining conditions, is row for row the original.
    """
    # every check first: a statement the rule leaves alone stays exactly as written
    if any(c.lower().startswith(PAIR) for c in join.columns):
        return "a column of the relation is named like the rewrite's own columns"
    # an unaliased expression of b's columns keeps the name Spark gave it in the original
    unnamed = [(i, p) for i, p in enumerate(select.expressions)
               if not isinstance(p, (exp.Alias, exp.Column, exp.Star)) and _reads(p, join.right)]
    names = (relations.columns(standalone_query(select), select) or []) if unnamed else []
    for i, projection in unnamed:
        if any(p.is_star for p in select.expressions[:i]) or i >= len(names) or not names[i]:
            return (f"the projection {to_sql(projection)} reads {join.right} without an alias, and the name "
                    f"Spark gives it is unknown here")
    for i, projection in unnamed:
        projection.replace(exp.alias_(projection.copy(), names[i], quoted=True))

    expand_chain_stars(select, join)
    for projection in select.expressions:
        if isinstance(projection, exp.Column) and projection.table.lower() == join.right:
            projection.replace(exp.alias_(projection.copy(), _column_name(join, projection), quoted=True))
    outer = _outer_columns(select, join)
    renames: dict[str, str] = {}
    for column in join.columns:  # in the relation's order, as the pair projects them
        if any(c.name.lower() == column.lower() for c in outer):
            renames[column.lower()] = f"{PAIR}{len(renames) + 1}"

    left = alias_identifier(join.left_item)
    right = alias_identifier(join.right_item)
    pair = exp.select(
        *[exp.column(exp.to_identifier(c, quoted=True), table=left.copy()) for c in join.columns],
        *[exp.alias_(exp.column(exp.to_identifier(c, quoted=True), table=right.copy()), renames[c.lower()],
                     quoted=True)
          for c in join.columns if c.lower() in renames],
    )
    _rewrite_pair(pair, join, kept)
    for column in outer:
        column.replace(exp.column(exp.to_identifier(renames[column.name.lower()], quoted=True), table=left.copy()))
    moved = replace_pair(select, join, exp.Subquery(this=pair, alias=exp.TableAlias(this=left)))
    add_where(select, moved, first=False)
    return None


def _reads(node: exp.Expression, alias: str) -> bool:
    return any(c.table.lower() == alias for c in node.find_all(exp.Column))


def _outer_columns(select: exp.Select, join) -> list[exp.Column]:
    """The columns of ``b`` the statement reads outside the pair's own conditions."""
    pair = join.pair_conditions
    found = []
    for column in select.find_all(exp.Column):
        if column.table.lower() != join.right or isinstance(column.this, exp.Star):
            continue
        if column.find_ancestor(exp.Select) is not select:
            continue
        if any(column is x for c in pair for x in c.find_all(exp.Column)):
            continue
        found.append(column)
    return found


def _column_name(join, column: exp.Column) -> str:
    """The relation's own spelling of ``column``'s name (Spark names an output column so)."""
    for name in join.columns:
        if name.lower() == column.name.lower():
            return name
    return column.name


def _conjuncts_in_order(select: exp.Select, kept: list[exp.Expression]) -> list[exp.Expression]:
    """The kept conditions in the order they were written (ON first, then WHERE)."""
    order = []
    for node in select.walk():
        if any(node is k for k in kept) and not any(node is o for o in order):
            order.append(node)
    return order

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

>>> from rewrites.dialect import parse_one, to_sql
>>> from rewrites.relations import MappingRelations
>>> q = parse_one("SELECT a.id, b.id FROM e a JOIN e b ON a.k = b.k AND b.ts BETWEEN a.ts - 5 AND a.ts + 5")
>>> print(to_sql(band_self_join_to_window(q, MappingRelations({"e": {"id": "int", "k": "int", "ts": "int"}}))))
SELECT a.id, b.id FROM (SELECT `id`, `k`, `ts`, COLLECT_LIST(STRUCT(`id` AS `id`)) OVER (PARTITION BY `k` ORDER BY `ts` RANGE BETWEEN 5 PRECEDING AND 5 FOLLOWING) AS __sqlext_band FROM e WHERE NOT `k` IS NULL AND NOT `ts` IS NULL) AS a LATERAL VIEW INLINE(a.__sqlext_band) b AS `id`
"""

from __future__ import annotations

from sqlglot import exp

from rewrites.dialect import parse_one
from rewrites.notes import Notes
from rewrites.relations import Relations
from rewrites.self_joins import and_all, expand_stars, match_self_join
from rewrites.table_functions import quote

RULE = "band_self_join_to_window"
BAND = "__sqlext_band"


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
        if join.band is None:
            notes.skip(RULE, "the self-join has no band on an ordering column; its output is every "
                             "pair of a key, which the join already produces with one shuffle")
            continue
        kept = join.left_only + join.right_only + join.rest
        if not join.band.exact:
            kept += join.band.conjuncts_used
        where = and_all(_conjuncts_in_order(select, kept))
        expand_stars(select, join)
        select.set("joins", None)
        select.set("where", exp.Where(this=where) if where is not None else None)
        # the frame carries only the columns of b the query reads (Spark cannot prune a struct
        # inside collect_list); at least one, so that every pair is still there to count
        used = {c.name.lower() for c in select.find_all(exp.Column) if c.table.lower() == join.right}
        collected = [c for c in join.columns if c.lower() in used] or join.columns[:1]
        inner = parse_one(
            f"SELECT {join.columns_sql()}, COLLECT_LIST(STRUCT({', '.join(quote(c) for c in collected)})) "
            f"OVER {join.window_sql()} AS {BAND} FROM {join.source_sql()} WHERE {join.not_null_filter()}"
        )
        select.set("from_", exp.From(this=exp.Subquery(
            this=inner, alias=exp.TableAlias(this=exp.to_identifier(join.left)))))
        select.set("laterals", [exp.Lateral(
            this=exp.Anonymous(this="INLINE", expressions=[exp.column(BAND, table=join.left)]),
            view=True,
            alias=exp.TableAlias(
                this=exp.to_identifier(join.right),
                columns=[exp.to_identifier(c, quoted=True) for c in collected],
            ),
        )])
        notes.fire(RULE, f"self-join of {join.source_sql()} on {join.partition_sql()} within a band of "
                         f"{quote(join.band.column)} now reads it once: window frame "
                         f"{join.band.frame_sql()}, unfolded with LATERAL VIEW")
    return expression


def _conjuncts_in_order(select: exp.Select, kept: list[exp.Expression]) -> list[exp.Expression]:
    """The kept conditions in the order they were written (ON first, then WHERE)."""
    order = []
    for node in select.walk():
        if any(node is k for k in kept) and not any(node is o for o in order):
            order.append(node)
    return order

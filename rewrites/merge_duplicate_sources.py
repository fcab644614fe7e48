"""Rule: two identical subqueries joined with each other become one CTE read twice.

Kafka Streams' topology optimizer merges duplicate source nodes, which is what lets its
self-join optimization (KIP-862) see a stream joined with itself. The SQL counterpart: in
``FROM (q) a JOIN (q) b`` both sides are the same relation, written twice. Naming it once (``WITH s AS (q) ... FROM s a JOIN s b``)
lets the self-join rules that follow see one relation, as they already do for a table, view
or CTE named on both sides.

Why the result is the same: a CTE read twice is the query evaluated for each reference, as
the two subqueries were. Only deterministic subqueries are merged (``rand()`` evaluated once
or twice gives different rows), and only for inner joins, the joins the self-join rules
rewrite. In a chain of inner joins, one pair of identical subqueries is merged the same way.

>>> from sqlext.language.dialect import parse_one, to_sql
>>> q = parse_one("SELECT a.k FROM (SELECT k, ts FROM e WHERE v > 0) a JOIN (SELECT k, ts FROM e WHERE v > 0) b ON a.k = b.k")
>>> to_sql(merge_duplicate_sources(q))
'WITH __sx_source_1 AS (SELECT k, ts FROM e WHERE v > 0) SELECT a.k FROM __sx_source_1 AS a JOIN __sx_source_1 AS b ON a.k = b.k'
"""

from __future__ import annotations

from sqlglot import exp

from sqlext.language.dialect import to_sql
from sqlext.analysis.notes import Notes
from sqlext.analysis.self_join_match import has_non_deterministic
from sqlext.language.sqltree import helper

RULE = "merge_duplicate_sources"
PREFIX = helper("source_")


def merge_duplicate_sources(expression: exp.Expression, notes: Notes | None = None) -> exp.Expression:
    notes = notes if notes is not None else Notes()
    used = {t.name for t in expression.find_all(exp.Table) if t.name.startswith(PREFIX)}
    for select in list(expression.find_all(exp.Select)):
        joins = select.args.get("joins") or []
        from_ = select.args.get("from_")
        if not joins or from_ is None:
            continue
        items = [from_.this] + [j.this for j in joins]
        subqueries = [i for i in items if isinstance(i, exp.Subquery)]
        same = [(x, y) for n, x in enumerate(subqueries) for y in subqueries[n + 1:]
                if to_sql(x.this) == to_sql(y.this)]
        if len(joins) == 1 and len(subqueries) == 2 and not same:
            notes.skip(RULE, "the two joined subqueries differ, so they are two relations")
            continue
        if not same:
            continue
        if len(same) > 1:
            notes.skip(RULE, "more than two identical subqueries in the chain of joins are left as written")
            continue
        left, right = same[0]
        if any(j.args.get("side") or (j.args.get("kind") or "").upper() not in ("", "INNER", "CROSS")
               for j in joins):
            notes.skip(RULE, "identical subqueries under an outer join are left as written")
            continue
        if has_non_deterministic(left.this):
            notes.skip(RULE, "the subqueries call a non-deterministic function; each side keeps its own")
            continue
        if left.args.get("pivots") or right.args.get("pivots") or not left.alias or not right.alias:
            continue
        name = _fresh(used)
        used.add(name)
        cte = exp.CTE(this=left.this.copy(), alias=exp.TableAlias(this=exp.to_identifier(name)))
        with_ = select.args.get("with_")
        if with_ is None:
            select.set("with_", exp.With(expressions=[cte]))
        else:
            with_.append("expressions", cte)
        for side in (left, right):
            side.replace(exp.Table(this=exp.to_identifier(name), alias=side.args["alias"].copy()))
        notes.fire(RULE, f"the two identical subqueries joined as {left.alias} and {right.alias} "
                         f"now read one CTE, {name}")
    return expression


def _fresh(used: set[str]) -> str:
    n = 1
    while f"{PREFIX}{n}" in used:
        n += 1
    return f"{PREFIX}{n}"

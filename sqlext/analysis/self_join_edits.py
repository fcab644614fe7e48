"""The edits both self-join rules make to the ``SELECT`` around a matched pair
(:func:`~sqlext.analysis.self_join_match.match_self_join`): the pair's FROM items replaced by
the rewrite and its conditions taken out of ON and WHERE, conditions added to WHERE, and stars
spelled out so the rewrite's helper columns never show."""

from __future__ import annotations

from sqlglot import exp

from sqlext.language.dialect import conjuncts
from sqlext.analysis.self_join_match import SelfJoin


def qualified_columns(alias: str, columns: list[str]) -> list[exp.Column]:
    return [exp.column(c, table=alias, quoted=True) for c in columns]


def expand_stars(select: exp.Select, join: SelfJoin) -> None:
    """Spell out ``*``, ``a.*`` and ``b.*`` in the projection, in the order Spark expands them,
    so the rewritten FROM clause's helper columns never show."""
    projections = []
    for projection in select.expressions:
        if isinstance(projection, exp.Star):
            projections += qualified_columns(join.left, join.columns) + qualified_columns(join.right, join.columns)
        elif isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star) \
                and projection.table.lower() in (join.left, join.right):
            projections += qualified_columns(projection.table.lower(), join.columns)
        else:
            projections.append(projection)
    select.set("expressions", projections)


def and_all(conditions: list[exp.Expression]) -> exp.Expression | None:
    conditions = [c.copy() for c in conditions]
    if not conditions:
        return None
    return exp.and_(*conditions) if len(conditions) > 1 else conditions[0]


def replace_pair(select: exp.Select, join: SelfJoin, replacement: exp.Expression) -> list[exp.Expression]:
    """Put ``replacement`` where the pair's left item stands in the FROM chain, drop the right
    item's join and take every condition on the pair alone out of the ON clauses and WHERE.

    Returns the conditions that lost their place with the right item's ON clause (they name
    other relations of the chain); the caller puts them in WHERE with the pair's own
    conditions it still needs. For inner joins that is the same condition on the same rows:
    the chain is one conjunction over the product of its relations, wherever a conjunct is
    written.
    """
    consumed = join.pair_conditions

    def remaining(node: exp.Expression | None) -> list[exp.Expression]:
        return [c for c in conjuncts(node) if not any(c is x for x in consumed)]

    moved: list[exp.Expression] = []
    joins = []
    for item_join in select.args.get("joins") or []:
        if item_join.this is join.right_item:
            moved = remaining(item_join.args.get("on"))
            continue
        item_join.set("on", and_all(remaining(item_join.args.get("on"))))
        joins.append(item_join)
    where = remaining(select.args.get("where"))
    join.left_item.replace(replacement)
    select.set("joins", joins or None)
    select.set("where", exp.Where(this=and_all(where)) if where else None)
    return moved


def add_where(select: exp.Select, conditions: list[exp.Expression], first: bool = True) -> None:
    """AND ``conditions`` into WHERE, before (``first``) or after what it holds."""
    existing = conjuncts(select.args.get("where"))
    combined = [*conditions, *existing] if first else [*existing, *conditions]
    where = and_all(combined)
    select.set("where", exp.Where(this=where) if where is not None else None)


def expand_chain_stars(select: exp.Select, join: SelfJoin) -> None:
    """Spell out ``*`` over a chain as each relation's star in FROM order (the order Spark
    expands it in), the pair's with their columns."""
    items = [select.args["from_"].this] + [j.this for j in select.args.get("joins") or []]
    projections = []
    for projection in select.expressions:
        if not isinstance(projection, exp.Star):
            projections.append(projection)
            continue
        for item in items:
            if item is join.left_item:
                projections += qualified_columns(join.left, join.columns)
            elif item is join.right_item:
                projections += qualified_columns(join.right, join.columns)
            else:
                projections.append(exp.Column(this=exp.Star(), table=alias_identifier(item)))
    select.set("expressions", projections)
    expand_stars(select, join)


def alias_identifier(item: exp.Expression) -> exp.Identifier:
    """The identifier a FROM item is referred to by, quoted as written."""
    alias = item.args.get("alias")
    if isinstance(alias, exp.TableAlias) and alias.this is not None:
        return alias.this.copy()
    return item.this.copy() if isinstance(item.this, exp.Identifier) else exp.to_identifier(item.alias_or_name)

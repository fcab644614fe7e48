"""What rules may learn about the relations a statement reads.

Rules never guess a schema: they ask a :class:`Relations` object and leave a call unchanged
when it answers ``None``. Two kinds exist: :class:`MappingRelations` over a schema given as a
mapping (no Spark needed, for ``sqlext.rewrite``), and the session-backed one in
:mod:`sqlext.session`, which asks Spark to analyse (never run) a query.
"""

from __future__ import annotations

from typing import Mapping, Protocol

from sqlglot import exp

from rewrites.dialect import TableArgument, to_sql


class Relations(Protocol):
    def columns(self, query: str, relation: exp.Expression) -> list[str] | None:
        """Column names of ``relation``; ``query`` is ``SELECT * FROM`` it, CTEs included."""

    def expression_type(self, query: str, expression: str) -> str | None:
        """Spark's type name of ``expression`` evaluated over the rows of ``query``."""

    def size_in_bytes(self, query: str) -> int | None:
        """Spark's estimate of the size of ``query``'s result, if it has one."""


class MappingRelations:
    """Relations known from a mapping ``{table: {column: type}}`` (or ``{table: [columns]}``).

    Queries whose output columns can be read off their projection are understood too.
    """

    def __init__(self, schema: Mapping[str, Mapping[str, str] | list[str]] | None = None):
        self._tables = {name.lower(): list(cols) for name, cols in (schema or {}).items()}
        self._types = {
            name.lower(): {c.lower(): t.lower() for c, t in cols.items()}
            for name, cols in (schema or {}).items() if isinstance(cols, Mapping)
        }

    def columns(self, query: str, relation: exp.Expression) -> list[str] | None:
        if isinstance(relation, exp.Table):
            for name in (relation.sql().lower(), relation.name.lower()):
                if name in self._tables:
                    return self._tables[name]
            return None
        if isinstance(relation, exp.Query):
            selects = relation.selects
            if selects and not any(isinstance(s, exp.Star) or s.find(exp.Star) for s in selects):
                return list(relation.named_selects)
            source = _single_source(relation)
            if [type(s) for s in selects] == [exp.Star] and source is not None:
                return self.columns(query, source)
        return None

    def expression_type(self, query: str, expression: str) -> str | None:
        """The type of a bare column of a described table (through ``SELECT *`` and CTEs)."""
        from rewrites.dialect import parse_one

        try:
            column = parse_one(expression)
            tree = parse_one(query)
        except Exception:  # noqa: BLE001 - not something a mapping can answer
            return None
        if not isinstance(column, exp.Column) or column.table:
            return None
        return self._column_type(tree, column.name.lower(), {})

    def _column_type(self, query: exp.Expression, column: str, ctes: dict) -> str | None:
        if not isinstance(query, exp.Select):
            return None
        with_ = query.args.get("with_")
        ctes = dict(ctes, **{c.alias_or_name.lower(): c.this for c in (with_.expressions if with_ else [])})
        source = _single_source(query)
        if source is None:
            return None
        named = {s.alias_or_name.lower(): s for s in query.selects if not isinstance(s, exp.Star)}
        if column in named:
            inner = named[column].unalias()
            if not isinstance(inner, exp.Column):
                return None
            column = inner.name.lower()
        elif not any(isinstance(s, exp.Star) for s in query.selects):
            return None
        if isinstance(source, exp.Subquery):
            return self._column_type(source.this, column, ctes)
        name = source.name.lower()
        if name in ctes and not source.db:
            return self._column_type(ctes[name], column, ctes)
        return self._types.get(name, {}).get(column)

    def size_in_bytes(self, query: str) -> int | None:
        return None


def _single_source(query: exp.Query) -> exp.Expression | None:
    """The one relation a plain ``SELECT ... FROM x [WHERE ...]`` reads, else None."""
    if not isinstance(query, exp.Select) or query.args.get("joins") or query.args.get("laterals"):
        return None
    if query.args.get("group") or query.args.get("distinct"):
        return None
    from_ = query.args.get("from_")
    source = from_.this if from_ is not None else None
    return source if isinstance(source, (exp.Table, exp.Subquery)) and not isinstance(
        source.this, (exp.Anonymous, exp.Func)) else None


def standalone_query(argument: exp.Expression) -> str:
    """``SELECT * FROM <relation>`` for a table argument (or a table in a FROM clause), with
    the CTEs it reads from the statements around it, so that it can be analysed on its own."""
    relation = argument.this if isinstance(argument, TableArgument) else argument
    if isinstance(relation, exp.Table) and relation.args.get("alias"):
        relation = relation.copy()
        relation.set("alias", None)
    source = to_sql(relation) if isinstance(relation, exp.Table) else f"({to_sql(relation)})"
    ctes: list[exp.CTE] = []
    node = argument.parent
    while node is not None:
        with_ = node.args.get("with_") if isinstance(node, exp.Expression) else None
        if isinstance(with_, exp.With):
            for cte in with_.expressions:
                if argument not in list(cte.walk()):
                    ctes.append(cte)
        node = node.parent
    needed = _needed_ctes(relation, ctes)
    if not needed:
        return f"SELECT * FROM {source}"
    return f"WITH {', '.join(to_sql(c) for c in needed)} SELECT * FROM {source}"


def _needed_ctes(relation: exp.Expression, ctes: list[exp.CTE]) -> list[exp.CTE]:
    by_name = {c.alias_or_name.lower(): c for c in ctes}
    needed: dict[str, exp.CTE] = {}
    pending = [relation]
    while pending:
        node = pending.pop()
        tables = [node] if isinstance(node, exp.Table) else list(node.find_all(exp.Table))
        for table in tables:
            name = table.name.lower()
            if name in by_name and name not in needed and not table.db:
                needed[name] = by_name[name]
                pending.append(by_name[name].this)
    # keep the order the CTEs are defined in, so each sees the ones it reads
    return [c for c in _definition_order(ctes) if c.alias_or_name.lower() in needed]


def _definition_order(ctes: list[exp.CTE]) -> list[exp.CTE]:
    # ctes were collected innermost statement first; outer definitions come first in scope
    groups: list[list[exp.CTE]] = []
    for cte in ctes:
        if groups and groups[-1][0].parent is cte.parent:
            groups[-1].append(cte)
        else:
            groups.append([cte])
    return [c for group in reversed(groups) for c in group]

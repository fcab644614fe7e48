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
        return None

    def expression_type(self, query: str, expression: str) -> str | None:
        return None

    def size_in_bytes(self, query: str) -> int | None:
        return None


def standalone_query(argument: TableArgument) -> str:
    """``SELECT * FROM <relation>`` for a table argument, with the CTEs it reads from the
    statements around it, so that it can be analysed on its own."""
    relation = argument.this
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

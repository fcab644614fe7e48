"""What rules (and the engine, reading a self-join) may learn about the relations a statement reads.

Rules never guess a schema: they ask a :class:`Relations` object and leave a call unchanged
when it answers ``None``. Two kinds exist: :class:`MappingRelations` over a schema given as a
mapping (no Spark needed, for ``sqlext.rewrite``), and the session-backed one in
:mod:`sqlext.session`, which asks Spark to analyse (never run) a query.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Protocol

from sqlglot import exp

from sqlext.functions.arguments import Call, check_table_arguments, relation_source
from sqlext.functions.input_formats import DELTA, change_rows, connect_payload, payload_rows, take_format
from sqlext.language.dialect import TableArgument, parse_one, to_sql
from sqlext.language.sqltree import identifier_list


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
        if isinstance(relation, exp.Values):  # VALUES (...) AS t(a, b) names its columns
            alias = relation.args.get("alias")
            return [c.name for c in alias.columns] if alias is not None and alias.columns else None
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
        if isinstance(source, exp.Values):  # literals: no described table's types
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
    return source if isinstance(source, (exp.Table, exp.Subquery, exp.Values)) and not isinstance(
        source.this, (exp.Anonymous, exp.Func)) else None


def standalone_query(argument: exp.Expression) -> str:
    """``SELECT * FROM <relation>`` for a table argument (or a table in a FROM clause), inside
    the CTEs it reads from the statement around it, so that it can be analysed on its own."""
    relation = argument.this if isinstance(argument, TableArgument) else argument
    if isinstance(relation, exp.Table) and relation.args.get("alias"):
        relation = relation.copy()
        relation.set("alias", None)
    source = relation.copy() if isinstance(relation, exp.Table) else exp.paren(relation.copy(), copy=False)
    return to_sql(Scope.at(argument).wrap(exp.select("*").from_(source, copy=False)))


class Scope:
    """The CTEs visible at one place of a statement, as Spark resolves names there: one list
    per enclosing ``WITH``, innermost first. In a ``WITH`` a CTE sees the ones defined before
    it (and itself under ``RECURSIVE``); the query after it sees them all; an inner name
    shadows an outer one.

    :meth:`wrap` puts a query inside the CTEs it reads, keeping each level nested in the one
    around it, so that shadowing names resolve as they did in the statement.

    >>> from sqlext.language.dialect import parse_one
    >>> tree = parse_one("WITH a AS (SELECT 1 AS x), b AS (WITH a AS (SELECT 2 AS x) SELECT * FROM a) SELECT 3")
    >>> inside_b = tree.args["with_"].expressions[1].this.args["from_"]
    >>> to_sql(Scope.at(inside_b).wrap(parse_one("SELECT x FROM a")))
    'WITH a AS (SELECT 2 AS x) SELECT x FROM a'
    >>> to_sql(Scope.at(tree.expressions[0]).wrap(parse_one("SELECT x FROM a JOIN b")))
    'WITH a AS (SELECT 1 AS x), b AS (WITH a AS (SELECT 2 AS x) SELECT * FROM a) SELECT x FROM a JOIN b ON TRUE'
    """

    def __init__(self, levels: list[tuple[list[exp.CTE], bool]]):
        self.levels = levels  # (visible CTEs in definition order, recursive), innermost first

    @staticmethod
    def at(node: exp.Expression) -> "Scope":
        return Scope(list(_enclosing_levels(node)))

    def find(self, name: str) -> exp.CTE | None:
        """The CTE that ``name`` resolves to here (the innermost one), or None for a table."""
        for ctes, _ in self.levels:
            for cte in reversed(ctes):
                if cte.alias_or_name.lower() == name.lower():
                    return cte
        return None

    def without(self, name: str) -> "Scope":
        """This scope less the CTE ``name`` at the innermost level that defines it."""
        levels = list(self.levels)
        for i, (ctes, recursive) in enumerate(levels):
            kept = [c for c in ctes if c.alias_or_name.lower() != name.lower()]
            if len(kept) != len(ctes):
                levels[i] = (kept, recursive)
                break
        return Scope(levels)

    def wrap(self, query: exp.Query) -> exp.Query:
        """``query`` (a tree, changed in place) inside the CTEs it reads, level by level."""
        needed = free_table_names(query)
        for ctes, recursive in self.levels:
            chosen: list[exp.CTE] = []
            for cte in reversed(ctes):
                name = cte.alias_or_name.lower()
                if name in needed:
                    chosen.append(cte)
                    needed.discard(name)
                    needed |= free_table_names(cte.this)
                    if recursive:
                        needed.discard(name)
            if not chosen:
                continue
            if query.args.get("with_") or not isinstance(query, exp.Select):
                query = exp.select("*").from_(exp.paren(query, copy=False), copy=False)
            query.set("with_", exp.With(expressions=[c.copy() for c in reversed(chosen)],
                                        recursive=recursive or None))
        return query


def free_table_names(node: exp.Expression) -> set[str]:
    """Lower-case names of the unqualified tables ``node`` reads that no ``WITH`` inside it
    defines (the names it takes from the statement around it)."""
    names = set()
    for table in node.find_all(exp.Table):
        if table.db or not isinstance(table.this, exp.Identifier):
            continue
        name = table.name.lower()
        if not _bound_below(table, name, node):
            names.add(name)
    return names


def _bound_below(table: exp.Table, name: str, top: exp.Expression) -> bool:
    return any(c.alias_or_name.lower() == name for ctes, _ in _enclosing_levels(table, top) for c in ctes)


def _enclosing_levels(node: exp.Expression, top: exp.Expression | None = None):
    """The CTEs visible at ``node`` from each ``WITH`` around it (up to ``top``), innermost
    first, as (CTEs in definition order, recursive)."""
    child, current = node, node.parent
    while current is not None:
        if isinstance(current, exp.With):
            ctes = current.expressions
            index = next((i for i, c in enumerate(ctes) if c is child), None)
            recursive = bool(current.args.get("recursive"))
            if index is not None:  # inside a CTE body: the ones before it (and itself)
                yield (ctes[:index + 1] if recursive else ctes[:index]), recursive
        elif isinstance(current.args.get("with_"), exp.With) and child is not current.args["with_"]:
            with_ = current.args["with_"]
            yield list(with_.expressions), bool(with_.args.get("recursive"))
        if current is top:
            return
        child, current = current, current.parent


@dataclass
class TableInput:
    argument: TableArgument
    query: str  # SELECT * FROM the relation, with the CTEs it reads
    columns: list[str] | None  # None: unknown here
    source: exp.Expression  # the relation as a FROM item (copy it to use it twice)


def table_inputs(call: Call, keys: dict[str, str], relations: Relations | None) -> dict[str, TableInput]:
    """The call's table arguments, ``keys`` naming each one and the argument that holds its
    key: checked (:func:`sqlext.functions.arguments.check_table_arguments`), each with its
    standalone query and the columns ``relations`` knows for it.

    An input in another shape than change rows (``format => ...``) is read through the query
    that maps it to change rows (:mod:`sqlext.functions.input_formats`), and the call's
    ``order_by`` becomes the name of the ordering column there; ``format`` leaves the call's
    literals, so the function reads change rows as it always does."""
    check_table_arguments(call, keys)
    shape = take_format(call.function, call.literals)
    order_by = call.literals.get("order_by")
    inputs = {}
    for name in keys:
        argument = call.tables[name]
        query = standalone_query(argument)
        columns = relations.columns(query, argument.this) if relations is not None else None
        found = TableInput(argument, query, columns, relation_source(argument))
        if shape != DELTA:
            found = _as_change_rows(call, name, shape, found, relations, order_by)
        inputs[name] = found
    return inputs


class _Unknown(Exception):
    """What ``relations`` cannot tell about an input."""


def _as_change_rows(call: Call, name: str, shape: str, found: TableInput, relations: Relations | None,
                    order_by) -> TableInput:
    """The input ``found`` in change rows; where its columns are unknown, it stays as it is and
    ``format`` goes back into the call's literals (the registered function then refuses it)."""
    if found.columns is None or relations is None:
        call.literals["format"] = shape
        return found

    def fields(column: str) -> list[str] | None:
        kind = relations.expression_type(found.query, to_sql(exp.column(exp.to_identifier(column, quoted=True))))
        if kind is None:
            raise _Unknown
        if not kind.lower().startswith("struct<"):
            return None
        star = exp.Column(this=exp.Star(), table=exp.to_identifier(column, quoted=True))
        inner = exp.select(star).from_(exp.paren(parse_one(found.query), copy=False), copy=False)
        names = relations.columns(to_sql(inner), inner)
        if names is None:
            raise _Unknown
        return names

    def types(column: str) -> str | None:
        return relations.expression_type(found.query, to_sql(exp.column(exp.to_identifier(column, quoted=True))))

    try:
        payload = connect_payload(shape, found.columns, fields)
    except _Unknown:
        payload = None
    if payload is not None:  # Kafka Connect's JSON form: the envelopes are its payloads
        query = to_sql(payload_rows(parse_one(found.query), payload))
        columns = relations.columns(query, parse_one(query))
        if columns is None:
            call.literals["format"] = shape
            return TableInput(found.argument, found.query, None, found.source)
        found = TableInput(found.argument, query, columns, exp.Subquery(this=payload_rows(found.source, payload)))

    try:
        rows = change_rows(call.function, name, shape, found.source, found.columns, fields, order_by, types=types,
                           once=True)
    except _Unknown:  # a struct's fields are unknown here (a schema given as a mapping)
        call.literals["format"] = shape
        return TableInput(found.argument, found.query, None, found.source)
    call.literals["order_by"] = identifier_list([rows.order_by])
    query = rows.query.copy()
    query.set("from_", exp.From(this=exp.Subquery(this=parse_one(found.query),
                                                  alias=query.args["from_"].this.args.get("alias").copy())))
    return TableInput(found.argument, to_sql(query), list(rows.columns), exp.Subquery(this=rows.query))

"""The statement of an incremental recursion: its parts, checked against what runs
incrementally (see :mod:`sqlext.streaming.operators.recursion`), the same parts rewritten over views,
and the errors that name the statement's stream."""

from __future__ import annotations

from sqlglot import exp

from sqlext.errors import SqlextError
from sqlext.functions.changes import CHANGE_TYPE
from sqlext.functions.input_formats import UPDATE_WITHOUT_BEFORE
from sqlext.language.dialect import is_stream, to_sql
from sqlext.streaming.operators.recursion.columns import FUNCTION


def unsupported(what: str, reason: str, fix: str) -> SqlextError:
    return SqlextError("UNSUPPORTED_STREAM", function=FUNCTION, what=what, reason=reason, fix=fix)


def _stream_name(table: exp.Table) -> str:
    return to_sql(table.this)


def _only_rows(query: exp.Select, part: str) -> None:
    """A part of the statement that maps each row to rows: no aggregate, window, DISTINCT,
    GROUP BY, HAVING, ORDER BY, LIMIT or subquery."""
    clauses = [k for k in ("group", "having", "order", "limit", "offset", "distinct", "qualify") if query.args.get(k)]
    nested = [n for n in query.find_all(exp.Subquery, exp.Exists)] + \
        [n for n in query.find_all(exp.Select) if n is not query]
    if clauses or nested or any(query.find_all(exp.AggFunc)) or any(query.find_all(exp.Window)):
        raise unsupported(f"the recursion's {part}",
                          "only row-by-row SQL (projections, filters, inner joins) runs incrementally; this part "
                          "aggregates, sorts, limits, removes duplicates or holds a subquery",
                          "Run the recursion as a batch query (sqlext.sql), or move that part to a query over "
                          "the incremental run's output.")


class RecursionShape:
    """The parts of an incremental recursion statement (see the module's docstring), checked."""

    def __init__(self, tree: exp.Expression):
        with_ = tree.args.get("with_") if isinstance(tree, exp.Select) else None
        if with_ is None or not with_.args.get("recursive") or len(with_.expressions) != 1:
            raise unsupported("this statement", "an incremental recursion is one WITH RECURSIVE holding one "
                              "recursive query, read by a SELECT", "Write WITH RECURSIVE r AS (...) SELECT ... FROM r.")
        cte = with_.expressions[0]
        self.name = cte.alias_or_name
        body = cte.this
        if isinstance(body, exp.Union) and not body.args.get("distinct"):
            raise unsupported("a recursion with UNION ALL", "UNION ALL counts every derivation of a row, which "
                              "an incremental run does not keep", "Use UNION (distinct rows); for trees and "
                              "forests the rows are the same.")
        if not isinstance(body, exp.Union) or not isinstance(body.this, exp.Select) \
                or not isinstance(body.expression, exp.Select) or cte.args.get("key"):
            raise unsupported("this recursion", "an incremental recursion is <anchor> UNION <step>, without "
                              "USING KEY", "Write WITH RECURSIVE r AS (SELECT ... UNION SELECT ... FROM r JOIN ...).")
        alias = cte.args.get("alias")
        self.columns = [c.name for c in alias.columns] if alias is not None and alias.columns else None
        self.anchor, self.step = body.this, body.expression
        self.main = tree.copy()
        self.main.set("with_", None)
        streams = [t for t in tree.find_all(exp.Table) if is_stream(t)]
        names = {_stream_name(t) for t in streams}
        if len(names) != 1:
            raise unsupported("this recursion", f"it reads {len(names)} streams; an incremental recursion reads "
                              "one stream of edges", "Read the edges as STREAM(edges) in the anchor and the step.")
        self.stream = streams[0]
        self._check()

    def copied(self) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
        """The step's output columns that copy a column of the recursion, and those that copy
        a column of the edge, as it is: (position, column) pairs."""
        if any(isinstance(e, exp.Star) or isinstance(e, exp.Column) and isinstance(e.this, exp.Star)
               for e in self.step.expressions):
            return [], []
        tables = self._tables(self.step)
        recursion = next(t for t in tables if not is_stream(t))
        stream = next(t for t in tables if is_stream(t))
        from_recursion, from_edges = [], []
        for i, expression in enumerate(self.step.expressions):
            column = expression.this if isinstance(expression, exp.Alias) else expression
            if not isinstance(column, exp.Column) or not column.table:
                continue
            if column.table.lower() == recursion.alias_or_name.lower():
                from_recursion.append((i, column.name))
            elif stream.alias and column.table.lower() == stream.alias.lower():
                from_edges.append((i, column.name))
        return from_recursion, from_edges

    def anchor_copied(self) -> list[tuple[int, str]]:
        """The anchor's output columns that copy a column of the edge as it is."""
        if self.constant_anchor or any(isinstance(e, exp.Star) or isinstance(e, exp.Column) and
                                       isinstance(e.this, exp.Star) for e in self.anchor.expressions):
            return []
        copied = []
        for i, expression in enumerate(self.anchor.expressions):
            column = expression.this if isinstance(expression, exp.Alias) else expression
            if isinstance(column, exp.Column):
                copied.append((i, column.name))
        return copied

    def _tables(self, query: exp.Expression) -> list[exp.Table]:
        return [t for t in query.find_all(exp.Table)]

    def _check(self) -> None:
        _only_rows(self.anchor, "anchor")
        _only_rows(self.step, "step")
        _only_rows(self.main, "outer query")
        anchor = self._tables(self.anchor)
        self.constant_anchor = not anchor
        if len(anchor) > 1 or (anchor and not is_stream(anchor[0])) or self.anchor.args.get("joins"):
            raise unsupported("the recursion's anchor", "it may read nothing or the stream of edges, once",
                              "Write SELECT ... FROM STREAM(edges) [WHERE ...], or an anchor of constants.")
        step = self._tables(self.step)
        if sorted(is_stream(t) for t in step) != [False, True] or \
                sum(1 for t in step if not is_stream(t) and t.name == self.name) != 1:
            raise unsupported("the recursion's step", f"it must join {self.name} with the stream of edges, each "
                              "read once, and read no other table",
                              f"Write SELECT ... FROM {self.name} JOIN STREAM(edges) AS e ON ...")
        for join in self.step.args.get("joins") or []:
            if join.side or join.kind not in ("", "INNER", "CROSS") or join.args.get("using"):
                raise unsupported("the recursion's step", f"it uses a {(join.side + ' ' + join.kind).strip()} join; "
                                  "only inner joins run incrementally", "Use an inner join with ON.")
        main = self._tables(self.main)
        if len(main) != 1 or main[0].name != self.name or self.main.args.get("joins"):
            raise unsupported("the outer query", f"it must read {self.name} alone",
                              f"Write SELECT ... FROM {self.name} [WHERE ...].")


def over(query: exp.Select, name: str, stream_view: str, result_view: str | None = None) -> exp.Select:
    """``query`` reading ``stream_view`` for the stream and, given ``result_view``, that view for
    the recursion ``name`` (under the recursion's name, so its column references still hold)."""
    query = query.copy()
    for table in list(query.find_all(exp.Table)):
        stream = is_stream(table)
        if stream or (result_view and table.name == name):
            replacement = exp.Table(this=exp.to_identifier(stream_view if stream else result_view))
            if table.args.get("alias"):
                replacement.set("alias", table.args["alias"].copy())
            elif not stream:
                replacement.set("alias", exp.TableAlias(this=exp.to_identifier(name)))
            table.replace(replacement)
    return query


def picked(anchor: exp.Select, columns: list[str]):
    """The anchor as ("column", name) and ("constant", value) items, where it is only that: no
    WHERE, every output a column of the edge or a number or string literal; else None."""
    if any(anchor.args.get(k) for k in ("where", "joins", "group", "having", "qualify", "distinct")):
        return None
    present = {c.lower(): c for c in columns}
    picked = []
    for expression in anchor.expressions:
        node = expression.this if isinstance(expression, exp.Alias) else expression
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star) and node.name.lower() in present:
            picked.append(("column", present[node.name.lower()]))
        elif isinstance(node, exp.Literal) and node.is_string:
            picked.append(("constant", node.this))
        elif isinstance(node, exp.Literal) and node.this.lstrip("-").isdigit():
            picked.append(("constant", int(node.this)))
        else:
            return None
    return picked


def refuse_absent(edge: dict, after: int, shape: RecursionShape) -> None:
    """An edge deleted more often than inserted (``after``, its inserts less deletes, below 0)
    is a classed error naming it."""
    raise SqlextError("DELETE_OF_ABSENT_ROW", function=FUNCTION, name=to_sql(shape.stream.this),
                      row="(" + ", ".join(f"{k}={v!r}" for k, v in edge.items()) + ")", excess=-after)


def refuse_unknown(bad: dict, order_by: str, shape: RecursionShape) -> None:
    """A change type outside the four is a classed error naming the edge; an update of a
    Debezium feed that lacks the edge it replaces says so."""
    edge = ", ".join(f"{k}={v!r}" for k, v in bad.items() if k not in (CHANGE_TYPE, order_by))
    if bad[CHANGE_TYPE] == UPDATE_WITHOUT_BEFORE:
        raise unsupported(f"{to_sql(shape.stream.this)}, whose update at {order_by} = {bad.get(order_by)!r} has no "
                          "before row", "an edge has no key, so an update must say which edge it replaces",
                          "Make Debezium send the row before each update (in Postgres, ALTER TABLE ... REPLICA "
                          "IDENTITY FULL), or write the update as a delete and a create.")
    raise SqlextError("UNKNOWN_CHANGE_TYPE", function=FUNCTION, key=f"({edge})", value=repr(bad[CHANGE_TYPE]))


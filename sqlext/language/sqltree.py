"""Building generated SQL as sqlglot trees.

Every query a rule or a table function generates is built from these pieces: a name the user
chose (a column, a relation, a CTE) is always a quoted :class:`sqlglot.exp.Identifier` and a
text value always a :class:`sqlglot.exp.Literal`, so no user text is ever read as SQL or as a
format template. Only fixed fragments (keywords and sqlext's own helper columns, no user
text) are written as SQL and parsed by :func:`fragment`.

Helper columns, views and CTEs are named by :func:`helper` (a fixed name) or :func:`fresh`
(a name no other call returns in this process), all with the one prefix ``__sx_``.

>>> from sqlext.language.dialect import to_sql
>>> to_sql(exp.select(col("v{x}"), halias(col("it's"), "old")).from_(table("my `t`")))
"SELECT `v{x}`, `it's` AS __sx_old FROM `my ``t```"
>>> to_sql(over(exp.Lag(this=col("v")), ["k"], "o"))
'LAG(`v`) OVER (PARTITION BY `k` ORDER BY `o`)'
>>> read_identifier_list(identifier_list(["n", "a, b", "c`d"]))
['n', 'a, b', 'c`d']
"""

from __future__ import annotations

import itertools
from typing import Iterable, Sequence

from sqlglot import exp
from sqlglot.tokens import TokenType

from sqlext.language.dialect import SparkExt

PREFIX = "__sx_"
_counter = itertools.count(1)


def helper(stem: str) -> str:
    """The name of one of sqlext's own columns, views or CTEs: ``__sx_<stem>``."""
    return stem if stem.startswith(PREFIX) else PREFIX + stem


def fresh(stem: str) -> str:
    """A helper name no other call of this function returns in this process."""
    return f"{helper(stem)}{next(_counter)}"


def col(name: str, table: str | exp.Identifier | None = None) -> exp.Column:
    """A user's column, quoted (any character is safe); ``table`` qualifies it."""
    qualifier = table if isinstance(table, exp.Identifier) or table is None else exp.to_identifier(table)
    return exp.Column(this=exp.to_identifier(name, quoted=True),
                      table=qualifier.copy() if qualifier is not None else None)


def hcol(stem: str, table: str | None = None) -> exp.Column:
    """One of sqlext's helper columns (a fixed, plain name)."""
    return exp.column(helper(stem), table=helper(table) if table else None)


def ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def hident(stem: str) -> exp.Identifier:
    return exp.to_identifier(helper(stem))


def table(name: str) -> exp.Table:
    """A relation named by the user, quoted."""
    return exp.Table(this=ident(name))


def htable(stem: str) -> exp.Table:
    """A helper relation (a CTE of the generated query)."""
    return exp.Table(this=hident(stem))


def string(text: str) -> exp.Literal:
    return exp.Literal.string(text)


def number(value: int) -> exp.Literal:
    return exp.Literal.number(value)


def alias(expression: exp.Expression, name: str) -> exp.Alias:
    """``expression AS name`` for a user's name (quoted)."""
    return exp.Alias(this=expression, alias=exp.to_identifier(name, quoted=True))


def halias(expression: exp.Expression, stem: str) -> exp.Alias:
    """``expression AS __sx_stem``: one of sqlext's helper columns."""
    return exp.Alias(this=expression, alias=hident(stem))


def fragment(sql: str) -> exp.Expression:
    """A fixed SQL fragment (keywords, literals and helper columns only) as a tree.

    Refuses a backtick: a quoted name in a fragment would be a user's name written as text."""
    if "`" in sql:
        raise ValueError(f"a fixed fragment holds a quoted name: {sql}")
    return exp.condition(sql, dialect=SparkExt)


def ordered(expression: exp.Expression) -> exp.Ordered:
    """Ascending, NULLs first: Spark's default order, written as Spark reads ``ORDER BY x``."""
    return exp.Ordered(this=expression, nulls_first=True)


def over(function: exp.Expression, partition: Sequence[str | exp.Expression], order: str | exp.Expression | None,
         frame: exp.WindowSpec | None = None) -> exp.Window:
    """``function OVER (PARTITION BY partition ORDER BY order frame)``; names are user columns."""
    def as_column(item):
        return col(item) if isinstance(item, str) else item

    window = exp.Window(this=function, partition_by=[as_column(p) for p in partition])
    if order is not None:
        window.set("order", exp.Order(expressions=[ordered(as_column(order))]))
    if frame is not None:
        window.set("spec", frame)
    return window


def case(whens: Iterable[tuple[exp.Expression, exp.Expression]], default: exp.Expression | None = None) -> exp.Case:
    node = exp.Case()
    for condition, value in whens:
        node = node.when(condition, value, copy=False)
    if default is not None:
        node = node.else_(default, copy=False)
    return node


def and_(*conditions: exp.Expression | None) -> exp.Expression:
    present = [c for c in conditions if c is not None]
    if not present:
        return exp.true()
    return present[0] if len(present) == 1 else exp.and_(*present, copy=False)


def or_(*conditions: exp.Expression) -> exp.Expression:
    return conditions[0] if len(conditions) == 1 else exp.or_(*conditions, copy=False)


def paren(expression: exp.Expression) -> exp.Paren:
    return exp.Paren(this=expression)


def subquery(query: exp.Expression, name: str | None = None) -> exp.Subquery:
    """``(query) [AS name]``; ``name`` is a helper name."""
    node = exp.Subquery(this=query)
    if name is not None:
        node.set("alias", exp.TableAlias(this=hident(name)))
    return node


def select_from(projections: Sequence[exp.Expression | str], source: exp.Expression,
                where: exp.Expression | None = None) -> exp.Select:
    """``SELECT projections FROM source [WHERE where]``; a query as source becomes a subquery."""
    if isinstance(source, exp.Query) and not isinstance(source, exp.Subquery):
        source = subquery(source)
    query = exp.select(*[exp.Star() if p == "*" else p for p in projections], copy=False).from_(source, copy=False)
    if where is not None:
        query = query.where(where, copy=False)
    return query


def lateral_explode(query: exp.Select, array: exp.Expression, view: str, column: str) -> exp.Select:
    """``query LATERAL VIEW explode(array) view AS column`` (helper names)."""
    lateral = exp.Lateral(this=exp.Explode(this=array), view=True,
                          alias=exp.TableAlias(this=hident(view), columns=[hident(column)]))
    query.set("laterals", [*(query.args.get("laterals") or []), lateral])
    return query


def broadcast_hint(query: exp.Select, relation: str) -> exp.Select:
    query.set("hint", exp.Hint(expressions=[exp.Anonymous(this="BROADCAST", expressions=[hident(relation)])]))
    return query


def with_ctes(query: exp.Query, ctes: Sequence[tuple[str, exp.Expression]]) -> exp.Query:
    """``WITH name AS (query), ... query``; the names are helper names."""
    for name, body in ctes:
        query = query.with_(hident(name), as_=body, copy=False)
    return query


def identifier_list(names: Sequence[str]) -> str:
    """Names as the text of a list argument (``'n, `a, b`'``), each one quoted where needed;
    :func:`read_identifier_list` reads it back."""
    return ", ".join(exp.to_identifier(n).sql(dialect=SparkExt) for n in names)


def read_identifier_list(text: str | None) -> list[str]:
    """The names of a list argument written by :func:`identifier_list` (or by hand): names
    separated by commas, each plain or quoted with backticks."""
    names: list[str] = []
    expect_name = True
    for token in SparkExt().tokenize(text or ""):
        if expect_name and token.token_type != TokenType.COMMA:
            names.append(token.text)
            expect_name = False
        elif not expect_name and token.token_type == TokenType.COMMA:
            expect_name = True
        else:
            raise ValueError(f"not a list of names: {text!r}")
    return names

"""SQL expressions passed to table functions as strings (predicate, foreign_key).

An expression argument is confined to one scalar expression over the input's columns: it is
parsed on its own, and anything that could reach beyond the row (a subquery, a second
statement, an aggregate or window) is refused before Spark sees it.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from sqlext.language.dialect import SparkExt, scan, to_sql
from sqlext.errors import SqlextError, sql_value


def parse_expression(function: str, argument: str, text: Any, example: str) -> exp.Expression:
    def invalid(reason: str) -> SqlextError:
        return SqlextError(
            "INVALID_SQL_EXPRESSION", function=function, argument=argument, value=sql_value(text),
            reason=reason, example=example,
        )

    if not isinstance(text, str) or not text.strip():
        raise invalid("it must be a non-empty string")
    try:
        statements = SparkExt().parse(f"{_PREFIX}{text}")
    except (ParseError, TokenError) as error:
        raise invalid(_problem(text, error)) from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Select):
        raise invalid("it reads as more than one statement")
    select = statements[0]
    extra = [k for k, v in select.args.items() if v and k not in ("expressions",)]
    if extra or len(select.expressions) != 1:
        raise invalid("it reads as more than one expression")
    expression = select.expressions[0]
    if isinstance(expression, exp.Alias):
        raise invalid("an alias is not allowed")
    for node in expression.walk():
        if isinstance(node, (exp.Query, exp.Subquery)):
            raise invalid("subqueries are not allowed")
        if isinstance(node, (exp.AggFunc, exp.Window)):
            raise invalid("aggregates and window functions are not allowed")
        if isinstance(node, exp.Star):
            raise invalid("* is not allowed")
        node.comments = None  # a comment in an argument is not carried into the generated SQL
    return expression


_PREFIX = "SELECT "  # an expression argument is read as the one item of a select list


def _problem(text: str, error: Exception) -> str:
    """Why sqlglot cannot read an expression argument, in terms of the text the user wrote
    (not the SELECT it was read in, nor sqlglot's class names).

    >>> _problem("status = 'open", TokenError("Error tokenizing 'SELECT status = 'ope'"))
    "the string 'open has no closing quote"
    >>> _problem("balance >=", ParseError.new("", "Required keyword: 'expression' missing for <class 'GTE'>",
    ...                                       start_context="SELECT balance ", highlight=">="))
    '">=" lacks its right operand'
    """
    opened = scan(text)[1]
    if opened is not None:
        quote = text[opened]
        what = "string" if quote != "`" else "name"
        mark = "quote" if quote != "`" else "backtick"
        return f"the {what} {text[opened:]} has no closing {mark}"
    details = error.errors[0] if isinstance(error, ParseError) and error.errors else {}
    near = (details.get("highlight") or "").strip()
    before = (details.get("start_context") or "").removeprefix(_PREFIX).strip()
    description = details.get("description") or ""
    if not near:
        return "it cannot be read as SQL"
    if description.startswith("Required keyword"):
        return f'"{near}" lacks its right operand'
    if description.startswith("Expecting "):
        return f'"{description.removeprefix("Expecting ")}" is missing after "{before}{near}"'
    return f'"{near}" is unexpected after "{before}"' if before else f'"{near}" is unexpected'



def expression_tree(expression_sql: str) -> exp.Expression:
    """An expression argument's SQL (already checked by :func:`parse_expression`) as a tree."""
    return SparkExt().parse(f"SELECT {expression_sql}")[0].expressions[0]


def over_columns_tree(expression: exp.Expression | str, names: Mapping[str, str]) -> exp.Expression:
    """``expression`` with each column in ``names`` (matched without regard to case, as
    Spark resolves them) read from the column it maps to; columns not in ``names`` and lambda
    parameters stay as they are.

    >>> to_sql(over_columns_tree("coalesce(fk, Region) + 1", {"fk": "__sx_prev_fk", "region": "__sx_prev_region"}))
    'COALESCE(__sx_prev_fk, __sx_prev_region) + 1'
    """
    lowered = {k.lower(): v for k, v in names.items()}
    tree = expression_tree(expression) if isinstance(expression, str) else expression.copy()

    def swap(node: exp.Expression) -> exp.Expression:
        if (isinstance(node, exp.Column) and not node.table and node.name.lower() in lowered
                and not _bound_by_lambda(node)):
            return exp.column(lowered[node.name.lower()])
        return node

    return tree.transform(swap)


def referenced_columns(expression: exp.Expression) -> list[str]:
    return [c.name for c in expression.find_all(exp.Column)]


def check_columns(function: str, side: str, expression: exp.Expression, columns: Sequence[str],
                  argument: str) -> None:
    lowered = {c.lower() for c in columns}
    for column in expression.find_all(exp.Column):
        if _bound_by_lambda(column):
            continue
        if column.table:
            raise SqlextError(
                "INVALID_SQL_EXPRESSION", function=function, argument=argument,
                value=sql_value(to_sql(expression)), reason=f"column {to_sql(column)} is qualified",
                example="'balance >= 0'",
            )
        if column.name.lower() not in lowered:
            raise SqlextError(
                "CHANGELOG_MISSING_COLUMN", function=function, side=side, column=column.name,
                columns=list(columns), fix=f"Refer only to the input's columns in {argument}.",
            )


def _bound_by_lambda(column: exp.Column) -> bool:
    """``x`` in ``exists(items, x -> x > 0)`` is a lambda parameter, not a column."""
    node = column.parent
    while node is not None:
        if isinstance(node, exp.Lambda) and not column.table:
            if column.name.lower() in {p.name.lower() for p in node.expressions}:
                return True
        node = node.parent
    return False

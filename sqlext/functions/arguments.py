"""Finding sqlext table-function calls in a statement and reading their arguments.

Shared by the rules that expand a call into native SQL. A call is a function in a FROM or
JOIN position; its arguments may be named (``key => 'id'``) or positional, in the order the
function declares them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from sqlglot import exp

from sqlext.errors import SqlextError, sql_value, message_text
from sqlext.language.dialect import TableArgument, to_sql, parse_one
from sqlext.language.sqltree import identifier_list, read_identifier_list


@dataclass
class Call:
    function: str
    node: exp.Expression  # the function expression
    table: exp.Table  # the FROM item that holds it (alias, joins)
    tables: dict[str, TableArgument] = field(default_factory=dict)
    literals: dict[str, Any] = field(default_factory=dict)


def find_calls(expression: exp.Expression, function: str) -> list[exp.Table]:
    """FROM items calling ``function``, innermost first so nested calls expand before outer ones."""
    found = [
        table
        for table in expression.find_all(exp.Table)
        if isinstance(table.this, (exp.Anonymous, exp.Func)) and _name(table.this) == function
    ]
    return sorted(found, key=lambda t: -_depth(t))


def bind_arguments(function: str, given: Sequence[tuple[str | None, Any]], arguments: Sequence[str],
                   show: Callable[[Any], str] = str) -> dict[str, Any]:
    """Name a call's arguments: ``given`` holds ``(None, value)`` for a positional argument and
    ``(name, value)`` for a named one, in the order written. Positional arguments come first
    and take the function's ``arguments`` in order; names are case-insensitive. ``show``
    renders a value for the error about a positional argument too many."""
    bound: dict[str, Any] = {}
    positional = True
    for index, (name, value) in enumerate(given):
        if name is not None:
            positional = False
            name = name.lower()
        else:
            if not positional or index >= len(arguments):
                raise SqlextError(
                    "UNKNOWN_ARGUMENT", function=function, argument=f"#{index + 1} ({show(value)})",
                    allowed=", ".join(arguments),
                )
            name = arguments[index]
        if name in bound:
            raise SqlextError("DUPLICATE_ARGUMENT", function=function, argument=name)
        bound[name] = value
    return bound


def read_call(table: exp.Table, function: str, arguments: Sequence[str], tables: Sequence[str] = ()) -> Call:
    """The arguments of the call in FROM item ``table``, named (:func:`bind_arguments`) and
    split into table arguments and constant values. ``tables`` names the arguments that take
    a table, for the error about one written without ``TABLE(...)``."""
    node = table.this
    call = Call(function, node, table)
    given = [(arg.this.name, arg.expression) if isinstance(arg, (exp.Kwarg, exp.PropertyEQ)) else (None, arg)
             for arg in node.expressions]
    for name, value in bind_arguments(function, given, arguments, show=to_sql).items():
        if isinstance(value, TableArgument):
            call.tables[name] = value
        else:
            call.literals[name] = literal_value(function, name, value, table=name in tables)
    return call


def set_literal(table: exp.Table, arguments: Sequence[str], name: str, value: str | None) -> None:
    """Give the call in FROM item ``table`` the argument ``name => 'value'`` (None: remove it).
    Positional arguments become named ones (``arguments`` in the function's order)."""
    node = table.this
    kept = []
    for index, argument in enumerate(node.expressions):
        if isinstance(argument, (exp.Kwarg, exp.PropertyEQ)):
            named = argument.this.name.lower()
        else:
            named = arguments[index]
            argument = exp.Kwarg(this=exp.var(named), expression=argument)
        if named != name:
            kept.append(argument)
    if value is not None:
        kept.append(exp.Kwarg(this=exp.var(name), expression=exp.Literal.string(value)))
    node.set("expressions", kept)


def literal_value(function: str, name: str, value: exp.Expression, table: bool = False) -> Any:
    """The constant an argument holds (a string, a number's text, a boolean, or None for NULL).

    >>> literal_value("F", "input", exp.column("acc"), table=True)
    Traceback (most recent call last):
    sqlext.errors.SqlextError: [INVALID_ARGUMENT_TYPE] F: input must be a table argument; got acc. Write input => TABLE(acc).
    """
    if isinstance(value, exp.Literal):
        return value.this if value.is_string else to_sql(value)
    if isinstance(value, exp.Null):
        return None
    if isinstance(value, exp.Boolean):
        return value.this
    if table:
        raise SqlextError(
            "INVALID_ARGUMENT_TYPE", function=function, argument=name, expected="a table argument",
            value=to_sql(value), fix=f"Write {name} => TABLE({to_sql(value)}).",
        )
    example = f"'{value.name}'" if isinstance(value, exp.Column) and not value.table else "'...'"
    raise SqlextError(
        "INVALID_ARGUMENT_TYPE", function=function, argument=name,
        expected="a constant string", value=to_sql(value), fix=f"Write {name} => {example}.",
    )


def relation_source(argument: TableArgument) -> exp.Expression:
    """The table argument's relation as a FROM item (a fresh copy: a table, or a subquery)."""
    relation = argument.this
    if isinstance(relation, exp.Table):
        return relation.copy()
    return exp.Subquery(this=relation.copy())


def partitioning_defaults(function: str, argument: TableArgument, literals: dict, key_argument: str) -> None:
    """Use ``TABLE(t) PARTITION BY k ORDER BY v`` as key and order when they are not named,
    and refuse clauses that disagree with the named ones."""
    partition = argument.args.get("partition_by") or []
    order = argument.args.get("order") or []
    if partition:
        if not all(isinstance(p, exp.Column) for p in partition):
            raise SqlextError(
                "CONFLICTING_PARTITIONING", function=function, clause="PARTITION BY",
                value=", ".join(to_sql(p) for p in partition), argument=key_argument,
                expected="key columns",
            )
        names = [p.name for p in partition]
        if literals.get(key_argument) is None:
            literals[key_argument] = identifier_list(names)
        else:
            given = [n.lower() for n in _names_or_none(literals[key_argument]) or []]
            if sorted(given) != sorted(n.lower() for n in names):
                raise SqlextError(
                    "CONFLICTING_PARTITIONING", function=function, clause="PARTITION BY",
                    value=", ".join(names), argument=key_argument,
                    expected=sql_value(literals[key_argument]),
                )
    if order:
        ordered = order[0]
        column = ordered.this if isinstance(ordered, exp.Ordered) else ordered
        if len(order) != 1 or not isinstance(column, exp.Column) or ordered.args.get("desc"):
            raise SqlextError(
                "CONFLICTING_PARTITIONING", function=function, clause="ORDER BY",
                value=", ".join(to_sql(o) for o in order), argument="order_by",
                expected="one ascending column",
            )
        if literals.get("order_by") is None:
            literals["order_by"] = identifier_list([column.name])
        elif [n.lower() for n in _names_or_none(literals["order_by"]) or []] != [column.name.lower()]:
            raise SqlextError(
                "CONFLICTING_PARTITIONING", function=function, clause="ORDER BY",
                value=column.name, argument="order_by", expected=sql_value(literals["order_by"]),
            )


def _names_or_none(text) -> list[str] | None:
    """The names of a list argument, or None when it is not one (its own check reports it)."""
    try:
        return read_identifier_list(text) if isinstance(text, str) else None
    except Exception:  # noqa: BLE001 - not a list of names
        return None


def replace_call(table: exp.Table, query: exp.Expression | str) -> None:
    """Put the native query (a tree, or SQL text) where the call stood, keeping the call's
    alias and joins."""
    subquery = exp.Subquery(this=parse_one(query) if isinstance(query, str) else query)
    alias = table.args.get("alias")
    if alias is not None:
        subquery.set("alias", alias.copy())
    for key in ("joins", "laterals", "pivots"):
        if table.args.get(key):
            subquery.set(key, table.args[key])
    table.replace(subquery)


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _name(node: exp.Expression) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.this).upper()
    return node.sql_name().upper()


def _depth(node: exp.Expression) -> int:
    depth = 0
    while node.parent is not None:
        node, depth = node.parent, depth + 1
    return depth


class SqlValue:
    """A message parameter whose value is computed by SQL at run time (``expression``)."""

    def __init__(self, expression: exp.Expression):
        self.expression = expression


def raise_error(error_class: str, function: str, **params) -> exp.Expression:
    """``raise_error(...)`` carrying a sqlext message; SqlValue parameters are filled in by Spark.

    >>> print(to_sql(raise_error("AMBIGUOUS_ORDER", "F", key=key_text(["id"]), order_by="v{x}",
    ...                          value=SqlValue(exp.column("v{x}", quoted=True))))[:180])
    RAISE_ERROR(CONCAT('[AMBIGUOUS_ORDER] F: two changes of key ', COALESCE(CAST(CONCAT('id=', COALESCE(CAST(`id` AS STRING), 'NULL')) AS STRING), 'NULL'), ' share v{x} = ', COALESCE(C
    """
    sql_params = {name: value for name, value in params.items() if isinstance(value, SqlValue)}
    markers = {name: f"\x00{i}\x00" for i, name in enumerate(sql_params)}
    text = message_text(error_class, function, **{**params, **markers})
    parts: list[exp.Expression] = []
    for piece in text.split("\x00"):
        if piece.isdigit() and int(piece) < len(sql_params):
            name = list(sql_params)[int(piece)]
            parts.append(_as_text(sql_params[name].expression))
        elif piece:
            parts.append(exp.Literal.string(piece))
    return exp.Anonymous(this="raise_error", expressions=[exp.Concat(expressions=parts)])


def _as_text(expression: exp.Expression) -> exp.Expression:
    """``coalesce(cast(expression AS STRING), 'NULL')``."""
    return exp.Coalesce(this=exp.cast(expression.copy(), "STRING"), expressions=[exp.Literal.string("NULL")])


def key_text(keys: Sequence[str]) -> SqlValue:
    """A row's key as text, 'id=7' or 'a=1, b=2', computed by SQL."""
    parts = [exp.Concat(expressions=[exp.Literal.string(k + "="),
                                     _as_text(exp.column(exp.to_identifier(k, quoted=True)))])
             for k in keys]
    if len(parts) == 1:
        return SqlValue(parts[0])
    return SqlValue(exp.Anonymous(this="concat_ws", expressions=[exp.Literal.string(", "), *parts]))


def check_table_arguments(call: Call, keys: dict[str, str]) -> None:
    """Exactly the arguments named in ``keys`` are tables (``keys`` maps each one to the
    argument that holds its key), and their ``PARTITION BY``/``ORDER BY`` clauses agree with
    those keys (filled in where absent)."""
    function = call.function
    for name in keys:
        if name not in call.tables:
            if name in call.literals:
                raise SqlextError(
                    "INVALID_ARGUMENT_TYPE", function=function, argument=name, expected="a table argument",
                    value=sql_value(call.literals[name]), fix=f"Write {name} => TABLE(my_changes).",
                )
            raise SqlextError("MISSING_ARGUMENT", function=function, argument=name,
                              example=f"TABLE({name}_changes)" if name != "input" else "TABLE(my_changes)")
    for name in call.tables:
        if name not in keys:
            raise SqlextError(
                "INVALID_ARGUMENT_TYPE", function=function, argument=name, expected="a constant string",
                value="a table", fix=f"Write {name} => '...'.",
            )
    for name, key_argument in keys.items():
        partitioning_defaults(function, call.tables[name], call.literals, key_argument)

"""A few Spark SQL expressions evaluated over Arrow data, so that a run computes them without a
Spark job (a predicate of CHANGELOG_FILTER, the grouping values and arguments of an aggregate).

Only shapes whose result is Spark's by construction are taken: column references (resolved as
Spark resolves names, ignoring case), integer, string and boolean literals, comparisons of
integers with integers, of strings with strings (both compare as Spark does: by value, and
strings by their UTF-8 bytes) and of booleans, ``BETWEEN``, ``IS [NOT] NULL`` and ``AND``,
``OR``, ``NOT`` with SQL's three-valued logic (Arrow's Kleene functions). Anything else
(arithmetic, which overflows by Spark's ANSI rules; floating-point values, whose NaN Spark
orders above every number; casts; functions) is None: Spark computes it, as before.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

_COMPARISONS = {exp.EQ: "equal", exp.NEQ: "not_equal", exp.GT: "greater", exp.GTE: "greater_equal",
                exp.LT: "less", exp.LTE: "less_equal"}


def _kind(data_type: pa.DataType) -> str | None:
    if pa.types.is_integer(data_type):
        return "integer"
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return "string"
    if pa.types.is_boolean(data_type):
        return "boolean"
    if pa.types.is_float64(data_type):
        return "double"
    return None


def _column(node: exp.Column, schema: pa.Schema, alias: str | None):
    if node.table and (alias is None or node.table.lower() != alias.lower()):
        return None
    names = [n for n in schema.names if n == node.name] or [n for n in schema.names if n.lower() == node.name.lower()]
    return names[0] if len(names) == 1 else None


def _translate(node: exp.Expression, schema: pa.Schema, alias: str | None, nonzero: frozenset = frozenset()):
    """(Arrow expression, kind) of ``node``, or None. ``nonzero``: the columns known not to be
    zero where ``node`` is evaluated (the false branch of ``IF(c = 0, ..., ...)``)."""
    if isinstance(node, exp.Paren):
        return _translate(node.this, schema, alias, nonzero)
    if isinstance(node, exp.Null):
        return pc.scalar(None), "null"
    if isinstance(node, exp.If):
        # IF(c, a, b): b where c is false or NULL; a division by a column c tests for zero is exact
        condition = _translate(node.this, schema, alias)
        guarded = nonzero
        test = node.this.unnest() if isinstance(node.this, exp.Paren) else node.this
        if isinstance(test, exp.EQ) and isinstance(test.this, exp.Column) and isinstance(test.expression, exp.Literal) \
                and test.expression.is_int and int(test.expression.this) == 0:
            name = _column(test.this, schema, alias)
            guarded = nonzero | {name} if name is not None else nonzero
        true = _translate(node.args["true"], schema, alias, nonzero)
        false = _translate(node.args["false"], schema, alias, guarded) if node.args.get("false") is not None \
            else (pc.scalar(None), "null")
        if condition is None or true is None or false is None or condition[1] != "boolean":
            return None
        kinds = {true[1], false[1]} - {"null"}
        if len(kinds) > 1:
            return None
        kind = kinds.pop() if kinds else "null"
        return pc.if_else(pc.coalesce(condition[0], pc.scalar(False)), true[0], false[0]), kind
    if isinstance(node, exp.Cast) and node.to.this in (exp.DataType.Type.DOUBLE,):
        inner = _translate(node.this, schema, alias, nonzero)
        if inner is None or inner[1] != "integer":  # a 64-bit integer to a double rounds as Java does
            return None
        return inner[0].cast(pa.float64()), "double"
    if isinstance(node, exp.Div):
        # a double over an integer column known not to be zero: IEEE division, as Spark's
        left = _translate(node.this, schema, alias, nonzero)
        divisor = node.expression
        name = _column(divisor, schema, alias) if isinstance(divisor, exp.Column) else None
        right = _translate(divisor, schema, alias, nonzero)
        if left is None or right is None or name is None or name not in nonzero or left[1] != "double" \
                or right[1] != "integer":
            return None
        return pc.divide(left[0], right[0].cast(pa.float64())), "double"
    if isinstance(node, exp.Column):
        name = _column(node, schema, alias)
        if name is None:
            return None
        return pc.field(name), _kind(schema.field(name).type) or "other"
    if isinstance(node, exp.Boolean):
        return pc.scalar(bool(node.this)), "boolean"
    if isinstance(node, exp.Literal):
        if node.is_string:
            return pc.scalar(node.this), "string"
        if node.is_int:
            return pc.scalar(int(node.this)), "integer"
        return None
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and node.this.is_int:
        return pc.scalar(-int(node.this.this)), "integer"
    if type(node) in _COMPARISONS:
        left, right = _translate(node.this, schema, alias), _translate(node.expression, schema, alias)
        if left is None or right is None or left[1] != right[1] or left[1] not in ("integer", "string", "boolean"):
            return None
        if left[1] == "boolean" and not isinstance(node, (exp.EQ, exp.NEQ)):
            return None
        return getattr(pc, _COMPARISONS[type(node)])(left[0], right[0]), "boolean"
    if isinstance(node, exp.Between):
        low = exp.GTE(this=node.this.copy(), expression=node.args["low"].copy())
        high = exp.LTE(this=node.this.copy(), expression=node.args["high"].copy())
        return _translate(exp.And(this=low, expression=high), schema, alias)
    if isinstance(node, (exp.And, exp.Or)):
        left, right = _translate(node.this, schema, alias), _translate(node.expression, schema, alias)
        if left is None or right is None or left[1] != "boolean" or right[1] != "boolean":
            return None
        return (left[0] & right[0] if isinstance(node, exp.And) else left[0] | right[0]), "boolean"
    if isinstance(node, exp.Not):
        inner = _translate(node.this, schema, alias)
        return None if inner is None or inner[1] != "boolean" else (~inner[0], "boolean")
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        inner = _translate(node.this, schema, alias)
        return None if inner is None else (inner[0].is_null(), "boolean")
    return None


def arrow_expression(node: exp.Expression | str, schema: pa.Schema, alias: str | None = None,
                     boolean: bool = False) -> pc.Expression | None:
    """``node`` (a tree, or SQL text) as an Arrow expression over columns ``schema``, where its
    result is Spark's (see the module's docstring); None otherwise. ``boolean``: only a
    condition is taken."""
    if isinstance(node, str):
        from sqlext.language.dialect import parse_one

        try:
            node = parse_one(node)
        except Exception:  # noqa: BLE001 - sqlglot fails in several ways on text it cannot read
            return None
    found = _translate(node, schema, alias)
    if found is None or (boolean and found[1] != "boolean"):
        return None
    return found[0]


def evaluate(table: pa.Table, columns: dict[str, pc.Expression], where: pc.Expression | None = None) -> pa.Table:
    """The columns the expressions give over ``table``'s rows, by name; only over the rows
    ``where`` holds for (not false, not NULL) where it is given, in the same scan."""
    import pyarrow.dataset as ds

    if not columns:
        return pa.table({})
    return ds.dataset(table).to_table(columns=columns, filter=where)

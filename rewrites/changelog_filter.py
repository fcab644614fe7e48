"""Rule: expand ``CHANGELOG_FILTER(...)`` into native Spark SQL (window functions, no Python).

Why the result is the same: the filter's output for a change depends only on the key's
previous applied change (its row and whether that row passed) and on the change itself
(see :mod:`sqlext.udfs.changelog_filter`). ``LAG`` over ``PARTITION BY key ORDER BY order_by`` is
exactly "the previous change of this key", so one window pass computes every case of the
seed's table; an ``explode`` of 0, 1 or 2 slots forwards nothing, one image or a pre/post pair.
With ``sequence_by`` a first window drops stale changes (older than the running maximum of
the key's earlier changes, which equals the latest applied one because a stale change never
raises it). The data errors of the change-row rules (ordering ties, NULL ordering values,
unknown change types) are raised by ``raise_error`` in the same pass, before any row is
forwarded.

The rule needs the input's columns; with no :class:`sqlext.analysis.relations.Relations` that knows
them it leaves the call unchanged (Spark then runs the registered table function).

>>> from sqlext.analysis.relations import MappingRelations
>>> from sqlext.language.dialect import parse_one, to_sql
>>> tree = parse_one("SELECT * FROM CHANGELOG_FILTER(input => TABLE(t), key => 'id', predicate => 'v > 0')")
>>> out = changelog_filter_to_sql(tree, relations=MappingRelations({"t": ["id", "v", "_commit_version"]}))
>>> "LAG(" in to_sql(out) and "CHANGELOG_FILTER(" not in to_sql(out)
True
"""

from __future__ import annotations

from sqlglot import exp

from sqlext.functions.change_stream import checked_changes, minimal_changes, present, struct, window
from sqlext.language.dialect import to_sql
from sqlext.analysis.notes import Notes
from sqlext.analysis.relations import Relations, table_inputs
from sqlext.language.sqltree import alias, halias, case, col, fragment, hcol, paren, select_from, string
from sqlext.functions.arguments import find_calls, read_call, replace_call
from sqlext.functions.changelog_filter import ARGUMENTS, FUNCTION, TABLES, FilterSpec, filter_spec, not_boolean
from sqlext.functions.expressions import expression_tree
from sqlext.functions.changes import CHANGE_TYPE, DELETE, UPSERT, check_order_type

RULE = "changelog_filter_to_sql"


def changelog_filter_to_sql(
    expression: exp.Expression, relations: Relations | None = None, notes: Notes | None = None
) -> exp.Expression:
    notes = notes if notes is not None else Notes()
    for table in find_calls(expression, FUNCTION):
        call = read_call(table, FUNCTION, ARGUMENTS, TABLES)
        source = table_inputs(call, {"input": "key"}, relations)["input"]
        if source.columns is None:
            notes.skip(RULE, f"{FUNCTION}: the input's columns are unknown here, so the call is left "
                             "to the registered table function")
            continue
        columns, query = source.columns, source.query
        spec = filter_spec(call.literals, columns)
        check_order_type(spec.shape, relations.expression_type(query, to_sql(col(spec.shape.order_by))))
        actual = relations.expression_type(query, spec.predicate)
        if actual is not None and actual.lower() not in ("boolean", "void"):
            raise not_boolean(spec.predicate, actual.upper())
        replace_call(table, native_sql(spec, source.source))
        notes.fire(RULE, f"{FUNCTION} (emit => '{spec.emit}') expanded into a native window query")
    return expression


def native_sql(spec: FilterSpec, source: exp.Expression) -> exp.Select:
    """The Spark query that computes ``spec`` over the relation ``source`` (a FROM item)."""
    shape = spec.shape
    data = shape.data_columns
    predicate = exp.Coalesce(this=paren(expression_tree(spec.predicate)), expressions=[exp.false()])
    changes = checked_changes(
        shape, source,
        extra=[halias(exp.and_(paren(present(shape)), predicate), "pass")],
        window_extra=[
            halias(window(shape, exp.Lag(this=hcol("pass"), offset=exp.Literal.number(1), default=exp.false())),
                  "old_pass"),
            halias(window(shape, exp.Lag(this=struct(data))), "old"),
        ],
        with_next=spec.emit == "final",  # the other modes only look back
    )

    if spec.emit == "final":
        return select_from([col(c) for c in data], changes, fragment("__sx_pass AND __sx_next IS NULL"))
    if spec.emit == "records":
        values = [col(c) if c in shape.key else alias(case([(hcol("pass"), col(c))]), c) for c in data]
        kind = case([(hcol("pass"), string(UPSERT))], string(DELETE))
        return select_from([*values, alias(kind, CHANGE_TYPE), col(shape.order_by)], changes)

    diff = select_from([
        "*",
        halias(case([(hcol("old_pass"), hcol("old"))]), "before"),
        halias(case([(hcol("pass"), struct(data))]), "after"),
    ], changes)
    return minimal_changes(diff, data, shape.order_by)

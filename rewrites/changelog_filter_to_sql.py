"""Rule: expand ``CHANGELOG_FILTER(...)`` into native Spark SQL (window functions, no Python).

Why the result is the same: the filter's output for a change depends only on the key's
previous applied change (its row and whether that row passed) and on the change itself
(see :mod:`sqlext.udfs.changelog_filter`). ``LAG`` over ``PARTITION BY key ORDER BY order_by`` is
exactly "the previous change of this key", so one window pass computes every case of the
seed's table; an ``explode`` of 0, 1 or 2 slots forwards nothing, one image or a pre/post pair.
With ``sequence_by`` a first window drops stale changes (older than the running maximum of
the key's earlier changes, which equals the latest applied one because a stale change never
raises it). The data errors of DESIGN.md section 1 (ordering ties, NULL ordering values,
unknown change types) are raised by ``raise_error`` in the same pass, before any row is
forwarded.

The rule needs the input's columns; with no :class:`sqlext.rewrites.relations.Relations` that knows
them it leaves the call unchanged (Spark then runs the registered table function).

>>> from sqlext.rewrites.relations import MappingRelations
>>> from sqlext.rewrites.dialect import parse_one, to_sql
>>> tree = parse_one("SELECT * FROM CHANGELOG_FILTER(input => TABLE(t), key => 'id', predicate => 'v > 0')")
>>> out = changelog_filter_to_sql(tree, relations=MappingRelations({"t": ["id", "v", "_commit_version"]}))
>>> "LAG(" in to_sql(out) and "CHANGELOG_FILTER(" not in to_sql(out)
True
"""

from __future__ import annotations

from sqlglot import exp

from sqlext.rewrites.change_stream import checked_changes, minimal_changes_sql, present_sql, struct_sql, window
from sqlext.rewrites.notes import Notes
from sqlext.rewrites.relations import Relations, table_inputs
from sqlext.catalog.arguments import find_calls, quote, read_call, replace_call, sql_string
from sqlext.catalog.changelog_filter import ARGUMENTS, FUNCTION, FilterSpec, filter_spec, not_boolean
from sqlext.catalog.changes import CHANGE_TYPE, DELETE, UPSERT

RULE = "changelog_filter_to_sql"


def changelog_filter_to_sql(
    expression: exp.Expression, relations: Relations | None = None, notes: Notes | None = None
) -> exp.Expression:
    notes = notes if notes is not None else Notes()
    for table in find_calls(expression, FUNCTION):
        call = read_call(table, FUNCTION, ARGUMENTS)
        source = table_inputs(call, {"input": "key"}, relations)["input"]
        if source.columns is None:
            notes.skip(RULE, f"{FUNCTION}: the input's columns are unknown here, so the call is left "
                             "to the registered table function")
            continue
        columns, query = source.columns, source.query
        spec = filter_spec(call.literals, columns)
        actual = relations.expression_type(query, spec.predicate)
        if actual is not None and actual.lower() not in ("boolean", "void"):
            raise not_boolean(spec.predicate, actual.upper())
        replace_call(table, native_sql(spec, source.source))
        notes.fire(RULE, f"{FUNCTION} (emit => '{spec.emit}') expanded into a native window query")
    return expression


def native_sql(spec: FilterSpec, source: str) -> str:
    """The Spark SQL that computes ``spec`` over the relation ``source``."""
    shape = spec.shape
    order = quote(shape.order_by)
    data = [quote(c) for c in shape.data_columns]
    over = window(shape)
    row = struct_sql(shape.data_columns)
    changes = checked_changes(
        shape, source,
        extra=[f"({present_sql(shape)}) AND coalesce(({spec.predicate}), FALSE) AS __sx_pass"],
        window_extra=[
            f"LAG(__sx_pass, 1, FALSE) OVER ({over}) AS __sx_old_pass",
            f"LAG({row}) OVER ({over}) AS __sx_old",
        ],
        with_next=spec.emit == "final",  # the other modes only look back
    )

    if spec.emit == "final":
        return f"SELECT {', '.join(data)} FROM ({changes}) WHERE __sx_pass AND __sx_next IS NULL"
    if spec.emit == "records":
        values = [
            quote(c) if c in shape.key else f"CASE WHEN __sx_pass THEN {quote(c)} END AS {quote(c)}"
            for c in shape.data_columns
        ]
        kind = f"CASE WHEN __sx_pass THEN {sql_string(UPSERT)} ELSE {sql_string(DELETE)} END"
        columns = values + [f"{kind} AS {quote(CHANGE_TYPE)}", order]
        return f"SELECT {', '.join(columns)} FROM ({changes})"

    diff = (f"SELECT *, CASE WHEN __sx_old_pass THEN __sx_old END AS __sx_before, "
            f"CASE WHEN __sx_pass THEN {row} END AS __sx_after FROM ({changes})")
    return minimal_changes_sql(diff, shape.data_columns, shape.order_by)

"""Rule: expand ``CHANGELOG_FILTER(...)`` into native Spark SQL (window functions, no Python).

Why the result is the same: the filter's output for a change depends only on the key's
previous applied change (its row and whether that row passed) and on the change itself
(see :mod:`udfs.changelog_filter`). ``LAG`` over ``PARTITION BY key ORDER BY order_by`` is
exactly "the previous change of this key", so one window pass computes every case of the
seed's table; an ``explode`` of 0, 1 or 2 slots forwards nothing, one image or a pre/post pair.
With ``sequence_by`` a first window drops stale changes (older than the running maximum of
the key's earlier changes, which equals the latest applied one because a stale change never
raises it). The data errors of DESIGN.md section 1 (ordering ties, NULL ordering values,
unknown change types) are raised by ``raise_error`` in the same pass, before any row is
forwarded.

The rule needs the input's columns; with no :class:`rewrites.relations.Relations` that knows
them it leaves the call unchanged (Spark then runs the registered table function).

>>> from rewrites.relations import MappingRelations
>>> from rewrites.dialect import parse_one, to_sql
>>> tree = parse_one("SELECT * FROM CHANGELOG_FILTER(input => TABLE(t), key => 'id', predicate => 'v > 0')")
>>> out = changelog_filter_to_sql(tree, relations=MappingRelations({"t": ["id", "v", "_commit_version"]}))
>>> "LAG(" in to_sql(out) and "CHANGELOG_FILTER" not in to_sql(out)
True
"""

from __future__ import annotations

from sqlglot import exp

from rewrites.notes import Notes
from rewrites.relations import Relations, standalone_query
from rewrites.table_functions import (
    SqlValue, find_calls, key_text_sql, partitioning_defaults, quote, raise_error_sql,
    read_call, relation_source, replace_call, sql_string,
)
from udfs.changelog_filter import ARGUMENTS, FUNCTION, FilterSpec, filter_spec, not_boolean
from udfs.changes import CHANGE_TYPE, CHANGE_TYPES, DELETE, INSERT, POSTIMAGE, PREIMAGE, SETS_VALUE, UPSERT

RULE = "changelog_filter_to_sql"


def changelog_filter_to_sql(
    expression: exp.Expression, relations: Relations | None = None, notes: Notes | None = None
) -> exp.Expression:
    notes = notes if notes is not None else Notes()
    for table in find_calls(expression, FUNCTION):
        call = read_call(table, FUNCTION, ARGUMENTS)
        argument = call.tables.get("input")
        if argument is None:
            from sqlext.errors import SqlextError

            raise SqlextError(
                "MISSING_ARGUMENT", function=FUNCTION, argument="input", example="TABLE(my_changes)"
            )
        partitioning_defaults(FUNCTION, argument, call.literals, "key")
        for name in call.tables:
            if name != "input":
                from sqlext.errors import SqlextError

                raise SqlextError(
                    "INVALID_ARGUMENT_TYPE", function=FUNCTION, argument=name,
                    expected="a constant string", value="a table", fix=f"Write {name} => '...'.",
                )
        query = standalone_query(argument)
        columns = relations.columns(query, argument.this) if relations is not None else None
        if columns is None:
            notes.skip(RULE, f"{FUNCTION}: the input's columns are unknown here, so the call is left "
                             "to the registered table function")
            continue
        spec = filter_spec(call.literals, columns)
        if relations is not None:
            actual = relations.expression_type(query, spec.predicate)
            if actual is not None and actual.lower() not in ("boolean", "void"):
                raise not_boolean(spec.predicate, actual.upper())
        replace_call(table, native_sql(spec, relation_source(argument)))
        notes.fire(RULE, f"{FUNCTION} (emit => '{spec.emit}') expanded into a native window query")
    return expression


def native_sql(spec: FilterSpec, source: str) -> str:
    """The Spark SQL that computes ``spec`` over the relation ``source``."""
    shape = spec.shape
    keys = ", ".join(quote(k) for k in shape.key)
    order = quote(shape.order_by)
    data = [quote(c) for c in shape.data_columns]
    window = f"PARTITION BY {keys} ORDER BY {order}"

    if shape.has_change_type:
        present = f"{quote(CHANGE_TYPE)} IN ({', '.join(sql_string(t) for t in SETS_VALUE)})"
        keep = f"WHERE {quote(CHANGE_TYPE)} IS NULL OR {quote(CHANGE_TYPE)} <> {sql_string(PREIMAGE)}"
        change_type = f", {quote(CHANGE_TYPE)} AS __sx_ct"
    else:
        tomb = shape.tombstone_columns
        present = "NOT (" + " AND ".join(f"{quote(c)} IS NULL" for c in tomb) + ")" if tomb else "TRUE"
        keep, change_type = "", ""
    sequence = f", {quote(shape.sequence_by)} AS __sx_seq" if shape.sequence_by else ""
    inputs = (
        f"SELECT {', '.join(data)}, {order}, ({present}) AND coalesce(({spec.predicate}), FALSE) AS __sx_pass"
        f"{change_type}{sequence} FROM {source} {keep}"
    )

    key_text = key_text_sql(shape.key)
    checks = [
        (f"{order} IS NULL", raise_error_sql(
            "NULL_ORDER_VALUE", FUNCTION, key=key_text, order_by=shape.order_by)),
        (f"{order} = __sx_prev_order", raise_error_sql(
            "AMBIGUOUS_ORDER", FUNCTION, key=key_text, order_by=shape.order_by,
            value=SqlValue(order))),
    ]
    if shape.has_change_type:
        checks.append((
            f"__sx_ct IS NULL OR __sx_ct NOT IN ({', '.join(sql_string(t) for t in CHANGE_TYPES)})",
            raise_error_sql("UNKNOWN_CHANGE_TYPE", FUNCTION, key=key_text, value=SqlValue("__sx_ct")),
        ))
    if shape.sequence_by:
        checks.append(("__sx_seq IS NULL", raise_error_sql(
            "NULL_SEQUENCE_VALUE", FUNCTION, key=key_text, sequence_by=shape.sequence_by)))
    check = "CASE " + " ".join(f"WHEN {cond} THEN {err}" for cond, err in checks) + " ELSE TRUE END"

    previous = (
        f"LAG(__sx_pass, 1, FALSE) OVER ({window}) AS __sx_old_pass, "
        f"LAG(named_struct({', '.join(f'{sql_string(c)}, {quote(c)}' for c in shape.data_columns)})) "
        f"OVER ({window}) AS __sx_old, "
        f"LEAD({order}) OVER ({window}) IS NULL AS __sx_last"
    )
    prev_order = f"LAG({order}) OVER ({window}) AS __sx_prev_order"
    if shape.sequence_by:
        latest = (f"MAX(__sx_seq) OVER ({window} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
                  " AS __sx_latest")
        checked = (f"SELECT * FROM (SELECT *, {prev_order}, {latest} FROM ({inputs})) "
                   f"WHERE ({check}) AND (__sx_latest IS NULL OR __sx_seq >= __sx_latest)")
        changes = f"SELECT *, {previous} FROM ({checked})"
    else:
        changes = (f"SELECT * FROM (SELECT *, {prev_order}, {previous} FROM ({inputs})) "
                   f"WHERE {check}")

    if spec.emit == "final":
        return f"SELECT {', '.join(data)} FROM ({changes}) WHERE __sx_pass AND __sx_last"
    if spec.emit == "records":
        values = [f"CASE WHEN __sx_pass THEN {quote(c)} END AS {quote(c)}" for c in shape.value_columns]
        kind = f"CASE WHEN __sx_pass THEN {sql_string(UPSERT)} ELSE {sql_string(DELETE)} END"
        columns = [quote(k) for k in shape.key] + values + [f"{kind} AS {quote(CHANGE_TYPE)}", order]
        return f"SELECT {', '.join(columns)} FROM ({changes})"

    # emit => 'changes': slot 0 forwards the old row, slot 1 the new one
    new_row = f"named_struct({', '.join(f'{sql_string(c)}, {quote(c)}' for c in shape.data_columns)})"
    none = "CAST(array() AS ARRAY<INT>)"
    slots = (
        "CASE WHEN __sx_old_pass AND __sx_pass THEN "
        f"(CASE WHEN __sx_old <=> {new_row} THEN {none} ELSE array(0, 1) END) "
        f"WHEN __sx_pass THEN array(1) WHEN __sx_old_pass THEN array(0) ELSE {none} END"
    )
    images = [
        f"CASE WHEN __sx_slot = 0 THEN __sx_old.{quote(c)} ELSE {quote(c)} END AS {quote(c)}"
        for c in shape.data_columns
    ]
    kind = (
        f"CASE WHEN __sx_slot = 0 THEN (CASE WHEN __sx_pass THEN {sql_string(PREIMAGE)} "
        f"ELSE {sql_string(DELETE)} END) ELSE (CASE WHEN __sx_old_pass THEN {sql_string(POSTIMAGE)} "
        f"ELSE {sql_string(INSERT)} END) END AS {quote(CHANGE_TYPE)}"
    )
    return (
        f"SELECT {', '.join(images)}, {kind}, {order} "
        f"FROM ({changes}) LATERAL VIEW explode({slots}) __sx_slots AS __sx_slot"
    )

"""Native SQL that reads one input as a checked stream of changes (DESIGN.md section 1).

Every table function's expansion starts here. The query returned keeps the input's data
columns and its ordering column, adds ``__sx_present`` (does the change set the key's row?)
and any extra columns the caller asks for, drops ``update_preimage`` rows, raises the data
errors (NULL or tied ordering values, unknown change types, NULL sequence values) with
``raise_error``, and with ``sequence_by`` drops stale changes.
"""

from __future__ import annotations

from typing import Sequence

from sqlext.catalog.arguments import SqlValue, key_text_sql, quote, raise_error_sql, sql_string
from sqlext.catalog.changes import CHANGE_TYPE, CHANGE_TYPES, PREIMAGE, SETS_VALUE, ChangeShape


def window(shape: ChangeShape) -> str:
    keys = ", ".join(quote(k) for k in shape.key)
    return f"PARTITION BY {keys} ORDER BY {quote(shape.order_by)}"


def present_sql(shape: ChangeShape) -> str:
    if shape.has_change_type:
        return f"{quote(CHANGE_TYPE)} IN ({', '.join(sql_string(t) for t in SETS_VALUE)})"
    tomb = shape.tombstone_columns
    return "NOT (" + " AND ".join(f"{quote(c)} IS NULL" for c in tomb) + ")" if tomb else "TRUE"


def checked_changes(shape: ChangeShape, source: str, extra: Sequence[str] = (), window_extra: Sequence[str] = (),
                    with_next: bool = True) -> str:
    """The applied changes of ``source``; ``extra`` are ``expr AS name`` over the input row,
    ``window_extra`` are ``expr AS name`` computed over :func:`window` (after stale changes
    are dropped), where ``__sx_present`` can be read. With ``with_next`` each row also
    carries ``__sx_next``, the ordering value of the key's next applied change (NULL for its
    last).

    Checks that need one row run before the shuffle (so ``_change_type`` never travels);
    only the tie check needs a neighbour. It reads ``__sx_next`` where the caller wants it
    (Spark evaluates a window expression once per alias, so asking for the previous change
    as well would cost a window function), else the previous change, so that a caller whose
    window columns all look back keeps one window frame."""
    order = quote(shape.order_by)
    data = [quote(c) for c in shape.data_columns]
    columns = data + [order, f"({present_sql(shape)}) AS __sx_present", *extra]
    fn = shape.function
    key_text = key_text_sql(shape.key)
    row_checks = [
        (f"{order} IS NULL",
         raise_error_sql("NULL_ORDER_VALUE", fn, key=key_text, order_by=shape.order_by)),
    ]
    keep = ""
    if shape.has_change_type:
        ct = quote(CHANGE_TYPE)
        row_checks.append((
            f"{ct} IS NULL OR {ct} NOT IN ({', '.join(sql_string(t) for t in CHANGE_TYPES)})",
            raise_error_sql("UNKNOWN_CHANGE_TYPE", fn, key=key_text, value=SqlValue(ct)),
        ))
        keep = f"({ct} IS NULL OR {ct} <> {sql_string(PREIMAGE)}) AND "
    if shape.sequence_by:
        row_checks.append((f"{quote(shape.sequence_by)} IS NULL", raise_error_sql(
            "NULL_SEQUENCE_VALUE", fn, key=key_text, sequence_by=shape.sequence_by)))
    inputs = f"SELECT {', '.join(columns)} FROM {source} WHERE {keep}{_checks(row_checks)}"
    over = window(shape)
    next_change = [f"LEAD({order}) OVER ({over}) AS __sx_next"] if with_next else []
    neighbour = (f"LEAD({order}) OVER ({over})" if with_next else f"LAG({order}) OVER ({over})") + " AS __sx_tie_with"
    if shape.sequence_by:
        # ties are checked among all changes; __sx_next is the next change that is applied
        seq = quote(shape.sequence_by)
        marks = [neighbour, f"MAX({seq}) OVER ({over} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS __sx_latest"]
        stale = f" AND (__sx_latest IS NULL OR {seq} >= __sx_latest)"
        checked = f"SELECT * FROM (SELECT *, {', '.join(marks)} FROM ({inputs})) WHERE ({_tie(shape, '__sx_tie_with')}){stale}"
        columns = next_change + list(window_extra)
        return f"SELECT *, {', '.join(columns)} FROM ({checked})" if columns else checked
    # one window pass computes the tie check and the caller's window columns together
    if with_next:
        columns, tie_with = next_change + list(window_extra), "__sx_next"
    else:
        columns, tie_with = [neighbour, *window_extra], "__sx_tie_with"
    return f"SELECT * FROM (SELECT *, {', '.join(columns)} FROM ({inputs})) WHERE {_tie(shape, tie_with)}"


def _tie(shape: ChangeShape, neighbour: str) -> str:
    """The AMBIGUOUS_ORDER check of a change against the column holding its neighbour's order."""
    order = quote(shape.order_by)
    return _checks([(f"{order} = {neighbour}", raise_error_sql(
        "AMBIGUOUS_ORDER", shape.function, key=key_text_sql(shape.key), order_by=shape.order_by,
        value=SqlValue(order)))])


def _checks(checks: Sequence[tuple[str, str]]) -> str:
    return "CASE " + " ".join(f"WHEN {cond} THEN {err}" for cond, err in checks) + " ELSE TRUE END"


def struct_sql(columns: Sequence[str]) -> str:
    """``named_struct`` of ``columns``, each read from the column of that name."""
    return "named_struct(" + ", ".join(f"{sql_string(c)}, {quote(c)}" for c in columns) + ")"


def minimal_changes_sql(query: str, columns: Sequence[str], order: str) -> str:
    """The minimal change feed of a result whose rows ``query`` gives as ``__sx_before`` and
    ``__sx_after`` (structs of ``columns``; NULL where the key has no row), one query row per
    key and ordering value: nothing, an insert, a delete, or a pre/post pair when the rows
    differ."""
    return minimal_changes_from_parts_sql(
        query,
        [(c, f"__sx_before.{quote(c)}", f"__sx_after.{quote(c)}") for c in columns],
        before_present="__sx_before IS NOT NULL",
        after_present="__sx_after IS NOT NULL",
        same="__sx_before <=> __sx_after",
        order=order,
    )


def minimal_changes_from_parts_sql(query: str, columns: Sequence[tuple[str, str, str]], before_present: str,
                                   after_present: str, same: str, order: str) -> str:
    """:func:`minimal_changes_sql` for a result row the query does not build as one struct:
    ``columns`` are (name, SQL of its value before, SQL of its value after); the three
    conditions say whether the key has a row before, after, and whether the rows are equal
    (only read when both are there). Slot 0 forwards the old row, slot 1 the new one."""
    from sqlext.catalog.changes import DELETE, INSERT, POSTIMAGE, PREIMAGE

    none = "CAST(array() AS ARRAY<INT>)"
    slots = (
        f"CASE WHEN __sx_had AND __sx_has THEN (CASE WHEN {same} THEN {none} ELSE array(0, 1) END) "
        f"WHEN __sx_has THEN array(1) WHEN __sx_had THEN array(0) ELSE {none} END"
    )
    images = [
        f"CASE WHEN __sx_slot = 0 THEN {before} ELSE {after} END AS {quote(name)}"
        for name, before, after in columns
    ]
    kind = (
        f"CASE WHEN __sx_slot = 0 THEN (CASE WHEN __sx_has THEN {sql_string(PREIMAGE)} "
        f"ELSE {sql_string(DELETE)} END) ELSE (CASE WHEN __sx_had "
        f"THEN {sql_string(POSTIMAGE)} ELSE {sql_string(INSERT)} END) END AS {quote(CHANGE_TYPE)}"
    )
    return (
        f"SELECT {', '.join(images)}, {kind}, {quote(order)} "
        f"FROM (SELECT *, {before_present} AS __sx_had, {after_present} AS __sx_has FROM ({query})) "
        f"LATERAL VIEW explode({slots}) __sx_slots AS __sx_slot"
    )

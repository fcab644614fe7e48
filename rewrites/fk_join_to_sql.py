"""Rule: expand ``FK_JOIN(...)`` into native Spark SQL (window functions and equi-joins).

How the plan reproduces the sequential replay of :mod:`udfs.fk_join`:

* Each input becomes a checked change stream (:mod:`rewrites.change_stream`), and each
  change opens an *interval* of its key's row, ``[version, next version)``.
* A left change finds the right row it joins by an as-of join: the right interval of its
  foreign key that covers its version (right changes at the same version come first).
* A right change finds the left rows subscribed to it by an interval join: the left
  intervals whose foreign key is that right key and whose span covers the change. This is
  the seed's prefix scan; as an equi-join on the key with a range condition it is split
  across tasks by Spark's skew handling when one right row has very many subscribers,
  instead of landing in one task or on the driver.
* ``changes``: every left change and every right-induced change gives the result row of its
  left key *after* that version; ``LAG`` over the left key gives the row before, and the
  minimal diff of the two is forwarded (at most one change per key and version).
* ``records``: the same two kinds of events, each forwarded by the seed's rules.
* ``final``: a plain join of the final left and right tables.

No stale right value can reach the output: every result row is computed from the right
interval that covers its own version, never from a value remembered elsewhere; this is what
the seed's subscription hash guarantees in a parallel execution.
"""

from __future__ import annotations

from sqlglot import exp

from rewrites.change_stream import checked_changes, minimal_changes_sql, struct_sql, window
from rewrites.notes import Notes
from rewrites.relations import Relations, standalone_query
from rewrites.table_functions import (
    find_calls, partitioning_defaults, quote, read_call, relation_source, replace_call, sql_string,
)
from sqlext.errors import SqlextError
from udfs.changes import CHANGE_TYPE, DELETE, UPSERT
from udfs.fk_join import ARGUMENTS, FUNCTION, FkJoinSpec, check_foreign_key_type, fk_join_spec

RULE = "fk_join_to_sql"


def fk_join_to_sql(
    expression: exp.Expression, relations: Relations | None = None, notes: Notes | None = None
) -> exp.Expression:
    notes = notes if notes is not None else Notes()
    for table in find_calls(expression, FUNCTION):
        call = read_call(table, FUNCTION, ARGUMENTS)
        for side in ("left", "right"):
            if side not in call.tables:
                if side in call.literals:
                    raise SqlextError(
                        "INVALID_ARGUMENT_TYPE", function=FUNCTION, argument=side, expected="a table argument",
                        value=repr(call.literals[side]), fix=f"Write {side} => TABLE(my_changes).",
                    )
                raise SqlextError("MISSING_ARGUMENT", function=FUNCTION, argument=side,
                                  example=f"TABLE({side}_changes)")
        for name in call.tables:
            if name not in ("left", "right"):
                raise SqlextError(
                    "INVALID_ARGUMENT_TYPE", function=FUNCTION, argument=name, expected="a constant string",
                    value="a table", fix=f"Write {name} => '...'.",
                )
        partitioning_defaults(FUNCTION, call.tables["left"], call.literals, "left_key")
        partitioning_defaults(FUNCTION, call.tables["right"], call.literals, "right_key")
        queries = {side: standalone_query(call.tables[side]) for side in ("left", "right")}
        columns = {
            side: relations.columns(queries[side], call.tables[side].this) if relations is not None else None
            for side in ("left", "right")
        }
        if columns["left"] is None or columns["right"] is None:
            notes.skip(RULE, f"{FUNCTION}: the inputs' columns are unknown here (FK_JOIN runs only "
                             "through sqlext.sql or the sqlext CLI, which ask the session)")
            continue
        spec = fk_join_spec(call.literals, columns["left"], columns["right"])
        if relations is not None:
            check_foreign_key_type(
                spec,
                relations.expression_type(queries["left"], spec.foreign_key),
                relations.expression_type(queries["right"], quote(spec.right_key)),
            )
        sources = {side: relation_source(call.tables[side]) for side in ("left", "right")}
        replace_call(table, native_sql(spec, sources["left"], sources["right"]))
        notes.fire(RULE, f"{FUNCTION} ({spec.join_type}, emit => '{spec.emit}') expanded into "
                         "native window functions and joins")
    return expression


def native_sql(spec: FkJoinSpec, left_source: str, right_source: str) -> str:
    left, right = spec.left, spec.right
    order = quote(left.order_by)
    rkey = quote(spec.right_key)
    keys = ", ".join(quote(k) for k in left.key)
    right_names = spec.right_names
    stream_marks = [
        "LEAD({o}) OVER ({w}) AS __sx_next",
        "LAG(__sx_present, 1, FALSE) OVER ({w}) AS __sx_had_row",
        "LEAD({o}) OVER ({w}) IS NULL AS __sx_last",
    ]
    left_changes = checked_changes(
        left, left_source, extra=[f"({spec.foreign_key}) AS __sx_fk"],
        window_extra=[m.format(o=order, w=window(left)) for m in stream_marks],
    )
    right_changes = checked_changes(
        right, right_source, window_extra=[m.format(o=order, w=window(right)) for m in stream_marks],
    )
    left_row = struct_sql(left.data_columns)
    right_row = struct_sql([right_names[c] for c in right.data_columns],
                           {right_names[c]: quote(c) for c in right.data_columns})
    ctes = [
        f"__sx_lc AS ({left_changes})",
        f"__sx_rc AS (SELECT *, CASE WHEN __sx_present THEN {right_row} END AS __sx_rrow FROM ({right_changes}))",
    ]
    result = _result_sql(spec)

    if spec.emit == "final":
        join = "JOIN" if spec.join_type == "inner" else "LEFT JOIN"
        return (
            f"WITH {', '.join(ctes)} SELECT __sx_res.* FROM (SELECT {result} AS __sx_res FROM ("
            f"SELECT __sx_l.__sx_lrow, __sx_r.__sx_rrow "
            f"FROM (SELECT *, {left_row} AS __sx_lrow FROM __sx_lc WHERE __sx_last AND __sx_present) __sx_l "
            f"{join} (SELECT * FROM __sx_rc WHERE __sx_last AND __sx_present) __sx_r "
            f"ON __sx_l.__sx_fk = __sx_r.{rkey}))"
        )

    # One join finds, for every left change, the right intervals of its foreign key that
    # overlap the left row's own interval [from, to): the one covering `from` gives the right
    # row the change joins (as-of); each one starting inside is a right change reaching this
    # subscribed row (the prefix scan). A virtual interval before a right key's first change
    # (right row absent) makes "covering `from`" always exist once the key has any change.
    # In records mode a right change at the left row's next version still reaches it, since
    # the right change is forwarded first.
    upper = "<" if spec.emit == "changes" else "<="
    right_intervals = (
        f"SELECT {rkey} AS __sx_rk, CASE WHEN __sx_slot = 0 THEN NULL ELSE {order} END AS __sx_rfrom, "
        f"CASE WHEN __sx_slot = 0 THEN {order} ELSE __sx_next END AS __sx_rto, "
        f"CASE WHEN __sx_slot = 0 THEN NULL ELSE __sx_rrow END AS __sx_rrow, "
        f"__sx_slot = 1 AND (__sx_present OR __sx_had_row) AS __sx_reaches "
        f"FROM __sx_rc LATERAL VIEW explode(CASE WHEN __sx_prev_order IS NULL THEN array(0, 1) ELSE array(1) END) "
        f"__sx_slots AS __sx_slot"
    )
    matched = (
        f"SELECT __sx_l.*, __sx_ri.* FROM "
        f"(SELECT {keys}, {order} AS __sx_from, __sx_next AS __sx_to, __sx_had_row, __sx_fk, "
        f"__sx_present AND __sx_fk IS NOT NULL AS __sx_subscribed, "
        f"CASE WHEN __sx_present THEN {left_row} END AS __sx_lrow FROM __sx_lc) __sx_l "
        f"LEFT JOIN ({right_intervals}) __sx_ri "
        f"ON __sx_l.__sx_subscribed AND __sx_l.__sx_fk = __sx_ri.__sx_rk "
        f"AND (__sx_ri.__sx_rfrom IS NULL OR __sx_l.__sx_to IS NULL OR __sx_ri.__sx_rfrom {upper} __sx_l.__sx_to) "
        f"AND (__sx_ri.__sx_rto IS NULL OR __sx_l.__sx_from < __sx_ri.__sx_rto)"
    )
    is_left = "TRUE" if spec.join_type == "left" else "FALSE"
    asof = "__sx_rk IS NULL OR __sx_rfrom IS NULL OR __sx_rfrom <= __sx_from"
    # records: an as-of event forwards the joined or padded row, or a tombstone where the key
    # had a row (PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE, left deletes); a right change
    # forwards to every row it reaches
    emits = (
        f"CASE WHEN NOT ({asof}) THEN (CASE WHEN __sx_reaches THEN 1 END) "
        f"WHEN __sx_lrow IS NOT NULL AND (__sx_rrow IS NOT NULL OR {is_left}) THEN 1 "
        f"WHEN __sx_had_row THEN 1 END"
    )
    events = (
        f"SELECT {keys}, CASE WHEN {asof} THEN __sx_from ELSE __sx_rfrom END AS __sx_v, __sx_lrow, __sx_rrow, "
        f"{emits} AS __sx_emit FROM ({matched})"
    )
    if spec.emit == "changes":
        diff = (
            f"SELECT *, LAG(__sx_after) OVER (PARTITION BY {keys} ORDER BY __sx_v) AS __sx_before, "
            f"__sx_v AS {order} FROM (SELECT *, {result} AS __sx_after FROM ({events}))"
        )
        return f"WITH {', '.join(ctes)} " + minimal_changes_sql(diff, spec.data_columns, left.order_by)

    columns = [
        quote(c) if c in left.key else f"__sx_res.{quote(c)} AS {quote(c)}" for c in spec.data_columns
    ]
    kind = f"CASE WHEN __sx_res IS NULL THEN {sql_string(DELETE)} ELSE {sql_string(UPSERT)} END"
    return (
        f"WITH {', '.join(ctes)} SELECT {', '.join(columns)}, {kind} AS {quote(CHANGE_TYPE)}, "
        f"__sx_v AS {order} FROM (SELECT *, {result} AS __sx_res FROM ({events})) WHERE __sx_emit IS NOT NULL"
    )


def _result_sql(spec: FkJoinSpec) -> str:
    """The result row for ``__sx_lrow`` and ``__sx_rrow`` (either NULL): NULL where the
    join has no row for the key."""
    fields = [f"{sql_string(c)}, __sx_lrow.{quote(c)}" for c in spec.left.data_columns]
    fields += [f"{sql_string(n)}, __sx_rrow.{quote(n)}" for n in spec.right_names.values()]
    row = f"named_struct({', '.join(fields)})"
    missing = "__sx_lrow IS NULL" if spec.join_type == "left" else "__sx_lrow IS NULL OR __sx_rrow IS NULL"
    return f"CASE WHEN {missing} THEN NULL ELSE {row} END"

"""Rule: expand ``FK_JOIN(...)`` into native Spark SQL (window functions and one equi-join).

How the plan reproduces the sequential replay of :mod:`udfs.fk_join`:

* Each input becomes a checked change stream (:mod:`rewrites.change_stream`); each change
  opens an *interval* of its key's row, ``[version, next version)``.
* Each right key's intervals are gathered into one sorted *history* (a small array: one
  element per change of that key, with the row before and after it).
* Each left change is joined, on its foreign key, with that history: one equi-join, no range
  condition, so a right key with a million subscribed left rows is a skewed partition of an
  ordinary join (which Spark splits, or avoids by broadcasting the histories), never a
  single task or the driver.
* Inside the joined row, higher-order functions pick the right interval covering the left
  change's version (the as-of right row; right changes at the same version come first) and
  the right changes that fall inside the left row's interval (the seed's prefix scan: each
  one reaches this subscribed row).
* ``changes``: each left change yields its result row after the change, and each right
  change inside its interval a (before, after) pair; the row before a left change is the
  result at the end of the key's previous interval, one ``LAG`` away in the left order. The
  minimal diff is forwarded (at most one change per key and version).
* ``records``: the same events, each forwarded by the seed's rules.
* ``final``: a plain join of the final left and right tables.

No stale right value can reach the output: every result row is computed from the right
interval that covers its own version, never from a value remembered elsewhere; this is what
the seed's subscription hash guarantees in a parallel execution.
"""

from __future__ import annotations

from sqlglot import exp

from rewrites.change_stream import checked_changes, minimal_changes_from_parts_sql, struct_sql, window
from rewrites.notes import Notes
from rewrites.relations import Relations
from rewrites.table_functions import find_calls, quote, read_call, replace_call, sql_string, table_inputs
from udfs.changes import CHANGE_TYPE, DELETE, UPSERT
from udfs.fk_join import ARGUMENTS, FUNCTION, FkJoinSpec, check_foreign_key_type, fk_join_spec

RULE = "fk_join_to_sql"

# Right inputs up to this estimated size have their intervals broadcast: the left change
# stream then never moves by foreign key.
BROADCAST_RIGHT_BYTES = 256 * 1024 * 1024


def fk_join_to_sql(
    expression: exp.Expression, relations: Relations | None = None, notes: Notes | None = None
) -> exp.Expression:
    notes = notes if notes is not None else Notes()
    for table in find_calls(expression, FUNCTION):
        call = read_call(table, FUNCTION, ARGUMENTS)
        inputs = table_inputs(call, {"left": "left_key", "right": "right_key"}, relations)
        if inputs["left"].columns is None or inputs["right"].columns is None:
            notes.skip(RULE, f"{FUNCTION}: the inputs' columns are unknown here (FK_JOIN runs only "
                             "through sqlext.sql or the sqlext CLI, which ask the session)")
            continue
        left, right = inputs["left"], inputs["right"]
        spec = fk_join_spec(call.literals, left.columns, right.columns)
        check_foreign_key_type(
            spec,
            relations.expression_type(left.query, spec.foreign_key),
            relations.expression_type(right.query, quote(spec.right_key)),
        )
        right_size = relations.size_in_bytes(right.query)
        broadcast = right_size is not None and right_size <= BROADCAST_RIGHT_BYTES
        replace_call(table, native_sql(spec, left.source, right.source, broadcast))
        notes.fire(RULE, f"{FUNCTION} ({spec.join_type}, emit => '{spec.emit}') expanded into "
                         "native window functions and joins")
    return expression


def native_sql(spec: FkJoinSpec, left_source: str, right_source: str, broadcast: bool = False) -> str:
    left, right = spec.left, spec.right
    order = quote(left.order_by)
    rkey = quote(spec.right_key)
    keys = ", ".join(quote(k) for k in left.key)
    right_names = spec.right_names
    marks = [
        "LEAD({o}) OVER ({w}) AS __sx_next",
        "LAG(__sx_present, 1, FALSE) OVER ({w}) AS __sx_had_row",
        "LEAD({o}) OVER ({w}) IS NULL AS __sx_last",
    ]
    left_row = struct_sql(left.data_columns)
    right_row = struct_sql([right_names[c] for c in right.data_columns],
                           {right_names[c]: quote(c) for c in right.data_columns})
    # rows and foreign keys are built after the shuffle, from the columns it carries anyway
    left_checked = checked_changes(left, left_source, window_extra=[m.format(o=order, w=window(left)) for m in marks] + [
        f"{_previous_row(left.data_columns, window(left))} AS __sx_prev_lrow",
        f"LAG(CASE WHEN __sx_present THEN ({spec.foreign_key}) END) OVER ({window(left)}) AS __sx_prev_fk",
    ])
    left_changes = (f"SELECT *, ({spec.foreign_key}) AS __sx_fk, "
                    f"CASE WHEN __sx_present THEN {left_row} END AS __sx_lrow FROM ({left_checked})")
    right_checked = checked_changes(right, right_source, window_extra=[m.format(o=order, w=window(right)) for m in marks] + [
        f"{_previous_row(right.data_columns, window(right), right_names)} AS __sx_rprev",
    ])
    right_changes = f"SELECT *, CASE WHEN __sx_present THEN {right_row} END AS __sx_rrow FROM ({right_checked})"
    # Right intervals [from, to) of each right key's row (r; p is the row before), plus a
    # virtual interval before the key's first change, where the right row is absent, so that
    # some interval covers every version once a key has any change. from NULL = the start.
    intervals = (
        f"SELECT {rkey} AS __sx_rk, CASE WHEN __sx_slot = 0 THEN NULL ELSE {order} END AS __sx_rfrom, "
        f"CASE WHEN __sx_slot = 0 THEN {order} ELSE __sx_next END AS __sx_rto, "
        f"CASE WHEN __sx_slot = 0 THEN NULL ELSE __sx_rrow END AS __sx_r, "
        f"CASE WHEN __sx_slot = 0 THEN NULL ELSE __sx_rprev END AS __sx_p, "
        f"__sx_slot = 1 AND (__sx_present OR __sx_had_row) AS __sx_reach "
        f"FROM __sx_rc LATERAL VIEW explode(CASE WHEN __sx_prev_order IS NULL THEN array(0, 1) ELSE array(1) END) "
        f"__sx_slots AS __sx_slot"
    )
    ctes = [f"__sx_lc AS ({left_changes})", f"__sx_rc AS ({right_changes})", f"__sx_ri AS ({intervals})"]
    result = _result_sql(spec)

    if spec.emit == "final":
        join = "JOIN" if spec.join_type == "inner" else "LEFT JOIN"
        return (
            f"WITH {', '.join(ctes[:2])} SELECT __sx_res.* FROM (SELECT {result('__sx_l.__sx_lrow', '__sx_r.__sx_rrow')} "
            f"AS __sx_res FROM (SELECT * FROM __sx_lc WHERE __sx_last AND __sx_present) __sx_l "
            f"{join} (SELECT * FROM __sx_rc WHERE __sx_last AND __sx_present) __sx_r "
            f"ON __sx_l.__sx_fk = __sx_r.{rkey})"
        )

    hint = "/*+ BROADCAST(__sx_ri) */ " if broadcast else ""
    subscribed = "__sx_lrow IS NOT NULL AND __sx_fk IS NOT NULL"
    upper = "<" if spec.emit == "changes" else "<="
    # (records skip the delete of an absent right row; in changes mode it changes nothing,
    # and leaving the test out lets both joins share one broadcast of the intervals)
    reach = "" if spec.emit == "changes" else " AND __sx_ri.__sx_reach"
    # One equi-join on the foreign key (with a range condition) finds, for each left change,
    # the right interval covering its version (the as-of right row; right changes at the
    # same version come first) and each right change inside the left row's own interval
    # [version, next version): the seed's prefix scan, reaching this subscribed row. In
    # records mode a right change at the next left version still reaches the row, being
    # forwarded first. A right key with very many subscribers is a skewed partition of an
    # ordinary join (split by Spark, or avoided by broadcasting the right intervals).
    matched = (
        f"SELECT {hint}__sx_l.*, __sx_ri.* FROM (SELECT *, {order} AS __sx_from FROM {{left}}) __sx_l "
        f"LEFT JOIN __sx_ri ON (CASE WHEN {subscribed} THEN __sx_l.__sx_fk END) = __sx_ri.__sx_rk "
        f"AND (__sx_ri.__sx_rto IS NULL OR __sx_l.__sx_from < __sx_ri.__sx_rto) "
        f"AND (__sx_ri.__sx_rfrom IS NULL OR __sx_ri.__sx_rfrom <= __sx_l.__sx_from "
        f"OR ((__sx_l.__sx_next IS NULL OR __sx_ri.__sx_rfrom {upper} __sx_l.__sx_next){reach}))"
    )
    asof = "__sx_rk IS NULL OR __sx_rfrom IS NULL OR __sx_rfrom <= __sx_from"

    if spec.emit == "changes":
        # the row before a left change: the previous left row with the right row in effect
        # just before this version, at the previous foreign key: the interval covering this
        # version gives its row, or the row before it if the right key changed at this
        # version. When the foreign key did not change, the as-of interval joined below is
        # that interval, and this lookup is skipped.
        same_fk = "__sx_prev_fk <=> __sx_fk AND __sx_lrow IS NOT NULL"
        before = (
            f"SELECT {hint}__sx_lc.*, CASE WHEN __sx_ri.__sx_rfrom = __sx_lc.{order} THEN __sx_ri.__sx_p "
            f"ELSE __sx_ri.__sx_r END AS __sx_rbefore FROM __sx_lc LEFT JOIN __sx_ri "
            # a NULL probe key for the rows that skip the lookup: no hash probe, no candidate
            f"ON (CASE WHEN NOT ({same_fk}) THEN __sx_lc.__sx_prev_fk END) = __sx_ri.__sx_rk "
            f"AND (__sx_ri.__sx_rfrom IS NULL OR __sx_ri.__sx_rfrom <= __sx_lc.{order}) "
            f"AND (__sx_ri.__sx_rto IS NULL OR __sx_lc.{order} < __sx_ri.__sx_rto)"
        )
        # the result rows are compared and forwarded part by part (left row, right row), so
        # no combined row is built for the ten-odd million events of a large feed
        events = (
            f"SELECT {keys}, CASE WHEN {asof} THEN __sx_from ELSE __sx_rfrom END AS {order}, "
            f"CASE WHEN {asof} THEN __sx_prev_lrow ELSE __sx_lrow END AS __sx_bl, "
            f"CASE WHEN NOT ({asof}) THEN __sx_p WHEN NOT ({same_fk}) THEN __sx_rbefore "
            f"WHEN __sx_rfrom = __sx_from THEN __sx_p ELSE __sx_r END AS __sx_br, "
            f"__sx_lrow AS __sx_al, __sx_r AS __sx_ar "
            f"FROM ({matched.format(left=f'({before})')})"
        )
        is_left = spec.join_type == "left"
        parts = [(c, f"__sx_bl.{quote(c)}", f"__sx_al.{quote(c)}") for c in left.data_columns]
        parts += [(n, f"__sx_br.{quote(n)}", f"__sx_ar.{quote(n)}") for n in right_names.values()]
        return f"WITH {', '.join(ctes)} " + minimal_changes_from_parts_sql(
            events, parts,
            before_present="__sx_bl IS NOT NULL" + ("" if is_left else " AND __sx_br IS NOT NULL"),
            after_present="__sx_al IS NOT NULL" + ("" if is_left else " AND __sx_ar IS NOT NULL"),
            same="__sx_bl <=> __sx_al AND __sx_br <=> __sx_ar",
            order=left.order_by,
        )

    # emit => 'records': a left change forwards the joined row, the padded row (left join) or
    # a tombstone where the key had a row (PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE, deletes);
    # each right change reaching a subscribed row forwards it
    is_left = "TRUE" if spec.join_type == "left" else "FALSE"
    emits = (f"NOT ({asof}) OR (__sx_lrow IS NOT NULL AND (__sx_r IS NOT NULL OR {is_left})) "
             f"OR __sx_had_row")
    columns = [
        quote(c) if c in left.key else f"__sx_res.{quote(c)} AS {quote(c)}" for c in spec.data_columns
    ]
    kind = f"CASE WHEN __sx_res IS NULL THEN {sql_string(DELETE)} ELSE {sql_string(UPSERT)} END"
    return (
        f"WITH {', '.join(ctes)} SELECT {', '.join(columns)}, {kind} AS {quote(CHANGE_TYPE)}, {order} FROM ("
        f"SELECT {keys}, CASE WHEN {asof} THEN __sx_from ELSE __sx_rfrom END AS {order}, "
        f"{result('__sx_lrow', '__sx_r')} AS __sx_res FROM ({matched.format(left='__sx_lc')}) WHERE {emits})"
    )


def _previous_row(columns, over: str, names: dict | None = None) -> str:
    """The previous change's row as a struct (NULL if it removed the row), built from LAGs of
    single columns so that Spark does not build and shuffle a struct for every change."""
    names = names or {}
    fields = ", ".join(f"{sql_string(names.get(c, c))}, LAG({quote(c)}) OVER ({over})" for c in columns)
    return f"CASE WHEN LAG(__sx_present) OVER ({over}) THEN named_struct({fields}) END"


def _result_sql(spec: FkJoinSpec):
    """``result(lrow, rrow)``: SQL of the result row for a left row struct and a right row
    struct (either may be NULL); NULL where the join has no row for the key."""
    def result(lrow: str, rrow: str) -> str:
        fields = [f"{sql_string(c)}, {lrow}.{quote(c)}" for c in spec.left.data_columns]
        fields += [f"{sql_string(n)}, {rrow}.{quote(n)}" for n in spec.right_names.values()]
        row = f"named_struct({', '.join(fields)})"
        missing = f"{lrow} IS NULL" if spec.join_type == "left" else f"{lrow} IS NULL OR {rrow} IS NULL"
        return f"CASE WHEN {missing} THEN NULL ELSE {row} END"

    return result

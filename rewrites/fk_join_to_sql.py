"""Rule: expand ``FK_JOIN(...)`` into native Spark SQL (window functions and equi-joins).

How the plan reproduces the sequential replay of :mod:`sqlext.catalog.fk_join`:

* Each input becomes a checked change stream (:mod:`sqlext.rewrites.change_stream`); one window pass
  per input gives each change the key's next change and the row before it.
* Each right change opens an *interval* of its key's row, ``[version, next version)``,
  carrying the row and the row before it; a virtual interval before the key's first change
  holds the absent row.
* Each left change is joined, on its foreign key, with the right intervals that overlap its
  own interval ``[version, next version)``: one equi-join with a range condition. The
  interval covering the left change's version is its as-of right row (right changes at the
  same version come first); every later one is a right change reaching this subscribed row
  (the seed's prefix scan). The intervals are broadcast when Spark estimates the right input
  as small, so a right key with a million subscribed left rows is never a single task or the
  driver; otherwise it is a skewed partition of an ordinary join, which Spark splits.
* ``changes``: each event (a left change, or a right change reaching the row) yields the
  result row before and after it, and the minimal diff is forwarded. The row before a left
  change whose foreign key changed needs the right row at the previous key, found by a
  second probe of the same intervals.
* ``records``: the same events, each forwarded by the seed's rules.
* ``final``: a plain join of the final left and right tables.

Rows travel as plain columns with a presence flag (see :class:`_Columns`), never as structs.

No stale right value can reach the output: every result row is computed from the right
interval that covers its own version, never from a value remembered elsewhere; this is what
the seed's subscription hash guarantees in a parallel execution.
"""

from __future__ import annotations

from sqlglot import exp

from sqlext.rewrites.change_stream import checked_changes, minimal_changes_from_parts_sql, window
from sqlext.rewrites.notes import Notes
from sqlext.rewrites.relations import Relations, table_inputs
from sqlext.catalog.arguments import find_calls, quote, read_call, replace_call, sql_string
from sqlext.catalog.changes import CHANGE_TYPE, DELETE, UPSERT
from sqlext.catalog.expressions import over_columns
from sqlext.catalog.fk_join import ARGUMENTS, FUNCTION, FkJoinSpec, check_foreign_key_type, fk_join_spec

RULE = "fk_join_to_sql"

# does the joined interval hold a right row (no interval joined: no)
RIGHT_HAS = "coalesce(__sx_rhas, FALSE)"

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
    cols = _Columns(spec)
    # rows travel as plain columns with a presence flag, never as structs: a struct is built,
    # copied and compared whole for every change, which costs more than the columns it holds
    left_checked = checked_changes(left, left_source, window_extra=[
        f"LAG(__sx_present, 1, FALSE) OVER ({window(left)}) AS __sx_had_row",
        *(f"LAG({quote(c)}) OVER ({window(left)}) AS {cols.left_prev[c]}" for c in left.value_columns),
    ])
    # the previous row's foreign key is the expression over the previous row's columns
    prev_fk = over_columns(spec.foreign_key, {c: cols.left_prev[c] for c in left.value_columns})
    left_changes = (f"SELECT *, ({spec.foreign_key}) AS __sx_fk, "
                    f"CASE WHEN __sx_had_row THEN ({prev_fk}) END AS __sx_prev_fk FROM ({left_checked})")
    right_changes = checked_changes(right, right_source, window_extra=[
        # NULL before the key's first change
        f"LAG(__sx_present) OVER ({window(right)}) AS __sx_had_row",
        *(f"LAG({quote(c)}) OVER ({window(right)}) AS {cols.q[c]}" for c in right.value_columns),
    ])
    # Right intervals [from, to) of each right key's row (r, present if __sx_rhas; q is the row
    # before it, present if __sx_qhas), plus a virtual interval before the key's first change,
    # where the right row is absent, so that some interval covers every version once a key has
    # any change. from NULL = the start.
    intervals = (
        f"SELECT {rkey} AS __sx_rk, CASE WHEN __sx_slot = 0 THEN NULL ELSE {order} END AS __sx_rfrom, "
        f"CASE WHEN __sx_slot = 0 THEN {order} ELSE __sx_next END AS __sx_rto, "
        f"__sx_slot = 1 AND __sx_present AS __sx_rhas, __sx_slot = 1 AND coalesce(__sx_had_row, FALSE) AS __sx_qhas, "
        + "".join(f"{quote(c)} AS {cols.r[c]}, {cols.q[c]}, " for c in right.value_columns)
        + f"__sx_slot = 1 AND (__sx_present OR coalesce(__sx_had_row, FALSE)) AS __sx_reach "
        f"FROM __sx_rc LATERAL VIEW explode(CASE WHEN __sx_had_row IS NULL THEN array(0, 1) ELSE array(1) END) "
        f"__sx_slots AS __sx_slot"
    )
    ctes = [f"__sx_lc AS ({left_changes})", f"__sx_rc AS ({right_changes})", f"__sx_ri AS ({intervals})"]

    if spec.emit == "final":
        join = "JOIN" if spec.join_type == "inner" else "LEFT JOIN"
        outputs = [f"__sx_l.{quote(c)} AS {quote(c)}" for c in left.data_columns]
        outputs += [f"__sx_r.{quote(c)} AS {quote(n)}" for c, n in spec.right_names.items()]
        return (
            f"WITH {', '.join(ctes[:2])} SELECT {', '.join(outputs)} "
            f"FROM (SELECT * FROM __sx_lc WHERE __sx_next IS NULL AND __sx_present) __sx_l "
            f"{join} (SELECT * FROM __sx_rc WHERE __sx_next IS NULL AND __sx_present) __sx_r "
            f"ON __sx_l.__sx_fk = __sx_r.{rkey}"
        )

    hint = "/*+ BROADCAST(__sx_ri) */ " if broadcast else ""
    subscribed = "__sx_present AND __sx_fk IS NOT NULL"
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
        f"SELECT {hint}__sx_l.*, __sx_ri.*, "
        f"__sx_ri.__sx_rk IS NULL OR __sx_ri.__sx_rfrom IS NULL OR __sx_ri.__sx_rfrom <= __sx_l.__sx_from AS __sx_asof "
        f"FROM (SELECT *, {order} AS __sx_from FROM {{left}}) __sx_l "
        f"LEFT JOIN __sx_ri ON (CASE WHEN {subscribed} THEN __sx_l.__sx_fk END) = __sx_ri.__sx_rk "
        f"AND (__sx_ri.__sx_rto IS NULL OR __sx_l.__sx_from < __sx_ri.__sx_rto) "
        f"AND (__sx_ri.__sx_rfrom IS NULL OR __sx_ri.__sx_rfrom <= __sx_l.__sx_from "
        f"OR ((__sx_l.__sx_next IS NULL OR __sx_ri.__sx_rfrom {upper} __sx_l.__sx_next){reach}))"
    )
    # an event's version: the left change's own, or the right change's that reached the row
    version = f"CASE WHEN __sx_asof THEN __sx_from ELSE __sx_rfrom END AS {order}"
    is_left = spec.join_type == "left"

    if spec.emit == "changes":
        return f"WITH {', '.join(ctes)} " + _changes_sql(spec, cols, matched, version, hint)

    # emit => 'records': a left change forwards the joined row, the padded row (left join) or
    # a tombstone where the key had a row (PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE, deletes);
    # each right change reaching a subscribed row forwards it
    emits = f"NOT __sx_asof OR (__sx_present AND ({RIGHT_HAS} OR {str(is_left).upper()})) OR __sx_had_row"
    has_row = "__sx_present" + ("" if is_left else f" AND {RIGHT_HAS}")
    columns = [quote(c) if c in left.key else f"CASE WHEN __sx_res THEN {quote(c)} END AS {quote(c)}"
               for c in left.data_columns]
    columns += [f"CASE WHEN __sx_res AND {RIGHT_HAS} THEN {cols.r[c]} END AS {quote(n)}"
                for c, n in spec.right_names.items()]
    kind = f"CASE WHEN __sx_res THEN {sql_string(UPSERT)} ELSE {sql_string(DELETE)} END"
    return (
        f"WITH {', '.join(ctes)} SELECT {', '.join(columns)}, {kind} AS {quote(CHANGE_TYPE)}, {order} FROM ("
        f"SELECT {', '.join(quote(c) for c in left.data_columns)}, "
        + "".join(f"{cols.r[c]}, " for c in spec.right.data_columns)
        + f"__sx_rhas, {version}, {has_row} AS __sx_res FROM ({matched.format(left='__sx_lc')}) WHERE {emits})"
    )


def _changes_sql(spec: FkJoinSpec, cols: "_Columns", matched: str, version: str, hint: str) -> str:
    """emit => 'changes': for each matched row, the result row before and after its event,
    forwarded as the minimal change."""
    left = spec.left
    order = quote(left.order_by)
    # The row before a left change is the previous left row with the right row in effect just
    # before this version at the previous foreign key: the interval covering this version
    # gives it, or the row before that interval if the right key changed at this version.
    # When the foreign key did not change, the as-of interval joined below is that interval,
    # and this lookup is skipped (a NULL probe key: no hash probe, no candidate).
    same_fk = "__sx_prev_fk <=> __sx_fk AND __sx_present"
    at_this = f"__sx_ri.__sx_rfrom = __sx_lc.{order}"
    before = (
        f"SELECT {hint}__sx_lc.*, "
        f"CASE WHEN {at_this} THEN __sx_ri.__sx_qhas ELSE __sx_ri.__sx_rhas END AS __sx_bhas, "
        + "".join(f"__sx_ri.__sx_rk AS {cols.b[c]}, " if c in spec.right.key else
                  f"CASE WHEN {at_this} THEN __sx_ri.{cols.q[c]} ELSE __sx_ri.{cols.r[c]} END AS {cols.b[c]}, "
                  for c in spec.right.data_columns)
        + f"{same_fk} AS __sx_same_fk FROM __sx_lc LEFT JOIN __sx_ri "
        f"ON (CASE WHEN NOT ({same_fk}) THEN __sx_lc.__sx_prev_fk END) = __sx_ri.__sx_rk "
        f"AND (__sx_ri.__sx_rfrom IS NULL OR __sx_ri.__sx_rfrom <= __sx_lc.{order}) "
        f"AND (__sx_ri.__sx_rto IS NULL OR __sx_lc.{order} < __sx_ri.__sx_rto)"
    )
    # Where the right row before the event comes from: 0 the row before the interval (the
    # event is a right change, or the right key changed at this version), 1 the lookup above
    # (the foreign key changed), 2 the interval's own row.
    source = ("CASE WHEN NOT __sx_asof OR __sx_same_fk AND __sx_rfrom = __sx_from THEN 0 "
              "WHEN NOT __sx_same_fk THEN 1 ELSE 2 END")
    picks = {0: ("__sx_qhas", cols.q), 1: ("coalesce(__sx_bhas, FALSE)", cols.b), 2: (RIGHT_HAS, cols.r)}

    def pick(i: int, c: str | None = None) -> str:
        return picks[i][0] if c is None else picks[i][1][c]

    before_right = [f"CASE __sx_src WHEN 0 THEN {pick(0)} WHEN 1 THEN {pick(1)} ELSE {pick(2)} END AS __sx_brp"]
    before_right += [f"CASE __sx_src WHEN 0 THEN {pick(0, c)} WHEN 1 THEN {pick(1, c)} ELSE {pick(2, c)} END "
                     f"AS {cols.br[c]}" for c in spec.right.data_columns]
    events = (
        f"SELECT {', '.join(quote(c) for c in left.data_columns)}, {version}, "
        f"CASE WHEN __sx_asof THEN __sx_had_row ELSE __sx_present END AS __sx_blp, "
        + "".join(f"CASE WHEN __sx_asof THEN {cols.left_prev[c]} ELSE {quote(c)} END AS {cols.bl[c]}, "
                  for c in left.value_columns)
        + f"__sx_present, {RIGHT_HAS} AS __sx_arp, "
        + "".join(f"{cols.r[c]}, " for c in spec.right.data_columns)
        + f"{', '.join(before_right)} "
        f"FROM (SELECT *, {source} AS __sx_src FROM ({matched.format(left=f'({before})')}))"
    )
    is_left = spec.join_type == "left"

    def right_value(when: str, value: str) -> str:
        return f"CASE WHEN {when} THEN {value} END" if is_left else value

    parts = [(c, quote(c), quote(c)) if c in left.key else (c, cols.bl[c], quote(c)) for c in left.data_columns]
    parts += [(n, right_value("__sx_brp", cols.br[c]), right_value("__sx_arp", cols.r[c]))
              for c, n in spec.right_names.items()]
    same_left = [f"{cols.bl[c]} <=> {quote(c)}" for c in left.value_columns]
    same_right = [f"{cols.br[c]} <=> {cols.r[c]}" for c in spec.right.data_columns]
    if is_left:  # either side of a left join's row may lack its right row
        same_right = [f"__sx_brp = __sx_arp AND (NOT __sx_arp OR {' AND '.join(same_right)})"]
    return minimal_changes_from_parts_sql(
        events, parts,
        before_present="__sx_blp" + ("" if is_left else " AND __sx_brp"),
        after_present="__sx_present" + ("" if is_left else " AND __sx_arp"),
        same=" AND ".join(same_left + same_right) or "TRUE",
        order=left.order_by,
    )


class _Columns:
    """Names of the plain columns that carry rows through the plan, numbered by position so
    that any column name is safe: the previous left row's values (``left_prev``), a right
    interval's row and the row before it (``r``, ``q``), the right row found by the lookup
    before a foreign-key change (``b``), and an event's rows before it (``bl``, ``br``)."""

    def __init__(self, spec: FkJoinSpec):
        left, right = spec.left.data_columns, spec.right.data_columns
        self.left_prev = {c: f"__sx_lp{i}" for i, c in enumerate(left)}
        self.bl = {c: f"__sx_bl{i}" for i, c in enumerate(left)}
        # the right key's value is the interval's key, __sx_rk, in both rows
        self.r = {c: "__sx_rk" if c in spec.right.key else f"__sx_r{j}" for j, c in enumerate(right)}
        self.q = {c: "__sx_rk" if c in spec.right.key else f"__sx_q{j}" for j, c in enumerate(right)}
        self.b = {c: f"__sx_b{j}" for j, c in enumerate(right)}
        self.br = {c: f"__sx_br{j}" for j, c in enumerate(right)}

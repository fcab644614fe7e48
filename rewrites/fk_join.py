"""Rule: expand ``FK_JOIN(...)`` into native Spark SQL (window functions and equi-joins).

How the plan reproduces the sequential replay of :mod:`sqlext.functions.fk_join`:

* Each input becomes a checked change stream (:mod:`sqlext.functions.change_stream`); one window pass
  per input gives each change the key's next change and the row before it.
* Each right change opens an *interval* of its key's row, ``[version, next version)``,
  carrying the row and the row before it; a virtual interval before the key's first change
  holds the absent row.
* Each left change is joined, on its foreign key, with the right intervals that overlap its
  own interval ``[version, next version)``: one equi-join with a range condition. The
  interval covering the left change's version is its as-of right row (right changes at the
  same version come first); every later one is a right change reaching this subscribed row
  (KIP-213's prefix scan). The intervals are broadcast when Spark estimates the right input
  as small, so a right key with a million subscribed left rows is never a single task or the
  driver; otherwise it is a skewed partition of an ordinary join, which Spark splits.
* ``changes``: each event (a left change, or a right change reaching the row) yields the
  result row before and after it, and the minimal diff is forwarded. The row before a left
  change whose foreign key changed needs the right row at the previous key, found by a
  second probe of the same intervals.
* ``records``: the same events, each forwarded by KIP-213's rules.
* ``final``: a plain join of the final left and right tables.

Rows travel as plain columns with a presence flag (see :class:`_Columns`), never as structs.

No stale right value can reach the output: every result row is computed from the right
interval that covers its own version, never from a value remembered elsewhere; this is what
KIP-213's subscription hash guarantees in a parallel execution.
"""

from __future__ import annotations

from sqlglot import exp

from sqlext.functions.change_stream import checked_changes, minimal_changes_from_parts, window
from sqlext.language.dialect import to_sql
from sqlext.analysis.notes import Notes
from sqlext.analysis.relations import Relations, table_inputs
from sqlext.language.sqltree import (
    alias, and_, broadcast_hint, case, col, fragment, halias, hcol, helper, htable, lateral_explode, or_, paren,
    select_from, string, subquery, with_ctes,
)
from sqlext.functions.arguments import find_calls, read_call, replace_call
from sqlext.functions.changes import CHANGE_TYPE, DELETE, UPSERT, check_order_type
from sqlext.functions.expressions import expression_tree, over_columns_tree
from sqlext.functions.fk_join import ARGUMENTS, FUNCTION, TABLES, FkJoinSpec, check_foreign_key_type, fk_join_spec

RULE = "fk_join_to_sql"

# does the joined interval hold a right row (no interval joined: no)
RIGHT_HAS = "coalesce(__sx_rhas, FALSE)"

# Right inputs up to this estimated size have their intervals broadcast: the left change
# stream then never moves by foreign key. The estimate is the size of the input's files, which
# grow several times over in memory: 5M customer changes (72 MB of Parquet) could not be
# broadcast from a 4 GB local driver, while 500k (7 MB) broadcast comfortably.
BROADCAST_RIGHT_BYTES = 32 * 1024 * 1024


def fk_join_to_sql(
    expression: exp.Expression, relations: Relations | None = None, notes: Notes | None = None
) -> exp.Expression:
    notes = notes if notes is not None else Notes()
    for table in find_calls(expression, FUNCTION):
        call = read_call(table, FUNCTION, ARGUMENTS, TABLES)
        inputs = table_inputs(call, {"left": "left_key", "right": "right_key"}, relations)
        if inputs["left"].columns is None or inputs["right"].columns is None:
            notes.skip(RULE, f"{FUNCTION}: the inputs' columns are unknown here (FK_JOIN runs only "
                             "through sqlext.sql or the sqlext CLI, which ask the session)")
            continue
        left, right = inputs["left"], inputs["right"]
        spec = fk_join_spec(call.literals, left.columns, right.columns)
        for side, shape in ((left, spec.left), (right, spec.right)):
            check_order_type(shape, relations.expression_type(side.query, to_sql(col(shape.order_by))))
        check_foreign_key_type(
            spec,
            relations.expression_type(left.query, spec.foreign_key),
            relations.expression_type(right.query, to_sql(col(spec.right_key))),
        )
        right_size = relations.size_in_bytes(right.query)
        broadcast = right_size is not None and right_size <= BROADCAST_RIGHT_BYTES
        replace_call(table, native_sql(spec, left.source, right.source, broadcast))
        notes.fire(RULE, f"{FUNCTION} ({spec.join_type}, emit => '{spec.emit}') expanded into "
                         "native window functions and joins")
    return expression


def native_sql(spec: FkJoinSpec, left_source: exp.Expression, right_source: exp.Expression,
               broadcast: bool = False) -> exp.Query:
    """The Spark query that computes ``spec`` over the two relations (FROM items)."""
    left, right = spec.left, spec.right
    order = left.order_by
    cols = _Columns(spec)
    # rows travel as plain columns with a presence flag, never as structs: a struct is built,
    # copied and compared whole for every change, which costs more than the columns it holds
    left_checked = checked_changes(left, left_source, window_extra=[
        halias(window(left, exp.Lag(this=hcol("present"), offset=exp.Literal.number(1), default=exp.false())),
               "had_row"),
        *(halias(window(left, exp.Lag(this=col(c))), cols.left_prev[c]) for c in left.value_columns),
    ])
    # the previous row's foreign key is the expression over the previous row's columns
    prev_fk = over_columns_tree(spec.foreign_key, {c: cols.left_prev[c] for c in left.value_columns})
    left_changes = select_from([
        "*",
        halias(paren(expression_tree(spec.foreign_key)), "fk"),
        halias(case([(hcol("had_row"), paren(prev_fk))]), "prev_fk"),
    ], left_checked)
    right_changes = checked_changes(right, right_source, window_extra=[
        # NULL before the key's first change
        halias(window(right, exp.Lag(this=hcol("present"))), "had_row"),
        *(halias(window(right, exp.Lag(this=col(c))), cols.q[c]) for c in right.value_columns),
    ])
    # Right intervals [from, to) of each right key's row (r, present if __sx_rhas; q is the row
    # before it, present if __sx_qhas), plus a virtual interval before the key's first change,
    # where the right row is absent, so that some interval covers every version once a key has
    # any change. from NULL = the start.
    virtual = fragment("__sx_slot = 0")
    intervals = lateral_explode(select_from([
        halias(col(spec.right_key), "rk"),
        halias(case([(virtual, exp.null())], col(order)), "rfrom"),
        halias(case([(virtual.copy(), col(order))], hcol("next")), "rto"),
        halias(fragment("__sx_slot = 1 AND __sx_present"), "rhas"),
        halias(fragment("__sx_slot = 1 AND coalesce(__sx_had_row, FALSE)"), "qhas"),
        *(item for c in right.value_columns for item in (halias(col(c), cols.r[c]), hcol(cols.q[c]))),
        halias(fragment("__sx_slot = 1 AND (__sx_present OR coalesce(__sx_had_row, FALSE))"), "reach"),
    ], htable("rc")), fragment("CASE WHEN __sx_had_row IS NULL THEN array(0, 1) ELSE array(1) END"),
        "slots", "slot")
    ctes = [("lc", left_changes), ("rc", right_changes), ("ri", intervals)]

    if spec.emit == "final":
        last = "__sx_next IS NULL AND __sx_present"
        outputs = [alias(col(c, "__sx_l"), c) for c in left.data_columns]
        outputs += [alias(col(c, "__sx_r"), n) for c, n in spec.right_names.items()]
        query = select_from(outputs, subquery(select_from(["*"], htable("lc"), fragment(last)), "l"))
        query.set("joins", [exp.Join(
            this=subquery(select_from(["*"], htable("rc"), fragment(last)), "r"),
            on=exp.EQ(this=hcol("fk", "l"), expression=col(spec.right_key, "__sx_r")),
            side=None if spec.join_type == "inner" else "LEFT",
        )])
        return with_ctes(query, ctes[:2])

    upper = "<" if spec.emit == "changes" else "<="
    # (records skip the delete of an absent right row; in changes mode it changes nothing,
    # and leaving the test out lets both joins share one broadcast of the intervals)
    reach = "" if spec.emit == "changes" else " AND __sx_ri.__sx_reach"
    on = fragment(
        "(CASE WHEN __sx_present AND __sx_fk IS NOT NULL THEN __sx_l.__sx_fk END) = __sx_ri.__sx_rk "
        "AND (__sx_ri.__sx_rto IS NULL OR __sx_l.__sx_from < __sx_ri.__sx_rto) "
        "AND (__sx_ri.__sx_rfrom IS NULL OR __sx_ri.__sx_rfrom <= __sx_l.__sx_from "
        f"OR ((__sx_l.__sx_next IS NULL OR __sx_ri.__sx_rfrom {upper} __sx_l.__sx_next){reach}))"
    )

    def matched(left_rows: exp.Expression) -> exp.Select:
        """One equi-join on the foreign key (with a range condition) finds, for each left
        change, the right interval covering its version (the as-of right row; right changes at
        the same version come first) and each right change inside the left row's own interval
        [version, next version): KIP-213's prefix scan, reaching this subscribed row. In
        records mode a right change at the next left version still reaches the row, being
        forwarded first. A right key with very many subscribers is a skewed partition of an
        ordinary join (split by Spark, or avoided by broadcasting the right intervals)."""
        query = select_from([
            exp.Column(this=exp.Star(), table=exp.to_identifier("__sx_l")),
            exp.Column(this=exp.Star(), table=exp.to_identifier("__sx_ri")),
            halias(fragment("__sx_ri.__sx_rk IS NULL OR __sx_ri.__sx_rfrom IS NULL "
                            "OR __sx_ri.__sx_rfrom <= __sx_l.__sx_from"), "asof"),
        ], subquery(select_from(["*", halias(col(order), "from")], left_rows), "l"))
        query.set("joins", [exp.Join(this=htable("ri"), on=on.copy(), side="LEFT")])
        return broadcast_hint(query, "ri") if broadcast else query

    def version() -> exp.Alias:
        """An event's version: the left change's own, or the right change's that reached the row."""
        return alias(case([(hcol("asof"), hcol("from"))], hcol("rfrom")), order)

    if spec.emit == "changes":
        return with_ctes(_changes_sql(spec, cols, matched, version, broadcast), ctes)

    # emit => 'records': a left change forwards the joined row, the padded row (left join) or
    # a tombstone where the key had a row (PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE, deletes);
    # each right change reaching a subscribed row forwards it
    is_left = spec.join_type == "left"
    emits = fragment(f"NOT __sx_asof OR (__sx_present AND ({RIGHT_HAS} OR {str(is_left).upper()})) "
                     "OR __sx_had_row")
    has_row = fragment("__sx_present" + ("" if is_left else f" AND {RIGHT_HAS}"))
    columns = [col(c) if c in left.key else alias(case([(hcol("res"), col(c))]), c) for c in left.data_columns]
    columns += [alias(case([(fragment(f"__sx_res AND {RIGHT_HAS}"), hcol(cols.r[c]))]), n)
                for c, n in spec.right_names.items()]
    kind = case([(hcol("res"), string(UPSERT))], string(DELETE))
    events = select_from([
        *(col(c) for c in left.data_columns),
        *(hcol(cols.r[c]) for c in spec.right.data_columns),
        hcol("rhas"), version(), halias(has_row, "res"),
    ], matched(htable("lc")), emits)
    return with_ctes(select_from([*columns, alias(kind, CHANGE_TYPE), col(order)], events), ctes)


def _changes_sql(spec: FkJoinSpec, cols: "_Columns", matched, version, broadcast: bool) -> exp.Select:
    """emit => 'changes': for each matched row, the result row before and after its event,
    forwarded as the minimal change."""
    left = spec.left
    order = left.order_by
    # The row before a left change is the previous left row with the right row in effect just
    # before this version at the previous foreign key: the interval covering this version
    # gives it, or the row before that interval if the right key changed at this version.
    # When the foreign key did not change, the as-of interval joined below is that interval,
    # and this lookup is skipped (a NULL probe key: no hash probe, no candidate).
    same_fk = "__sx_prev_fk <=> __sx_fk AND __sx_present"

    def at_this() -> exp.Expression:
        return exp.EQ(this=hcol("rfrom", "ri"), expression=col(order, "__sx_lc"))

    before = select_from([
        exp.Column(this=exp.Star(), table=exp.to_identifier("__sx_lc")),
        halias(case([(at_this(), hcol("qhas", "ri"))], hcol("rhas", "ri")), "bhas"),
        *(halias(hcol("rk", "ri"), cols.b[c]) if c in spec.right.key else
          halias(case([(at_this(), hcol(cols.q[c], "ri"))], hcol(cols.r[c], "ri")), cols.b[c])
          for c in spec.right.data_columns),
        halias(fragment(same_fk), "same_fk"),
    ], htable("lc"))
    before.set("joins", [exp.Join(this=htable("ri"), side="LEFT", on=and_(
        exp.EQ(this=paren(case([(exp.not_(paren(fragment(same_fk))), hcol("prev_fk", "lc"))])),
               expression=hcol("rk", "ri")),
        paren(or_(hcol("rfrom", "ri").is_(exp.null()),
                  exp.LTE(this=hcol("rfrom", "ri"), expression=col(order, "__sx_lc")))),
        paren(or_(hcol("rto", "ri").is_(exp.null()),
                  exp.LT(this=col(order, "__sx_lc"), expression=hcol("rto", "ri")))),
    ))])
    if broadcast:
        broadcast_hint(before, "ri")
    # Where the right row before the event comes from: 0 the row before the interval (the
    # event is a right change, or the right key changed at this version), 1 the lookup above
    # (the foreign key changed), 2 the interval's own row.
    source = fragment("CASE WHEN NOT __sx_asof OR __sx_same_fk AND __sx_rfrom = __sx_from THEN 0 "
                      "WHEN NOT __sx_same_fk THEN 1 ELSE 2 END")
    picks = {0: ("__sx_qhas", cols.q), 1: ("coalesce(__sx_bhas, FALSE)", cols.b), 2: (RIGHT_HAS, cols.r)}

    def by_source(pick) -> exp.Case:
        return exp.Case(this=hcol("src"), ifs=[exp.If(this=exp.Literal.number(i), true=pick(i)) for i in (0, 1)],
                        default=pick(2))

    before_right = [halias(by_source(lambda i: fragment(picks[i][0])), "brp")]
    before_right += [halias(by_source(lambda i, c=c: hcol(picks[i][1][c])), cols.br[c])
                     for c in spec.right.data_columns]
    events = select_from([
        *(col(c) for c in left.data_columns),
        version(),
        halias(fragment("CASE WHEN __sx_asof THEN __sx_had_row ELSE __sx_present END"), "blp"),
        *(halias(case([(hcol("asof"), hcol(cols.left_prev[c]))], col(c)), cols.bl[c]) for c in left.value_columns),
        hcol("present"), halias(fragment(RIGHT_HAS), "arp"),
        *(hcol(cols.r[c]) for c in spec.right.data_columns),
        *before_right,
    ], select_from(["*", halias(source, "src")], matched(before)))
    is_left = spec.join_type == "left"

    def right_value(when: str, value: str) -> exp.Expression:
        return case([(hcol(when), hcol(value))]) if is_left else hcol(value)

    parts = [(c, col(c), col(c)) if c in left.key else (c, hcol(cols.bl[c]), col(c)) for c in left.data_columns]
    parts += [(n, right_value("brp", cols.br[c]), right_value("arp", cols.r[c]))
              for c, n in spec.right_names.items()]
    same_left = [exp.NullSafeEQ(this=hcol(cols.bl[c]), expression=col(c)) for c in left.value_columns]
    same_right = [exp.NullSafeEQ(this=hcol(cols.br[c]), expression=hcol(cols.r[c]))
                  for c in spec.right.data_columns]
    if is_left:  # either side of a left join's row may lack its right row
        same_right = [and_(fragment("__sx_brp = __sx_arp"),
                           paren(or_(fragment("NOT __sx_arp"), and_(*same_right))))]
    return minimal_changes_from_parts(
        events, parts,
        before_present=fragment("__sx_blp" + ("" if is_left else " AND __sx_brp")),
        after_present=fragment("__sx_present" + ("" if is_left else " AND __sx_arp")),
        same=and_(*same_left, *same_right),
        order=order,
    )


class _Columns:
    """Names of the plain columns that carry rows through the plan, numbered by position so
    that any column name is safe: the previous left row's values (``left_prev``), a right
    interval's row and the row before it (``r``, ``q``), the right row found by the lookup
    before a foreign-key change (``b``), and an event's rows before it (``bl``, ``br``).
    Each name is a full helper name (``__sx_...``)."""

    def __init__(self, spec: FkJoinSpec):
        left, right = spec.left.data_columns, spec.right.data_columns
        self.left_prev = {c: helper(f"lp{i}") for i, c in enumerate(left)}
        self.bl = {c: helper(f"bl{i}") for i, c in enumerate(left)}
        # the right key's value is the interval's key, __sx_rk, in both rows
        rk = helper("rk")
        self.r = {c: rk if c in spec.right.key else helper(f"r{j}") for j, c in enumerate(right)}
        self.q = {c: rk if c in spec.right.key else helper(f"q{j}") for j, c in enumerate(right)}
        self.b = {c: helper(f"b{j}") for j, c in enumerate(right)}
        self.br = {c: helper(f"br{j}") for j, c in enumerate(right)}

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

from rewrites.change_stream import checked_changes, minimal_changes_sql, present_sql, struct_sql, window
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
    marks = [
        "LEAD({o}) OVER ({w}) AS __sx_next",
        "LAG(__sx_present, 1, FALSE) OVER ({w}) AS __sx_had_row",
        "LEAD({o}) OVER ({w}) IS NULL AS __sx_last",
    ]
    left_row = struct_sql(left.data_columns)
    right_row = struct_sql([right_names[c] for c in right.data_columns],
                           {right_names[c]: quote(c) for c in right.data_columns})
    left_changes = checked_changes(
        left, left_source,
        extra=[f"({spec.foreign_key}) AS __sx_fk"],
        window_extra=[m.format(o=order, w=window(left)) for m in marks],
    )
    right_changes = checked_changes(
        right, right_source,
        extra=[f"CASE WHEN {present_sql(right)} THEN {right_row} END AS __sx_rrow"],
        window_extra=[m.format(o=order, w=window(right)) for m in marks]
        + [f"LAG(__sx_rrow) OVER ({window(right)}) AS __sx_rprev"],
    )
    ctes = [f"__sx_lc AS ({left_changes})", f"__sx_rc AS ({right_changes})"]
    result = _result_sql(spec)

    if spec.emit == "final":
        join = "JOIN" if spec.join_type == "inner" else "LEFT JOIN"
        return (
            f"WITH {', '.join(ctes)} SELECT __sx_res.* FROM (SELECT {result('__sx_lrow', '__sx_rrow')} AS __sx_res "
            f"FROM (SELECT __sx_l.__sx_lrow, __sx_r.__sx_rrow "
            f"FROM (SELECT *, {left_row} AS __sx_lrow FROM __sx_lc WHERE __sx_last AND __sx_present) __sx_l "
            f"{join} (SELECT * FROM __sx_rc WHERE __sx_last AND __sx_present) __sx_r "
            f"ON __sx_l.__sx_fk = __sx_r.{rkey}))"
        )

    # Each right key's history: its changes in order, f = version, t = next version,
    # r = row after (NULL: none), p = row before, reach = not the delete of an absent row.
    history = (
        f"SELECT {rkey} AS __sx_rk, array_sort(collect_list(named_struct('f', {order}, 't', __sx_next, "
        f"'r', __sx_rrow, 'p', __sx_rprev, 'reach', __sx_present OR __sx_had_row))) AS __sx_hist "
        f"FROM __sx_rc GROUP BY {rkey}"
    )
    joined = (
        f"SELECT __sx_l.*, __sx_h.__sx_hist FROM "
        f"(SELECT {keys}, {order} AS __sx_from, __sx_next AS __sx_to, __sx_had_row, __sx_fk, "
        f"__sx_present AND __sx_fk IS NOT NULL AS __sx_subscribed, "
        f"CASE WHEN __sx_present THEN {left_row} END AS __sx_lrow FROM __sx_lc) __sx_l "
        f"LEFT JOIN ({history}) __sx_h ON __sx_l.__sx_subscribed AND __sx_l.__sx_fk = __sx_h.__sx_rk"
    )
    # the right row in effect at the left change (right changes at its version come first)
    asof = ("try_element_at(filter(__sx_hist, x -> x.f <= __sx_from AND (x.t IS NULL OR __sx_from < x.t)), 1).r")
    # right changes inside the left row's interval; in records mode one at the next left
    # version still reaches the row, being forwarded first
    upper = "<" if spec.emit == "changes" else "<="
    reaching = f"filter(__sx_hist, x -> x.f > __sx_from AND (__sx_to IS NULL OR x.f {upper} __sx_to) AND x.reach)"
    located = f"SELECT *, {asof} AS __sx_asof, {reaching} AS __sx_reaching FROM ({joined})"
    after = result("__sx_lrow", "__sx_asof")

    if spec.emit == "changes":
        closing_right = ("CASE WHEN coalesce(size(__sx_reaching), 0) > 0 "
                         "THEN try_element_at(__sx_reaching, -1).r ELSE __sx_asof END")
        induced = (f"transform(__sx_reaching, x -> named_struct('v', x.f, 'before', {result('__sx_lrow', 'x.p')}, "
                   f"'after', {result('__sx_lrow', 'x.r')}))")
        first = "named_struct('v', __sx_from, 'before', __sx_before0, 'after', __sx_after0)"
        stepped = (
            f"SELECT *, LAG(__sx_close) OVER (PARTITION BY {keys} ORDER BY __sx_from) AS __sx_before0 FROM "
            f"(SELECT *, {after} AS __sx_after0, {result('__sx_lrow', closing_right)} AS __sx_close, "
            f"{induced} AS __sx_induced FROM ({located}))"
        )
        events = (
            f"SELECT {keys}, __sx_e.v AS {order}, __sx_e.before AS __sx_before, __sx_e.after AS __sx_after "
            f"FROM ({stepped}) LATERAL VIEW explode(CASE WHEN __sx_induced IS NULL THEN array({first}) "
            f"ELSE concat(array({first}), __sx_induced) END) __sx_events AS __sx_e"
        )
        return f"WITH {', '.join(ctes)} " + minimal_changes_sql(events, spec.data_columns, left.order_by)

    # emit => 'records': the left change's own record (joined, padded for a left join, or a
    # tombstone where the key had a row: PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE and left
    # deletes), then one record per right change reaching the row
    is_left = "TRUE" if spec.join_type == "left" else "FALSE"
    own = (
        f"named_struct('v', __sx_from, 'res', {after}, 'emit', "
        f"(__sx_lrow IS NOT NULL AND (__sx_asof IS NOT NULL OR {is_left})) OR __sx_had_row)"
    )
    induced = f"transform(__sx_reaching, x -> named_struct('v', x.f, 'res', {result('__sx_lrow', 'x.r')}, 'emit', TRUE))"
    events = (
        f"SELECT {keys}, __sx_e.v AS __sx_v, __sx_e.res AS __sx_res FROM ({located}) "
        f"LATERAL VIEW explode(CASE WHEN __sx_reaching IS NULL THEN array({own}) "
        f"ELSE concat(array({own}), {induced}) END) __sx_events AS __sx_e WHERE __sx_e.emit"
    )
    columns = [
        quote(c) if c in left.key else f"__sx_res.{quote(c)} AS {quote(c)}" for c in spec.data_columns
    ]
    kind = f"CASE WHEN __sx_res IS NULL THEN {sql_string(DELETE)} ELSE {sql_string(UPSERT)} END"
    return (
        f"WITH {', '.join(ctes)} SELECT {', '.join(columns)}, {kind} AS {quote(CHANGE_TYPE)}, "
        f"__sx_v AS {order} FROM ({events})"
    )


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

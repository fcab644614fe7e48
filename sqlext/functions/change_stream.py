"""Native SQL that reads one input as a checked stream of changes (the change-row rules in the README's "Change rows").

Every table function's expansion starts here. The query returned keeps the input's data
columns and its ordering column, adds ``__sx_present`` (does the change set the key's row?)
and any extra columns the caller asks for, drops ``update_preimage`` rows and the ``delete`` of a
key's ``delete`` and ``insert`` at one ordering value (the delete comes first), raises the data
errors (NULL or tied ordering values, unknown change types, NULL sequence values) with
``raise_error``, and with ``sequence_by`` drops stale changes.

It sits with the change-row vocabulary it spells out as SQL (:mod:`sqlext.functions.changes`)
and the input shapes mapped to change rows (:mod:`sqlext.functions.input_formats`), below the
rules that expand the functions' calls (``rewrites/fk_join.py``, ``rewrites/changelog_filter.py``):
it is no rule itself, only the start those expansions share.
"""

from __future__ import annotations

from typing import Sequence

from sqlglot import exp

from sqlext.functions.arguments import SqlValue, key_text, raise_error
from sqlext.functions.changes import (
    CHANGE_TYPE, CHANGE_TYPES, INSERT, PREIMAGE, SETS_VALUE, ChangeShape, DELETE, POSTIMAGE,
)
from sqlext.language.sqltree import (
    alias, and_, halias, case, col, fragment, hcol, lateral_explode, over, paren, select_from, string,
)


def window(shape: ChangeShape, function: exp.Expression, frame: exp.WindowSpec | None = None) -> exp.Window:
    """``function OVER (PARTITION BY key ORDER BY order_by)``: the key's changes in order."""
    return over(function, shape.key, shape.order_by, frame)


def present(shape: ChangeShape) -> exp.Expression:
    """Does the change set the key's row (rather than remove it)?"""
    if shape.has_change_type:
        return col(CHANGE_TYPE).isin(*[string(t) for t in SETS_VALUE])
    tomb = shape.tombstone_columns
    if not tomb:
        return exp.true()
    return exp.not_(paren(and_(*[col(c).is_(exp.null()) for c in tomb])))


def checked_changes(shape: ChangeShape, source: exp.Expression, extra: Sequence[exp.Expression] = (),
                    window_extra: Sequence[exp.Expression] = (), with_next: bool = True) -> exp.Select:
    """The applied changes of ``source`` (a FROM item); ``extra`` are aliased expressions over
    the input row, ``window_extra`` aliased expressions computed over :func:`window` (after
    stale changes are dropped), where ``__sx_present`` can be read. With ``with_next`` each
    row also carries ``__sx_next``, the ordering value of the key's next applied change (NULL
    for its last).

    Checks that need one row run before the shuffle (so ``_change_type`` never travels);
    only the tie check needs a neighbour. It reads ``__sx_next`` where the caller wants it
    (Spark evaluates a window expression once per alias, so asking for the previous change
    as well would cost a window function), else the previous change, so that a caller whose
    window columns all look back keeps one window frame."""
    order = shape.order_by
    columns = [col(c) for c in shape.data_columns]
    columns += [col(order), halias(paren(present(shape)), "present"), *extra]
    fn = shape.function
    keys = key_text(shape.key)
    row_checks = [
        (col(order).is_(exp.null()),
         raise_error("NULL_ORDER_VALUE", fn, key=keys, order_by=shape.order_by)),
    ]
    keep = None
    if shape.has_change_type:
        ct = col(CHANGE_TYPE)
        row_checks.append((
            exp.or_(ct.is_(exp.null()), exp.not_(ct.copy().isin(*[string(t) for t in CHANGE_TYPES]))),
            raise_error("UNKNOWN_CHANGE_TYPE", fn, key=keys, value=SqlValue(ct)),
        ))
        keep = paren(exp.or_(ct.is_(exp.null()), exp.NEQ(this=ct.copy(), expression=string(PREIMAGE))))
    if shape.sequence_by:
        row_checks.append((col(shape.sequence_by).is_(exp.null()), raise_error(
            "NULL_SEQUENCE_VALUE", fn, key=keys, sequence_by=shape.sequence_by)))
    inputs = select_from(columns, source, and_(keep, _checks(row_checks)))
    if shape.has_change_type:
        inputs = _without_replaced_deletes(shape, inputs, [c.alias_or_name for c in columns])
    next_change = [halias(window(shape, exp.Lead(this=col(order))), "next")] if with_next else []
    neighbour = halias(window(shape, exp.Lead(this=col(order)) if with_next else exp.Lag(this=col(order))),
                      "tie_with")
    if shape.sequence_by:
        # ties are checked among all changes; __sx_next is the next change that is applied
        seq = col(shape.sequence_by)
        frame = exp.WindowSpec(kind="ROWS", start="UNBOUNDED", start_side="PRECEDING",
                               end=exp.Literal.number(1), end_side="PRECEDING")
        marks = [neighbour, halias(window(shape, exp.Max(this=seq), frame), "latest")]
        stale = paren(exp.or_(hcol("latest").is_(exp.null()), exp.GTE(this=seq.copy(), expression=hcol("latest"))))
        checked = select_from(["*"], select_from(["*", *marks], inputs),
                              and_(paren(_tie(shape, hcol("tie_with"))), stale))
        columns = next_change + list(window_extra)
        return select_from(["*", *columns], checked) if columns else checked
    # one window pass computes the tie check and the caller's window columns together
    if with_next:
        columns, tie_with = next_change + list(window_extra), hcol("next")
    else:
        columns, tie_with = [neighbour, *window_extra], hcol("tie_with")
    return select_from(["*"], select_from(["*", *columns], inputs), _tie(shape, tie_with))


def _without_replaced_deletes(shape: ChangeShape, inputs: exp.Select, names: Sequence[str]) -> exp.Select:
    """``inputs`` without the ``delete`` of each key that has exactly a ``delete`` and an
    ``insert`` at one ordering value (a commit that removed the key's row and added it changed,
    as Delta writes a commit without change data files): by Delta's protocol the removed row
    comes first, so the insert is the key's change there, and the delete, as a preimage, says
    nothing the key's previous change does not. Any other two changes of a key at one value
    stay, for the tie check. ``names`` are the columns of ``inputs``; the window's frame is the
    rows of the key at the row's value, in the partition and order of the tie check's window,
    so Spark sorts the rows once for both."""
    peers = exp.WindowSpec(kind="RANGE", start="CURRENT ROW", end="CURRENT ROW")
    inserted = halias(exp.EQ(this=col(CHANGE_TYPE), expression=string(INSERT)), "inserted")
    counted = select_from(["*", halias(window(shape, exp.Count(this=exp.Star()), peers), "peers"),
                           halias(window(shape, exp.CountIf(this=hcol("inserted")), peers.copy()), "inserts")],
                          inputs.select(inserted, copy=False))
    replaced = fragment("__sx_peers = 2 AND __sx_inserts = 1 AND NOT __sx_present")
    return select_from([col(n) for n in names], counted, exp.not_(paren(replaced)))


def _tie(shape: ChangeShape, neighbour: exp.Expression) -> exp.Expression:
    """The AMBIGUOUS_ORDER check of a change against the column holding its neighbour's order."""
    order = col(shape.order_by)
    return _checks([(exp.EQ(this=order, expression=neighbour), raise_error(
        "AMBIGUOUS_ORDER", shape.function, key=key_text(shape.key), order_by=shape.order_by,
        value=SqlValue(order)))])


def _checks(checks: Sequence[tuple[exp.Expression, exp.Expression]]) -> exp.Expression:
    return case(checks, exp.true())


def struct(columns: Sequence[str]) -> exp.Expression:
    """``named_struct`` of ``columns``, each read from the column of that name."""
    return exp.Anonymous(this="named_struct",
                         expressions=[part for c in columns for part in (string(c), col(c))])


def minimal_changes(query: exp.Select, columns: Sequence[str], order: str) -> exp.Select:
    """The minimal change feed of a result whose rows ``query`` gives as ``__sx_before`` and
    ``__sx_after`` (structs of ``columns``; NULL where the key has no row), one query row per
    key and ordering value: nothing, an insert, a delete, or a pre/post pair when the rows
    differ."""
    return minimal_changes_from_parts(
        query,
        [(c, col(c, "__sx_before"), col(c, "__sx_after")) for c in columns],
        before_present=fragment("__sx_before IS NOT NULL"),
        after_present=fragment("__sx_after IS NOT NULL"),
        same=fragment("__sx_before <=> __sx_after"),
        order=order,
    )


def minimal_changes_from_parts(query: exp.Select, columns: Sequence[tuple[str, exp.Expression, exp.Expression]],
                               before_present: exp.Expression, after_present: exp.Expression,
                               same: exp.Expression, order: str) -> exp.Select:
    """:func:`minimal_changes` for a result row the query does not build as one struct:
    ``columns`` are (name, its value before, its value after); the three conditions say
    whether the key has a row before, after, and whether the rows are equal (only read when
    both are there). Slot 0 forwards the old row, slot 1 the new one."""
    none = fragment("CAST(array() AS ARRAY<INT>)")
    slots = case([
        (fragment("__sx_had AND __sx_has"), paren(case([(paren(same), none)], fragment("array(0, 1)")))),
        (hcol("has"), fragment("array(1)")),
        (hcol("had"), fragment("array(0)")),
    ], none.copy())
    first = fragment("__sx_slot = 0")
    images = [alias(case([(first.copy(), before)], after), name) for name, before, after in columns]
    kind = case([(first.copy(), paren(case([(hcol("has"), string(PREIMAGE))], string(DELETE))))],
                paren(case([(hcol("had"), string(POSTIMAGE))], string(INSERT))))
    flagged = select_from(["*", halias(before_present, "had"), halias(after_present, "has")], query)
    result = select_from([*images, alias(kind, CHANGE_TYPE), col(order)], flagged)
    return lateral_explode(result, slots, "slots", "slot")

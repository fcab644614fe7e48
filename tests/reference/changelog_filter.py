"""A plain per-key replay of CHANGELOG_FILTER (KAFKA-3902's filter of a changelog), the
reference its column-wise kernel (:func:`sqlext.udfs.changelog_filter.filter_increment`) is
checked against.

Each key's changes are applied one by one, in order, from the row the key held before them
(none in a batch run; the row an earlier run left in an incremental one). A change forwards:

* ``emit => 'records'``: an upsert of its row where it passes the predicate, else a delete of
  its key (the other columns NULL);
* ``emit => 'changes'``: what a reader of the filtered table sees: an insert where the key
  starts to pass, a delete of the old row where it stops, a preimage and a postimage where it
  passes before and after with other values, nothing otherwise;
* ``emit => 'final'``: nothing; the key's last row is the output where it passes.

An incremental run refuses a change at or below the key's last ordering value
(``[LATE_CHANGE]``), unless ``sequence_by`` says it is stale (older than the key's row), when it
is dropped; with ``sequence_by`` a change older than one applied before it is dropped.
"""

from __future__ import annotations

from typing import Any, Sequence

import pyarrow as pa

from sqlext.functions.changelog_filter import FUNCTION, PASS_COLUMN, FilterSpec, not_boolean
from sqlext.functions.changes import (CHANGE_TYPE, DELETE, INSERT, POSTIMAGE, PREIMAGE, UPSERT, changes_by_key,
                                    drop_stale, late_change)


def changelog_filter(spec: FilterSpec, rows: pa.Table, passes: Sequence[Any]) -> pa.Table:
    """The filter over a whole input: ``passes[i]`` is the predicate's value for row ``i``
    (NULL does not pass). Returns the output rows with ``spec.output_columns``."""
    shape = spec.shape
    records = rows.to_pylist()
    for record, passed in zip(records, passes):
        if passed is not None and not isinstance(passed, bool):
            raise not_boolean(spec.predicate, type(passed).__name__)
        record[PASS_COLUMN] = bool(passed)
    out: list[dict] = []
    for changes in changes_by_key(shape, records).values():
        old, old_passes = apply_changes(spec, changes, None, False, out)
        if spec.emit == "final" and old_passes:
            out.append({c: old[c] for c in shape.data_columns})
    fields = [pa.field(CHANGE_TYPE, pa.string()) if c == CHANGE_TYPE else rows.schema.field(c)
              for c in spec.output_columns]
    return pa.Table.from_pylist(out, schema=pa.schema(fields))


def apply_changes(spec: FilterSpec, changes, old: dict | None, old_passes: bool, out: list) -> tuple[dict | None, bool]:
    """One key's ordered changes from the key's row before them (``old``, and whether it
    passed): appends what they forward to ``out``; returns the key's row after them and whether
    it passes."""
    for change in changes:
        new_passes = change.present and change.row[PASS_COLUMN]
        out.extend(forward(spec, change.row, old, old_passes, new_passes))
        old, old_passes = change.row, new_passes
    return old, old_passes


def apply_increment(spec: FilterSpec, changes, old: dict | None, old_passes: bool, last_order, out: list):
    """One key's new changes on top of what an earlier run left for it (its row, whether it
    passed, its last ordering value; None, False, None for a new key): :func:`apply_changes`
    after refusing or dropping the late ones (:func:`in_order`). Returns the key's row and
    whether it passes after them, or None when no change applies."""
    shape = spec.shape
    if last_order is not None:
        changes = in_order(spec, changes, old, last_order)
        if shape.sequence_by is not None:
            changes = drop_stale(shape, changes, latest=old[shape.sequence_by])
    if not changes:
        return None
    return apply_changes(spec, changes, old, old_passes, out)


def in_order(spec: FilterSpec, changes, old: dict, last_order):
    """The changes above the key's last ordering value; a late one is dropped where
    ``sequence_by`` says it is older than the key's row, else it is ``[LATE_CHANGE]``."""
    shape = spec.shape
    kept = []
    for change in changes:
        if change.order > last_order:
            kept.append(change)
        elif shape.sequence_by is not None and change.row[shape.sequence_by] is not None \
                and change.row[shape.sequence_by] < old[shape.sequence_by]:
            continue
        else:
            raise late_change(FUNCTION, shape.key_text(change.row), shape.order_by, repr(change.order),
                              repr(last_order))
    return kept


def forward(spec: FilterSpec, new: dict, old: dict | None, old_passes: bool, new_passes: bool):
    """The rows one change forwards, from the key's row before it."""
    shape = spec.shape
    order = new[shape.order_by]
    if spec.emit == "records":
        values = {c: (new[c] if new_passes or c in shape.key else None) for c in shape.data_columns}
        yield {**values, CHANGE_TYPE: UPSERT if new_passes else DELETE, shape.order_by: order}
        return
    if spec.emit != "changes":
        return

    def image(row: dict, kind: str) -> dict:
        return {**{c: row[c] for c in shape.data_columns}, CHANGE_TYPE: kind, shape.order_by: order}

    if old_passes and new_passes:
        if any(old[c] != new[c] for c in shape.data_columns):
            yield image(old, PREIMAGE)
            yield image(new, POSTIMAGE)
    elif new_passes:
        yield image(new, INSERT)
    elif old_passes:
        yield image(old, DELETE)

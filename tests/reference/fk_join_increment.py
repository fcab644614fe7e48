"""FK_JOIN over one increment, replayed key by key in plain Python: what the column-wise step
of an incremental run (:func:`sqlext.udfs.fk_join.join_increment`) is checked against.

:class:`JoinReplay` keeps the rows of the keys an increment meets and replays the changes in
order, as KIP-213's subscription/response workflow does when messages arrive in order, and
collects what the result forwards:

* ``changes``: per left key and ordering value, the result row before and after the changes at
  that value, as the minimal change (an insert, an update pair, or a delete);
* ``records``: each record the workflow forwards (see :mod:`sqlext.functions.fk_join`).

At equal ordering values the right change comes first, as in the batch function. A right
change reaches every left row subscribed to its key at that moment: every present left row
whose foreign key is that key (the subscription store, kept here as an index by foreign key).
The foreign key of every row is computed beforehand (the column ``foreign_key``).

:func:`replay_increment` is a whole run: the increment's rows checked and grouped per key, late
changes refused or (by ``sequence_by``) ignored against the rows an earlier run left, the
replay, and each changed key's last row.
"""

from __future__ import annotations

from itertools import groupby
from typing import Any, Mapping

from sqlext.functions.changes import (
    CHANGE_TYPE, DELETE, INSERT, POSTIMAGE, PREIMAGE, UPSERT, Change, changes_by_key, drop_stale, late_change,
)
from sqlext.functions.fk_join import FUNCTION, FkJoinSpec


def replay_increment(spec: FkJoinSpec, foreign_key: str, present: str, left: list[dict], right: list[dict],
                     left_state: list[dict], right_state: list[dict], highest):
    """An incremental run's step, key by key: the rows forwarded (none for ``final``) and each
    changed key's last row in both states (with ``present``), as lists of dicts. ``left_state``
    and ``right_state`` are the rows an earlier run left (present or not), ``highest`` the highest
    ordering value it processed."""
    left_changes = changes_by_key(spec.left, left)
    right_changes = changes_by_key(spec.right, right)
    left_before = {tuple(r[k] for k in spec.left.key): r for r in left_state}
    right_before = {(r[spec.right_key],): r for r in right_state}
    if highest is not None:
        left_changes = _in_order(left_changes, spec.left, left_before, highest)
        right_changes = _in_order(right_changes, spec.right, right_before, highest)
    replay = JoinReplay(spec, foreign_key, {k: r for k, r in left_before.items() if r[present]},
                        {k[0]: r for k, r in right_before.items() if r[present]})
    out = replay.run(left_changes, {k[0]: c for k, c in right_changes.items()})
    return (out if spec.emit != "final" else [], _last_rows(left_changes, spec.left, present, foreign_key),
            _last_rows(right_changes, spec.right, present))


def _in_order(changes, shape, before, highest):
    """The changes above ``highest``; a late one is ignored when ``sequence_by`` says it is
    stale (older than its key's row), and is ``[LATE_CHANGE]`` otherwise."""
    kept = {}
    for key, key_changes in changes.items():
        row = before.get(key)
        applied = []
        for change in key_changes:
            if change.order > highest:
                applied.append(change)
            elif shape.sequence_by is not None and row is not None and change.row[shape.sequence_by] is not None \
                    and row[shape.sequence_by] is not None and change.row[shape.sequence_by] < row[shape.sequence_by]:
                continue
            else:
                raise late_change(FUNCTION, shape.key_text(change.row), shape.order_by, repr(change.order),
                                  repr(highest), across_inputs=True)
        if shape.sequence_by is not None and applied:
            applied = drop_stale(shape, applied, latest=None if row is None else row[shape.sequence_by])
        if applied:
            kept[key] = applied
    return kept


def _last_rows(changes, shape, present: str, *extra) -> list[dict]:
    """Each changed key's last applied change, as a state row."""
    return [{**{c: key_changes[-1].row[c] for c in (*shape.data_columns, shape.order_by, *extra)},
             present: key_changes[-1].present} for key_changes in changes.values()]


class JoinReplay:
    """The join's state for the keys an increment meets, and the rows it forwards."""

    def __init__(self, spec: FkJoinSpec, foreign_key: str, left: Mapping[tuple, dict], right: Mapping[Any, dict]):
        self.spec, self.foreign_key = spec, foreign_key
        self.left = dict(left)  # left key -> present row (with its foreign key)
        self.right = dict(right)  # right key -> present row
        self.subscribers: dict[Any, set] = {}
        for key, row in self.left.items():
            self._subscribe(key, row)
        self.out: list[dict] = []
        self._right_names = spec.right_names

    def run(self, left_changes: Mapping[tuple, list[Change]], right_changes: Mapping[Any, list[Change]]) -> list[dict]:
        """Replay the changes (per key, in order) and return the rows forwarded."""
        events = [(c.order, 0, key, c) for key, changes in right_changes.items() for c in changes]
        events += [(c.order, 1, key, c) for key, changes in left_changes.items() for c in changes]
        events.sort(key=lambda event: (event[0], event[1]))
        for order, at_once in groupby(events, key=lambda event: event[0]):
            at_once = list(at_once)
            if self.spec.emit == "records":
                for _, side, key, change in at_once:
                    (self._right_record if side == 0 else self._left_record)(key, change)
            else:
                self._changes_at(order, at_once)
        return self.out

    # -- the result row of a left key

    def joined(self, key: tuple) -> dict | None:
        row = self.left.get(key)
        if row is None:
            return None
        fk = row[self.foreign_key]
        right = None if fk is None else self.right.get(fk)
        if right is None and self.spec.join_type != "left":
            return None
        values = {c: row[c] for c in self.spec.left.data_columns}
        for column, name in self._right_names.items():
            values[name] = None if right is None else right[column]
        return values

    def _affected(self, side: int, key) -> list:
        if side == 1:
            return [key]
        return list(self.subscribers.get(key, ()))

    # -- applying one change

    def _set_left(self, key: tuple, change: Change) -> None:
        old = self.left.pop(key, None)
        if old is not None:
            self._unsubscribe(key, old)
        if change.present:
            self.left[key] = change.row
            self._subscribe(key, change.row)

    def _set_right(self, key, change: Change) -> None:
        if change.present:
            self.right[key] = change.row
        else:
            self.right.pop(key, None)

    def _subscribe(self, key: tuple, row: dict) -> None:
        fk = row[self.foreign_key]
        if fk is not None:
            self.subscribers.setdefault(fk, set()).add(key)

    def _unsubscribe(self, key: tuple, row: dict) -> None:
        fk = row[self.foreign_key]
        if fk is not None:
            keys = self.subscribers.get(fk)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.subscribers[fk]

    # -- emit => 'changes': the result rows before and after each ordering value

    def _changes_at(self, order, events) -> None:
        before: dict[tuple, dict | None] = {}
        for _, side, key, change in events:
            for affected in self._affected(side, key):
                if affected not in before:
                    before[affected] = self.joined(affected)
            if side == 0:
                self._set_right(key, change)
            else:
                self._set_left(key, change)
        for key, old in before.items():
            new = self.joined(key)
            if old == new:
                continue
            if old is None:
                self._emit(new, INSERT, order)
            elif new is None:
                self._emit(old, DELETE, order)
            else:
                self._emit(old, PREIMAGE, order)
                self._emit(new, POSTIMAGE, order)

    def _emit(self, values: dict, kind: str, order) -> None:
        self.out.append({**values, CHANGE_TYPE: kind, self.spec.left.order_by: order})

    # -- emit => 'records': what KIP-213's workflow forwards, record by record

    def _left_record(self, key: tuple, change: Change) -> None:
        old = self.left.get(key)
        if old is None and not change.present:
            return  # the delete of an absent row forwards nothing
        self._set_left(key, change)
        if not change.present:  # retracted, whether it joined or not
            self._tombstone(key, change.order)
            return
        if change.row[self.foreign_key] is None:  # not subscribed anywhere
            if self.spec.join_type == "left":
                self._upsert(key, change.order)
            elif old is not None:
                self._tombstone(key, change.order)
            return
        if self.right.get(change.row[self.foreign_key]) is not None:
            self._upsert(key, change.order)
        elif old is not None or self.spec.join_type == "left":  # KIP-213's PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE
            self._upsert(key, change.order) if self.spec.join_type == "left" else self._tombstone(key, change.order)

    def _right_record(self, key, change: Change) -> None:
        if self.right.get(key) is None and not change.present:
            return
        self._set_right(key, change)
        for subscriber in self._affected(0, key):  # KIP-213's prefix scan of the subscriptions
            if change.present or self.spec.join_type == "left":
                self._upsert(subscriber, change.order)
            else:
                self._tombstone(subscriber, change.order)

    def _upsert(self, key: tuple, order) -> None:
        self.out.append({**self.joined(key), CHANGE_TYPE: UPSERT, self.spec.left.order_by: order})

    def _tombstone(self, key: tuple, order) -> None:
        values = {c: None for c in self.spec.data_columns}
        values.update(zip(self.spec.left.key, key))
        self.out.append({**values, CHANGE_TYPE: DELETE, self.spec.left.order_by: order})

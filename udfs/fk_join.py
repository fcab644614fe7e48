"""FK_JOIN over one increment of changes, in plain Python over the rows it meets.

An incremental run (:mod:`sqlext.streaming.fk_join`) hands this the rows an earlier run left
for every key the increment can meet (the left rows of the changed left keys and of the left
keys subscribed to a changed right key, and the right rows those point at) and the new
changes of both inputs, grouped and checked per key. It replays the changes in order, as
KIP-213's subscription/response workflow does when messages arrive in order, and returns what
the result forwards:

* ``changes``: per left key and ordering value, the result row before and after the changes at
  that value, as the minimal change (an insert, an update pair, or a delete);
* ``records``: each record the workflow forwards (see :mod:`sqlext.catalog.fk_join`).

At equal ordering values the right change comes first, as in the batch function. A right
change reaches every left row subscribed to its key at that moment: every present left row
whose foreign key is that key (the subscription store, kept here as an index by foreign key).
The foreign key of every row is computed by Spark beforehand (the column ``foreign_key``).
"""

from __future__ import annotations

from itertools import groupby
from typing import Any, Mapping

from sqlext.catalog.changes import CHANGE_TYPE, DELETE, INSERT, POSTIMAGE, PREIMAGE, UPSERT, Change
from sqlext.catalog.fk_join import FUNCTION, FkJoinSpec


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


# -- emit => 'changes' and 'final', column-wise over the whole increment

def join_increment(spec: FkJoinSpec, foreign_key: str, present_column: str, left, right, left_state, right_state,
                   highest, output_schema):
    """An increment's rows and new state, computed column-wise over Arrow data: the same rows
    as :class:`JoinReplay` for ``emit => 'changes'`` and the same state for ``'final'``.

    ``left`` and ``right`` hold the increment's changes (the left ones with their foreign key in
    the column ``foreign_key``); ``left_state`` and ``right_state`` the rows an earlier run left
    for every key the increment can meet, in the states' columns (data, ordering value, the
    left's foreign key, and ``present_column``); ``highest`` the highest ordering value an
    earlier run processed. Returns the forwarded rows (``output_schema``) and the changed keys'
    new state rows of each input, or None where the per-key replay runs instead:
    ``emit => 'records'``, ``sequence_by``, and key or ordering types Arrow cannot hash or sort.

    A left key's result changes at a version where its own row changes or the right row it
    pointed at just before changes (KIP-213's subscription). At each such (key, version) the
    result row before the version (every input's row as of the versions below it) is compared
    with the one after (as of the version itself), as the replay does: both inputs' changes at
    one version are applied before the result is read again."""
    from sqlext.udfs.column_wise import NOT_COLUMN_WISE

    if spec.emit == "records" or spec.left.sequence_by is not None:
        return None
    try:
        return _JoinIncrement(spec, foreign_key, present_column, left, right, left_state, right_state, highest,
                              output_schema).run()
    except NOT_COLUMN_WISE:
        return None


def _met_during(row_keys, starts, ends, change_keys, versions, width: int):
    """The (row, change) pairs, as indices into the two sides, of rows alive over the versions
    ``starts`` (excluded) to ``ends`` (included) and the changes of their key at a version in
    that span: a left row subscribed to a foreign key and the right changes it sees. The
    changes of each key are sorted once and each row finds its span's changes by a binary
    search, so the work follows the pairs found, not every row times every change of its key."""
    import numpy as np

    if (int(max(row_keys.max(), change_keys.max())) + 2) * width >= (1 << 62):  # too wide for one integer
        import pyarrow as pa

        pairs = pa.table({"fk": row_keys, "row": np.arange(len(row_keys))}).join(
            pa.table({"fk": change_keys, "change": np.arange(len(change_keys))}), keys="fk", join_type="inner")
        row = pairs["row"].to_numpy().astype(np.int64)
        change = pairs["change"].to_numpy().astype(np.int64)
        valid = (starts[row] < versions[change]) & (versions[change] <= ends[row])
        return row[valid], change[valid]
    placed = change_keys * width + versions
    order = np.argsort(placed, kind="stable")
    placed = placed[order]
    low = np.searchsorted(placed, row_keys * width + starts, side="right")
    high = np.searchsorted(placed, row_keys * width + ends, side="right")
    count = np.maximum(high - low, 0)
    row = np.repeat(np.arange(len(row_keys)), count)
    offsets = np.arange(len(row)) - np.repeat(np.cumsum(count) - count, count)
    return row, order[np.repeat(low, count) + offsets]


class _JoinIncrement:
    def __init__(self, spec, foreign_key, present_column, left, right, left_state, right_state, highest, output_schema):
        self.spec, self.fk, self.present_column, self.output_schema = spec, foreign_key, present_column, output_schema
        self.left, self.right = left, right
        self.left_state, self.right_state, self.highest = left_state, right_state, highest

    def _checked(self, shape, changes):
        """The changes without preimages, after the checks of the change-row rules."""
        from sqlext.udfs.column_wise import check_rows, check_ties, codes, ranks, without_preimages

        check_rows(shape, changes)
        changes = without_preimages(shape, changes)
        check_ties(shape, changes, codes([changes[k] for k in shape.key]), ranks(changes[shape.order_by]))
        return changes

    def _late(self, shape, changes) -> None:
        """``[LATE_CHANGE]``: one order runs across both inputs, so a change at or below the
        highest ordering value processed can meet rows already forwarded."""
        import pyarrow as pa
        import pyarrow.compute as pc

        from sqlext.catalog.changes import late_change

        if self.highest is None or changes.num_rows == 0:
            return
        late = pc.less_equal(changes[shape.order_by], pa.scalar(self.highest, changes.schema.field(shape.order_by).type))
        if pc.any(late).as_py():
            row = changes.filter(late).slice(0, 1).to_pylist()[0]
            raise late_change(FUNCTION, shape.key_text(row), shape.order_by, repr(row[shape.order_by]),
                              repr(self.highest), across_inputs=True)

    @staticmethod
    def _as_state(changes, shape, state_schema, present, *extra):
        import pyarrow as pa

        arrays = [changes[c] for c in (*shape.data_columns, shape.order_by, *extra)] + [present]
        return pa.Table.from_arrays([a.cast(f.type) for a, f in zip(arrays, state_schema)], schema=state_schema)

    def run(self):
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        from sqlext.udfs.column_wise import Timeline, at, codes, flag, leaves_row, ranks, together

        spec, L, R = self.spec, self.spec.left, self.spec.right
        left, right = self._checked(L, self.left), self._checked(R, self.right)
        self._late(L, left)
        self._late(R, right)
        # each input's timeline: the rows earlier runs left, then the new changes
        lines = pa.concat_tables([self.left_state, self._as_state(left, L, self.left_state.schema, leaves_row(L, left),
                                                                   self.fk)])
        right_lines = pa.concat_tables([self.right_state,
                                        self._as_state(right, R, self.right_state.schema, leaves_row(R, right))])
        left_new = np.arange(lines.num_rows) >= self.left_state.num_rows
        right_new = np.arange(right_lines.num_rows) >= self.right_state.num_rows
        left_codes = codes([lines[k] for k in L.key])
        joinable = codes([together(right_lines[R.key[0]], lines[self.fk])])
        right_codes, fk_codes = joinable[:right_lines.num_rows], joinable[right_lines.num_rows:].copy()
        fk_codes[np.asarray(pc.is_null(lines[self.fk]), dtype=bool)] = -1
        versions = ranks(together(lines[L.order_by], right_lines[R.order_by]))
        left_versions, right_versions = versions[:lines.num_rows], versions[lines.num_rows:]
        width = int(versions.max()) + 2 if len(versions) else 2
        left_line, right_line = Timeline(left_codes, left_versions, width), Timeline(right_codes, right_versions, width)
        left_last = lines.filter(pa.array(left_line.last_of_each_key() & left_new))
        right_last = right_lines.filter(pa.array(right_line.last_of_each_key() & right_new))
        if spec.emit == "final":
            return self.output_schema.empty_table(), left_last, right_last

        left_present = np.asarray(pc.fill_null(lines[self.present_column], False), dtype=bool)
        right_present = np.asarray(pc.fill_null(right_lines[self.present_column], False), dtype=bool)
        # the (left key, version) pairs whose result may change: each left change ...
        changed = np.nonzero(left_new)[0]
        keys, versions_at, source = [left_codes[changed]], [left_versions[changed]], [changed]
        # ... and each right change at the left rows subscribed to its key just before it
        subscribed = np.nonzero(left_present & (fk_codes >= 0))[0]
        right_changed = np.nonzero(right_new)[0]
        if len(subscribed) and len(right_changed):
            until = left_line.next_rank(left_versions, never=width)[subscribed]
            row, change = _met_during(fk_codes[subscribed], left_versions[subscribed], until,
                                      right_codes[right_changed], right_versions[right_changed], width)
            row, change = subscribed[row], right_changed[change]
            keys.append(left_codes[row])
            versions_at.append(right_versions[change])
            source.append(lines.num_rows + change)
        keys, versions_at, source = np.concatenate(keys), np.concatenate(versions_at), np.concatenate(source)
        # one pair per (left key, version), in key and version order (the lookups below then
        # walk the timelines in order)
        _, first = np.unique(keys * width + versions_at, return_index=True)
        keys, versions_at, source = keys[first], versions_at[first], source[first]

        def result(strict: bool):
            """Per pair, the left and right rows (indices, -1 for none) and whether a result row exists."""
            left_row = left_line.asof(keys, versions_at, strict)
            left_there = flag(left_present, left_row)
            pointed = np.where(left_there, at(fk_codes, left_row), -1)
            right_row = right_line.asof(pointed, versions_at, strict)
            right_there = flag(right_present, right_row)
            exists = left_there & (right_there | (spec.join_type == "left"))
            return left_row, np.where(right_there, right_row, -1), exists

        old_left, old_right, old_exists = result(strict=True)
        new_left, new_right, new_exists = result(strict=False)
        both = old_exists & new_exists
        both[both] = self._differ(lines, right_lines, old_left[both], new_left[both], old_right[both],
                                  new_right[both])
        inserted, deleted = new_exists & ~old_exists, old_exists & ~new_exists
        # the output's order: by version, then by key (each pair's rows together)
        span = int(keys.max()) + 1 if len(keys) else 1
        order = np.argsort(versions_at * span + keys) if width * span < (1 << 62) else np.lexsort((keys, versions_at))
        old_left, new_left, old_right, new_right = old_left[order], new_left[order], old_right[order], new_right[order]
        both, inserted, deleted, source = both[order], inserted[order], deleted[order], source[order]
        # each pair's rows: a preimage and a postimage where both results exist and differ, an
        # insert or a delete where one does
        count = both.astype(np.int64) * 2 + inserted + deleted
        pair = np.repeat(np.arange(len(keys)), count)
        second = np.zeros(len(pair), dtype=bool)
        second[1:] = pair[1:] == pair[:-1]
        is_new = inserted[pair] | second
        left_rows = np.where(is_new, new_left[pair], old_left[pair])
        right_rows = np.where(is_new, new_right[pair], old_right[pair])
        kind = np.where(both[pair], second.astype(np.int8), np.where(inserted[pair], 2, 3).astype(np.int8))
        image = self._images(lines, right_lines, left_rows, right_rows)
        values = together(lines[L.order_by], right_lines[R.order_by]).take(pa.array(source[pair]))
        arrays = image.columns + [pa.array([PREIMAGE, POSTIMAGE, INSERT, DELETE], pa.string()).take(pa.array(kind)),
                                  values]
        out = pa.Table.from_arrays([a.cast(f.type) for a, f in zip(arrays, self.output_schema)],
                                   schema=self.output_schema)
        return out, left_last, right_last

    def _differ(self, lines, right_lines, old_left, new_left, old_right, new_right):
        """Whether the result rows of two (left row, right row) pairs differ: rows at the same
        index are equal, so only the pairs whose indices differ compare values."""
        import numpy as np

        from sqlext.udfs.column_wise import differ, take

        differs = np.zeros(len(old_left), dtype=bool)
        for table, columns, old, new in ((lines, self.spec.left.data_columns, old_left, new_left),
                                         (right_lines, self.spec.right.data_columns, old_right, new_right)):
            moved = old != new
            if moved.any():
                data = table.select(list(columns))
                differs[moved] |= differ(take(data, old[moved]), take(data, new[moved]), data.column_names)
        return differs

    def _images(self, lines, right_lines, left_rows, right_rows):
        """The result rows of the left rows joined with the right rows (indices; -1: NULLs)."""
        import pyarrow as pa

        from sqlext.udfs.column_wise import take

        spec = self.spec
        left = take(lines.select(list(spec.left.data_columns)), left_rows)
        right = take(right_lines.select(list(spec.right.data_columns)), right_rows)
        names = spec.right_names
        return pa.Table.from_arrays(left.columns + right.columns,
                                    names=list(spec.left.data_columns) + [names[c] for c in spec.right.data_columns])

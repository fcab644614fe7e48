"""FK_JOIN over one increment of changes, column-wise over Arrow data.

An incremental run (:mod:`sqlext.streaming.operators.fk_join`) hands this the rows an earlier run left
for every key the increment can meet (the left rows of the changed left keys and of the left
keys subscribed to a changed right key, and the right rows those point at) and the new
changes of both inputs. It gives what the result forwards, as KIP-213's subscription/response
workflow forwards it when messages arrive in order:

* ``changes``: per left key and ordering value, the result row before and after the changes at
  that value, as the minimal change (an insert, an update pair, or a delete);
* ``records``: each record the workflow forwards (see :mod:`sqlext.functions.fk_join`);
* ``final``: nothing (the run rewrites its output from the states), only the states' new rows.

At equal ordering values the right change comes first, as in the batch function. A right
change reaches every left row subscribed to its key at that moment: every present left row
whose foreign key is that key. The foreign key of every row is computed by Spark beforehand
(the column ``foreign_key``). With ``sequence_by`` a change older (by its ``sequence_by``
value) than its key's latest applied change is left out first, as the batch function leaves
it out.

Keys and ordering values become dense integer codes and ranks
(:mod:`sqlext.udfs.column_wise`), so each lookup is a binary search over whole columns, never a
walk key by key.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlext.errors import SqlextError
from sqlext.functions.changes import DELETE, INSERT, POSTIMAGE, PREIMAGE, UPSERT, late_change
from sqlext.functions.fk_join import FUNCTION, FkJoinSpec
from sqlext.udfs.column_wise import (
    pairs_within, row_codes, value_codes, Timeline, at, check_rows, check_ties, differ, first_of_each, flag,
    leaves_row, ranks, replaced_deletes, take, together, without_preimages, without_repeats,
)


def join_increment(spec: FkJoinSpec, foreign_key: str, present_column: str, left, right, left_state, right_state,
                   highest, output_schema):
    """An increment's rows and new state, computed column-wise over Arrow data.

    ``left`` and ``right`` hold the increment's changes (the left ones with their foreign key in
    the column ``foreign_key``); ``left_state`` and ``right_state`` the rows an earlier run left
    for every key the increment can meet, in the states' columns (data, ordering value, the
    left's foreign key, and ``present_column``); ``highest`` the highest ordering value an
    earlier run processed. Returns the forwarded rows (``output_schema``) and the changed keys'
    new state rows of each input.

    A left key's result changes at a version where its own row changes or the right row it
    pointed at just before changes (KIP-213's subscription). For ``changes``, at each such
    (key, version) the result row before the version (every input's row as of the versions
    below it) is compared with the one after (as of the version itself): both inputs' changes
    at one version are applied before the result is read again. For ``records``, each left
    change forwards its own record and each right change one record per left row subscribed
    to its key just before it, each computed from the rows as of that moment."""
    return _JoinIncrement(spec, foreign_key, present_column, left, right, left_state, right_state, highest,
                          output_schema).run()


def checked_last(spec: FkJoinSpec, side: str, foreign_key: str, present_column: str, changes: pa.Table,
                 state: pa.Table, highest):
    """One input's changes checked as :func:`join_increment` checks them (the change-row rules,
    repeats, ties, ``[LATE_CHANGE]``, stale ``sequence_by`` changes left out) and what they leave:
    the changed keys' new state rows (what :func:`join_increment` gives for that input) and every
    key's row after them, among the keys of ``state`` (the rows earlier runs left for the changed
    keys) and of the changes. A key's last row depends only on its own rows, so an incremental
    run can compute it where the key's state lives, apart from the join: the left's to know the
    foreign key each left key points at after the increment (its subscription), the right's to
    keep the right state in the bucket of its key, whichever left rows subscribe to it."""
    shape = spec.left if side == "left" else spec.right
    increment = _JoinIncrement(spec, foreign_key, present_column, None, None, None, None, highest, None)
    kept, _ = increment._checked(shape, changes, state)
    if shape.sequence_by is None:
        increment._late(shape, kept)
    else:
        kept = increment._fresh(shape, kept, state)
    extra = (foreign_key,) if side == "left" else ()
    lines = pa.concat_tables([state, increment._as_state(kept, shape, state.schema, leaves_row(shape, kept), *extra)])
    if lines.num_rows == 0:
        return lines, lines
    codes, versions = row_codes([lines[k] for k in shape.key]), ranks(lines[shape.order_by])
    last = Timeline(codes, versions, int(versions.max()) + 2).last_of_each_key()
    new = np.arange(lines.num_rows) >= state.num_rows
    return lines.filter(pa.array(last & new)), lines.filter(pa.array(last))


def _differ(a: pa.Table, b: pa.Table, columns) -> np.ndarray:
    """:func:`sqlext.udfs.column_wise.differ` over columns that may be nested."""
    nested = [c for c in columns if pa.types.is_nested(a.schema.field(c).type)]
    differs = differ(a, b, [c for c in columns if c not in nested])
    for column in nested:
        both = value_codes(pa.concat_arrays([a[column].combine_chunks(), b[column].combine_chunks()]))
        differs |= both[:a.num_rows] != both[a.num_rows:]
    return differs


class _JoinIncrement:
    def __init__(self, spec, foreign_key, present_column, left, right, left_state, right_state, highest, output_schema):
        self.spec, self.fk, self.present_column, self.output_schema = spec, foreign_key, present_column, output_schema
        self.left, self.right = left, right
        self.left_state, self.right_state, self.highest = left_state, right_state, highest

    def _checked(self, shape, changes, state):
        """The changes without preimages, replaced deletes and the repeats of an input that
        repeats changes (``state``: the rows earlier runs left for their keys), after the checks
        of the change-row rules, and the codes of their keys."""
        check_rows(shape, changes)
        changes = without_repeats(shape, without_preimages(shape, changes), state, self.present_column)
        key_codes, order_ranks = row_codes([changes[k] for k in shape.key]), ranks(changes[shape.order_by])
        replaced = replaced_deletes(shape, changes, key_codes, order_ranks)
        if replaced.any():
            kept = ~replaced
            changes, key_codes, order_ranks = changes.filter(pa.array(kept)), key_codes[kept], order_ranks[kept]
        if shape.sequence_by is None:
            check_ties(shape, changes, key_codes, order_ranks)
        else:
            _check_ties_and_stamps(shape, changes, key_codes, order_ranks)
        return changes, key_codes

    def _late(self, shape, changes) -> None:
        """``[LATE_CHANGE]``: one order runs across both inputs, so a change at or below the
        highest ordering value processed can meet rows already forwarded."""
        late = self._late_rows(shape, changes)
        if late.any():
            self._raise_late(shape, changes, late)

    def _late_rows(self, shape, changes) -> np.ndarray:
        if self.highest is None or changes.num_rows == 0:
            return np.zeros(changes.num_rows, dtype=bool)
        late = pc.less_equal(changes[shape.order_by], pa.scalar(self.highest, changes.schema.field(shape.order_by).type))
        return np.asarray(pc.fill_null(late, False), dtype=bool)

    def _raise_late(self, shape, changes, late: np.ndarray):
        row = changes.take(pa.array(np.flatnonzero(late)[:1])).to_pylist()[0]
        raise late_change(FUNCTION, shape.key_text(row), shape.order_by, repr(row[shape.order_by]),
                          repr(self.highest), across_inputs=True)

    def _fresh(self, shape, changes, state):
        """``sequence_by``: the changes that are not stale, in their order. A change is stale
        when its ``sequence_by`` value is below the highest one of its key so far (its state
        row's, then its earlier changes'). A late change (at or below the highest ordering
        value processed) is ``[LATE_CHANGE]`` unless its state row says it is stale."""
        if changes.num_rows == 0:
            return changes
        seq, count = shape.sequence_by, state.num_rows
        key_codes = row_codes([together(state[k], changes[k]) for k in shape.key])
        stamps = ranks(together(state[seq], changes[seq]))  # from 1; the changes' are not NULL
        state_codes, change_codes, change_stamps = key_codes[:count], key_codes[count:], stamps[count:]
        dated = np.asarray(pc.is_valid(state[seq]), dtype=bool) if count else np.zeros(0, dtype=bool)
        bound = np.zeros(int(key_codes.max()) + 1, np.int64)  # each key's stamp before the changes (0: none)
        np.maximum.at(bound, state_codes[dated], stamps[:count][dated])
        late = self._late_rows(shape, changes)
        wrong = late & (change_stamps >= np.maximum(bound[change_codes], 1))
        if wrong.any():
            self._raise_late(shape, changes, wrong)
        # the others in key and version order, each against the highest stamp before it in its key
        rows = np.flatnonzero(~late)
        rows = rows[np.lexsort((ranks(changes[shape.order_by])[rows], change_codes[rows]))]
        keys, top = change_codes[rows], int(stamps.max()) + 1
        values, starts = keys * top + change_stamps[rows], keys * top + bound[keys]
        running = np.maximum.accumulate(np.maximum(values, starts))  # a later key starts above an earlier one
        before = starts.copy()
        same = keys[1:] == keys[:-1]
        before[1:][same] = running[:-1][same]
        return changes.take(pa.array(np.sort(rows[values >= before])))

    @staticmethod
    def _as_state(changes, shape, state_schema, present, *extra):
        arrays = [changes[c] for c in (*shape.data_columns, shape.order_by, *extra)] + [present]
        return pa.Table.from_arrays([a.cast(f.type) for a, f in zip(arrays, state_schema)], schema=state_schema)

    def run(self):
        spec, L, R = self.spec, self.spec.left, self.spec.right
        (left, left_codes), (right, _) = self._checked(L, self.left, self.left_state), \
            self._checked(R, self.right, self.right_state)
        if L.sequence_by is None:
            self._late(L, left)
            self._late(R, right)
        else:
            left, right = self._fresh(L, left, self.left_state), self._fresh(R, right, self.right_state)
        # each input's timeline: the rows earlier runs left, then the new changes
        lines = pa.concat_tables([self.left_state, self._as_state(left, L, self.left_state.schema, leaves_row(L, left),
                                                                   self.fk)])
        right_lines = pa.concat_tables([self.right_state,
                                        self._as_state(right, R, self.right_state.schema, leaves_row(R, right))])
        self.lines, self.right_lines = lines, right_lines
        self.left_new = np.arange(lines.num_rows) >= self.left_state.num_rows
        self.right_new = np.arange(right_lines.num_rows) >= self.right_state.num_rows
        # a first run's timeline is its changes: their key codes are already known
        self.left_codes = left_codes if self.left_state.num_rows == 0 and L.sequence_by is None \
            else row_codes([lines[k] for k in L.key])
        joinable = row_codes([together(right_lines[R.key[0]], lines[self.fk])])
        self.right_codes, self.fk_codes = joinable[:right_lines.num_rows], joinable[right_lines.num_rows:].copy()
        self.fk_codes[np.asarray(pc.is_null(lines[self.fk]), dtype=bool)] = -1
        versions = ranks(together(lines[L.order_by], right_lines[R.order_by]))
        self.left_versions, self.right_versions = versions[:lines.num_rows], versions[lines.num_rows:]
        self.width = width = int(versions.max()) + 2 if len(versions) else 2
        self.left_line = Timeline(self.left_codes, self.left_versions, width)
        self.right_line = Timeline(self.right_codes, self.right_versions, width)
        left_last = lines.filter(pa.array(self.left_line.last_of_each_key() & self.left_new))
        right_last = right_lines.filter(pa.array(self.right_line.last_of_each_key() & self.right_new))
        if spec.emit == "final":
            return self.output_schema.empty_table(), left_last, right_last
        self.left_present = np.asarray(pc.fill_null(lines[self.present_column], False), dtype=bool)
        self.right_present = np.asarray(pc.fill_null(right_lines[self.present_column], False), dtype=bool)
        out = self._records() if spec.emit == "records" else self._changes()
        return out, left_last, right_last

    def _subscribed_at(self, changes: np.ndarray):
        """The left rows subscribed to the key of each right change (indices into the right
        timeline) just before it: (left row, right change) pairs."""
        subscribed = np.flatnonzero(self.left_present & (self.fk_codes >= 0))
        if not len(subscribed) or not len(changes):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        until = self.left_line.next_rank(self.left_versions, never=self.width)[subscribed]
        row, change = pairs_within(self.fk_codes[subscribed], self.left_versions[subscribed], until,
                                   self.right_codes[changes], self.right_versions[changes])
        return subscribed[row], changes[change]

    # -- emit => 'changes': the result rows before and after each version

    def _changes(self):
        spec, L, R, lines, right_lines = self.spec, self.spec.left, self.spec.right, self.lines, self.right_lines
        left_codes, left_versions, width = self.left_codes, self.left_versions, self.width
        # the (left key, version) pairs whose result may change: each left change ...
        changed = np.flatnonzero(self.left_new)
        keys, versions_at, source = [left_codes[changed]], [left_versions[changed]], [changed]
        # ... and each right change at the left rows subscribed to its key just before it
        row, change = self._subscribed_at(np.flatnonzero(self.right_new))
        keys.append(left_codes[row])
        versions_at.append(self.right_versions[change])
        source.append(lines.num_rows + change)
        keys, versions_at, source = np.concatenate(keys), np.concatenate(versions_at), np.concatenate(source)
        # one pair per (left key, version), in key and version order (the lookups below then
        # walk the timelines in order)
        first = first_of_each(keys * width + versions_at)
        keys, versions_at, source = keys[first], versions_at[first], source[first]

        def pointed_by(left_row):
            there = flag(self.left_present, left_row)
            return there, np.where(there, at(self.fk_codes, left_row), -1)

        def result(left_there, right_row):
            """Per pair, the right row (an index, -1 for none) and whether a result row exists."""
            right_there = flag(self.right_present, right_row)
            return np.where(right_there, right_row, -1), left_there & (right_there | (spec.join_type == "left"))

        # the rows before each version and at it; the right rows by one search where the left
        # row before and the one at the version point at the same key (nearly always)
        old_left, new_left = self.left_line.around(keys, versions_at)
        (old_there, old_pointed), (new_there, new_pointed) = pointed_by(old_left), pointed_by(new_left)
        old_right, new_right = self.right_line.around(new_pointed, versions_at)
        moved = old_pointed != new_pointed
        if moved.any():
            old_right[moved] = self.right_line.asof(old_pointed[moved], versions_at[moved], strict=True)
        old_right, old_exists = result(old_there, old_right)
        new_right, new_exists = result(new_there, new_right)
        both = old_exists & new_exists
        both[both] = self._result_differs(old_left[both], new_left[both], old_right[both], new_right[both])
        inserted, deleted = new_exists & ~old_exists, old_exists & ~new_exists
        # the pairs that forward rows: a preimage and a postimage where both results exist and
        # differ, an insert or a delete where one does. Each pair's first row is its old result
        # (the new one for an insert), its second (after a preimage) the new one
        emits = np.flatnonzero(both | inserted | deleted)
        first_left = np.where(inserted, new_left, old_left)[emits]
        first_right = np.where(inserted, new_right, old_right)[emits]
        keys, versions_at, source, both, inserted, new_left, new_right = \
            (a[emits] for a in (keys, versions_at, source, both, inserted, new_left, new_right))
        # the output's order: by version, then by key (each pair's rows together)
        span = int(keys.max()) + 1 if len(keys) else 1
        order = np.argsort(versions_at * span + keys) if width * span < (1 << 62) else np.lexsort((keys, versions_at))
        first_left, first_right, new_left, new_right, both, inserted, source = \
            (a[order] for a in (first_left, first_right, new_left, new_right, both, inserted, source))
        count = both.astype(np.int64) + 1
        seconds = (np.cumsum(count) - 1)[both]  # where each pair's second row lands
        left_rows, right_rows = np.repeat(first_left, count), np.repeat(first_right, count)
        left_rows[seconds], right_rows[seconds] = new_left[both], new_right[both]
        kind = np.repeat(np.where(both, 0, np.where(inserted, 2, 3)).astype(np.int8), count)
        kind[seconds] = 1
        source = np.repeat(source, count)
        image = self._images(left_rows, right_rows)
        values = together(lines[L.order_by], right_lines[R.order_by]).take(pa.array(source))
        return self._output(image, pa.array([PREIMAGE, POSTIMAGE, INSERT, DELETE], pa.string()).take(pa.array(kind)),
                            values)

    # -- emit => 'records': what KIP-213's workflow forwards, record by record

    def _records(self):
        """Each left change forwards the joined row (a tombstone where the result has no row
        and the key had a left row just before, nothing where it had none); each right change,
        but the delete of an absent row, forwards every left row subscribed to its key just
        before it, joined with the new right row (a tombstone for an inner join's delete). A
        left change reads the right rows after the right changes at its version."""
        spec, L, R, lines, right_lines = self.spec, self.spec.left, self.spec.right, self.lines, self.right_lines
        padded = spec.join_type == "left"
        # the left changes
        changed = np.flatnonzero(self.left_new)
        versions = self.left_versions[changed]
        had = flag(self.left_present, self.left_line.asof(self.left_codes[changed], versions, strict=True))
        right_row = self.right_line.asof(self.fk_codes[changed], versions, strict=False)
        right_there = flag(self.right_present, right_row)
        joined = self.left_present[changed] & (right_there | padded)
        forwards = joined | had
        changed, joined, right_row, right_there = changed[forwards], joined[forwards], right_row[forwards], \
            right_there[forwards]
        left_records = (changed, np.where(joined, changed, -1), np.where(joined & right_there, right_row, -1),
                        joined, self.left_versions[changed], np.ones(len(changed), np.int64),
                        np.zeros(len(changed), np.int64), changed)
        # the right changes that forward: all but the delete of an absent row
        changes = np.flatnonzero(self.right_new)
        there_before = flag(self.right_present, self.right_line.asof(self.right_codes[changes],
                                                                     self.right_versions[changes], strict=True))
        row, change = self._subscribed_at(changes[there_before | self.right_present[changes]])
        sets = self.right_present[change]
        joined = sets | padded
        right_records = (row, np.where(joined, row, -1), np.where(sets, change, -1), joined,
                         self.right_versions[change], np.zeros(len(row), np.int64), change,
                         lines.num_rows + change)
        # in forwarding order: by version, the right changes' records first, each right
        # change's together, then by left key
        key_rows, left_rows, right_rows, upserts, versions, side, cause, source = \
            [np.concatenate(parts) for parts in zip(left_records, right_records)]
        order = np.lexsort((self.left_codes[key_rows], cause, side, versions))
        key_rows, left_rows, right_rows, upserts, source = \
            key_rows[order], left_rows[order], right_rows[order], upserts[order], source[order]
        image = self._images(left_rows, right_rows)
        for key in L.key:  # a tombstone carries its key
            image = image.set_column(image.schema.get_field_index(key), key,
                                     lines[key].take(pa.array(key_rows)))
        kinds = pa.array([DELETE, UPSERT], pa.string()).take(pa.array(upserts.astype(np.int8)))
        values = together(lines[L.order_by], right_lines[R.order_by]).take(pa.array(source))
        return self._output(image, kinds, values)

    # -- the result rows

    def _output(self, image: pa.Table, kinds: pa.Array, values: pa.Array) -> pa.Table:
        arrays = image.columns + [kinds, values]
        return pa.Table.from_arrays([a.cast(f.type) for a, f in zip(arrays, self.output_schema)],
                                    schema=self.output_schema)

    def _result_differs(self, old_left, new_left, old_right, new_right):
        """Whether the result rows of two (left row, right row) pairs differ: rows at the same
        index are equal, so only the pairs whose indices differ compare values."""
        differs = np.zeros(len(old_left), dtype=bool)
        for table, columns, old, new in ((self.lines, self.spec.left.data_columns, old_left, new_left),
                                         (self.right_lines, self.spec.right.data_columns, old_right, new_right)):
            moved = old != new
            if moved.any():
                data = table.select(list(columns))
                differs[moved] |= _differ(take(data, old[moved]), take(data, new[moved]), data.column_names)
        return differs

    def _images(self, left_rows, right_rows):
        """The result rows of the left rows joined with the right rows (indices; -1: NULLs)."""
        spec = self.spec
        left = take(self.lines.select(list(spec.left.data_columns)), left_rows)
        right = take(self.right_lines.select(list(spec.right.data_columns)), right_rows)
        names = spec.right_names
        return pa.Table.from_arrays(left.columns + right.columns,
                                    names=list(spec.left.data_columns) + [names[c] for c in spec.right.data_columns])


def _check_ties_and_stamps(shape, changes, key_codes: np.ndarray, order_ranks: np.ndarray) -> None:
    """With ``sequence_by``: ``[AMBIGUOUS_ORDER]`` for two changes of one key at one ordering
    value, ``[NULL_SEQUENCE_VALUE]`` for a change without a ``sequence_by`` value; of several,
    the error of the key that comes first in the increment, a tie before a NULL value."""
    if not len(key_codes):
        return
    order = np.lexsort((np.arange(len(key_codes)), order_ranks, key_codes))
    tied = np.zeros(len(key_codes), dtype=bool)
    tied[order[1:]] = (key_codes[order][1:] == key_codes[order][:-1]) & (order_ranks[order][1:] == order_ranks[order][:-1])
    undated = np.asarray(pc.is_null(changes[shape.sequence_by]), dtype=bool)
    if not (tied.any() or undated.any()):
        return
    keys, first = np.unique(key_codes, return_index=True)
    wrong = np.isin(keys, key_codes[tied | undated])
    key = keys[wrong][np.argmin(first[wrong])]
    tied_rows = order[tied[order] & (key_codes[order] == key)]  # in the key's order
    if len(tied_rows):
        row = changes.take(pa.array(tied_rows[:1])).to_pylist()[0]
        raise SqlextError("AMBIGUOUS_ORDER", function=shape.function, key=shape.key_text(row),
                          order_by=shape.order_by, value=repr(row[shape.order_by]))
    row = changes.take(pa.array(np.flatnonzero(undated & (key_codes == key))[:1])).to_pylist()[0]
    raise SqlextError("NULL_SEQUENCE_VALUE", function=shape.function, key=shape.key_text(row),
                      sequence_by=shape.sequence_by)

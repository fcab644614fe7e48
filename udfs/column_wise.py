"""The change-row rules over whole Arrow tables, for the steps that apply an increment
column-wise (CHANGELOG_FILTER's and FK_JOIN's incremental runs): the data errors an input can
hold, which changes leave a row, NULL-safe equality, and keys and ordering values as dense
integers, so that "the row of key k as of version t" is a binary search in one sorted array.

The per-key reference logic (:func:`sqlext.functions.changes.changes_by_key` and the functions'
replays) says what each rule means; these say the same over columns and raise the same errors.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlext.errors import SqlextError
from sqlext.functions.changes import CHANGE_TYPE, CHANGE_TYPES, PREIMAGE, SETS_VALUE, DELETE, INSERT, POSTIMAGE

# what a column-wise step cannot take (a key or ordering type Arrow cannot hash or sort); the
# caller then runs the per-key reference logic, which raises the errors
NOT_COLUMN_WISE = (pa.ArrowNotImplementedError, pa.ArrowTypeError, pa.ArrowInvalid)


def check_rows(shape, changes: pa.Table) -> None:
    """The data errors of the change-row rules over a whole increment: an unknown change type,
    a NULL ordering value."""
    if shape.has_change_type:
        known = pc.fill_null(pc.is_in(changes[CHANGE_TYPE], value_set=pa.array(list(CHANGE_TYPES))), False)
        if pc.any(pc.invert(known)).as_py():
            row = changes.filter(pc.invert(known)).slice(0, 1).to_pylist()[0]
            raise SqlextError("UNKNOWN_CHANGE_TYPE", function=shape.function, key=shape.key_text(row),
                              value=repr(row[CHANGE_TYPE]))
    if changes[shape.order_by].null_count:
        row = changes.filter(pc.is_null(changes[shape.order_by])).slice(0, 1).to_pylist()[0]
        raise SqlextError("NULL_ORDER_VALUE", function=shape.function, key=shape.key_text(row),
                          order_by=shape.order_by)


def without_preimages(shape, changes: pa.Table) -> pa.Table:
    """An ``update_preimage`` carries nothing the state does not know."""
    if not shape.has_change_type or changes.num_rows == 0:
        return changes
    preimages = pc.fill_null(pc.equal(changes[CHANGE_TYPE], PREIMAGE), False)
    if not pc.any(preimages).as_py():  # none (an upsert feed, a history netted): no copy
        return changes
    return changes.filter(pc.invert(preimages))


def leaves_row(shape, changes: pa.Table) -> pa.Array:
    """Whether each change leaves its key with a row: an insert or postimage of a change feed,
    a row of an upsert log with a value."""
    if shape.has_change_type:
        return pc.fill_null(pc.is_in(changes[CHANGE_TYPE], value_set=pa.array(list(SETS_VALUE))), False) \
            .combine_chunks() if changes.num_rows else pa.array([], pa.bool_())
    leaves = pa.array(np.zeros(changes.num_rows, dtype=bool))
    for column in shape.tombstone_columns:
        leaves = pc.or_(leaves, pc.is_valid(changes[column]))
    return leaves.combine_chunks() if isinstance(leaves, pa.ChunkedArray) else leaves


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted: as ``np.unique``, which in numpy 2.4 costs many times a
    sort."""
    ordered = np.sort(values)
    return ordered[run_starts(ordered)]


def run_starts(ordered: np.ndarray) -> np.ndarray:
    """Where each run of equal values of sorted ``ordered`` starts."""
    starts = np.ones(len(ordered), dtype=bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    return starts


def first_of_each(values: np.ndarray) -> np.ndarray:
    """The index of one row of each distinct value, in the values' order: as
    ``np.unique(values, return_index=True)[1]`` (which spends most of its time in a stable sort
    that keeps the first of equal rows), for callers to which the rows of one value are alike."""
    order = np.argsort(values)
    return order[run_starts(values[order])]


# below this many, an unsorted search costs less than sorting what it looks for
SORT_QUERIES_FROM = 1 << 14


def search_order(queries: np.ndarray) -> np.ndarray | None:
    """The order :func:`search` takes ``queries`` in: None where they are few or already
    sorted, else the permutation that sorts them."""
    if len(queries) < SORT_QUERIES_FROM or bool((queries[1:] >= queries[:-1]).all()):
        return None
    return np.argsort(queries)


def search(ordered: np.ndarray, queries: np.ndarray, side: str = "left", order=False) -> np.ndarray:
    """``np.searchsorted(ordered, queries, side)``, quicker for many queries in no order: a
    binary search per query jumps across all of ``ordered``, while queries taken in sorted order
    walk it once, which costs less than sorting them. The
    queries are taken in ``order`` (:func:`search_order`, which several searches of the same or
    nearly the same queries share), worked out here where not given."""
    order = search_order(queries) if order is False else order
    if order is None or not len(ordered):
        return np.searchsorted(ordered, queries, side=side)
    found = np.empty(len(queries), np.int64)
    found[order] = np.searchsorted(ordered, queries[order], side=side)
    return found


def same_value(a, b):
    """Equal, NULL equal to NULL (NaN equal to NaN is not needed: keys compare as Spark groups)."""
    both_null = pc.and_(pc.is_null(a), pc.is_null(b))
    return pc.or_(pc.fill_null(pc.equal(a, b), False), both_null)


def differ(a: pa.Table, b: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """Row by row, whether two tables of equal length differ in any of ``columns`` (NULL equal
    to NULL: :func:`same_value`)."""
    differs = np.zeros(a.num_rows, dtype=bool)
    for column in columns:
        differs |= ~np.asarray(same_value(a[column], b[column]), dtype=bool)
    return differs


def codes(columns: Sequence) -> np.ndarray:
    """Dense integer codes of the rows of one or several key columns (Arrow arrays of equal
    length): equal keys, NULL equal to NULL, get equal codes; 0 is the all-NULL key of one column."""
    code = None
    for column in columns:
        column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        encoded = pc.dictionary_encode(column)
        indices = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64) + 1
        code = indices if code is None else renumbered(code * (len(encoded.dictionary) + 1) + indices)
    return code if code is not None else np.zeros(0, np.int64)


def renumbered(values: np.ndarray) -> np.ndarray:
    """Integers renumbered from 0 in their order, equal ones alike: as
    ``np.unique(values, return_inverse=True)[1]``, by one sort (see :func:`sorted_unique`)."""
    order = np.argsort(values)
    dense = np.empty(len(values), np.int64)
    dense[order] = np.cumsum(run_starts(values[order])) - 1
    return dense


def combined_codes(parts: Sequence[np.ndarray]) -> np.ndarray:
    """Dense codes of the rows of several integer code arrays taken together."""
    code = parts[0]
    for part in parts[1:]:
        code = renumbered(code * (int(part.max(initial=0)) + 1) + part)
    return code


def value_codes(array) -> np.ndarray:
    """Dense integer codes of the values of one column, nested ones (structs, lists, maps)
    included: equal values (NULL equal to NULL) get equal codes. Arrow hashes flat values only,
    so a struct is coded by its fields and a list by its length and its items' codes."""
    array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
    kind = array.type
    if not pa.types.is_nested(kind):
        return codes([array])
    if len(array) == 0:
        return np.zeros(0, np.int64)
    valid = np.asarray(array.is_valid(), dtype=bool).astype(np.int64)
    if pa.types.is_struct(kind):  # a field under a NULL struct is NULL (flatten)
        return combined_codes([valid] + [value_codes(field) for field in array.flatten()])
    if pa.types.is_map(kind):
        array = array.cast(pa.list_(pa.struct([kind.key_field, kind.item_field])))
    lengths = np.asarray(pc.fill_null(pc.list_value_length(array), 0), dtype=np.int64)
    items = value_codes(array.flatten()) + 1  # a NULL list holds no items
    table = np.zeros((len(array), int(lengths.max(initial=0))), np.int64)
    row = np.repeat(np.arange(len(array)), lengths)
    table[row, np.arange(len(row)) - np.repeat(np.cumsum(lengths) - lengths, lengths)] = items
    return np.unique(np.column_stack([valid, lengths, table]), axis=0, return_inverse=True)[1] \
        .reshape(-1).astype(np.int64)


def row_codes(columns: Sequence) -> np.ndarray:
    """:func:`codes` of columns that may be nested (:func:`value_codes`)."""
    columns = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in columns]
    if not any(pa.types.is_nested(c.type) for c in columns):
        return codes(columns)
    return combined_codes([value_codes(c) for c in columns])


def ranks(values) -> np.ndarray:
    """Dense ranks (from 1) of ordering values: equal values, equal ranks; NULLs (which the
    rules refuse before this) last."""
    values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if len(values) == 0:
        return np.zeros(0, np.int64)
    return pc.rank(values, sort_keys="ascending", tiebreaker="dense") \
        .to_numpy(zero_copy_only=False).astype(np.int64)


def replaced_deletes(shape, changes: pa.Table, key_codes: np.ndarray, order_ranks: np.ndarray) -> np.ndarray:
    """Which changes are the ``delete`` of a key that has exactly a ``delete`` and an ``insert``
    at one ordering value (preimages already left out): a commit that removed the key's row and
    added it changed, as Delta writes a commit without change data files. The delete comes
    first (Delta's protocol), so the insert is the key's change there and the delete is left
    out, as a preimage is (:func:`sqlext.functions.changes.without_replaced_delete` says it key
    by key); other changes sharing a value are left for :func:`check_ties`."""
    none = np.zeros(changes.num_rows, dtype=bool)
    if not shape.has_change_type or changes.num_rows < 2:
        return none
    kinds = changes[CHANGE_TYPE]
    deletes = np.asarray(pc.fill_null(pc.equal(kinds, DELETE), False), dtype=bool)
    inserts = np.asarray(pc.fill_null(pc.equal(kinds, INSERT), False), dtype=bool)
    if not (deletes.any() and inserts.any()):
        return none
    both = renumbered(key_codes * (int(order_ranks.max()) + 1) + order_ranks)  # one code per key and value
    peers = np.bincount(both)
    inserted = np.bincount(both, weights=inserts)
    return deletes & (peers[both] == 2) & (inserted[both] == 1)


def without_repeats(shape, changes: pa.Table, state: pa.Table, present: str) -> pa.Table:
    """The changes without those an input that repeats changes (``shape.repeats``: Debezium's
    events, sent again by a connector that restarts) holds again: a change identical to an
    earlier one of the increment (its key, ordering value, change type and values), and one
    identical to its key's change an earlier run applied (the ``state`` row of its key, holding
    the ordering value, the values and whether the key has a row, ``present``). The same
    position with other content stays, for the rules to refuse (at the position of the key's
    applied change, ``[AMBIGUOUS_ORDER]`` here, as in one input); a copy of a change older than
    its key's last (which the state does not keep) stays too, and is a late change."""
    if not shape.repeats or changes.num_rows == 0:
        return changes
    columns = [c for c in shape.columns if c in changes.column_names]
    kept = np.zeros(changes.num_rows, dtype=bool)
    kept[first_of_each(row_codes([changes[c] for c in columns]))] = True
    if state.num_rows:
        count = state.num_rows
        keys = row_codes([together(state[k], changes[k]) for k in shape.key])
        at = np.full(int(keys.max()) + 1, -1, np.int64)
        at[keys[:count]] = np.arange(count)  # a state holds one row per key
        found = at[keys[count:]]
        met = np.flatnonzero(kept & (found >= 0))
        if len(met):
            before = state.take(pa.array(found[met]))
            now = changes.take(pa.array(met))
            def equal(column) -> np.ndarray:
                both = value_codes(together(before[column], now[column]))
                return both[:len(met)] == both[len(met):]

            at_position = equal(shape.order_by)
            same = at_position & (np.asarray(pc.fill_null(before[present], False), dtype=bool)
                                  == np.asarray(leaves_row(shape, now), dtype=bool))
            for column in shape.data_columns:
                same &= equal(column)
            other = at_position & ~same
            if other.any() and shape.sequence_by is None:
                row = now.slice(int(np.argmax(other)), 1).to_pylist()[0]
                raise SqlextError("AMBIGUOUS_ORDER", function=shape.function, key=shape.key_text(row),
                                  order_by=shape.order_by, value=repr(row[shape.order_by]))
            kept[met[same]] = False
    return changes if kept.all() else changes.filter(pa.array(kept))


def check_ties(shape, changes: pa.Table, key_codes: np.ndarray, order_ranks: np.ndarray) -> None:
    """``[AMBIGUOUS_ORDER]``: two changes of one key at one ordering value (preimages already
    left out: a preimage and its postimage share a version and are not a tie)."""
    if len(key_codes) < 2:
        return
    both = key_codes * (int(order_ranks.max()) + 1) + order_ranks
    ordered = np.sort(both)
    tied = ordered[1:][ordered[1:] == ordered[:-1]]
    if len(tied):
        row = changes.take(pa.array(np.nonzero(both == tied[0])[0][1:2])).to_pylist()[0]  # the later of the two
        raise SqlextError("AMBIGUOUS_ORDER", function=shape.function, key=shape.key_text(row),
                          order_by=shape.order_by, value=repr(row[shape.order_by]))


def common_type(*types: pa.DataType) -> pa.DataType:
    """One type the values of several columns compare in (a key and the foreign keys that
    point at it; the ordering columns of two inputs): integers as BIGINT, numbers as DOUBLE,
    else the first column's type."""
    if all(t == types[0] for t in types):
        return types[0]
    if all(pa.types.is_integer(t) for t in types):
        return pa.int64()
    if all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in types):
        return pa.float64()
    return types[0]


def together(*arrays) -> pa.Array:
    """Several columns one after another, in one type (:func:`common_type`)."""
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    kind = common_type(*[a.type for a in arrays])
    return pa.concat_arrays([a.cast(kind, safe=False) for a in arrays])


class Timeline:
    """The rows of one keyed input in key and version order (codes and ranks precomputed), to
    find each key's row as of a version: ``asof(keys, versions, strict)`` gives the index of the
    row with the newest version below (``strict``) or at each version, or -1."""

    def __init__(self, key_codes: np.ndarray, order_ranks: np.ndarray, width: int):
        self.width = width
        sortable = key_codes * width + order_ranks
        self.order = np.argsort(sortable, kind="stable")
        self.sorted = sortable[self.order]
        self.sorted_codes = key_codes[self.order]
        self.unique = not bool((self.sorted[1:] == self.sorted[:-1]).any())

    def asof(self, key_codes: np.ndarray, order_ranks: np.ndarray, strict: bool) -> np.ndarray:
        if len(self.sorted) == 0 or len(key_codes) == 0:
            return np.full(len(key_codes), -1, np.int64)
        position = search(self.sorted, key_codes * self.width + order_ranks, "left" if strict else "right") - 1
        return self._row(position, key_codes)

    def around(self, key_codes: np.ndarray, order_ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Both answers of :meth:`asof`: the row before each version, and the row at or before
        it, by one search where each key has a version once (the row at the version, if there
        is one, is then right after the row before it)."""
        if len(self.sorted) == 0 or len(key_codes) == 0:
            none = np.full(len(key_codes), -1, np.int64)
            return none, none.copy()
        wanted = key_codes * self.width + order_ranks
        order = search_order(wanted)
        at = search(self.sorted, wanted, "right", order) - 1
        if self.unique:
            before = at - ((at >= 0) & (self.sorted[np.maximum(at, 0)] == wanted))
        else:
            before = search(self.sorted, wanted, "left", order) - 1
        return self._row(before, key_codes), self._row(at, key_codes)

    def _row(self, position: np.ndarray, key_codes: np.ndarray) -> np.ndarray:
        """The row at each sorted position that holds the key asked for; -1 elsewhere."""
        clipped = np.maximum(position, 0)
        found = (position >= 0) & (self.sorted_codes[clipped] == key_codes) & (key_codes >= 0)
        return np.where(found, self.order[clipped], -1)

    def last_of_each_key(self) -> np.ndarray:
        """A mask over the rows (in their own order): the newest row of its key."""
        last_sorted = np.ones(len(self.sorted), dtype=bool)
        last_sorted[:-1] = self.sorted_codes[1:] != self.sorted_codes[:-1]
        mask = np.zeros(len(self.sorted), dtype=bool)
        mask[self.order[last_sorted]] = True
        return mask

    def next_rank(self, order_ranks: np.ndarray, never: int) -> np.ndarray:
        """The version of the row after each row in its key (``never`` for a key's newest row)."""
        following = np.full(len(self.sorted), never, np.int64)
        same = self.sorted_codes[1:] == self.sorted_codes[:-1]
        following[:-1] = np.where(same, order_ranks[self.order[1:]], never)
        out = np.empty(len(self.sorted), np.int64)
        out[self.order] = following
        return out


def flag(values: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``values`` (booleans) at ``indices``; False at -1."""
    if len(values) == 0:
        return np.zeros(len(indices), dtype=bool)
    return (indices >= 0) & values[np.maximum(indices, 0)]


def at(values: np.ndarray, indices: np.ndarray, missing: int = -1) -> np.ndarray:
    """``values`` (integers) at ``indices``; ``missing`` at -1."""
    if len(values) == 0:
        return np.full(len(indices), missing, values.dtype)
    return np.where(indices >= 0, values[np.maximum(indices, 0)], missing)


def take(table: pa.Table, indices: np.ndarray) -> pa.Table:
    """The rows at ``indices`` (-1: a row of NULLs)."""
    missing = indices < 0
    if not table.num_rows:
        return pa.Table.from_arrays([pa.nulls(len(indices), f.type) for f in table.schema], schema=table.schema)
    chosen = pa.array(np.where(missing, 0, indices), mask=missing if missing.any() else None)
    return table.take(chosen)  # a NULL index takes a row of NULLs


def net_changes(changes: pa.Table, keys: Sequence[str], order_by: str) -> pa.Table:
    """A change feed's net effect per key, as a minimal change feed: what a reader of the
    table it describes sees between before the first change and after the last.

    A key's first change says whether it had a row before (an ``update_preimage`` or a
    ``delete`` carries that row), its last whether it has one after (an ``insert`` or an
    ``update_postimage`` carries it). A key with a row before and after, the two different,
    gives a preimage and a postimage; one with a row only after an insert, only before a
    delete; otherwise nothing. Every row takes the ordering value of the key's last change.
    The changes' order within a key is their ordering value, then their place in ``changes``
    (a preimage before its postimage)."""
    count = changes.num_rows
    if count == 0:
        return changes
    key_codes = codes([changes[k] for k in keys])
    order_ranks = ranks(changes[order_by])
    order = np.lexsort((np.arange(count), order_ranks, key_codes))
    edge = key_codes[order][1:] != key_codes[order][:-1]
    first, last = order[np.r_[True, edge]], order[np.r_[edge, True]]
    kinds = changes[CHANGE_TYPE]
    before = np.asarray(pc.fill_null(pc.is_in(kinds.take(pa.array(first)), value_set=pa.array([PREIMAGE, DELETE])),
                                     False), dtype=bool)
    after = np.asarray(pc.fill_null(pc.is_in(kinds.take(pa.array(last)), value_set=pa.array(list(SETS_VALUE))),
                                    False), dtype=bool)
    both = before & after
    if both.any():
        old, new = changes.take(pa.array(first[both])), changes.take(pa.array(last[both]))
        both[both] = differ(old, new, [c for c in changes.column_names if c not in (CHANGE_TYPE, order_by)])
    pieces = [(first, both, PREIMAGE), (last, both, POSTIMAGE), (last, after & ~before, INSERT),
              (first, before & ~after, DELETE)]
    # the key's rows in order: its preimage, then its postimage
    rows = np.concatenate([np.flatnonzero(chosen) for _, chosen, _ in pieces])
    which = np.concatenate([np.full(int(chosen.sum()), i) for i, (_, chosen, _) in enumerate(pieces)])
    arranged = np.lexsort((which, rows))
    rows, which = rows[arranged], which[arranged]
    source = np.choose(which, [first[rows], last[rows], last[rows], first[rows]])
    kind = pa.array([kind for _, _, kind in pieces], pa.string()).take(pa.array(which))
    if len(source) == count and (np.bincount(source, minlength=count) == 1).all() \
            and np.array_equal(order_ranks[source], order_ranks[last[rows]]) \
            and pc.all(pc.fill_null(pc.equal(kinds.take(pa.array(source)), kind), False)).as_py():
        return changes  # each row is already its key's net change (the common case): no copy
    net = changes.take(pa.array(source))
    net = net.set_column(net.schema.get_field_index(CHANGE_TYPE), CHANGE_TYPE,
                         kind.cast(changes.schema.field(CHANGE_TYPE).type))
    return net.set_column(net.schema.get_field_index(order_by), order_by,
                          changes[order_by].take(pa.array(last[rows])))


def pairs_within(row_keys: np.ndarray, starts: np.ndarray, ends: np.ndarray, other_keys: np.ndarray,
                 values: np.ndarray, limit: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """The (row, other) index pairs with equal keys (non-negative integer codes) where
    ``starts[row] < values[other] <= ends[row]`` (integers): a row and the others of its key
    within its span, as a left row and the right changes it met, or an event and the events of
    its key within a band. The others are sorted once by key and value and each row finds its
    span by a binary search, so the work follows the pairs found, not rows times others of a
    key. Rows come in order; a row's others in order of value, then place. None when there
    are more than ``limit`` pairs (counted before any is made)."""
    if len(row_keys) == 0 or len(other_keys) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    base = min(int(values.min()), int(starts.min()))
    width = max(int(values.max()), int(ends.max())) - base + 2
    if (int(max(row_keys.max(), other_keys.max())) + 2) * width >= (1 << 62):  # too wide for one integer
        pairs = pa.table({"k": row_keys, "row": np.arange(len(row_keys))}).join(
            pa.table({"k": other_keys, "other": np.arange(len(other_keys))}), keys="k", join_type="inner")
        row = pairs["row"].to_numpy().astype(np.int64)
        other = pairs["other"].to_numpy().astype(np.int64)
        valid = (starts[row] < values[other]) & (values[other] <= ends[row])
        row, other = row[valid], other[valid]
        if limit is not None and len(row) > limit:
            return None
        order = np.lexsort((other, values[other], row))
        return row[order], other[order]
    placed = other_keys.astype(np.int64) * width + (values - base)
    order = np.argsort(placed, kind="stable")
    placed = placed[order]
    lows = row_keys * width + np.maximum(starts - base, -1)
    asked = search_order(lows)  # a row's end is near its start: one order serves both searches
    low = search(placed, lows, "right", asked)
    high = search(placed, row_keys * width + np.minimum(ends - base, width - 1), "right", asked)
    count = np.maximum(high - low, 0)
    if limit is not None and int(count.sum()) > limit:
        return None
    row = np.repeat(np.arange(len(row_keys), dtype=np.int64), count)
    offsets = np.arange(len(row)) - np.repeat(np.cumsum(count) - count, count)
    return row, order[np.repeat(low, count) + offsets]

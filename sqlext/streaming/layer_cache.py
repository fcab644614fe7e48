"""The layers of keyed states a process keeps in its memory between batches (:data:`LAYERS`,
:data:`CACHE_BYTES` in all on the driver, a share of the task's budget in an executor's Python
worker; the least recently used dropped first), with the
sorted indexes built over their columns (:class:`Index`), as Spark's own state stores keep the
loaded version of their state between micro-batches. A layer is immutable once committed; a
layer written again (a replayed batch) has new files, which the cache tells by their names,
sizes and times."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlext.storage import Folder
from sqlext.streaming.keyed_rows import as_numbers
from sqlext.udfs.column_wise import sorted_unique


def _cache_bytes() -> int:
    """A quarter of the machine's memory, at most 4 GB: a state of 10M keys (two layers of a few
    hundred MB and their indexes) stays in memory on a 16 GB machine."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        memory = 4 * 1024 ** 3  # no sysconf (Windows): assume a small machine
    return min(4 * 1024 ** 3, memory // 4)


# the layers kept in the driver's memory between batches, in Arrow bytes
CACHE_BYTES = _cache_bytes()


def same_columns(one: pa.Schema, other: pa.Schema) -> bool:
    return one.names == other.names and one.types == other.types


class Layers:
    """The layers in memory, by folder, each with the folder's identity when it was read and
    the sorted indexes built over its columns (:class:`Index`). The bytes they hold are kept
    as a running total, so that keeping one more layer costs the same however many are kept.
    The queries of a process run their batches in threads of their own: one lock keeps the
    entries and the total together."""

    def __init__(self):
        self.tables: OrderedDict[str, tuple[tuple, pa.Table, dict]] = OrderedDict()
        self.sizes: dict[str, int] = {}
        self.total = 0
        self.limit = CACHE_BYTES  # the bytes kept in all
        self.lock = threading.RLock()

    def keep_within(self, limit: int) -> None:
        """Keep at most ``limit`` bytes from now on (an executor's Python worker keeps a share of
        a task's memory budget, not of the machine's), the least recently used dropped now."""
        with self.lock:
            self.limit = int(limit)
            self._shrink()

    def get(self, folder: Folder) -> pa.Table | None:
        entry = self._entry(folder)
        return None if entry is None else entry[1]

    def _entry(self, folder: Folder):
        identity = folder.identity()  # the folder listed outside the lock
        with self.lock:
            entry = self.tables.get(folder.uri)
            if entry is None or entry[0] != identity:
                return None
            self.tables.move_to_end(folder.uri)
            return entry

    def put(self, folder: Folder, table: pa.Table, identity: tuple | None = None) -> None:
        identity = folder.identity() if identity is None else identity
        size = table.nbytes
        with self.lock:
            self.forget(folder)
            if not identity or size > self.limit:
                return
            self.tables[folder.uri] = (identity, table, {})
            self._grow(folder.uri, size)

    def _grow(self, uri: str, size: int) -> None:
        with self.lock:
            self.sizes[uri] = self.sizes.get(uri, 0) + size
            self.total += size
            self._shrink(1)

    def _shrink(self, keep: int = 0) -> None:
        """Drop the least recently used layers until the total is within the limit (keeping the
        newest ``keep``)."""
        with self.lock:
            while len(self.tables) > keep and self.total > self.limit:
                oldest, _ = self.tables.popitem(last=False)
                self.total -= self.sizes.pop(oldest, 0)

    def lookup(self, folder: Folder, column: str, values) -> np.ndarray | None:
        """The positions of the rows of the layer in memory whose ``column`` is among ``values``
        (NULL among them matching NULL), by its sorted index; None where the layer is not in
        memory or the column's type has no index (text: the caller scans)."""
        entry = self._entry(folder)
        if entry is None:
            return None
        indexes = entry[2]
        index = indexes.get(column)
        if index is None:
            index = Index.of(entry[1][column])
            if index is None:
                return None
            with self.lock:  # counted while the layer is kept, once (another thread may have been quicker)
                if column not in indexes and self.tables.get(folder.uri) is entry:
                    indexes[column] = index
                    self._grow(folder.uri, index.nbytes)
        return index.rows(values)

    def forget(self, folder: Folder) -> None:
        with self.lock:
            if self.tables.pop(folder.uri, None) is not None:
                self.total -= self.sizes.pop(folder.uri, 0)


class Index:
    """One column of a layer in memory, its values sorted once (with the rows they are in): the
    rows holding any of many values are then found by binary search, in time that follows the
    values asked for, not the layer's rows (a 10M-key state is probed as quickly as a 1M one)."""

    def __init__(self, ordered: np.ndarray, rows: np.ndarray, nulls: np.ndarray):
        self.ordered, self.order, self.nulls = ordered, rows, nulls
        # each value in one row (a key column): one search finds it, not two
        self.unique = not bool((ordered[1:] == ordered[:-1]).any())

    @property
    def nbytes(self) -> int:
        return self.ordered.nbytes + self.order.nbytes + self.nulls.nbytes

    @classmethod
    def of(cls, column) -> "Index | None":
        column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        numbers = as_numbers(column)
        if numbers is None:
            return None
        valid = np.asarray(pc.is_valid(column), dtype=bool)
        present = np.nonzero(valid)[0]
        order = present[np.argsort(numbers[present])]  # rows() sorts what it finds: no need of a stable sort
        return cls(numbers[order], order, np.nonzero(~valid)[0])

    def rows(self, values) -> np.ndarray | None:
        values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        wanted = as_numbers(values.drop_null())
        if wanted is None:
            return None
        wanted = sorted_unique(wanted)  # a value asked for twice finds its rows once
        low = np.searchsorted(self.ordered, wanted, side="left")
        if self.unique:
            found = low < len(self.ordered)
            found[found] = self.ordered[low[found]] == wanted[found]
            positions = self.order[low[found]]
        else:
            high = np.searchsorted(self.ordered, wanted, side="right")
            lengths = high - low
            found = lengths > 0
            low, lengths = low[found], lengths[found]
            starts = np.repeat(low - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
            positions = self.order[starts + np.arange(int(lengths.sum()))]
        if values.null_count:
            positions = np.concatenate([positions, self.nulls])
        return np.sort(positions)




LAYERS = Layers()



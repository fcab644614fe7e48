"""The edges present at some batch of an incremental recursion, as the graph walk over Arrow
data reads them, kept in the driver's memory from one batch to the next of the same process."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlext.streaming.keyed_rows import exclude, restrict
from sqlext.streaming.layer_cache import CACHE_BYTES
from sqlext.streaming.recent import Recent
from sqlext.streaming.operators.recursion.columns import COUNT
from sqlext.udfs.recursive_expand import EdgeIndex

# the present edges of recent edge states, by the state's folder: (the identity of the layers
# they stand for, the edges); see present_before
_PRESENT = Recent(4)


def present_before(edges, view, columns: list[str], key: str) -> Present:
    """The edges present before a batch (``view``, a view of the edges' state ``edges``; see
    :class:`Present`): kept in memory from the batch that wrote the layers the view reads, in
    this process; else read from them."""
    kept = _PRESENT.get(edges.folder.uri)
    if kept is not None and not view.empty and kept[0] == _identity(view):
        return kept[1]
    rows = view.rows().select(columns + [COUNT]) if not view.empty else edges.arrow_schema.empty_table()
    return Present.of(rows.filter(pc.greater(rows[COUNT], 0)), columns, key)


def keep(edges, present: Present, batch_id: int) -> None:
    """Keep ``present``, the edges after batch ``batch_id``, for the next batch, under the
    identity of the layers of the edges' state ``edges`` that batch has just written (a later
    batch reads them; a replay of this one reads the layers before them, and finds nothing kept
    for those)."""
    uri = edges.folder.uri
    identity = _identity(edges.before(batch_id + 1)) if present.nbytes * 4 <= CACHE_BYTES else None
    if identity is None:
        _PRESENT.forget(uri)
    else:
        _PRESENT.put(uri, (identity, present))


def _identity(view) -> tuple:
    """The layers a view of a state reads, as they are on storage now: each bucket's base and
    delta by batch, with their files' names, sizes and times (a layer written again, by a
    replayed batch, has other files)."""
    return tuple((part.bucket, part.base, part.delta) + tuple(part.path_of(b).identity()
                                                              for b in (part.base, part.delta) if b is not None)
                 for part in view.parts())


class Present:
    """The edges present (counted above 0) at some batch, each with its count: those with a
    join key as the graph walk's index over it (sorted by the key), and those without one,
    which the walk never follows, as they are. A batch's changes give a new one (this one is
    left as it is): the touched edges are found through the index, and the index is merged
    with the added edges rather than built again."""

    def __init__(self, index, loose: pa.Table, columns: list[str], key: str):
        self.index, self.loose, self.columns, self.key = index, loose, columns, key

    @classmethod
    def of(cls, rows: pa.Table, columns: list[str], key: str) -> Present:
        """Of the present edges ``rows`` (the edge columns and the count)."""
        valid = pc.is_valid(rows[key])
        return cls(EdgeIndex.build(rows.filter(valid), key), rows.filter(pc.invert(valid)), columns, key)

    @property
    def nbytes(self) -> int:
        return self.index.nbytes + self.loose.nbytes

    def edges(self) -> pa.Table:
        """The present edges (their columns only)."""
        return pa.concat_tables([self.index.table.select(self.columns), self.loose.select(self.columns)])

    def _near(self, rows: pa.Table) -> tuple[np.ndarray, pa.Table]:
        """The positions in the index's table of the edges whose key is one of ``rows``', and
        the edges without a key where ``rows`` has one without."""
        keys = rows[self.key]
        values = pc.drop_null(keys).to_numpy(zero_copy_only=False) if keys.null_count < len(keys) \
            else np.zeros(0, np.int64)
        loose = self.loose if keys.null_count and self.loose.num_rows else self.loose.slice(0, 0)
        return self.index.rows_with(values), loose

    def among(self, rows: pa.Table) -> pa.Table:
        """The present edges (with their counts) equal to some row of ``rows`` (edge columns;
        NULL equal to NULL)."""
        if rows.num_rows == 0 or (self.index.table.num_rows == 0 and self.loose.num_rows == 0):
            return self.loose.slice(0, 0)  # nothing to meet (a first run): no search of every row
        positions, loose = self._near(rows)
        near = pa.concat_tables([self.index.table.take(pa.array(positions, pa.int64())), loose])
        return restrict(near, rows, self.columns)

    def changed(self, counts: pa.Table, new: bool = False) -> Present:
        """The edges after ``counts``: each touched edge (edge columns, and its count after
        the batch; one row per edge) with its new count, present while it is above 0. ``new``:
        none of them is present yet."""
        drop, loose = None, self.loose
        if not new and counts.num_rows:
            positions, _ = self._near(counts)
            near = self.index.table.select(self.columns).take(pa.array(positions, pa.int64())) \
                .append_column("__sx_at", pa.array(positions, pa.int64()))
            drop = restrict(near, counts, self.columns)["__sx_at"].to_numpy()
            if loose.num_rows:
                loose = exclude(loose, counts, self.columns)
        kept = counts.filter(pc.greater(counts[COUNT], 0)).select(self.columns + [COUNT]) \
            .cast(self.index.table.schema)
        valid = pc.is_valid(kept[self.key])
        loose = pa.concat_tables([loose, kept.filter(pc.invert(valid))])
        return Present(self.index.changed(self.key, drop, kept.filter(valid)), loose, self.columns, self.key)


"""Rows of an incremental recursion's state as Arrow data on the driver: whole rows matched
(NULL equal to NULL), taken away, narrowed to some values, made distinct, marked."""

from __future__ import annotations

import pyarrow as pa

from sqlext.streaming.keyed_rows import exclude, restrict
from sqlext.streaming.operators.recursion.columns import COUNT
from sqlext.udfs.recursive_expand import distinct_rows


def counts_of(net: pa.Table, every: pa.Table, columns) -> pa.Array:
    """Each edge of ``net``'s count in ``every`` (0 where it has none)."""
    if every.num_rows == 0 or net.num_rows == 0:
        return pa.array([0] * net.num_rows, pa.int64())
    known = {tuple(r[c] for c in columns): r[COUNT] for r in restrict(every, net, list(columns)).to_pylist()}
    return pa.array([known.get(tuple(r[c] for c in columns), 0) for r in net.select(list(columns)).to_pylist()],
                    pa.int64())


def narrowed(rows: pa.Table, wanted: pa.Table, pairs, wanted_columns) -> pa.Table:
    """``rows`` whose columns named in ``pairs`` ((position in ``wanted``, column of ``rows``))
    hold the values of some row of ``wanted`` there; all of ``rows`` where no pair applies."""
    present = {c.lower(): c for c in rows.column_names}
    pairs = [(i, present[c.lower()]) for i, c in pairs if c.lower() in present]
    if not pairs or rows.num_rows == 0:
        return rows
    keys = wanted.select([wanted_columns[i] for i, _ in pairs])
    keys = pa.table([keys.column(j).cast(rows.schema.field(c).type) for j, (_, c) in enumerate(pairs)],
                    names=[c for _, c in pairs])
    return restrict(rows, keys, [c for _, c in pairs])


def marked(rows: pa.Table, column: str, value) -> pa.Table:
    """``rows`` with a column ``column`` holding ``value`` (a flag or a string) in every row."""
    kind = pa.bool_() if isinstance(value, bool) else pa.string()
    return rows.append_column(column, pa.repeat(pa.scalar(value, kind), rows.num_rows))


def distinct(table: pa.Table) -> pa.Table:
    """The table's distinct rows: of integer columns (the usual ids), packed one number a row
    and sorted; else grouped by every column."""
    if table.num_rows < 2:
        return table
    packed = distinct_rows(table)
    if packed is not None:
        return packed
    return table.group_by(table.column_names, use_threads=False).aggregate([]).select(table.column_names)


def exclude_rows(rows: pa.Table, taken: pa.Table, columns) -> pa.Table:
    """The rows of ``rows`` equal (NULL equal to NULL) to no row of ``taken``."""
    return exclude(rows, taken.select(list(columns)).cast(rows.select(list(columns)).schema), list(columns))


def matching(rows: pa.Table, wanted: pa.Table, columns) -> pa.Table:
    """The rows of ``rows`` equal (NULL equal to NULL) to some row of ``wanted``."""
    return restrict(rows, wanted, list(columns))

"""Rows by key on Arrow data: the bucket a key belongs to (a hash of its columns:
:func:`buckets_of`), and matching rows by key, NULL equal to NULL as the functions group keys
(:func:`restrict`, :func:`exclude`, :func:`over`, :func:`key_match`)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlext.functions.arguments import quote
from sqlext.udfs.column_wise import codes, sorted_unique, together


def buckets_of(rows: pa.Table, columns: Sequence[str], count: int) -> np.ndarray:
    """The bucket (0 to ``count - 1``) of each row, by a hash of its ``columns`` that every
    process computes alike (the driver and Spark's Python workers): integers and times by their
    value, anything else by its text; NULL is a value of its own."""
    if count == 1 or rows.num_rows == 0:
        return np.zeros(rows.num_rows, dtype=np.int64)
    hashed = np.full(rows.num_rows, 0x9E3779B97F4A7C15, dtype=np.uint64)
    for column in columns:
        hashed = _mixed(hashed ^ _hashed(rows[column]))
    return (hashed % np.uint64(count)).astype(np.int64)


def _hashed(column) -> np.ndarray:
    import pandas as pd

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    numbers = as_numbers(column)
    if numbers is not None:
        hashed = _mixed(numbers.view(np.uint64))
    else:
        text = pc.fill_null(column.cast(pa.string()), "").to_numpy(zero_copy_only=False)
        hashed = pd.util.hash_array(np.asarray(text, dtype=object), categorize=False).astype(np.uint64)
    if column.null_count:
        hashed[np.asarray(pc.is_null(column), dtype=bool)] = np.uint64(0x5851F42D4C957F2D)
    return hashed


def _mixed(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every bit of the input reaches every bit of the output."""
    values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return values ^ (values >> np.uint64(31))


def over(rows, newer, keys):
    """The rows of ``newer`` over those of ``rows`` (Spark frames): the rows of keys ``newer``
    does not hold, then all of ``newer``'s."""
    return rows.join(newer.select(*[quote(k) for k in keys]), key_match(rows, newer, keys), "left_anti") \
        .unionByName(newer)


def among(column: str, values: pa.Array):
    """The filter ``column IN values`` for a read; with the values' range too, so that Parquet's
    row-group statistics skip row groups holding none of them (new keys, times that move on)."""
    among = pc.is_in(pc.field(column), value_set=values, skip_nulls=False)
    if values.null_count or len(values) == 0:
        return among
    try:
        low, high = pc.min_max(values).values()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # a type without an order
        return among
    return (pc.field(column) >= low) & (pc.field(column) <= high) & among


def key_match(left, right, keys):
    """Equal (NULL equal to NULL) on every column of ``keys``, for Spark frames."""
    match = None
    for k in keys:
        term = left[quote(k)].eqNullSafe(right[quote(k)])
        match = term if match is None else match & term
    return match


def restrict(table: pa.Table, keys: pa.Table, columns: Sequence[str], key_columns: Sequence[str] | None = None):
    """The rows of ``table`` whose ``columns`` equal those of a row of ``keys`` (its
    ``key_columns``, by default the same names)."""
    return _match(table, keys, columns, key_columns, "left semi")


def exclude(table: pa.Table, keys: pa.Table, columns: Sequence[str], key_columns: Sequence[str] | None = None):
    """The rows of ``table`` whose ``columns`` equal those of no row of ``keys``."""
    return _match(table, keys, columns, key_columns, "left anti")


def _match(table: pa.Table, keys: pa.Table, columns: Sequence[str], key_columns, how: str) -> pa.Table:
    key_columns = list(key_columns or columns)
    if table.num_rows == 0 or keys.num_rows == 0:
        return table if how == "left anti" or table.num_rows == 0 else table.slice(0, 0)
    # a row can match only if its first column holds a value of the keys': a set membership
    # test, which is the whole answer for one column; the few candidates of several go to a join
    inside = pc.is_in(table[columns[0]], value_set=pc.unique(keys[key_columns[0]].combine_chunks()),
                      skip_nulls=False)
    if len(columns) == 1:
        return table.filter(inside if how == "left semi" else pc.invert(inside))
    joined = _joined(table.filter(inside), keys, columns, key_columns, how)
    return joined if how == "left semi" else pa.concat_tables([table.filter(pc.invert(inside)), joined])


def _joined(table: pa.Table, keys: pa.Table, columns: Sequence[str], key_columns, how: str) -> pa.Table:
    """The rows of ``table`` with (``left semi``) or without (``left anti``) a row of ``keys``
    equal on every column, in their order: by integer codes of the rows where the columns' types
    allow (:func:`rows_among`), else a hash join on the columns encoded NULL-safe."""
    if table.num_rows == 0:
        return table
    among = rows_among(table, columns, keys, key_columns)
    if among is not None:
        return table.filter(pa.array(among if how == "left semi" else ~among))
    mine, theirs = _encoded(table, columns), _encoded(keys, key_columns)
    names = mine.column_names
    row = pa.array(range(table.num_rows), pa.int64())
    chosen = mine.append_column("__sx_row", row).join(theirs.group_by(names).aggregate([]), keys=names,
                                                      join_type=how)
    kept = chosen["__sx_row"]
    return table.take(kept.take(pc.sort_indices(kept)))


def _codable(data_type: pa.DataType) -> bool:
    """A type whose equal values, and only those, get one dictionary code, as they match in a
    join (floating point's NaN and -0.0 do not; nested values are not dictionary-encoded)."""
    return pa.types.is_integer(data_type) or pa.types.is_string(data_type) or pa.types.is_large_string(data_type) \
        or pa.types.is_binary(data_type) or pa.types.is_boolean(data_type) or pa.types.is_temporal(data_type) \
        or pa.types.is_decimal(data_type)


def rows_among(table: pa.Table, columns: Sequence[str], keys: pa.Table, key_columns) -> np.ndarray | None:
    """Whether each row of ``table`` equals a row of ``keys`` on every column (NULL equal to
    NULL), by one integer code per row (:func:`~sqlext.udfs.column_wise.codes` of each column
    and the keys' taken together), at a fraction of the cost of a hash join and the grouping
    of the keys (docs/performance.md has the figures).
    None where a column's type is not :func:`_codable`, or differs from the key column's (but
    for integers of two widths)."""
    for column, key_column in zip(columns, key_columns):
        mine_type, their_type = table.schema.field(column).type, keys.schema.field(key_column).type
        if not (_codable(mine_type) and (mine_type == their_type or
                                         pa.types.is_integer(mine_type) and pa.types.is_integer(their_type))):
            return None
    combined = codes([together(table[column], keys[key_column]) for column, key_column in zip(columns, key_columns)])
    count = table.num_rows
    theirs = sorted_unique(combined[count:])
    mine = combined[:count]
    position = np.minimum(np.searchsorted(theirs, mine), max(len(theirs) - 1, 0))
    return theirs[position] == mine if len(theirs) else np.zeros(count, dtype=bool)


def _encoded(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    """The key columns as columns a hash join matches NULL with NULL on: each value with its
    NULLs filled, and whether it was NULL."""
    arrays, names = [], []
    for i, column in enumerate(columns):
        values = table[column].combine_chunks()
        arrays += [pc.fill_null(values, _zero(values.type)) if values.null_count else values, pc.is_null(values)]
        names += [f"__sx_v{i}", f"__sx_n{i}"]
    return pa.table(arrays, names=names)


def _zero(data_type: pa.DataType):
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return pa.scalar("", data_type)
    if pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type):
        return pa.scalar(b"", data_type)
    if pa.types.is_boolean(data_type):
        return pa.scalar(False)
    if pa.types.is_date32(data_type):
        return pa.array([0], pa.int32()).cast(data_type)[0]
    if pa.types.is_temporal(data_type):
        return pa.array([0], pa.int64()).cast(data_type)[0]
    return pa.scalar(0).cast(data_type)


def as_numbers(array: pa.Array) -> np.ndarray | None:
    """A column's values as 64-bit integers that sort as they do (integers, dates, times), NULL
    as 0; None for other types."""
    kind = array.type
    if not (pa.types.is_integer(kind) or pa.types.is_temporal(kind)) or pa.types.is_uint64(kind):
        return None
    try:
        numbers = array.cast(pa.int64()) if pa.types.is_integer(kind) else \
            array.view(pa.int32() if pa.types.is_date32(kind) or pa.types.is_time32(kind) else pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError):
        return None
    return np.asarray(pc.fill_null(numbers, 0), dtype=np.int64)

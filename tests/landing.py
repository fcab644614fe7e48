"""Files landing in a source folder, and an output folder read back, without a Spark job.

The incremental tests land change files between runs and read what each run wrote. Through
Spark, each landing is a job (about a quarter of a second on two busy cores) and each read
another; a test of a few dozen runs spent as long landing and reading as running. Here a
landing is one Parquet file written by Arrow beside the folder's others, as a user's or a
connector's writer leaves it (Spark's file source reads every such file alike), and a read
gives the rows as PySpark's ``collect`` gives them. The runs themselves still read their
sources, and write their output, through Spark and sqlext."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Row


def arrow_columns(schema) -> pa.Schema:
    """The Arrow form of Spark columns (a ``StructType`` or a DDL string such as
    ``"id BIGINT, v STRING"``), as sqlext itself reads them (timestamps in UTC)."""
    from pyspark.sql.types import StructType, _parse_datatype_string

    from sqlext.streaming.run import arrow_schema

    return arrow_schema(schema if isinstance(schema, StructType) else _parse_datatype_string(schema))


def land(folder, rows, schema) -> Path:
    """Write ``rows`` (dicts by column name, or tuples in the columns' order) as one new
    Parquet file in the local ``folder`` (made if missing), with ``schema``'s columns; no rows
    give a file of the columns alone. The file appears whole (written under a hidden name, then
    renamed), so a run listing the folder never sees part of it. Returns the file's path."""
    columns = arrow_columns(schema)
    rows = [row if isinstance(row, dict) else dict(zip(columns.names, row)) for row in rows]
    table = pa.Table.from_pylist([{f.name: _arrow_value(row.get(f.name), f.type) for f in columns} for row in rows],
                                 schema=columns)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    hidden = folder / f".{name}.landing"
    # timestamps as Spark's writer stores them by default (INT96), so that a run meets the
    # files it met when the tests landed them through Spark
    pq.write_table(table, hidden, compression="snappy", use_deprecated_int96_timestamps=True)
    os.replace(hidden, folder / name)
    return folder / name


def _arrow_value(value, kind: pa.DataType):
    """A value as Arrow takes it the way Spark's ``createDataFrame`` does: a naive time for a
    timestamp column is the local time of this process (as PySpark reads it), a nested row
    is a dict."""
    if value is None:
        return None
    if pa.types.is_timestamp(kind):
        return value.astimezone() if kind.tz is not None and value.tzinfo is None else value
    if pa.types.is_struct(kind):
        fields = value.asDict() if hasattr(value, "asDict") else \
            value if isinstance(value, dict) else dict(zip([f.name for f in kind], value))
        return {f.name: _arrow_value(fields.get(f.name), f.type) for f in kind}
    if pa.types.is_map(kind):
        return [(_arrow_value(k, kind.key_type), _arrow_value(v, kind.item_type)) for k, v in value.items()]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [_arrow_value(v, kind.value_type) for v in value]
    return value


def read_rows(folder) -> list[dict]:
    """The rows of the files in the local ``folder``, each read as Parquet (files whose names
    start with ``_`` or ``.`` left out, as Spark leaves them out; a file of another kind fails
    the read, as it fails Spark's), each a dict of its columns, with the values
    PySpark's ``collect`` gives: a timestamp as a naive local time, a struct as a ``Row``, a map
    as a dict, binary as ``bytearray``. An empty list where the folder holds no rows or no files."""
    return [row for rows in rows_by_file(folder).values() for row in rows]


def rows_by_file(folder) -> dict[str, list[dict]]:
    """:func:`read_rows`, by the name of the file holding them."""
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    found = {}
    for path in sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(("_", "."))):
        table = pq.read_table(path)
        found[path.name] = [{field.name: _spark_value(row[field.name], field.type) for field in table.schema}
                            for row in table.to_pylist()]
    return found


def _spark_value(value, kind: pa.DataType):
    if value is None:
        return None
    if pa.types.is_timestamp(kind):
        return value.astimezone().replace(tzinfo=None) if value.tzinfo is not None else value
    if pa.types.is_struct(kind):
        return Row(**{f.name: _spark_value(value[f.name], f.type) for f in kind})
    if pa.types.is_map(kind):
        return {_spark_value(k, kind.key_type): _spark_value(v, kind.item_type) for k, v in value}
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [_spark_value(v, kind.value_type) for v in value]
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return bytearray(value)
    return value

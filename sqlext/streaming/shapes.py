"""The shapes a stream is read in: ``STREAM(name)`` reads change rows as they are (the
``delta`` shape), ``STREAM(name, format => 'debezium' | 'iceberg' [, order_by => ...])`` rows of
another shape, mapped to sqlext's change rows (:mod:`sqlext.functions.input_formats`) as they are
read (:func:`as_change_rows`), with a Debezium envelope built around declared row columns
(:func:`debezium_envelope`)."""

from __future__ import annotations

import itertools

from sqlglot import exp

from sqlext.functions.arguments import quote
from sqlext.functions.changes import check_option
from sqlext.functions.input_formats import ENVELOPE_FIELDS, FORMATS, change_rows, connect_payload, order_column
from sqlext.language.dialect import stream_argument, stream_options, to_sql, TableArgument

_shape_views = itertools.count(1)


def stream_names(call: exp.Anonymous) -> tuple[str, ...]:
    """The spellings of the name ``STREAM(...)`` reads that the ``sources`` and ``schemas``
    options may use: as written in SQL (backticks kept) and as plain dotted text."""
    argument = stream_argument(call)
    if isinstance(argument, exp.Literal):
        return (argument.this,)
    return (to_sql(argument), ".".join(part.name for part in argument.parts))


DELTA_SHAPE, DEBEZIUM_SHAPE = "delta", "debezium"
# the fields of a Debezium event's source block a declared envelope reads (the connectors' order
# columns among them: Postgres's lsn, MySQL's file and pos); the block's other fields are not read
DEBEZIUM_SOURCE = (("lsn", "long"), ("ts_ms", "long"), ("txId", "long"), ("file", "string"), ("pos", "long"),
                   ("row", "integer"), ("db", "string"), ("table", "string"))


def debezium_envelope(schema):
    """Declared columns of a Debezium topic's files: as declared where they are an envelope
    (they name ``op``), else the row's columns, around which the envelope is built: ``before``
    and ``after`` rows of those columns, ``op``, ``ts_ms`` and a ``source`` block.

    >>> from pyspark.sql.types import StructType, StructField, LongType
    >>> debezium_envelope(StructType([StructField("id", LongType())])).simpleString()[:70]
    'struct<before:struct<id:bigint>,after:struct<id:bigint>,op:string,ts_m'
    """
    from pyspark.sql.types import StructType

    if any(f.name.lower() == "op" for f in schema.fields):
        return schema

    def field(name, kind):
        return {"name": name, "type": kind, "nullable": True, "metadata": {}}

    source = {"type": "struct", "fields": [field(name, kind) for name, kind in DEBEZIUM_SOURCE]}
    return StructType.fromJson({"type": "struct", "fields": [
        field("before", schema.jsonValue()), field("after", schema.jsonValue()), field("op", "string"),
        field("ts_ms", "long"), field("source", source)]})


def stream_shape(call: exp.Anonymous) -> str:
    """The shape ``STREAM(...)`` reads its source in (``format =>``; ``'delta'``, change rows,
    when absent); an unknown one is ``INVALID_OPTION_VALUE``."""
    return check_option("STREAM", "format", stream_options(call).get("format", DELTA_SHAPE), FORMATS)


def stream_order(call: exp.Anonymous) -> str:
    """The name of the ordering column of the change rows ``STREAM(...)`` gives: its
    ``order_by`` as the shape names it there (``'source.lsn'`` is ``source_lsn``), else the
    shape's default (``_commit_version`` for change rows)."""
    return order_column(stream_shape(call), stream_options(call).get("order_by"))


def read_by_recursion(call: exp.Anonymous) -> bool:
    """Whether the stream is read by a recursive CTE itself (its rows are edges, without a
    key), not by a table function inside one."""
    node = call.parent
    while node is not None:
        if isinstance(node, TableArgument):
            return False
        if isinstance(node, exp.CTE) and isinstance(node.parent, exp.With) and node.parent.args.get("recursive"):
            return True
        node = node.parent
    return False


def as_change_rows(spark, call: exp.Anonymous, frame):
    """``frame``, the rows of the source ``STREAM(...)`` reads (a stream, or all of them in a
    batch), as sqlext's change rows for the stream's shape. A stream a recursion reads itself
    has no key: an update must carry the row it replaces."""
    rows, _ = change_rows_frame(spark, "STREAM", to_sql(call), stream_shape(call), frame,
                                stream_options(call).get("order_by"), keyless=read_by_recursion(call))
    return rows


def outside_envelope(frame):
    """The fields of a Debezium topic's records that its envelope does not have (a StructType):
    the top-level columns other than :data:`ENVELOPE_FIELDS` (in Kafka Connect's JSON form, the
    fields of ``payload`` other than those). A run reads none of them; one a later file brings
    is a change of the source's columns (a plain row's columns, in a file landed in the topic's
    folder), which the source's schema evolution decides on."""
    from pyspark.sql.types import StructType

    def fields(column: str):
        kind = frame.schema[column].dataType if column in frame.columns else None
        return [f.name for f in kind.fields] if isinstance(kind, StructType) else None

    found = [f for f in frame.schema.fields if f.name.lower() not in ENVELOPE_FIELDS]
    payload = connect_payload(DEBEZIUM_SHAPE, frame.columns, fields)
    if payload is not None:
        found = [f for f in frame.schema[payload].dataType.fields if f.name.lower() not in ENVELOPE_FIELDS] + \
            [f for f in found if f.name.lower() not in ("schema", payload.lower())]
    return StructType(found)


def change_rows_frame(spark, function: str, side: str, shape: str, frame, order_by, keyless: bool = False):
    """``frame`` (rows in ``shape``) as sqlext's change rows (the query of
    :mod:`sqlext.functions.input_formats` over it), and the name of their ordering column."""
    from pyspark.sql.types import StructType

    def fields(column: str):
        kind = frame.schema[column].dataType if column in frame.columns else None
        return [f.name for f in kind.fields] if isinstance(kind, StructType) else None

    payload = connect_payload(shape, frame.columns, fields)
    if payload is not None:  # Kafka Connect's JSON form: the envelopes are its payloads
        frame = frame.select(f"{quote(payload)}.*")

    view = f"__sx_shape_{next(_shape_views)}"
    frame.createOrReplaceTempView(view)
    try:
        rows = change_rows(function, side, shape, exp.Table(this=exp.to_identifier(view)), frame.columns, fields,
                           order_by, keyless=keyless, types=lambda c: frame.schema[c].dataType.simpleString(),
                           once=not frame.isStreaming)
        return spark.sql(to_sql(rows.query)), rows.order_by
    finally:
        spark.catalog.dropTempView(view)



"""Building change feeds for tests, and running CHANGELOG_FILTER through each of its paths.

An *event list* is what happened to keys, in order: ``(version, key, v)`` where ``v`` is the
new balance or ``None`` for a delete (an optional fourth item is a ``ts`` for sequence_by).
From it we build both input shapes sqlext reads (see the README's "Change rows"):

* ``cdf``: Delta's change data feed (insert / update_preimage+update_postimage / delete,
  a delete carrying the deleted row's values);
* ``upsert``: a Kafka-style upsert log (a row sets the value; all-NULL values are a tombstone).
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager

import pyarrow as pa

import sqlext
from sqlext.functions.changelog_filter import filter_spec
from reference.changelog_filter import changelog_filter

CDF_SCHEMA = "id BIGINT, name STRING, v BIGINT, ts BIGINT, _change_type STRING, _commit_version BIGINT"
UPSERT_SCHEMA = "id BIGINT, name STRING, v BIGINT, ts BIGINT, _commit_version BIGINT"
SHAPES = ("cdf", "upsert")
PATHS = ("pure", "native", "udtf")
_view_names = itertools.count()


NULL_V = "NULL"  # an event value meaning: the row is present, its v is NULL (not a delete)


@contextmanager
def computed_on(spark, path: str):
    """Where the incremental runs compute inside the block: 'driver', 'spark', or by the
    increment's size ('auto')."""
    from sqlext.streaming.run import PATH_SETTING

    spark.conf.set(PATH_SETTING, path)
    try:
        yield
    finally:
        spark.conf.unset(PATH_SETTING)


def _row(key, v, ts):
    return {"id": key, "name": f"acct{key}", "v": None if v == NULL_V else v, "ts": ts}


def cdf_rows(events):
    current: dict = {}
    rows = []
    for event in events:
        version, key, v = event[:3]
        ts = event[3] if len(event) > 3 else version
        old = current.get(key)
        if v is None:
            deleted = old or {"id": key, "name": None, "v": None, "ts": ts}
            rows.append({**deleted, "ts": ts, "_change_type": "delete", "_commit_version": version})
            current.pop(key, None)
            continue
        new = _row(key, v, ts)
        if old is None:
            rows.append({**new, "_change_type": "insert", "_commit_version": version})
        else:
            rows.append({**old, "_change_type": "update_preimage", "_commit_version": version})
            rows.append({**new, "_change_type": "update_postimage", "_commit_version": version})
        current[key] = new
    return rows


def rewritten(rows, versions):
    """A feed's rows with the update of each version in ``versions`` written as a Delta commit
    without change data files writes it: the row before it as a ``delete`` and the row after it
    as an ``insert``, the insert first (deltalake reads a commit's added files before its removed
    ones), in place of the preimage and the postimage."""
    out = []
    for row in rows:
        if row.get("_change_type") in ("update_preimage", "update_postimage") and row["_commit_version"] in versions:
            if row["_change_type"] == "update_preimage":
                deleted = {**row, "_change_type": "delete"}
                continue
            out += [{**row, "_change_type": "insert"}, deleted]
        else:
            out.append(row)
    return out


def upsert_rows(events):
    rows = []
    for event in events:
        version, key, v = event[:3]
        ts = event[3] if len(event) > 3 else version
        if v is None:
            rows.append({"id": key, "name": None, "v": None, "ts": ts, "_commit_version": version})
        else:
            rows.append({**_row(key, v, ts), "_commit_version": version})
    return rows


def rows_for(shape, events):
    return (cdf_rows if shape == "cdf" else upsert_rows)(events)


def schema_for(shape):
    return CDF_SCHEMA if shape == "cdf" else UPSERT_SCHEMA


def predicate_value(row, predicate):
    """Python's reading of the few predicates the tests use (NULL stays NULL)."""
    v = row["v"]
    if predicate == "v >= 0":
        return None if v is None else v >= 0
    if predicate == "v > 10":
        return None if v is None else v > 10
    raise ValueError(predicate)


def call_sql(view_name, predicate, emit, extra=""):
    return (f"SELECT * FROM CHANGELOG_FILTER(input => TABLE({view_name}), key => 'id', "
            f"predicate => '{predicate}', emit => '{emit}'{extra})")


def run_filter(path, spark, shape, events, predicate="v >= 0", emit="changes", sequence_by=None, rows=None):
    """Rows of CHANGELOG_FILTER's output, as dicts, through the chosen path (over ``rows`` where
    given, else the rows of ``events`` in ``shape``)."""
    rows = rows_for(shape, events) if rows is None else rows
    if path == "pure":
        columns = [c.split()[0] for c in schema_for(shape).split(", ")]
        args = {"key": "id", "predicate": predicate, "emit": emit}
        if sequence_by:
            args["sequence_by"] = sequence_by
        spec = filter_spec(args, columns)
        table = pa.Table.from_pylist(rows, schema=_arrow_schema(shape))
        return changelog_filter(spec, table, [predicate_value(r, predicate) for r in rows]).to_pylist()

    from pyspark.sql.types import _parse_datatype_string

    name = f"feed_{next(_view_names)}"
    spark.createDataFrame(rows, schema=_parse_datatype_string(schema_for(shape))).createOrReplaceTempView(name)
    extra = f", sequence_by => '{sequence_by}'" if sequence_by else ""
    query = call_sql(name, predicate, emit, extra)
    try:
        frame = sqlext.sql(spark, query) if path == "native" else spark.sql(query)
        return [r.asDict() for r in frame.collect()]
    finally:
        spark.catalog.dropTempView(name)


def _arrow_schema(shape):
    fields = [("id", pa.int64()), ("name", pa.string()), ("v", pa.int64()), ("ts", pa.int64())]
    if shape == "cdf":
        fields.append(("_change_type", pa.string()))
    fields.append(("_commit_version", pa.int64()))
    return pa.schema(fields)


_KIND_ORDER = {"update_preimage": 0, "delete": 1, "insert": 1, "upsert": 1, "update_postimage": 2}


def forwarding_order(rows):
    """ORDER BY order_by, key (and a pre-image before its post-image)."""
    return sorted(rows, key=lambda r: (r["_commit_version"], r["id"], _KIND_ORDER.get(r.get("_change_type"), 1)))


def compact(rows, emit):
    """(change_type, v, version) per row, or (id, v) for 'final', for readable expectations."""
    if emit == "final":
        return sorted((r["id"], r["v"]) for r in rows)
    return [(r["_change_type"], r["v"], r["_commit_version"]) for r in forwarding_order(rows)]


def apply_changes(rows, key="id"):
    """Apply a minimal change feed to an empty table, refusing anything not minimal."""
    table: dict = {}
    for row in forwarding_order(rows):
        k = row[key]
        data = {c: v for c, v in row.items() if c not in ("_change_type", "_commit_version")}
        kind = row["_change_type"]
        if kind == "insert":
            assert k not in table, f"insert of a present key: {row}"
            table[k] = data
        elif kind == "delete":
            assert table.get(k) == data, f"delete of a row that is not there: {row}"
            del table[k]
        elif kind == "update_preimage":
            assert table.get(k) == data, f"pre-image does not match the table: {row}"
        elif kind == "update_postimage":
            assert k in table, f"post-image without a row: {row}"
            assert table[k] != data, f"update that changes nothing: {row}"
            table[k] = data
        else:
            raise AssertionError(f"unexpected change type {kind}")
    return table

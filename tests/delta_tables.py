"""Delta tables for the tests, written with deltalake (no Spark) from the change rows the other
tests put in Parquet folders: the rows of each ordering value become one commit of that
version, so the table's change data feed holds the same changes under the same
``_commit_version``.

A commit applies its version's changes as one MERGE on the key: ``insert`` and
``update_postimage`` rows set the key's row, ``delete`` rows remove it (``update_preimage`` rows
say nothing new). Version 0 creates the table, empty, with its change data feed on; a version
no row has is an empty commit. A delete of a key the table does not hold changes nothing in
a Delta table, so its feed has no row for it.
"""

from __future__ import annotations

import pyarrow as pa

CHANGE_COLUMNS = ("_change_type", "_commit_version")
_DELETE = "sx_delete"


def data_schema(ddl: str) -> pa.Schema:
    """The Arrow columns of a Spark DDL column list, without the change columns."""
    from pyspark.sql.types import _parse_datatype_string

    from sqlext.streaming.run import arrow_schema

    schema = arrow_schema(_parse_datatype_string(ddl))
    return pa.schema([f for f in schema if f.name not in CHANGE_COLUMNS])


def create(path, ddl: str) -> None:
    """An empty table at version 0 with its change data feed on."""
    from deltalake import write_deltalake

    write_deltalake(str(path), data_schema(ddl).empty_table(),
                    configuration={"delta.enableChangeDataFeed": "true"})


def commit(path, ddl: str, key: str, rows: list[dict]) -> int:
    """One commit applying ``rows`` (change rows of one version); returns the table's new version."""
    from deltalake import DeltaTable, write_deltalake

    schema = data_schema(ddl)
    chosen = [r for r in rows if r["_change_type"] in ("insert", "update_postimage", "delete")]
    if not chosen:
        write_deltalake(str(path), schema.empty_table(), mode="append")
        return DeltaTable(str(path)).version()
    source = pa.Table.from_pylist(
        [{**{f.name: r.get(f.name) for f in schema}, _DELETE: r["_change_type"] == "delete"} for r in chosen],
        schema=schema.append(pa.field(_DELETE, pa.bool_())))
    values = {f.name: f"s.{f.name}" for f in schema}
    DeltaTable(str(path)).merge(source, predicate=f"t.{key} = s.{key}", source_alias="s", target_alias="t") \
        .when_matched_delete(predicate=f"s.{_DELETE}") \
        .when_matched_update(updates=values, predicate=f"NOT s.{_DELETE}") \
        .when_not_matched_insert(updates=values, predicate=f"NOT s.{_DELETE}") \
        .execute()
    return DeltaTable(str(path)).version()


def write_table(path, ddl: str, key: str, rows: list[dict], last: int | None = None) -> None:
    """A table whose commit v applies the rows of version v, for every v from 1 to ``last``
    (the highest version of the rows by default)."""
    create(path, ddl)
    last = max((r["_commit_version"] for r in rows), default=0) if last is None else last
    for version in range(1, last + 1):
        assert commit(path, ddl, key, [r for r in rows if r["_commit_version"] == version]) == version

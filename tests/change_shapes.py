"""Writing change rows in the other shapes sqlext reads (``format => ...``), for tests.

Each converter takes rows in Delta's change-row shape (as the fixtures build them: data columns,
``_change_type`` and ``_commit_version``) and gives the same changes as another system writes
them, so a test can run a fixture in every shape and compare with the Delta shape's result.
Each row comes with the version it belongs to, so that files can be released run by run.
"""

from __future__ import annotations

from typing import Sequence

ORDER = "_commit_version"
SHAPES = ("debezium", "iceberg")
# the name each shape's ordering column has in the change rows sqlext gives
ORDER_IN = {"delta": ORDER, "debezium": "source_lsn", "iceberg": "_change_ordinal"}
ICEBERG_TYPES = {"insert": "INSERT", "delete": "DELETE", "update_preimage": "UPDATE_BEFORE",
                 "update_postimage": "UPDATE_AFTER"}


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def debezium_rows(rows: Sequence[dict], data: Sequence[str]) -> list[tuple[int, dict]]:
    """Postgres-connector envelopes: ``source.lsn`` is the version; a key's first insert at
    the first version is a snapshot read (``r``), later inserts are creates (``c``); an update
    is one ``u`` (the pre-image's row in ``before``); a delete is ``d`` followed by a Kafka
    tombstone (every column NULL)."""
    out, preimage = [], None
    first = min((r[ORDER] for r in rows), default=None)
    for row in rows:
        kind, version = row["_change_type"], row[ORDER]
        values = {c: row[c] for c in data}
        if kind == "update_preimage":
            preimage = values
            continue
        before, after = None, values
        if kind == "insert":
            op = "r" if version == first else "c"
        elif kind == "update_postimage":
            op, before = "u", preimage
        else:
            op, before, after = "d", values, None
        source = {"lsn": version, "txId": 500 + version, "db": "shop", "table": "t"}
        out.append((version, {"before": before, "after": after, "op": op, "ts_ms": 1_700_000_000_000 + version,
                              "source": source}))
        if kind == "delete":
            out.append((version, {"before": None, "after": None, "op": None, "ts_ms": None, "source": None}))
    return out


def debezium_schema(data: Sequence[tuple[str, str]]) -> str:
    fields = ", ".join(f"{quoted(name)}: {kind}" for name, kind in data)
    return (f"before STRUCT<{fields}>, after STRUCT<{fields}>, op STRING, ts_ms BIGINT, "
            "source STRUCT<lsn: BIGINT, txId: BIGINT, db: STRING, `table`: STRING>")


def iceberg_rows(rows: Sequence[dict], data: Sequence[str]) -> list[tuple[int, dict]]:
    """Iceberg's changelog view: upper-case types, ``_change_ordinal`` the version and a
    snapshot id that is not ordered (it decreases as the versions grow)."""
    return [(row[ORDER], {**{c: row[c] for c in data}, "_change_type": ICEBERG_TYPES[row["_change_type"]],
                          "_change_ordinal": row[ORDER], "_commit_snapshot_id": 9_000_000 - 7 * row[ORDER]})
            for row in rows]


def iceberg_schema(data: Sequence[tuple[str, str]]) -> str:
    fields = ", ".join(f"{quoted(name)} {kind}" for name, kind in data)
    return f"{fields}, _change_type STRING, _change_ordinal BIGINT, _commit_snapshot_id BIGINT"


def in_shape(shape: str, rows: Sequence[dict], data: Sequence[tuple[str, str]]) -> tuple[list[tuple[int, dict]], str]:
    """``rows`` (Delta change rows) in ``shape``, each with its version, and the shape's schema."""
    names = [name for name, _ in data]
    if shape == "debezium":
        return debezium_rows(rows, names), debezium_schema(data)
    return iceberg_rows(rows, names), iceberg_schema(data)


def as_delta(rows: Sequence[dict], shape: str) -> list[dict]:
    """Output rows of a call over ``shape`` with the ordering column named as over Delta's shape."""
    name = ORDER_IN[shape]
    return [{(ORDER if c == name else c): v for c, v in row.items()} for row in rows]

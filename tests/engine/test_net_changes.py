"""A change feed's net effect (what an operator passes to another where the statement gives a
table): applied to the table before the feed, the net rows give the same table as every change
in turn, with at most a preimage and a postimage per key and nothing for a key whose row ends
as it began. Arrow data alone, no Spark session."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples

from sqlext.udfs.column_wise import net_changes

SCHEMA = pa.schema([("k", pa.int64()), ("tag", pa.string()), ("v", pa.int64()), ("_change_type", pa.string()),
                    ("at", pa.int64())])


def _apply(table: dict, rows: list[dict]) -> dict:
    """The table (key -> values) after the rows, in their order (a preimage changes nothing)."""
    table = dict(table)
    for row in rows:
        key = (row["k"], row["tag"])
        if row["_change_type"] in ("insert", "update_postimage"):
            table[key] = row["v"]
        elif row["_change_type"] == "delete":
            table.pop(key, None)
    return table


@st.composite
def feeds(draw):
    """A table and a well-formed change feed over it: each key's changes follow its row (an
    insert where it has none, an update or a delete where it has one), at rising versions, the
    keys' changes interleaved."""
    keys = [(k, tag) for k in range(3) for tag in (None, "a")]
    before = {key: draw(st.integers(0, 3)) for key in keys if draw(st.booleans())}
    current, rows, version = dict(before), [], 0
    for _ in range(draw(st.integers(0, 14))):
        key = draw(st.sampled_from(keys))
        version += draw(st.integers(0, 1))  # changes of different keys may share a version
        value = draw(st.integers(0, 3))
        if key not in current:
            rows.append({"k": key[0], "tag": key[1], "v": value, "_change_type": "insert", "at": version})
            current[key] = value
        elif draw(st.booleans()):
            rows.append({"k": key[0], "tag": key[1], "v": current.pop(key), "_change_type": "delete", "at": version})
        else:
            rows.append({"k": key[0], "tag": key[1], "v": current[key], "_change_type": "update_preimage",
                         "at": version})
            rows.append({"k": key[0], "tag": key[1], "v": value, "_change_type": "update_postimage", "at": version})
            current[key] = value
        version += 1
    return before, rows


@settings(max_examples=examples(200, 2000), deadline=None)
@given(feed=feeds(), rank=st.permutations(range(6)))
def test_the_net_rows_leave_the_table_the_changes_leave(feed, rank):
    before, rows = feed
    # the keys' rows in another interleaving (the order across keys does not matter, within a key it does)
    keys = sorted({(r["k"], r["tag"] or "") for r in rows})
    place = {key: rank[i] for i, key in enumerate(keys)}
    given_rows = [rows[i] for i in sorted(range(len(rows)),
                                          key=lambda i: (place[(rows[i]["k"], rows[i]["tag"] or "")], i))]
    net = net_changes(pa.Table.from_pylist(given_rows, schema=SCHEMA), ["k", "tag"], "at").to_pylist()
    assert _apply(before, net) == _apply(before, rows)
    per_key: dict = {}
    for row in net:
        per_key.setdefault((row["k"], row["tag"]), []).append(row)
    last = {}
    for row in rows:
        last[(row["k"], row["tag"])] = row["at"]
    for key, changes in per_key.items():
        kinds = [c["_change_type"] for c in changes]
        assert kinds in (["insert"], ["delete"], ["update_preimage", "update_postimage"]), kinds
        assert all(c["at"] == last[key] for c in changes)  # the version of the key's last change
        if kinds[0] == "update_preimage":
            assert changes[0]["v"] != changes[1]["v"] and changes[0]["v"] == before[key]
    for key in set(before) | set(_apply(before, rows)):
        if before.get(key, "none") == _apply(before, rows).get(key, "none"):
            assert key not in per_key  # a row that ends as it began forwards nothing

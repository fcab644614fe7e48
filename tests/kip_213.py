"""KIP-213's event table for FK_JOIN and the feeds made from such events, shared by the tests of
FK_JOIN, of the input shapes and of Delta inputs: events are ``(version, side, key, row-or-None)``,
a left row ``L(fk, note)`` and a right row ``R(name)``; :func:`fk_join` runs FK_JOIN over them as
a batch statement, :func:`compact` puts its rows in forwarding order, and :data:`event_lists`
draws random interleavings of left and right changes."""

from __future__ import annotations

import itertools

from hypothesis import strategies as st

import sqlext
from feeds import rewritten

LEFT_CDF = "id STRING, fk BIGINT, note STRING, _change_type STRING, _commit_version BIGINT"
LEFT_UPSERT = "id STRING, fk BIGINT, note STRING, _commit_version BIGINT"
RIGHT_CDF = "rid BIGINT, name STRING, _change_type STRING, _commit_version BIGINT"
RIGHT_UPSERT = "rid BIGINT, name STRING, _commit_version BIGINT"
SHAPES = ("cdf", "upsert")
_names = itertools.count()


def feed(events, shape, key_column):
    """Input rows for one side from (version, key, row-or-None) events."""
    current, rows = {}, []
    for version, key, row in events:
        old = current.get(key)
        if shape == "upsert":
            values = row if row is not None else {c: None for c in (old or _EMPTY[key_column])}
            rows.append({key_column: key, **values, "_commit_version": version})
        elif row is None:
            if old is not None:
                rows.append({key_column: key, **old, "_change_type": "delete", "_commit_version": version})
            else:
                rows.append({key_column: key, **_EMPTY[key_column], "_change_type": "delete",
                             "_commit_version": version})
        elif old is None:
            rows.append({key_column: key, **row, "_change_type": "insert", "_commit_version": version})
        else:
            rows.append({key_column: key, **old, "_change_type": "update_preimage", "_commit_version": version})
            rows.append({key_column: key, **row, "_change_type": "update_postimage", "_commit_version": version})
        if row is None:
            current.pop(key, None)
        else:
            current[key] = row
    return rows


_EMPTY = {"id": {"fk": None, "note": None}, "rid": {"name": None}}


def side_feeds(events, shape, rewrite=frozenset()):
    """The left and right input rows of events (version, side, key, row-or-None); the updates of
    the versions in ``rewrite`` written as a delete and an insert (:func:`feeds.rewritten`)."""
    left = [(v, k, r) for v, side, k, r in events if side == "left"]
    right = [(v, k, r) for v, side, k, r in events if side == "right"]
    return rewritten(feed(left, shape, "id"), rewrite), rewritten(feed(right, shape, "rid"), rewrite)


def fk_join(spark, events, shape, join_type, emit, rewrite=frozenset()):
    """Run FK_JOIN over events (version, side, key, row-or-None); rows as dicts."""
    from pyspark.sql.types import _parse_datatype_string

    left, right = side_feeds(events, shape, rewrite)
    n = next(_names)
    names = {"left": f"fk_left_{n}", "right": f"fk_right_{n}"}
    spark.createDataFrame(left,
                          _parse_datatype_string(LEFT_CDF if shape == "cdf" else LEFT_UPSERT)
                          ).createOrReplaceTempView(names["left"])
    spark.createDataFrame(right,
                          _parse_datatype_string(RIGHT_CDF if shape == "cdf" else RIGHT_UPSERT)
                          ).createOrReplaceTempView(names["right"])
    query = (f"SELECT * FROM FK_JOIN(left => TABLE({names['left']}), right => TABLE({names['right']}), "
             f"left_key => 'id', foreign_key => 'fk', right_key => 'rid', join_type => '{join_type}', "
             f"emit => '{emit}')")
    try:
        return [r.asDict() for r in sqlext.sql(spark, query).collect()]
    finally:
        for name in names.values():
            spark.catalog.dropTempView(name)


def compact(rows, emit):
    """(key, fk, right name, kind, version) rows in forwarding order; (key, fk, name) for final."""
    if emit == "final":
        return sorted((r["id"], r["fk"], r["name"]) for r in rows)
    rank = {"update_preimage": 0, "update_postimage": 1}
    return sorted(((r["id"], r["fk"], r["name"], r["_change_type"], r["_commit_version"]) for r in rows),
                  key=lambda t: (t[4], t[0], rank.get(t[3], 0)))


def L(fk, note="n"):
    return {"fk": fk, "note": note}


def R(name):
    return {"name": name}


# KIP-213's event table (its RHS-0 holds (1, foo) before the first left event).
SEED_EVENTS = [
    (1, "right", 1, R("foo")),
    (2, "left", "k", L(1)),        # publish new event (k,1): normal fk-join
    (3, "left", "k", L(2)),        # change fk to 2: no right row 2
    (4, "left", "k", L(3)),        # change fk to 3: no right row 3 (yet)
    (5, "right", 3, R("bar")),     # publish (3,bar): prefix scan re-emits k
    (6, "left", "k", None),        # delete k
    (7, "left", "k", L(1)),        # publish original event again
    (8, "left", "q", L(10)),       # publish (q,10): no right row 10
    (9, "right", 10, R("baz")),    # publish (10,baz)
]

SEED_EXPECTED = {
    ("inner", "records"): [
        ("k", 1, "foo", "upsert", 2),
        ("k", None, None, "delete", 3),   # must indicate a delete: (k,1,foo) no longer valid
        ("k", None, None, "delete", 4),   # "ideally would not publish a delete" but does
        ("k", 3, "bar", "upsert", 5),     # prefix scan
        ("k", None, None, "delete", 6),   # propagate null through the sub-topology
        ("k", 1, "foo", "upsert", 7),
        ("q", 10, "baz", "upsert", 9),    # (q,10) alone forwarded nothing for the inner join
    ],
    ("left", "records"): [
        ("k", 1, "foo", "upsert", 2),
        ("k", 2, None, "upsert", 3),
        ("k", 3, None, "upsert", 4),
        ("k", 3, "bar", "upsert", 5),
        ("k", None, None, "delete", 6),
        ("k", 1, "foo", "upsert", 7),
        ("q", 10, None, "upsert", 8),     # the only real difference between inner and left
        ("q", 10, "baz", "upsert", 9),
    ],
    ("inner", "changes"): [
        ("k", 1, "foo", "insert", 2),
        ("k", 1, "foo", "delete", 3),
        ("k", 3, "bar", "insert", 5),
        ("k", 3, "bar", "delete", 6),
        ("k", 1, "foo", "insert", 7),
        ("q", 10, "baz", "insert", 9),
    ],
    ("left", "changes"): [
        ("k", 1, "foo", "insert", 2),
        ("k", 1, "foo", "update_preimage", 3), ("k", 2, None, "update_postimage", 3),
        ("k", 2, None, "update_preimage", 4), ("k", 3, None, "update_postimage", 4),
        ("k", 3, None, "update_preimage", 5), ("k", 3, "bar", "update_postimage", 5),
        ("k", 3, "bar", "delete", 6),
        ("k", 1, "foo", "insert", 7),
        ("q", 10, None, "insert", 8),
        ("q", 10, None, "update_preimage", 9), ("q", 10, "baz", "update_postimage", 9),
    ],
    ("inner", "final"): [("k", 1, "foo"), ("q", 10, "baz")],
    ("left", "final"): [("k", 1, "foo"), ("q", 10, "baz")],
}


# random interleavings: left keys a..d, right keys 1..3, fk changes, NULL fks, deletes, re-inserts
left_event = st.tuples(st.just("left"), st.sampled_from("abcd"),
                       st.one_of(st.none(), st.builds(L, st.one_of(st.none(), st.integers(1, 3)),
                                                     st.sampled_from(["n", "m"]))))
right_event = st.tuples(st.just("right"), st.integers(1, 3),
                        st.one_of(st.none(), st.builds(R, st.sampled_from(["x", "y"]))))
event_lists = st.lists(st.one_of(left_event, right_event), max_size=24).flatmap(
    lambda evs: st.lists(st.integers(0, 2), min_size=len(evs), max_size=len(evs)).map(
        # versions ascend, sometimes shared by a left and a right change (never by one key)
        lambda gaps: _versioned(evs, gaps)))


def _versioned(events, gaps):
    out, version, used = [], 0, set()
    for (side, key, row), gap in zip(events, gaps):
        version += gap
        if (version, side, key) in used or gap == 0 and out and out[-1][1] == side:
            version += 1
        used.add((version, side, key))
        out.append((version, side, key, row))
    return out

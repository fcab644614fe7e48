"""CHANGELOG_FILTER over one increment, column-wise on Arrow data, against the per-key
reference logic the state-store engine and the batch reference use (no Spark session): the same
forwarded rows, the same new state and the same errors, on random states and increments."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples

from sqlext.catalog.changelog_filter import PASS_COLUMN, filter_spec
from sqlext.catalog.changes import changes_by_key
from sqlext.errors import SqlextError
from sqlext.udfs.changelog_filter import apply_increment, filter_increment

CDF = ["id", "v", "_change_type", "_commit_version"]
UPSERT = ["id", "v", "_commit_version"]
PASSED, PRESENT = "passed", "present"


def _table(rows, columns, extra=()):
    types = {"id": pa.int64(), "v": pa.int64(), "_change_type": pa.string(), "_commit_version": pa.int64(),
             PASS_COLUMN: pa.bool_(), PASSED: pa.bool_(), PRESENT: pa.bool_()}
    names = columns + list(extra)
    return pa.Table.from_pylist(rows, schema=pa.schema([(c, types[c]) for c in names]))


def reference(spec, changes, state):
    """The per-key path: the forwarded rows and new state rows, as multisets."""
    shape = spec.shape
    prior = {(r["id"],): r for r in state}
    out, new_state = [], []
    for key, key_changes in changes_by_key(shape, changes).items():
        row = prior.get(key)
        old = None if row is None else {c: row[c] for c in (*shape.data_columns, shape.order_by)}
        after = apply_increment(spec, key_changes, old, row[PASSED] if row else False,
                                row[shape.order_by] if row else None, out)
        if after is not None:
            last, passes = after
            present = last.get("_change_type") in ("insert", "update_postimage") if shape.has_change_type \
                else last["v"] is not None
            new_state.append((last["id"], last["v"], last[shape.order_by], passes, present))
    return Counter(tuple(sorted(r.items())) for r in out), Counter(new_state)


@st.composite
def increments(draw):
    shape = draw(st.sampled_from(["cdf", "upsert"]))
    state, version = [], 0
    for key in draw(st.sets(st.integers(0, 5), max_size=4)):
        version += 1
        value = draw(st.one_of(st.none(), st.integers(-2, 3)))
        present = value is not None
        state.append({"id": key, "v": value, "_commit_version": version, PASSED: present and value >= 0,
                      PRESENT: present, **({"_change_type": "insert" if present else "delete"} if shape == "cdf" else {})})
    changes = []
    for _ in range(draw(st.integers(0, 10))):
        version += draw(st.integers(0, 1))  # now and then two changes share a version: a tie if one key
        key, value = draw(st.integers(0, 6)), draw(st.one_of(st.none(), st.integers(-2, 3)))
        row = {"id": key, "v": value, "_commit_version": version + 1, PASS_COLUMN: value is not None and value >= 0}
        if shape == "cdf":
            row["_change_type"] = draw(st.sampled_from(["insert", "update_postimage", "delete"]))
        changes.append(row)
    emit = draw(st.sampled_from(["changes", "records"]))
    return shape, state, changes, emit


@settings(max_examples=examples(300, 3000), deadline=None)
@given(case=increments())
def test_column_wise_matches_the_per_key_reference(case):
    shape, state, changes, emit = case
    columns = CDF if shape == "cdf" else UPSERT
    spec = filter_spec({"key": "id", "predicate": "v >= 0", "emit": emit}, columns)
    try:
        expected = reference(spec, [dict(r) for r in changes], state)
    except SqlextError as error:
        with pytest.raises(SqlextError) as raised:
            filter_increment(spec, _table(changes, columns, [PASS_COLUMN]), _table(state, columns, [PASSED, PRESENT]),
                             PASSED, PRESENT)
        assert raised.value.error_class == error.error_class
        return
    before = _table(state, columns, [PASSED, PRESENT])
    out, new_state = filter_increment(spec, _table(changes, columns, [PASS_COLUMN]), before, PASSED, PRESENT)
    # the new state has the state's columns, also when the increment is empty
    assert new_state.column_names == ["id", "v", "_commit_version", PASSED, PRESENT]
    assert Counter(tuple(sorted(r.items())) for r in out.to_pylist()) == expected[0]
    assert Counter((r["id"], r["v"], r["_commit_version"], r[PASSED], r[PRESENT])
                   for r in new_state.to_pylist()) == expected[1]

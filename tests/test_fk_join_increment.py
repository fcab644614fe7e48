"""FK_JOIN over one increment, column-wise on Arrow data, against the per-key replay the
incremental runs used before it and still use for ``emit => 'records'`` (no Spark session): the
same forwarded rows, the same new state of both inputs and the same errors, on random states and
increments (foreign keys that move, go NULL or point nowhere; right rows that change under
their subscribers; a left and a right change at one version; late changes and ties)."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples

from sqlext.catalog.changes import changes_by_key, late_change
from sqlext.catalog.fk_join import FUNCTION, fk_join_spec
from sqlext.errors import SqlextError
from sqlext.udfs.fk_join import JoinReplay, join_increment

FK, PRESENT = "__sx_fk", "__sx_present"
TYPES = {"id": pa.string(), "fk": pa.int64(), "note": pa.string(), "rid": pa.int64(), "name": pa.string(),
         "_change_type": pa.string(), "_commit_version": pa.int64(), FK: pa.int64(), PRESENT: pa.bool_()}


def _schema(columns):
    return pa.schema([(c, TYPES[c]) for c in columns])


def _table(rows, columns):
    return pa.Table.from_pylist(rows, schema=_schema(columns))


def reference(spec, left, right, left_state, right_state, highest):
    """What the per-key replay forwards, and each changed key's last row, as multisets."""
    left_changes = changes_by_key(spec.left, left)
    right_changes = changes_by_key(spec.right, right)
    for shape, changes in ((spec.left, left_changes), (spec.right, right_changes)):
        for key_changes in changes.values():
            for change in key_changes:
                if highest is not None and change.order <= highest:
                    raise late_change(FUNCTION, shape.key_text(change.row), shape.order_by, repr(change.order),
                                      repr(highest), across_inputs=True)
    replay = JoinReplay(spec, FK, {(r["id"],): r for r in left_state if r[PRESENT]},
                        {r["rid"]: r for r in right_state if r[PRESENT]})
    out = replay.run(left_changes, {k[0]: c for k, c in right_changes.items()})
    if spec.emit == "final":
        out = []

    def last(changes, shape, *extra):
        rows = []
        for key_changes in changes.values():
            row = key_changes[-1].row
            rows.append(tuple(row[c] for c in (*shape.data_columns, shape.order_by, *extra))
                        + (key_changes[-1].present,))
        return Counter(rows)

    return (Counter(tuple(sorted(r.items())) for r in out), last(left_changes, spec.left, FK),
            last(right_changes, spec.right))


@st.composite
def increments(draw):
    cdf = draw(st.booleans())
    version = 0
    state = {"left": [], "right": []}
    current = {"left": {}, "right": {}}
    for side, keys in (("left", ["a", "b", "c", "d"]), ("right", [1, 2, 3])):
        for key in draw(st.sets(st.sampled_from(keys), max_size=len(keys))):
            version += 1
            there = draw(st.booleans())
            if side == "left":
                row = {"id": key, "fk": draw(st.one_of(st.none(), st.integers(1, 4))), "note": draw(st.sampled_from("xy"))}
                row[FK] = row["fk"]
            else:
                row = {"rid": key, "name": draw(st.sampled_from(["p", "q"]))}
            if there:
                current[side][key] = row
            elif not cdf:
                row = {k: (v if k in ("id", "rid") else None) for k, v in row.items()}
            state[side].append({**row, "_commit_version": version, PRESENT: there})
    highest = version if version and draw(st.booleans()) else (version or None)
    changes = {"left": [], "right": []}
    for _ in range(draw(st.integers(0, 12))):
        version += draw(st.integers(0, 1))
        late = highest is not None and draw(st.integers(0, 30)) == 0
        at = draw(st.integers(1, highest)) if late else version + 1
        side = draw(st.sampled_from(["left", "right"]))
        key = draw(st.sampled_from(["a", "b", "c", "d", "e"] if side == "left" else [1, 2, 3, 4]))
        gone = draw(st.integers(0, 4)) == 0
        if side == "left":
            fk = draw(st.one_of(st.none(), st.integers(1, 4)))
            row = {"id": key, "fk": fk, "note": draw(st.sampled_from("xyz")), FK: fk}
        else:
            row = {"rid": key, "name": draw(st.sampled_from(["p", "q", "r"]))}
        old = current[side].get(key)
        if cdf:
            if gone:
                kind = "delete"
                row = {**(old or row)}
                current[side].pop(key, None)
            else:
                kind = "insert" if old is None else "update_postimage"
                if old is not None and draw(st.booleans()):
                    changes[side].append({**old, "_change_type": "update_preimage", "_commit_version": at})
                current[side][key] = row
            row = {**row, "_change_type": kind}
        else:
            if gone:
                row = {k: (v if k in ("id", "rid") else None) for k, v in row.items()}
                current[side].pop(key, None)
            else:
                current[side][key] = row
        changes[side].append({**row, "_commit_version": at})
    return (cdf, state, changes, highest, draw(st.sampled_from(["inner", "left"])),
            draw(st.sampled_from(["changes", "final"])))


def _columns(cdf):
    change = ["_change_type"] if cdf else []
    return ["id", "fk", "note"] + change + ["_commit_version"], ["rid", "name"] + change + ["_commit_version"]


@settings(max_examples=examples(400, 4000), deadline=None)
@given(case=increments())
def test_column_wise_matches_the_per_key_replay(case):
    cdf, state, changes, highest, join_type, emit = case
    left_columns, right_columns = _columns(cdf)
    spec = fk_join_spec({"left_key": "id", "foreign_key": "fk", "right_key": "rid", "join_type": join_type,
                         "emit": emit}, left_columns, right_columns)
    try:
        expected = reference(spec, [dict(r) for r in changes["left"]], [dict(r) for r in changes["right"]],
                             state["left"], state["right"], highest)
    except SqlextError as error:
        expected = error.error_class
    output = _schema(["id", "fk", "note", "rid", "name", "_change_type", "_commit_version"])
    left_state = _table(state["left"], ["id", "fk", "note", "_commit_version", FK, PRESENT])
    right_state = _table(state["right"], ["rid", "name", "_commit_version", PRESENT])
    try:
        got = join_increment(spec, FK, PRESENT, _table(changes["left"], left_columns + [FK]),
                             _table(changes["right"], right_columns), left_state, right_state, highest, output)
    except SqlextError as error:
        assert error.error_class == expected
        return
    assert got is not None
    out, left_last, right_last = got
    assert out.schema == output
    rows = Counter(tuple(sorted(r.items())) for r in out.to_pylist())
    assert (rows, Counter(tuple(r.values()) for r in left_last.to_pylist()),
            Counter(tuple(r.values()) for r in right_last.to_pylist())) == expected


def test_rows_come_in_forwarding_order_with_each_preimage_before_its_postimage():
    spec = fk_join_spec({"left_key": "id", "foreign_key": "fk", "right_key": "rid"},
                        ["id", "fk", "note", "_commit_version"], ["rid", "name", "_commit_version"])
    left_state = _table([{"id": "a", "fk": 1, "note": "x", "_commit_version": 1, FK: 1, PRESENT: True},
                         {"id": "b", "fk": 1, "note": "y", "_commit_version": 2, FK: 1, PRESENT: True}],
                        ["id", "fk", "note", "_commit_version", FK, PRESENT])
    right_state = _table([{"rid": 1, "name": "p", "_commit_version": 3, PRESENT: True}],
                         ["rid", "name", "_commit_version", PRESENT])
    left = _table([{"id": "b", "fk": 1, "note": "z", "_commit_version": 5, FK: 1}],
                  ["id", "fk", "note", "_commit_version", FK])
    right = _table([{"rid": 1, "name": "q", "_commit_version": 4}], ["rid", "name", "_commit_version"])
    output = _schema(["id", "fk", "note", "rid", "name", "_change_type", "_commit_version"])
    out, _, _ = join_increment(spec, FK, PRESENT, left, right, left_state, right_state, 3, output)
    assert [(r["_commit_version"], r["id"], r["_change_type"], r["name"], r["note"]) for r in out.to_pylist()] == [
        (4, "a", "update_preimage", "p", "x"), (4, "a", "update_postimage", "q", "x"),
        (4, "b", "update_preimage", "p", "y"), (4, "b", "update_postimage", "q", "y"),
        (5, "b", "update_preimage", "q", "y"), (5, "b", "update_postimage", "q", "z")]


@pytest.mark.parametrize("emit, sequence_by", [("records", None), ("changes", "ts")])
def test_records_and_sequence_by_are_left_to_the_per_key_replay(emit, sequence_by):
    columns = ["id", "fk", "ts", "_commit_version"]
    arguments = {"left_key": "id", "foreign_key": "fk", "right_key": "rid", "emit": emit}
    if sequence_by:
        arguments["sequence_by"] = sequence_by
    spec = fk_join_spec(arguments, columns, ["rid", "ts", "_commit_version"])
    empty = pa.table({})
    assert join_increment(spec, FK, PRESENT, empty, empty, empty, empty, None, pa.schema([])) is None


@settings(max_examples=examples(200, 2000), deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 8), st.integers(0, 4)), max_size=12),
       changes=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 10)), max_size=12),
       wide=st.booleans())
def test_the_changes_a_row_meets_are_those_of_its_key_within_its_span(rows, changes, wide):
    """The pairs the step's subscription lookup finds: each left row alive from one version
    (excluded) to a later one (included), and each right change of the key it points at in that
    span; one integer per (key, version), or a join where that does not fit in 62 bits."""
    import numpy as np

    from sqlext.udfs.fk_join import _met_during

    if not rows or not changes:
        return
    keys = np.array([k for k, _, _ in rows], np.int64)
    starts = np.array([s for _, s, _ in rows], np.int64)
    ends = starts + np.array([n for _, _, n in rows], np.int64)
    change_keys = np.array([k for k, _ in changes], np.int64)
    versions = np.array([v for _, v in changes], np.int64)
    width = (1 << 61) if wide else int(max(ends.max(), versions.max())) + 2
    row, change = _met_during(keys, starts, ends, change_keys, versions, width)
    expected = Counter((r, c) for r in range(len(rows)) for c in range(len(changes))
                       if keys[r] == change_keys[c] and starts[r] < versions[c] <= ends[r])
    assert Counter(zip(row.tolist(), change.tolist())) == expected

"""CHANGELOG_FILTER's column-wise kernel against the plain per-key replay
(``tests/reference/changelog_filter.py``), with no Spark session: on random states and
increments (late, stale and tied changes included) the same forwarded rows, the same new state
and the same errors; on random feeds cut into random runs, the runs' outputs add up to the
replay's batch output; and the batch form (the registered table function's) is the replay's."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from profiles import examples

from feeds import NULL_V, _arrow_schema, predicate_value, rows_for
from reference.changelog_filter import apply_increment, changelog_filter
from sqlext.functions.changelog_filter import PASS_COLUMN, filter_spec
from sqlext.functions.changes import changes_by_key
from sqlext.errors import SqlextError
from sqlext.udfs.changelog_filter import filter_batch, filter_increment

CDF = ["id", "v", "ts", "_change_type", "_commit_version"]
UPSERT = ["id", "v", "ts", "_commit_version"]
PASSED, PRESENT = "passed", "present"
TYPES = {"id": pa.int64(), "name": pa.string(), "v": pa.int64(), "ts": pa.int64(), "_change_type": pa.string(),
         "_commit_version": pa.int64(), PASS_COLUMN: pa.bool_(), PASSED: pa.bool_(), PRESENT: pa.bool_()}


def _table(rows, columns, extra=()):
    names = list(columns) + list(extra)
    return pa.Table.from_pylist([{c: r.get(c) for c in names} for r in rows],
                                schema=pa.schema([(c, TYPES[c]) for c in names]))


def _spec(shape, emit, sequenced, columns):
    arguments = {"key": "id", "predicate": "v >= 0", "emit": emit}
    if sequenced:
        arguments["sequence_by"] = "ts"
    return filter_spec(arguments, columns)


def replay(spec, changes, state):
    """The per-key replay of one increment: the forwarded rows and the new state rows by key."""
    shape = spec.shape
    prior = {(r["id"],): r for r in state}
    out, new_state = [], {}
    for key, key_changes in changes_by_key(shape, changes).items():
        row = prior.get(key)
        old = None if row is None else {c: row[c] for c in (*shape.data_columns, shape.order_by)}
        after = apply_increment(spec, key_changes, old, row[PASSED] if row else False,
                                row[shape.order_by] if row else None, out)
        if after is not None:
            last, passes = after
            present = last["_change_type"] in ("insert", "update_postimage") if shape.has_change_type \
                else any(last[c] is not None for c in shape.tombstone_columns)
            new_state[key[0]] = {**{c: last[c] for c in (*shape.data_columns, shape.order_by)},
                                 PASSED: passes, PRESENT: present}
    return out, new_state


def classes_by_key(spec, changes, state) -> set[str]:
    """The error each key's changes meet on their own in the replay (the kernel checks the
    whole increment at once, so with errors at several keys it may name another key's first)."""
    found = set()
    for key in {r["id"] for r in changes}:
        try:
            replay(spec, [r for r in changes if r["id"] == key], [s for s in state if s["id"] == key])
        except SqlextError as error:
            found.add(error.error_class)
    return found


def rows_of(table) -> Counter:
    return Counter(tuple(sorted(r.items())) for r in table)


def kernel(spec, changes, state, columns):
    return filter_increment(spec, _table(changes, columns, [PASS_COLUMN]), _table(state, columns, [PASSED, PRESENT]),
                            PASSED, PRESENT)


@st.composite
def increments(draw):
    """A state of a few keys and an increment over them and others: versions now and then at or
    below a key's last one (late), shared by two changes (a tie), sequence values out of order,
    now and then NULL."""
    shape = draw(st.sampled_from(["cdf", "upsert"]))
    state, version = [], 0
    for key in draw(st.sets(st.integers(0, 5), max_size=4)):
        version += 1
        value = draw(st.one_of(st.none(), st.integers(-2, 3)))
        present = draw(st.booleans()) if value is None else True
        state.append({"id": key, "v": value, "ts": draw(st.integers(0, 6)), "_commit_version": version,
                      PASSED: present and value is not None and value >= 0, PRESENT: present,
                      **({"_change_type": "insert" if present else "delete"} if shape == "cdf" else {})})
    changes = []
    for _ in range(draw(st.integers(0, 10))):
        version += draw(st.integers(0, 1))  # now and then two changes share a version: a tie if one key
        back = draw(st.sampled_from([0] * 8 + [1, 3]))  # now and then at or below a key's last version
        key, value = draw(st.integers(0, 6)), draw(st.one_of(st.none(), st.integers(-2, 3)))
        stamp = draw(st.one_of(st.integers(0, 6), st.none())) if draw(st.integers(0, 19)) == 0 \
            else draw(st.integers(0, 6))
        row = {"id": key, "v": value, "ts": stamp, "_commit_version": max(version + 1 - back, 1),
               PASS_COLUMN: value is not None and value >= 0}
        if shape == "cdf":
            row["_change_type"] = draw(st.sampled_from(["insert", "update_postimage", "delete"]))
        changes.append(row)
    return shape, state, changes, draw(st.sampled_from(["changes", "records"])), draw(st.booleans())


@settings(max_examples=examples(400, 4000), deadline=None)
@given(case=increments())
@example(case=("upsert", [{"id": 1, "v": 5, "ts": 4, "_commit_version": 2, PASSED: True, PRESENT: True}],
               [{"id": 1, "v": 7, "ts": 3, "_commit_version": 1, PASS_COLUMN: True},
                {"id": 1, "v": 8, "ts": 5, "_commit_version": 3, PASS_COLUMN: True}], "changes", True))
@example(case=("cdf", [{"id": 1, "v": 5, "ts": 4, "_commit_version": 2, "_change_type": "insert", PASSED: True,
                        PRESENT: True}],
               [{"id": 1, "v": 7, "ts": 9, "_commit_version": 2, "_change_type": "update_postimage",
                 PASS_COLUMN: True}], "changes", False))
def test_column_wise_matches_the_per_key_replay(case):
    shape, state, changes, emit, sequenced = case
    columns = CDF if shape == "cdf" else UPSERT
    spec = _spec(shape, emit, sequenced, columns)
    try:
        expected, expected_state = replay(spec, [dict(r) for r in changes], state)
    except SqlextError:
        with pytest.raises(SqlextError) as raised:
            kernel(spec, changes, state, columns)
        assert raised.value.error_class in classes_by_key(spec, changes, state)
        return
    out, new_state = kernel(spec, changes, state, columns)
    # the new state has the state's columns, also when the increment is empty
    assert new_state.column_names == ["id", "v", "ts", "_commit_version", PASSED, PRESENT]
    assert rows_of(out.to_pylist()) == rows_of(expected)
    assert {r["id"]: r for r in new_state.to_pylist()} == expected_state


def _changes(shape, rows, predicate="v >= 0"):
    """A feed's rows as the kernel takes them: no preimages, the predicate's value beside each."""
    return [{**r, PASS_COLUMN: bool(predicate_value(r, predicate))} for r in rows
            if r.get("_change_type") != "update_preimage"]


# a history: (version, key, value or None for a delete or NULL_V, ts), versions rising
histories = st.lists(st.tuples(st.integers(0, 4), st.one_of(st.none(), st.just(NULL_V), st.integers(-3, 5)),
                               st.integers(0, 8)), min_size=1, max_size=16) \
    .map(lambda events: [(version + 1, key, v, ts) for version, (key, v, ts) in enumerate(events)])


@settings(max_examples=examples(150, 1500), deadline=None)
@given(events=histories, cuts=st.lists(st.integers(1, 16), max_size=5), shape=st.sampled_from(["cdf", "upsert"]),
       emit=st.sampled_from(["changes", "records", "final"]), sequenced=st.booleans())
def test_runs_of_a_feed_add_up_to_the_batch_replay(events, cuts, shape, emit, sequenced):
    """A feed cut into runs, each applied by the kernel from the state the runs before left: the
    outputs concatenated (for 'final': the passing rows of the state) are the replay's batch
    output over the whole feed."""
    columns = [f.name for f in _arrow_schema(shape)]
    spec = _spec(shape, emit, sequenced, columns)
    state: dict = {}
    out: list[dict] = []
    done = 0
    for bound in sorted({min(c, len(events)) for c in cuts} | {len(events)}):
        increment = _changes(shape, rows_for(shape, [e for e in events if done < e[0] <= bound]))
        touched = [state[k] for k in {r["id"] for r in increment} if k in state]
        forwarded, new_state = filter_increment(spec, _table(increment, columns, [PASS_COLUMN]),
                                                _table(touched, columns, [PASSED, PRESENT]), PASSED, PRESENT)
        out += forwarded.to_pylist()
        state.update({r["id"]: r for r in new_state.to_pylist()})
        done = bound
    rows = rows_for(shape, events)
    batch = changelog_filter(spec, pa.Table.from_pylist(rows, schema=_arrow_schema(shape)),
                             [predicate_value(r, "v >= 0") for r in rows]).to_pylist()
    if emit == "final":
        out = [{c: r[c] for c in spec.output_columns} for r in state.values() if r[PASSED]]
    assert rows_of(out) == rows_of(batch)


@settings(max_examples=examples(150, 1500), deadline=None)
@given(events=histories, shape=st.sampled_from(["cdf", "upsert"]), emit=st.sampled_from(["changes", "records", "final"]),
       sequenced=st.booleans())
def test_the_batch_form_is_the_replay(events, shape, emit, sequenced):
    """What the registered table function returns (the kernel from no state, preimages included
    in its input) is the replay's batch output."""
    columns = [f.name for f in _arrow_schema(shape)]
    spec = _spec(shape, emit, sequenced, columns)
    rows = rows_for(shape, events)
    passes = [predicate_value(r, "v >= 0") for r in rows]
    table = pa.Table.from_pylist(rows, schema=_arrow_schema(shape))
    got = filter_batch(spec, table.append_column(PASS_COLUMN, pa.array([bool(p) for p in passes], pa.bool_())))
    expected = changelog_filter(spec, table, passes)
    assert got.schema == expected.schema
    assert rows_of(got.to_pylist()) == rows_of(expected.to_pylist())


def test_a_late_change_names_its_key_and_the_last_version():
    spec = _spec("upsert", "changes", False, UPSERT)
    state = [{"id": 4, "v": 1, "ts": 0, "_commit_version": 7, PASSED: True, PRESENT: True}]
    with pytest.raises(SqlextError, match=r"\[LATE_CHANGE\].*id=4.*_commit_version = 6.*not above 7"):
        kernel(spec, [{"id": 4, "v": 2, "ts": 0, "_commit_version": 6, PASS_COLUMN: True}], state, UPSERT)


def test_a_stale_late_change_is_dropped_with_sequence_by():
    spec = _spec("upsert", "changes", True, UPSERT)
    state = [{"id": 4, "v": 1, "ts": 5, "_commit_version": 7, PASSED: True, PRESENT: True}]
    out, new_state = kernel(spec, [{"id": 4, "v": 2, "ts": 3, "_commit_version": 6, PASS_COLUMN: True},
                                   {"id": 4, "v": 3, "ts": 4, "_commit_version": 8, PASS_COLUMN: True},
                                   {"id": 4, "v": 9, "ts": 6, "_commit_version": 9, PASS_COLUMN: True}], state, UPSERT)
    assert [(r["_change_type"], r["v"], r["_commit_version"]) for r in out.to_pylist()] == [
        ("update_preimage", 1, 9), ("update_postimage", 9, 9)]
    assert [(r["v"], r["ts"], r["_commit_version"]) for r in new_state.to_pylist()] == [(9, 6, 9)]

"""FK_JOIN over one increment, column-wise on Arrow data, against the per-key replay of
``tests/reference/fk_join_increment.py`` (no Spark session): the same forwarded rows (in the
same order for each left key), the same new state of both inputs and the same errors, for
``emit => 'changes'``, ``'records'`` and ``'final'``, with and without ``sequence_by``, on random
states and increments (foreign keys that move, go NULL or point nowhere; right rows that change
under their subscribers; a left and a right change at one version; late, stale and tied
changes) and on random feeds cut into runs."""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples
from reference.fk_join_increment import replay_increment

from sqlext.functions.fk_join import fk_join_spec
from sqlext.errors import SqlextError
from sqlext.udfs.fk_join import join_increment

FK, PRESENT = "__sx_fk", "__sx_present"
TYPES = {"id": pa.string(), "fk": pa.int64(), "note": pa.string(), "ts": pa.int64(), "rid": pa.int64(),
         "name": pa.string(), "ts_right": pa.int64(), "_change_type": pa.string(), "_commit_version": pa.int64(),
         FK: pa.int64(), PRESENT: pa.bool_()}
LEFT_KEYS, RIGHT_KEYS = ["a", "b", "c", "d", "e"], [1, 2, 3, 4]


def _schema(columns):
    return pa.schema([(c, TYPES[c]) for c in columns])


def _table(rows, columns):
    return pa.Table.from_pylist(rows, schema=_schema(columns))


def _columns(cdf: bool, sequence: bool):
    """The left and right inputs' columns."""
    change = ["_change_type"] if cdf else []
    stamp = ["ts"] if sequence else []
    return ["id", "fk", "note"] + stamp + change + ["_commit_version"], \
        ["rid", "name"] + stamp + change + ["_commit_version"]


def _spec(cdf, sequence, join_type, emit):
    left_columns, right_columns = _columns(cdf, sequence)
    arguments = {"left_key": "id", "foreign_key": "fk", "right_key": "rid", "join_type": join_type, "emit": emit}
    if sequence:
        arguments["sequence_by"] = "ts"
    return fk_join_spec(arguments, left_columns, right_columns)


def _state_columns(spec):
    return [*spec.left.data_columns, spec.left.order_by, FK, PRESENT], \
        [*spec.right.data_columns, spec.right.order_by, PRESENT]


def _output(spec):
    return _schema([*spec.left.data_columns, *spec.right_names.values(), "_change_type", "_commit_version"])


def _by_key(rows):
    """The forwarded rows of each left key, in their order."""
    keyed: dict = {}
    for row in rows:
        keyed.setdefault(row["id"], []).append(tuple(sorted(row.items())))
    return keyed


def _state(rows):
    return Counter(tuple(sorted(r.items())) for r in rows)


def _both(spec, left, right, left_state, right_state, highest):
    """The reference's and the column-wise step's results over one increment (each as
    (forwarded rows by key, left state rows, right state rows), or an error class)."""
    left_columns, right_columns = list(spec.left.columns), list(spec.right.columns)
    left_state_columns, right_state_columns = _state_columns(spec)
    try:
        out, left_last, right_last = replay_increment(spec, FK, PRESENT, [dict(r) for r in left],
                                                      [dict(r) for r in right], left_state, right_state, highest)
        expected = (_by_key(out), _state(left_last), _state(right_last))
    except SqlextError as error:
        expected = error.error_class
    output = _output(spec)
    try:
        out, left_last, right_last = join_increment(
            spec, FK, PRESENT, _table(left, left_columns + [FK]), _table(right, right_columns),
            _table(left_state, left_state_columns), _table(right_state, right_state_columns), highest, output)
    except SqlextError as error:
        return expected, error.error_class
    assert out.schema == output
    assert left_last.schema == _schema(left_state_columns) and right_last.schema == _schema(right_state_columns)
    return expected, (_by_key(out.to_pylist()), _state(left_last.to_pylist()), _state(right_last.to_pylist()))


class _Feed:
    """Random changes of both inputs, each as its input's shape writes it, and the rows they
    leave (the state an earlier run would hold)."""

    def __init__(self, draw, cdf: bool, sequence: bool):
        self.draw, self.cdf, self.sequence = draw, cdf, sequence
        self.current = {"left": {}, "right": {}}

    def row(self, side: str, key):
        draw = self.draw
        if side == "left":
            fk = draw(st.one_of(st.none(), st.integers(1, 4)))
            row = {"id": key, "fk": fk, "note": draw(st.sampled_from("xyz")), FK: fk}
        else:
            row = {"rid": key, "name": draw(st.sampled_from(["p", "q", "r"]))}
        if self.sequence:  # now and then a NULL: [NULL_SEQUENCE_VALUE]
            row["ts"] = None if draw(st.integers(0, 60)) == 23 else draw(st.integers(0, 4))
        return row

    def tombstone(self, row: dict) -> dict:
        """An upsert log's delete: every value NULL but the key (and its sequence_by value)."""
        return {k: (v if k in ("id", "rid", "ts") else None) for k, v in row.items()}

    def change(self, side: str, key, version) -> list[dict]:
        """One change (with a preimage now and then), applied to the rows it leaves."""
        draw = self.draw
        row, gone = self.row(side, key), draw(st.integers(0, 4)) == 0
        old = self.current[side].get(key)
        rows = []
        if self.cdf:
            if gone:
                kind = "delete"
                row = {**(old or row), **({"ts": row["ts"]} if self.sequence else {})}
                self.current[side].pop(key, None)
            else:
                kind = "insert" if old is None else "update_postimage"
                if old is not None and draw(st.booleans()):
                    rows.append({**old, "_change_type": "update_preimage", "_commit_version": version})
                self.current[side][key] = row
            row = {**row, "_change_type": kind}
        elif gone:
            row = self.tombstone(row)
            self.current[side].pop(key, None)
        else:
            self.current[side][key] = row
        return rows + [{**row, "_commit_version": version}]


@st.composite
def increments(draw):
    cdf, sequence = draw(st.booleans()), draw(st.booleans())
    feed = _Feed(draw, cdf, sequence)
    version = 0
    state = {"left": [], "right": []}
    for side, keys in (("left", LEFT_KEYS[:4]), ("right", RIGHT_KEYS[:3])):
        for key in draw(st.sets(st.sampled_from(keys), max_size=len(keys))):
            version += 1
            there = draw(st.booleans())
            row = feed.row(side, key)
            if sequence and row["ts"] is None:
                row["ts"] = 0
            if there:
                feed.current[side][key] = row
            elif not cdf:
                row = feed.tombstone(row)
            state[side].append({**row, "_commit_version": version, PRESENT: there})
    highest = version if version and draw(st.booleans()) else (version or None)
    changes = {"left": [], "right": []}
    for _ in range(draw(st.integers(1, 12))):
        version += draw(st.integers(0, 2)) != 1  # now and then one version for several changes
        late = highest is not None and draw(st.integers(0, 30 if not sequence else 6)) == 5
        at = draw(st.integers(1, highest)) if late else version + 1
        side = draw(st.sampled_from(["left", "right"]))
        key = draw(st.sampled_from(LEFT_KEYS if side == "left" else RIGHT_KEYS))
        changes[side] += feed.change(side, key, at)
    spec = _spec(cdf, sequence, draw(st.sampled_from(["inner", "left"])),
                 draw(st.sampled_from(["changes", "records", "final"])))
    return spec, state, changes, highest


@contextmanager
def _searches(sorted_queries: bool):
    """The step's binary searches as a large increment runs them (the queries sorted first,
    :func:`sqlext.udfs.column_wise.search`) or as a small one does."""
    from sqlext.udfs import column_wise

    kept = column_wise.SORT_QUERIES_FROM
    column_wise.SORT_QUERIES_FROM = 0 if sorted_queries else kept
    try:
        yield
    finally:
        column_wise.SORT_QUERIES_FROM = kept


@settings(max_examples=examples(600, 6000), deadline=None)
@given(case=increments(), sorted_queries=st.booleans())
def test_column_wise_matches_the_per_key_replay(case, sorted_queries):
    spec, state, changes, highest = case
    with _searches(sorted_queries):
        expected, got = _both(spec, changes["left"], changes["right"], state["left"], state["right"], highest)
    assert got == expected


@st.composite
def runs(draw):
    """A feed of changes of both inputs (two changes of a key at one version now and then) and
    the versions after which it is cut into runs."""
    cdf, sequence = draw(st.booleans()), draw(st.booleans())
    feed = _Feed(draw, cdf, sequence)
    changes, version = {"left": [], "right": []}, 0
    for _ in range(draw(st.integers(1, 24))):
        version += draw(st.integers(0, 2)) != 1
        side = draw(st.sampled_from(["left", "right"]))
        key = draw(st.sampled_from(LEFT_KEYS if side == "left" else RIGHT_KEYS))
        changes[side] += feed.change(side, key, version + 1)
    cuts = sorted(set(draw(st.lists(st.integers(1, version + 1), max_size=4))) | {version + 1})
    spec = _spec(cdf, sequence, draw(st.sampled_from(["inner", "left"])), draw(st.sampled_from(["records", "changes"])))
    return spec, changes, cuts


@settings(max_examples=examples(300, 3000), deadline=None)
@given(case=runs())
def test_runs_over_a_feed_match_the_per_key_replay_run_by_run(case):
    """Each run starts from the state the runs before it left (every key's last row) and the
    highest version they processed."""
    spec, changes, cuts = case
    state = {"left": {}, "right": {}}
    highest, done = None, 0
    for cut in cuts:
        part = {side: [r for r in rows if done < r["_commit_version"] <= cut] for side, rows in changes.items()}
        expected, got = _both(spec, part["left"], part["right"], list(state["left"].values()),
                              list(state["right"].values()), highest)
        assert got == expected
        if isinstance(got, str):  # an error stops the feed
            return
        for side, key, rows in (("left", "id", got[1]), ("right", "rid", got[2])):
            for row in rows:
                state[side][dict(row)[key]] = dict(row)
        versions = [r["_commit_version"] for rows in part.values() for r in rows]
        highest = max([v for v in [highest, *versions] if v is not None], default=None)
        done = cut


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


def test_records_come_by_version_the_right_changes_first():
    """A right change re-forwards its subscribers; a left change at the same version comes
    after it, and a left delete of a row that never joined is a tombstone (KIP-213)."""
    spec = fk_join_spec({"left_key": "id", "foreign_key": "fk", "right_key": "rid", "emit": "records"},
                        ["id", "fk", "note", "_commit_version"], ["rid", "name", "_commit_version"])
    left_state = _table([{"id": "a", "fk": 1, "note": "x", "_commit_version": 1, FK: 1, PRESENT: True},
                         {"id": "b", "fk": 2, "note": "y", "_commit_version": 2, FK: 2, PRESENT: True}],
                        ["id", "fk", "note", "_commit_version", FK, PRESENT])
    right_state = _table([{"rid": 1, "name": "p", "_commit_version": 3, PRESENT: True}],
                         ["rid", "name", "_commit_version", PRESENT])
    left = _table([{"id": "a", "fk": 1, "note": "z", "_commit_version": 4, FK: 1},
                   {"id": "b", "fk": None, "note": None, "_commit_version": 5, FK: None}],
                  ["id", "fk", "note", "_commit_version", FK])
    right = _table([{"rid": 1, "name": "q", "_commit_version": 4}], ["rid", "name", "_commit_version"])
    output = _schema(["id", "fk", "note", "rid", "name", "_change_type", "_commit_version"])
    out, _, _ = join_increment(spec, FK, PRESENT, left, right, left_state, right_state, 3, output)
    assert [tuple(r.values()) for r in out.to_pylist()] == [
        ("a", 1, "x", 1, "q", "upsert", 4), ("a", 1, "z", 1, "q", "upsert", 4),
        ("b", None, None, None, None, "delete", 5)]


def test_nested_keys_and_values_compare_by_value():
    """A struct foreign key finds its right row, and a list or map value that is rewritten
    equal changes nothing (Arrow hashes flat values only)."""
    point = pa.struct([("x", pa.int64()), ("y", pa.int64())])
    tags, attributes = pa.list_(pa.string()), pa.map_(pa.string(), pa.int64())
    spec = fk_join_spec({"left_key": "id", "foreign_key": "at", "right_key": "place"},
                        ["id", "at", "tags", "_commit_version"], ["place", "attributes", "_commit_version"])
    left_schema = pa.schema([("id", pa.string()), ("at", point), ("tags", tags), ("_commit_version", pa.int64())])
    right_schema = pa.schema([("place", point), ("attributes", attributes), ("_commit_version", pa.int64())])
    left_state = pa.Table.from_pylist(
        [{"id": "a", "at": {"x": 1, "y": 2}, "tags": ["t"], "_commit_version": 1, FK: {"x": 1, "y": 2},
          PRESENT: True}], schema=left_schema.append(pa.field(FK, point)).append(pa.field(PRESENT, pa.bool_())))
    right_state = pa.Table.from_pylist(
        [{"place": {"x": 1, "y": 2}, "attributes": [("k", 1)], "_commit_version": 2, PRESENT: True},
         {"place": {"x": 1, "y": None}, "attributes": [("k", 9)], "_commit_version": 2, PRESENT: True}],
        schema=right_schema.append(pa.field(PRESENT, pa.bool_())))
    left = pa.Table.from_pylist([{"id": "a", "at": {"x": 1, "y": 2}, "tags": ["t"], "_commit_version": 3,
                                  FK: {"x": 1, "y": 2}}], schema=left_schema.append(pa.field(FK, point)))
    right = pa.Table.from_pylist([{"place": {"x": 1, "y": 2}, "attributes": [("k", 1)], "_commit_version": 4},
                                  {"place": {"x": 1, "y": 2}, "attributes": [("k", 2)], "_commit_version": 5}],
                                 schema=right_schema)
    output = pa.schema([("id", pa.string()), ("at", point), ("tags", tags), ("place", point),
                        ("attributes", attributes), ("_change_type", pa.string()), ("_commit_version", pa.int64())])
    out, _, right_last = join_increment(spec, FK, PRESENT, left, right, left_state, right_state, 2, output)
    assert [(r["_change_type"], r["attributes"], r["_commit_version"]) for r in out.to_pylist()] == [
        ("update_preimage", [("k", 1)], 5), ("update_postimage", [("k", 2)], 5)]
    assert right_last.column("_commit_version").to_pylist() == [5]


@settings(max_examples=examples(200, 2000), deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.fixed_dictionaries({
    "a": st.one_of(st.none(), st.integers(0, 2)),
    "b": st.one_of(st.none(), st.lists(st.one_of(st.none(), st.integers(0, 2)), max_size=3))})), max_size=10))
def test_nested_values_get_equal_codes_exactly_when_equal(values):
    from sqlext.udfs.column_wise import value_codes

    array = pa.array(values, pa.struct([("a", pa.int64()), ("b", pa.list_(pa.int64()))]))
    codes = value_codes(array)
    assert len(codes) == len(values)
    for i in range(len(values)):
        for j in range(len(values)):
            assert (codes[i] == codes[j]) == (values[i] == values[j])


@settings(max_examples=examples(200, 2000), deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 8), st.integers(0, 4)), max_size=12),
       changes=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 10)), max_size=12),
       wide=st.booleans(), sorted_queries=st.booleans())
def test_the_changes_a_row_meets_are_those_of_its_key_within_its_span(rows, changes, wide, sorted_queries):
    """The pairs the step's subscription lookup finds: each left row alive from one version
    (excluded) to a later one (included), and each right change of the key it points at in that
    span; one integer per (key, version), or a join where that does not fit in 62 bits."""
    from sqlext.udfs.column_wise import pairs_within

    if not rows or not changes:
        return
    keys = np.array([k for k, _, _ in rows], np.int64)
    starts = np.array([s for _, s, _ in rows], np.int64)
    ends = starts + np.array([n for _, _, n in rows], np.int64)
    change_keys = np.array([k for k, _ in changes], np.int64)
    versions = np.array([v for _, v in changes], np.int64)
    if wide:  # a span so long that key and version no longer fit in one integer together
        ends[0] += 1 << 61
    with _searches(sorted_queries):
        row, change = pairs_within(keys, starts, ends, change_keys, versions)
    assert row.tolist() == sorted(row.tolist())  # rows in order
    expected = Counter((r, c) for r in range(len(rows)) for c in range(len(changes))
                       if keys[r] == change_keys[c] and starts[r] < versions[c] <= ends[r])
    assert Counter(zip(row.tolist(), change.tolist())) == expected


@settings(max_examples=examples(200, 2000), deadline=None)
@given(ordered=st.lists(st.integers(-3, 20), max_size=30), queries=st.lists(st.integers(-5, 25), max_size=30),
       side=st.sampled_from(["left", "right"]))
def test_a_search_with_its_queries_sorted_first_finds_what_searchsorted_finds(ordered, queries, side):
    from sqlext.udfs.column_wise import search

    ordered, queries = np.sort(np.array(ordered, np.int64)), np.array(queries, np.int64)
    with _searches(True):
        found = search(ordered, queries, side)
    assert found.tolist() == np.searchsorted(ordered, queries, side=side).tolist()


@settings(max_examples=examples(200, 2000), deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 9)), max_size=20),
       asked=st.lists(st.tuples(st.integers(-1, 4), st.integers(0, 10)), max_size=20), sorted_queries=st.booleans())
def test_a_timeline_finds_each_keys_row_before_and_at_a_version(rows, asked, sorted_queries):
    """Both answers at once (one search where a key has each version once, two where a version
    repeats) equal the rows a scan finds: the newest of the key below the version, and at or
    below it (of equal rows, the last)."""
    from sqlext.udfs.column_wise import Timeline

    keys, versions = np.array([k for k, _ in rows], np.int64), np.array([v for _, v in rows], np.int64)
    line = Timeline(keys, versions, 12)
    want_keys, want_versions = np.array([k for k, _ in asked], np.int64), np.array([v for _, v in asked], np.int64)
    with _searches(sorted_queries):
        before, at = line.around(want_keys, want_versions)
        strict, loose = line.asof(want_keys, want_versions, True), line.asof(want_keys, want_versions, False)

    def newest(key, version, strict):
        found = [i for i, (k, v) in enumerate(rows) if k == key and (v < version if strict else v <= version)]
        if not found:
            return -1
        top = max(rows[i][1] for i in found)
        return [i for i in found if rows[i][1] == top][-1]

    for i, (key, version) in enumerate(asked):
        assert (before[i], at[i]) == (newest(key, version, True), newest(key, version, False))
        assert (strict[i], loose[i]) == (before[i], at[i])

"""The graph walk in pure Arrow/numpy (no JVM) against a plain-Python semi-naive reference,
on random graphs: NULL keys, cycles, UNION and UNION ALL, depth and path columns."""

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples

from reference.recursion import semi_naive
from rows import multiset
from sqlext.errors import SqlextError
from sqlext.udfs.recursive_expand import EdgeIndex, NotExact, WalkPlan, walk

node = st.one_of(st.none(), st.integers(1, 8))
graphs = st.lists(st.tuples(node, node), max_size=25)

# SELECT e.dst, r.d + 1, r.p || '>' || CAST(e.dst AS STRING) FROM r JOIN e ON r.n = e.src WHERE r.d < 5
PATH_PLAN = dict(
    columns=["n", "d", "p"], key_r="n", key_e="src",
    projections=[("col", "e", "dst"), ("add", ("col", "r", "d"), ("lit", 1, pa.int32())),
                 ("concat", [("col", "r", "p"), ("lit", ">", pa.large_string()),
                             ("to_string", ("col", "e", "dst"))])],
    filters=[("lt", ("col", "r", "d"), ("lit", 5, pa.int32()))],
    types=[pa.int64(), pa.int32(), pa.string()],
)


def run_walk(edges, seeds, plan):
    table = pa.table({"src": pa.array([e[0] for e in edges], pa.int64()),
                      "dst": pa.array([e[1] for e in edges], pa.int64())})
    index = EdgeIndex.build(table, "src")
    return [row for level in walk(seeds, index, plan) for row in zip(*level.to_pydict().values())]


def path_step(edges):
    def step(level):
        return [(dst, d + 1, None if p is None or dst is None else f"{p}>{dst}")
                for (n, d, p) in level if d < 5 for (src, dst) in edges
                if n is not None and src == n]
    return step


@settings(max_examples=examples(150, 1500), deadline=None)
@given(graphs, st.lists(st.integers(1, 8), min_size=1, max_size=3), st.booleans())
def test_walk_with_depth_and_path_matches_reference(edges, starts, distinct):
    seeds = pa.table({"n": pa.array(starts, pa.int64()), "d": pa.array([0] * len(starts), pa.int32()),
                      "p": pa.array([str(s) for s in starts], pa.string())})
    plan = WalkPlan(name="r", distinct=distinct, max_level=100, **PATH_PLAN)
    expected = semi_naive([(s, 0, str(s)) for s in starts], path_step(edges), distinct)
    assert multiset(run_walk(edges, seeds, plan)) == multiset(expected)


@settings(max_examples=examples(150, 1500), deadline=None)
@given(graphs, st.integers(1, 8))
def test_union_reachability_ends_on_cycles(edges, start):
    plan = WalkPlan(name="r", columns=["n"], key_r="n", key_e="src", projections=[("col", "e", "dst")],
                    filters=[], distinct=True, max_level=100, types=[pa.int64()])
    seeds = pa.table({"n": pa.array([start], pa.int64())})
    expected = semi_naive([(start,)], lambda level: [(d,) for (n,) in level for (s, d) in edges
                                                     if n is not None and s == n], True)
    assert multiset(run_walk(edges, seeds, plan)) == multiset(expected)


def test_union_all_on_a_cycle_hits_the_level_limit_as_spark_counts_it():
    plan = WalkPlan(name="r", columns=["n"], key_r="n", key_e="src", projections=[("col", "e", "dst")],
                    filters=[], distinct=False, max_level=5, types=[pa.int64()])
    seeds = pa.table({"n": pa.array([1], pa.int64())})
    with pytest.raises(SqlextError) as error:
        run_walk([(1, 2), (2, 1)], seeds, plan)
    assert error.value.error_class == "RECURSION_LEVEL_LIMIT_EXCEEDED"
    assert error.value.params["limit"] == 5 and error.value.params["level"] == 5
    # levels 0..4 with rows and level 5 empty is within a limit of 5 (Spark: MAX RECURSION LEVEL 5)
    assert len(run_walk([(1, 2), (2, 3), (3, 4), (4, 5)], seeds, plan)) == 5


def test_integer_overflow_is_not_computed_by_the_walk():
    plan = WalkPlan(name="r", columns=["n", "d"], key_r="n", key_e="src",
                    projections=[("col", "e", "dst"), ("add", ("col", "r", "d"), ("lit", 1, pa.int32()))],
                    filters=[], distinct=False, max_level=100, types=[pa.int64(), pa.int32()])
    seeds = pa.table({"n": pa.array([1], pa.int64()), "d": pa.array([2**31 - 1], pa.int32())})
    with pytest.raises(NotExact):
        run_walk([(1, 2)], seeds, plan)


@settings(max_examples=examples(100, 1000), deadline=None)
@given(graphs, st.integers(1, 8))
def test_sparse_and_negative_keys_take_the_sorted_lookup_with_the_same_result(edges, start):
    def spread(n):
        return None if n is None else (n - 4) * 1_000_003_777

    plan = WalkPlan(name="r", columns=["n"], key_r="n", key_e="src", projections=[("col", "e", "dst")],
                    filters=[], distinct=True, max_level=100, types=[pa.int64()])
    sparse = [(spread(s), spread(d)) for s, d in edges]
    table = pa.table({"src": pa.array([e[0] for e in sparse], pa.int64()),
                      "dst": pa.array([e[1] for e in sparse], pa.int64())})
    assert EdgeIndex.build(table, "src").slot is None or len({s for s, _ in edges if s is not None}) <= 1
    dense_rows = run_walk(edges, pa.table({"n": pa.array([start], pa.int64())}), plan)
    sparse_rows = run_walk(sparse, pa.table({"n": pa.array([spread(start)], pa.int64())}), plan)
    assert multiset(sparse_rows) == multiset([(spread(n),) for (n,) in dense_rows])


@settings(max_examples=examples(200, 2000), deadline=None)
@given(levels=st.lists(st.lists(st.tuples(
    st.one_of(st.none(), st.integers(-3, 3), st.sampled_from([-2 ** 62, 2 ** 61])),
    st.one_of(st.none(), st.integers(0, 40))), max_size=8), max_size=6))
def test_a_walk_keeps_the_first_of_each_row_as_a_set_does(levels):
    """UNION's memory of the rows met (integer rows packed into one number, bounds widened as
    levels bring new values, tuples where the spans do not fit): each level keeps, in order,
    the rows neither met at an earlier level nor earlier in itself."""
    _keeps_what_a_set_keeps(levels)


@settings(max_examples=examples(200, 2000), deadline=None)
@given(levels=st.lists(st.lists(st.tuples(
    st.one_of(st.none(), st.sampled_from([-(2 ** 63), -(2 ** 63) + 1, 0, 2 ** 63 - 2, 2 ** 63 - 1])),
    st.integers(0, 3000)), max_size=8), max_size=6), nulls=st.booleans())
def test_a_walk_keeps_the_first_of_each_row_at_the_ends_of_int64_and_past_its_room(levels, nulls):
    """The packed memory of rows at the ends of the int64 range (the codes are summed in
    place, wrapping on the way) and over a column that outgrows the room left past its values
    (a depth: the rows met so far are packed again): the same rows as a set keeps."""
    _keeps_what_a_set_keeps([[(a if nulls else (a if a is not None else 0), b) for a, b in rows] for rows in levels])


def _keeps_what_a_set_keeps(levels, types=(pa.int64(), pa.int32())):
    """Each level of rows (tuples, a value per column of ``types``) given to one walk's memory
    keeps, in order, the rows neither met at an earlier level nor earlier in itself."""
    from sqlext.udfs.recursive_expand import _Seen

    seen, met = _Seen(), set()
    for rows in levels:
        table = pa.table([pa.array([r[i] for r in rows], kind) for i, kind in enumerate(types)],
                         names=[f"c{i}" for i in range(len(types))])
        expected = []
        for row in rows:
            if row not in met:
                met.add(row)
                expected.append(row)
        kept = seen.new_rows(table) if rows else table
        assert list(zip(*(column.to_pylist() for column in kept.columns))) == expected


def test_a_large_level_keeps_the_first_of_equal_rows_in_its_order():
    """A level of many rows, most of them repeated (far past the sizes where a sort keeps equal
    values in their order by chance): the rows kept are the first of each, in the level's
    order, as a set keeps them."""
    import numpy as np

    rng = np.random.default_rng(7)
    levels = [list(zip(rng.integers(0, 300, size).tolist(), rng.integers(0, 40, size).tolist(),
                       (np.arange(size) % 3).tolist())) for size in (50_000, 80_000)]
    _keeps_what_a_set_keeps(levels, (pa.int64(), pa.int32(), pa.int64()))


@settings(max_examples=examples(200, 2000), deadline=None)
@given(rows=st.lists(st.tuples(st.one_of(st.none(), st.integers(-3, 3), st.sampled_from([-2 ** 63, 2 ** 63 - 1])),
                               st.one_of(st.none(), st.integers(0, 5))), max_size=12))
def test_distinct_rows_of_integers_are_the_first_of_each_or_none_where_they_do_not_pack(rows):
    """The distinct rows of integer columns (NULL equal to NULL), the first of each in order,
    packed as the walk's memory packs them; None where the values span more than a code holds
    (the caller groups them instead)."""
    from sqlext.udfs.recursive_expand import distinct_rows

    table = pa.table({"a": pa.array([r[0] for r in rows], pa.int64()), "b": pa.array([r[1] for r in rows], pa.int32())})
    kept = distinct_rows(table)
    values = {r[0] for r in rows if r[0] is not None}
    if len(rows) >= 2 and max(values, default=0) - min(values, default=0) > 2 ** 60:
        assert kept is None
        return
    assert list(zip(kept["a"].to_pylist(), kept["b"].to_pylist())) == list(dict.fromkeys(rows))


def test_distinct_rows_leave_other_types_to_the_caller():
    from sqlext.udfs.recursive_expand import distinct_rows

    assert distinct_rows(pa.table({"a": ["x", "x"], "b": [1, 1]})) is None
    one = pa.table({"a": ["x"]})
    assert distinct_rows(one) is one


def _by_key(index: EdgeIndex) -> dict:
    """An index as each key's edges, (src, dst) sorted, checking that each key's rows lie in
    its range and that the dense slots point at the keys."""
    grouped = {}
    for j, key in enumerate(index.keys.tolist()):
        part = index.table.slice(index.offsets[j], index.offsets[j + 1] - index.offsets[j])
        assert set(part["src"].to_pylist()) == {key}
        grouped[key] = sorted(zip(part["src"].to_pylist(), part["dst"].to_pylist()))
    assert index.offsets[-1] == index.table.num_rows and list(index.keys) == sorted(set(index.keys.tolist()))
    if index.slot is not None:
        assert all(index.slot[k - index.low] == j for j, k in enumerate(index.keys.tolist()))
    return grouped


key_of_edge = st.one_of(st.none(), st.integers(-3, 12), st.sampled_from([10 ** 12, -(10 ** 12)]))
edge_lists = st.lists(st.tuples(key_of_edge, st.integers(0, 9)), max_size=20)


@settings(max_examples=examples(150, 1500), deadline=None)
@given(edges=edge_lists, dropped=st.sets(st.integers(0, 19)), added=edge_lists)
def test_an_index_changed_by_dropped_and_added_edges_is_the_index_built_over_what_remains(edges, dropped, added):
    """``changed`` (the index kept between incremental runs) drops rows by position and merges
    added rows in (after the last key, or among the keys), leaving NULL keys out and the old
    index as it was: it equals the index built from scratch over the edges that remain."""
    def table(rows):
        return pa.table({"src": pa.array([r[0] for r in rows], pa.int64()),
                         "dst": pa.array([r[1] for r in rows], pa.int64())})

    index = EdgeIndex.build(table(edges), "src")
    before = _by_key(index)
    drop = sorted(d for d in dropped if d < index.table.num_rows)
    kept = [row for i, row in enumerate(zip(index.table["src"].to_pylist(), index.table["dst"].to_pylist()))
            if i not in drop]
    changed = index.changed("src", pa.array(drop, pa.int64()).to_numpy(), table(added))
    assert _by_key(changed) == _by_key(EdgeIndex.build(table(kept + added), "src"))
    assert _by_key(index) == before


@settings(max_examples=examples(150, 1500), deadline=None)
@given(edges=edge_lists, values=st.lists(st.integers(-4, 13), max_size=6))
def test_the_rows_with_some_keys_are_every_edge_of_those_keys(edges, values):
    table = pa.table({"src": pa.array([r[0] for r in edges], pa.int64()),
                      "dst": pa.array([r[1] for r in edges], pa.int64())})
    index = EdgeIndex.build(table, "src")
    found = index.table.take(pa.array(index.rows_with(pa.array(values, pa.int64()).to_numpy()), pa.int64()))
    assert multiset(zip(found["src"].to_pylist(), found["dst"].to_pylist())) == \
        multiset([e for e in edges if e[0] is not None and e[0] in values])

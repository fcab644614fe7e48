"""Properties of CHANGELOG_FILTER on random change feeds.

* ``changes`` applied to an empty table is the filter of the final source table, and the
  feed is minimal (no delete of an absent row, no update that changes nothing);
* ``records`` has one row per input change (a pre/post pair of a CDF update is one change);
* ``final`` is the filter of the final source table;
* the native rewrite and the registered table function return the same multiset of rows as
  the reference logic;
* a feed whose updates are written now and then as a delete and an insert of one version (a Delta
  commit without change data files) gives, on every path, what it gives with those updates
  written as preimages and postimages.
"""


from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

from feeds import SHAPES, _arrow_schema, apply_changes, cdf_rows, predicate_value, rewritten, rows_for, run_filter
from rows import multiset

PREDICATE = "v > 10"

# events: (key, value-or-None); versions are assigned in order, so no ties
event_lists = st.lists(
    st.tuples(st.integers(0, 4), st.one_of(st.none(), st.integers(-20, 40))),
    min_size=0, max_size=40,
).map(lambda evs: [(version + 1, key, v) for version, (key, v) in enumerate(evs)])


def final_source(events):
    table = {}
    for _version, key, v in events:
        if v is None:
            table.pop(key, None)
        else:
            table[key] = (v, _version)
    return table


def expected_final(events):
    return {key: v for key, (v, _ts) in final_source(events).items() if v > 10}


def input_change_count(shape, events):
    return sum(1 for r in rows_for(shape, events) if r.get("_change_type") != "update_preimage")


def _check(path, spark, shape, events):
    changes = run_filter(path, spark, shape, events, predicate=PREDICATE, emit="changes")
    applied = apply_changes(changes)
    assert {k: row["v"] for k, row in applied.items()} == expected_final(events)

    records = run_filter(path, spark, shape, events, predicate=PREDICATE, emit="records")
    assert len(records) == input_change_count(shape, events)
    upserts = [r for r in records if r["_change_type"] == "upsert"]
    assert all(r["v"] > 10 for r in upserts)
    assert all(r["v"] is None and r["name"] is None for r in records if r["_change_type"] == "delete")

    final = run_filter(path, spark, shape, events, predicate=PREDICATE, emit="final")
    assert {r["id"]: r["v"] for r in final} == expected_final(events)
    return changes, records, final


@settings(max_examples=examples(300, 3000), deadline=None)
@given(events=event_lists, shape=st.sampled_from(SHAPES))
def test_reference_logic_properties(events, shape):
    _check("pure", None, shape, events)


@settings(max_examples=examples(6, 120), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=event_lists, shape=st.sampled_from(SHAPES))
def test_native_rewrite_properties_and_agreement(spark, events, shape):
    native = _check("native", spark, shape, events)
    reference = _check("pure", None, shape, events)
    for got, want in zip(native, reference):
        assert multiset(got) == multiset(want)


@settings(max_examples=examples(5, 50), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=event_lists, shape=st.sampled_from(SHAPES))
def test_registered_udtf_agrees_with_native_rewrite(spark, events, shape):
    for emit in ("changes", "records", "final"):
        udtf = run_filter("udtf", spark, shape, events, predicate=PREDICATE, emit=emit)
        native = run_filter("native", spark, shape, events, predicate=PREDICATE, emit=emit)
        assert multiset(udtf) == multiset(native), emit



# per version, whether its update (if it is one) is written as a delete and an insert
rewrites = st.lists(st.booleans(), min_size=40, max_size=40).map(
    lambda flags: {version + 1 for version, flag in enumerate(flags) if flag})


@settings(max_examples=examples(300, 3000), deadline=None)
@given(events=event_lists, rewrite=rewrites, emit=st.sampled_from(["changes", "records", "final"]),
       sequenced=st.booleans())
def test_a_delete_and_an_insert_of_one_version_are_the_update_they_write(events, rewrite, emit, sequenced):
    """The per-key replay and the column-wise kernel (the registered function's, from no row)
    over the rewritten feed give the replay's rows over the feed as written with preimages."""
    import pyarrow as pa

    from sqlext.functions.changelog_filter import PASS_COLUMN, filter_spec
    from sqlext.udfs.changelog_filter import filter_batch
    from reference.changelog_filter import changelog_filter

    arguments = {"key": "id", "predicate": PREDICATE, "emit": emit, **({"sequence_by": "ts"} if sequenced else {})}
    spec = filter_spec(arguments, _arrow_schema("cdf").names)

    def replayed(rows):
        table = pa.Table.from_pylist(rows, schema=_arrow_schema("cdf"))
        return table, [predicate_value(r, PREDICATE) for r in rows]

    rows = cdf_rows(events)
    expected = multiset(changelog_filter(spec, *replayed(rows)).to_pylist())
    table, passes = replayed(rewritten(rows, rewrite))
    assert multiset(changelog_filter(spec, table, passes).to_pylist()) == expected
    kernel = filter_batch(spec, table.append_column(PASS_COLUMN, pa.array([bool(p) for p in passes], pa.bool_())))
    assert multiset(kernel.to_pylist()) == expected


@settings(max_examples=examples(4, 80), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=event_lists, rewrite=rewrites)
def test_the_native_rewrite_and_the_table_function_read_a_delete_and_an_insert_as_the_update(spark, events, rewrite):
    rows = cdf_rows(events)
    written = rewritten(rows, rewrite)
    for emit in ("changes", "records", "final"):
        expected = multiset(run_filter("pure", None, "cdf", events, predicate=PREDICATE, emit=emit))
        for path in ("native", "udtf"):
            got = run_filter(path, spark, "cdf", events, predicate=PREDICATE, emit=emit, rows=written)
            assert multiset(got) == expected, (path, emit)

"""FK_JOIN against KIP-213's event tables and against a replay of KIP-213's
workflow (tests/reference/fk_join.py) on random interleavings of left and right changes."""

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

import sqlext
from reference.fk_join import TOMBSTONE, replay, result_table_changes
from rows import multiset, ordered
from kip_213 import (L, LEFT_CDF, R, RIGHT_CDF, SEED_EVENTS, SEED_EXPECTED, SHAPES, compact, event_lists, fk_join,
                     side_feeds)
from test_fk_join_increment import FK, PRESENT, _output, _state_columns, _table



@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("join_type, emit", list(SEED_EXPECTED))
def test_seed_event_table(spark, shape, join_type, emit):
    got = compact(fk_join(spark, SEED_EVENTS, shape, join_type, emit), emit)
    assert got == SEED_EXPECTED[(join_type, emit)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("join_type, emit", [k for k in SEED_EXPECTED if k[1] != "final"])
def test_seed_event_table_as_a_prefix(spark, shape, join_type, emit):
    """Each row of the event table on its own: replaying the first n events gives the first
    part of the expected output (so each line of the table is checked where it happens)."""
    for n in (2, 3, 4, 5, 6):
        events = SEED_EVENTS[:n]
        last = events[-1][0]
        expected = [r for r in SEED_EXPECTED[(join_type, emit)] if r[4] <= last]
        assert compact(fk_join(spark, events, shape, join_type, emit), emit) == expected, n


NULL_FK_EVENTS = [
    (1, "right", 1, R("foo")),
    (2, "left", "a", L(1)),        # joins
    (3, "left", "a", L(None)),     # fk to NULL: inner retracts, left pads
    (4, "left", "a", L(1, "x")),   # fk back from NULL: re-created
    (5, "left", "b", L(None)),     # new row with NULL fk: inner nothing, left padded
    (6, "left", "b", None),        # delete of a row that never joined: tombstone in records
]


@pytest.mark.parametrize("shape", SHAPES)
def test_null_foreign_key_both_directions(spark, shape):
    assert compact(fk_join(spark, NULL_FK_EVENTS, shape, "inner", "changes"), "changes") == [
        ("a", 1, "foo", "insert", 2),
        ("a", 1, "foo", "delete", 3),
        ("a", 1, "foo", "insert", 4),
    ]
    assert compact(fk_join(spark, NULL_FK_EVENTS, shape, "left", "changes"), "changes") == [
        ("a", 1, "foo", "insert", 2),
        ("a", 1, "foo", "update_preimage", 3), ("a", None, None, "update_postimage", 3),
        ("a", None, None, "update_preimage", 4), ("a", 1, "foo", "update_postimage", 4),
        ("b", None, None, "insert", 5),
        ("b", None, None, "delete", 6),
    ]
    assert compact(fk_join(spark, NULL_FK_EVENTS, shape, "inner", "records"), "records") == [
        ("a", 1, "foo", "upsert", 2),
        ("a", None, None, "delete", 3),
        ("a", 1, "foo", "upsert", 4),
        ("b", None, None, "delete", 6),
    ]


def test_records_tombstone_keeps_key_and_nulls_every_other_column(spark):
    rows = fk_join(spark, SEED_EVENTS[:3], "cdf", "inner", "records")
    tombstone = [r for r in rows if r["_change_type"] == "delete"][0]
    assert tombstone == {"id": "k", "fk": None, "note": None, "rid": None, "name": None,
                         "_change_type": "delete", "_commit_version": 3}


def test_right_change_reemits_every_subscribed_left_row(spark):
    events = [(1, "left", f"o{i}", L(7)) for i in range(5)] + [(2, "right", 7, R("x")), (3, "right", 7, R("y"))]
    records = compact(fk_join(spark, events, "upsert", "inner", "records"), "records")
    assert records == [(f"o{i}", 7, "x", "upsert", 2) for i in range(5)] + \
                      [(f"o{i}", 7, "y", "upsert", 3) for i in range(5)]


def test_column_clash_gets_right_suffix(spark, view):
    view("cl", [("a", 1, "left-name", 1)], "id STRING, fk BIGINT, name STRING, _commit_version BIGINT")
    view("cr", [(1, "right-name", 1)], "id BIGINT, name STRING, _commit_version BIGINT")
    frame = sqlext.sql(spark, "SELECT * FROM FK_JOIN(left => TABLE(cl), right => TABLE(cr), left_key => 'id', "
                              "foreign_key => 'fk', right_key => 'id', emit => 'final')")
    assert frame.columns == ["id", "fk", "name", "id_right", "name_right"]
    assert ordered(frame.collect()) == [("a", 1, "left-name", 1, "right-name")]


def test_foreign_key_is_any_expression_over_the_left_row(spark, view):
    view("el", [("a", "C-7", 1)], "id STRING, ref STRING, _commit_version BIGINT")
    view("er", [(7, "seven", 1)], "rid BIGINT, name STRING, _commit_version BIGINT")
    rows = sqlext.sql(spark, "SELECT * FROM FK_JOIN(left => TABLE(el), right => TABLE(er), left_key => 'id', "
                             "foreign_key => 'CAST(substring(ref, 3) AS BIGINT)', right_key => 'rid', "
                             "emit => 'final')").collect()
    assert ordered(rows) == [("a", "C-7", 7, "seven")]


def test_foreign_key_expression_moves_between_right_rows(spark, view):
    """The row before a foreign-key change joins the right row at the previous key, which
    the expression gives over the previous left row (column named in another case here)."""
    view("ml", [("a", "C-7", "n", 3), ("a", "C-8", "n", 4), ("a", "C-7", "m", 6), ("a", "C-8", "m", 8)],
         "id STRING, Ref STRING, note STRING, _commit_version BIGINT")
    view("mr", [(7, "seven", 1), (8, "eight", 2), (7, "SEVEN", 5), (8, None, 7)],
         "rid BIGINT, name STRING, _commit_version BIGINT")
    rows = sqlext.sql(spark, "SELECT * FROM FK_JOIN(left => TABLE(ml), right => TABLE(mr), left_key => 'id', "
                             "foreign_key => 'CAST(substring(ref, 3) AS BIGINT)', right_key => 'rid')").collect()
    got = multiset((r._commit_version, r._change_type, r.Ref, r.note, r.rid, r.name) for r in rows)
    assert got == multiset([
        (3, "insert", "C-7", "n", 7, "seven"),
        (4, "update_preimage", "C-7", "n", 7, "seven"), (4, "update_postimage", "C-8", "n", 8, "eight"),
        (6, "update_preimage", "C-8", "n", 8, "eight"), (6, "update_postimage", "C-7", "m", 7, "SEVEN"),
        (8, "delete", "C-7", "m", 7, "SEVEN"),  # right row 8 was deleted at 7: the inner join loses a
    ])


# ---- against the reference replay ------------------------------------------------------

def _flatten(key, value):
    if value is TOMBSTONE:
        return {"id": key, "fk": None, "note": None, "rid": None, "name": None}
    left, right = value["left"], value["right"]
    return {"id": key, "fk": left["fk"], "note": left["note"],
            "rid": left["fk"] if right is not None else None, "name": right["name"] if right else None}


def reference_outputs(events, join_type):
    run = replay(events, join_type, lambda row: row["fk"])
    records = [{**_flatten(k, v), "_change_type": "delete" if v is TOMBSTONE else "upsert",
                "_commit_version": ver} for k, v, ver in run.records]
    changes_raw, table = result_table_changes(run.records)
    changes = [{**_flatten(k, v), "_change_type": kind, "_commit_version": ver} for kind, k, v, ver in changes_raw]
    final = [{k: v for k, v in _flatten(key, value).items()} for key, value in table.items()]
    return {"records": records, "changes": changes, "final": final}




@settings(max_examples=examples(12, 250), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=event_lists, join_type=st.sampled_from(["inner", "left"]), shape=st.sampled_from(SHAPES))
def test_matches_reference_replay(spark, events, join_type, shape):
    expected = reference_outputs(events, join_type)
    for emit in ("records", "changes", "final"):
        got = fk_join(spark, events, shape, join_type, emit)
        assert multiset(got) == multiset(expected[emit]), emit
        if emit == "records":  # and in forwarding order where ORDER BY version, key defines it
            assert _ordered(got) == _ordered(expected[emit])


def _ordered(records):
    """Records in forwarding order, leaving out a key's records at a version where it has two
    (a right change and a left change at one version: both are there, by the multiset check,
    but ORDER BY version, key cannot tell them apart)."""
    counts = Counter((r["_commit_version"], r["id"]) for r in records)
    return compact([r for r in records if counts[(r["_commit_version"], r["id"])] == 1], "records")


@pytest.mark.parametrize("join_type", ["inner", "left"])
def test_final_equals_plain_join_of_final_tables(spark, view, join_type):
    events = [(1, "right", 1, R("x")), (2, "left", "a", L(1)), (3, "left", "b", L(2)), (4, "right", 2, R("y")),
              (5, "left", "c", L(None)), (6, "right", 2, None), (7, "left", "d", L(3)), (8, "left", "b", L(1))]
    got = fk_join(spark, events, "cdf", join_type, "final")
    left_final, right_final = {}, {}
    for version, side, key, row in events:
        (left_final if side == "left" else right_final)[key] = row
    view("lf", [(k, r["fk"], r["note"]) for k, r in left_final.items() if r], "id STRING, fk BIGINT, note STRING")
    view("rf", [(k, r["name"]) for k, r in right_final.items() if r], "rid BIGINT, name STRING")
    join = "JOIN" if join_type == "inner" else "LEFT JOIN"
    plain = spark.sql(f"SELECT lf.id, lf.fk, lf.note, rf.rid, rf.name FROM lf {join} rf ON lf.fk = rf.rid").collect()
    assert multiset(got) == multiset([r.asDict() for r in plain])
    assert len(got) == (2 if join_type == "inner" else 4)


def test_hot_right_key_is_not_funnelled_into_one_task(spark, tmp_path):
    """A right row with many subscribers: the left rows keep their own partitioning (the right
    intervals of a right input Spark knows to be small are broadcast), so no exchange gathers
    them by foreign key, and nothing is collected to the driver."""
    from pyspark.sql.types import _parse_datatype_string

    for name, rows, schema in [
        ("hot_orders", [(f"o{i}", 1, "n", i) for i in range(2000)],
         "id STRING, fk BIGINT, note STRING, _commit_version BIGINT"),
        ("hot_customers", [(1, "x", 0), (1, "y", 5000)], "rid BIGINT, name STRING, _commit_version BIGINT"),
    ]:
        spark.createDataFrame(rows, _parse_datatype_string(schema)).write.parquet(str(tmp_path / name))
        spark.read.parquet(str(tmp_path / name)).createOrReplaceTempView(name)
    frame = sqlext.sql(spark, "SELECT * FROM FK_JOIN(left => TABLE(hot_orders), right => TABLE(hot_customers), "
                              "left_key => 'id', foreign_key => 'fk', right_key => 'rid')")
    rows = frame.collect()
    plan = frame._jdf.queryExecution().executedPlan().toString()  # the final adaptive plan
    assert "isFinalPlan=true" in plan and "BroadcastHashJoin" in plan
    assert "hashpartitioning(__sx_fk" not in plan and "hashpartitioning(fk" not in plan
    # every order joined at insert, then re-emitted as a pre/post pair by the rename at 5000
    assert len(rows) == 2000 * 3
    assert {r._change_type for r in rows} == {"insert", "update_preimage", "update_postimage"}


@pytest.mark.parametrize("join_type", ["inner", "left"])
def test_value_update_and_right_change_at_one_version(spark, join_type):
    """The foreign key stays, the left row and its right row change in the same commit: one
    net update from (old left, old right) to (new left, new right)."""
    events = [(1, "right", 1, R("x")), (2, "left", "a", L(1, "n")),
              (3, "right", 1, R("y")), (3, "left", "a", L(1, "m")), (4, "left", "a", L(1, "o"))]
    expected = reference_outputs(events, join_type)
    for emit in ("changes", "records"):
        assert multiset(fk_join(spark, events, "cdf", join_type, emit)) == multiset(expected[emit]), emit
    assert compact(fk_join(spark, events, "cdf", join_type, "changes"), "changes") == [
        ("a", 1, "x", "insert", 2),
        ("a", 1, "x", "update_preimage", 3), ("a", 1, "y", "update_postimage", 3),
        ("a", 1, "y", "update_preimage", 4), ("a", 1, "y", "update_postimage", 4),
    ]


# per version, whether its updates are written as a delete and an insert (a Delta commit
# without change data files)
rewrites = st.lists(st.booleans(), min_size=48, max_size=48).map(
    lambda flags: frozenset(version + 1 for version, flag in enumerate(flags) if flag))


def join_kernel(events, join_type, emit, rewrite):
    """The column-wise step of incremental runs (:func:`sqlext.udfs.fk_join.join_increment`)
    over the whole feed from no state: its forwarded rows, as dicts."""
    from sqlext.functions.fk_join import fk_join_spec
    from sqlext.udfs.fk_join import join_increment

    spec = fk_join_spec({"left_key": "id", "foreign_key": "fk", "right_key": "rid", "join_type": join_type,
                         "emit": emit}, [c.split()[0] for c in LEFT_CDF.split(", ")],
                        [c.split()[0] for c in RIGHT_CDF.split(", ")])
    left, right = side_feeds(events, "cdf", rewrite)
    left_state, right_state = _state_columns(spec)
    out, _, _ = join_increment(spec, FK, PRESENT, _table([{**r, FK: r["fk"]} for r in left], [*spec.left.columns, FK]),
                               _table(right, list(spec.right.columns)), _table([], left_state),
                               _table([], right_state), None, _output(spec))
    return out.to_pylist()


@settings(max_examples=examples(4, 80), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=event_lists, join_type=st.sampled_from(["inner", "left"]), rewrite=rewrites)
def test_a_delete_and_an_insert_of_one_version_are_the_update_in_the_batch_rule_and_the_kernel(
        spark, events, join_type, rewrite):
    """Updates of either input written now and then as a delete and an insert of one version,
    the insert first: the batch rule and the incremental runs' kernel both read each pair as the
    update it writes (the delete first, as Delta's protocol orders a commit's removed rows
    before its added ones), so both give the replay's rows of the feed as written with
    preimages."""
    expected = reference_outputs(events, join_type)
    for emit in ("records", "changes", "final"):
        got = fk_join(spark, events, "cdf", join_type, emit, rewrite)
        assert multiset(got) == multiset(expected[emit]), emit
        if emit != "final":  # the kernel forwards no final table (a run writes it from the states)
            assert multiset(join_kernel(events, join_type, emit, rewrite)) == multiset(expected[emit]), emit

"""The keyed state of the incremental engine, over Arrow data alone (no Spark session): a key's
current row is its delta row or else its base row, whatever the writes and compactions before;
lookups by key and by another column, NULL keys included, match what a plain dict gives; a
batch reads only the layers of earlier batches, so a replayed batch reads what it read before."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from profiles import examples
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType, TimestampType

import sqlext.streaming.state as state_module
from sqlext.storage import local
import sqlext.streaming.keyed_rows as keyed_rows
import sqlext.streaming.layer_cache as layer_cache
from sqlext.streaming.keyed_rows import exclude, restrict
from sqlext.streaming.state import KeyedState

SCHEMA = StructType([StructField("k1", LongType()), StructField("k2", StringType()),
                     StructField("v", LongType()), StructField("ok", BooleanType())])


def _table(rows):
    return pa.Table.from_pylist([dict(zip(("k1", "k2", "v", "ok"), r)) for r in rows],
                                schema=pa.schema([("k1", pa.int64()), ("k2", pa.string()), ("v", pa.int64()),
                                                  ("ok", pa.bool_())]))


keys = st.tuples(st.one_of(st.none(), st.integers(0, 3)), st.one_of(st.none(), st.sampled_from(["a", "b"])))
batches = st.lists(st.dictionaries(keys, st.integers(-5, 5), max_size=6), min_size=1, max_size=6)


@settings(max_examples=examples(60, 600), deadline=None)
@given(batches=batches, share=st.sampled_from([0.0, 0.5, float("inf")]), probe=st.lists(keys, max_size=4),
       buckets=st.sampled_from([1, 3]))
def test_the_current_rows_are_the_newest_write_of_each_key(tmp_path_factory, batches, share, probe, buckets):
    """In one bucket or several: a state's buckets each hold the keys that hash to them."""
    state = KeyedState(local(tmp_path_factory.mktemp("state")), ["k1", "k2"])
    state.record_schema(SCHEMA, buckets=buckets)
    expected: dict = {}
    default, state_module.COMPACT_SHARE = state_module.COMPACT_SHARE, share
    try:
        for batch_id, batch in enumerate(batches):
            view = state.before(batch_id)
            state.write(view, _table([(k1, k2, v, v >= 0) for (k1, k2), v in batch.items()]), batch_id)
            expected.update(batch)
            now = state.before(batch_id + 1)
            assert {(r["k1"], r["k2"]): r["v"] for r in now.rows().to_pylist()} == expected
            assert now.rows().num_rows == len(expected)
            wanted = pa.Table.from_pylist([{"k1": a, "k2": b} for a, b in probe],
                                          schema=pa.schema([("k1", pa.int64()), ("k2", pa.string())]))
            found = {(r["k1"], r["k2"]): r["v"] for r in now.rows(keys=wanted).to_pylist()}
            assert found == {k: v for k, v in expected.items() if k in set(probe)}
            by_value = {(r["k1"], r["k2"]) for r in now.rows(column="v", values=pa.array([0, 1], pa.int64()))
                        .to_pylist()}
            assert by_value == {k for k, v in expected.items() if v in (0, 1)}
    finally:
        state_module.COMPACT_SHARE = default


ONE_KEY = StructType([StructField("k", LongType()), StructField("at", TimestampType()), StructField("v", LongType())])
small = st.one_of(st.none(), st.integers(-3, 3))


@settings(max_examples=examples(60, 600), deadline=None)
@given(batches=st.lists(st.dictionaries(small, small, max_size=6), min_size=1, max_size=5),
       share=st.sampled_from([0.0, 0.5, float("inf")]), probe=st.lists(small, max_size=4))
def test_lookups_by_one_column_find_what_a_scan_finds(tmp_path_factory, batches, share, probe):
    """A layer in memory is probed through a sorted index of the column asked for (integers
    and times): the rows found, NULL matching NULL, are those a scan finds."""
    from datetime import datetime, timedelta, timezone

    def at(v):
        return None if v is None else datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=v)

    state = KeyedState(local(tmp_path_factory.mktemp("state")), ["k"])
    state.record_schema(ONE_KEY)
    schema = state.arrow_schema
    expected: dict = {}
    default, state_module.COMPACT_SHARE = state_module.COMPACT_SHARE, share
    try:
        for batch_id, batch in enumerate(batches):
            state.write(state.before(batch_id), pa.Table.from_pylist(
                [{"k": k, "at": at(v), "v": v} for k, v in batch.items()], schema=schema), batch_id)
            expected.update(batch)
            now = state.before(batch_id + 1)
            wanted = pa.Table.from_pylist([{"k": k} for k in probe], schema=pa.schema([schema.field("k")]))
            assert {r["k"]: r["v"] for r in now.rows(keys=wanted).to_pylist()} == \
                {k: v for k, v in expected.items() if k in set(probe)}
            by_value = now.rows(column="v", values=pa.array(probe, pa.int64()))
            assert sorted(r["k"] for r in by_value.to_pylist() if r["k"] is not None) == \
                sorted(k for k, v in expected.items() if v in set(probe) and k is not None)
            by_time = now.rows(column="at", values=pa.array([at(v) for v in probe], schema.field("at").type))
            assert by_time.num_rows == by_value.num_rows
    finally:
        state_module.COMPACT_SHARE = default
    assert any(indexes for _, _, indexes in layer_cache.LAYERS.tables.values())


@settings(max_examples=examples(100, 1000), deadline=None)
@given(column=st.lists(st.one_of(st.none(), st.integers(-3, 3)), max_size=12), distinct=st.booleans(),
       asked=st.lists(st.one_of(st.none(), st.integers(-4, 4)), max_size=6))
def test_a_sorted_index_finds_the_positions_a_scan_finds(column, distinct, asked):
    """A column's index (one search per value where each value is in one row, two otherwise)
    gives the positions of the rows holding any value asked for, NULL matching NULL."""
    from sqlext.streaming.layer_cache import Index as _Index

    if distinct:
        column = list(dict.fromkeys(column))
    index = _Index.of(pa.array(column, pa.int64()))
    assert index.unique == (len([v for v in column if v is not None]) == len({v for v in column if v is not None}))
    found = index.rows(pa.array(asked, pa.int64()))
    assert list(found) == [i for i, v in enumerate(column) if v in set(asked)]


def test_a_replayed_batch_reads_the_layers_it_read_before(tmp_path):
    state = KeyedState(local(tmp_path), ["k1", "k2"])
    state.record_schema(SCHEMA)
    state.write(state.before(0), _table([(1, "a", 1, True), (2, "b", 2, True)]), 0)
    state.write(state.before(1), _table([(1, "a", 10, True)]), 1)
    before_two = state.before(2)
    state.write(before_two, _table([(2, "b", 20, True)]), 2)
    again = state.before(2)  # batch 2 replayed after a lost commit
    assert again == before_two
    assert sorted((r["k1"], r["v"]) for r in again.rows().to_pylist()) == [(1, 10), (2, 2)]
    state.write(again, _table([(2, "b", 20, True)]), 2)
    assert sorted((r["k1"], r["v"]) for r in state.before(3).rows().to_pylist()) == [(1, 10), (2, 20)]


def test_layers_no_replay_reads_are_forgotten(tmp_path, monkeypatch):
    monkeypatch.setattr(state_module, "COMPACT_SHARE", float("inf"))
    state = KeyedState(local(tmp_path), ["k1", "k2"])
    state.record_schema(SCHEMA)
    for batch_id in range(4):
        state.write(state.before(batch_id), _table([(batch_id, "a", batch_id, True)]), batch_id)
    layers = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert layers == ["base-0", "delta-2", "delta-3"]  # batch 3 read base-0 and delta-2


@pytest.mark.parametrize("how", [restrict, exclude])
def test_matching_by_several_columns_treats_null_as_equal_to_null(how):
    rows = _table([(1, "a", 1, True), (None, "a", 2, True), (1, None, 3, True), (None, None, 4, True), (2, "b", 5, True)])
    wanted = pa.table({"k1": pa.array([None, 1, None], pa.int64()), "k2": pa.array(["a", None, None])})
    kept = sorted(r["v"] for r in how(rows, wanted, ["k1", "k2"]).to_pylist())
    assert kept == ([2, 3, 4] if how is restrict else [1, 5])


@settings(max_examples=examples(200, 2000), deadline=None)
@given(rows=st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 3)), st.one_of(st.none(), st.sampled_from(["a", "b"])),
                               st.one_of(st.none(), st.integers(-1, 1))), max_size=12),
       wanted=st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 4)), st.one_of(st.none(), st.sampled_from(["a", "c"])),
                                 st.one_of(st.none(), st.integers(-1, 1))), max_size=8),
       width=st.integers(2, 3), narrow_keys=st.booleans())
def test_matching_rows_by_their_codes_finds_what_the_hash_join_finds(rows, wanted, width, narrow_keys):
    """Rows matched on several columns by integer codes (NULL equal to NULL, a key column of
    a narrower integer type) against the hash join they replace: the same rows, in order."""
    names = ["k1", "k2", "v"][:width]
    table = pa.Table.from_pylist([dict(zip(("k1", "k2", "v"), r)) for r in rows],
                                 schema=pa.schema([("k1", pa.int64()), ("k2", pa.string()), ("v", pa.int64())]))
    keys = pa.Table.from_pylist([dict(zip(("k1", "k2", "v"), r)) for r in wanted],
                                schema=pa.schema([("k1", pa.int32() if narrow_keys else pa.int64()), ("k2", pa.string()),
                                                  ("v", pa.int64())]))
    for how in (restrict, exclude):
        by_codes = how(table, keys, names).to_pylist()
        codes = keyed_rows.rows_among
        keyed_rows.rows_among = lambda *args: None
        try:
            by_join = how(table, keys.cast(table.schema), names).to_pylist()  # a join takes one type
        finally:
            keyed_rows.rows_among = codes
        assert by_codes == by_join


def test_a_task_reads_and_writes_its_own_bucket_only(tmp_path):
    """The view of one bucket finds only that bucket's keys; a write through it keeps only the
    rows of that bucket (the rest belong to other tasks); uncommitted layers stay invisible."""
    state = KeyedState(local(tmp_path), ["k1", "k2"])
    state.record_schema(SCHEMA, buckets=4)
    rows = _table([(k, "a", k, True) for k in range(40)])
    owner = state.bucket_of(rows)
    assert set(owner.tolist()) == {0, 1, 2, 3}
    pending = state.write(state.before(0, only=2), rows, 0, commit=False)
    assert [p.bucket for p in pending] == [2]
    assert state.before(1).rows().num_rows == 0  # written, not committed
    state.commit(pending)
    found = sorted(r["k1"] for r in state.before(1).rows().to_pylist())
    assert found == sorted(k for k, b in zip(range(40), owner) if b == 2)
    assert state.before(1, only=1).rows(column="v", values=pa.array(found, pa.int64())).num_rows == 0


def test_a_new_state_gets_a_bucket_for_each_share_of_a_long_history(spark):
    """A first run over a long history keeps each bucket's share small enough for one task: a
    new state gets more buckets than cores where the sources hold more than a bucket's bytes,
    or more rows than a bucket's share of the batch bound; the setting, where given, decides."""
    from sqlext.streaming.batch_parts import BYTES_PER_ROW, max_rows, task_budget
    from sqlext.streaming.engine import BUCKET_SOURCE_BYTES, KeyedOperator

    cores = int(spark.sparkContext.defaultParallelism)
    assert KeyedOperator.state_buckets(spark) == cores
    assert KeyedOperator.state_buckets(spark, BUCKET_SOURCE_BYTES) == cores
    assert KeyedOperator.state_buckets(spark, 10 * BUCKET_SOURCE_BYTES + 1) == 11
    # or more rows than the batch bound gives one bucket: the first run then runs in one part
    per_bucket = task_budget(spark) // BYTES_PER_ROW
    assert KeyedOperator.state_buckets(spark, 0, per_bucket) == cores
    assert KeyedOperator.state_buckets(spark, 0, 8 * per_bucket) == max(cores, 8)
    assert max_rows(spark, KeyedOperator.state_buckets(spark, 0, 8 * per_bucket + 1)) >= 8 * per_bucket + 1
    spark.conf.set("spark.sqlext.streaming.stateBuckets", "3")
    try:
        assert KeyedOperator.state_buckets(spark, 10 * BUCKET_SOURCE_BYTES) == 3
    finally:
        spark.conf.unset("spark.sqlext.streaming.stateBuckets")


def test_the_layer_cache_holds_its_bytes_and_drops_the_least_recent_past_its_limit(tmp_path):
    """The cache counts what it holds (layers and their indexes) as it goes, and past its limit
    drops the layers used longest ago, never the one just kept."""
    layers = layer_cache.Layers()
    table = _table([(i, "a", i, True) for i in range(1000)])
    layers.keep_within(int(table.nbytes * 3.5))
    folders = []
    for i in range(5):
        folder = local(tmp_path / f"layer-{i}")
        folder.mkdirs()
        (folder / "part-00000.parquet").write_parquet(table)
        layers.put(folder, table)
        folders.append(folder)
        assert layers.total == sum(layers.sizes.values()) <= layers.limit
    assert [f.uri for f in folders[-3:]] == list(layers.tables)
    assert layers.lookup(folders[-1], "k1", pa.array([3, 7])).tolist() == [3, 7]  # an index, counted too
    assert layers.sizes[folders[-1].uri] > table.nbytes  # the layer and its index
    assert layers.total == sum(layers.sizes.values()) <= layers.limit
    assert list(layers.tables)[-1] == folders[-1].uri and len(layers.tables) == 2  # the oldest went
    layers.forget(folders[-1])
    assert layers.total == sum(layers.sizes.values()) and folders[-1].uri not in layers.tables
    layers.put(folders[0], table)
    layers.keep_within(int(table.nbytes * 1.5))  # an executor's worker keeps its share: dropped now
    assert list(layers.tables) == [folders[0].uri] and layers.total <= layers.limit
    layers.put(folders[1], _table([(i, "a", i, True) for i in range(2000)]))  # larger than the limit: not kept
    assert folders[1].uri not in layers.tables

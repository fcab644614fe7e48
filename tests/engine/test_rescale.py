"""A state laid out again in another bucket count: the rows every later batch reads are the rows
before; a rescale stopped at any point leaves the state as it was or as it should be; and runs
whose bucket count changes between them (2, then 8, then 3) give the batch statement's output."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

import sqlext.streaming.rescale as rescale_module
import three_tables
from sqlext.errors import SqlextError
from sqlext.storage import local
from sqlext.streaming.engine import BUCKETS_SETTING
from sqlext.streaming.rescale import rescale
from sqlext.streaming.state import KeyedState

SCHEMA = StructType([StructField("k1", LongType()), StructField("k2", StringType()),
                     StructField("v", LongType()), StructField("ok", BooleanType())])
ARROW = pa.schema([("k1", pa.int64()), ("k2", pa.string()), ("v", pa.int64()), ("ok", pa.bool_())])

keys = st.tuples(st.one_of(st.none(), st.integers(0, 30)), st.one_of(st.none(), st.sampled_from(["a", "b c", "'`{"])))
batches = st.lists(st.dictionaries(keys, st.integers(-5, 5), max_size=12), min_size=1, max_size=4)


def _table(batch: dict) -> pa.Table:
    return pa.Table.from_pylist([{"k1": a, "k2": b, "v": v, "ok": v >= 0} for (a, b), v in batch.items()],
                                schema=ARROW)


def _current(state: KeyedState, batch_id: int) -> dict:
    return {(r["k1"], r["k2"]): r["v"] for r in state.before(batch_id).rows().to_pylist()}


def _written(folder, buckets: int, batch: dict) -> KeyedState:
    """A state of ``buckets`` buckets in ``folder`` holding ``batch`` (batch 0's write)."""
    state = KeyedState(local(folder), ["k1", "k2"])
    state.record_schema(SCHEMA, buckets=buckets)
    state.write(state.before(0), _table(batch), 0)
    return state


def _layer_folders(state: KeyedState) -> set[str]:
    """The folders (relative to the state's) that hold layers."""
    root = state.folder.path.rstrip("/")
    found = set()
    for part in [state.folder] + [state.folder / e.name for e in state.folder.entries() if e.is_dir]:
        inner = [part] + [part / e.name for e in part.entries() if e.is_dir and e.name.startswith("bucket-")]
        for folder in inner:
            if any(e.name.startswith(("base-", "delta-")) for e in folder.entries()):
                found.add(folder.path[len(root):].lstrip("/"))
    return found


@settings(max_examples=examples(40, 400), deadline=None)
@given(runs=st.lists(st.tuples(st.sampled_from([1, 2, 3, 8]), batches), min_size=2, max_size=4))
def test_the_rows_are_the_same_in_every_layout(tmp_path_factory, runs):
    """Writes in one layout, a rescale, writes in the next: every key's current row is its newest
    write, each row is in the bucket its key hashes to among the new count, and only the
    current layout's layers are left."""
    state = KeyedState(local(tmp_path_factory.mktemp("state")), ["k1", "k2"])
    state.record_schema(SCHEMA, buckets=runs[0][0])
    expected: dict = {}
    batch_id = 0
    for buckets, writes in runs:
        before, generation = state.buckets, state.generation
        moved = rescale(None, state, buckets, batch_id, on_driver=True)
        assert state.buckets == buckets and _current(state, batch_id) == expected
        assert moved == (buckets != before) and state.generation == generation + moved
        reopened = KeyedState(state.folder, ["k1", "k2"])
        assert (reopened.buckets, reopened.generation) == (state.buckets, state.generation)
        for bucket in range(buckets):
            rows = reopened.before(batch_id, only=bucket).rows()
            assert set(reopened.bucket_of(rows).tolist()) <= {bucket}
        home = "" if state.generation == 0 else f"generation-{state.generation}"
        assert all(folder.startswith(home) for folder in _layer_folders(state)), _layer_folders(state)
        for batch in writes:
            state.write(state.before(batch_id), _table(batch), batch_id)
            expected.update(batch)
            batch_id += 1
            assert _current(state, batch_id) == expected


def test_a_state_too_large_for_the_driver_is_moved_by_spark_tasks(spark, tmp_path):
    batch = {(k, "x" if k % 3 else None): k % 7 - 3 for k in range(500)}
    state = _written(tmp_path / "state", 2, batch)
    for buckets in (8, 3):
        assert rescale(spark, state, buckets, 1, on_driver=False)
        assert state.buckets == buckets and _current(state, 1) == batch
        sizes = [state.before(1, only=b).rows().num_rows for b in range(buckets)]
        assert sum(sizes) == len(batch) and min(sizes) > 0


def test_a_rescale_stopped_before_its_layout_is_written_leaves_the_state_as_it_was(tmp_path, monkeypatch):
    batch = {(k, "a"): k for k in range(40)}
    state = _written(tmp_path / "state", 2, batch)
    real = rescale_module._move_in_memory

    def killed(rows, new, base):
        real(rows, new, base)
        raise KeyboardInterrupt("killed after the rows moved, before the layout file")

    monkeypatch.setattr(rescale_module, "_move_in_memory", killed)
    with pytest.raises(KeyboardInterrupt):
        rescale(None, state, 5, 1, on_driver=True)
    again = KeyedState(state.folder, ["k1", "k2"])
    assert (again.buckets, again.generation) == (2, 0) and _current(again, 1) == batch
    monkeypatch.setattr(rescale_module, "_move_in_memory", real)
    assert rescale(None, again, 5, 1, on_driver=True)
    assert (again.buckets, again.generation) == (5, 1) and _current(again, 1) == batch


def test_a_rescale_stopped_after_its_layout_is_written_is_the_new_layout(tmp_path, monkeypatch):
    batch = {(k, None): -k for k in range(30)}
    state = _written(tmp_path / "state", 1, batch)

    def killed(*args):
        raise KeyboardInterrupt("killed before the old layers were deleted")

    monkeypatch.setattr(rescale_module, "forget_earlier_layouts", killed)
    with pytest.raises(KeyboardInterrupt):
        rescale(None, state, 4, 1, on_driver=True)
    again = KeyedState(state.folder, ["k1", "k2"])
    assert (again.buckets, again.generation) == (4, 1) and _current(again, 1) == batch
    monkeypatch.undo()
    assert rescale(None, again, 2, 1, on_driver=True)  # the next rescale clears what was left
    assert _current(again, 1) == batch and _layer_folders(again) == {"generation-2/bucket-0", "generation-2/bucket-1"}


def test_a_bucket_count_that_is_not_a_number_is_refused(spark):
    from sqlext.streaming.engine import KeyedOperator

    for value in ("eight", "0", "-2", "2.5"):
        spark.conf.set(BUCKETS_SETTING, value)
        try:
            with pytest.raises(SqlextError) as error:
                KeyedOperator.state_buckets(spark)
        finally:
            spark.conf.unset(BUCKETS_SETTING)
        assert error.value.error_class == "INVALID_SETTING" and repr(value) in str(error.value)


# -- whole runs: the statement's output after every run, as the bucket count changes

SHAPES = three_tables.STATEMENTS


def _batches(chain) -> int:
    commits = chain.root / "cp" / "commits"
    return len([f for f in commits.iterdir() if f.name.isdigit()]) if commits.exists() else 0


@settings(max_examples=examples(4, 60), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), shape=st.sampled_from(sorted(SHAPES)), emit=st.sampled_from(["changes", "final"]),
       path=st.sampled_from(["driver", "spark"]))
def test_runs_between_rescales_give_the_batch_output(spark, tmp_path_factory, storage, data, shape, emit, path):
    """Runs at 2 buckets, then 8, then 3 (the setting changed between runs): after every run the
    output is the batch statement's over what has landed, and the states have the count of the
    last run that had a batch to run (a state is rescaled by a batch)."""
    rows, last = data.draw(three_tables.histories().filter(lambda history: history[1] >= 3))
    first = data.draw(st.integers(1, last - 2))
    cuts = [first, data.draw(st.integers(first + 1, last - 1)), last]
    sql = SHAPES[shape].format(emit=emit)
    chain = three_tables.Chain(spark, tmp_path_factory.mktemp("rescaled"), storage, path)
    done, laid_out = 0, 2  # the count the first run's plan gives new states
    try:
        for buckets, bound in zip([2, 8, 3], cuts):
            spark.conf.set(BUCKETS_SETTING, str(buckets))
            chain.land(rows, done, bound)
            ran = _batches(chain)
            chain.run(sql)
            laid_out = buckets if _batches(chain) > ran else laid_out
            done = bound
            if emit == "final" or shape == "aggregate":
                assert chain.output() == chain.batch(sql), (shape, buckets)
    finally:
        spark.conf.unset(BUCKETS_SETTING)
    assert chain.output() == chain.batch(sql), shape
    states = [KeyedState(local(str(f.parent)), []) for f in (chain.root / "cp").rglob("schema.json")]
    assert states and all(state.buckets == laid_out for state in states), \
        (laid_out, [(s.folder, s.buckets) for s in states])


def test_a_run_killed_while_it_rescales_is_redone_exactly(spark, tmp_path, storage, monkeypatch):
    """The run that rescales is killed after the rows moved and before the new layout is named;
    the next run rescales again and the output is the batch statement's."""
    rows = {"acc": [{"id": k, "branch": k % 3, "balance": k - 4, "_change_type": "insert", "_commit_version": k}
                    for k in range(1, 9)],
            "br": [{"bid": b, "region": b % 2, "bname": f"b{b}", "_change_type": "insert", "_commit_version": 10 + b}
                   for b in range(3)],
            "reg": []}
    rows["acc"] += [{"id": 3, "branch": 0, "balance": -1, "_change_type": "update_preimage", "_commit_version": 20},
                    {"id": 3, "branch": 1, "balance": 7, "_change_type": "update_postimage", "_commit_version": 20}]
    sql = SHAPES["fk_join"].format(emit="changes")
    chain = three_tables.Chain(spark, tmp_path, storage, "driver")
    try:
        spark.conf.set(BUCKETS_SETTING, "2")
        chain.land(rows, 0, 12)
        chain.run(sql)
        spark.conf.set(BUCKETS_SETTING, "8")
        chain.land(rows, 12, 20)
        real = rescale_module._move_in_memory

        def killed(*args):
            real(*args)
            raise RuntimeError("killed while rescaling")

        monkeypatch.setattr(rescale_module, "_move_in_memory", killed)
        with pytest.raises(Exception):
            chain.run(sql)
        monkeypatch.setattr(rescale_module, "_move_in_memory", real)
        chain.run(sql)
    finally:
        spark.conf.unset(BUCKETS_SETTING)
    assert chain.output() == chain.batch(sql)
    layouts = sorted(p.name for p in (chain.root / "cp").rglob("buckets-*.json"))
    assert layouts and all(name == "buckets-1.json" for name in layouts), layouts

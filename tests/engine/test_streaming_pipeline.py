"""Incremental pipelines: a function's change feed feeding another's table argument in one
statement (CHANGELOG_FILTER -> FK_JOIN, FK_JOIN -> CHANGELOG_FILTER, FK_JOIN -> FK_JOIN: order ->
customer -> region), one checkpoint and one micro-batch for the whole chain. However the
changes of the three inputs are cut into runs, the runs' outputs, concatenated (or, for
``emit => 'final'``, the output after each run), are the batch statement over the changes so far,
on the driver and on the executors."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

from sqlext.errors import SqlextError
from sqlext.streaming import run_available_now
from three_tables import SCHEMAS, SHAPES, Chain, histories

@settings(max_examples=examples(5, 90), deadline=None, suppress_health_check=list(HealthCheck))
@given(history=histories(), cuts=st.lists(st.integers(1, 14), max_size=3), shape=st.sampled_from(sorted(SHAPES)),
       emit=st.sampled_from(["changes", "records", "final"]), path=st.sampled_from(["driver", "spark"]),
       net=st.booleans())
def test_a_chain_run_by_run_is_the_batch_chain(spark, tmp_path_factory, storage, history, cuts, shape, emit, path,
                                               net, monkeypatch):
    """``net``: an inner call passes on each key's net change however small the run (on the
    driver; a large run's netting), or its rows as they are."""
    from sqlext.streaming import engine

    monkeypatch.setattr(engine, "NET_ROWS", 0 if net else engine.NET_ROWS)
    rows, last = history
    sql = SHAPES[shape].format(emit=emit)
    chain = Chain(spark, tmp_path_factory.mktemp("chain"), storage, path)
    for bound in chain.runs(rows, last, cuts, sql):
        if emit == "final":  # the output is the final table after every run
            assert chain.output() == chain.batch(sql), (shape, bound)
    assert chain.output() == chain.batch(sql), shape


def test_an_inner_call_feeds_its_change_feed_only(spark, tmp_path, storage):
    """An inner call with emit => 'final' would feed a table, not changes: refused with the fix."""
    chain = Chain(spark, tmp_path, storage, "auto")
    sql = SHAPES["filter-then-join"].format(emit="changes").replace("predicate => 'balance >= 0'",
                                                                     "predicate => 'balance >= 0', emit => 'final'")
    with pytest.raises(SqlextError) as raised:
        chain.run(sql)
    assert raised.value.error_class == "UNSUPPORTED_STREAM" and "emit => 'changes'" in str(raised.value)


def test_a_checkpoint_made_again_in_the_same_process_is_built_anew(spark, tmp_path, storage):
    """A run takes the statement's operators from this process's earlier run of it; a checkpoint
    and output deleted and started over in between are a first run again, whose state records
    its columns as a first run does (a later process reads them)."""
    import shutil

    sql = SHAPES["join-then-join"].format(emit="changes")
    rows = {"acc": [{"id": 1, "branch": 0, "balance": 3, "_change_type": "insert", "_commit_version": 1}],
            "br": [{"bid": 0, "region": 1, "bname": "b", "_change_type": "insert", "_commit_version": 2}],
            "reg": [{"rid": 1, "rname": "r", "_change_type": "insert", "_commit_version": 3}]}
    chain = Chain(spark, tmp_path, storage, "driver")
    list(chain.runs(rows, 3, [1, 2], sql))
    first = chain.output()
    assert first == chain.batch(sql) and sum(first.values()) > 1
    shutil.rmtree(tmp_path / "cp")
    shutil.rmtree(tmp_path / "out")
    chain.run(sql)
    assert chain.output() == chain.batch(sql)
    assert list((tmp_path / "cp" / "sqlext-state").rglob("schema.json"))


def _steady_history():
    """Accounts, branches and regions inserted at versions 1-40, then updated (accounts move
    branch and balance, branches move region, regions are renamed) at versions 41-80."""
    rows = {name: [] for name in SCHEMAS}
    for key in range(10):
        rows["acc"].append({"id": key, "branch": key % 3, "balance": key - 3, "_change_type": "insert",
                            "_commit_version": 1 + key})
    for key in range(3):
        rows["br"].append({"bid": key, "region": key % 2, "bname": f"b{key}", "_change_type": "insert",
                           "_commit_version": 20 + key})
    for key in range(2):
        rows["reg"].append({"rid": key, "rname": f"r{key}", "_change_type": "insert", "_commit_version": 30 + key})
    for version, key in enumerate(range(0, 10, 2), start=41):
        old = next(r for r in reversed(rows["acc"]) if r["id"] == key)
        new = {**old, "branch": (key + 1) % 3, "balance": 5 - key}
        rows["acc"] += [{**old, "_change_type": "update_preimage", "_commit_version": version},
                        {**new, "_change_type": "update_postimage", "_commit_version": version}]
    rows["br"] += [{"bid": 1, "region": 1, "bname": "b1", "_change_type": "update_preimage", "_commit_version": 60},
                   {"bid": 1, "region": 0, "bname": "B1", "_change_type": "update_postimage", "_commit_version": 60}]
    rows["reg"] += [{"rid": 0, "rname": "r0", "_change_type": "update_preimage", "_commit_version": 70},
                    {"rid": 0, "rname": "R0", "_change_type": "update_postimage", "_commit_version": 70}]
    return rows, 80


# the Spark jobs of a run on the executors: an FK_JOIN is three steps (subscribe, answer, join:
# KIP-213's subscription and response), the subscribe step in the job of the function before
# it and the join step in the job of the function after it
JOBS = {"filter-then-join": 3, "join-then-filter": 3, "join-then-join": 5}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_on_the_executors_a_chain_keyed_alike_shares_its_jobs(spark, tmp_path, storage, shape):
    """Each function of these chains takes its rows from the one before by the same key (the
    account's id) among as many buckets: one task per bucket runs both in turn and hands the
    rows over in memory, so a function after another takes no job of its own (an FK_JOIN's
    answer step, by the right key, takes one, and so does its join step where it reads the
    answers), and its rows are still the batch chain's."""
    from feeds import computed_on
    from sqlext.streaming import jobs_of

    rows, last = _steady_history()
    chain, sql = Chain(spark, tmp_path, storage, "spark"), SHAPES[shape].format(emit="changes")
    jobs = []
    for bound in (40, last):
        chain.land(rows, 0 if bound == 40 else 40, bound)
        with computed_on(spark, "spark"):
            query = run_available_now(spark, sql, checkpoint=chain.uri("cp"), output=chain.uri("out"),
                                      sources={name: chain.uri(name) for name in SCHEMAS})
        jobs.append(len(jobs_of(spark, query)))
        assert chain.output() == chain.batch(sql), (shape, bound)
    assert jobs == [JOBS[shape]] * 2, jobs


def test_a_task_handed_rows_of_another_bucket_fails_rather_than_leave_them_out():
    """The rule that puts two functions in one task is checked where it matters: a task that
    is handed, from the function before, rows its function sends to another bucket stops with
    an internal error (the run commits nothing) rather than dropping them."""
    import numpy as np
    import pyarrow as pa

    from sqlext.streaming.engine import Input, KeyedOperator
    from sqlext.streaming.executors import FileTasks, Stage

    schema = pa.schema([("k", pa.int64())])

    class ByParity(KeyedOperator):
        function = "BY_PARITY"

        def __init__(self):
            self.inputs = {"input": Input("input", schema, None)}

        def rows_from(self, spark, tables):
            return tables["input"]

        def route(self, table):
            return np.asarray(table["k"]) % 2

    stage = Stage(ByParity(), None, {}, carried="input")
    mine = FileTasks._rows_of_bucket(stage, 0, pa.table({"k": [0, 2, 4]}))
    assert mine.column("k").to_pylist() == [0, 2, 4]
    with pytest.raises(SqlextError, match=r"\[INTERNAL_ERROR\] BY_PARITY: .*bucket 0's task was handed rows of another"):
        FileTasks._rows_of_bucket(stage, 0, pa.table({"k": [0, 1]}))

"""A micro-batch over the batch bound applied in parts: the parts' windows split the changes of
every input at the same ordering values and lose none; the parts' ids follow on from batch to
batch and a replay finds the same ones; a catch-up applied in parts gives the batch statement's
output, also when a run is killed between parts, and a part that fails on its input leaves the
parts before it committed."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

import sqlext.streaming.engine as engine_module
import three_tables
from sqlext.errors import SqlextError
from sqlext.storage import local
from sqlext.streaming.batch_parts import (MAX_ROWS_SETTING, Parts, Window, first_part, forget_parts, max_rows,
                                          recorded_parts)
from sqlext.streaming.checkpoint import STATE_FOLDER


# -- the ids of the parts, batch after batch


@settings(max_examples=examples(30, 300), deadline=None)
@given(counts=st.lists(st.integers(1, 4), min_size=1, max_size=8), replayed=st.data())
def test_part_ids_follow_on_and_a_replay_finds_the_same(tmp_path_factory, counts, replayed):
    """Spark's batches 0, 1, ... each in ``count`` parts: every part has its own id, the ids
    rise by one from part to part and batch to batch, start at Spark's id until a batch is
    split, and a replay of the newest batch (before it commits) finds its plan again."""
    folder = local(tmp_path_factory.mktemp("state"))
    ids = []
    for batch, count in enumerate(counts):
        first = first_part(folder, batch)
        if all(c == 1 for c in counts[:batch]):
            assert first == batch
        parts = Parts(batch, first, list(range(count - 1)))
        if count > 1:
            parts.record(folder)
        done = replayed.draw(st.integers(0, count))
        for number in range(done):
            parts.finished(folder, number)
        again = recorded_parts(folder, batch)
        assert (again is None) == (count == 1)
        if again is not None:
            assert (again.first, again.bounds, again.done) == (first, parts.bounds, done)
        assert first_part(folder, batch) == first  # the replay's first part
        ids += [first + n for n in range(count)]
    assert ids == list(range(ids[0], ids[0] + len(ids))) and ids[0] == 0


def test_a_plan_is_forgotten_only_before_a_part_commits(tmp_path):
    folder = local(tmp_path)
    parts = Parts(4, 4, [10, 20])
    parts.record(folder)
    assert forget_parts(folder, 4) and recorded_parts(folder, 4) is None
    parts.record(folder)
    parts.finished(folder, 0)
    assert not forget_parts(folder, 4) and recorded_parts(folder, 4).done == 1


def test_the_bound_is_a_whole_number_of_rows(spark):
    assert max_rows(spark, 3) == 3 * (2 * 1024 ** 3 // 3072)  # a row per 3 KB of the 2 GB budget, a bucket
    for value in ("many", "0", "-5", "1.5"):
        spark.conf.set(MAX_ROWS_SETTING, value)
        try:
            with pytest.raises(SqlextError) as error:
                max_rows(spark, 2)
        finally:
            spark.conf.unset(MAX_ROWS_SETTING)
        assert error.value.error_class == "INVALID_SETTING" and MAX_ROWS_SETTING in str(error.value)
    spark.conf.set(MAX_ROWS_SETTING, "1_000")
    try:
        assert max_rows(spark, 8) == 1000
    finally:
        spark.conf.unset(MAX_ROWS_SETTING)


def test_the_task_budget_sets_the_default_bound(spark):
    from sqlext.streaming.batch_parts import TASK_MEMORY_SETTING, task_budget

    assert task_budget(spark) == 2 * 1024 ** 3
    spark.conf.set(TASK_MEMORY_SETTING, "512m")
    try:
        assert task_budget(spark) == 512 * 1024 ** 2
        assert max_rows(spark, 4) == 4 * (512 * 1024 ** 2 // 3072)
        for value in ("lots", "10m", "2x", "-1g"):
            spark.conf.set(TASK_MEMORY_SETTING, value)
            with pytest.raises(SqlextError) as error:
                task_budget(spark)
            assert error.value.error_class == "INVALID_SETTING" and TASK_MEMORY_SETTING in str(error.value)
    finally:
        spark.conf.unset(TASK_MEMORY_SETTING)


# -- the windows: Arrow and Spark take the same rows, and the parts take every row once

KINDS = {
    "bigint": (pa.int64(), st.integers(-50, 50)),
    "date": (pa.date32(), st.dates(dt.date(2020, 1, 1), dt.date(2020, 3, 1))),
    "timestamp": (pa.timestamp("us", tz="UTC"),
                  st.datetimes(dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 2)).map(
                      lambda d: d.replace(tzinfo=dt.timezone.utc))),
}


@settings(max_examples=examples(12, 120), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), kind=st.sampled_from(sorted(KINDS)))
def test_the_parts_take_every_row_once_in_arrow_and_in_spark(spark, data, kind):
    """Every row in one part, the same in Arrow and in Spark; a row with no ordering value in the
    first (where the step refuses it), never in none."""
    arrow_type, values = KINDS[kind]
    rows = data.draw(st.lists(values, min_size=1, max_size=30))
    bounds = sorted(set(data.draw(st.lists(st.sampled_from(rows), max_size=4))))
    rows += data.draw(st.lists(st.none(), max_size=2))
    table = pa.table({"o `{x}": pa.array(rows, arrow_type), "n": pa.array(range(len(rows)), pa.int64())})
    frame = spark.createDataFrame(table)
    parts = Parts(0, 0, bounds)
    taken_arrow = []
    for number in range(parts.count):
        window = parts.window(number)
        where = window.arrow("o `{x}", arrow_type)
        mine = table if where is None else table.filter(where)
        taken_arrow += mine["n"].to_pylist()
        spark_where = window.spark("o `{x}")
        theirs = frame if spark_where is None else frame.where(spark_where)
        assert sorted(r["n"] for r in theirs.collect()) == sorted(mine["n"].to_pylist()), (kind, window)
        if number > 0:
            assert mine["o `{x}"].null_count == 0
    assert sorted(taken_arrow) == list(range(len(rows)))
    assert Window().arrow("o", arrow_type) is None and Window().whole


# -- whole runs: a catch-up in parts

SHAPES = three_tables.STATEMENTS


def _bounded(spark, rows: int):
    spark.conf.set(MAX_ROWS_SETTING, str(rows))


@settings(max_examples=examples(4, 60), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), shape=st.sampled_from(sorted(SHAPES)), emit=st.sampled_from(["changes", "final"]),
       path=st.sampled_from(["driver", "spark"]), bound=st.integers(1, 4))
def test_a_catch_up_in_parts_gives_the_batch_output(spark, tmp_path_factory, storage, data, shape, emit, path,
                                                   bound):
    """Some runs, then a catch-up of everything else with a bound of a few rows: the catch-up is
    applied in parts, and the output is the batch statement's over all that landed."""
    rows, last = data.draw(three_tables.histories().filter(lambda history: history[1] >= 4))
    early = data.draw(st.integers(0, last // 2))
    sql = SHAPES[shape].format(emit=emit)
    chain = three_tables.Chain(spark, tmp_path_factory.mktemp("parts"), storage, path)
    if early:
        chain.land(rows, 0, early)
        chain.run(sql)
    chain.land(rows, early, last)
    landed = sum(len([r for r in table if r["_commit_version"] > early]) for table in rows.values())
    _bounded(spark, bound)
    try:
        query = chain.run(sql)
    finally:
        spark.conf.unset(MAX_ROWS_SETTING)
    assert chain.output() == chain.batch(sql), (shape, emit, path, bound)
    if landed > 2 * bound:  # several ordering values, more rows than the bound: parts
        assert query.last_batch.parts > 1, landed


def _catch_up(spark, tmp_path, storage, path: str):
    """Accounts and branches whose changes take many versions, all landed before the first run."""
    rows = {"acc": [], "br": [], "reg": []}
    for version in range(1, 41):
        if version % 4 == 0:
            b = version % 3
            rows["br"].append({"bid": b, "region": version % 2, "bname": f"b{version}",
                               "_change_type": "insert" if version < 12 else "update_postimage",
                               "_commit_version": version})
        else:
            rows["acc"].append({"id": version % 7, "branch": version % 3, "balance": version % 5 - 1,
                                "_change_type": "insert" if version < 8 else "update_postimage",
                                "_commit_version": version})
    rows["br"] = [r for r in rows["br"] if r["_change_type"] == "insert" or r["bid"] in
                  {x["bid"] for x in rows["br"] if x["_change_type"] == "insert" and x["_commit_version"] < r["_commit_version"]}]
    chain = three_tables.Chain(spark, tmp_path, storage, path)
    chain.land(rows, 0, 40)
    return chain, rows


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_a_run_killed_between_parts_goes_on_from_the_first_part_not_committed(spark, tmp_path, storage, monkeypatch,
                                                                             path):
    sql = SHAPES["fk_join"].format(emit="changes")
    chain, _ = _catch_up(spark, tmp_path, storage, path)
    real = engine_module.Pipeline.run
    ran = []

    def killed(self, batch, batch_id, window=Window()):
        ran.append(batch_id)
        if len(ran) == 3:
            raise RuntimeError("killed in the third part")
        return real(self, batch, batch_id, window)

    _bounded(spark, 6)
    try:
        monkeypatch.setattr(engine_module.Pipeline, "run", killed)
        with pytest.raises(Exception, match="killed in the third part"):
            chain.run(sql)
        plan = recorded_parts(local(tmp_path / "cp" / STATE_FOLDER), 0)
        assert plan is not None and plan.done == 2 and plan.count > 3, plan
        assert chain.output()  # the two parts committed are in the output
        before = list(ran)
        query = chain.run(sql)
    finally:
        spark.conf.unset(MAX_ROWS_SETTING)
    assert ran[len(before):] == list(range(plan.first + 2, plan.first + plan.count))  # the rest, once each
    assert query.last_batch.parts == plan.count
    assert chain.output() == chain.batch(sql)
    chain.land({"acc": [{"id": 1, "branch": 2, "balance": 9, "_change_type": "update_postimage",
                         "_commit_version": 50}], "br": [], "reg": []}, 41, 50)
    chain.run(sql)  # the next batch's part follows on from the last part's id
    assert chain.output() == chain.batch(sql)
    assert first_part(local(tmp_path / "cp" / STATE_FOLDER), 2) == plan.first + plan.count + 1


def _filter_catch_up_with(spark, tmp_path, storage, version):
    """CHANGELOG_FILTER over the catch-up, with one more change of account 39 % 7 (balance 3) at
    ``version`` in a file of its own, and a bound of 6 rows (unset by the caller)."""
    chain, _ = _catch_up(spark, tmp_path, storage, "driver")
    bad = {"id": 39 % 7, "branch": 1, "balance": 3, "_change_type": "update_postimage", "_commit_version": version}
    spark.createDataFrame([bad], three_tables.SCHEMAS["acc"]).coalesce(1).write.mode("append") \
        .parquet(chain.uri("acc"))
    _bounded(spark, 6)
    return SHAPES["filter"].format(emit="changes"), chain


def test_a_part_that_fails_on_its_input_leaves_the_parts_before_it(spark, tmp_path, storage):
    """A second change of an account at one version, late in a catch-up: the run stops with the
    error, the parts before it stay committed and the batch planned (not forgotten); with the
    file corrected in place, the next run applies the rest."""
    import pyarrow.parquet as pq

    sql, chain = _filter_catch_up_with(spark, tmp_path, storage, 39)
    try:
        with pytest.raises(SqlextError) as error:
            chain.run(sql)
        assert error.value.error_class == "AMBIGUOUS_ORDER", error.value
        plan = recorded_parts(local(tmp_path / "cp" / STATE_FOLDER), 0)
        assert plan is not None and plan.done > 0
        assert (tmp_path / "cp" / "offsets" / "0").exists()  # still planned, with the same files
        assert chain.output()
        for file in (tmp_path / "acc").glob("*.parquet"):
            table = pq.read_table(file)
            if table.num_rows == 1 and table["balance"].to_pylist() == [3]:
                pq.write_table(table.slice(0, 0), file)
        chain.run(sql)
    finally:
        spark.conf.unset(MAX_ROWS_SETTING)
    assert chain.output() == chain.batch(sql)


def test_a_change_with_no_ordering_value_in_a_catch_up_is_refused_not_dropped(spark, tmp_path, storage):
    """The parts are cut by ordering value: a change with none is in the first part, where the
    step refuses it, and the run writes nothing."""
    sql, chain = _filter_catch_up_with(spark, tmp_path, storage, None)
    try:
        with pytest.raises(SqlextError) as error:
            chain.run(sql)
    finally:
        spark.conf.unset(MAX_ROWS_SETTING)
    assert error.value.error_class == "NULL_ORDER_VALUE", error.value
    assert not chain.output()

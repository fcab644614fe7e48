"""An aggregate over a function's final table (or a chain's), maintained by deltas: each
change adds its new row to its group and takes its old row away (Kafka Streams' adder and
subtractor), MIN, MAX and COUNT(DISTINCT) keep each group's values, a group whose rows are all
gone leaves the result, and HAVING applies to each group as it stands. After every run the
output is the batch statement's result over the changes so far, on the driver and on the
executors."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

from three_tables import FILTERED, JOINED, Chain, histories

STATEMENTS = {
    "filtered by branch": (
        "SELECT branch, COUNT(*) AS n, SUM(balance) AS total, AVG(balance) AS mean, MIN(balance) AS lo, "
        "MAX(balance) AS hi, COUNT(DISTINCT balance) AS kinds, COUNT(balance) AS counted FROM "
        + FILTERED.replace("'balance >= 0'", "'balance >= 0', emit => 'final'") + " GROUP BY branch"),
    "joined, by region, where and having": (
        "SELECT j.region, SUM(j.balance) AS total, COUNT(*) AS n, MAX(j.bname) AS last_name FROM "
        + JOINED.replace("join_type => 'left'", "join_type => 'left', emit => 'final'")
        + " AS j WHERE j.balance > 0 GROUP BY j.region HAVING COUNT(*) > 1"),
    "chained, by region name": (
        "SELECT rname, COUNT(*) AS accounts, SUM(balance + 1) AS total FROM FK_JOIN(left => TABLE(" + JOINED
        + "), right => TABLE(STREAM(reg)), left_key => 'id', foreign_key => 'region', right_key => 'rid', "
          "emit => 'final') GROUP BY rname"),
    "no group": (
        "SELECT COUNT(*) AS n, MAX(balance) AS hi, SUM(balance) AS total FROM "
        + FILTERED.replace("'balance >= 0'", "'balance >= 0', emit => 'final'")),
}


@settings(max_examples=examples(4, 80), deadline=None, suppress_health_check=list(HealthCheck))
@given(history=histories(), cuts=st.lists(st.integers(1, 14), max_size=3), statement=st.sampled_from(sorted(STATEMENTS)),
       path=st.sampled_from(["driver", "spark"]))
def test_the_aggregate_after_each_run_is_the_batch_aggregate(spark, tmp_path_factory, storage, history, cuts,
                                                             statement, path):
    rows, last = history
    sql = STATEMENTS[statement]
    chain = Chain(spark, tmp_path_factory.mktemp("aggregate"), storage, path)
    for bound in chain.runs(rows, last, cuts, sql):
        assert chain.output() == chain.batch(sql), (statement, bound)


def test_a_run_touches_only_the_groups_its_changes_reach(spark, tmp_path, storage):
    """The groups' state is looked up by the groups a run's changes fall in; each run writes
    the groups it changed, not all of them (the delta layer of the second run holds one group)."""
    chain = Chain(spark, tmp_path, storage, "driver")
    sql = STATEMENTS["filtered by branch"]
    inserts = [{"id": k, "branch": k, "balance": k, "_change_type": "insert", "_commit_version": k + 1}
               for k in range(30)]  # 30 groups
    chain.land({"acc": inserts, "br": [], "reg": []}, 0, 30)
    chain.run(sql)
    update = [{"id": 3, "branch": 3, "balance": 3, "_change_type": "update_preimage", "_commit_version": 31},
              {"id": 3, "branch": 3, "balance": 300, "_change_type": "update_postimage", "_commit_version": 31}]
    chain.land({"acc": update, "br": [], "reg": []}, 30, 31)
    chain.run(sql)
    assert chain.output() == chain.batch(sql)
    groups = tmp_path / "cp" / "sqlext-state" / "aggregate" / "groups"
    deltas = [p for p in groups.rglob("delta-1") if p.is_dir()]
    assert len(deltas) == 1 and spark.read.parquet(storage.uri(deltas[0])).count() == 1


@pytest.mark.parametrize("sql", [
    "SELECT branch, SUM(CAST(balance AS DOUBLE)) AS s FROM " + FILTERED.replace("'balance >= 0'", "'balance >= 0', emit => 'final'")
    + " GROUP BY branch ORDER BY branch",
])
def test_an_aggregate_without_an_incremental_form_runs_over_the_final_table(spark, tmp_path, storage, sql):
    """A SUM of doubles (or an ORDER BY) has no incremental form: the statement runs over the
    call's whole final table each run, with the same result."""
    chain = Chain(spark, tmp_path, storage, "driver")
    inserts = [{"id": k, "branch": k % 2, "balance": k, "_change_type": "insert", "_commit_version": k + 1}
               for k in range(6)]
    chain.land({"acc": inserts, "br": [], "reg": []}, 0, 6)
    chain.run(sql)
    assert chain.output() == chain.batch(sql)

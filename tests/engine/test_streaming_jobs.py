"""An incremental run's cost includes the Spark jobs it starts (each costs planning and
scheduling, whatever its size): a run over a small increment stays within a budget of jobs,
counted with Spark's status tracker, for every function that runs incrementally."""

from __future__ import annotations

import pytest

from sqlext.streaming import jobs_of, run_available_now

BUDGET = 8

FILTER = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(acc)), key => 'id', predicate => 'balance >= 0', "
          "emit => '{emit}')")
FK_JOIN = ("SELECT * FROM FK_JOIN(left => TABLE(STREAM(orders)), right => TABLE(STREAM(customers)), "
           "left_key => 'order_id', foreign_key => 'customer_id', right_key => 'id', emit => '{emit}')")


def _append(spark, rows, schema, folder: str):
    spark.createDataFrame(rows, schema).coalesce(1).write.mode("append").parquet(folder)


def _runs(spark, tmp_path, storage, sql, sources, increments):
    """Run once per increment (each a list of (rows, schema, source name)), the folders named in
    ``storage``'s form; the jobs of each run."""
    counts = []
    uri = storage.uri
    for increment in increments:
        for rows, schema, name in increment:
            _append(spark, rows, schema, uri(tmp_path / name))
        query = run_available_now(spark, sql, checkpoint=uri(tmp_path / "cp"), output=uri(tmp_path / "out"),
                                  sources={name: uri(tmp_path / name) for name in sources})
        counts.append(len(jobs_of(spark, query)))
    return counts


ACC = "id BIGINT, balance BIGINT, _change_type STRING, _commit_version BIGINT"


@pytest.mark.parametrize("emit", ["changes", "records", "final"])
def test_a_changelog_filter_run_stays_within_its_job_budget(spark, tmp_path, storage, emit):
    history = [(k, k % 7 - 2, "insert", k) for k in range(200)]
    increment = [(k, k % 5 - 1, "update_postimage", 1000 + k) for k in range(0, 200, 9)]
    counts = _runs(spark, tmp_path, storage, FILTER.format(emit=emit), ["acc"],
                   [[(history, ACC, "acc")], [(increment, ACC, "acc")]])
    assert counts[1] <= BUDGET, counts


@pytest.mark.parametrize("emit", ["changes", "records", "final"])
def test_an_fk_join_run_stays_within_its_job_budget(spark, tmp_path, storage, emit):
    orders_schema = "order_id BIGINT, customer_id BIGINT, amount BIGINT, _change_type STRING, _commit_version BIGINT"
    customers_schema = "id BIGINT, name STRING, _change_type STRING, _commit_version BIGINT"
    customers = [(c, f"c{c}", "insert", c) for c in range(20)]
    orders = [(o, o % 20, o, "insert", 100 + o) for o in range(300)]
    increment = [[(o, (o + 3) % 20, o * 2, "update_postimage", 1000 + o) for o in range(0, 300, 11)],
                 [(c, f"n{c}", "update_postimage", 2000 + c) for c in range(0, 20, 3)]]
    counts = _runs(spark, tmp_path, storage, FK_JOIN.format(emit=emit), ["orders", "customers"],
                   [[(orders, orders_schema, "orders"), (customers, customers_schema, "customers")],
                    [(increment[0], orders_schema, "orders"), (increment[1], customers_schema, "customers")]])
    assert counts[1] <= BUDGET, counts


RECURSION = ("WITH RECURSIVE anc(node, ancestor, depth) AS (SELECT src, dst, 1 FROM STREAM(edges) UNION "
             "SELECT a.node, f.dst, a.depth + 1 FROM anc AS a JOIN STREAM(edges) AS f ON a.ancestor = f.src) "
             "SELECT * FROM anc")


@pytest.mark.parametrize("feed", ["arrivals", "changes"])
def test_a_recursion_run_stays_within_its_job_budget(spark, tmp_path, storage, feed):
    """A forest of 300 nodes; then 30 new leaves arrive, or (as a change feed) 30 nodes move
    to another parent and 10 edges are deleted."""
    tree = [(n, n // 4) for n in range(1, 300)]
    if feed == "arrivals":
        schema = "src BIGINT, dst BIGINT"
        increments = [[(tree, schema, "edges")], [([(n, n // 9) for n in range(300, 330)], schema, "edges")]]
    else:
        schema = "src BIGINT, dst BIGINT, _change_type STRING, _commit_version BIGINT"
        moves = [change for n in range(40, 70) for change in ((n, n // 4, "update_preimage", 2),
                                                                (n, n // 5, "update_postimage", 2))]
        increments = [[([(s, d, "insert", 1) for s, d in tree], schema, "edges")],
                      [(moves + [(n, n // 4, "delete", 2) for n in range(290, 300)], schema, "edges")]]
    counts = _runs(spark, tmp_path, storage, RECURSION, ["edges"], increments)
    assert counts[1] <= BUDGET, counts


SELF_JOIN = ("SELECT a.id AS a_id, b.id AS b_id, a.k FROM STREAM(ev) AS a JOIN STREAM(ev) AS b "
             "ON a.k = b.k AND b.ts BETWEEN a.ts - 5 AND a.ts + 5")


def test_a_self_join_run_stays_within_its_job_budget(spark, tmp_path, storage):
    """300 events of 10 keys, one a second; then 30 more."""
    schema = "id BIGINT, k INT, ts BIGINT"
    history = [(i, i % 10, i) for i in range(300)]
    increment = [(i, i % 10, i) for i in range(300, 330)]
    counts = _runs(spark, tmp_path, storage, SELF_JOIN, ["ev"], [[(history, schema, "ev")], [(increment, schema, "ev")]])
    assert counts[1] <= BUDGET, counts

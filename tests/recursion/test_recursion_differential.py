"""Every supported recursion shape against Spark's native WITH RECURSIVE, on random trees,
DAGs, chains and cyclic graphs, through each execution path (the graph walk, level by level,
and the automatic choice): the same multiset of rows, the same column names and types.

Spark 4.3 refuses UNION (distinct) in a recursive CTE, so UNION is checked against native
UNION ALL plus DISTINCT where native ends (acyclic data) and against the Python reference
on cycles. Native depths stay small: Spark costs about 0.16 s per level here.
"""

import random

import pytest

import sqlext
from recursion_graphs import chain, cyclic, dag, tree
from reference.recursion import semi_naive
from rows import multiset

PATHS = ["auto", "walk", "levels"]


def edges_view(view, name, rows):
    return view(name, [(s, d, (i * 7) % 5 + 1) for i, (s, d) in enumerate(rows)], "src int, dst int, w int")


def ours(spark, query):
    frame = sqlext.sql(spark, query)
    return frame.schema.simpleString(), multiset(frame.collect())


def native(spark, query):
    frame = spark.sql(query)
    return frame.schema.simpleString(), multiset(frame.collect())


def check_all_paths(spark, path, query, expected=None, paths=PATHS):
    expected = expected or native(spark, query)
    for name in paths:
        path(name)
        assert ours(spark, query) == expected, name
    return expected


DESCENDANTS = """
WITH RECURSIVE r(node, depth, path) AS (
  SELECT dst, 1, CAST(src AS STRING) || '/' || CAST(dst AS STRING) FROM {edges} WHERE src = {root}
  UNION ALL
  SELECT e.dst, r.depth + 1, r.path || '/' || CAST(e.dst AS STRING)
  FROM r JOIN {edges} AS e ON r.node = e.src {where})
SELECT * FROM r"""

ANCESTORS = """
WITH RECURSIVE anc(node, ancestor, depth) AS (
  SELECT id, parent, 1 FROM {nodes} WHERE parent IS NOT NULL
  UNION ALL
  SELECT a.node, n.parent, a.depth + 1 FROM anc AS a JOIN {nodes} AS n ON a.ancestor = n.id
  WHERE n.parent IS NOT NULL)
SELECT * FROM anc"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tree_ancestors_all_pairs(spark, view, path, seed):
    rng = random.Random(seed)
    view("rt_nodes", tree(rng, 40), "id int, parent int")
    schema, rows = check_all_paths(spark, path, ANCESTORS.format(nodes="rt_nodes"))
    assert schema == "struct<node:int,ancestor:int,depth:int>" and sum(rows.values()) > 40


@pytest.mark.parametrize("seed", [4, 5])
def test_dag_descendants_with_depth_and_path(spark, view, path, seed):
    rng = random.Random(seed)
    edges_view(view, "rd_edges", dag(rng, 12, 24))
    _, rows = check_all_paths(spark, path, DESCENDANTS.format(edges="rd_edges", root=1, where=""))
    assert any(count > 1 for count in multiset((r[0],) for r in rows.elements()).values())  # shared descendants


def test_chain_with_a_depth_filter(spark, view, path):
    edges_view(view, "rc_edges", chain(30))
    _, rows = check_all_paths(spark, path, DESCENDANTS.format(edges="rc_edges", root=1, where="WHERE r.depth < 7"))
    assert sum(rows.values()) == 7


@pytest.mark.parametrize("seed", [6, 7])
def test_cyclic_union_all_with_a_depth_bound(spark, view, path, seed):
    rng = random.Random(seed)
    edges_view(view, "ry_edges", cyclic(rng, 8, 14))
    check_all_paths(spark, path, DESCENDANTS.format(edges="ry_edges", root=1, where="WHERE r.depth < 5"))


def test_anchor_reads_many_rows_and_a_filter_on_both_sides(spark, view, path):
    rng = random.Random(8)
    edges_view(view, "rm_edges", dag(rng, 15, 30))
    query = """
    WITH RECURSIVE r(start, node, cost) AS (
      SELECT src, dst, w FROM rm_edges WHERE src <= 5
      UNION ALL
      SELECT r.start, e.dst, r.cost + e.w FROM rm_edges AS e JOIN r ON e.src = r.node AND e.w <> 3
      WHERE r.cost - 1 < 12 OR e.dst IS NULL)
    SELECT * FROM r"""
    check_all_paths(spark, path, query)


def test_bill_of_materials_multiplies_quantities_along_shared_paths(spark, view, path):
    rows = dag(random.Random(15), 12, 26)
    view("rq_parts", [(a, b, (a * b) % 3 + 1) for a, b in rows], "parent int, child int, qty bigint")
    query = """
    WITH RECURSIVE bom(root, part, depth, qty) AS (
      SELECT parent, child, 1, qty FROM rq_parts
      UNION ALL
      SELECT b.root, p.child, b.depth + 1, b.qty * p.qty FROM bom AS b JOIN rq_parts AS p ON b.part = p.parent)
    SELECT * FROM bom"""
    check_all_paths(spark, path, query)


def test_step_outside_the_walk_vocabulary_runs_level_by_level(spark, view, path):
    edges_view(view, "rv_edges", dag(random.Random(9), 10, 18))
    query = """
    WITH RECURSIVE r(node, label) AS (
      SELECT 1, 'root'
      UNION ALL
      SELECT e.dst, CASE WHEN e.w > 2 THEN upper(r.label) ELSE concat_ws('-', r.label, 'x') END
      FROM r JOIN rv_edges AS e ON r.node = e.src)
    SELECT * FROM r"""
    check_all_paths(spark, path, query, paths=["auto", "levels"])


def test_string_keys_and_a_cte_before_the_recursion(spark, view, path):
    view("rs_names", [("a", "b"), ("b", "c"), ("b", "d"), ("d", None)], "src string, dst string")
    query = """
    WITH RECURSIVE e AS (SELECT * FROM rs_names WHERE src <> 'z'),
    r(name, hops) AS (SELECT 'a', 0 UNION ALL SELECT e.dst, hops + 1 FROM r JOIN e ON r.name = e.src)
    SELECT name, hops FROM r"""
    check_all_paths(spark, path, query, paths=["auto", "levels"])


def test_bigint_anchor_and_the_rest_of_the_statement(spark, view, path):
    view("rb_edges", [(s, d) for s, d in chain(6)], "src bigint, dst bigint")
    query = """
    WITH RECURSIVE r(node, depth) AS (
      SELECT CAST(1 AS BIGINT), CAST(0 AS BIGINT)
      UNION ALL SELECT e.dst, r.depth + 1 FROM r JOIN rb_edges e ON r.node = e.src)
    SELECT depth, count(*) AS n FROM r JOIN rb_edges x ON x.src = r.node GROUP BY depth"""
    schema, _ = check_all_paths(spark, path, query)
    assert schema == "struct<depth:bigint,n:bigint>"


@pytest.mark.parametrize("seed", [10, 11])
def test_union_on_a_dag_is_native_union_all_made_distinct(spark, view, path, seed):
    edges_view(view, "ru_edges", dag(random.Random(seed), 12, 26))
    step = "SELECT e.dst, r.depth + 1 FROM r JOIN ru_edges e ON r.node = e.src"
    ours_query = f"WITH RECURSIVE r(node, depth) AS (SELECT 1, 0 UNION {step}) SELECT * FROM r"
    native_query = f"WITH RECURSIVE r(node, depth) AS (SELECT 1, 0 UNION ALL {step}) SELECT DISTINCT * FROM r"
    schema, rows = native(spark, native_query)
    check_all_paths(spark, path, ours_query, expected=(schema, rows))


@pytest.mark.parametrize("seed", [12, 13])
def test_union_on_cyclic_data_terminates(spark, view, path, seed):
    rows = cyclic(random.Random(seed), 10, 25)
    edges_view(view, "rk_edges", rows)
    query = """WITH RECURSIVE r(node) AS (SELECT 1 UNION SELECT e.dst FROM r JOIN rk_edges e ON r.node = e.src)
               SELECT * FROM r"""
    expected = semi_naive([(1,)], lambda level: [(d,) for (n,) in level for (s, d) in rows
                                                 if n is not None and s == n], True)
    check_all_paths(spark, path, query, expected=("struct<node:int>", multiset(expected)))


def test_union_keeps_anchor_duplicates_out(spark, view, path):
    edges_view(view, "ra_edges", [(1, 2), (2, 1)])
    query = """WITH RECURSIVE r(node) AS (SELECT * FROM VALUES (1), (1), (2) AS t(x)
               UNION SELECT e.dst FROM r JOIN ra_edges e ON r.node = e.src) SELECT * FROM r"""
    check_all_paths(spark, path, query, expected=("struct<node:int>", multiset([(1,), (2,)])))


def test_deeper_than_spark_allows(spark, view, path):
    edges_view(view, "rl_edges", chain(150))
    query = """WITH RECURSIVE r(node, depth) AS (SELECT 1, 0 UNION ALL
               SELECT e.dst, r.depth + 1 FROM r JOIN rl_edges e ON r.node = e.src) SELECT max(depth), count(*) FROM r"""
    path("auto")
    # sqlext's default limit is its own (10,000 levels), not Spark's; a low Spark limit makes
    # native fail fast here, as its default of 100 fails on this chain
    spark.conf.set("spark.sql.cteRecursionLevelLimit", "10")
    try:
        assert sqlext.sql(spark, query).collect()[0] == (149, 150)
        with pytest.raises(Exception, match="RECURSION_LEVEL_LIMIT_EXCEEDED"):
            spark.sql(query).collect()
    finally:
        spark.conf.unset("spark.sql.cteRecursionLevelLimit")


def test_seed_descendant_counts_whatever_the_row_order(spark, view):
    from pathlib import Path

    from sqlext.statements import split_statements

    example = (Path(__file__).resolve().parents[2] / "sql_examples" / "recursion.sql").read_text()
    count_query = split_statements(example)[1].text
    rng = random.Random(14)
    rows = tree(rng, 25)
    parent = dict(rows)
    expected = {node: 0 for node in parent}
    for node in parent:
        up = parent[node]
        while up is not None:
            expected[up] += 1
            up = parent[up]
    for _ in range(3):
        rng.shuffle(rows)
        view("parents", rows, "node int, parent int")
        assert dict(sqlext.sql(spark, count_query).collect()) == expected
    assert dict(spark.sql(count_query).collect()) == expected

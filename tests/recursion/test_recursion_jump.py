"""Path doubling ('jump') for recursions that follow one parent per node: the same multiset of
rows, column names and types as the graph walk and the level path (and a plain-Python
reference) on forests, chains, NULL parents, duplicate and mid-tree anchors, carried columns
and counters; the level limit at its exact depth; cycles; and the fallback when the key is
not unique. Each jump costs a few Spark jobs per round, so the data stays small."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

import sqlext
from recursion_graphs import error_of, tree
from reference.recursion import semi_naive
from rows import multiset
from sqlext.recursion import jump as recursive_jump
from sqlext.recursion.paths import last_path

ANCESTORS = """
WITH RECURSIVE anc(node, ancestor, depth) {limit} AS (
  SELECT id, parent, 1 FROM {nodes} WHERE parent IS NOT NULL
  UNION ALL
  SELECT a.node, f.parent, a.depth + 1 FROM anc AS a JOIN {nodes} AS f ON a.ancestor = f.id
  WHERE f.parent IS NOT NULL)
SELECT * FROM anc"""


def run(spark, path, name, query):
    path(name)
    frame = sqlext.sql(spark, query)
    return frame.schema.simpleString(), multiset(frame.collect()), last_path["path"]


def same_on_all_paths(spark, path, query, paths=("walk", "levels")):
    schema, rows, taken = run(spark, path, "jump", query)
    assert taken == "jump", recursive_jump.last_run
    for name in paths:
        assert run(spark, path, name, query)[:2] == (schema, rows), name
    return schema, rows


def forest(rng, nodes, trees):
    """(id, parent) rows of ``trees`` random trees; ids shuffled."""
    rows, next_id = [], 1
    for size in [nodes // trees] * trees:
        rows += [(i + next_id - 1, None if p is None else p + next_id - 1) for i, p in tree(rng, size)]
        next_id += size
    return rows


def ancestors_reference(rows, anchor):
    parent = {i: p for i, p in rows if i is not None}
    step = lambda level: [(n, parent[a], d + 1) for (n, a, d) in level  # noqa: E731
                          if a in parent and parent[a] is not None]
    return semi_naive(anchor, step, distinct=False)


@pytest.mark.parametrize("seed", [1, 2])
def test_forest_ancestors_match_the_walk_and_the_levels(spark, view, path, seed):
    rows = forest(random.Random(seed), 60, 3)
    view("rj_forest", rows, "id int, parent int")
    schema, got = same_on_all_paths(spark, path, ANCESTORS.format(limit="", nodes="rj_forest"))
    assert schema == "struct<node:int,ancestor:int,depth:int>"
    assert got == multiset(ancestors_reference(rows, [(i, p, 1) for i, p in rows if p is not None]))
    assert recursive_jump.last_run["rounds"] >= 2


def test_chain_with_duplicate_mid_chain_and_null_anchors_carried_columns_and_counters(spark, view, path):
    # a chain 1 -> 2 -> ... -> 12 -> NULL: several rounds of doubling, twelve levels for the level path
    view("rj_chain", [(i, i + 1, f"n{i + 1}") for i in range(1, 12)] + [(12, None, "end")],
         "src bigint, dst bigint, label string")
    query = """
    WITH RECURSIVE r(node, depth, tag, down, label) AS (
      SELECT * FROM VALUES (1L, 0, 'a', 100L, 'start'), (1L, 0, 'a', 100L, 'start'), (5L, 5, 'mid', 0L, 'x'),
                           (CAST(NULL AS BIGINT), 0, 'null', 0L, 'y'), (99L, 0, 'none', 0L, 'z') AS t(a, b, c, d, e)
      UNION ALL
      SELECT e.dst, r.depth + 1, r.tag, r.down - 3, e.label FROM r JOIN rj_chain AS e ON r.node = e.src)
    SELECT * FROM r"""
    schema, rows = same_on_all_paths(spark, path, query)
    assert schema == "struct<node:bigint,depth:int,tag:string,down:bigint,label:string>"
    # each start row walks 12 steps and ends on the NULL parent (no node 13 comes of it)
    assert rows[(13, 12, "a", 100 - 3 * 12, "end")] == 0 and rows[(None, 12, "a", 64, "end")] == 2
    # the mid-chain anchor keeps its own depth and counter: 8 steps from node 5
    assert rows[(None, 13, "mid", -24, "end")] == 1 and rows[(99, 0, "none", 0, "z")] == 1
    assert sum(rows.values()) == 2 * 13 + 9 + 1 + 1


def test_a_single_root_and_anchors_outside_the_relation(spark, view, path):
    view("rj_single", [(1, None)], "id int, parent int")
    query = """WITH RECURSIVE r(n, d) AS (SELECT * FROM VALUES (1, 0), (2, 0), (NULL, 0) AS t(a, b)
               UNION ALL SELECT f.parent, r.d + 1 FROM r JOIN rj_single AS f ON r.n = f.id) SELECT * FROM r"""
    _, rows = same_on_all_paths(spark, path, query)
    assert rows == multiset([(1, 0), (None, 1), (2, 0), (None, 0)])


def test_string_keys_a_relation_column_and_a_filter_on_the_relation(spark, view, path):
    view("rj_org", [("ann", None, "CEO", True), ("bob", "ann", "CTO", True), ("cy", "bob", "dev", False),
                    ("dee", "cy", "dev", True), ("eve", "dee", "intern", True), ("fay", "ghost", "dev", True)],
         "name string, boss string, title string, active boolean")
    query = """WITH RECURSIVE chain(who, boss, title, hops) AS (
      SELECT name, boss, title, 1 FROM rj_org
      UNION ALL
      SELECT c.who, o.boss, o.title, c.hops + 1 FROM chain AS c JOIN rj_org AS o ON o.name = c.boss
      WHERE o.active AND o.title <> 'intern')
    SELECT * FROM chain"""
    _, rows = same_on_all_paths(spark, path, query, paths=("levels",))  # the walk takes integer keys
    assert rows[("eve", "bob", "dev", 3)] == 0 and rows[("eve", "cy", "dev", 2)] == 1  # cy is not active
    assert rows[("fay", "ghost", "dev", 1)] == 1


def test_odd_identifiers(spark, path):
    spark.createDataFrame([(1, None), (2, 1), (3, 2)], "`the id` int, `par``ent` int") \
        .createOrReplaceTempView("rj_odd")
    query = """WITH RECURSIVE `a b`(`n{0}`, `d'x`) AS (
      SELECT `the id`, 0 FROM rj_odd
      UNION ALL
      SELECT `f g`.`par``ent`, `a b`.`d'x` + 1 FROM `a b` JOIN rj_odd AS `f g` ON `a b`.`n{0}` = `f g`.`the id`)
    SELECT * FROM `a b`"""
    same_on_all_paths(spark, path, query, paths=("levels",))
    path("jump")
    frame = sqlext.sql(spark, query)
    rows = multiset(frame.collect())
    assert frame.columns == ["n{0}", "d'x"] and last_path["path"] == "jump"
    assert rows == multiset([(1, 0), (2, 0), (3, 0), (None, 1), (1, 1), (2, 1), (None, 2), (1, 2), (None, 3)])


@settings(max_examples=examples(6, 60), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_random_forests_match_the_reference(spark, path, data):
    nodes = data.draw(st.integers(1, 30))
    parents = [data.draw(st.one_of(st.none(), st.integers(0, max(0, i - 1)), st.just(nodes + 5)))
               if i else None for i in range(nodes)]
    rows = list(zip(range(nodes), parents))
    starts = data.draw(st.lists(st.one_of(st.none(), st.integers(0, nodes + 1)), min_size=1, max_size=6))
    spark.createDataFrame(rows, "id bigint, parent bigint").createOrReplaceTempView("rj_random")
    spark.createDataFrame([(s, 7) for s in starts], "s bigint, w int").createOrReplaceTempView("rj_starts")
    query = """WITH RECURSIVE r(n, d, w) AS (SELECT s, 0, w FROM rj_starts
               UNION ALL SELECT f.parent, r.d + 2, r.w FROM r JOIN rj_random AS f ON r.n = f.id) SELECT * FROM r"""
    _, got, taken = run(spark, path, "jump", query)
    assert taken == "jump"
    parent = dict(rows)
    expected = semi_naive([(s, 0, 7) for s in starts],
                          lambda level: [(parent[n], d + 2, w) for (n, d, w) in level if n in parent], False)
    assert got == multiset(expected)


CHAIN = """WITH RECURSIVE r(n, d) MAX RECURSION LEVEL {limit} AS (
  SELECT 1, 0 UNION ALL SELECT e.dst, r.d + 1 FROM r JOIN rj_le AS e ON r.n = e.src) SELECT * FROM r"""


def test_level_limit_at_the_exact_depth(spark, view, path):
    view("rj_le", [(i, i + 1) for i in range(1, 6)], "src int, dst int")  # levels 0..5 hold rows
    assert sum(run(spark, path, "jump", CHAIN.format(limit=6))[1].values()) == 6
    for limit in (5, 2, 1):
        error = error_of(lambda: sqlext.sql(spark, CHAIN.format(limit=limit)).collect())
        assert error.error_class == "RECURSION_LEVEL_LIMIT_EXCEEDED"
        assert error.params == {} or error.params["level"] == limit
        assert f"recursion level limit {limit}" in str(error)


def test_a_cycle_hits_the_level_limit_and_an_unreached_cycle_does_not(spark, view, path):
    view("rj_cycle", [(1, 2), (2, 3), (3, 1), (10, 11), (11, None)], "id int, parent int")
    query = """WITH RECURSIVE r(n, d) MAX RECURSION LEVEL 50 AS (SELECT {start}, 0
               UNION ALL SELECT f.parent, r.d + 1 FROM r JOIN rj_cycle AS f ON r.n = f.id) SELECT * FROM r"""
    path("jump")
    error = error_of(lambda: sqlext.sql(spark, query.format(start=1)).collect())
    assert error.error_class == "RECURSION_LEVEL_LIMIT_EXCEEDED" and "limit 50" in str(error)
    _, rows, taken = run(spark, path, "jump", query.format(start=10))
    assert taken == "jump" and rows == multiset([(10, 0), (11, 1), (None, 2)])


def test_a_key_that_is_not_unique_falls_back_with_the_same_rows(spark, view, path):
    view("rj_dup", [(1, 2), (1, 3), (2, None), (3, 4)], "id int, parent int")
    query = """WITH RECURSIVE r(n, d) AS (SELECT 1, 0
               UNION ALL SELECT f.parent, r.d + 1 FROM r JOIN rj_dup AS f ON r.n = f.id) SELECT * FROM r"""
    _, rows, taken = run(spark, path, "jump", query)
    assert taken == "levels" and recursive_jump.last_run["why"] == "the key is not unique"
    assert rows == run(spark, path, "levels", query)[1] == multiset([(1, 0), (2, 1), (3, 1), (None, 2), (4, 2)])
    # the same key twice, but only one of them passes the step's filter: one parent per node
    # the same key twice, but only one of them passes the step's filter (which also drops the
    # row of 2, whose parent is NULL): one parent per node
    filtered = query.replace("r.n = f.id)", "r.n = f.id AND f.parent <> 3)")
    _, rows, taken = run(spark, path, "jump", filtered)
    assert taken == "jump" and rows == run(spark, path, "levels", filtered)[1] == multiset([(1, 0), (2, 1)])


def test_shapes_it_does_not_take(spark, view, path):
    view("rj_not", [(1, 2), (2, 3), (3, None)], "id int, parent int")
    steps = [
        "SELECT f.parent, r.d + 1 FROM r JOIN rj_not AS f ON r.n = f.id WHERE r.d < 1",  # filter on the CTE
        "SELECT f.parent, r.d * 2 FROM r JOIN rj_not AS f ON r.n = f.id",  # not a counter
        "SELECT f.parent, f.id FROM r JOIN rj_not AS f ON r.n = f.id",  # fine: both from the relation
    ]
    for step, expected in zip(steps, ["levels", "levels", "jump"]):
        query = f"WITH RECURSIVE r(n, d) AS (SELECT 1, 1 UNION ALL {step}) SELECT * FROM r"
        _, rows, taken = run(spark, path, "jump", query)
        assert taken == expected, step
        assert rows == run(spark, path, "levels", query)[1]
    distinct = "WITH RECURSIVE r(n) AS (SELECT 1 UNION SELECT f.parent FROM r JOIN rj_not AS f ON r.n = f.id) SELECT * FROM r"
    assert run(spark, path, "jump", distinct)[2] == "levels"  # UNION runs on the other paths


def test_auto_runs_levels_when_the_walk_does_not_fit(spark, view, path, monkeypatch):
    # the jump runs only when asked for: it has not yet measured faster than the level path
    rows = forest(random.Random(3), 30, 2)
    view("rj_auto", rows, "id int, parent int")
    query = ANCESTORS.format(limit="", nodes="rj_auto")
    assert run(spark, path, "auto", query)[2] == "walk"
    import sqlext.recursion.walk as plan

    monkeypatch.setattr(plan, "WALK_MAX_BYTES", 0)  # as if the relation were too big to collect
    _, rows_auto, taken = run(spark, path, "auto", query)
    assert taken == "levels" and rows_auto == run(spark, path, "jump", query)[1]


def test_a_counter_out_of_range_fails_as_the_walk_does(spark, view, path):
    view("rj_over", [(1, 2), (2, 3), (3, 4)], "id int, parent int")
    query = """WITH RECURSIVE r(n, d) AS (SELECT 1, 2147483646
               UNION ALL SELECT f.parent, r.d + 1 FROM r JOIN rj_over AS f ON r.n = f.id) SELECT * FROM r"""
    path("jump")
    assert error_of(lambda: sqlext.sql(spark, query).collect()).error_class == "RECURSION_VALUE_OUT_OF_RANGE"
    assert last_path["path"] == "jump"


@pytest.mark.parametrize("name", ["jump", "levels"])
def test_the_row_limit_counts_the_whole_result(spark, view, path, name):
    """A chain of 12 nodes has 66 ancestor pairs: a row limit of 65 fails with the classed
    error naming the setting, and a limit of 100 gives the rows, on the jump as on the level
    path. (The walk counts per task: tests/recursion/test_recursion_shapes.py. Under UNION ALL the level
    path is Spark's own recursion, which fails at a limit equal to the result's size.)"""
    rows = [(i, i - 1 if i > 1 else None) for i in range(1, 13)]
    view("rj_limit", rows, "id int, parent int")
    query = ANCESTORS.format(limit="", nodes="rj_limit")
    path(name)
    try:
        spark.conf.set("spark.sqlext.recursion.rowLimit", "65")
        error = error_of(lambda: sqlext.sql(spark, query).collect())
        assert error.error_class == "RECURSION_ROW_LIMIT_EXCEEDED" and "spark.sqlext.recursion.rowLimit" in str(error)
        spark.conf.set("spark.sqlext.recursion.rowLimit", "100")
        assert len(sqlext.sql(spark, query).collect()) == 66
        assert last_path["path"] == name
    finally:
        spark.conf.unset("spark.sqlext.recursion.rowLimit")

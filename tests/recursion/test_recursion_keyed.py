"""Keyed recursion, DuckDB's ``USING KEY (k)``: the result keeps one row per key, a level's
row for a key replaces it, only changed rows go on, and ``recurring.<name>`` reads the
result so far. Spark has no native version: the checks are a plain-Python reference
(``keyed_reference`` in tests/reference/recursion.py) and, for the two classic queries, the
answer computed another way (Dijkstra, union-find)."""

import heapq
import random

import pytest

import sqlext
from sqlext.errors import find_in
from rows import multiset
from reference.recursion import keyed_reference


def weighted_graph(seed, nodes=12, edges=30):
    rng = random.Random(seed)
    return [(rng.randint(1, nodes), rng.randint(1, nodes), rng.randint(1, 9)) for _ in range(edges)]


def dijkstra(edges, start):
    dist, heap = {start: 0}, [(0, start)]
    while heap:
        d, n = heapq.heappop(heap)
        if d > dist[n]:
            continue
        for s, t, w in edges:
            if s == n and d + w < dist.get(t, float("inf")):
                dist[t] = d + w
                heapq.heappush(heap, (d + w, t))
    return dist


SHORTEST = """
WITH RECURSIVE d(node, dist) USING KEY (node) AS (
  SELECT 1, 0
  UNION
  SELECT e.dst, d.dist + e.w FROM d JOIN kp_edges AS e ON d.node = e.src
  LEFT JOIN recurring.d AS cur ON cur.node = e.dst
  WHERE cur.node IS NULL OR d.dist + e.w < cur.dist)
SELECT * FROM d"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_shortest_paths(spark, view, seed):
    edges = weighted_graph(seed)
    view("kp_edges", edges, "src int, dst int, w int")

    def step(working, union):
        current = {row[0]: row for row in union}
        return [(t, dist + w) for (n, dist) in working for (s, t, w) in edges
                if s == n and (t not in current or dist + w < current[t][1])]

    expected = keyed_reference([(1, 0)], step, [0], 100)
    assert dict(expected) == dijkstra(edges, 1)
    assert multiset(sqlext.sql(spark, SHORTEST).collect()) == multiset(expected)


def test_label_propagation_finds_connected_components(spark, view):
    rng = random.Random(4)
    nodes = list(range(1, 31))
    pairs = [(rng.choice(nodes), rng.choice(nodes)) for _ in range(22)]
    both_ways = pairs + [(b, a) for a, b in pairs]
    view("kl_nodes", [(n,) for n in nodes], "node int")
    view("kl_edges", both_ways, "src int, dst int")
    query = """
    WITH RECURSIVE cc(node, label) USING KEY (node) AS (
      SELECT node, node FROM kl_nodes
      UNION
      SELECT e.dst, c.label FROM cc AS c JOIN kl_edges AS e ON c.node = e.src
      JOIN recurring.cc AS cur ON cur.node = e.dst WHERE c.label < cur.label)
    SELECT * FROM cc"""
    parent = {n: n for n in nodes}

    def find(n):
        while parent[n] != n:
            n = parent[n]
        return n

    for a, b in pairs:
        ra, rb = find(a), find(b)
        parent[max(ra, rb)] = min(ra, rb)
    components = {}
    for n in nodes:
        components.setdefault(find(n), []).append(n)
    expected = {n: min(members) for members in components.values() for n in members}
    assert dict(sqlext.sql(spark, query).collect()) == expected
    assert len(set(expected.values())) > 1


def test_a_changed_row_replaces_the_old_one_and_only_changes_go_on(spark, view):
    # the last label to reach a node wins; a node reached again with the same row stops there
    edges = [(1, 2), (1, 3), (2, 4), (3, 4), (4, 5), (2, 5)]
    view("kr_edges", edges, "src int, dst int")
    query = """
    WITH RECURSIVE lab(node, label, hops) USING KEY (node) AS (
      SELECT 1, 'root', 0
      UNION ALL
      SELECT e.dst, lab.label || '>' || CAST(e.dst AS STRING), lab.hops + 1
      FROM lab JOIN kr_edges AS e ON lab.node = e.src)
    SELECT * FROM lab"""

    def step(working, union):
        return [(t, f"{label}>{t}", hops + 1) for (n, label, hops) in working for (s, t) in edges if s == n]

    expected = keyed_reference([(1, "root", 0)], step, [0], 100)
    rows = sqlext.sql(spark, query).collect()
    assert multiset(rows) == multiset(expected)
    assert len(rows) == 5 and dict((r[0], r[2]) for r in rows)[5] == 3  # node 5 kept its last (longest) row


def test_keyed_recursion_on_a_rotating_cycle_hits_the_level_limit(spark, view):
    view("kc_edges", [(1, 2), (2, 3), (3, 1)], "src int, dst int")
    query = """
    WITH RECURSIVE rot(node, label) USING KEY (node) MAX RECURSION LEVEL 7 AS (
      SELECT 1, 1 UNION SELECT e.dst, rot.label + 1 FROM rot JOIN kc_edges e ON rot.node = e.src)
    SELECT * FROM rot"""
    # the graph walk is lazy, like any Spark query: the error surfaces when the rows are read
    with pytest.raises(Exception) as error:
        sqlext.sql(spark, query).collect()
    assert find_in(error.value).error_class == "RECURSION_LEVEL_LIMIT_EXCEEDED"


@pytest.mark.parametrize("union", ["UNION ALL", "UNION"])
@pytest.mark.parametrize("name", ["auto", "levels"])
def test_a_step_joining_the_result_so_far_directly(spark, path, union, name):
    # the CTE joined with recurring.t and nothing else: recurring.t is no relation to collect
    # for a graph walk (it changes at every level), so the level path runs it
    query = f"""
    WITH RECURSIVE t(k, v) USING KEY (k) AS (VALUES (1, 0) {union}
      SELECT n.k, r.v + 1 FROM t AS n JOIN recurring.t AS r ON r.k = n.k WHERE n.v < 2)
    SELECT k, v FROM t"""

    def step(working, union_rows):
        current = {row[0]: row for row in union_rows}
        return [(k, current[k][1] + 1) for (k, v) in working if k in current and v < 2]

    expected = keyed_reference([(1, 0)], step, [0], 100)
    assert expected == [(1, 2)]
    path(name)
    assert multiset(sqlext.sql(spark, query).collect()) == multiset(expected)

"""Incremental recursion over a growing edge set (``WITH RECURSIVE ... UNION`` over
``STREAM(edges)``, engine 'tables'): however the edges are split into increments, the
outputs of the runs, concatenated, equal the batch recursion over all edges; each run adds
only rows that a new edge made reachable; a batch redone after a lost commit writes its rows
once; what cannot run incrementally is a classed error.

Every run is a real ``availableNow`` query over a folder of edge files, so the data stays small.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sqlext
from rows import multiset
from sqlext.errors import SqlextError
from sqlext.streaming import batch_form, run_available_now

PAIRS = ("WITH RECURSIVE reach(src, dst) AS ("
         "SELECT src, dst FROM STREAM(edges) "
         "UNION SELECT r.src, e.dst FROM reach AS r JOIN STREAM(edges) AS e ON r.dst = e.src) "
         "SELECT * FROM reach")
# a constant anchor, a filter in the step and a projection with a filter outside
FROM_ZERO = ("WITH RECURSIVE reach(node, hops) AS (SELECT 0, 0 "
             "UNION SELECT e.dst, 1 FROM reach JOIN STREAM(edges) AS e ON reach.node = e.src WHERE e.dst <> 4) "
             "SELECT reach.node FROM reach WHERE reach.node <> 2")
ANCESTORS = ("WITH RECURSIVE anc(node, ancestor, depth) AS ("
             "SELECT src, dst, 1 FROM STREAM(edges) "
             "UNION SELECT a.node, f.dst, a.depth + 1 FROM anc AS a JOIN STREAM(edges) AS f ON a.ancestor = f.src) "
             "SELECT * FROM anc")


class Edges:
    """A folder of edge files, a checkpoint and an output folder."""

    def __init__(self, spark, root: Path):
        self.spark, self.root = spark, root
        self.source, self.output, self.checkpoint = root / "edges", root / "out", root / "checkpoint"
        self.all: list[tuple] = []

    def add(self, edges):
        if edges:
            self.spark.createDataFrame(edges, "src int, dst int").coalesce(1).write.mode("append") \
                .parquet(str(self.source))
            self.all += edges

    def run(self, sql):
        run_available_now(self.spark, sql, checkpoint=str(self.checkpoint), output=str(self.output),
                          sources={"edges": str(self.source)})

    def written(self):
        if not any(self.output.glob("*.parquet")):
            return multiset([])
        return multiset([r.asDict() for r in self.spark.read.parquet(str(self.output)).collect()])

    def batch(self, sql):
        self.spark.read.parquet(str(self.source)).createOrReplaceTempView("edges")
        try:
            return multiset([r.asDict() for r in sqlext.sql(self.spark, batch_form(sql)).collect()])
        finally:
            self.spark.catalog.dropTempView("edges")


@pytest.fixture
def edges(spark):
    roots = []

    def make():
        roots.append(Path(tempfile.mkdtemp(prefix="sqlext-rec-stream-")))
        return Edges(spark, roots[-1])

    yield make
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


graphs = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=12)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(graph=graphs, cuts=st.lists(st.integers(1, 12), max_size=3), sql=st.sampled_from([PAIRS, FROM_ZERO]))
def test_increments_concatenate_to_the_batch_recursion(spark, edges, graph, cuts, sql):
    """Cycles, self-loops, duplicate edges, edges that reach nothing yet: any split gives the
    batch rows (each row once: the result's rows are distinct)."""
    current = edges()
    points = sorted({0, len(graph), *[c for c in cuts if c < len(graph)]})
    for start, end in zip(points, points[1:]):
        current.add(graph[start:end])
        current.run(sql)
    assert current.written() == current.batch(sql)


def test_a_forest_grows_leaf_by_leaf_and_each_run_adds_the_new_leaves_ancestors(spark, edges):
    """Edges point from a node to its parent. Each run forwards exactly the (node, ancestor,
    depth) rows of the nodes that arrived, and a run that links an existing root under a new
    node forwards the new ancestors of the whole subtree."""
    current = edges()
    current.add([(1, 0), (2, 1), (3, 1)])
    current.run(ANCESTORS)
    first = current.written()
    assert first == multiset([{"node": 1, "ancestor": 0, "depth": 1}, {"node": 2, "ancestor": 1, "depth": 1},
                              {"node": 3, "ancestor": 1, "depth": 1}, {"node": 2, "ancestor": 0, "depth": 2},
                              {"node": 3, "ancestor": 0, "depth": 2}])
    current.add([(4, 3)])
    current.run(ANCESTORS)
    assert current.written() - first == multiset([{"node": 4, "ancestor": 3, "depth": 1},
                                                  {"node": 4, "ancestor": 1, "depth": 2},
                                                  {"node": 4, "ancestor": 0, "depth": 3}])
    current.add([(0, 9)])  # the old root gets a parent: every node gains an ancestor
    current.run(ANCESTORS)
    assert current.written() == current.batch(ANCESTORS)
    assert sum(current.written().values()) == 5 + 3 + 5


def test_a_batch_redone_after_a_lost_commit_writes_its_rows_once(spark, edges):
    current = edges()
    for part in ([(0, 1), (1, 2)], [(2, 3)], [(3, 0), (5, 6)]):
        current.add(part)
        current.run(PAIRS)
    (current.checkpoint / "commits" / "2").unlink()
    (current.checkpoint / "commits" / ".2.crc").unlink(missing_ok=True)
    current.run(PAIRS)
    current.add([(6, 0)])
    current.run(PAIRS)
    assert current.written() == current.batch(PAIRS)


@pytest.mark.parametrize("sql", [
    PAIRS.replace("UNION SELECT", "UNION ALL SELECT"),
    PAIRS.replace("JOIN STREAM(edges) AS e", "LEFT JOIN STREAM(edges) AS e"),
    PAIRS.replace("SELECT * FROM reach", "SELECT src, COUNT(*) FROM reach GROUP BY src"),
    PAIRS.replace("JOIN STREAM(edges) AS e ON r.dst = e.src", "JOIN STREAM(edges) AS e ON r.dst = e.src JOIN other AS o ON o.x = e.dst"),
    PAIRS.replace("SELECT src, dst FROM STREAM(edges)", "SELECT DISTINCT src, dst FROM STREAM(edges)"),
    PAIRS.replace("SELECT * FROM reach", "SELECT * FROM reach JOIN STREAM(edges) AS z ON reach.src = z.src"),
])
def test_what_cannot_run_incrementally_is_a_classed_error(spark, edges, sql):
    current = edges()
    current.add([(0, 1)])
    with pytest.raises(SqlextError, match=r"\[UNSUPPORTED_STREAM\]"):
        current.run(sql)


def test_a_stream_of_changes_is_refused(spark, edges):
    """Edges that carry change types could be deleted, which this recursion does not follow."""
    current = edges()
    spark.createDataFrame([(0, 1, "insert")], "src int, dst int, _change_type string").write.parquet(str(current.source))
    with pytest.raises(SqlextError, match=r"\[UNSUPPORTED_STREAM\].*_change_type"):
        current.run(PAIRS)


def test_bench_incremental_recursion_checks_rows_against_the_batch(spark, capsys):
    from sqlext.bench.incremental import bench_incremental

    results = bench_incremental(spark, rows=0, runs=1, percent=5, function="recursion", nodes=3000)
    out = capsys.readouterr().out
    assert set(results) == {"tables"} and "WITH RECURSIVE (ancestors, UNION), engine 'tables'" in out
    assert results["tables"]["rows"] > 3000 and len(results["tables"]["incremental"]) == 1


def test_a_constant_anchor_and_columns_qualified_by_the_recursion_name(spark, edges):
    current = edges()
    current.add([(0, 1), (1, 2), (2, 3)])
    current.run(FROM_ZERO)
    current.add([(3, 0), (0, 4), (1, 5)])
    current.run(FROM_ZERO)
    # rows (node, hops): (0, 0) the anchor; (1, 1), (2, 1), (3, 1), (0, 1), (5, 1); never 4;
    # the outer query drops node 2
    assert current.written() == current.batch(FROM_ZERO) == multiset(
        [{"node": 0}, {"node": 0}, {"node": 1}, {"node": 3}, {"node": 5}])

"""Incremental recursion over a growing edge set (``WITH RECURSIVE ... UNION`` over
``STREAM(edges)``): however the edges are split into increments, the
outputs of the runs, concatenated, equal the batch recursion over all edges; each run adds
only rows that a new edge made reachable; a batch redone after a lost commit writes its rows
once; what cannot run incrementally is a classed error.

Every run is a real ``availableNow`` query over a folder of edge files, so the data stays small.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

import sqlext
from feeds import computed_on
from landing import land, read_rows, rows_by_file
from rows import multiset
from sqlext.errors import SqlextError
from sqlext.streaming import batch_form, run_available_now
from storage_forms import Storage

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
    """A folder of edge files, a checkpoint and an output folder: local paths to look at their
    files, named to sqlext and Spark in the form of ``storage`` (:meth:`uri`)."""

    def __init__(self, spark, root: Path, storage: Storage):
        self.spark, self.root, self.storage = spark, root, storage
        self.source, self.output, self.checkpoint = root / "edges", root / "out", root / "checkpoint"
        self.all: list[tuple] = []
        self.path = "auto"  # where a run computes: the driver, Spark, or by size

    def add(self, edges):
        if edges:
            land(self.source, edges, "src int, dst int")
            self.all += edges

    def uri(self, path: Path) -> str:
        return self.storage.uri(path)

    def cli_options(self) -> list[str]:
        """The folders of a run, as options of ``sqlext stream``."""
        return ["--checkpoint", self.uri(self.checkpoint), "--output", self.uri(self.output),
                "--source", f"edges={self.uri(self.source)}"]

    def run(self, sql):
        with computed_on(self.spark, self.path):
            run_available_now(self.spark, sql, checkpoint=self.uri(self.checkpoint), output=self.uri(self.output),
                              sources={"edges": self.uri(self.source)})

    def output_frame(self):
        return self.spark.read.parquet(self.uri(self.output))

    def written(self):
        return multiset(read_rows(self.output))

    def present(self):
        """The edges as they stand after every landing so far."""
        return self.spark.read.parquet(self.uri(self.source))

    def batch(self, sql):
        """The batch recursion over the present edges."""
        self.present().createOrReplaceTempView("edges")
        try:
            return multiset([r.asDict() for r in sqlext.sql(self.spark, batch_form(sql)).collect()])
        finally:
            self.spark.catalog.dropTempView("edges")


def _folders(spark, kind, storage):
    """A fixture's factory of ``kind`` folders (named in ``storage``'s form), each removed afterwards."""
    roots = []

    def make():
        roots.append(Path(tempfile.mkdtemp(prefix="sqlext-rec-stream-")))
        return kind(spark, roots[-1], storage)

    yield make
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def edges(spark, storage):
    yield from _folders(spark, Edges, storage)


graphs = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1, max_size=12)


@settings(max_examples=examples(4, 40), deadline=None, suppress_health_check=list(HealthCheck))
@given(graph=graphs, cuts=st.lists(st.integers(1, 12), max_size=3), sql=st.sampled_from([PAIRS, FROM_ZERO]),
       path=st.sampled_from(["driver", "spark"]))
def test_increments_concatenate_to_the_batch_recursion(spark, edges, graph, cuts, sql, path):
    """Cycles, self-loops, duplicate edges, edges that reach nothing yet: any split gives the
    batch rows (each row once: the result's rows are distinct)."""
    current = edges()
    current.path = path
    for increment in _cut(graph, cuts):
        current.add(increment)
        current.run(sql)
    assert current.written() == current.batch(sql)


def _cut(items, cuts):
    """``items`` in consecutive increments, cut at the positions ``cuts`` names."""
    points = sorted({0, len(items), *[c for c in cuts if c < len(items)]})
    return [items[start:end] for start, end in zip(points, points[1:])]


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


@pytest.mark.storage("viewfs")
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


def test_runs_after_the_first_in_a_process_keep_the_edges_in_memory(spark, edges, monkeypatch):
    """On the driver, a run reads the edges present from the state's layers only when no run
    of this process left them in memory for those very layers: three runs read them once (the
    first, from an empty state), and give the batch rows."""
    from sqlext.streaming.operators.recursion.present import Present

    read = []
    of = Present.of

    def counted(rows, *args):
        read.append(rows.num_rows)
        return of(rows, *args)

    monkeypatch.setattr(Present, "of", staticmethod(counted))
    current = edges()
    current.path = "driver"
    for part in ([(1, 0), (2, 1)], [(3, 2), (7, 8)], [(0, 5), (8, 9)]):
        current.add(part)
        current.run(ANCESTORS)
    assert read == [0]
    assert current.written() == current.batch(ANCESTORS)


def test_edges_with_null_ends_kept_in_memory_between_runs_give_the_batch_rows(spark, edges, changed_edges):
    """An edge whose join column is NULL is never followed, yet it is an edge: met again in a
    later run it is not new, and deleted in a later run it was there (on the driver, where the
    edges stay in memory between runs)."""
    current = edges()
    current.path = "driver"
    for part in ([(None, 1), (1, None), (0, 1)], [(None, 1), (1, 2), (None, None)], [(2, None), (None, 0)]):
        current.add(part)
        current.run(PAIRS)
    assert current.written() == current.batch(PAIRS)
    changed = changed_edges()
    changed.path = "driver"
    for part in ([(None, 1, "insert", 1), (0, 1, "insert", 1), (1, 2, "insert", 1)],
                 [(None, 1, "delete", 2), (None, 2, "insert", 2), (1, 2, "delete", 3)],
                 [(None, 2, "update_preimage", 4), (None, 0, "update_postimage", 4)]):
        changed.change(part)
        changed.run(PAIRS)
        assert changed.applied() == changed.batch(PAIRS)


def test_edges_kept_in_memory_serve_only_the_layers_they_were_written_to(spark, edges):
    """A checkpoint started over, in the same process, writes layers of the same batch
    numbers as the run before it; the edges that run left in memory are not this run's: the
    new run's third batch (its first on the driver) reads its own layers and gives the
    batch rows of the new edges."""
    current = edges()
    current.path = "driver"
    for part in ([(0, 1), (1, 2)], [(2, 3)]):
        current.add(part)
        current.run(PAIRS)
    for folder in (current.source, current.output, current.checkpoint):
        shutil.rmtree(folder)
    current.all = []
    for path, part in (("spark", [(5, 6)]), ("spark", [(6, 7)]), ("driver", [(7, 5)])):
        current.path = path
        current.add(part)
        current.run(PAIRS)
    assert current.written() == current.batch(PAIRS)
    assert multiset([{"src": 7, "dst": 6}]) <= current.written()  # through the old edge 5 -> 6


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


def _batch_rows(folder: Path) -> list[dict]:
    """The rows of a folder of batch files (``<kind>-<batch>-*``), each with the kind
    (``__kind``: ``batch`` or ``base``) and the batch (``__batch``) of the file holding it."""
    found = []
    for name, rows in rows_by_file(folder).items():
        named = re.match(r"^(batch|base)-(\d+)-", name)
        if named:
            found += [{**row, "__kind": named[1], "__batch": int(named[2])} for row in rows]
    return found


def _by_batch(folder: Path):
    """The rows of a folder of batch files, each with the kind and batch of its file, as a
    multiset."""
    return multiset(_batch_rows(folder))


class ChangedEdges(Edges):
    """Edges as a change feed: ``(src, dst, _change_type, _commit_version)`` rows. An edge is
    present while its inserts outnumber its deletes."""

    def change(self, rows):
        if rows:
            land(self.source, rows, "src int, dst int, _change_type string, _commit_version bigint")
            self.all += rows

    def applied(self):
        """The output's changes applied batch by batch, in order: the rows they leave (a
        multiset). After every batch, no row has been deleted more often than inserted."""
        rows = _batch_rows(self.output)
        result = multiset([])
        for batch in sorted({r["__batch"] for r in rows}):
            for r in (dict(r) for r in rows if r["__batch"] == batch):
                kind = r.pop("_change_type")
                for column in (self.order_name(), "__kind", "__batch"):
                    r.pop(column)
                assert kind in ("insert", "delete")
                (result.update if kind == "insert" else result.subtract)(multiset([r]))
            assert all(n >= 0 for n in result.values()), f"batch {batch} deleted a row more often than it was inserted"
        return +result

    def order_name(self) -> str:
        """The name of the output's ordering column."""
        return "_commit_version"

    def present(self):
        counts = Counter()
        for src, dst, kind, _ in self.all:
            counts[(src, dst)] += 1 if kind in ("insert", "update_postimage") else -1
        return self.spark.createDataFrame([edge for edge, n in counts.items() for _ in range(n) if n > 0],
                                          "src int, dst int")


@pytest.fixture
def changed_edges(spark, storage):
    yield from _folders(spark, ChangedEdges, storage)


@st.composite
def edge_changes(draw):
    """Inserts (the same edge more than once too), deletes of present edges and updates (a
    pre- and a postimage in one version), one version each."""
    present, changes = [], []
    for version in range(1, draw(st.integers(1, 14)) + 1):
        kind = draw(st.sampled_from(["insert", "insert", "delete", "update"])) if present else "insert"
        if kind == "insert":
            edge = (draw(st.integers(0, 5)), draw(st.integers(0, 5)))
            changes.append((*edge, kind, version))
            present.append(edge)
            continue
        edge = draw(st.sampled_from(present))
        present.remove(edge)
        if kind == "delete":
            changes.append((*edge, kind, version))
        else:
            moved = (edge[0], draw(st.integers(0, 5)))
            changes += [(*edge, "update_preimage", version), (*moved, "update_postimage", version)]
            present.append(moved)
    return changes


@settings(max_examples=examples(5, 50), deadline=None, suppress_health_check=list(HealthCheck))
@given(changes=edge_changes(), cuts=st.lists(st.integers(1, 20), max_size=3), sql=st.sampled_from([PAIRS, FROM_ZERO]),
       path=st.sampled_from(["driver", "spark"]))
def test_deleted_edges_give_the_batch_recursion_after_every_run(spark, changed_edges, changes, cuts, sql, path):
    """Edges inserted, deleted and moved, cut into runs anywhere: after each run, the output's
    inserts and deletes applied in order leave exactly the batch recursion over the edges
    present then."""
    current = changed_edges()
    current.path = path
    for increment in _cut(changes, cuts):
        current.change(increment)
        current.run(sql)
        assert current.applied() == current.batch(sql)


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_runs_under_changing_bucket_counts_and_a_small_batch_bound_give_the_batch_recursion(spark, changed_edges,
                                                                                            path):
    """The recursion keeps its state in one bucket and runs a batch whole: runs asking for 2,
    then 8, then 3 buckets, with a batch bound of two rows, give the batch recursion after each."""
    from sqlext.streaming.batch_parts import MAX_ROWS_SETTING
    from sqlext.streaming.engine import BUCKETS_SETTING

    changes = [(0, 1, "insert", 1), (1, 2, "insert", 2), (2, 3, "insert", 3), (1, 2, "delete", 4),
               (1, 4, "insert", 5), (4, 5, "insert", 6), (2, 3, "update_preimage", 7), (2, 0, "update_postimage", 7),
               (0, 2, "insert", 8), (3, 1, "insert", 9)]
    current = changed_edges()
    current.path = path
    spark.conf.set(MAX_ROWS_SETTING, "2")
    try:
        for buckets, increment in zip([2, 8, 3], _cut(changes, [3, 7])):
            spark.conf.set(BUCKETS_SETTING, str(buckets))
            current.change(increment)
            current.run(PAIRS)
            assert current.applied() == current.batch(PAIRS), buckets
    finally:
        spark.conf.unset(MAX_ROWS_SETTING)
        spark.conf.unset(BUCKETS_SETTING)


def test_a_node_that_moves_deletes_and_inserts_only_what_changed(spark, changed_edges):
    """Edges point from a node to its parent; node 2 moves from parent 1 to parent 4. The run
    deletes the ancestors it lost, inserts the ones it gained, and leaves what it still
    reaches (root 0) alone, for node 2 and its child 3."""
    current = changed_edges()
    current.change([(1, 0, "insert", 1), (2, 1, "insert", 1), (3, 2, "insert", 1), (4, 0, "insert", 1)])
    current.run(PAIRS)
    first = current.output_frame().count()
    assert first == 7
    current.change([(2, 1, "update_preimage", 2), (2, 4, "update_postimage", 2)])
    current.run(PAIRS)
    second = [r.asDict() for r in current.output_frame().where("_commit_version = 2").collect()]
    assert multiset(second) == multiset([
        {"src": 2, "dst": 1, "_change_type": "delete", "_commit_version": 2},
        {"src": 3, "dst": 1, "_change_type": "delete", "_commit_version": 2},
        {"src": 2, "dst": 4, "_change_type": "insert", "_commit_version": 2},
        {"src": 3, "dst": 4, "_change_type": "insert", "_commit_version": 2}])
    current.change([(3, 2, "delete", 3)])  # a leaf's edge goes: its rows go, nothing else
    current.run(PAIRS)
    third = [r.asDict() for r in current.output_frame().where("_commit_version = 3").collect()]
    assert multiset(third) == multiset([{"src": 3, "dst": d, "_change_type": "delete", "_commit_version": 3}
                                        for d in (2, 4, 0)])
    assert current.applied() == current.batch(PAIRS)


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_a_deleted_edge_recomputes_only_what_it_reached(spark, changed_edges, monkeypatch, path):
    """A chain 0 -> 1 -> ... -> 50 from a constant anchor; deleting 48 -> 49 marks and
    re-derives nodes 49 and 50 only, never the whole result: the one recursion from the
    removed edge reaches those two rows, on the driver and in Spark."""
    from sqlext.streaming.operators.recursion.driver import DriverPlace
    from sqlext.streaming.operators.recursion.in_spark import SparkPlace

    from_zero = ("WITH RECURSIVE reach(node) AS (SELECT 0 UNION SELECT e.dst FROM reach "
                 "JOIN STREAM(edges) AS e ON reach.node = e.src) SELECT * FROM reach")
    current = changed_edges()
    current.path = path
    current.change([(i, i + 1, "insert", 1) for i in range(50)])
    current.run(from_zero)
    sizes = []
    place = DriverPlace if path == "driver" else SparkPlace
    measured = place.reach

    def counted(self, *args, **kwargs):
        rows = measured(self, *args, **kwargs)
        sizes.append(rows.num_rows if path == "driver" else rows.count())
        return rows

    monkeypatch.setattr(place, "reach", counted)
    current.change([(48, 49, "delete", 2)])
    current.run(from_zero)
    assert sizes == [2]  # the rows the deleted edge reached: 49 and 50; nothing re-derives them
    assert current.applied() == current.batch(from_zero) == multiset([{"node": n} for n in range(49)])


def test_deleting_an_edge_that_is_not_there_is_a_classed_error_and_writes_nothing(spark, changed_edges):
    current = changed_edges()
    current.change([(0, 1, "insert", 1), (1, 2, "insert", 1)])
    current.run(PAIRS)
    before = current.applied()
    current.change([(0, 1, "delete", 2), (1, 2, "delete", 3), (1, 2, "delete", 4)])
    with pytest.raises(SqlextError, match=r"\[DELETE_OF_ABSENT_ROW\].*\(src=1, dst=2\) 1 more time"):
        current.run(PAIRS)
    assert current.applied() == before


def test_an_unknown_change_type_of_an_edge_is_a_classed_error(spark, changed_edges):
    current = changed_edges()
    current.change([(0, 1, "insert", 1), (1, 2, "upsert", 1)])
    with pytest.raises(SqlextError, match=r"\[UNKNOWN_CHANGE_TYPE\].*src=1, dst=2.*'upsert'"):
        current.run(PAIRS)


def test_bench_incremental_recursion_checks_rows_against_the_batch(spark, capsys):
    from sqlext.bench.incremental import bench_incremental

    results = bench_incremental(spark, rows=0, runs=1, percent=5, function="recursion", nodes=3000)
    out = capsys.readouterr().out
    assert "WITH RECURSIVE (ancestors, UNION): history" in out
    assert results["rows"] > 3000 and len(results["incremental"]) == 1


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


# -- a run killed (SIGKILL) in the middle of an incremental run

def _tree(first: int, last: int) -> list[tuple[int, int]]:
    """Edges (node, parent) of nodes ``first`` .. ``last``-1 of the tree in which node n's
    parent is n // 8 (root 0)."""
    return [(node, node // 8) for node in range(max(first, 1), last)]


# the second increment: 1000 new leaves, and the root under one of them (a cycle through the
# root): the batch's new rows come from the anchor over new edges, from rows found earlier
# meeting new edges, and from the walk over old edges
SECOND = _tree(1000, 2000) + [(0, 1999)]
ARRIVALS = (_tree(1, 1000), SECOND)

# the same tree as a change feed, at version 1, with the edges of nodes 900 .. 909 inserted
# twice; at version 2, 100 inner nodes move (their subtrees with them) from parent n // 8 to
# n // 8 + 1, the edges of 50 leaves are deleted, one copy of each twice-inserted edge is
# deleted (the edge stays) and 50 new leaves arrive, 10 of them under moved nodes. Every
# parent is below its node, so there is no cycle. The second batch removes edges and lowers
# counts: it deletes and re-derives, and writes new bases of the rows found and of the edges.
CHANGES = (
    [(node, parent, "insert", 1) for node, parent in _tree(1, 1000) + _tree(900, 910)],
    [change for node in range(10, 110)
     for change in ((node, node // 8, "update_preimage", 2), (node, node // 8 + 1, "update_postimage", 2))]
    + [(node, parent, "delete", 2) for node, parent in _tree(950, 1000) + _tree(900, 910)]
    + [(node, node - 900, "insert", 2) for node in range(1000, 1050)],
)

# ``sqlext stream`` that kills its own process group (itself and its JVM) with SIGKILL at one
# point of micro-batch 1: "before the output" once the batch's work is done and its output is
# about to be written, "between the states" once the output and the first of the two states
# (the rows found) are written and the second (the edges) is not, "after the output" once the
# foreachBatch function has returned (output and states written) and Spark has yet to commit
# the batch
KILLING_CLI = """
import os, signal, sys
from sqlext.cli import main
from sqlext.streaming.operators.recursion import RecursionRun

def die(batch_id):
    if batch_id == 1:
        assert os.getpgrp() == os.getpid(), "not in a session of its own"
        os.killpg(os.getpgrp(), signal.SIGKILL)

point, call = sys.argv[1], RecursionRun.__call__
if point == "before the output":
    def dying(write):
        def write_then_die(self, spark, rows, batch_id, *args, **kwargs):
            die(batch_id)
            write(self, spark, rows, batch_id, *args, **kwargs)
        return write_then_die
    RecursionRun.write_statement = dying(RecursionRun.write_statement)
    RecursionRun.write_rows = dying(RecursionRun.write_rows)
elif point == "between the states":
    from sqlext.streaming.state import KeyedState
    commit = KeyedState.commit
    def commit_then_die(self, pending):
        commit(self, pending)
        if pending:
            die(pending[0].batch_id)
    KeyedState.commit = commit_then_die
else:
    def call_then_die(self, batch, batch_id):
        call(self, batch, batch_id)
        die(batch_id)
    RecursionRun.__call__ = call_then_die
sys.exit(main(sys.argv[2:]))
"""


def _land(current, rows) -> None:
    """One increment: edges, or change rows of edges."""
    (current.change if isinstance(current, ChangedEdges) else current.add)(rows)


def _stream_in_a_child(current, *python_args):
    """``python <python_args> stream FILE.sql ...`` over the edges' folders (named in their
    storage form, the child's session given the viewfs mount table), in a session of its own
    (its JVM with it), importing this sqlext."""
    import os
    import subprocess
    import sys

    query = current.root / "reach.sql"
    query.write_text(PAIRS)
    here = str(Path(sqlext.__file__).resolve().parents[1])
    env = current.storage.child_env(dict(
        os.environ, PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)))
    command = [sys.executable, *python_args, "stream", str(query), *current.cli_options()]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env=env)


def _state_and_output(current):
    """Each state's layers (``base-N``, ``delta-N``) with their rows, and the output's rows with
    the kind (``batch`` or ``base``) and batch of the file holding each, as multisets."""
    state = current.checkpoint / "sqlext-state"
    files = {name: _layers(state / name) for name in ("result", "edges")}
    files["output"] = _by_batch(current.output)
    return files


def _layers(folder: Path) -> dict:
    return {layer.name: multiset(read_rows(layer))
            for layer in sorted(folder.glob("*-*")) if layer.is_dir() and layer.name.split("-")[0] in ("base", "delta")}


def _assert_same_files(current, unkilled) -> None:
    """The output, then each state, holds per file kind and batch (per layer) the rows of the
    run that was never killed (the output: each of its rows once)."""
    files = _state_and_output(current)
    for name in ("output", "result", "edges"):
        assert files[name] == unkilled["files"][name], name


def _never_killed(spark, kind, increments):
    """What a run that is never killed leaves after the increments (on plain paths): each
    batch's files of state and output, and the batch recursion over the edges present."""
    root = Path(tempfile.mkdtemp(prefix="sqlext-rec-unkilled-"))
    try:
        twin = kind(spark, root, Storage("plain"))
        for increment in increments:
            _land(twin, increment)
            twin.run(PAIRS)
        yield {"files": _state_and_output(twin), "batch": twin.batch(PAIRS)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def unkilled(spark):
    yield from _never_killed(spark, Edges, ARRIVALS)


@pytest.fixture(scope="module")
def unkilled_changes(spark):
    yield from _never_killed(spark, ChangedEdges, CHANGES)


def _first_run(make, increments):
    """Edges whose first increment has run, and whose second has landed."""
    current = make()
    _land(current, increments[0])
    current.run(PAIRS)
    _land(current, increments[1])
    return current


def _kill_group(child) -> None:
    import os
    import signal

    if child.poll() is None:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def _kill_around_output(current, point: str) -> None:
    """Run ``sqlext stream`` in a child that SIGKILLs itself at ``point`` of micro-batch 1:
    before its output (and its states, committed after it; a state's layer may be written
    and not yet committed), between its two state commits, or after all of them, before the
    batch's commit. The batch's output files are in the output folder only in the last case:
    they are moved there when the batch's function ends, after its states are committed."""
    import signal

    from sqlext.storage import PENDING_PREFIX

    child = _stream_in_a_child(current, "-c", KILLING_CLI, point)
    try:
        child.wait(timeout=300)
    finally:
        _kill_group(child)
    assert child.returncode == -signal.SIGKILL, "the run was not killed where the test meant to"
    assert not (current.checkpoint / "commits" / "1").exists()
    written = {"before the output": set(), "between the states": {"result"},
               "after the output": {"result", "edges"}}[point]
    for state in ("result", "edges"):
        layers = [p.name for p in (current.checkpoint / "sqlext-state" / state).glob("*-1")
                  if not p.name.startswith(PENDING_PREFIX)]  # committed: a replay may read them
        assert bool(layers) == (state in written), (state, layers)
    assert any(current.output.glob("batch-0000000001-*")) == (point == "after the output")
    pending = current.output / "_sqlext_pending-1"
    assert any(pending.glob("batch-0000000001-*")) == (point == "between the states")  # written, not committed


@pytest.mark.storage("viewfs")
def test_a_run_killed_between_its_states_is_redone_exactly_once(edges, unkilled):
    """SIGKILL ``sqlext stream`` in micro-batch 1 (offsets logged, no commit) with its output
    written and one of its two states committed. The next run redoes the batch: every row of
    the batch recursion exactly once in the output, and the state and each batch's output files
    are those of a run that was never killed. (The other points of the batch, before its output
    and after all its states, are killed in the test of changed edges below: one commit protocol
    serves both.)"""
    current = _first_run(edges, ARRIVALS)
    _kill_around_output(current, "between the states")
    current.run(PAIRS)
    assert current.written() == unkilled["batch"]
    _assert_same_files(current, unkilled)


@pytest.mark.storage("viewfs")
@pytest.mark.parametrize("point", ["before the output", "between the states", "after the output"])
def test_a_run_over_changed_edges_killed_around_its_output_is_redone_exactly_once(changed_edges, unkilled_changes,
                                                                                  point):
    """Edges moved and deleted: SIGKILL ``sqlext stream`` at a set point of micro-batch 1,
    before its output and its states are written, with the output and one state written, or
    after all of them and before the commit. The next
    run redoes the batch: its inserts and deletes, applied in order, leave the batch recursion
    over the edges present; the output holds each row of an unkilled run's output once, and
    the states hold the layers of an unkilled run."""
    current = _first_run(changed_edges, CHANGES)
    _kill_around_output(current, point)
    current.run(PAIRS)
    assert current.applied() == current.batch(PAIRS) == unkilled_changes["batch"]
    _assert_same_files(current, unkilled_changes)


# -- edges in another shape: STREAM(edges, format => ...)

SHAPED = "`my edges`"  # a source name that needs quoting
SHAPED_PAIRS = PAIRS.replace("STREAM(edges)", "STREAM(" + SHAPED + ", format => '{shape}')")


class ShapedEdges(ChangedEdges):
    """A change feed of edges written as another system writes it (``shape``): Debezium
    envelopes or Iceberg's changelog view, each run's files landed as the Delta-shape rows'."""

    shape = "delta"

    def order_name(self) -> str:
        from change_shapes import ORDER_IN

        return ORDER_IN[self.shape]

    def change(self, rows):
        from change_shapes import in_shape

        if not rows:
            return
        self.all += rows
        delta = [{"src": s, "dst": d, "_change_type": k, "_commit_version": v} for s, d, k, v in rows]
        shaped, schema = in_shape(self.shape, delta, [("src", "int"), ("dst", "int")])
        land(self.source, [row for _, row in shaped], schema)

    def run(self, sql):
        with computed_on(self.spark, self.path):
            run_available_now(self.spark, sql, checkpoint=self.uri(self.checkpoint), output=self.uri(self.output),
                              sources={"my edges": self.uri(self.source)})

    def outputs(self):
        """The output's rows, each with its file's batch, the ordering column named as in Delta's shape."""
        from change_shapes import as_delta

        return multiset(as_delta([{k: v for k, v in r.items() if k != "__kind"}
                                  for r in _batch_rows(self.output)], self.shape))


@pytest.fixture
def shaped_edges(spark, storage):
    yield from _folders(spark, ShapedEdges, storage)


@settings(max_examples=examples(3, 30), deadline=None, suppress_health_check=list(HealthCheck))
@given(changes=edge_changes(), cuts=st.lists(st.integers(1, 20), max_size=3),
       shape=st.sampled_from(["debezium", "iceberg"]), path=st.sampled_from(["driver", "spark"]))
def test_edges_in_another_shape_give_the_delta_shapes_rows_run_by_run(spark, changed_edges, shaped_edges, changes,
                                                                      cuts, shape, path):
    """The same changes of edges as Delta change rows and as Debezium envelopes (a ``u`` with
    its ``before`` edge, deletes followed by tombstones) or Iceberg's changelog view, cut into
    the same runs: each run writes the same rows (the ordering column named by the shape)."""
    delta, other = changed_edges(), shaped_edges()
    other.shape = shape
    delta.path = other.path = path
    for increment in _cut_pairs(changes, cuts):
        delta.change(increment)
        delta.run(PAIRS)
        other.change(increment)
        other.run(SHAPED_PAIRS.format(shape=shape))
        assert other.outputs() == multiset([{k: v for k, v in r.items() if k != "__kind"}
                                            for r in _batch_rows(delta.output)])
    assert other.applied() == delta.batch(PAIRS)


def _cut_pairs(changes, cuts):
    """``changes`` cut as :func:`_cut` does, but never between an update's two rows (one
    Debezium event holds both)."""
    pieces = _cut(changes, cuts)
    joined = []
    for piece in pieces:
        if joined and joined[-1][-1][2] == "update_preimage":
            joined[-1] = joined[-1] + piece
        else:
            joined.append(piece)
    return joined


def test_a_debezium_update_without_its_before_edge_is_a_classed_error(spark, shaped_edges):
    """Postgres without REPLICA IDENTITY FULL sends an update's after row only: a keyless edge
    cannot be updated so, and nothing of the run is written."""
    from change_shapes import debezium_schema

    current = shaped_edges()
    current.shape = "debezium"
    schema = debezium_schema([("src", "int"), ("dst", "int")])
    source = {"lsn": 7, "txId": 1, "db": "d", "table": "t"}
    current.spark.createDataFrame([
        {"before": None, "after": {"src": 1, "dst": 2}, "op": "c", "ts_ms": 1, "source": source},
        {"before": None, "after": {"src": 1, "dst": 3}, "op": "u", "ts_ms": 2, "source": {**source, "lsn": 8}}],
        schema).write.parquet(current.uri(current.source))
    with pytest.raises(SqlextError, match=r"\[UNSUPPORTED_STREAM\].*update at source_lsn = 8 has no before row.*"
                                          r"REPLICA IDENTITY FULL"):
        current.run(SHAPED_PAIRS.format(shape="debezium"))
    assert current.written() == multiset([])


def test_stream_names_an_ordering_column_of_change_rows(spark, changed_edges):
    """``STREAM(edges, order_by => 'seq')``: a Delta-shape feed ordered by another column,
    which is no column of the edge; a column the stream lacks is a classed error."""
    wrong, current = changed_edges(), changed_edges()
    for folder in (wrong, current):
        spark.createDataFrame([(0, 1, "insert", 5), (1, 2, "insert", 6)],
                              "src int, dst int, _change_type string, `se q` bigint") \
            .write.parquet(folder.uri(folder.source))
    with pytest.raises(SqlextError, match=r"\[CHANGELOG_MISSING_COLUMN\].*'seq'"):
        wrong.run(PAIRS.replace("STREAM(edges)", "STREAM(edges, order_by => 'seq')"))
    current.run(PAIRS.replace("STREAM(edges)", "STREAM(edges, order_by => '`se q`')"))
    assert multiset([r.asDict() for r in current.output_frame().collect()]) == multiset(
        [{"src": s, "dst": d, "_change_type": "insert", "se q": 6} for s, d in ((0, 1), (1, 2), (0, 2))])

"""On a real standalone cluster (a master and two workers, each its own JVM, started from
PySpark's own scripts), sqlext gives the rows it gives in local mode: the examples, the
self-join rewrites, CHANGELOG_FILTER's table function run by executors, incremental runs of
CHANGELOG_FILTER, FK_JOIN and a recursion, and an FK_JOIN during which a worker is killed
(Spark re-runs the lost work; never wrong or partial rows).

The cluster costs about a minute; the test is marked ``cluster`` (run by default, skipped
with ``-m "not cluster"``)."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from standalone_cluster import standalone_cluster

pytestmark = pytest.mark.cluster
TESTS = Path(__file__).resolve().parent


def _kill_when_asked(cluster, work: Path, done: threading.Event) -> None:
    marker = work / "kill-now"
    while not done.is_set():
        if marker.exists():
            time.sleep(2.0)  # the second FK_JOIN run is under way
            cluster.kill_worker(1)
            (work / "killed-at").write_text(str(time.time()))
            return
        time.sleep(0.1)


@pytest.fixture(scope="module")
def cluster_result(tmp_path_factory):
    work = tmp_path_factory.mktemp("cluster")
    with standalone_cluster(work) as cluster:
        done = threading.Event()
        killer = threading.Thread(target=_kill_when_asked, args=(cluster, work, done), daemon=True)
        killer.start()
        job = subprocess.run(
            [sys.executable, str(TESTS / "cluster_job.py"), cluster.url, str(work)],
            capture_output=True, text=True, timeout=900, env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
        )
        done.set()
        assert job.returncode == 0, job.stderr[-4000:]
    result = json.loads((work / "result.json").read_text())
    result["killed_at"] = float((work / "killed-at").read_text()) if (work / "killed-at").exists() else None
    return result


def test_the_job_ran_on_two_executors(cluster_result):
    assert cluster_result["executors"] == 2


def test_examples_match_their_golden_output(cluster_result):
    golden = TESTS / "golden"
    assert cluster_result["examples"]
    for name, text in cluster_result["examples"].items():
        assert text == (golden / f"{name}.out").read_text(), name


def test_self_join_rewrites_match_the_original_and_local_mode(spark, cluster_result):
    from test_self_join_differential import FIXTURE_RELATIONS, register_fixture_relations

    register_fixture_relations(spark, 1)
    try:
        assert len(cluster_result["self_joins"]) >= 15
        for title, (original, rewritten) in cluster_result["self_joins"].items():
            assert rewritten == original, title  # both sorted: the same multiset of rows
        from rows import portable
        from self_join_fixtures import read_fixtures

        for fixture in read_fixtures().cases:
            if not fixture.noop:
                local = portable(spark.sql(fixture.query).collect())
                assert cluster_result["self_joins"][fixture.title][0] == local, fixture.title
    finally:
        for name in FIXTURE_RELATIONS:
            spark.catalog.dropTempView(name)


def test_table_function_runs_on_executors_like_the_rewrite(cluster_result):
    through_udtf, through_rewrite = cluster_result["udtf"]
    assert through_udtf == through_rewrite
    # inserts of 1 (v=5) and 2 (v=7); 1 falls out (v=-1) and comes back (v=9); 2 is deleted
    assert len(through_udtf) == 5 and "(1, 9, 'insert', 4)" in through_udtf


def test_incremental_runs_on_the_cluster_give_the_batch_rows(cluster_result):
    incremental, batch = cluster_result["stream"]
    assert incremental == batch and len(batch) == 5
    incremental, batch = cluster_result["stream_fk"]
    assert incremental == batch and len(batch) >= 4
    # a cycle 1 -> 2 -> 3 -> 4 -> 1 closed by the second run (16 pairs) and 5 -> 6 -> 7 (3)
    incremental, batch = cluster_result["stream_recursion"]
    assert incremental == batch and len(batch) == 19
    # emit => 'final': the output folder is the final table
    incremental, batch = cluster_result["stream_fk_final"]
    assert incremental == batch and len(batch) == 3
    # edges that move: the changes applied leave the recursion over the edges present
    assert cluster_result["stream_recursion_changes"] == ["(1, 2)", "(3, 4)", "(5, 3)", "(5, 4)"]


def test_fk_join_survives_a_lost_worker(cluster_result):
    first = cluster_result["fk_first"]
    assert first[0] > 0
    # the worker died while the second run was under way, and the run went on without it
    assert cluster_result["killed_at"] is not None
    assert cluster_result["killed_at"] < cluster_result["fk_second_finished"]
    assert cluster_result["executors_after"] == 1
    # one worker is left: Spark re-runs the lost tasks (and the stages whose shuffle output
    # the lost executor held) there, and the rows are the same
    assert cluster_result.get("fk_second") == first, cluster_result.get("fk_second_error")

"""On a real standalone cluster (a master and two workers, each its own JVM, started from
PySpark's own scripts), sqlext gives the rows it gives in local mode: the recursion's examples
(their executors run sqlext's walk and local checkpoints), the self-join rewrites,
CHANGELOG_FILTER's table function run by executors, incremental runs of CHANGELOG_FILTER,
FK_JOIN and a recursion, and an FK_JOIN during which a worker is killed while it runs one of
the run's tasks (Spark re-runs the lost work; never wrong or partial rows). The kill waits for
that task, not for a time, so the test does not depend on how fast the machine is.

The cluster starts once for the module and its job costs about a minute on two busy cores;
the tests are marked ``cluster`` (run by default, skipped with ``-m "not cluster"``)."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cluster_job import EXAMPLES_ON_EXECUTORS, GATE, LOST, RUN_GROUP
from standalone_cluster import standalone_cluster

pytestmark = pytest.mark.cluster
TESTS = Path(__file__).resolve().parents[1]


def _kill_the_held_worker(cluster, work: Path, done: threading.Event) -> None:
    """Wait for a task of the second FK_JOIN run to be held at the gate, kill the worker that
    runs its executor, then open the gate (also when the kill failed: the test judges)."""
    gate, lost = work / GATE, {}
    try:
        while not done.wait(0.05):
            held = sorted(gate.glob("*.held")) if gate.exists() else []
            if held:
                executor = Path(held[0].read_text())
                worker = cluster.worker_running(executor)
                cluster.kill_worker(worker)
                lost = {"worker": worker, "executor": executor.name, "application": executor.parent.name}
                return
    except Exception as error:  # noqa: BLE001 - reported to the test, which judges it
        lost = {"error": repr(error)}
    finally:
        (work / "lost.tmp").write_text(json.dumps(lost))
        (work / "lost.tmp").rename(work / LOST)


def _events(work: Path) -> list[dict]:
    """The driver's event log, less the lines no question here is about (most of its tens of
    megabytes are tasks that succeeded)."""
    wanted = ("SparkListenerJobStart", "SparkListenerJobEnd", "SparkListenerExecutorRemoved", "ExecutorLostFailure")
    (log,) = (work / "events").iterdir()
    with log.open() as lines:
        return [json.loads(line) for line in lines if any(word in line for word in wanted)]


def _what_the_run_lost(events: list[dict], executor: str) -> dict:
    """From the driver's event log: the jobs of the run while a worker is lost, when ``executor``
    was removed, and which of the run's tasks failed because it was."""
    jobs = {e["Job ID"]: e for e in events if e["Event"] == "SparkListenerJobStart"
            and e.get("Properties", {}).get("spark.jobGroup.id") == RUN_GROUP}
    stages = {stage for job in jobs.values() for stage in job["Stage IDs"]}
    ends = [e for e in events if e["Event"] == "SparkListenerJobEnd" and e["Job ID"] in jobs]
    return {
        "run": (min((job["Submission Time"] for job in jobs.values()), default=None),
                max((end["Completion Time"] for end in ends), default=None)),
        "removed": [e["Timestamp"] for e in events
                    if e["Event"] == "SparkListenerExecutorRemoved" and e["Executor ID"] == executor],
        "lost_tasks": [e["Task Info"]["Task ID"] for e in events if e["Event"] == "SparkListenerTaskEnd"
                       and e["Stage ID"] in stages and e["Task Info"]["Executor ID"] == executor
                       and e["Task End Reason"]["Reason"] == "ExecutorLostFailure"],
    }


@pytest.fixture(scope="module")
def cluster_result(tmp_path_factory, jvm_options):
    work = tmp_path_factory.mktemp("cluster")
    with standalone_cluster(work, java_options=jvm_options, wait=False) as cluster:
        done = threading.Event()
        killer = threading.Thread(target=_kill_the_held_worker, args=(cluster, work, done), daemon=True)
        killer.start()
        # the driver starts while the workers register (the job waits for its two executors)
        job = subprocess.Popen(
            [sys.executable, str(TESTS / "cluster_job.py"), cluster.url, str(work)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_SUBMIT_OPTS=jvm_options),
        )
        try:
            cluster.wait_for_workers()
            _, stderr = job.communicate(timeout=900)
        finally:
            if job.poll() is None:
                job.kill()
                job.communicate()
            done.set()
            killer.join()
        assert job.returncode == 0, stderr[-4000:]
    result = json.loads((work / "result.json").read_text())
    result["lost"] = json.loads((work / LOST).read_text())
    if "executor" in result["lost"]:
        result["lost"].update(_what_the_run_lost(_events(work), result["lost"]["executor"]))
    return result


def test_the_job_ran_on_two_executors(cluster_result):
    assert cluster_result["executors"] == 2


def test_examples_match_their_golden_output(cluster_result):
    golden = TESTS / "golden"
    assert sorted(cluster_result["examples"]) == sorted(EXAMPLES_ON_EXECUTORS)
    for name, text in cluster_result["examples"].items():
        assert text == (golden / f"{name}.out").read_text(), name


def test_self_join_rewrites_match_the_original_and_local_mode(spark, cluster_result):
    from self_join_fixtures import FIXTURE_RELATIONS, register_fixture_relations

    register_fixture_relations(spark, 1)
    try:
        assert len(cluster_result["self_joins"]) >= 10
        for title, (original, rewritten) in cluster_result["self_joins"].items():
            assert rewritten == original, title  # both sorted: the same multiset of rows
        from rows import portable
        from self_join_fixtures import cluster_cases

        for fixture in cluster_cases():
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
    # a task of the second run was held on an executor until its worker was killed: the
    # driver removed that executor while the run's jobs were running, the task held there
    # failed with it, and the run went on with the executor left
    lost = cluster_result["lost"]
    assert lost.get("application") == cluster_result["application"], lost  # the kill's error, if any
    started, finished = lost["run"]
    assert len(lost["removed"]) == 1 and started < lost["removed"][0] < finished, lost
    assert lost["lost_tasks"], lost
    assert cluster_result["executors_after"] == 1
    # Spark re-runs the lost tasks (and the stages whose shuffle output the lost executor
    # held) on the worker left, and the rows are the same
    assert cluster_result.get("fk_second") == first, cluster_result.get("fk_second_error")

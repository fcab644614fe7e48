"""What tests/engine/test_cluster.py runs on the standalone cluster, in a process of its own (a
process holds one Spark driver, and the test process already holds the local one).

    python tests/cluster_job.py MASTER_URL WORK_DIR

Writes WORK_DIR/result.json: the recursion's examples rendered as in their golden files, each
self-join fixture's rows as written and as rewritten, CHANGELOG_FILTER through its Python table
function (executors run it) and through the native rewrite, and incrementally in two
streaming runs, and an FK_JOIN run twice, the second time while the test kills a worker;
and WORK_DIR/events/, the driver's event log, where the test reads what the second run lost.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

from rows import portable  # noqa: E402 - found through the path set above


# The second FK_JOIN run and the test meet here: each task of the run that reads the customers
# leaves a file in GATE naming its executor's folder and waits; the test kills the worker
# that runs that executor and then writes LOST. The run's jobs carry the group RUN_GROUP.
GATE, LOST, RUN_GROUP = "gate", "worker-lost.json", "fk-join-while-a-worker-is-lost"


# The examples whose executors run sqlext's own work: the recursions' (the walk's Arrow function
# over the seeds, the levels' local checkpoints). Every example runs locally against its golden
# output (test_examples_golden.py); the others' executors run Spark's own operators only, and
# their functions' rewrites run on the cluster below all the same (CHANGELOG_FILTER's beside its
# table function and as the batch of its incremental runs, FK_JOIN's in the lost-worker runs
# and as the batch of its incremental runs, the self-joins' in the fixtures); those of input
# shapes (debezium, iceberg) only add a mapping in SQL before the same functions.
EXAMPLES_ON_EXECUTORS = ("org_chart.sql", "recursion.sql")


def held_until_a_worker_is_lost(work: Path):
    """A ``mapInArrow`` function that passes its batches through unchanged, once a worker has
    been lost: a task announces its executor (a Python worker runs in its executor's folder,
    ``<worker folder>/<application>/<executor>``) and waits for the kill. The run cannot end
    before the kill, however fast the machine, and the executor killed is running its task."""
    gate, lost = work / GATE, work / LOST

    def hold(batches):
        import os
        import time
        import uuid

        if not lost.exists():
            gate.mkdir(exist_ok=True)
            announced = gate / uuid.uuid4().hex
            announced.write_text(os.getcwd())
            announced.rename(announced.with_suffix(".held"))  # whole, or not there
            deadline = time.monotonic() + 300  # no kill: the test fails on what the run lost
            while not lost.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        yield from batches

    return hold


def rows(frame) -> list[str]:
    return portable(frame.collect())


def executors(spark) -> int:
    return spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # less the driver


def main(master: str, work: Path) -> None:
    import sqlext
    from sqlext.bench.changes import FK_SQLEXT, make_fk_inputs
    from sqlext.bench.common import fingerprint
    from sqlext.local_spark import embedded_settings, local_builder, quiet_query_context_logs

    (work / "events").mkdir()
    # the executors take the JVM options the driver was given (the tests': SPARK_SUBMIT_OPTS)
    executor_options = " ".join([embedded_settings()["spark.executor.extraJavaOptions"],
                                 os.environ.get("SPARK_SUBMIT_OPTS", "")])
    # a block an executor fetches from the one the kill took (a broadcast's piece, a shuffle's
    # output) is fetched again after this wait, and then Spark finds that executor dead and
    # fetches it elsewhere: Spark's 5 s is for a network's passing faults, and one run in four
    # waited it out here
    spark = local_builder("sqlext-cluster-test", shuffle_partitions=4, master=master) \
        .config("spark.executor.extraJavaOptions", executor_options).config("spark.shuffle.io.retryWait", "1s") \
        .config("spark.executor.memory", "768m").config("spark.task.maxFailures", "4") \
        .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", str(work / "events")) \
        .config("spark.eventLog.compress", "false").config("spark.eventLog.rolling.enabled", "false") \
        .getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    quiet_query_context_logs()
    sqlext.install(spark)
    deadline = time.monotonic() + 90
    while executors(spark) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    result: dict = {"executors": executors(spark), "application": spark.sparkContext.applicationId}

    from test_examples_golden import EXAMPLES, render

    result["examples"] = {e.name: render(spark, e.read_text()) for e in EXAMPLES
                          if e.name in EXAMPLES_ON_EXECUTORS}

    from self_join_fixtures import cluster_cases, register_fixture_relations
    from sqlext.rewrites.pipeline import rewrite_statement
    from sqlext.session import SparkRelations

    register_fixture_relations(spark, 1)
    result["self_joins"] = {}
    for fixture in cluster_cases():
        rewritten = rewrite_statement(fixture.query, SparkRelations(spark)).sql
        result["self_joins"][fixture.title] = [rows(spark.sql(fixture.query)), rows(spark.sql(rewritten))]

    spark.createDataFrame(
        [(1, 5, "insert", 1), (1, -1, "update_postimage", 2), (2, 7, "insert", 3), (1, 9, "update_postimage", 4),
         (2, 0, "delete", 5)], "id int, v int, _change_type string, _commit_version bigint",
    ).createOrReplaceTempView("feed")
    call = "SELECT * FROM CHANGELOG_FILTER(input => TABLE(feed), key => 'id', predicate => 'v > 0', emit => 'changes')"
    result["udtf"] = [rows(spark.sql(call)), rows(sqlext.sql(spark, call))]

    # CHANGELOG_FILTER incrementally: two runs over a folder of change files, the second
    # after more files land; state in the checkpoint, the steps of large runs on the executors
    from sqlext.streaming import run_available_now

    feed_dir, out_dir = work / "stream-changes", work / "stream-out"
    schema = "id int, v int, _change_type string, _commit_version bigint"
    streamed = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(changes)), key => 'id', "
                "predicate => 'v > 0', emit => 'changes')")
    options = dict(checkpoint=str(work / "stream-checkpoint"), output=str(out_dir), sources={"changes": str(feed_dir)})
    spark.createDataFrame([(1, 5, "insert", 1), (1, -1, "update_postimage", 2), (2, 7, "insert", 3)], schema) \
        .write.mode("append").parquet(str(feed_dir))
    run_available_now(spark, streamed, **options)
    spark.createDataFrame([(1, 9, "update_postimage", 4), (2, 0, "delete", 5)], schema) \
        .write.mode("append").parquet(str(feed_dir))
    run_available_now(spark, streamed, **options)
    result["stream"] = [rows(spark.read.parquet(str(out_dir))), rows(sqlext.sql(spark, call))]

    # FK_JOIN and a recursion incrementally: two runs each, the second after more files land
    from sqlext.streaming import batch_form

    def two_runs(name, sql, landings):
        folders = {source: work / f"{name}-{source}" for source in landings[0]}
        options = dict(checkpoint=str(work / f"{name}-checkpoint"), output=str(work / f"{name}-out"),
                       sources={source: str(folder) for source, folder in folders.items()})
        for landing in landings:
            for source, (ddl, data) in landing.items():
                spark.createDataFrame(data, ddl).write.mode("append").parquet(str(folders[source]))
            run_available_now(spark, sql, **options)
        for source, folder in folders.items():
            spark.read.parquet(str(folder)).createOrReplaceTempView(source)
        return [rows(spark.read.parquet(options["output"])), rows(sqlext.sql(spark, batch_form(sql)))]

    orders, customers = "order_id int, customer_id int, amount int, _change_type string, _commit_version bigint", \
        "id int, name string, _change_type string, _commit_version bigint"
    for key, emit in (("stream_fk", "changes"), ("stream_fk_final", "final")):  # final: the output is the table
        result[key] = two_runs(key, (
            "SELECT * FROM FK_JOIN(left => TABLE(STREAM(orders)), right => TABLE(STREAM(customers)), "
            "left_key => 'order_id', foreign_key => 'customer_id', right_key => 'id', emit => '" + emit + "')"), [
            {"customers": (customers, [(1, "a", "insert", 1), (2, "b", "insert", 2)]),
             "orders": (orders, [(10, 1, 5, "insert", 3), (11, 2, 6, "insert", 4)])},
            {"customers": (customers, [(1, "a2", "update_postimage", 5)]),
             "orders": (orders, [(11, 1, 6, "update_postimage", 6), (12, 2, 1, "insert", 7)])}])
    # a recursion over a change feed of edges: 3 moves from parent 2 to parent 5
    changed = "src int, dst int, _change_type string, _commit_version bigint"
    two_runs("recursion_changes", (
        "WITH RECURSIVE reach(src, dst) AS (SELECT src, dst FROM STREAM(changed) UNION "
        "SELECT r.src, e.dst FROM reach AS r JOIN STREAM(changed) AS e ON r.dst = e.src) SELECT * FROM reach"), [
        {"changed": (changed, [(1, 2, "insert", 1), (2, 3, "insert", 1), (3, 4, "insert", 1)])},
        {"changed": (changed, [(2, 3, "update_preimage", 2), (5, 3, "update_postimage", 2)])}])
    applied = Counter()
    for row in spark.read.parquet(str(work / "recursion_changes-out")).collect():
        applied[(row.src, row.dst)] += 1 if row._change_type == "insert" else -1
    result["stream_recursion_changes"] = sorted(str(pair) for pair, n in applied.items() for _ in range(n))
    edges = "src int, dst int"
    result["stream_recursion"] = two_runs("recursion", (
        "WITH RECURSIVE reach(src, dst) AS (SELECT src, dst FROM STREAM(edges) UNION "
        "SELECT r.src, e.dst FROM reach AS r JOIN STREAM(edges) AS e ON r.dst = e.src) SELECT * FROM reach"), [
        {"edges": (edges, [(1, 2), (2, 3), (5, 6)])}, {"edges": (edges, [(3, 4), (4, 1), (6, 7)])}])

    directory = tempfile.mkdtemp(prefix="sqlext-cluster-", dir=work)
    # small inputs: the kill waits for a task of the run, not for a time, so the run need not
    # last (its plan is the same: windows over shuffles, the customers' side broadcast)
    make_fk_inputs(spark, 40_000, 4_000, directory)
    query = FK_SQLEXT.format(emit="changes")
    result["fk_first"] = list(fingerprint(spark, sqlext.sql(spark, query)))
    # the second run reads the customers through the gate, so a worker is lost while it runs
    customers = spark.table("bench_customers")
    customers.mapInArrow(held_until_a_worker_is_lost(work), customers.schema) \
        .createOrReplaceTempView("bench_customers")
    spark.sparkContext.setJobGroup(RUN_GROUP, "FK_JOIN while a worker is lost")
    try:
        result["fk_second"] = list(fingerprint(spark, sqlext.sql(spark, query)))
    except Exception as error:  # noqa: BLE001 - reported to the test, which judges it
        result["fk_second_error"] = str(error).splitlines()[0][:500]
    result["executors_after"] = executors(spark)
    (work / "result.json").write_text(json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))

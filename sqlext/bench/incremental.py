"""``sqlext bench incremental``: an incremental run of CHANGELOG_FILTER over a new increment of
changes, against recomputing the batch result over the whole history, in one session.

The history is the filter benchmark's feed (``rows`` changes over ``keys`` accounts, default
rows/8). The first incremental run reads all of it (reported on its own: the one-time cost of
building the state). Then, ``runs`` times: an increment of ``percent`` % of the history lands
(updates of random accounts, with versions above everything before), one incremental run
processes it (``availableNow``, from the text to the committed output), and the batch query
recomputes the whole output from the history plus the increments (written to Spark's no-op
sink). Medians and their ratio are reported.

    sqlext bench incremental --rows 10000000 --runs 3
    sqlext bench incremental --rows 100000000 --keys 1250000 --runs 3   (10x the history, same keys)
    sqlext bench incremental --function fk --left 5000000 --right 500000 --runs 3
    sqlext bench incremental --function recursion --nodes 1000000 --runs 3

The recursion's history is the recursion benchmark's random forest (``nodes`` nodes, each
edge pointing from a node to its parent); an increment is ``percent`` % new leaves, each
under a random earlier node; the statement is every (node, ancestor, depth) row, with
``UNION`` (the form that runs incrementally; a forest's rows are distinct anyway). With
``moves``, the edges are a change feed and an increment moves nodes to new parents.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from sqlext.bench.changes import make_changes, make_fk_inputs
from sqlext.bench.common import WorkerPeak, settle

STREAMED = """SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(bench_feed)), key => 'id',
  predicate => 'balance >= 0', emit => 'changes')"""
BATCH = """SELECT * FROM CHANGELOG_FILTER(input => TABLE(bench_feed_all), key => 'id',
  predicate => 'balance >= 0', emit => 'changes')"""


FK_STREAMED = """SELECT * FROM FK_JOIN(left => TABLE(STREAM(bench_orders)), right => TABLE(STREAM(bench_customers)),
  left_key => 'order_id', foreign_key => 'customer_id', right_key => 'id', join_type => 'inner', emit => 'changes')"""
FK_BATCH = """SELECT * FROM FK_JOIN(left => TABLE(bench_orders_all), right => TABLE(bench_customers_all),
  left_key => 'order_id', foreign_key => 'customer_id', right_key => 'id', join_type => 'inner', emit => 'changes')"""


REC_STREAMED = """WITH RECURSIVE anc(node, ancestor, depth) AS (
  SELECT src, dst, 1 FROM STREAM(bench_edges)
  UNION
  SELECT a.node, f.dst, a.depth + 1 FROM anc AS a JOIN STREAM(bench_edges) AS f ON a.ancestor = f.src)
SELECT * FROM anc"""
REC_BATCH = REC_STREAMED.replace("STREAM(bench_edges)", "bench_edges_all")


SELF_JOIN_WIDTH = 60  # seconds either side of an event: the band of the self-join benchmark
SELF_STREAMED = """SELECT a.id AS a_id, b.id AS b_id, a.k FROM STREAM(bench_events) AS a JOIN STREAM(bench_events) AS b
  ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL 60 SECONDS AND a.ts + INTERVAL 60 SECONDS"""
SELF_BATCH = SELF_STREAMED.replace("STREAM(bench_events)", "bench_events_all")
# an aggregate over the same pairs, per key: its change feed is the runs' output
SELF_AGGREGATE_STREAMED = """SELECT a.k, COUNT(*) AS pairs, SUM(b.v) AS total, MAX(b.id) AS newest
FROM STREAM(bench_events) AS a JOIN STREAM(bench_events) AS b
  ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL 60 SECONDS AND a.ts + INTERVAL 60 SECONDS GROUP BY a.k"""
SELF_AGGREGATE_BATCH = SELF_AGGREGATE_STREAMED.replace("STREAM(bench_events)", "bench_events_all")


@dataclass(frozen=True)
class Workload:
    """One function's history, its increments and its two formulations."""

    name: str
    streamed: str
    batch: str
    feeds: dict[str, str]  # the stream's name -> the batch view's name
    make_history: Callable[[Any, str], None]  # (spark, directory)
    add_increment: Callable[[Any, str, int], None]  # (spark, directory, run)
    size: int  # history rows
    increment: int  # rows per increment
    about: str
    # the batch view of a stream's files (default: the files as they are)
    batch_view: Callable[[Any], Any] = lambda frame: frame
    # the runs' output is a change feed: its inserts less its deletes are the batch rows
    change_feed: bool = False
    # Spark's own streaming formulation, where it has one: (spark, sources, checkpoint, output) -> query
    native_stream: Callable[[Any, dict, str, str], Any] | None = None


def filter_workload(rows: int, percent: float, keys: int) -> Workload:
    size = max(1, int(rows * percent / 100))

    def history(spark, directory):
        make_changes(spark, rows, f"{directory}/bench_feed", keys=keys)

    def increment(spark, directory, run):
        first = rows + run * size
        spark.range(size).selectExpr(
            f"CAST(pmod(hash(id, {run}, 13), {keys}) AS BIGINT) AS id",
            "concat('owner-', CAST(pmod(hash(id, 17), 1000) AS STRING)) AS owner",
            f"CAST(pmod(hash(id, {run}, 19), 2000) - 500 AS BIGINT) AS balance",
            "'update_postimage' AS _change_type",
            f"id + {first} AS _commit_version",
        ).write.mode("append").parquet(f"{directory}/bench_feed")

    return Workload("CHANGELOG_FILTER emit => 'changes'", STREAMED, BATCH, {"bench_feed": "bench_feed_all"},
                    history, increment, rows, size, f"{rows:,} changes over {keys:,} keys")


def fk_workload(left: int, right: int, percent: float, keys: int | None = None, gap: int = 0) -> Workload:
    """The FK_JOIN benchmark's orders and customers; an increment updates random orders (one
    in ten moves to another customer) and random customers, in the proportions of the history.
    ``keys`` fixes the orders (and a tenth as many customers), so that the history can grow
    alone."""
    left_size, right_size = max(1, int(left * percent / 100)), max(1, int(right * percent / 100))
    orders = keys or max(1, left // 5)
    customers = max(1, keys // 10) if keys else max(1, right // 5)

    def history(spark, directory):
        make_fk_inputs(spark, left, right, directory, orders, customers)
        for name in ("orders", "customers"):
            shutil.move(f"{directory}/{name}", f"{directory}/bench_{name}")

    def increment(spark, directory, run):
        first = max(left, right * max(1, left // max(1, right))) + 1 + run * (left_size + right_size + gap)
        spark.range(right_size).selectExpr(
            f"CAST(pmod(hash(id, {run}, 29), {customers}) + 1 AS BIGINT) AS id",
            f"concat('customer-', CAST(pmod(hash(id, {run}, 3), 100000) AS STRING)) AS name",
            f"CAST(pmod(hash(id, {run}, 5), 4) AS INT) AS tier",
            "'update_postimage' AS _change_type",
            f"id + {first} AS _commit_version",
        ).write.mode("append").parquet(f"{directory}/bench_customers")
        spark.range(left_size).selectExpr(
            f"CAST(pmod(hash(id, {run}, 31), {orders}) AS BIGINT) AS order_id",
            f"CAST(floor(exp((pmod(hash(id, {run}, 17), 1000000) / 1000000.0) * ln({customers}))) AS BIGINT)"
            " AS customer_id",
            f"CAST(pmod(hash(id, {run}, 19), 100000) AS BIGINT) AS amount",
            "'update_postimage' AS _change_type",
            f"id + {first + right_size} AS _commit_version",
        ).write.mode("append").parquet(f"{directory}/bench_orders")

    return Workload("FK_JOIN emit => 'changes'", FK_STREAMED, FK_BATCH,
                    {"bench_orders": "bench_orders_all", "bench_customers": "bench_customers_all"},
                    history, increment, left + right, left_size + right_size,
                    f"{left:,} left and {right:,} right changes over {orders:,} orders and {customers:,} customers")


PIPELINE_STREAMED = """SELECT rname, COUNT(*) AS orders, SUM(amount) AS total FROM FK_JOIN(
  left => TABLE(FK_JOIN(
    left => TABLE(CHANGELOG_FILTER(input => TABLE(STREAM(bench_orders)), key => 'order_id',
                                   predicate => 'amount >= 10000')),
    right => TABLE(STREAM(bench_customers)), left_key => 'order_id', foreign_key => 'customer_id',
    right_key => 'id')),
  right => TABLE(STREAM(bench_regions)), left_key => 'order_id', foreign_key => 'region', right_key => 'rid',
  emit => 'final')
GROUP BY rname"""
PIPELINE_BATCH = PIPELINE_STREAMED.replace("STREAM(bench_orders)", "bench_orders_all") \
    .replace("STREAM(bench_customers)", "bench_customers_all").replace("STREAM(bench_regions)", "bench_regions_all")


def pipeline_workload(left: int, right: int, regions: int, percent: float, keys: int | None = None) -> Workload:
    """The FK_JOIN benchmark's orders and customers, each customer in one of ``regions / 5``
    regions (a region column), and the regions' own changes: orders filtered by amount, joined
    to their customers, joined to the customers' regions, and summed by region name. An
    increment changes ``percent`` % of each input, as FK_JOIN's does, and renames regions."""
    region_keys = max(1, regions // 5)
    region_size = max(1, int(regions * percent / 100))
    fk = fk_workload(left, right, percent, keys, gap=region_size)  # each run's region changes come last
    region_of = f"CAST(pmod(hash(id, 41), {region_keys}) + 1 AS BIGINT) AS region"

    def history(spark, directory):
        fk.make_history(spark, directory)
        customers = spark.read.parquet(f"{directory}/bench_customers").selectExpr("*", region_of)
        customers.write.parquet(f"{directory}/bench_customers_with_regions")
        shutil.rmtree(f"{directory}/bench_customers")
        shutil.move(f"{directory}/bench_customers_with_regions", f"{directory}/bench_customers")
        spark.range(regions).selectExpr(
            f"id % {region_keys} + 1 AS rid", "concat('region-', CAST(pmod(hash(id, 43), 1000) AS STRING)) AS rname",
            f"CASE WHEN id < {region_keys} THEN 'insert' ELSE 'update_postimage' END AS _change_type",
            f"id * {max(1, left // max(1, regions))} + 1 AS _commit_version",
        ).write.parquet(f"{directory}/bench_regions")

    def increment(spark, directory, run):
        staging = f"{directory}/staging-{run}"
        fk.add_increment(spark, staging, run)  # orders and customers of this run, then moved in
        spark.read.parquet(f"{staging}/bench_orders").write.mode("append").parquet(f"{directory}/bench_orders")
        spark.read.parquet(f"{staging}/bench_customers").selectExpr("*", region_of) \
            .write.mode("append").parquet(f"{directory}/bench_customers")
        last = spark.read.parquet(f"{staging}/bench_orders").agg({"_commit_version": "max"}).first()[0]
        spark.range(region_size).selectExpr(
            f"CAST(pmod(hash(id, {run}, 47), {region_keys}) + 1 AS BIGINT) AS rid",
            f"concat('region-', CAST(pmod(hash(id, {run}, 53), 1000) AS STRING)) AS rname",
            "'update_postimage' AS _change_type", f"id + {last + 1} AS _commit_version",
        ).write.mode("append").parquet(f"{directory}/bench_regions")
        shutil.rmtree(staging, ignore_errors=True)

    return Workload("a pipeline: CHANGELOG_FILTER -> FK_JOIN -> FK_JOIN -> GROUP BY", PIPELINE_STREAMED,
                    PIPELINE_BATCH, {"bench_orders": "bench_orders_all", "bench_customers": "bench_customers_all",
                                     "bench_regions": "bench_regions_all"},
                    history, increment, left + right + regions, fk.increment + region_size,
                    f"{left:,} order, {right:,} customer and {regions:,} region changes")


def recursion_workload(nodes: int, percent: float) -> Workload:
    """The recursion benchmark's forest as edges (node -> parent); an increment adds new leaves
    under random earlier nodes."""
    size = max(1, int(nodes * percent / 100))

    def history(spark, directory):
        from sqlext.bench.recursion import make_forest

        make_forest(spark, nodes, directory)
        spark.read.parquet(f"{directory}/forest").where("parent IS NOT NULL") \
            .selectExpr("id AS src", "parent AS dst").write.parquet(f"{directory}/bench_edges")
        shutil.rmtree(f"{directory}/forest", ignore_errors=True)

    def increment(spark, directory, run):
        first = nodes + run * size
        spark.range(size).selectExpr(
            f"id + {first} AS src",
            f"CAST(floor(pmod(hash(id, {run}, 7), 1000000007) / 1000000007.0 * {first}) AS BIGINT) AS dst",
        ).write.mode("append").parquet(f"{directory}/bench_edges")

    return Workload("WITH RECURSIVE (ancestors, UNION)", REC_STREAMED, REC_BATCH, {"bench_edges": "bench_edges_all"},
                    history, increment, nodes, size, f"a forest of {nodes:,} nodes")


def moves_workload(nodes: int, percent: float) -> Workload:
    """The same forest as a change feed of edges (inserted at version 1); an increment moves
    ``percent`` % of the nodes (a different slice each run) to a random node of a smaller id
    (so the forest stays a forest): an ``update_preimage`` of the old edge and an
    ``update_postimage`` of the new one. The batch side first takes the edges present (inserts
    less deletes), then runs the recursion."""
    every = max(1, round(100 / percent))
    size = max(1, nodes // every)

    def history(spark, directory):
        from sqlext.bench.recursion import make_forest

        make_forest(spark, nodes, directory)
        spark.read.parquet(f"{directory}/forest").where("parent IS NOT NULL") \
            .selectExpr("id AS src", "parent AS dst", "'insert' AS _change_type", "CAST(1 AS BIGINT) AS _commit_version") \
            .write.parquet(f"{directory}/bench_edges")

    def increment(spark, directory, run):
        moved = spark.read.parquet(f"{directory}/forest").where(f"parent IS NOT NULL AND pmod(id, {every}) = {run}")
        version = run + 2
        moved.selectExpr("id AS src", "parent AS dst", "'update_preimage' AS _change_type",
                         f"CAST({version} AS BIGINT) AS _commit_version").unionByName(moved.selectExpr(
                             "id AS src",
                             f"CAST(floor(pmod(hash(id, {run}, 11), 1000000007) / 1000000007.0 * id) AS BIGINT) AS dst",
                             "'update_postimage' AS _change_type", f"CAST({version} AS BIGINT) AS _commit_version")) \
            .write.mode("append").parquet(f"{directory}/bench_edges")

    def present(frame):
        from pyspark.sql import functions as F

        sign = F.when(F.col("_change_type").isin("insert", "update_postimage"), 1).otherwise(-1)
        return frame.groupBy("src", "dst").agg(F.sum(sign).alias("n")).where("n > 0").select("src", "dst")

    return Workload("WITH RECURSIVE (ancestors, UNION) over edges that move", REC_STREAMED, REC_BATCH,
                    {"bench_edges": "bench_edges_all"}, history, increment, nodes, 2 * size,
                    f"a forest of {nodes:,} nodes as a change feed, {size:,} nodes moved per increment",
                    batch_view=present, change_feed=True)


def self_join_workload(events: int, percent: float, aggregate: bool = False) -> Workload:
    """Events of 1,000 keys, one a second (so a key meets about 0.12 others in the band of
    +-60 s), then increments of ``percent`` % more, later in time. Spark's own formulation is a
    stream-stream join of the stream with itself, with a watermark of the band's width on both
    sides (the lateness sqlext allows), so that its state is bounded too. ``aggregate``: a
    GROUP BY over the pairs instead, its change feed the output (Spark has no streaming form of
    it to run beside: an aggregate after a stream-stream join needs an event-time window)."""
    size = max(1, int(events * percent / 100))

    def rows(spark, first: int, count: int):
        return spark.range(first, first + count).selectExpr(
            "id", "CAST(pmod(hash(id, 7), 1000) AS INT) AS k",
            "CAST(TIMESTAMP'2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS TIMESTAMP) AS ts",
            "CAST(pmod(hash(id, 11), 100) AS INT) AS v")

    def history(spark, directory):
        rows(spark, 0, events).write.parquet(f"{directory}/bench_events")

    def increment(spark, directory, run):
        rows(spark, events + run * size, size).write.mode("append").parquet(f"{directory}/bench_events")

    def native(spark, sources, checkpoint, output):
        from pyspark.sql import functions as F

        source = spark.read.parquet(sources["bench_events"]).schema
        side = spark.readStream.schema(source).parquet(sources["bench_events"]) \
            .withWatermark("ts", f"{SELF_JOIN_WIDTH} seconds")
        a, b = side.alias("a"), side.alias("b")
        band = F.expr(f"a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL {SELF_JOIN_WIDTH} SECONDS "
                      f"AND a.ts + INTERVAL {SELF_JOIN_WIDTH} SECONDS")
        joined = a.join(b, band).select(F.col("a.id").alias("a_id"), F.col("b.id").alias("b_id"), F.col("a.k"))
        return joined.writeStream.format("parquet").option("path", output).option("checkpointLocation", checkpoint) \
            .outputMode("append").trigger(availableNow=True).start()

    about = f"{events:,} events of 1,000 keys, one a second"
    if aggregate:
        return Workload("an aggregate over a self-join of a stream", SELF_AGGREGATE_STREAMED, SELF_AGGREGATE_BATCH,
                        {"bench_events": "bench_events_all"}, history, increment, events, size, about,
                        change_feed=True)
    return Workload("self-join of a stream (KIP-862)", SELF_STREAMED, SELF_BATCH, {"bench_events": "bench_events_all"},
                    history, increment, events, size, about, native_stream=native)


def bench_incremental(spark, rows: int, runs: int, percent: float = 1.0, keys: int | None = None,
                      function: str = "filter",
                      left: int = 5_000_000, right: int = 500_000, nodes: int = 1_000_000, place: str = "auto",
                      uri: bool = False, regions: int = 5_000, buckets: int | None = None,
                      rescale: int | None = None, catch_up: int = 0, max_batch_rows: int | None = None) -> dict:
    """The incremental runs over a history and its increments, against the batch query; returns
    the first run's seconds, the incremental and batch seconds per increment, and the rows.
    ``function`` is ``filter`` (``rows`` changes over ``keys`` keys) or ``fk`` (``left`` and
    ``right`` changes). ``buckets``: the state's bucket count when the first run makes it;
    ``rescale``: the count asked for from the first timed run on (which rescales the state);
    ``catch_up``: after the timed runs, that many increments land and one run takes them all
    (in parts where they hold more rows than the batch bound, ``max_batch_rows`` where given)."""
    if function == "fk":
        workload = fk_workload(left, right, percent, keys)
    elif function in ("recursion", "moves"):
        workload = (recursion_workload if function == "recursion" else moves_workload)(nodes, percent)
    elif function == "pipeline":
        workload = pipeline_workload(left, right, regions, percent, keys)
    elif function in ("selfjoin", "selfjoin-aggregate"):
        workload = self_join_workload(rows, percent, aggregate=function == "selfjoin-aggregate")
    else:
        workload = filter_workload(rows, percent, keys or max(1, rows // 8))
    from sqlext.streaming.batch_parts import MAX_ROWS_SETTING
    from sqlext.streaming.engine import BUCKETS_SETTING
    from sqlext.streaming.run import PATH_SETTING

    spark.conf.set(PATH_SETTING, place)
    if buckets is not None:
        spark.conf.set(BUCKETS_SETTING, str(buckets))
    if max_batch_rows is not None:
        spark.conf.set(MAX_ROWS_SETTING, str(max_batch_rows))
    try:
        return _bench_workload(spark, workload, runs, percent, uri, rescale, catch_up)
    finally:
        for setting in (PATH_SETTING, BUCKETS_SETTING, MAX_ROWS_SETTING):
            spark.conf.unset(setting)


def _copy_sql(name: str) -> str:
    """``SELECT * FROM STREAM(name)``, built as a tree."""
    from sqlglot import exp

    from sqlext.language.dialect import to_sql

    stream = exp.Table(this=exp.Anonymous(this="STREAM", expressions=[exp.column(name)]))
    return to_sql(exp.select("*").from_(stream))


def _bench_workload(spark, workload: Workload, runs: int, percent: float, uri: bool = False,
                    rescale: int | None = None, catch_up: int = 0) -> dict:
    import sqlext
    from sqlext.streaming import jobs_of, run_available_now
    from sqlext.streaming.engine import BUCKETS_SETTING

    directory = tempfile.mkdtemp(prefix="sqlext-bench-incremental-")
    named = "file://" + directory if uri else directory  # how the runs name the folders
    options = dict(checkpoint=f"{named}/checkpoint", output=f"{named}/out",
                   sources={name: f"{named}/{name}" for name in workload.feeds})
    try:
        workload.make_history(spark, directory)
        copies = {name: dict(checkpoint=f"{directory}/copy-checkpoint-{name}", output=f"{directory}/copy-{name}",
                             sources={name: options["sources"][name]}) for name in workload.feeds}
        for name, copy in copies.items():  # the floor's queries read the history first, untimed
            run_available_now(spark, _copy_sql(name), **copy)
        started = time.perf_counter()
        with WorkerPeak() as initial_peak:
            query = run_available_now(spark, workload.streamed, **options)
        initial = time.perf_counter() - started
        initial_steps, initial_parts = _steps(query), _parts(query)
        first_batch = _batch_over_history(spark, workload, directory)
        native_options = dict(sources=options["sources"], checkpoint=f"{directory}/native-checkpoint",
                              output=f"{directory}/native-out")
        native, native_state = [], []
        if workload.native_stream is not None:
            workload.native_stream(spark, **native_options).awaitTermination()
        incremental, batch, floor, jobs, steps, tasks, peaks, taken = [], [], [], [], [], [], [], []
        laid_out = _buckets_of(f"{directory}/checkpoint")
        if rescale is not None:
            spark.conf.set(BUCKETS_SETTING, str(rescale))
        for run in range(runs):
            workload.add_increment(spark, directory, run)
            settle(spark)
            started = time.perf_counter()
            with WorkerPeak() as peak:
                query = run_available_now(spark, workload.streamed, **options)
            incremental.append(time.perf_counter() - started)
            peaks.append(peak)
            jobs.append(len(jobs_of(spark, query)))
            tasks.append(_widest_stage(spark, query))
            steps.append(_steps(query))
            taken.append(_taken(query))
            if workload.native_stream is not None:
                settle(spark)
                started = time.perf_counter()
                query = workload.native_stream(spark, **native_options)
                query.awaitTermination()
                native.append(time.perf_counter() - started)
                native_state.append(_native_state_rows(query))
            settle(spark)
            started = time.perf_counter()
            for name, copy in copies.items():
                run_available_now(spark, _copy_sql(name), **copy)
            floor.append(time.perf_counter() - started)
            for name, view in workload.feeds.items():
                workload.batch_view(spark.read.parquet(f"{directory}/{name}")).createOrReplaceTempView(view)
            settle(spark)
            started = time.perf_counter()
            sqlext.sql(spark, workload.batch).write.format("noop").mode("overwrite").save()
            batch.append(time.perf_counter() - started)
        caught_up = None
        if catch_up:
            for run in range(runs, runs + catch_up):
                workload.add_increment(spark, directory, run)
            settle(spark)
            started = time.perf_counter()
            with WorkerPeak() as peak:
                query = run_available_now(spark, workload.streamed, **options)
            caught_up = (time.perf_counter() - started, _parts(query), peak)
            for name, view in workload.feeds.items():
                workload.batch_view(spark.read.parquet(f"{directory}/{name}")).createOrReplaceTempView(view)
            settle(spark)
            started = time.perf_counter()
            sqlext.sql(spark, workload.batch).write.format("noop").mode("overwrite").save()
            caught_up += (time.perf_counter() - started,)
        written = spark.read.parquet(options["output"])
        out_rows = written.count()
        if workload.change_feed:  # the rows the changes leave: each delete and old row takes one away
            out_rows -= 2 * written.where("_change_type IN ('delete', 'update_preimage')").count()
        batch_rows = sqlext.sql(spark, workload.batch).count()
        if out_rows != batch_rows:
            raise SystemExit(f"bench incremental: the runs wrote {out_rows} rows, the batch query "
                             f"{batch_rows}")
        ratio = statistics.median(batch) / statistics.median(incremental)
        print(f"{workload.name}: history {workload.about}, increments of "
              f"{workload.increment:,} changes ({percent:g}%), {runs} runs", flush=True)
        print(f"  first incremental run (the whole history, builds the state): {initial:.2f} s, in "
              f"{initial_parts} part(s); peak memory of a Python worker {initial_peak.worker:,.0f} MB, of the "
              f"driver {initial_peak.driver:,.0f} MB")
        if initial_steps:
            print("    its steps, s: " + ", ".join(f"{n} {t:.2f}" for n, t in initial_steps.items()))
        print(f"  the batch statement over the same history: {first_batch['noop']:.2f} s computed, "
              f"{first_batch['parquet']:.2f} s computed and written as Parquet (as the run writes it); "
              f"first run / batch written {initial / first_batch['parquet']:.2f}x")
        print(f"  incremental run per increment: median {statistics.median(incremental):.2f} s   runs: "
              + ", ".join(f"{s:.2f}" for s in incremental))
        print(f"  batch recompute (history + increments): median {statistics.median(batch):.2f} s   runs: "
              + ", ".join(f"{s:.2f}" for s in batch))
        print(f"  ratio batch/incremental: {ratio:.2f}x (same output: {out_rows:,} rows)")
        print("  peak memory of a Python worker per incremental run, MB: "
              + ", ".join(f"{p.worker:,.0f}" for p in peaks) + "; of the driver: "
              + ", ".join(f"{p.driver:,.0f}" for p in peaks))
        if caught_up is not None:
            seconds, parts, peak, batch_seconds = caught_up
            print(f"  catch-up of {catch_up} increments ({catch_up * workload.increment:,} changes) in one run: "
                  f"{seconds:.2f} s in {parts} part(s) (bound {_bound(spark)}); peak memory of a Python worker "
                  f"{peak.worker:,.0f} MB, of the driver {peak.driver:,.0f} MB; the batch statement over everything "
                  f"{batch_seconds:.2f} s (batch/catch-up {batch_seconds / seconds:.2f}x)")
        print("  rows the tasks took in per change applied, per incremental run: "
              + ", ".join(f"{rows:,}/{changes:,} = {rows / changes:.2f}" if changes else "no changes"
                          for rows, changes in taken))
        print(f"  Spark jobs per incremental run: {', '.join(str(j) for j in jobs)}; computed on: "
              f"{spark.conf.get('spark.sqlext.streaming.path', 'auto')} ({'executors' if steps and 'on the executors' in steps[-1] else 'driver'} in the last run)")
        print(f"  the state's buckets: {laid_out} after the first run, {_buckets_of(f'{directory}/checkpoint')} "
              f"after the last; most tasks of a stage per incremental run: {', '.join(str(t) for t in tasks)} "
              f"(the session offers {spark.sparkContext.defaultParallelism} cores)")
        if rescale is not None and steps and "rescale the state" in steps[0]:
            print(f"  rescale {laid_out} -> {rescale} buckets, in the first timed run: "
                  f"{steps[0]['rescale the state']:.2f} s of its {incremental[0]:.2f} s")
        if native:
            ours = _state_rows(f"{directory}/checkpoint")
            print(f"  Spark's own stream-stream join per increment: median {statistics.median(native):.2f} s   runs: "
                  + ", ".join(f"{s:.2f}" for s in native)
                  + f"; sqlext/native time {statistics.median(incremental) / statistics.median(native):.2f}x")
            print(f"  state rows after the last run: sqlext {ours:,}, Spark's own join {native_state[-1]:,} "
                  f"({ours / max(1, native_state[-1]):.2f}x)")
            native_rows = spark.read.parquet(native_options["output"]).count()
            if native_rows != out_rows:
                raise SystemExit(f"bench incremental: Spark's own join wrote {native_rows} rows, sqlext {out_rows}")
        if steps and steps[-1]:
            names = list(steps[-1])
            print("  steps of an incremental run (median s): " + ", ".join(
                f"{name} {statistics.median(s.get(name, 0.0) for s in steps):.2f}" for name in names))
        print(f"  floor: a streaming run per input that only copies the increment to Parquet (no state): median "
              f"{statistics.median(floor):.2f} s; batch/floor {statistics.median(batch) / statistics.median(floor):.2f}x",
              flush=True)
        return {"initial": initial, "first_batch": first_batch, "incremental": incremental, "batch": batch,
                "floor": floor, "rows": out_rows,
                "jobs": jobs, "steps": steps, "taken": taken, "native": native, "native_state": native_state}
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _widest_stage(spark, query) -> int:
    """The most tasks one stage of a run had (how many tasks a run used at once)."""
    tracker = spark.sparkContext.statusTracker()
    widest = 0
    for job in tracker.getJobIdsForGroup(str(query.runId)):
        info = tracker.getJobInfo(job)
        for stage in (info.stageIds if info is not None else []):
            stage_info = tracker.getStageInfo(stage)
            widest = max(widest, stage_info.numTasks if stage_info is not None else 0)
    return widest


def _buckets_of(checkpoint: str) -> list[int]:
    """The bucket counts of the checkpoint's states (one per state, sorted)."""
    from sqlext.storage import local
    from sqlext.streaming.checkpoint import STATE_FOLDER
    from sqlext.streaming.state import SCHEMA_FILE, KeyedState

    counts = []
    for schema in Path(checkpoint, STATE_FOLDER).rglob(SCHEMA_FILE):
        counts.append(KeyedState(local(schema.parent), []).buckets)
    return sorted(counts)


def _parts(query) -> int:
    """The parts a run's last micro-batch was applied in."""
    last = query.last_batch
    return 1 if last is None else last.parts


def _bound(spark) -> str:
    from sqlext.streaming.batch_parts import MAX_ROWS_SETTING

    return spark.conf.get(MAX_ROWS_SETTING, "") or "the default, a row per 3 KB of the task memory a bucket"


def _taken(query) -> tuple[int, int]:
    """The rows a run's last micro-batch's tasks took in, and the changes it applied (see
    :attr:`~sqlext.streaming.run.BatchReport.taken_per_change`)."""
    last = query.last_batch
    return (0, 0) if last is None else (last.taken, last.changes)


def _steps(query) -> dict[str, float]:
    """The seconds of each step of a run's last micro-batch (none where it ran none)."""
    last = query.last_batch
    return {} if last is None else dict(last.steps)


def _batch_over_history(spark, workload: Workload, directory: str) -> dict:
    """The batch statement over the history alone (the rows a first run reads): its seconds
    computed (a sink that drops the rows) and computed and written as Parquet."""
    import sqlext

    for name, view in workload.feeds.items():
        workload.batch_view(spark.read.parquet(f"{directory}/{name}")).createOrReplaceTempView(view)
    seconds = {}
    for sink in ("noop", "parquet"):
        settle(spark)
        started = time.perf_counter()
        writer = sqlext.sql(spark, workload.batch).write.mode("overwrite")
        if sink == "noop":
            writer.format("noop").save()
        else:
            writer.parquet(f"{directory}/batch-written")
        seconds[sink] = time.perf_counter() - started
    shutil.rmtree(f"{directory}/batch-written", ignore_errors=True)
    return seconds


def _native_state_rows(query) -> int:
    """The rows Spark's stateful operators of a finished query hold."""
    progress = query.lastProgress or {}
    return sum(int(op.get("numRowsTotal", 0)) for op in progress.get("stateOperators", []))


def _state_rows(checkpoint: str) -> int:
    """The rows of sqlext's keyed states in a checkpoint, as the next run would read them."""
    import sys

    from sqlext.storage import local, walk_files
    from sqlext.streaming.checkpoint import STATE_FOLDER
    from sqlext.streaming.state import SCHEMA_FILE, KeyedState

    return sum(KeyedState(schema.parent, []).before(sys.maxsize).stored_rows()
               for schema in walk_files(local(checkpoint) / STATE_FOLDER) if schema.name == SCHEMA_FILE)

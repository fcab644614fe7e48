"""Benchmarks: each runs sqlext and the native Spark formulation of the same work in one
session, checks that both give the same rows, and reports median times and their ratio.

    sqlext bench filter --rows 10000000 --runs 3
    sqlext bench fk --left 5000000 --right 500000 --runs 3
    sqlext bench selfjoin --rows 1000000 --runs 3      (in sqlext/bench_selfjoin.py)
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field

FILTER_SQLEXT = """
SELECT * FROM CHANGELOG_FILTER(
  input => TABLE(bench_changes), key => 'id', predicate => 'balance >= 0', emit => 'changes')
"""

# What a Spark user writes by hand for the same feed: LAG over the key, CASE on both images.
FILTER_NATIVE = """
WITH w AS (
  SELECT id, owner, balance, _commit_version,
         _change_type IN ('insert', 'update_postimage') AND balance >= 0 AS new_ok,
         LAG(_change_type IN ('insert', 'update_postimage') AND balance >= 0, 1, FALSE)
           OVER (PARTITION BY id ORDER BY _commit_version) AS old_ok,
         LAG(owner) OVER (PARTITION BY id ORDER BY _commit_version) AS old_owner,
         LAG(balance) OVER (PARTITION BY id ORDER BY _commit_version) AS old_balance
  FROM bench_changes
  WHERE _change_type <> 'update_preimage'
)
SELECT inline(CASE
  WHEN new_ok AND NOT old_ok THEN array(named_struct(
    'id', id, 'owner', owner, 'balance', balance, '_change_type', 'insert', '_commit_version', _commit_version))
  WHEN old_ok AND NOT new_ok THEN array(named_struct(
    'id', id, 'owner', old_owner, 'balance', old_balance, '_change_type', 'delete', '_commit_version', _commit_version))
  WHEN old_ok AND new_ok AND NOT (owner <=> old_owner AND balance <=> old_balance) THEN array(
    named_struct('id', id, 'owner', old_owner, 'balance', old_balance, '_change_type', 'update_preimage',
                 '_commit_version', _commit_version),
    named_struct('id', id, 'owner', owner, 'balance', balance, '_change_type', 'update_postimage',
                 '_commit_version', _commit_version))
END)
FROM w
"""


@dataclass
class Timing:
    name: str
    seconds: list[float]
    # CPU seconds of Spark's JVM per run (local mode: driver and executors), where known
    cpu: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu) if self.cpu else None


def make_changes(spark, rows: int, directory: str) -> None:
    """A change feed of ``rows`` changes over rows/8 accounts, written once as Parquet.

    Each account is inserted first; later changes are updates (80%), deletes (10%) or
    re-inserts (10%); balances are negative a quarter of the time. Versions are unique.
    """
    keys = max(1, rows // 8)
    spark.range(rows).selectExpr(
        f"id % {keys} AS id",
        "concat('owner-', CAST(pmod(hash(id, 3), 1000) AS STRING)) AS owner",
        "CAST(pmod(hash(id, 7), 2000) - 500 AS BIGINT) AS balance",
        f"""CASE WHEN id < {keys} THEN 'insert'
                 WHEN pmod(hash(id, 11), 10) = 0 THEN 'delete'
                 WHEN pmod(hash(id, 11), 10) = 1 THEN 'insert'
                 ELSE 'update_postimage' END AS _change_type""",
        "id AS _commit_version",
    ).write.mode("overwrite").parquet(directory)
    spark.read.parquet(directory).createOrReplaceTempView("bench_changes")


def jvm_cpu_seconds(spark) -> float | None:
    """CPU time Spark's JVM has used so far. In local mode it runs the executors as well, so
    the difference over a run is the run's whole CPU cost (tasks, driver, JIT and garbage
    collection), which moves less from run to run than wall time on a busy machine."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    try:
        return spark.sparkContext._jvm.java.lang.ProcessHandle.current().info() \
            .totalCpuDuration().get().toNanos() / 1e9
    except (AttributeError, Py4JError, PySparkException):
        return None  # not reported on this platform, or no JVM gateway (Spark Connect)


def time_query(spark, frame_factory, timing: Timing | None = None) -> None:
    """Run the query once, writing every row to Spark's no-op sink; record wall and CPU time."""
    frame = frame_factory()
    cpu = jvm_cpu_seconds(spark)
    started = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - started
    after = jvm_cpu_seconds(spark)
    if timing is not None:
        timing.seconds.append(seconds)
        if cpu is not None and after is not None:
            timing.cpu.append(after - cpu)


def fingerprint(spark, frame):
    """Row count and an order-free checksum of all columns: equal results, equal prints."""
    row = frame.selectExpr("count(*) AS n", "sum(hash(*)) AS h").collect()[0]
    return row.n, row.h


def compare(spark, name: str, ours, native, runs: int) -> tuple[Timing, Timing]:
    if fingerprint(spark, ours()) != fingerprint(spark, native()):
        raise SystemExit(f"bench {name}: sqlext and the native formulation return different rows")
    return alternate(spark, ours, native, runs)


def alternate(spark, ours, native, runs: int) -> tuple[Timing, Timing]:
    """One warm-up each, then alternate, so that drift in the machine hits both sides alike."""
    time_query(spark, ours)
    time_query(spark, native)
    mine, theirs = Timing("sqlext", []), Timing("native", [])
    for _ in range(runs):
        time_query(spark, ours, mine)
        time_query(spark, native, theirs)
    return mine, theirs


def report(title: str, mine: Timing, theirs: Timing) -> None:
    print(f"{title}")
    for timing in (mine, theirs):
        runs = ", ".join(f"{s:.2f}" for s in timing.seconds)
        cpu = "" if timing.cpu_median is None else f"   CPU median {timing.cpu_median:6.2f} s"
        print(f"  {timing.name:<8} median {timing.median:8.2f} s{cpu}   runs: {runs}")
    print(f"  ratio sqlext/native: {mine.median / theirs.median:.2f}x")
    if mine.cpu_median and theirs.cpu_median:
        print(f"  CPU ratio sqlext/native: {mine.cpu_median / theirs.cpu_median:.2f}x")


def bench_filter(spark, rows: int, runs: int) -> tuple[Timing, Timing]:
    import sqlext

    directory = tempfile.mkdtemp(prefix="sqlext-bench-")
    try:
        make_changes(spark, rows, directory)
        mine, theirs = compare(
            spark, "filter",
            lambda: sqlext.sql(spark, FILTER_SQLEXT),
            lambda: spark.sql(FILTER_NATIVE),
            runs,
        )
        report(f"CHANGELOG_FILTER emit => 'changes' over {rows:,} changes ({runs} runs each)", mine, theirs)
        return mine, theirs
    finally:
        shutil.rmtree(directory, ignore_errors=True)


FK_SQLEXT = """
SELECT * FROM FK_JOIN(
  left => TABLE(bench_orders), right => TABLE(bench_customers),
  left_key => 'order_id', foreign_key => 'customer_id', right_key => 'id',
  join_type => 'inner', emit => '{emit}')
"""

# The plain snapshot join: the final table of each side (latest change per key, deletes
# dropped), joined.
FK_SNAPSHOT = """
WITH orders AS (
  SELECT order_id, customer_id, amount FROM (
    SELECT *, row_number() OVER (PARTITION BY order_id ORDER BY _commit_version DESC) AS rn
    FROM bench_orders WHERE _change_type <> 'update_preimage')
  WHERE rn = 1 AND _change_type <> 'delete'),
customers AS (
  SELECT id, name, tier FROM (
    SELECT *, row_number() OVER (PARTITION BY id ORDER BY _commit_version DESC) AS rn
    FROM bench_customers WHERE _change_type <> 'update_preimage')
  WHERE rn = 1 AND _change_type <> 'delete')
SELECT o.order_id, o.customer_id, o.amount, c.id, c.name, c.tier
FROM orders o JOIN customers c ON o.customer_id = c.id
"""

# Any plan of joins and window functions for FK_JOIN's changes must at least give each left
# change the key's change before and after it: a shuffle of every left change, a sort and a
# window. Timed on its own, this part is a floor under FK_JOIN's time.
FK_LEFT_STREAM = """
SELECT *, LEAD(_commit_version) OVER w AS next_version, LAG(_change_type) OVER w AS previous_type,
       LAG(customer_id) OVER w AS previous_customer_id, LAG(amount) OVER w AS previous_amount
FROM bench_orders WHERE _change_type <> 'update_preimage'
WINDOW w AS (PARTITION BY order_id ORDER BY _commit_version)
"""


def make_fk_inputs(spark, left: int, right: int, directory: str) -> None:
    """Orders (left) and customers (right) change feeds, written once as Parquet.

    Customers: right/5 keys, about 5 changes each. Orders: left/5 keys, about 5 changes each.
    An order's customer is drawn once from a Zipf-like (log-uniform) distribution, so that
    customer 1 holds about 6% of all orders; one change in ten reassigns the order to another
    customer drawn the same way (the next change returns it). Versions are unique per key.
    """
    customers = max(1, right // 5)
    orders = max(1, left // 5)
    spread = max(1, left // max(1, right))
    kinds = """CASE WHEN id < {keys} THEN 'insert'
                    WHEN pmod(hash(id, 11), 10) = 0 THEN 'delete'
                    WHEN pmod(hash(id, 11), 10) = 1 THEN 'insert'
                    ELSE 'update_postimage' END AS _change_type"""
    spark.range(right).selectExpr(
        f"id % {customers} + 1 AS id",
        "concat('customer-', CAST(pmod(hash(id, 3), 100000) AS STRING)) AS name",
        "CAST(pmod(hash(id, 5), 4) AS INT) AS tier",
        kinds.format(keys=customers),
        f"id * {spread} AS _commit_version",
    ).write.mode("overwrite").parquet(f"{directory}/customers")
    spark.range(left).selectExpr(
        f"id % {orders} AS order_id",
        f"CAST(floor(exp((pmod(hash(CASE WHEN pmod(hash(id, 23), 10) = 0 THEN id ELSE -1 - id % {orders} END, 17), "
        f"1000000) / 1000000.0) * ln({customers}))) AS BIGINT) AS customer_id",
        "CAST(pmod(hash(id, 19), 100000) AS BIGINT) AS amount",
        kinds.format(keys=orders),
        "id AS _commit_version",
    ).write.mode("overwrite").parquet(f"{directory}/orders")
    spark.read.parquet(f"{directory}/customers").createOrReplaceTempView("bench_customers")
    spark.read.parquet(f"{directory}/orders").createOrReplaceTempView("bench_orders")


def bench_fk(spark, left: int, right: int, runs: int) -> tuple[Timing, Timing]:
    import sqlext

    directory = tempfile.mkdtemp(prefix="sqlext-bench-")
    try:
        make_fk_inputs(spark, left, right, directory)
        final = sqlext.sql(spark, FK_SQLEXT.format(emit="final"))
        if fingerprint(spark, final) != fingerprint(spark, spark.sql(FK_SNAPSHOT)):
            raise SystemExit("bench fk: FK_JOIN emit => 'final' differs from the snapshot join")
        mine, theirs = alternate(
            spark,
            lambda: sqlext.sql(spark, FK_SQLEXT.format(emit="changes")),
            lambda: spark.sql(FK_SNAPSHOT),
            runs,
        )
        report(f"FK_JOIN emit => 'changes' ({left:,} left and {right:,} right changes, Zipf foreign keys) "
               f"against the snapshot join of the final tables ({runs} runs each)", mine, theirs)
        floor = Timing("stream", [])
        time_query(spark, lambda: spark.sql(FK_LEFT_STREAM))
        for _ in range(runs):
            time_query(spark, lambda: spark.sql(FK_LEFT_STREAM), floor)
        cpu = "" if floor.cpu_median is None or not theirs.cpu_median else (
            f", CPU {floor.cpu_median:.2f} s ({floor.cpu_median / theirs.cpu_median:.2f}x the snapshot join's)")
        print(f"  floor: the left change stream alone (shuffle, sort, LAG/LEAD window) median "
              f"{floor.median:.2f} s ({floor.median / theirs.median:.2f}x the snapshot join){cpu}")
        return mine, theirs
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_benchmark(what: str, rows: int, runs: int, left: int = 0, right: int = 0,
                  native_runs: int | None = None, native_limit: float = 900.0) -> int:
    from sqlext.session import local_session

    spark = local_session("sqlext-bench")
    if what == "filter":
        bench_filter(spark, rows, runs)
    elif what == "fk":
        bench_fk(spark, left, right, runs)
    elif what == "selfjoin":
        from sqlext.bench_selfjoin import bench_selfjoin

        bench_selfjoin(spark, rows, runs, native_runs, native_limit)
    return 0

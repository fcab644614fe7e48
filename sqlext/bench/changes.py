"""The change-feed benchmarks: CHANGELOG_FILTER against the LAG/CASE query a Spark user writes
by hand, and FK_JOIN's change stream against the native snapshot join.

    sqlext bench filter --rows 10000000 --runs 3
    sqlext bench fk --left 5000000 --right 500000 --runs 3
"""

from __future__ import annotations

import shutil
import tempfile

from sqlext.bench.common import Timing, alternate, compare, fingerprint, report, time_query

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


def make_changes(spark, rows: int, directory: str, keys: int | None = None) -> None:
    """A change feed of ``rows`` changes over ``keys`` accounts (default rows/8), written once
    as Parquet.

    Each account is inserted first; later changes are updates (80%), deletes (10%) or
    re-inserts (10%); balances are negative a quarter of the time. Versions are unique.
    """
    keys = keys or max(1, rows // 8)
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


def make_fk_inputs(spark, left: int, right: int, directory: str, orders: int | None = None,
                   customers: int | None = None) -> None:
    """Orders (left) and customers (right) change feeds, written once as Parquet.

    Customers: right/5 keys (or ``customers``), about 5 changes each. Orders: left/5 keys (or
    ``orders``), about 5 changes each (more when the keys are fixed and the history grows).
    An order's customer is drawn once from a Zipf-like (log-uniform) distribution, so that
    customer 1 holds about 6% of all orders; one change in ten reassigns the order to another
    customer drawn the same way (the next change returns it). Versions are unique per key.
    """
    customers = customers or max(1, right // 5)
    orders = orders or max(1, left // 5)
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

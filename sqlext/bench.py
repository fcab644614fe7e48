"""Benchmarks: each runs sqlext and the native Spark formulation of the same work in one
session, checks that both give the same rows, and reports median times and their ratio.

    sqlext bench filter --rows 10000000 --runs 3
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass

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

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


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


def time_query(spark, frame_factory, runs: int) -> list[float]:
    seconds = []
    for _ in range(runs):
        frame = frame_factory()
        started = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        seconds.append(time.perf_counter() - started)
    return seconds


def fingerprint(spark, frame):
    """Row count and an order-free checksum of all columns: equal results, equal prints."""
    row = frame.selectExpr("count(*) AS n", "sum(hash(*)) AS h").collect()[0]
    return row.n, row.h


def compare(spark, name: str, ours, native, runs: int) -> tuple[Timing, Timing]:
    if fingerprint(spark, ours()) != fingerprint(spark, native()):
        raise SystemExit(f"bench {name}: sqlext and the native formulation return different rows")
    # one warm-up each, then alternate so that drift in the machine hits both sides alike
    time_query(spark, ours, 1)
    time_query(spark, native, 1)
    mine, theirs = Timing("sqlext", []), Timing("native", [])
    for _ in range(runs):
        mine.seconds += time_query(spark, ours, 1)
        theirs.seconds += time_query(spark, native, 1)
    return mine, theirs


def report(title: str, mine: Timing, theirs: Timing) -> None:
    print(f"{title}")
    for timing in (mine, theirs):
        runs = ", ".join(f"{s:.2f}" for s in timing.seconds)
        print(f"  {timing.name:<8} median {timing.median:8.2f} s   runs: {runs}")
    print(f"  ratio sqlext/native: {mine.median / theirs.median:.2f}x")


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


def run_benchmark(what: str, rows: int, runs: int) -> int:
    from sqlext.session import local_session

    spark = local_session("sqlext-bench")
    if what == "filter":
        bench_filter(spark, rows, runs)
    return 0

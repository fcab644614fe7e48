"""``sqlext bench selfjoin``: self-join queries as written (Spark runs them as joins) against
the same text rewritten by sqlext, in one session.

    sqlext bench selfjoin --rows 1000000 --runs 3

Four cases over one table of user events (id, user_id, ts over 30 days, v):

* band, uniform keys: each event with the events of its user within 10 minutes either side
  (about 10 events per user);
* band, hot key: the same query where one user holds 20% of the events;
* triangular: a running total per event (``b.ts <= a.ts``, ``SUM(b.v)``, about 1,000 events
  per user);
* band in a chain of joins: the uniform band self-join joined to a table of users (one row
  per user) on ``a`` and filtered on it, the pair inside a three-way join (KIP-862's shape).

Each timed run computes the row count and an order-free checksum of all output columns of
both queries (so every pair is produced) and stops if they differ. A native run that passes
``--native-limit`` seconds (default 900) is cancelled and reported as such: the ratio is then
an upper bound (a hot key makes the sort-merge join quadratic; on 1 million rows it runs for
hours).
"""

from __future__ import annotations

import shutil
import tempfile
import time

from sqlext.bench.common import Timing, fingerprint, report

BAND = """
SELECT a.id, b.id AS other, b.v FROM {table} a JOIN {table} b
  ON a.user_id = b.user_id AND b.ts BETWEEN a.ts - INTERVAL 10 MINUTES AND a.ts + INTERVAL 10 MINUTES
"""

RUNNING_TOTAL = """
SELECT a.id, SUM(b.v) AS running FROM {table} a JOIN {table} b
  ON a.user_id = b.user_id AND b.ts <= a.ts
GROUP BY a.id
"""

BAND_CHAIN = """
SELECT a.id, b.id AS other, b.v, u.tier FROM {table} a JOIN {table} b
  ON a.user_id = b.user_id AND b.ts BETWEEN a.ts - INTERVAL 10 MINUTES AND a.ts + INTERVAL 10 MINUTES
  JOIN {users} u ON u.user_id = a.user_id
WHERE u.tier > 0
"""

CASES = [
    # (title, query, events per user, share of the hot user in percent)
    ("band self-join, uniform keys", BAND, 10, 0),
    ("band self-join, one user with 20% of the rows", BAND, 10, 20),
    ("triangular running-total self-join", RUNNING_TOTAL, 1000, 0),
    ("band self-join inside a three-way join, uniform keys", BAND_CHAIN, 10, 0),
]


def make_events(spark, rows: int, per_user: int, hot_percent: int, path: str, table: str) -> None:
    users = max(1, rows // per_user)
    spark.range(rows).selectExpr(
        "id",
        f"CASE WHEN pmod(hash(id, 3), 100) < {hot_percent} THEN 0 ELSE 1 + pmod(hash(id, 5), {users}) END AS user_id",
        "timestamp_seconds(1767225600 + pmod(hash(id, 7), 30 * 86400)) AS ts",
        "CAST(pmod(hash(id, 11), 100) AS INT) AS v",
    ).write.mode("overwrite").parquet(path)
    spark.read.parquet(path).createOrReplaceTempView(table)
    spark.range(users + 1).selectExpr(
        "CAST(id AS INT) AS user_id", "CAST(pmod(hash(id, 13), 5) AS INT) AS tier",
    ).write.mode("overwrite").parquet(f"{path}_users")
    spark.read.parquet(f"{path}_users").createOrReplaceTempView(f"{table}_users")


def timed_fingerprint(spark, frame, limit: float | None = None) -> tuple[float, tuple | None]:
    """Seconds to compute ``frame``'s fingerprint, and the fingerprint; with ``limit``, the
    run is cancelled after that many seconds and the fingerprint is None."""
    import threading

    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JJavaError

    context = spark.sparkContext
    group = f"sqlext-bench-{time.monotonic_ns()}"
    context.setJobGroup(group, "sqlext bench selfjoin", interruptOnCancel=True)
    timer = threading.Timer(limit, context.cancelJobGroup, args=(group,)) if limit else None
    started = time.perf_counter()
    if timer:
        timer.start()
    try:
        got = fingerprint(spark, frame)
    except (PySparkException, Py4JJavaError):
        if limit and time.perf_counter() - started >= limit:
            return time.perf_counter() - started, None
        raise
    finally:
        if timer:
            timer.cancel()
        context.setLocalProperty("spark.jobGroup.id", None)
    return time.perf_counter() - started, got


def bench_case(spark, title: str, query: str, runs: int, native_runs: int,
               native_limit: float | None = None) -> tuple[Timing, Timing]:
    import sqlext
    from sqlext.rewrites.pipeline import rewrite_statement
    from sqlext.session import SparkRelations

    rewritten = rewrite_statement(query, SparkRelations(spark))
    if not rewritten.changed:
        raise SystemExit(f"bench selfjoin: no rule rewrote {title!r}: {[str(n) for n in rewritten.notes]}")
    _, expected = timed_fingerprint(spark, sqlext.sql(spark, query))  # warm-up, and the rows to expect
    mine, theirs = Timing("sqlext", []), Timing("native", [])
    cancelled = 0
    for run in range(max(runs, native_runs)):
        if run < runs:
            seconds, got = timed_fingerprint(spark, sqlext.sql(spark, query))
            mine.seconds.append(seconds)
            if got != expected:
                raise SystemExit(f"bench selfjoin: {title}: runs of the rewritten query differ")
        if run < native_runs:
            seconds, got = timed_fingerprint(spark, spark.sql(query), native_limit)
            theirs.seconds.append(seconds)
            if got is None:
                cancelled += 1
                break  # a run past the limit says enough; more would only repeat it
            if got != expected:
                raise SystemExit(f"bench selfjoin: {title}: the rewritten query returns other rows than the original")
    report(f"{title}: {expected[0]:,} output rows; rules: {', '.join(rewritten.notes.fired)}", mine, theirs)
    if cancelled:
        print(f"  the native run was cancelled after {native_limit:.0f} s: native takes longer, so the "
              f"ratio is at most {mine.median / theirs.median:.3f}x (sqlext at least "
              f"{theirs.median / mine.median:.0f}x faster)")
    return mine, theirs


def bench_selfjoin(spark, rows: int, runs: int, native_runs: int | None = None,
                   native_limit: float = 900.0) -> list[tuple[Timing, Timing]]:
    directory = tempfile.mkdtemp(prefix="sqlext-bench-")
    results = []
    try:
        # warm the session up (JIT, file listing) on a small query before timing anything
        spark.range(1000).selectExpr("sum(id)").collect()
        for index, (title, query, per_user, hot) in enumerate(CASES):
            table = f"bench_events_{index}"
            make_events(spark, rows, per_user, hot, f"{directory}/{table}", table)
            results.append(bench_case(spark, f"{title} ({rows:,} rows)", query.format(table=table, users=f"{table}_users"),
                                      runs, native_runs or runs, native_limit))
        return results
    finally:
        shutil.rmtree(directory, ignore_errors=True)

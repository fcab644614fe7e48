"""``sqlext bench incremental``: an incremental run of CHANGELOG_FILTER over a new increment of
changes, against recomputing the batch result over the whole history, in one session.

The history is the filter benchmark's feed (``rows`` changes over ``keys`` accounts, default
rows/8). The first incremental run reads all of it (reported on its own: the one-time cost of
building the state). Then, ``runs`` times: an increment of ``percent`` % of the history lands
(updates of random accounts, with versions above everything before), one incremental run
processes it (``availableNow``, from the text to the committed output), and the batch query
recomputes the whole output from the history plus the increments (written to Spark's no-op
sink). Medians and their ratio are reported, for each engine (where the state lives: snapshot
tables written by each micro-batch, or Spark's state store through transformWithState), each
on its own copy of the same history and increments.

    sqlext bench incremental --rows 10000000 --runs 3
    sqlext bench incremental --rows 100000000 --keys 1250000 --runs 3   (10x the history, same keys)
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time

from sqlext.bench.changes import make_changes

STREAMED = """SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(bench_feed)), key => 'id',
  predicate => 'balance >= 0', emit => 'changes')"""
BATCH = """SELECT * FROM CHANGELOG_FILTER(input => TABLE(bench_feed_all), key => 'id',
  predicate => 'balance >= 0', emit => 'changes')"""


def bench_incremental(spark, rows: int, runs: int, percent: float = 1.0, keys: int | None = None,
                      engines: tuple[str, ...] = ("tables", "state_store")) -> dict:
    """Each engine on its own copy of the same history and increments; returns, per engine,
    the first run's seconds, the incremental and batch seconds per increment, and the rows."""
    results = {}
    for engine in engines:
        results[engine] = _bench_engine(spark, rows, runs, percent, keys or max(1, rows // 8), engine)
    return results


def _bench_engine(spark, rows: int, runs: int, percent: float, keys: int, engine: str) -> dict:
    import sqlext
    from sqlext.streaming import run_available_now

    directory = tempfile.mkdtemp(prefix="sqlext-bench-incremental-")
    feed = f"{directory}/changes"
    options = dict(checkpoint=f"{directory}/checkpoint", output=f"{directory}/out", sources={"bench_feed": feed},
                   engine=engine)
    try:
        make_changes(spark, rows, feed, keys=keys)
        started = time.perf_counter()
        run_available_now(spark, STREAMED, **options)
        initial = time.perf_counter() - started
        size = max(1, int(rows * percent / 100))
        incremental, batch = [], []
        for run in range(runs):
            first = rows + run * size
            spark.range(size).selectExpr(
                f"CAST(pmod(hash(id, {run}, 13), {keys}) AS BIGINT) AS id",
                "concat('owner-', CAST(pmod(hash(id, 17), 1000) AS STRING)) AS owner",
                f"CAST(pmod(hash(id, {run}, 19), 2000) - 500 AS BIGINT) AS balance",
                "'update_postimage' AS _change_type",
                f"id + {first} AS _commit_version",
            ).write.mode("append").parquet(feed)
            started = time.perf_counter()
            run_available_now(spark, STREAMED, **options)
            incremental.append(time.perf_counter() - started)
            spark.read.parquet(feed).createOrReplaceTempView("bench_feed_all")
            started = time.perf_counter()
            sqlext.sql(spark, BATCH).write.format("noop").mode("overwrite").save()
            batch.append(time.perf_counter() - started)
        out_rows = spark.read.parquet(options["output"]).count()
        batch_rows = sqlext.sql(spark, BATCH).count()
        if out_rows != batch_rows:
            raise SystemExit(f"bench incremental ({engine}): the runs wrote {out_rows} rows, the batch query "
                             f"{batch_rows}")
        ratio = statistics.median(batch) / statistics.median(incremental)
        print(f"CHANGELOG_FILTER emit => 'changes', engine {engine!r}: history {rows:,} changes over {keys:,} "
              f"keys, increments of {size:,} changes ({percent:g}%), {runs} runs", flush=True)
        print(f"  first incremental run (the whole history, builds the state): {initial:.2f} s")
        print(f"  incremental run per increment: median {statistics.median(incremental):.2f} s   runs: "
              + ", ".join(f"{s:.2f}" for s in incremental))
        print(f"  batch recompute (history + increments): median {statistics.median(batch):.2f} s   runs: "
              + ", ".join(f"{s:.2f}" for s in batch))
        print(f"  ratio batch/incremental: {ratio:.2f}x (same output: {out_rows:,} rows)", flush=True)
        return {"initial": initial, "incremental": incremental, "batch": batch, "rows": out_rows}
    finally:
        shutil.rmtree(directory, ignore_errors=True)

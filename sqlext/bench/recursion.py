"""``sqlext bench recursion``: WITH RECURSIVE run by sqlext against Spark's native recursion,
in one session, on three inputs written once as Parquet:

* a chain of ``depth`` nodes (descendants of its head, with depth): native needs its level
  limit raised and costs a job per level;
* a random forest of ``nodes`` nodes (every node's parent drawn uniformly among the nodes
  before it, 1 in 1,000 a root): all (node, ancestor, depth) pairs; native needs its row limit
  raised;
* a layered DAG of ``nodes / 5`` parts in 20 layers where parts share sub-parts: the bill of
  materials of every part (root, part, depth, quantity multiplied along the path).

Both sides run the same SQL text. Native runs with ``spark.sql.cteRecursionLevelLimit`` and
``spark.sql.cteRecursionRowLimit`` raised and broadcast joins off (printed); sqlext has its
own limits. A timed run is
the whole statement, from the text to an order-free checksum of every row
(:func:`sqlext.bench.fingerprint`); every run of both sides must give the same checksum.
Timing starts before ``sqlext.sql``, which computes the recursion eagerly, so nothing is
left out of sqlext's side.

    sqlext bench recursion --nodes 1000000 --depth 1000 --runs 3

Each case prints the path sqlext took (``walk``, ``jump`` or ``levels``). With
``--forest-only`` only the forest runs, on sqlext alone (native would take hours at 10^7
nodes), timed from the text to the last row (written to Spark's ``noop`` sink, as ``bench
scale`` does) with the peak resident memory of the Python driver and of the JVM; ``--path``
forces a path (``spark.sqlext.recursion.path``):

    sqlext bench recursion --forest-only --nodes 10000000 --path jump --runs 1 [--floor]

``--floor`` adds the cost of one round of pointer jumping (the forest joined with itself).
"""

from __future__ import annotations

import shutil
import tempfile
import time

from sqlext.bench.common import Timing, fingerprint, report

NATIVE_LEVEL_LIMIT = 100_000
NATIVE_ROW_LIMIT = 2_000_000_000

CHAIN = """
WITH RECURSIVE r(node, depth) AS (
  SELECT 1L, 0
  UNION ALL
  SELECT e.dst, r.depth + 1 FROM r JOIN bench_chain AS e ON r.node = e.src)
SELECT * FROM r"""

FOREST = """
WITH RECURSIVE anc(node, ancestor, depth) AS (
  SELECT id, parent, 1 FROM bench_forest WHERE parent IS NOT NULL
  UNION ALL
  SELECT a.node, f.parent, a.depth + 1 FROM anc AS a JOIN bench_forest AS f ON a.ancestor = f.id
  WHERE f.parent IS NOT NULL)
SELECT * FROM anc"""

BOM = """
WITH RECURSIVE bom(root, part, depth, qty) AS (
  SELECT parent, child, 1, qty FROM bench_parts
  UNION ALL
  SELECT b.root, p.child, b.depth + 1, b.qty * p.qty
  FROM bom AS b JOIN bench_parts AS p ON b.part = p.parent)
SELECT * FROM bom"""

LAYERS = 20


def make_inputs(spark, nodes: int, depth: int, directory: str, only: tuple[str, ...] = ("chain", "forest", "parts")) -> None:
    if "chain" in only:
        spark.range(1, depth).selectExpr("id AS src", "id + 1 AS dst") \
            .write.mode("overwrite").parquet(f"{directory}/chain")
    if "forest" in only:
        make_forest(spark, nodes, directory)
    if "parts" in only:
        _make_parts(spark, nodes, directory)
    for name in only:
        spark.read.parquet(f"{directory}/{name}").createOrReplaceTempView(f"bench_{name}")


def make_forest(spark, nodes: int, directory: str) -> None:
    roots = max(1, nodes // 1000)
    spark.range(nodes).selectExpr(
        "id",
        f"CASE WHEN id < {roots} THEN NULL "
        "ELSE CAST(floor(pmod(hash(id, 1), 1000000007) / 1000000007.0 * id) AS BIGINT) END AS parent",
    ).write.mode("overwrite").parquet(f"{directory}/forest")


def _make_parts(spark, nodes: int, directory: str) -> None:
    width = max(1, nodes // 5 // LAYERS)
    # a part in layer l (not the last) has two sub-parts in layer l + 1 half of the time, none
    # otherwise: about one child per part, and parts of the next layer shared by several parents
    spark.range(width * (LAYERS - 1)).selectExpr("id AS parent").crossJoin(
        spark.range(2).selectExpr("id AS j")).where("pmod(hash(parent, 7), 2) = 0").selectExpr(
        "parent",
        f"(CAST(parent / {width} AS BIGINT) + 1) * {width} + pmod(hash(parent, j, 3), {width}) AS child",
        "CAST(1 + pmod(hash(parent, j, 5), 3) AS BIGINT) AS qty",
    ).write.mode("overwrite").parquet(f"{directory}/parts")


def timed(factory) -> tuple[float, tuple]:
    started = time.perf_counter()
    result = fingerprint(None, factory())
    return time.perf_counter() - started, result


def measure(name: str, ours, native, runs: int, native_runs: int, warm_native: bool):
    """Warm up, then alternate the two sides; every run must return the same rows."""
    prints = {timed(ours)[1]}
    if warm_native:
        prints.add(timed(native)[1])
    mine, theirs = Timing("sqlext", []), Timing("native", [])
    for run in range(max(runs, native_runs)):
        if run < runs:
            seconds, result = timed(ours)
            mine.seconds.append(seconds)
            prints.add(result)
        if run < native_runs:
            seconds, result = timed(native)
            theirs.seconds.append(seconds)
            prints.add(result)
    if len(prints) != 1:
        raise SystemExit(f"bench recursion {name}: sqlext and native return different rows: {sorted(prints)}")
    return mine, theirs, prints.pop()


def bench_recursion(spark, nodes: int, depth: int, runs: int, native_chain_runs: int = 1, levels: int = 300):
    import sqlext

    directory = tempfile.mkdtemp(prefix="sqlext-bench-")
    spark.conf.set("spark.sql.cteRecursionLevelLimit", str(NATIVE_LEVEL_LIMIT))
    spark.conf.set("spark.sql.cteRecursionRowLimit", str(NATIVE_ROW_LIMIT))
    # native recursion broadcasts each level's join side and runs out of driver memory on the
    # forest ("Not enough memory to build and broadcast the table") unless broadcasts are off
    threshold = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    print(f"native runs with spark.sql.cteRecursionLevelLimit={NATIVE_LEVEL_LIMIT:,}, "
          f"spark.sql.cteRecursionRowLimit={NATIVE_ROW_LIMIT:,} (defaults 100 and 1,000,000) and "
          "spark.sql.autoBroadcastJoinThreshold=-1: without them it fails on the chain (levels), "
          "the forest (rows, then driver memory) and the DAG (rows)")
    results = {}
    try:
        make_inputs(spark, nodes, depth, directory)
        cases = [
            ("chain", CHAIN, f"chain of depth {depth:,}: descendants of the head with depth", native_chain_runs, False),
            ("forest", FOREST, f"random forest of {nodes:,} nodes: all (node, ancestor, depth) pairs", runs, True),
            ("dag", BOM, f"layered DAG of {nodes // 5:,} parts with shared sub-parts: bill of materials "
                         "of every part", runs, True),
        ]
        for name, query, title, native_runs, warm_native in cases:
            mine, theirs, (rows, _) = measure(name, lambda q=query: sqlext.sql(spark, q),
                                              lambda q=query: spark.sql(q), runs, native_runs, warm_native)
            note = "" if warm_native else ", native without warm-up"
            report(f"{title}; {rows:,} rows (sqlext {len(mine.seconds)} runs on the {_path_taken()} path, "
                   f"native {len(theirs.seconds)}{note})", mine, theirs)
            print(f"  speed-up native/sqlext: {theirs.median / mine.median:.1f}x")
            results[name] = (mine, theirs)
        results["levels"] = bench_levels(spark, levels, runs)
        return results
    finally:
        spark.conf.unset("spark.sql.cteRecursionLevelLimit")
        spark.conf.unset("spark.sql.cteRecursionRowLimit")
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", threshold)
        shutil.rmtree(directory, ignore_errors=True)


COUNTER = """
WITH RECURSIVE r(n) MAX RECURSION LEVEL {limit} AS (
  SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < {levels})
SELECT * FROM r"""

KEYED = """
WITH RECURSIVE r(k, v) USING KEY (k) MAX RECURSION LEVEL {limit} AS (
  SELECT id, 0 FROM range(100) UNION ALL SELECT k, v + 1 FROM r WHERE v < {levels})
SELECT * FROM r"""


def bench_levels(spark, levels: int, runs: int):
    """The level-by-level path's cost per level: a counter to ``levels`` forced onto the level
    path against Spark's native recursion of the same text, and a ``USING KEY`` recursion (100
    keys, every key changing at every level: sqlext's own loop) at ``levels / 4`` and
    ``levels`` levels, whose cost per level should not grow with the number of levels."""
    import sqlext

    spark.conf.set("spark.sqlext.recursion.path", "levels")
    try:
        query = COUNTER.format(levels=levels, limit=levels + 10)
        mine, theirs, _ = measure("counter", lambda: sqlext.sql(spark, query), lambda: spark.sql(query),
                                  runs, runs, True)
        per = 1000 / levels
        print(f"level path, a counter to {levels}: sqlext {mine.median * per:.1f} ms a level "
              f"({_path_taken()} path), native {theirs.median * per:.1f} ms a level: "
              f"{mine.median / theirs.median:.2f}x")
        keyed = {}
        for depth in (max(1, levels // 4), levels):
            text = KEYED.format(levels=depth, limit=depth + 10)
            seconds = sorted(timed(lambda t=text: sqlext.sql(spark, t))[0] for _ in range(max(runs, 1)))
            keyed[depth] = seconds[len(seconds) // 2] / (depth + 1)
        low, high = sorted(keyed)
        print(f"USING KEY on sqlext's level loop (100 keys): {keyed[low] * 1000:.1f} ms a level at {low} "
              f"levels, {keyed[high] * 1000:.1f} ms a level at {high} levels "
              f"({keyed[high] / keyed[low]:.2f}x)", flush=True)
        return mine, theirs, keyed
    finally:
        spark.conf.unset("spark.sqlext.recursion.path")


def _path_taken() -> str:
    from sqlext.recursion.jump import last_run
    from sqlext.recursion.paths import last_path

    path = last_path.get("path") or "?"
    if path == "jump" and last_run.get("path") == "jump":
        path += f" ({last_run['rounds']} rounds)"
    return path


JUMP_ROUND = "SELECT f.id, g.parent FROM bench_forest AS f JOIN bench_forest AS g ON f.parent = g.id"


def bench_forest(spark, nodes: int, runs: int, path: str = "auto", floor: bool = False):
    """The forest's ancestors on sqlext alone: seconds per run (from the text to the last
    row, written to the noop sink) and the peak resident memory (MB) of the Python driver
    and of the JVM over all runs. With ``floor``, also the cost of one round of pointer
    jumping: the forest joined with itself (shuffled, broadcasts off) to the noop sink, three
    times; the jump needs ``log2(depth) + 1`` such rounds."""
    import os

    import sqlext
    from sqlext.bench.common import Sampler, jvm_pid

    directory = tempfile.mkdtemp(prefix="sqlext-bench-")
    spark.conf.set("spark.sqlext.recursion.path", path)
    # at 10^7 nodes the result (about 7.5e7 rows) passes sqlext's default row limit (10^7)
    spark.conf.set("spark.sqlext.recursion.rowLimit", str(NATIVE_ROW_LIMIT))
    print(f"spark.sqlext.recursion.rowLimit={NATIVE_ROW_LIMIT:,}", flush=True)
    try:
        make_inputs(spark, nodes, 2, directory, only=("forest",))
        seconds = []
        with Sampler((os.getpid(), jvm_pid(spark))) as sampler:
            for _ in range(runs):
                started = time.perf_counter()
                sqlext.sql(spark, FOREST).write.format("noop").mode("overwrite").save()
                seconds.append(time.perf_counter() - started)
        rows = spark.table("bench_forest").count()
        print(f"random forest of {rows:,} nodes, all (node, ancestor, depth) pairs, path {path!r}: "
              f"{_path_taken()}; runs {', '.join(f'{s:.2f} s' for s in seconds)}; peak RSS: Python driver "
              f"{sampler.peaks[0]:.0f} MB, JVM {sampler.peaks[1]:.0f} MB", flush=True)
        if floor:
            import statistics

            threshold = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
            spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
            rounds = []
            for _ in range(3):
                started = time.perf_counter()
                spark.sql(JUMP_ROUND).write.format("noop").mode("overwrite").save()
                rounds.append(time.perf_counter() - started)
            spark.conf.set("spark.sql.autoBroadcastJoinThreshold", threshold)
            print(f"floor: one pointer-jumping round (the forest joined with itself, shuffled): runs "
                  f"{', '.join(f'{s:.2f} s' for s in rounds)}, median {statistics.median(rounds):.2f} s", flush=True)
        return seconds, sampler.peaks
    finally:
        spark.conf.unset("spark.sqlext.recursion.path")
        spark.conf.unset("spark.sqlext.recursion.rowLimit")
        shutil.rmtree(directory, ignore_errors=True)

"""``sqlext bench NAME``: the benchmarks (:mod:`sqlext.bench`), one subcommand each with only
its own options, on Spark of the command's own."""

from __future__ import annotations

from pathlib import Path

from sqlext.bench.changes import bench_filter, bench_fk
from sqlext.bench.incremental import bench_incremental
from sqlext.bench.recursion import bench_forest, bench_levels, bench_recursion
from sqlext.bench.scale import bench_scale
from sqlext.bench.selfjoin import bench_selfjoin
from sqlext.bench.serve import bench_serve
from sqlext.cli.parser import add_command
from sqlext.command_session import command_session
from sqlext.session_options import add_session_arguments


def add_parser(commands) -> None:
    """``sqlext bench NAME``: one subcommand per benchmark, each with only its own options."""
    bench = add_command(
        commands, "bench", "benchmarks against the native Spark formulation",
        "Each benchmark runs sqlext and the hand-written native Spark SQL of the same result in one "
        "session, checks that both give the same rows, and reports median times and their ratio. "
        "'sqlext bench NAME --help' lists one benchmark's options.",
        "  sqlext bench filter --rows 10000000 --runs 5\n"
        "  sqlext bench fk --left 5000000 --right 500000 --runs 5\n"
        "  sqlext bench incremental --function fk --left 5000000 --right 500000 --runs 3")
    benchmarks = bench.add_subparsers(title="benchmarks", dest="what", required=True, metavar="BENCHMARK",
                                      help="'sqlext bench BENCHMARK --help' shows its options")

    def runs(parser, default: int = 3) -> None:
        parser.add_argument("--runs", type=int, default=default, metavar="N",
                            help="timed runs per side (the median is reported)")
        add_session_arguments(parser, remote=False)

    filter_ = add_command(
        benchmarks, "filter", "CHANGELOG_FILTER against the hand-written LAG/CASE query",
        "CHANGELOG_FILTER emit => 'changes' over generated account changes, against the "
        "hand-written native query of the same change feed.",
        "  sqlext bench filter --rows 10000000 --runs 5")
    filter_.add_argument("--rows", type=int, metavar="N", default=1_000_000, help="input changes")
    runs(filter_)

    fk = add_command(
        benchmarks, "fk", "FK_JOIN changes against the snapshot join of the final tables",
        "FK_JOIN emit => 'changes' over generated orders and customers (Zipf-like foreign keys), "
        "against the plain join of the two final tables; first checks emit => 'final' against it.",
        "  sqlext bench fk --left 5000000 --right 500000 --runs 5")
    fk.add_argument("--left", type=int, metavar="N", default=1_000_000, help="left (order) changes")
    fk.add_argument("--right", type=int, metavar="N", default=100_000, help="right (customer) changes")
    runs(fk)

    selfjoin = add_command(
        benchmarks, "selfjoin", "self-join queries as written against their rewrites",
        "A band self-join (uniform keys, then one hot key) and a running total written as a "
        "triangular self-join: the queries as written (Spark joins) against sqlext's rewrites.",
        "  sqlext bench selfjoin --rows 1000000 --runs 3 --native-limit 120")
    selfjoin.add_argument("--rows", type=int, metavar="N", default=1_000_000, help="events")
    runs(selfjoin)
    selfjoin.add_argument("--native-runs", type=int, metavar="N", default=None,
                          help="timed runs of the queries as written (default: --runs)")
    selfjoin.add_argument("--native-limit", type=float, default=900.0, metavar="SECONDS",
                          help="cancel a run of a query as written after this many seconds")

    scale = add_command(
        benchmarks, "scale", "each function at growing sizes: time and memory",
        "Each function on inputs of growing size, one run each after a warm-up, with the resident "
        "memory of the Python driver and of the JVM.",
        "  sqlext bench scale --sizes 100000,1000000,10000000 --runs 1 --plot docs/scale.svg")
    scale.add_argument("--sizes", default="100000,1000000,10000000", help="comma-separated input sizes")
    runs(scale)
    scale.add_argument("--plot", type=Path, default=None, metavar="FILE.svg", help="write the chart (SVG) here")

    recursion = add_command(
        benchmarks, "recursion", "WITH RECURSIVE against Spark's native recursion",
        "WITH RECURSIVE through sqlext against the same text on Spark's native recursion: a "
        "chain, all ancestors in a random forest, and a bill of materials over a DAG.",
        "  sqlext bench recursion --nodes 1000000 --depth 1000 --runs 3\n"
        "  sqlext bench recursion --forest-only --nodes 10000000 --path jump --runs 1 --floor\n"
        "  sqlext bench recursion --levels-only 300")
    recursion.add_argument("--nodes", type=int, metavar="N", default=1_000_000, help="forest nodes (the DAG has nodes/5)")
    recursion.add_argument("--depth", type=int, metavar="N", default=1_000, help="chain depth")
    runs(recursion)
    recursion.add_argument("--native-chain-runs", type=int, metavar="N", default=1,
                           help="native runs on the chain (each costs a Spark job per level)")
    recursion.add_argument("--forest-only", action="store_true",
                           help="only the forest, sqlext alone, with the driver's peak memory")
    recursion.add_argument("--path", choices=["auto", "walk", "jump", "levels"], default="auto",
                           help="with --forest-only: force the recursion's path")
    recursion.add_argument("--floor", action="store_true",
                           help="with --forest-only: also time one pointer-jumping round (the forest joined with itself)")
    recursion.add_argument("--levels-only", type=int, default=None, metavar="N",
                           help="only the level path's cost per level, over N levels, against native")

    serve = add_command(
        benchmarks, "serve", "a command's time on Spark of its own against attached to sqlext serve",
        "sqlext sql -e \"SELECT 1\", and sqlext stream over ten new changes a run, as a user runs "
        "them, a new process each time, in a new folder: first on Spark of its own (a JVM starts each "
        "time), then attached to the server sqlext serve starts there. The two series of stream runs "
        "must write the same rows. The session options go to both.",
        "  sqlext bench serve --runs 5")
    runs(serve, default=5)

    incremental = add_command(
        benchmarks, "incremental", "an incremental run of new changes against the batch recompute",
        "A history lands and a first incremental run processes it; then, per timed run, an "
        "increment lands, one incremental run processes it, and the batch query recomputes "
        "everything. Both outputs are checked against each other.",
        "  sqlext bench incremental --rows 10000000 --runs 3\n"
        "  sqlext bench incremental --function fk --left 5000000 --right 500000 --runs 3\n"
        "  sqlext bench incremental --function moves --nodes 1000000 --percent 0.1 --runs 3\n"
        "  sqlext bench incremental --function fk --left 500000 --right 50000 --buckets 2 --rescale 8 "
        "--master 'local[8]'\n"
        "  sqlext bench incremental --function fk --left 500000 --right 50000 --runs 1 --percent 100 --catch-up 10 "
        "--max-batch-rows 2000000")
    incremental.add_argument("--function", choices=["filter", "fk", "recursion", "moves", "selfjoin",
                                                    "selfjoin-aggregate", "pipeline"],
                             default="filter",
                             help="CHANGELOG_FILTER (--rows, --keys), FK_JOIN (--left, --right), WITH RECURSIVE "
                                  "over a forest growing new leaves (--nodes), or over a forest whose nodes move "
                                  "to new parents (moves), or a self-join of a stream in a time band (--rows "
                                  "events), against Spark's own stream-stream join too, or a GROUP BY over its "
                                  "pairs (selfjoin-aggregate)")
    incremental.add_argument("--rows", type=int, metavar="N", default=1_000_000,
                             help="filter: changes in the history; selfjoin, selfjoin-aggregate: events")
    incremental.add_argument("--keys", type=int, metavar="N", default=None,
                             help="filter: accounts in the history (default rows/8); fk: orders, and a tenth as many "
                                  "customers (default left/5 and right/5); fix it to grow the history alone")
    incremental.add_argument("--left", type=int, metavar="N", default=1_000_000, help="fk: left (order) changes in the history")
    incremental.add_argument("--right", type=int, metavar="N", default=100_000, help="fk: right (customer) changes in the history")
    incremental.add_argument("--nodes", type=int, metavar="N", default=1_000_000, help="recursion, moves: forest nodes")
    incremental.add_argument("--regions", type=int, metavar="N", default=5_000,
                             help="pipeline: region changes in the history (over a fifth as many regions)")
    incremental.add_argument("--percent", type=float, default=1.0, help="increment size, %% of the history")
    runs(incremental)
    incremental.add_argument("--path", choices=["auto", "driver", "spark"], default="auto", dest="place",
                             help="where a run's step computes: chosen by the engine (auto), the driver, or "
                                  "Spark's executors (spark)")
    incremental.add_argument("--buckets", type=int, metavar="N", default=None,
                             help="the state's bucket count when the first run makes it (default: the engine's)")
    incremental.add_argument("--rescale", type=int, metavar="N", default=None,
                             help="after the first run, ask for N buckets: the first timed run rescales the state "
                                  "(its rescale step reported), the later ones run on N buckets")
    incremental.add_argument("--catch-up", type=int, metavar="K", default=0,
                             help="after the timed runs, K increments land and one run takes them all (in parts "
                                  "where they hold more rows than the batch bound); its time, parts and peak "
                                  "memory reported")
    incremental.add_argument("--max-batch-rows", type=int, metavar="N", default=None,
                             help="the batch bound for every run (spark.sqlext.streaming.maxBatchRows; default "
                                  "a row per 3 KB of spark.sqlext.streaming.taskMemory, a bucket)")
    incremental.add_argument("--uri", action="store_true",
                             help="give the checkpoint, output and sources as file: URIs (as a cluster names them)")


def main(args) -> int:
    if args.what == "serve":  # its commands start their own sessions, in processes of their own
        bench_serve(args.runs, args.session.to_argv())
        return 0
    spark = command_session(args.session, "sqlext bench", "sqlext-bench", attach=False)
    if args.what == "filter":
        bench_filter(spark, args.rows, args.runs)
    elif args.what == "fk":
        bench_fk(spark, args.left, args.right, args.runs)
    elif args.what == "selfjoin":
        bench_selfjoin(spark, args.rows, args.runs, args.native_runs, args.native_limit)
    elif args.what == "scale":
        bench_scale(spark, [int(s) for s in args.sizes.split(",")], args.runs, args.plot)
    elif args.what == "incremental":
        bench_incremental(spark, rows=args.rows, runs=args.runs, percent=args.percent, keys=args.keys,
                          function=args.function, left=args.left, right=args.right,
                          nodes=args.nodes, place=args.place, uri=args.uri, regions=args.regions,
                          buckets=args.buckets, rescale=args.rescale, catch_up=args.catch_up,
                          max_batch_rows=args.max_batch_rows)
    elif args.levels_only:
        bench_levels(spark, levels=args.levels_only, runs=args.runs)
    elif args.forest_only:
        bench_forest(spark, nodes=args.nodes, runs=args.runs, path=args.path, floor=args.floor)
    else:
        bench_recursion(spark, nodes=args.nodes, depth=args.depth, runs=args.runs,
                        native_chain_runs=args.native_chain_runs)
    return 0

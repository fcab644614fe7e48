"""The ``sqlext`` command: run SQL files, explain rewrites, run benchmarks.

    sqlext run FILE.sql [FILE.sql ...]   run each statement (rewritten) and print results
    sqlext sql [-e SQL | -f FILE] [--conf KEY=VALUE] [--master URL]
                                         a spark-sql style shell (see sqlext.shell)
    sqlext explain FILE.sql              each statement before and after rewriting, and why
    sqlext build MODELS_DIR              dbt-style models (one SELECT per file) in dependency order
    sqlext stream FILE.sql --checkpoint DIR --output DIR [--source NAME=DIR] [--every INTERVAL]
                                         the statement over STREAM(...) as an incremental run
    sqlext bench filter --rows N         CHANGELOG_FILTER against hand-written Spark SQL
    sqlext bench fk --left N --right M   FK_JOIN changes against the snapshot join
    sqlext bench selfjoin --rows N       self-join queries as written against their rewrites
    sqlext bench scale --sizes A,B,C     each function at growing sizes: time and memory
    sqlext bench recursion --nodes N --depth D   WITH RECURSIVE against Spark's native recursion
    sqlext bench incremental --rows N    an incremental run of 1% new changes against the batch recompute
    sqlext --version                     the installed version
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from sqlext.errors import SqlextError, spark_error_summary
from sqlext.statements import Statement, split_statements


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sqlext", description="Kafka Streams table semantics for Spark SQL")
    parser.add_argument("--version", action="version", version=f"sqlext {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run SQL files statement by statement, printing results")
    run.add_argument("files", nargs="+", type=Path)
    run.add_argument("--limit", type=int, default=200, help="rows to print per result (default 200)")

    sql = commands.add_parser("sql", help="a spark-sql style shell: a prompt, -e SQL or -f FILE")
    from sqlext.shell import add_arguments

    add_arguments(sql)

    explain = commands.add_parser("explain", help="show each statement before and after rewriting")
    explain.add_argument("file", type=Path)
    explain.add_argument("--no-spark", action="store_true",
                         help="do not start Spark (calls over unknown relations stay unexpanded)")

    build = commands.add_parser("build", help="build a folder of dbt-style models in dependency order")
    build.add_argument("models", type=Path, help="a folder of *.sql models (or a dbt project with models/)")
    build.add_argument("--warehouse", type=Path, default=Path("spark-warehouse"),
                       help="where table models are written as Parquet (default ./spark-warehouse)")
    build.add_argument("--select", action="append", default=[],
                       help="name, name+ (and its dependents), +name (and its ancestors); repeatable")
    build.add_argument("--vars", action="append", default=[], help="KEY=VALUE for var('KEY'); repeatable")
    build.add_argument("--progress-every", type=float, default=10.0,
                       help="seconds between 'still running' lines for a long model (default 10; 0: off)")

    stream = commands.add_parser("stream", help="run a statement over STREAM(...) incrementally")
    stream.add_argument("file", type=Path, help="a file holding one statement that reads STREAM(name)")
    stream.add_argument("--checkpoint", required=True, help="the query's progress and state (keep it between runs)")
    stream.add_argument("--output", required=True, help="the folder the output rows are appended to")
    stream.add_argument("--source", action="append", default=[], metavar="NAME=DIR",
                        help="read STREAM(NAME) from the change files in DIR; repeatable")
    stream.add_argument("--source-schema", action="append", default=[], metavar="NAME=COLUMNS",
                        help="the columns of STREAM(NAME)'s files ('id BIGINT, v STRING'), so a run can start before "
                             "the folder holds a file; repeatable")
    stream.add_argument("--source-format", default="parquet", help="format of the change files (default parquet)")
    stream.add_argument("--output-format", default="parquet", help="format of the output files (default parquet)")
    stream.add_argument("--engine", choices=["tables", "state_store"], default="tables",
                        help="where the state lives: snapshot tables (default) or Spark's state store")
    how = stream.add_mutually_exclusive_group()
    how.add_argument("--available-now", action="store_true",
                     help="process what arrived since the last run, then stop (the default)")
    how.add_argument("--every", metavar="INTERVAL", help="keep running, one micro-batch every INTERVAL ('10 seconds')")

    bench = commands.add_parser("bench", help="benchmarks against the native Spark formulation")
    bench.add_argument("what", choices=["filter", "fk", "selfjoin", "scale", "recursion", "incremental"])
    bench.add_argument("--rows", type=int, default=1_000_000, help="filter: input changes; selfjoin: events")
    bench.add_argument("--left", type=int, default=1_000_000, help="fk: number of left (order) changes")
    bench.add_argument("--right", type=int, default=100_000, help="fk: number of right (customer) changes")
    bench.add_argument("--runs", type=int, default=3, help="timed runs per side (median reported)")
    bench.add_argument("--native-runs", type=int, default=None,
                       help="selfjoin: timed runs of the original queries (default: --runs)")
    bench.add_argument("--sizes", default="100000,1000000,10000000",
                       help="scale: comma-separated input sizes (default 10^5, 10^6, 10^7)")
    bench.add_argument("--plot", type=Path, default=None, help="scale: write the chart (SVG) here")
    bench.add_argument("--native-limit", type=float, default=900.0,
                       help="selfjoin: cancel a native run after this many seconds (default 900)")
    bench.add_argument("--nodes", type=int, default=1_000_000, help="recursion: forest nodes (the DAG has nodes/5)")
    bench.add_argument("--depth", type=int, default=1_000, help="recursion: chain depth")
    bench.add_argument("--native-chain-runs", type=int, default=1,
                       help="recursion: native runs on the chain (each costs a job per level)")
    bench.add_argument("--forest-only", action="store_true",
                       help="recursion: only the forest, sqlext alone, with the driver's peak memory")
    bench.add_argument("--levels-only", type=int, default=None, metavar="N",
                       help="recursion: only the level path's cost per level, over N levels, against native")
    bench.add_argument("--keys", type=int, default=None,
                       help="incremental: accounts in the history (default rows/8; fix it to grow the history alone)")
    bench.add_argument("--percent", type=float, default=1.0, help="incremental: increment size, %% of the history")
    bench.add_argument("--function", choices=["filter", "fk", "recursion", "moves"], default="filter",
                       help="incremental: CHANGELOG_FILTER (--rows, --keys), FK_JOIN (--left, --right), "
                            "WITH RECURSIVE over a forest growing new leaves (--nodes), or over a forest "
                            "whose nodes move to new parents (moves)")
    bench.add_argument("--engine", choices=["tables", "state_store", "both"], default="both",
                       help="incremental: where the state lives (FK_JOIN and recursion: tables only)")
    bench.add_argument("--path", choices=["auto", "walk", "jump", "levels"], default="auto",
                       help="recursion --forest-only: force the recursion's path (default auto)")
    bench.add_argument("--floor", action="store_true",
                       help="recursion --forest-only: also time one pointer-jumping round (the forest joined with itself)")

    args = parser.parse_args(argv)
    if args.command == "run":
        return _run(args.files, args.limit)
    if args.command == "sql":
        from sqlext.shell import main as shell_main

        return shell_main(args)
    if args.command == "explain":
        return _explain(args.file, args.no_spark)
    if args.command == "bench" and args.what == "scale":
        from sqlext.bench.scale import bench_scale
        from sqlext.session import local_session

        bench_scale(local_session("sqlext-bench"), [int(s) for s in args.sizes.split(",")], args.runs, args.plot)
        return 0
    if args.command == "stream":
        return _stream(args)
    if args.command == "build":
        from sqlext.models import main as build_main

        return build_main(args)
    if args.command == "bench" and args.what == "incremental":
        from sqlext.bench.incremental import bench_incremental
        from sqlext.session import local_session

        engines = ("tables", "state_store") if args.engine == "both" else (args.engine,)
        bench_incremental(local_session("sqlext-bench"), rows=args.rows, runs=args.runs, percent=args.percent,
                          keys=args.keys, engines=engines, function=args.function, left=args.left,
                          right=args.right, nodes=args.nodes)
        return 0
    if args.command == "bench" and args.what == "recursion" and args.levels_only:
        from sqlext.bench.recursion import bench_levels
        from sqlext.session import local_session

        bench_levels(local_session("sqlext-bench"), levels=args.levels_only, runs=args.runs)
        return 0
    if args.command == "bench" and args.what == "recursion" and args.forest_only:
        from sqlext.bench.recursion import bench_forest
        from sqlext.session import local_session

        bench_forest(local_session("sqlext-bench"), nodes=args.nodes, runs=args.runs, path=args.path,
                     floor=args.floor)
        return 0
    if args.command == "bench" and args.what == "recursion":
        from sqlext.bench.recursion import bench_recursion
        from sqlext.session import local_session

        bench_recursion(local_session("sqlext-bench"), nodes=args.nodes, depth=args.depth, runs=args.runs,
                        native_chain_runs=args.native_chain_runs)
        return 0
    if args.command == "bench":
        from sqlext.bench import run_benchmark

        return run_benchmark(args.what, rows=args.rows, runs=args.runs, left=args.left, right=args.right,
                             native_runs=args.native_runs, native_limit=args.native_limit)
    return 2


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sqlext")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown (not installed)"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise SystemExit(f"sqlext: cannot read {path}: {error.strerror}") from None


def _run(files: list[Path], limit: int) -> int:
    from sqlext.session import local_session

    sources = [(path, _read(path)) for path in files]
    spark = local_session()
    for path, source in sources:
        for statement in split_statements(source):
            if not _run_one(spark, path, statement, limit):
                return 1
    return 0


def _run_one(spark, path: Path, statement: Statement, limit: int) -> bool:
    from sqlext.display import format_table
    from sqlext.runner import run_and_fetch

    first_line = statement.text.splitlines()[0][:100]
    print(f"-- {path}:{statement.line}: {first_line}")
    started = time.perf_counter()
    outcome = run_and_fetch(spark, statement.text, limit)
    if outcome.error is not None:
        _report(path, statement, outcome.error)
        return False
    print(format_table(outcome.columns, outcome.rows, truncated=outcome.truncated) if outcome.columns else "OK")
    print(f"-- {time.perf_counter() - started:.2f} s\n")
    return True


def _stream(args) -> int:
    from sqlext.runner import error_message
    from sqlext.session import local_session
    from sqlext.streaming import run_available_now, stream

    statements = split_statements(_read(args.file))
    if len(statements) != 1:
        print(f"{args.file}:1:1: [UNSUPPORTED_STREAM] sqlext stream: the file holds {len(statements)} "
              "statements; an incremental run is one statement. Put one SELECT in the file.", file=sys.stderr)
        return 1
    sources, schemas = _pairs(args.source, "--source", "NAME=DIR"), _pairs(args.source_schema, "--source-schema",
                                                                           "NAME=COLUMNS")
    if sources is None or schemas is None:
        return 2
    options = dict(checkpoint=args.checkpoint, output=args.output, sources=sources, schemas=schemas,
                   source_format=args.source_format, output_format=args.output_format, engine=args.engine)
    spark = local_session("sqlext-stream")
    statement = statements[0]
    started = time.perf_counter()
    try:
        if args.every:
            query = stream(spark, statement.text, trigger=args.every, **options)
            print(f"-- streaming every {args.every}; Ctrl-C stops (the next run resumes from the checkpoint)")
            try:
                query.awaitTermination()
            except KeyboardInterrupt:
                query.stop()
            return 0
        run_available_now(spark, statement.text, **options)
    except Exception as error:  # noqa: BLE001 - only errors with a message are reported
        message = error_message(error)
        if message is None:
            raise
        _report(args.file, statement, message)
        return 1
    print(f"-- run complete in {time.perf_counter() - started:.2f} s; output in {args.output}")
    return 0


def _pairs(items: list[str], option: str, shape: str) -> dict[str, str] | None:
    """``NAME=VALUE`` options as a dict; None (after saying why) when one is not of that shape."""
    pairs = {}
    for item in items:
        name, _, value = item.partition("=")
        if not name or not value:
            print(f"sqlext stream: {option} {item!r} is not {shape}", file=sys.stderr)
            return None
        pairs[name] = value
    return pairs


def _report(path: Path, statement: Statement, message: str) -> None:
    print(f"{path}:{statement.line}:{statement.column}: {message}", file=sys.stderr)


def _explain(path: Path, no_spark: bool) -> int:
    from sqlext.api import explain
    from sqlext.rewrites.dialect import parse_one, to_sql

    source = _read(path)
    spark = None
    if not no_spark:
        from sqlext.session import local_session

        spark = local_session()
    try:
        results = explain(source, spark=spark)
    except SqlextError as error:
        print(f"{path}: {error}", file=sys.stderr)
        return 1
    for statement, result in zip(split_statements(source), results):
        print(f"== {path}:{statement.line}")
        print("-- before")
        print(result.original)
        print("-- after")
        if result.changed:
            print(to_sql(parse_one(result.sql), pretty=True))
        else:
            print("(unchanged)")
        print("-- rules")
        for note in result.notes:
            print(f"   {note}")
        if not list(result.notes):
            print("   no rule applies")
        if spark is not None:
            _print_topologies(spark, result)
        print()
    return 0


def _print_topologies(spark, result) -> None:
    """Spark's physical plan of the statement as written and as rewritten, as topologies."""
    from pyspark.errors import PySparkException
    from sqlglot import exp

    from sqlext.rewrites.dialect import parse_one
    from sqlext.topology import topology

    try:
        if not isinstance(parse_one(result.original), exp.Query):
            return
    except Exception:  # noqa: BLE001 - sqlglot cannot read it; nothing to plan here
        return
    plans = [("plan as written", result.original)]
    if result.changed:
        plans.append(("plan as rewritten", result.sql))
    for title, text in plans:
        print(f"-- {title}")
        try:
            print(topology(spark.sql(text)))
        except PySparkException as error:
            print(f"   (Spark cannot plan it here: {spark_error_summary(error)})")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

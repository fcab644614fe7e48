"""The ``sqlext`` command: run SQL files, explain rewrites, run benchmarks.

    sqlext run FILE.sql [FILE.sql ...]   run each statement (rewritten) and print results
    sqlext sql [-e SQL | -f FILE]        a spark-sql style shell (see sqlext.shell)
    sqlext explain FILE.sql [--verbose]  each statement before and after rewriting, the rules that
                                         fired (--verbose: why the others did not), each recursion's path
    sqlext build MODELS_DIR              dbt-style models (one SELECT per file) in dependency order
    sqlext stream FILE.sql --checkpoint DIR --output DIR [--source NAME=DIR] [--every INTERVAL]
                                         the statement over STREAM(...) as an incremental run
    sqlext bench filter --rows N         CHANGELOG_FILTER against hand-written Spark SQL
    sqlext bench fk --left N --right M   FK_JOIN changes against the snapshot join
    sqlext bench selfjoin --rows N       self-join queries as written against their rewrites
    sqlext bench scale --sizes A,B,C     each function at growing sizes: time and memory
    sqlext bench recursion --nodes N --depth D   WITH RECURSIVE against Spark's native recursion
    sqlext bench incremental --rows N    an incremental run of 1% new changes against the batch recompute
    sqlext serve [--stop]                a warm session (Spark Connect) for the commands of this folder
    sqlext --version                     the installed version

Every command that starts Spark takes the session options (sqlext.session_options):
--master, --conf, --packages, --jars, --driver-memory, --catalog, and --remote.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from sqlext.errors import SqlextError, spark_error_summary
from sqlext.session_options import SessionOptions, add_session_arguments, session_options
from sqlext.statements import Statement, split_statements


EXAMPLES = """\
examples:
  sqlext run sql_examples/changelog_filter.sql     run a file's statements, print each result
  sqlext sql -e "SELECT 1 AS x"                    run statements from the command line
  sqlext sql                                       an interactive spark-sql style prompt
  sqlext explain sql_examples/self_join.sql        the SQL Spark runs instead, and why
  sqlext build sql_examples/models --warehouse /tmp/wh    build a folder of dbt-style models
  sqlext stream q.sql --source accounts=DIR --checkpoint CP --output OUT
                                                   one incremental run over STREAM(accounts)
  sqlext bench fk --help                           one benchmark's options
  sqlext serve                                     keep Spark warm for the commands of this folder

Each command's own --help lists its options and examples."""


class _HelpFormatter(argparse.HelpFormatter):
    """Wraps descriptions, keeps the examples' line breaks, and shows each option's default
    where it has one worth showing (not None, False or an empty list)."""

    def _fill_text(self, text, width, indent):
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)

    def _get_help_string(self, action):
        text = action.help or ""
        if "%(default)" in text or not action.option_strings or action.default in (None, False, [], argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"


def _command(commands, name: str, summary: str, description: str, examples: str):
    """A subcommand with a one-line summary (in ``sqlext --help``), a description and examples."""
    return commands.add_parser(name, help=summary, description=description, epilog=f"examples:\n{examples}",
                               formatter_class=_HelpFormatter)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sqlext", formatter_class=_HelpFormatter, epilog=EXAMPLES,
        description="Spark SQL with FK_JOIN and CHANGELOG_FILTER over change feeds, self-join rewrites and "
                    "fast WITH RECURSIVE, batch or incremental. Every statement is rewritten by sqlext, then "
                    "run on an embedded local Spark.")
    parser.add_argument("--version", action="version", version=f"sqlext {_version()}",
                        help="print the installed version and exit")
    commands = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND",
                                     help="'sqlext COMMAND --help' shows a command's options and examples")

    run = _command(commands, "run", "run SQL files statement by statement, printing results",
                   "Run every statement of each file, rewritten by sqlext, and print each result as a table. "
                   "Every file is read whole first: a statement that does not parse runs nothing. The run stops "
                   "at the first failing statement (FILE:LINE:COLUMN: [ERROR_CLASS] message, at the place in the "
                   "file).",
                   "  sqlext run sql_examples/fk_join.sql\n  sqlext run setup.sql query.sql --limit 20")
    run.add_argument("files", nargs="+", type=Path, metavar="FILE.sql", help="SQL files; ';' ends a statement")
    run.add_argument("--limit", type=int, default=200, metavar="N", help="rows to print per result")
    add_session_arguments(run, what="the files")

    sql = _command(commands, "sql", "a spark-sql style shell: a prompt, -e SQL or -f FILE",
                   "A shell in the manner of spark-sql whose statements sqlext rewrites. Without -e or -f it "
                   "prompts; ';' ends a statement; exit; or Ctrl-D leaves; Ctrl-C cancels the running statement.",
                   '  sqlext sql\n  sqlext sql -e "SELECT 1 AS x"\n  sqlext sql -S -f sql_examples/changelog_filter.sql')
    from sqlext.shell import add_arguments

    add_arguments(sql)
    add_session_arguments(sql, what="the statements")

    explain = _command(commands, "explain", "show each statement before and after rewriting",
                       "For each statement of the file: the SQL as written, the SQL Spark runs instead, the "
                       "rules that fired (--verbose: why each other one did not), the path each recursion "
                       "takes and why, and Spark's plans as topologies.",
                       "  sqlext explain sql_examples/self_join.sql\n  sqlext explain --no-spark query.sql")
    explain.add_argument("file", type=Path, metavar="FILE.sql", help="the SQL file to explain")
    explain.add_argument("--no-spark", action="store_true",
                         help="do not start Spark (calls over unknown relations stay unexpanded)")
    explain.add_argument("--verbose", "-v", action="store_true",
                         help="say why each rule that did not fire did not (default: their names on one line)")
    add_session_arguments(explain, what="the analysis")

    build = _command(commands, "build", "build a folder of dbt-style models in dependency order",
                     "Build models in dependency order. A dbt project (a folder with dbt_project.yml) runs "
                     "through dbt and the sqlext adapter; any other folder through sqlext's own small runner "
                     "(one SELECT per *.sql file, ref('name') between them).",
                     "  sqlext build sql_examples/models --warehouse /tmp/sqlext-warehouse\n"
                     "  sqlext build my_dbt_project --select orders+ --vars day=2024-05-01")
    build.add_argument("models", type=Path, metavar="MODELS_DIR",
                       help="a folder of *.sql models, or a dbt project")
    build.add_argument("--warehouse", type=Path, default=Path("spark-warehouse"),
                       help="where table models are written as Parquet")
    build.add_argument("--select", action="append", default=[],
                       help="name, name+ (and its dependents), +name (and its ancestors); repeatable")
    build.add_argument("--vars", action="append", default=[], metavar="KEY=VALUE",
                       help="a value for var('KEY'); repeatable")
    build.add_argument("--progress-every", type=float, default=10.0, metavar="SECONDS",
                       help="seconds between 'still running' lines for a long model (0: off)")
    add_session_arguments(build, what="a folder of models (a dbt project runs on dbt's own session)")

    stream = _command(commands, "stream", "run a statement over STREAM(...) incrementally",
                      "Run one statement that reads STREAM(name) as an incremental run: each run processes "
                      "only the change files that arrived since the last one and appends its rows to --output "
                      "(emit => 'final': replaces the table there). The checkpoint keeps the progress and the "
                      "state between runs.",
                      "  sqlext stream filter.sql --source accounts=/data/changes \\\n"
                      "      --checkpoint /data/cp/filter --output /data/filtered\n"
                      "  sqlext stream filter.sql --source accounts=/data/changes --checkpoint CP --output OUT "
                      "--every '10 seconds'\n"
                      "  sqlext stream filter.sql --source accounts=/data/csv --source-format csv \\\n"
                      "      --source-option accounts.header=true --bad-records accounts=quarantine \\\n"
                      "      --checkpoint CP --output OUT")
    stream.add_argument("file", type=Path, metavar="FILE.sql", help="a file holding one statement that reads STREAM(name)")
    stream.add_argument("--checkpoint", required=True, metavar="DIR",
                        help="the query's progress and state (keep it between runs)")
    stream.add_argument("--output", required=True, metavar="DIR", help="the folder the output rows are written to")
    stream.add_argument("--source", action="append", default=[], metavar="NAME=DIR",
                        help="read STREAM(NAME) from the change files in DIR, or from the change data feed of "
                             "the Delta table in DIR; repeatable")
    stream.add_argument("--source-schema", action="append", default=[], metavar="NAME=COLUMNS",
                        help="the columns of STREAM(NAME)'s files ('id BIGINT, v STRING'), so a run can start before "
                             "the folder holds a file; repeatable")
    stream.add_argument("--source-format", default="parquet", metavar="FORMAT", help="format of the change files")
    stream.add_argument("--source-option", action="append", default=[], metavar="NAME.KEY=VALUE",
                        help="an option of Spark's reader of STREAM(NAME)'s files (accounts.header=true, "
                             "accounts.delimiter=';'); repeatable")
    stream.add_argument("--bad-records", action="append", default=[], metavar="NAME=MODE",
                        help="what a record of STREAM(NAME)'s files that cannot be read does: 'fail' (the default: "
                             "the run stops, naming it, and writes nothing) or 'quarantine' (it is set aside in "
                             "CHECKPOINT/quarantine and counted); repeatable")
    stream.add_argument("--schema-evolution", action="append", default=[], metavar="NAME=MODE",
                        help="how STREAM(NAME)'s columns may change between runs: 'fail' (the default: a changed "
                             "column stops the run), 'add_columns' (new columns are read, NULL in earlier rows), "
                             "'widen_types' (INT to BIGINT, FLOAT to DOUBLE, a wider DECIMAL) or 'evolve' (both); "
                             "repeatable")
    stream.add_argument("--output-format", default="parquet", metavar="FORMAT",
                        help="format of the output files (parquet, json, csv, ...), or delta: the output folder is a "
                             "Delta table, one commit a run")
    how = stream.add_mutually_exclusive_group()
    how.add_argument("--available-now", action="store_true",
                     help="process what arrived since the last run, then stop (what happens without --every)")
    how.add_argument("--every", metavar="INTERVAL", help="keep running, one micro-batch every INTERVAL ('10 seconds')")
    add_session_arguments(stream, remote=False)

    serve = _command(commands, "serve", "keep a warm Spark (Spark Connect) for the commands of this folder",
                     "Start Spark's Connect server in the background, with the settings a command's own Spark "
                     "would have (sqlext's defaults, the folder's catalog, the session options given here), and "
                     "return once it answers. While it runs, sqlext sql, run, explain and build started in this "
                     "folder attach to it and answer at once; elsewhere, --remote or SPARK_REMOTE names it "
                     "(sqlext serve --status prints the address). sqlext stream and the benchmarks keep Spark of "
                     "their own.",
                     "  sqlext serve\n  sqlext serve --driver-memory 8g --conf spark.sql.shuffle.partitions=8\n"
                     "  SPARK_REMOTE=\"$(sqlext serve --status)\" sqlext sql -e \"SELECT 1\"\n  sqlext serve --stop")
    from sqlext.serve import add_arguments as add_serve_arguments

    add_serve_arguments(serve)
    add_session_arguments(serve, remote=False)

    _add_bench(commands)
    return parser


def _add_bench(commands) -> None:
    """``sqlext bench NAME``: one subcommand per benchmark, each with only its own options."""
    bench = _command(commands, "bench", "benchmarks against the native Spark formulation",
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

    filter_ = _command(benchmarks, "filter", "CHANGELOG_FILTER against the hand-written LAG/CASE query",
                       "CHANGELOG_FILTER emit => 'changes' over generated account changes, against the "
                       "hand-written native query of the same change feed.",
                       "  sqlext bench filter --rows 10000000 --runs 5")
    filter_.add_argument("--rows", type=int, metavar="N", default=1_000_000, help="input changes")
    runs(filter_)

    fk = _command(benchmarks, "fk", "FK_JOIN changes against the snapshot join of the final tables",
                  "FK_JOIN emit => 'changes' over generated orders and customers (Zipf-like foreign keys), "
                  "against the plain join of the two final tables; first checks emit => 'final' against it.",
                  "  sqlext bench fk --left 5000000 --right 500000 --runs 5")
    fk.add_argument("--left", type=int, metavar="N", default=1_000_000, help="left (order) changes")
    fk.add_argument("--right", type=int, metavar="N", default=100_000, help="right (customer) changes")
    runs(fk)

    selfjoin = _command(benchmarks, "selfjoin", "self-join queries as written against their rewrites",
                        "A band self-join (uniform keys, then one hot key) and a running total written as a "
                        "triangular self-join: the queries as written (Spark joins) against sqlext's rewrites.",
                        "  sqlext bench selfjoin --rows 1000000 --runs 3 --native-limit 120")
    selfjoin.add_argument("--rows", type=int, metavar="N", default=1_000_000, help="events")
    runs(selfjoin)
    selfjoin.add_argument("--native-runs", type=int, metavar="N", default=None,
                          help="timed runs of the queries as written (default: --runs)")
    selfjoin.add_argument("--native-limit", type=float, default=900.0, metavar="SECONDS",
                          help="cancel a run of a query as written after this many seconds")

    scale = _command(benchmarks, "scale", "each function at growing sizes: time and memory",
                     "Each function on inputs of growing size, one run each after a warm-up, with the resident "
                     "memory of the Python driver and of the JVM.",
                     "  sqlext bench scale --sizes 100000,1000000,10000000 --runs 1 --plot docs/scale.svg")
    scale.add_argument("--sizes", default="100000,1000000,10000000", help="comma-separated input sizes")
    runs(scale)
    scale.add_argument("--plot", type=Path, default=None, metavar="FILE.svg", help="write the chart (SVG) here")

    recursion = _command(benchmarks, "recursion", "WITH RECURSIVE against Spark's native recursion",
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

    serve = _command(benchmarks, "serve", "a command's time on Spark of its own against attached to sqlext serve",
                     "sqlext sql -e \"SELECT 1\" as a user runs it, a new process each time, in a new folder: "
                     "first on Spark of its own (a JVM starts each time), then attached to the server sqlext "
                     "serve starts there. The session options go to both.",
                     "  sqlext bench serve --runs 5")
    runs(serve, default=5)

    incremental = _command(benchmarks, "incremental", "an incremental run of new changes against the batch recompute",
                           "A history lands and a first incremental run processes it; then, per timed run, an "
                           "increment lands, one incremental run processes it, and the batch query recomputes "
                           "everything. Both outputs are checked against each other.",
                           "  sqlext bench incremental --rows 10000000 --runs 3\n"
                           "  sqlext bench incremental --function fk --left 5000000 --right 500000 --runs 3\n"
                           "  sqlext bench incremental --function moves --nodes 1000000 --percent 0.1 --runs 3")
    incremental.add_argument("--function", choices=["filter", "fk", "recursion", "moves", "selfjoin", "pipeline"],
                             default="filter",
                             help="CHANGELOG_FILTER (--rows, --keys), FK_JOIN (--left, --right), WITH RECURSIVE "
                                  "over a forest growing new leaves (--nodes), or over a forest whose nodes move "
                                  "to new parents (moves), or a self-join of a stream in a time band (--rows "
                                  "events), against Spark's own stream-stream join too")
    incremental.add_argument("--rows", type=int, metavar="N", default=1_000_000,
                             help="filter: changes in the history; selfjoin: events")
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
    incremental.add_argument("--uri", action="store_true",
                             help="give the checkpoint, output and sources as file: URIs (as a cluster names them)")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.session = session_options(args)
    except ValueError as error:  # a session option that cannot be one: said before anything starts
        print(f"sqlext {args.command}: {error}", file=sys.stderr)
        return 2
    return run_command(args, _dispatch)


def _dispatch(args) -> int:
    if args.command == "run":
        return _run(args.files, args.limit, args.session)
    if args.command == "sql":
        from sqlext.shell import main as shell_main

        return shell_main(args)
    if args.command == "explain":
        return _explain(args.file, args.no_spark, args.verbose, args.session)
    if args.command == "stream":
        return _stream(args)
    if args.command == "build":
        from sqlext.models import main as build_main

        return build_main(args)
    if args.command == "bench":
        return _bench(args)
    if args.command == "serve":
        from sqlext.serve import main as serve_main

        return serve_main(args)
    return 2


def _bench(args) -> int:
    from sqlext.command_session import command_session

    if args.what == "serve":  # its commands start their own sessions, in processes of their own
        from sqlext.bench.serve import bench_serve

        bench_serve(args.runs, args.session.to_argv())
        return 0
    spark = command_session(args.session, "sqlext bench", "sqlext-bench", attach=False)
    if args.what == "filter":
        from sqlext.bench.changes import bench_filter

        bench_filter(spark, args.rows, args.runs)
    elif args.what == "fk":
        from sqlext.bench.changes import bench_fk

        bench_fk(spark, args.left, args.right, args.runs)
    elif args.what == "selfjoin":
        from sqlext.bench.selfjoin import bench_selfjoin

        bench_selfjoin(spark, args.rows, args.runs, args.native_runs, args.native_limit)
    elif args.what == "scale":
        from sqlext.bench.scale import bench_scale

        bench_scale(spark, [int(s) for s in args.sizes.split(",")], args.runs, args.plot)
    elif args.what == "incremental":
        from sqlext.bench.incremental import bench_incremental

        bench_incremental(spark, rows=args.rows, runs=args.runs, percent=args.percent, keys=args.keys,
                          function=args.function, left=args.left, right=args.right,
                          nodes=args.nodes, place=args.place, uri=args.uri, regions=args.regions)
    elif args.levels_only:
        from sqlext.bench.recursion import bench_levels

        bench_levels(spark, levels=args.levels_only, runs=args.runs)
    elif args.forest_only:
        from sqlext.bench.recursion import bench_forest

        bench_forest(spark, nodes=args.nodes, runs=args.runs, path=args.path, floor=args.floor)
    else:
        from sqlext.bench.recursion import bench_recursion

        bench_recursion(spark, nodes=args.nodes, depth=args.depth, runs=args.runs,
                        native_chain_runs=args.native_chain_runs)
    return 0


def run_command(args, command) -> int:
    """Run ``command(args)`` so that whatever it raises ends as one ``[CLASS] message`` line
    on standard error and a non-zero exit, never a traceback (``SQLEXT_DEBUG=1`` prints it
    too); output to a pipe that closed (``sqlext run x.sql | head -2``) ends quietly.

    Standard output is written line by line, so that a reader (``| head``, ``| tee``) sees
    each result as it comes rather than all of them at the end."""
    from sqlext.runner import debug_traceback, report_line

    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)
    try:
        status = command(args)
        sys.stdout.flush()  # a reader that went away shows here, not as Python's complaint at exit
        return status
    except BrokenPipeError:
        return _output_closed()
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # noqa: BLE001 - every error ends as one line
        debug_traceback(error)
        print(report_line(error, f"sqlext {args.command}"), file=sys.stderr)
        return 1


# The exit status of a process that SIGPIPE ended (128 + 13), as a shell shows it for
# a Unix tool whose reader went away.
EXIT_OUTPUT_CLOSED = 141


def _output_closed() -> int:
    """Standard output's reader went away: write nothing more (Python would complain again
    when it flushes standard output at exit) and stop, as Unix tools do."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no file descriptor behind sys.stdout (tests)
        pass
    return EXIT_OUTPUT_CLOSED


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sqlext")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown (not installed)"


def _read(path: Path, function: str = "sqlext") -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise SqlextError("PATH_NOT_FOUND", function=function, what="file", path=str(path),
                          fix="Check the path, or run the command in the folder the path starts from.") from None
    except OSError as error:
        raise SystemExit(f"{function}: cannot read {path}: {error.strerror}") from None


FUNCTION_RUN = "sqlext run"
FUNCTION_EXPLAIN = "sqlext explain"


def _run(files: list[Path], limit: int, options: SessionOptions = SessionOptions()) -> int:
    from sqlext.command_session import command_session
    from sqlext.syntax import check

    scripts = _parsed(files, FUNCTION_RUN)
    if scripts is None:
        return 1
    spark = command_session(options, FUNCTION_RUN)
    # every statement of every file parses before the first one runs
    for path, statements in scripts:
        problem = check(statements, FUNCTION_RUN, spark)
        if problem is not None:
            print(problem.report(path), file=sys.stderr)
            return 1
    for path, statements in scripts:
        for statement in statements:
            if not _run_one(spark, path, statement, limit):
                return 1
    return 0


def _parsed(files: list[Path], function: str) -> list[tuple[Path, list[Statement]]] | None:
    """Each file's statements, after the checks that need no Spark: the file is there, no
    string or quoted name is left open, no select list ends with a comma before FROM. None
    (after reporting the first problem at its place in its file) if one fails."""
    from sqlext.syntax import check, unclosed

    scripts = []
    for path in files:
        source = _read(path, function)
        problem = unclosed(source, function)
        statements = split_statements(source)
        problem = problem or check(statements, function, parse=False)
        if problem is not None:
            print(problem.report(path), file=sys.stderr)
            return None
        scripts.append((path, statements))
    return scripts


def _run_one(spark, path: Path, statement: Statement, limit: int) -> bool:
    from sqlext.display import format_table
    from sqlext.runner import Outcome, debug_traceback, report_line, run_and_fetch

    first_line = statement.text.splitlines()[0][:100]
    print(f"-- {path}:{statement.line}: {first_line}")
    started = time.perf_counter()
    try:
        outcome = run_and_fetch(spark, statement.text, limit, FUNCTION_RUN)
    except Exception as error:  # noqa: BLE001 - a bug in sqlext: one line, at its statement
        debug_traceback(error)
        outcome = Outcome(error=report_line(error, FUNCTION_RUN))
    if outcome.error is not None:
        _report(path, statement, outcome.error)
        return False
    print(format_table(outcome.columns, outcome.rows, truncated=outcome.truncated) if outcome.columns else "OK")
    print(f"-- {time.perf_counter() - started:.2f} s\n")
    return True


def _stream(args) -> int:
    from sqlext.runner import debug_traceback, report_line
    from sqlext.command_session import command_session
    from sqlext.streaming import run_available_now, stream

    scripts = _parsed([args.file], "sqlext stream")
    if scripts is None:
        return 1
    statements = scripts[0][1]
    if len(statements) != 1:
        print(f"{args.file}:1:1: [UNSUPPORTED_STREAM] sqlext stream: the file holds {len(statements)} "
              "statements; an incremental run is one statement. Put one SELECT in the file.", file=sys.stderr)
        return 1
    sources, schemas = _pairs(args.source, "--source", "NAME=DIR"), _pairs(args.source_schema, "--source-schema",
                                                                           "NAME=COLUMNS")
    bad_records = _pairs(args.bad_records, "--bad-records", "NAME=MODE")
    evolution = _pairs(args.schema_evolution, "--schema-evolution", "NAME=MODE")
    reader_options = _pairs(args.source_option, "--source-option", "NAME.KEY=VALUE", dotted=True)
    if sources is None or schemas is None or bad_records is None or reader_options is None or evolution is None:
        return 2
    source_options: dict = {}
    for (name, key), value in reader_options.items():
        source_options.setdefault(name, {})[key] = value
    options = dict(checkpoint=args.checkpoint, output=args.output, sources=sources, schemas=schemas,
                   source_format=args.source_format, output_format=args.output_format,
                   source_options=source_options, bad_records=bad_records, schema_evolution=evolution)
    _say_stream_runs_its_own_spark()
    spark = command_session(args.session, "sqlext stream", "sqlext-stream", attach=False)
    statement = statements[0]
    started = time.perf_counter()
    counter = None
    try:
        from sqlext.streaming.summary import RunCounter

        counter = RunCounter(spark, args.checkpoint, args.output, args.output_format)
        if args.every:
            query = stream(spark, statement.text, trigger=args.every, **options)
            print(f"-- streaming every {args.every}; Ctrl-C stops (the next run resumes from the checkpoint)")
            try:
                query.awaitTermination()
            except KeyboardInterrupt:
                query.stop()
            return 0
        query = run_available_now(spark, statement.text, **options)
        counts = counter.counts(query).describe()
    except Exception as error:  # noqa: BLE001 - every error ends as one line, at its statement
        debug_traceback(error)
        _report(args.file, statement, report_line(error, "sqlext stream"))
        return 1
    print(f"-- run complete in {time.perf_counter() - started:.2f} s: {counts}; output in {args.output}")
    return 0


def _say_stream_runs_its_own_spark() -> None:
    """An incremental run needs the driver's JVM (it reads and writes its checkpoint through
    Hadoop's FileSystem, and its micro-batch functions ask Spark's plans for sizes): a Spark
    Connect client has none, and Spark Connect runs foreachBatch functions in a Python
    process on the server, with a Connect session there too. So sqlext stream starts Spark of
    its own even where the other commands attach to a server; say so where one is named."""
    import os

    from sqlext.server_state import running_server
    from sqlext.session_options import REMOTE_ENV

    named = [f"${REMOTE_ENV}"] if os.environ.get(REMOTE_ENV) else []
    named += ["the server sqlext serve started here"] if running_server(Path.cwd()) is not None else []
    if named:
        print(f"-- sqlext stream runs on Spark of its own, not on {' or '.join(named)}: an incremental run "
              "needs the driver's JVM, which a Spark Connect session does not give", file=sys.stderr)


def _pairs(items: list[str], option: str, shape: str, dotted: bool = False) -> dict | None:
    """``NAME=VALUE`` options as a dict; None (after saying why) when one is not of that shape.
    ``dotted``: ``NAME.KEY=VALUE``, keyed by ``(NAME, KEY)`` (the last dot parts them: a source
    name may hold dots, a reader option's name does not)."""
    pairs: dict = {}
    for item in items:
        name, _, value = item.partition("=")
        if dotted:
            source, _, key = name.rpartition(".")
            name = (source, key) if source and key else ""
        if not name or not value:
            print(f"sqlext stream: {option} {item!r} is not {shape}", file=sys.stderr)
            return None
        pairs[name] = value
    return pairs


def _report(path: Path, statement: Statement, message: str) -> None:
    """An error of a statement, at its place in the file (Spark's position in the statement,
    where it gives one, moved to the file's lines and columns)."""
    from sqlext.syntax import located

    print(located(statement, message).report(path), file=sys.stderr)


def _explain(path: Path, no_spark: bool, verbose: bool = False, options: SessionOptions = SessionOptions()) -> int:
    from sqlext.api import explain
    from sqlext.language.dialect import parse_one, to_sql

    from sqlext.syntax import check

    scripts = _parsed([path], FUNCTION_EXPLAIN)
    if scripts is None:
        return 1
    source = _read(path, FUNCTION_EXPLAIN)
    spark = None
    if not no_spark:
        from sqlext.command_session import command_session

        spark = command_session(options, "sqlext explain")
    problem = check(scripts[0][1], FUNCTION_EXPLAIN, spark)
    if problem is not None:
        print(problem.report(path), file=sys.stderr)
        return 1
    try:
        results = explain(spark, source)
    except Exception as error:  # noqa: BLE001 - every error ends as one line
        from sqlext.runner import debug_traceback, report_line

        debug_traceback(error)
        print(f"{path}: {report_line(error, 'sqlext explain')}", file=sys.stderr)
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
        for line in result.notes.lines(verbose, more="" if verbose else " (--verbose says why)"):
            print(f"   {line}")
        if not list(result.notes):
            print("   no rule applies")
        if result.paths:
            print("-- recursion")
            for line in result.paths:
                print(f"   {line}")
        if spark is not None:
            _print_topologies(spark, result)
        print()
    return 0


def _print_topologies(spark, result) -> None:
    """Spark's physical plan of the statement as written and as rewritten, as topologies."""
    from pyspark.errors import PySparkException
    from sqlglot import exp

    from sqlext.language.dialect import parse_one
    from sqlext.runner import is_connect
    from sqlext.topology import topology

    try:
        if not isinstance(parse_one(result.original), exp.Query):
            return
    except Exception:  # noqa: BLE001 - sqlglot cannot read it; nothing to plan here
        return
    plans = [("plan as written", result.original)]
    if result.changed and not result.recursions:
        plans.append(("plan as rewritten", result.sql))
    elif result.changed:
        # RECURSIVE_EXPAND is no function Spark knows: each recursion runs first (on the path
        # said above) and the statement reads its result as a temporary view
        print("-- plan as rewritten: each recursion runs first, as said above; the statement then "
              "reads its result as a temporary view")
    for title, text in plans:
        print(f"-- {title}")
        try:
            frame = spark.sql(text)
            if is_connect(spark):
                # the topology reads the plan through the driver's JVM, which a Spark Connect
                # client does not have: Spark's own text of the physical plan instead
                print(frame._explain_string(mode="simple").strip())
            else:
                print(topology(frame))
        except PySparkException as error:
            print(f"   (Spark cannot plan it here: {spark_error_summary(error)})")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""``sqlext explain``: each statement of a file before and after rewriting, the rules that fired
(and, with --verbose, why the others did not), each recursion's path, and Spark's plans as
topologies."""

from __future__ import annotations

import sys
from pathlib import Path

from sqlglot import exp

from sqlext.api import explain
from sqlext.cli.files import parsed, read
from sqlext.cli.parser import add_command
from sqlext.command_session import command_session
from sqlext.errors import spark_error_summary
from sqlext.language.dialect import parse_one, to_sql
from sqlext.runner import debug_traceback, is_connect, report_line
from sqlext.session_options import SessionOptions, add_session_arguments
from sqlext.statements import split_statements
from sqlext.syntax import check
from sqlext.topology import topology

FUNCTION_EXPLAIN = "sqlext explain"


def add_parser(commands) -> None:
    """``sqlext explain FILE.sql``."""
    parser = add_command(
        commands, "explain", "show each statement before and after rewriting",
        "For each statement of the file: the SQL as written, the SQL Spark runs instead, the "
        "rules that fired (--verbose: why each other one did not), the path each recursion "
        "takes and why, and Spark's plans as topologies.",
        "  sqlext explain sql_examples/self_join.sql\n  sqlext explain --no-spark query.sql")
    parser.add_argument("file", type=Path, metavar="FILE.sql", help="the SQL file to explain")
    parser.add_argument("--no-spark", action="store_true",
                        help="do not start Spark (calls over unknown relations stay unexpanded)")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="say why each rule that did not fire did not (default: their names on one line)")
    add_session_arguments(parser, what="the analysis")


def main(args) -> int:
    return explain_file(args.file, args.no_spark, args.verbose, args.session)


def explain_file(path: Path, no_spark: bool, verbose: bool = False,
                 options: SessionOptions = SessionOptions()) -> int:
    scripts = parsed([path], FUNCTION_EXPLAIN)
    if scripts is None:
        return 1
    source = read(path, FUNCTION_EXPLAIN)
    spark = None
    if not no_spark:
        spark = command_session(options, "sqlext explain")
    problem = check(scripts[0][1], FUNCTION_EXPLAIN, spark)
    if problem is not None:
        print(problem.report(path), file=sys.stderr)
        return 1
    try:
        results = explain(spark, source)
    except Exception as error:  # noqa: BLE001 - every error ends as one line
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
    # pyspark loads where Spark runs, not for sqlext --help or explain --no-spark
    from pyspark.errors import PySparkException

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

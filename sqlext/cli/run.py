"""``sqlext run``: run SQL files statement by statement, printing each result."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sqlext.cli.files import parsed, report
from sqlext.cli.parser import add_command
from sqlext.command_session import command_session
from sqlext.display import format_table
from sqlext.progress import StatusLine, spark_status
from sqlext.runner import Outcome, debug_traceback, report_line, run_and_fetch
from sqlext.session_options import SessionOptions, add_session_arguments
from sqlext.statements import Statement
from sqlext.syntax import check

FUNCTION_RUN = "sqlext run"


def add_parser(commands) -> None:
    """``sqlext run FILE.sql ...``."""
    parser = add_command(
        commands, "run", "run SQL files statement by statement, printing results",
        "Run every statement of each file, rewritten by sqlext, and print each result as a table. "
        "Every file is read whole first: a statement that does not parse runs nothing. The run stops "
        "at the first failing statement (FILE:LINE:COLUMN: [ERROR_CLASS] message, at the place in the "
        "file).",
        "  sqlext run sql_examples/fk_join.sql\n  sqlext run setup.sql query.sql --limit 20")
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE.sql", help="SQL files; ';' ends a statement")
    parser.add_argument("--limit", type=int, default=200, metavar="N", help="rows to print per result")
    add_session_arguments(parser, what="the files")


def main(args) -> int:
    return run_files(args.files, args.limit, args.session)


def run_files(files: list[Path], limit: int, options: SessionOptions = SessionOptions()) -> int:
    scripts = parsed(files, FUNCTION_RUN)
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


def _run_one(spark, path: Path, statement: Statement, limit: int) -> bool:
    first_line = statement.text.splitlines()[0][:100]
    print(f"-- {path}:{statement.line}: {first_line}")
    started = time.perf_counter()
    try:
        with StatusLine(spark_status(spark)):  # on a terminal, cleared before the result prints
            outcome = run_and_fetch(spark, statement.text, limit, FUNCTION_RUN)
    except Exception as error:  # noqa: BLE001 - a bug in sqlext: one line, at its statement
        debug_traceback(error)
        outcome = Outcome(error=report_line(error, FUNCTION_RUN))
    if outcome.error is not None:
        report(path, statement, outcome.error)
        return False
    print(format_table(outcome.columns, outcome.rows, truncated=outcome.truncated) if outcome.columns else "OK")
    print(f"-- {time.perf_counter() - started:.2f} s\n")
    return True

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

Each command is a module of this package holding its options and what it does (run.py for
sqlext run, explain.py, stream.py, bench.py, ...); parser.py is what their parsers are made
with, files.py how they read SQL files. This module builds the parser from them and runs one.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import metadata

from sqlext.cli import bench, build, explain, run, serve, sql, stream
from sqlext.cli.parser import HelpFormatter
from sqlext.functions import catalogue
from sqlext.runner import debug_traceback, report_line
from sqlext.session_options import session_options

# each command's module, in the order sqlext --help lists them
COMMANDS = {"run": run, "sql": sql, "explain": explain, "build": build, "stream": stream, "serve": serve,
            "bench": bench}

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


def functions_help() -> str:
    """sqlext's functions, one line each, from the function catalogue."""
    return f"functions:\n{catalogue.listing()}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sqlext", formatter_class=HelpFormatter, epilog=f"{functions_help()}\n\n{EXAMPLES}",
        description="Spark SQL with FK_JOIN and CHANGELOG_FILTER over change feeds, self-join rewrites and "
                    "fast WITH RECURSIVE, batch or incremental. Every statement is rewritten by sqlext, then "
                    "run on an embedded local Spark.")
    parser.add_argument("--version", action="version", version=f"sqlext {_version()}",
                        help="print the installed version and exit")
    commands = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND",
                                     help="'sqlext COMMAND --help' shows a command's options and examples")
    for command in COMMANDS.values():
        command.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.argv = argv  # as given: sqlext stream hands it on to the server it attaches to
    try:
        args.session = session_options(args)
    except ValueError as error:  # a session option that cannot be one: said before anything starts
        print(f"sqlext {args.command}: {error}", file=sys.stderr)
        return 2
    return run_command(args, _dispatch)


def _dispatch(args) -> int:
    """Run the command ``args`` name; its status."""
    command = COMMANDS.get(args.command)
    return 2 if command is None else command.main(args)


def run_command(args, command) -> int:
    """Run ``command(args)`` so that whatever it raises ends as one ``[CLASS] message`` line
    on standard error and a non-zero exit, never a traceback (``SQLEXT_DEBUG=1`` prints it
    too); output to a pipe that closed (``sqlext run x.sql | head -2``) ends quietly.

    Standard output is written line by line, so that a reader (``| head``, ``| tee``) sees
    each result as it comes rather than all of them at the end."""
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
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no file descriptor behind sys.stdout (tests)
        pass
    return EXIT_OUTPUT_CLOSED


def _version() -> str:
    try:
        return metadata.version("sqlext")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown (not installed)"

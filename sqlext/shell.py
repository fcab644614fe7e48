"""``sqlext sql``: a shell in the manner of ``spark-sql`` whose statements sqlext rewrites.

    sqlext sql                      an interactive prompt
    sqlext sql -e "SELECT ...; ..." run the statements and exit
    sqlext sql -f FILE.sql          run the file's statements and exit
    options: -S (silent), --limit N (rows shown per result), -i FILE (statements run first),
             --database NAME (USE NAME first), --output-format table|csv|tsv, and the session
             options of every command (sqlext.session_options: --conf, --master, --catalog, --remote, ...)

At the prompt a statement ends with ``;`` outside strings, quoted identifiers and comments,
so it may span lines (the continuation prompt shows that one is unfinished). ``exit;``,
``quit;``, ``\\q`` or Ctrl-D leave the shell. Lines are kept in a history file: ``$SQLEXT_HISTORY``,
else ``~/.sqlext_history``.

Every statement runs through the statement runner, as in ``sqlext run``: rewritten, then
handed to Spark. It runs on a worker thread inside a Spark job group, so Ctrl-C while it runs
cancels the group's jobs and the prompt comes back; Ctrl-C at the prompt drops the line being
typed (and an unfinished statement). Results are printed as tables on standard output, errors
as ``[CLASS] message`` on standard error, each followed (unless ``-S``) by the time it took; a
statement that runs longer than a second shows a progress line on a terminal meanwhile
(:class:`sqlext.progress.StatusLine`).

``-e`` and ``-f`` stop at the first failing statement and exit with status 1 (130 if Ctrl-C
cancelled a statement); the interactive shell reports the error and reads on. Statements piped
in (standard input not a terminal) all run, the last one also without ``;``, and the exit
status is 1 if any failed. Input that ends inside a string or quoted name is an error
(``[UNCLOSED_QUOTE]``), never a statement dropped in silence.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import itertools
import logging
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from sqlglot import exp

from sqlext.command_session import command_session
from sqlext.display import format_table, format_value
from sqlext.language.dialect import to_sql
from sqlext.progress import StatusLine, spark_status
from sqlext.runner import debug_traceback, is_connect, report_line, run_and_fetch
from sqlext.session_options import SessionOptions
from sqlext.statements import Statement, complete_statements, position, split_statements, unclosed_quote
from sqlext.syntax import located, unclosed_error

FUNCTION = "sqlext sql"
PROMPT = "sqlext> "
CONTINUATION = "      > "
CANCELLED = "Query cancelled."
HISTORY_ENV = "SQLEXT_HISTORY"
HISTORY_LENGTH = 1000
# what leaves the shell: spark-sql's words (with or without ';'), and psql's \q
EXIT_WORDS = ("exit", "quit", "\\q")
OUTPUT_FORMATS = ("table", "csv", "tsv")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group()
    what.add_argument("-e", dest="execute", metavar="SQL", help="run these statements (separated by ';') and exit")
    what.add_argument("-f", dest="file", metavar="FILE", type=Path, help="run the statements of FILE and exit")
    parser.add_argument("-i", dest="init", metavar="FILE", type=Path,
                        help="run the statements of FILE first (before -e, -f or the prompt)")
    parser.add_argument("--database", metavar="NAME", help="the database to use (USE NAME) before anything else")
    parser.add_argument("--output-format", choices=OUTPUT_FORMATS, default="table",
                        help="results as tables, or as CSV or TSV with a header line (for scripts)")
    parser.add_argument("-S", "--silent", action="store_true", help="do not print the time each statement took")
    parser.add_argument("--limit", type=int, default=200, metavar="N", help="rows to print per result")


def main(args: argparse.Namespace) -> int:
    script = init = None
    for path in (args.file, getattr(args, "init", None)):
        if path is None:
            continue
        try:
            text = path.read_text()
        except OSError as error:
            print(f"sqlext sql: cannot read {path}: {error.strerror}", file=sys.stderr)
            return 1
        if path is args.file:
            script = text
        else:
            init = text

    # sqlglot warns when it reads a statement as an opaque command (SET, for example); the
    # statement still runs, so the warning is noise at a prompt
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    # the threads that start with the session (py4j's among them) must not take Ctrl-C
    # either (see _block_ctrl_c); the main thread takes it again afterwards
    try:
        with _ctrl_c_blocked():
            spark = command_session(getattr(args, "session", None) or SessionOptions(), FUNCTION, "sqlext-sql")
    except KeyboardInterrupt:  # Ctrl-C while Spark started
        return 130
    # PySpark's own SIGINT handler cancels every job of the context and raises; the shell
    # cancels only its running statement's job group, so Ctrl-C goes back to raising
    # KeyboardInterrupt, which the shell catches.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    shell = Shell(spark, limit=args.limit, silent=args.silent, output_format=getattr(args, "output_format", "table"))
    try:
        database = getattr(args, "database", None)
        if database is not None and not shell.use(database):
            return 1
        if init is not None:
            status = shell.run_script(init, source=args.init)
            if status != 0:
                return status
        if args.execute is not None:
            return shell.run_script(args.execute, source=None)
        if script is not None:
            return shell.run_script(script, source=args.file)
        return shell.interactive(history_file())
    finally:
        shell.close()


def history_file() -> Path:
    return Path(os.environ.get(HISTORY_ENV) or Path.home() / ".sqlext_history")


class Cancelled(Exception):
    """Ctrl-C cancelled the statement that was running."""


class Shell:
    def __init__(self, spark, limit: int = 200, silent: bool = False, output_format: str = "table"):
        self.spark = spark
        self.limit = limit
        self.silent = silent
        self.output_format = output_format
        # one worker thread for every statement: PySpark pins each Python thread to a JVM
        # thread, and the job group is a property of that thread
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlext-sql",
                                          initializer=_block_ctrl_c)
        self._groups = itertools.count(1)
        # the progress line of a long statement, on a terminal (-S: none)
        self._status = None if silent else spark_status(spark)

    def close(self) -> None:
        self._worker.shutdown(wait=False)

    # running statements

    def execute(self, text: str):
        """Run one statement on the worker thread; return its ``Outcome``. Raises
        :class:`Cancelled` if Ctrl-C interrupted it (its jobs are then cancelled)."""
        group = f"sqlext-sql-{os.getpid()}-{next(self._groups)}"
        future = self._worker.submit(self._run_in_group, group, text)
        try:
            with StatusLine(self._status) if self._status is not None else contextlib.nullcontext():
                return _wait(future)
        except KeyboardInterrupt:
            self._cancel(group, future)
            raise Cancelled() from None

    def _run_in_group(self, group: str, text: str):
        """On a Spark Connect session the group is a tag of the thread's operations."""
        if is_connect(self.spark):
            self.spark.addTag(group)
            try:
                return run_and_fetch(self.spark, text, self.limit, FUNCTION)
            finally:
                self.spark.removeTag(group)
        self.spark.sparkContext.setJobGroup(group, text[:200], interruptOnCancel=True)
        return run_and_fetch(self.spark, text, self.limit, FUNCTION)

    def _cancel(self, group: str, future) -> None:
        """Cancel the group's jobs until the statement has stopped: a statement may start
        further jobs (a recursion runs one per level), so the cancel is repeated."""
        cancel = self.spark.interruptTag if is_connect(self.spark) else self.spark.sparkContext.cancelJobGroup
        while True:
            try:
                cancel(group)
                future.exception(timeout=0.5)
                return
            except FutureTimeout:
                continue
            except KeyboardInterrupt:
                print("Still cancelling the query...", file=sys.stderr, flush=True)

    def run_statement(self, statement: Statement, source: Path | None = None, show_source: bool = False) -> bool:
        """Run a statement and print its result or error; True if it succeeded."""
        started = time.perf_counter()
        try:
            outcome = self.execute(statement.text)
        except Cancelled:
            print(CANCELLED, file=sys.stderr, flush=True)
            raise
        except Exception as error:  # noqa: BLE001 - a bug in sqlext: one line, keep the shell
            debug_traceback(error)
            print(report_line(error, FUNCTION), file=sys.stderr, flush=True)
            return False
        seconds = time.perf_counter() - started
        if outcome.error is not None:
            if show_source:  # at its place in the file, Spark's position moved to the file's lines
                print(located(statement, outcome.error).report(source), file=sys.stderr, flush=True)
            else:
                print(outcome.error, file=sys.stderr, flush=True)
            return False
        if outcome.columns and self.output_format != "table":
            print(format_delimited(outcome.columns, outcome.rows, self.output_format), end="", flush=True)
            if outcome.truncated:  # on standard error: standard output holds the data alone
                print(f"-- the first {len(outcome.rows)} rows only; --limit N shows more", file=sys.stderr, flush=True)
            fetched = f", Fetched {len(outcome.rows)} row(s)"
        elif outcome.columns:
            print(format_table(outcome.columns, outcome.rows, truncated=outcome.truncated), flush=True)
            fetched = f", Fetched {len(outcome.rows)} row(s)"
        else:
            if self.output_format == "table":
                print("OK", flush=True)
            fetched = ""
        if not self.silent:
            print(f"Time taken: {seconds:.3f} seconds{fetched}", file=sys.stderr, flush=True)
        return True

    def use(self, database: str) -> bool:
        """Make ``database`` the current one (``--database``); False after reporting an error."""
        statement = to_sql(exp.Use(this=exp.Table(this=exp.to_identifier(database, quoted=True))))
        outcome = self.execute(statement)
        if outcome.error is not None:
            print(outcome.error, file=sys.stderr, flush=True)
            return False
        return True

    def run_script(self, text: str, source: Path | None) -> int:
        """Run every statement of ``text`` (``-e`` or ``-f``); stop at the first failure."""
        statements = split_statements(text)
        unclosed = unclosed_quote(text)
        try:
            for index, statement in enumerate(statements):
                if _is_exit(statement.text):
                    return 0
                if unclosed is not None and index == len(statements) - 1:  # the open quote is in it
                    report_unclosed(unclosed, source)
                    return 1
                if not self.run_statement(statement, source, show_source=source is not None):
                    return 1
        except (Cancelled, KeyboardInterrupt):
            return 130
        return 0

    def run_rest(self, read: str, rest: str) -> bool:
        """At the end of piped input: run the statement ``rest`` holds without a ``;`` (``read``
        is all the input, ``rest`` its end); False if it failed or never ends."""
        unclosed = unclosed_quote(rest)
        if unclosed is not None:  # its text runs to the end of the input: place it there
            report_unclosed(Statement(unclosed.text, *position(read, len(read) - len(unclosed.text))), None)
            return False
        return all(_is_exit(statement.text) or self.run_statement(statement) for statement in split_statements(rest))

    # the prompt

    def interactive(self, history: Path) -> int:
        """The prompt; on piped input (not a terminal), the exit status says whether every
        statement succeeded."""
        readline = _load_history(history)
        prompts = sys.stdin.isatty()
        pending = ""
        read = ""  # piped input so far, to place an error in it
        failed = False
        try:
            while True:
                prompt = (CONTINUATION if pending else PROMPT) if prompts else ""
                try:
                    line = input(prompt)
                except EOFError:  # Ctrl-D, or the end of piped input
                    if prompts:
                        print()
                        return 0
                    try:
                        failed = not self.run_rest(read, pending) or failed
                    except (Cancelled, KeyboardInterrupt):
                        return 130
                    return 1 if failed else 0
                except KeyboardInterrupt:  # Ctrl-C at the prompt drops what is being typed
                    print()
                    pending = ""
                    continue
                if not pending and line.strip().rstrip(";").strip().lower() in EXIT_WORDS:
                    return 1 if failed else 0
                pending += line + "\n"
                if not prompts:
                    read += line + "\n"
                statements, rest = complete_statements(pending)
                pending = rest if rest.strip() else ""
                try:
                    for statement in statements:
                        if _is_exit(statement.text):
                            return 1 if failed else 0
                        if not self.run_statement(statement) and not prompts:
                            failed = True
                except (Cancelled, KeyboardInterrupt):
                    # Ctrl-C while a statement ran (or its result was printed): the statements
                    # typed after it are dropped too
                    pending = ""
        finally:
            if readline is not None:
                try:
                    readline.write_history_file(str(history))
                except OSError as error:
                    print(f"sqlext sql: cannot write the history to {history}: {error.strerror}", file=sys.stderr)


def format_delimited(columns, rows, output_format: str) -> str:
    r"""A result as CSV (NULL as an empty field, quoted where needed) or TSV (spark-sql's text:
    tab-separated, NULL as NULL), each with a header line.

    >>> print(format_delimited(["a", "b"], [(1, None), ("x,y", 2.5)], "csv"), end="")
    a,b
    1,
    "x,y",2.5
    >>> format_delimited(["a", "b"], [(1, None)], "tsv")
    'a\tb\n1\tNULL\n'
    """
    if output_format == "tsv":
        return "".join("\t".join(line) + "\n" for line in
                       [list(columns), *([format_value(v) for v in row] for row in rows)])
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(["" if v is None else format_value(v) for v in row] for row in rows)
    return out.getvalue()


def report_unclosed(quote: Statement, source: Path | None) -> None:
    """Report input that ends inside the string or quoted name ``quote`` starts."""
    where = f"{source}:{quote.line}:{quote.column}: " if source is not None else ""
    print(f"{where}{unclosed_error(quote, FUNCTION)}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _ctrl_c_blocked():
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _block_ctrl_c() -> None:
    """Block SIGINT in this thread and in the threads it starts (they inherit the mask).

    The kernel hands a process's signal to any thread that does not block it. Python runs
    its handler on the main thread only, and readline notices it only if the signal
    interrupts the main thread's wait for a key: a Ctrl-C taken by another thread (a
    thread Arrow or py4j started while a statement ran) would be seen at the next key.
    """
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def _wait(future):
    # a short timeout keeps the main thread where Python delivers Ctrl-C
    while True:
        try:
            return future.result(timeout=0.25)
        except FutureTimeout:
            continue


def _is_exit(text: str) -> bool:
    return text.strip().lower() in EXIT_WORDS


def _load_history(history: Path):
    try:
        import readline
    except ImportError:  # no readline on this platform: a prompt without history
        return None
    readline.set_history_length(HISTORY_LENGTH)
    try:
        readline.read_history_file(str(history))
    except (FileNotFoundError, OSError):
        pass
    return readline

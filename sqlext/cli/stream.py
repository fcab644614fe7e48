"""``sqlext stream``: one statement over ``STREAM(...)`` as an incremental run
(:mod:`sqlext.streaming`): in the server ``sqlext serve`` started in the folder, where one runs
(:mod:`sqlext.server.streams`), else on Spark of the command's own. Ctrl-C stops a run in one
line: its queries are stopped, then Spark, and the JVM has ended when the command returns."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

from sqlext.cli.files import parsed, report
from sqlext.cli.parser import add_command
from sqlext.command_session import command_session
from sqlext.errors import surfaced
from sqlext.local_spark import quiet_stop
from sqlext.progress import StatusLine, spark_status
from sqlext.runner import debug_traceback, report_line
from sqlext.server_state import running_server
from sqlext.server.streams import stop_queries
from sqlext.session_options import REMOTE_ENV, add_session_arguments
from sqlext.streaming import run_available_now, stream
from sqlext.streaming.summary import RunCounter


def add_parser(commands) -> None:
    """``sqlext stream FILE.sql --checkpoint DIR --output DIR ...``."""
    parser = add_command(
        commands, "stream", "run a statement over STREAM(...) incrementally",
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
    parser.add_argument("file", type=Path, metavar="FILE.sql", help="a file holding one statement that reads STREAM(name)")
    parser.add_argument("--checkpoint", required=True, metavar="DIR",
                        help="the query's progress and state (keep it between runs)")
    parser.add_argument("--output", required=True, metavar="DIR", help="the folder the output rows are written to")
    parser.add_argument("--source", action="append", default=[], metavar="NAME=DIR",
                        help="read STREAM(NAME) from the change files in DIR, or from the change data feed of "
                             "the Delta table in DIR; repeatable")
    parser.add_argument("--source-schema", action="append", default=[], metavar="NAME=COLUMNS",
                        help="the columns of STREAM(NAME)'s files ('id BIGINT, v STRING'), so a run can start before "
                             "the folder holds a file; repeatable")
    parser.add_argument("--source-format", action="append", default=[], metavar="[NAME=]FORMAT",
                        help="format of the change files (parquet, the default, json, csv, ...): FORMAT for every "
                             "source, NAME=FORMAT for STREAM(NAME)'s; repeatable")
    parser.add_argument("--source-option", action="append", default=[], metavar="NAME.KEY=VALUE",
                        help="an option of Spark's reader of STREAM(NAME)'s files (accounts.header=true, "
                             "accounts.delimiter=';'); repeatable")
    parser.add_argument("--bad-records", action="append", default=[], metavar="NAME=MODE",
                        help="what a record of STREAM(NAME)'s files that cannot be read does: 'fail' (the default: "
                             "the run stops, naming it, and writes nothing) or 'quarantine' (it is set aside in "
                             "CHECKPOINT/quarantine and counted); repeatable")
    parser.add_argument("--schema-evolution", action="append", default=[], metavar="NAME=MODE",
                        help="how STREAM(NAME)'s columns may change between runs: 'fail' (the default: a changed "
                             "column stops the run), 'add_columns' (new columns are read, NULL in earlier rows), "
                             "'widen_types' (INT to BIGINT, FLOAT to DOUBLE, a wider DECIMAL) or 'evolve' (both); "
                             "repeatable")
    parser.add_argument("--output-format", default="parquet", metavar="FORMAT",
                        help="format of the output files (parquet, json, csv, ...), or delta: the output folder is a "
                             "Delta table, one commit a run")
    parser.add_argument("--full-refresh", action="store_true",
                        help="start over: delete the checkpoint and the output folder (saying which first), then "
                             "run over the whole history; refused where a folder holds what no run of sqlext made")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--available-now", action="store_true",
                     help="process what arrived since the last run, then stop (what happens without --every)")
    how.add_argument("--every", metavar="INTERVAL", help="keep running, one micro-batch every INTERVAL ('10 seconds')")
    add_session_arguments(parser, remote=False)


def main(args) -> int:
    server = attachable_server(args.session)
    if server is not None:
        from sqlext.server.streams import run_attached

        return run_attached(server, args.argv[args.argv.index("stream") + 1:])
    prepared = prepare(args)
    if isinstance(prepared, int):
        return prepared
    say_stream_runs_its_own_spark()
    spark = command_session(args.session, "sqlext stream", "sqlext-stream", attach=False)
    stopping = threading.Event()
    outcome: list = []
    worker = threading.Thread(target=lambda: outcome.append(_status(spark, args, prepared, stopping)),
                              name="sqlext-stream-run", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except KeyboardInterrupt:  # Ctrl-C: stop the run's queries, then Spark, and say so in one line
        stopping.set()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C would interrupt the stopping
        quiet_stop(spark)  # what stopping under running tasks makes Spark and py4j say is not the user's
        while worker.is_alive():
            stop_queries(spark)
            worker.join(0.2)
        end_spark(spark)
    return outcome[0] if outcome else 1


def say_stream_runs_its_own_spark() -> None:
    """An incremental run needs the driver's JVM (it reads and writes its checkpoint through
    Hadoop's FileSystem, and its micro-batch functions ask Spark's plans for sizes): a Spark
    Connect client has none. A server ``sqlext serve`` started here carries the run out in its
    own driver (:mod:`sqlext.server.streams`); any other Spark Connect server cannot, so where
    ``$SPARK_REMOTE`` names one, the run starts Spark of its own, and says so."""
    if os.environ.get(REMOTE_ENV):
        print(f"-- sqlext stream runs on Spark of its own, not on ${REMOTE_ENV}: an incremental run needs the "
              "driver's JVM, which a Spark Connect session does not give", file=sys.stderr)


def attachable_server(options):
    """The server ``sqlext serve`` started in the working folder, where this run may be carried
    out there: it runs, and no option asks for Spark of the run's own (``--master`` and the
    other options that apply where Spark starts)."""
    if options.master or options.starting_options() or os.environ.get(REMOTE_ENV):
        return None
    server = running_server(Path.cwd())
    return server if server is not None and server.stream_port else None


def run_on(spark, argv: list[str], stopping: threading.Event) -> int:
    """``sqlext stream ARGV`` on ``spark`` (the server's session for it), with the settings
    ``--conf`` gives; its exit status. ``stopping`` is set where the command asked to stop."""
    import argparse

    from sqlext.session_options import session_options

    parser = argparse.ArgumentParser(prog="sqlext")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["stream", *argv])
    args.session = session_options(args)
    for key, value in args.session.conf:
        spark.conf.set(key, value)
    prepared = prepare(args)
    return prepared if isinstance(prepared, int) else _status(spark, args, prepared, stopping)


def prepare(args):
    """The statement and the run's options from the command line; an exit status where they
    cannot be (after saying why)."""
    scripts = parsed([args.file], "sqlext stream")
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
    source_format = _formats(args.source_format, sources)
    if sources is None or schemas is None or bad_records is None or reader_options is None or evolution is None \
            or source_format is None:
        return 2
    source_options: dict = {}
    for (name, key), value in reader_options.items():
        source_options.setdefault(name, {})[key] = value
    options = dict(checkpoint=args.checkpoint, output=args.output, sources=sources, schemas=schemas,
                   source_format=source_format, output_format=args.output_format,
                   source_options=source_options, bad_records=bad_records, schema_evolution=evolution,
                   full_refresh=args.full_refresh)
    return statements[0], options


STOPPED = "-- stopped (Ctrl-C); what the run committed is kept, and the next run goes on from the checkpoint"


@surfaced("sqlext stream")  # its errors name the command, not the Python functions it calls
def _status(spark, args, prepared, stopping: threading.Event) -> int:
    """Carry out the run; its exit status (130 where it was stopped before it ended)."""
    statement, options = prepared
    started = time.perf_counter()
    try:
        counter = RunCounter(spark, args.checkpoint, args.output, args.output_format, fresh=args.full_refresh)
        if args.every:
            query = stream(spark, statement.text, trigger=args.every, **options)
            print(f"-- streaming every {args.every}; Ctrl-C stops (the next run resumes from the checkpoint)")
            with StatusLine(spark_status(spark), idle=False) as progress:  # while a batch runs
                while not stopping.is_set() and not query.awaitTermination(1):
                    line = counter.batch_line(query)  # one line a batch, on a terminal or in a log
                    if line is not None:
                        with progress.above():
                            print(line)
            if stopping.is_set():
                stop_queries(spark)
                print(STOPPED, file=sys.stderr)
            return 0
        with StatusLine(spark_status(spark)):
            query = run_available_now(spark, statement.text, **options)
            counts = None if stopping.is_set() else counter.counts(query).describe()
        if stopping.is_set():
            print(STOPPED, file=sys.stderr)
            return 130
    except Exception as error:  # noqa: BLE001 - every error ends as one line, at its statement
        if stopping.is_set():  # the stop interrupted it: what it says is the stop's doing
            print(STOPPED, file=sys.stderr)
            return 0 if args.every else 130
        debug_traceback(error)
        report(args.file, statement, report_line(error, "sqlext stream"))
        return 1
    print(f"-- run complete in {time.perf_counter() - started:.2f} s: {counts}; output in {args.output}")
    return 0


def end_spark(spark) -> None:
    """Stop Spark and its JVM before the command returns (PySpark would leave the JVM to notice,
    seconds later, that Python has gone), saying nothing of what the ending interrupts."""
    import logging

    from pyspark import SparkContext

    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    gateway = SparkContext._gateway
    try:
        spark.stop()
    except Exception:  # noqa: BLE001 - ending anyway
        pass
    process = getattr(gateway, "proc", None)
    if process is not None:
        try:
            gateway.shutdown()
        except Exception:  # noqa: BLE001
            pass
        process.terminate()
        try:
            process.wait(20)
        except Exception:  # noqa: BLE001 - it would not end: end it
            process.kill()


def _formats(items: list[str], sources: dict | None):
    """``--source-format``: a bare FORMAT is every source's (Parquet without one), NAME=FORMAT
    one source's. One format for all, or a format by name for every source (and for the names
    given that no source has: the run refuses those); None (after saying why) where two bare
    formats are given, or an item is of neither shape."""
    shared = list(dict.fromkeys(item for item in items if "=" not in item))
    named = _pairs([item for item in items if "=" in item], "--source-format", "NAME=FORMAT or FORMAT")
    if len(shared) > 1:
        print(f"sqlext stream: --source-format gives {' and '.join(shared)} for every source; give one FORMAT for "
              "every source, and NAME=FORMAT for each source of another", file=sys.stderr)
        return None
    if named is None:
        return None
    default = shared[0] if shared else "parquet"
    return {**{name: default for name in sources or {}}, **named} if named else default


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

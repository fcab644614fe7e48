"""Incremental runs: a statement over ``STREAM(source)`` as a Spark Structured Streaming query.

``STREAM(name)`` (the spelling of Spark Declarative Pipelines) reads a source as a stream: a
streaming temporary view (any streaming DataFrame: files, Kafka, ...), a table Spark can read
as a stream, or a folder of change files given with ``sources={name: folder}`` (the embedded
default; Parquet unless ``source_format`` says otherwise). A table function whose input is
``TABLE(STREAM(name))`` runs incrementally, keeping its state in the query's checkpoint; the
rest of the statement is plain Spark SQL on the stream. A ``WITH RECURSIVE`` over a stream of
edges runs incrementally on its own (:mod:`sqlext.streaming.recursion`).
:func:`run_into_table` runs a statement into a catalog table (dbt's incremental models).

:func:`stream` starts the query (by default ``availableNow``: process what arrived since the
last run, then stop); :func:`streaming_frame` gives the streaming DataFrame for any sink.
"""

from __future__ import annotations

import itertools
from contextlib import ExitStack
from typing import Mapping

from sqlglot import exp

from sqlext.functions.arguments import find_calls
from sqlext.functions.changes import CHANGE_TYPE
from sqlext.functions.fk_join import FUNCTION as FK_JOIN
from sqlext.errors import SqlextError, find_in
from sqlext.rewrites.dialect import TableArgument, parse_one, stream_options, to_sql
from sqlext.rewrites.dialect import is_stream as _is_stream
from sqlext.rewrites.sqltree import identifier_list
from sqlext.streaming.checkpoint import (STATE_FOLDER, STATEMENT_FILE, START_OVER, START_OVER_DBT, Before, check_columns,
                                         claim)
from sqlext.streaming.recent import Recent
from sqlext.streaming.registry import keyed_call, purpose_of
from sqlext.rewrites.dialect import batch_form  # noqa: F401 - part of this module's face
from sqlext.streaming.sources import Sources, change_rows_frame, table_folder, table_name

FUNCTION = "sqlext stream"
_views = itertools.count(1)


OUTPUT_IN_CHECKPOINT = "sqlext-output"  # streaming_frame's output folder when it is given none


def stream(spark, sql: str, *, checkpoint: str, output: str | None = None, trigger: str = "available_now",
           output_format: str = "parquet", sources: Mapping[str, str] | None = None,
           source_format: str = "parquet", query_name: str | None = None,
           schemas: Mapping[str, str] | None = None, start_over: str = START_OVER,
           source_options: Mapping[str, Mapping[str, str]] | None = None, bad_records: Mapping[str, str] | None = None,
           schema_evolution: Mapping[str, str] | None = None):
    """Start the statement as a streaming query writing to ``output`` (a folder, in
    ``output_format``) with its progress and state in ``checkpoint``; returns the
    ``StreamingQuery``. ``trigger`` is ``"available_now"`` (what arrived since the last run,
    then stop) or a processing-time interval such as ``"10 seconds"`` (keep running).

    The functions keep their state as Parquet layers in the checkpoint
    (:mod:`sqlext.streaming.engine`). A statement whose functions keep no state
    (``SELECT ... FROM STREAM(name) WHERE ...``) runs as Spark's own streaming query.

    ``schemas`` declares the columns of folder sources (``{name: "id BIGINT, v STRING, ..."}``),
    so a run can start before a folder holds its first file; ``source_options`` gives Spark's
    reader options of a folder's files (``{name: {"header": "true"}}``); ``bad_records`` says
    what happens to a record of a folder that cannot be read: ``'fail'`` (the default: the run
    stops, naming the file, the line and the column, and writes nothing) or ``'quarantine'``
    (it goes to ``<checkpoint>/quarantine``; :mod:`sqlext.streaming.bad_records`);
    ``schema_evolution`` how a source's columns may change between runs: ``'fail'`` (the
    default), ``'add_columns'``, ``'widen_types'`` or ``'evolve'``
    (:mod:`sqlext.streaming.schema_evolution`). A checkpoint
    and its output belong to one statement (:mod:`sqlext.streaming.checkpoint`): another
    statement on them is refused before anything is read or written; ``start_over`` says how to
    start over, in the caller's words.

    The query returned raises sqlext's classed error (:class:`~sqlext.errors.SqlextError`) from
    ``awaitTermination``, where the run failed with one."""
    from sqlext.storage import resolve

    tree = one_statement(sql)
    checkpoint = resolve(spark, checkpoint)
    output = None if output is None else resolve(spark, output)
    before = Before(checkpoint, output)
    try:
        reads = Sources(spark, sources, source_format, schemas, checkpoint, source_options, bad_records,
                        schema_evolution)
        query, run = _start(spark, tree, checkpoint, output, trigger, output_format, reads, query_name, start_over)
    except BaseException:
        before.undo()  # a first run that fails before it starts leaves no records behind
        raise
    return RunningQuery(query, checkpoint, reads, run)


# the log Spark's file sink keeps in its output folder, of the files it committed
SPARK_SINK_LOG = "_spark_metadata"


def _start(spark, tree, checkpoint, output, trigger, output_format, sources: "Sources", query_name, start_over):
    """The query started, and the ``foreachBatch`` function that runs its micro-batches (None
    where Spark's own sink writes them)."""
    from sqlext.streaming.bad_records import Door

    sources.check_used(tree)
    claim(checkpoint, output, purpose_of(tree), start_over)
    run = None
    try:
        if not _stateless(tree):
            if output is None:
                raise SqlextError("UNSUPPORTED_STREAM", function=FUNCTION,
                                  what="a statement that keeps state without an output folder",
                                  reason="its micro-batches write their rows into a folder",
                                  fix="Pass output=..., or use sqlext.streaming.streaming_frame for other sinks "
                                      "(it reads the output folder as a stream).")
            source, run = _stateful_function(spark, tree, sources, checkpoint, output, output_format)
            writer = source.writeStream.foreachBatch(Door(run, checkpoint, sources.records)) \
                .option("checkpointLocation", checkpoint.uri)
        else:  # nothing to keep between runs: Spark's own streaming query
            frame = _frame(spark, tree, sources)
            check_columns(checkpoint, output, [(f.name, f.dataType.simpleString()) for f in frame.schema.fields])
            if output is not None and (output_format == "delta" or not (output / SPARK_SINK_LOG).exists()):
                # each batch's files appear in one step at its commit, also to readers outside
                # Spark (a Delta table: Spark's file sink does not write one). An output an
                # earlier sqlext wrote with Spark's file sink keeps it: Spark reads such a
                # folder through the log of that sink, which lists only the files it wrote.
                from sqlext.streaming.run import FramesRun

                run = FramesRun(checkpoint, output, output_format)
                writer = frame.writeStream.foreachBatch(run) \
                    .option("checkpointLocation", checkpoint.uri)
            else:
                writer = frame.writeStream.format(output_format).outputMode("append") \
                    .option("checkpointLocation", checkpoint.uri)
                if output is not None:
                    writer = writer.option("path", output.uri)
        if query_name:
            writer = writer.queryName(query_name)
        if trigger == "available_now":
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=trigger)
        return writer.start(), run
    finally:
        sources.restore()  # the query keeps the settings it started with


def run_available_now(spark, sql: str, **options):
    """One incremental run: start with ``availableNow``, wait for it, and raise its error as a
    classed :class:`SqlextError` where it is one (else Spark's own); returns the finished query."""
    from sqlext.storage import resolve

    checkpoint, output = options.get("checkpoint"), options.get("output")
    before = None if checkpoint is None else \
        Before(resolve(spark, checkpoint), None if output is None else resolve(spark, output))
    query = stream(spark, sql, trigger="available_now", **options)
    try:
        query.awaitTermination()
    except Exception:
        if before is not None:
            before.undo()  # a first run that fails leaves no records behind
        raise
    return query


class RunningQuery:
    """Spark's ``StreamingQuery`` of a run, whose ``awaitTermination`` and
    ``processAllAvailable`` raise sqlext's classed error where the run failed with one (Spark
    wraps it twice: ``STREAM_FAILED``, ``FOREACH_BATCH_USER_FUNCTION_ERROR``). A run that failed
    on its input (a bad record, a file whose columns are not the source's, a change that breaks
    the change-row rules) forgets the batch it had planned
    (:func:`~sqlext.streaming.batches.forget_batch`), so that the next run reads the folder as it
    is then: a file corrected under the same name, or replaced by another, is read, and the bad
    one is not. :attr:`last_batch` says how its last micro-batch went. Everything else is
    Spark's query."""

    def __init__(self, query, checkpoint, sources: "Sources | None" = None, run=None):
        self._query, self._checkpoint, self._sources, self._run = query, checkpoint, sources, run
        self._earlier = None if run is None else run.last  # a run function serves every run of its statement

    @property
    def last_batch(self):
        """How this query's last micro-batch went (:class:`~sqlext.streaming.run.BatchReport`:
        where it computed, the seconds of each step); None before its first, or where Spark's own
        sink writes the statement's rows."""
        last = None if self._run is None else self._run.last
        return None if last is self._earlier else last

    def __getattr__(self, name: str):
        return getattr(self._query, name)

    def __repr__(self) -> str:
        return repr(self._query)

    def awaitTermination(self, timeout: int | None = None):
        return self._classed(lambda: self._query.awaitTermination(timeout) if timeout is not None
                             else self._query.awaitTermination())

    def processAllAvailable(self) -> None:
        return self._classed(self._query.processAllAvailable)

    def _classed(self, call):
        from sqlext.streaming.bad_records import Quarantine
        from sqlext.streaming.batches import INPUT_ERRORS, forget_batch

        try:
            return call()
        except Exception as error:
            ours = find_in(error)
            if ours is None:
                raise
            if ours.error_class in INPUT_ERRORS:
                forgotten = forget_batch(self._checkpoint)
                if forgotten is not None:  # its quarantine file goes with it
                    Quarantine(self._checkpoint).file(forgotten).delete()
                if self._sources is not None:  # and the columns it accepted
                    self._sources.forget_columns()
            if ours is error:  # raised as sqlext's already, from Spark's (sqlext.spark_errors)
                raise
            raise ours from None


def jobs_of(spark, query) -> list[int]:
    """The Spark jobs a finished run started (Structured Streaming runs them in a job group
    named by the run's id)."""
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(str(query.runId)))


def streaming_frame(spark, sql: str, sources: Mapping[str, str] | None = None, source_format: str = "parquet",
                    checkpoint: str | None = None, schemas: Mapping[str, str] | None = None,
                    output: str | None = None, trigger: str = "available_now", query_name: str | None = None,
                    source_options: Mapping[str, Mapping[str, str]] | None = None,
                    bad_records: Mapping[str, str] | None = None, schema_evolution: Mapping[str, str] | None = None):
    """The streaming DataFrame of one statement that reads ``STREAM(...)``, for any sink.

    A statement whose functions keep state runs as :func:`stream`
    runs it: its micro-batches write their rows into ``output`` (by default the folder
    ``sqlext-output`` of ``checkpoint``, which it needs for its state), and the frame is
    Spark's file stream of that folder, which a sink query reads with a checkpoint of its
    own. ``trigger="available_now"`` (the default) runs what arrived since the last call and
    returns once its rows are in the folder; an interval starts the run as a query that keeps
    running (``query_name`` names it in ``spark.streams``). ``emit => 'final'`` is refused: its
    folder is rewritten each run, which a stream cannot read. A statement that keeps no state
    (``SELECT ... FROM STREAM(name) WHERE ...``) is Spark's own streaming DataFrame and needs no
    checkpoint, unless a source is a Delta table, whose commits are staged there.

    With ``checkpoint``, the columns of every source are compared with those of the checkpoint's
    first run (a change is ``[STREAM_SCHEMA_CHANGED]``) and recorded on the first run.
    ``source_options``, ``bad_records`` and ``schema_evolution`` are :func:`stream`'s."""
    from sqlext.storage import resolve

    tree = one_statement(sql)
    if _stateless(tree):
        folder = None if checkpoint is None else resolve(spark, checkpoint)
        sources = Sources(spark, sources, source_format, schemas, folder, source_options, bad_records,
                          schema_evolution)
        sources.check_used(tree)
        return _frame(spark, tree, sources)
    if checkpoint is None:
        raise SqlextError("UNSUPPORTED_STREAM", function="streaming_frame", what="this statement without a checkpoint",
                          reason="its function keeps its state, and the rows of each run, in a checkpoint folder "
                                 "between runs",
                          fix="Pass checkpoint=... (a folder of its own, not the one of the query that writes the "
                              "frame to its sink).")
    if purpose_of(tree).emit == "final":
        raise SqlextError("UNSUPPORTED_STREAM", function="streaming_frame", what="emit => 'final' as a stream",
                          reason="the final table is rewritten in place each run, and a stream only appends",
                          fix="Run it with sqlext.streaming.stream(..., output=...) and read the output folder as a "
                              "table, or stream emit => 'records' into a sink that applies them.")
    folder = resolve(spark, checkpoint)
    output = folder / OUTPUT_IN_CHECKPOINT if output is None else resolve(spark, output)
    options = dict(checkpoint=folder.uri, output=output.uri, sources=sources, source_format=source_format,
                   schemas=schemas, query_name=query_name, source_options=source_options, bad_records=bad_records,
                   schema_evolution=schema_evolution)
    if trigger == "available_now":
        run_available_now(spark, sql, **options)
    else:
        stream(spark, sql, trigger=trigger, **options).processAllAvailable()
    return spark.readStream.schema(_output_schema(spark, folder, output)).parquet(output.uri)


def _output_schema(spark, checkpoint, output):
    """The columns the runs write into ``output``: those the checkpoint recorded, else the files'."""
    from sqlext.streaming.checkpoint import output_columns

    return output_columns(checkpoint) or spark.read.parquet(output.uri).schema


def _stateless(tree: exp.Expression) -> bool:
    """Whether the statement keeps no state between runs: it calls no function that does, and is
    no recursion or self-join of a stream. Spark runs such a statement as its own streaming query."""
    from sqlext.streaming.self_join import is_self_join

    return not any(keyed_call(t) is not None for t in tree.find_all(exp.Table)) and not _is_recursion(tree) \
        and not is_self_join(tree)


def _frame(spark, tree: exp.Expression, sources: "Sources"):
    """The streaming DataFrame of a statement that keeps no state: each ``STREAM(...)`` read as
    a stream, the rest Spark SQL. Its rows are Spark's own stream, with no place to set bad
    records aside, so a quarantine is refused."""
    from sqlext.session import ensure_installed
    from sqlext.streaming.bad_records import QUARANTINE
    from sqlext.streaming.engine import temporary_view

    quarantined = [name for name, mode in sources.bad_records.items() if mode == QUARANTINE]
    if quarantined:
        raise SqlextError("UNSUPPORTED_STREAM", function=FUNCTION,
                          what=f"a quarantine of {', '.join(quarantined)} in a statement that keeps no state",
                          reason="such a statement is Spark's own streaming query, which has no place to set bad "
                                 "records aside exactly once",
                          fix="Leave bad_records out (a bad record then stops the run, named), or read the stream "
                              "through CHANGELOG_FILTER(..., predicate => 'true').")
    ensure_installed(spark)
    tree = tree.copy()
    with ExitStack() as views:
        for table in list(tree.find_all(exp.Table)):
            if _is_stream(table) and not isinstance(table.parent, TableArgument):
                source = sources.read(table.this)
                _replace(table, views.enter_context(temporary_view(source)))
        frame = spark.sql(to_sql(tree))
    if not frame.isStreaming:
        raise _reads_no_stream()
    return frame


def _reads_no_stream() -> SqlextError:
    return SqlextError("UNSUPPORTED_STREAM", function=FUNCTION, what="this statement",
                       reason="it reads no STREAM(...) source, so there are no new changes to run over",
                       fix="Read the changes with STREAM(name), e.g. FROM STREAM(my_changes), or run it as a "
                           "batch query (sqlext.sql, sqlext run).")


def one_statement(sql: str) -> exp.Expression:
    """The one statement of an incremental run, parsed; a text holding several, or none, or
    one that does not parse, is a classed error."""
    from sqlext.rewrites.dialect import parse

    try:
        statements = [s for s in parse(sql) if s is not None]
    except Exception as error:  # noqa: BLE001 - sqlglot's parse and token errors
        raise SqlextError("UNSUPPORTED_STATEMENT", function=FUNCTION,
                          reason=f"the statement does not parse: {str(error).splitlines()[0][:200]}",
                          fix="Fix the SQL; `sqlext explain FILE.sql --no-spark` shows how sqlext reads it") from None
    if len(statements) != 1:
        raise SqlextError("UNSUPPORTED_STATEMENT", function=FUNCTION,
                          reason=f"an incremental run takes one statement; the text holds {len(statements)}",
                          fix="Run each statement over STREAM(...) with its own checkpoint and output, and "
                              "the others as batch queries")
    return statements[0]


def _stateful_function(spark, tree, sources: "Sources", checkpoint, output, output_format):
    """The streaming source and the foreachBatch function of a statement holding one
    CHANGELOG_FILTER over ``STREAM(name)`` or one FK_JOIN over two streams (and any SQL
    around it)."""
    from sqlext.session import ensure_installed

    ensure_installed(spark)
    tree = tree.copy()
    calls = [t for t in tree.find_all(exp.Table) if keyed_call(t) is not None]
    streams = [t for t in tree.find_all(exp.Table) if _is_stream(t)]
    if _is_recursion(tree) and streams and not calls:
        from sqlext.streaming.recursion import RecursionRun, RecursionShape

        shape = RecursionShape(tree)
        source = sources.read(shape.stream.this)
        return source, RecursionRun(shape, checkpoint, output, output_format, spark, source.schema,
                                    folder=sources.rows_folder(shape.stream.this))
    _refuse_recursion(tree)
    from sqlext.streaming.self_join import SelfJoinRun, SelfJoinShape, is_self_join

    if not calls and is_self_join(tree):
        source = sources.read(streams[0].this)
        shape = SelfJoinShape(spark, tree, source.schema)
        return source, SelfJoinRun(shape, f"__sx_result_{next(_views)}", checkpoint, output, output_format,
                                   source.schema, sources.rows_folder(streams[0].this))
    root = _refuse_shape(calls, streams)
    _order_by_streams(root)
    statement = to_sql(tree)
    placeholder = f"__sx_result_{next(_views)}"
    numbered = [t for t in root.find_all(exp.Table) if _is_stream(t)]  # the sources, numbered in the order of the text
    frames = []
    for table in numbered:
        frames.append(sources.read(table.this))
    converted = _as_change_rows(spark, root, numbered, frames)
    from sqlext.streaming.engine import inputs_stream

    folders = [sources.parquet_folder(t.this) for t in numbered]
    key = _compiled_key(spark, statement, checkpoint, output, output_format, frames, folders, converted, sources)
    kept = _COMPILED.get(key)
    if kept is not None:
        return kept
    pipeline = _pipeline(spark, tree, root, placeholder, numbered, frames, sources, checkpoint, output, output_format,
                         converted)
    compiled = inputs_stream(frames), pipeline
    # under the key as it is now: a first run has just written the checkpoint's layout file
    _COMPILED.put(_compiled_key(spark, statement, checkpoint, output, output_format, frames, folders, converted, sources),
                  compiled)
    return compiled


# The pipelines this process built, by statement, checkpoint and sources' columns: the next run
# of a statement takes its operators, its foreachBatch function and its one stream of the
# sources from here instead of building them again with Spark's analysis (a large share of a
# small run's time for a chain of calls), as a query that keeps running uses one
# function for all its micro-batches (a streaming frame starts any number of queries). An
# entry holds only while the checkpoint is the one it was built on: the statement and layout
# files a new checkpoint writes anew are part of the key, and so is how each folder's records
# are read (its format, reader options and bad-records mode: a strict stream refuses a bad
# record inside Spark, so a run that asks for the quarantine needs a stream of its own).
_COMPILED = Recent(8)


def _compiled_key(spark, statement: str, checkpoint, output, output_format: str, frames: list, folders: list,
                  converted, sources: "Sources") -> tuple:
    from sqlext.streaming.checkpoint import LAYOUT_FILE
    from sqlext.streaming.engine import BUCKETS_SETTING

    def written(folder, name):
        return tuple((e.name, e.size, e.mtime_ns) for e in folder.entries() if e.name == name and not e.is_dir)

    return (id(spark), statement, checkpoint.uri, output.uri, output_format,
            tuple(f.schema.json() for f in frames), tuple(None if f is None else f.uri for f in folders),
            tuple(sorted(converted)), spark.conf.get(BUCKETS_SETTING, ""),
            tuple((r.name, r.file_format, tuple(sorted(r.options.items())), r.mode) for r in sources.records),
            written(checkpoint, STATEMENT_FILE), written(checkpoint / STATE_FOLDER, LAYOUT_FILE))


def _pipeline(spark, tree, root, placeholder: str, numbered: list, frames: list, sources: "Sources", checkpoint, output,
              output_format: str, converted):
    """The operators of the statement's calls (and of its aggregate) and its foreachBatch function."""
    from sqlext.streaming.aggregate import is_aggregate
    from sqlext.streaming.engine import Pipeline

    operators: list = []
    buckets = _buckets(spark, checkpoint, [sources.parquet_folder(t.this) for t in numbered])

    call = root.copy()
    aggregated = is_aggregate(tree) and keyed_call(call).emit(call) == "final"
    _operator(spark, root, checkpoint / STATE_FOLDER, numbered, frames, sources, operators, buckets, feed=aggregated,
              converted=converted)
    _replace(root, placeholder)
    if aggregated:
        outer = _aggregate(spark, tree, placeholder, checkpoint, operators, buckets)
        if outer is not None:
            return Pipeline(operators, outer, placeholder, checkpoint, output, output_format)
        # an aggregate without an incremental form: the statement runs over the call's final table
        operators = []
        numbered = [t for t in call.find_all(exp.Table) if _is_stream(t)]
        _operator(spark, call, checkpoint / STATE_FOLDER, numbered, frames, sources, operators, buckets,
                  converted=converted)
    return Pipeline(operators, tree, placeholder, checkpoint, output, output_format)


def _aggregate(spark, tree: exp.Expression, placeholder: str, checkpoint, operators: list, buckets: int):
    """The incremental GROUP BY over the call's change feed (appended to ``operators``) and the
    statement that then reads its rows; None where the aggregate has no incremental form."""
    from sqlext.streaming.aggregate import AggregateOperator, AggregateShape
    from sqlext.streaming.run import spark_schema

    import pyarrow as pa

    upstream = operators[-1]
    feed = spark_schema(upstream.output_arrow)
    table = spark_schema(pa.schema([f for f in upstream.output_arrow if f.name not in (CHANGE_TYPE, upstream.order_by)]))
    try:
        shape = AggregateShape(spark, tree, placeholder, feed, table)
    except SqlextError as error:
        if error.error_class == "UNSUPPORTED_STREAM":
            return None
        raise
    operator = AggregateOperator(shape, upstream.call, checkpoint / STATE_FOLDER / "aggregate", upstream, buckets)
    if operator.fresh and any(not state.before(1 << 62).empty for op in operators for state in op.states.values()):
        raise SqlextError("STREAM_CHECKPOINT_MISMATCH", function=FUNCTION, checkpoint=checkpoint.uri,
                          differences="its runs kept the call's state without the aggregate's groups (an earlier "
                                      "sqlext recomputed the aggregate each run)", fix=START_OVER)
    operators.append(operator)
    return exp.select("*").from_(exp.Table(this=exp.to_identifier(placeholder)))


def _buckets(spark, checkpoint, folders: list) -> int:
    """The buckets of a new state, from the bytes its statement's source folders hold now (a
    first run over a long history gets more; see :meth:`KeyedOperator.state_buckets`). A state
    that exists keeps the number it recorded, so the folders are only measured before the
    first run has kept any."""
    from sqlext.storage import folder_bytes
    from sqlext.streaming.engine import KeyedOperator

    if (checkpoint / STATE_FOLDER).entries():
        return KeyedOperator.state_buckets(spark)
    return KeyedOperator.state_buckets(spark, sum(folder_bytes(f) for f in folders if f is not None))


def _operator(spark, table: exp.Table, folder, numbered: list, frames: list, sources: "Sources", operators: list,
              buckets: int, feed: bool = False, converted: frozenset = frozenset()):
    """The keyed operator of one call (its inner calls first, appended to ``operators`` before it):
    each table argument a stream the statement reads, or another call's change feed. The
    streams numbered in ``converted`` are read as change rows from another shape, so their
    files are not the rows the operator reads."""
    from sqlext.streaming.engine import Input
    from sqlext.streaming.run import arrow_schema, spark_schema

    keyed = keyed_call(table)
    call = keyed.read(table)
    inputs = {}
    for name in keyed.tables:
        argument = call.tables.get(name)
        inner = argument.this if argument is not None else None
        if inner is not None and _is_stream(inner):
            index = next(i for i, t in enumerate(numbered) if t is inner)
            frame = frames[index]
            inputs[name] = Input(name, arrow_schema(frame.schema), frame.schema, source=index,
                                 folder=None if index in converted else sources.rows_folder(inner.this))
        elif inner is not None and keyed_call(inner) is not None:
            upstream = _operator(spark, inner, folder / "calls" / name, numbered, frames, sources, operators, buckets,
                                 converted=converted)
            if upstream.emit != "changes":
                raise SqlextError(
                    "UNSUPPORTED_STREAM", function=FUNCTION, what=f"{upstream.function} with emit => "
                    f"'{upstream.emit}' as the {name} input of {keyed.name}",
                    reason="a call feeds another with its change feed, the rows emit => 'changes' gives",
                    fix=f"Leave emit out of the inner {upstream.function} (or write emit => 'changes'); the outer "
                        "call's emit says what the statement writes.")
            inputs[name] = Input(name, upstream.output_arrow, spark_schema(upstream.output_arrow), upstream=upstream)
        else:
            _refuse_table_input(keyed.name, name, argument)
    operator = keyed.build(spark, table.copy(), call.literals, inputs, folder, buckets, feed)
    operators.append(operator)
    return operator


def _as_change_rows(spark, root: exp.Table, numbered: list, frames: list) -> frozenset:
    """Each stream a call reads in another shape (``format => ...``) as sqlext's change rows:
    its frame in ``frames`` replaced by the query of :mod:`sqlext.functions.input_formats` over it,
    and the call rewritten to read change rows (no ``format``; ``order_by`` naming the ordering
    column of the change rows), so that the operators, their checks and the batch function a
    first run may use all see one shape. Returns the indexes of the streams it replaced."""
    from sqlext.functions.arguments import set_literal
    from sqlext.functions.input_formats import ARGUMENT, DELTA, take_format

    converted = set()
    for table in [t for t in root.find_all(exp.Table) if keyed_call(t) is not None]:
        keyed = keyed_call(table)
        call = keyed.read(table)
        if ARGUMENT not in call.literals:
            continue
        shape = take_format(keyed.name, call.literals)
        set_literal(table, keyed.arguments, ARGUMENT, None)
        if shape == DELTA:
            continue
        orders = []
        for name in keyed.tables:
            argument = call.tables.get(name)
            inner = argument.this if argument is not None else None
            if inner is not None and keyed_call(inner) is not None:
                raise SqlextError(
                    "INVALID_ARGUMENT_TYPE", function=keyed.name, argument="format",
                    expected=f"'delta' where the {name} input is another call's change rows", value=f"'{shape}'",
                    fix="Give format to the inner call, the one that reads the input in that shape.")
            if inner is None or not _is_stream(inner):
                continue  # an input the operator refuses
            index = next(i for i, t in enumerate(numbered) if t is inner)
            frames[index], order_by = change_rows_frame(spark, keyed.name, name, shape, frames[index],
                                                        call.literals.get("order_by"))
            converted.add(index)
            orders.append(order_by)
        if orders:
            set_literal(table, keyed.arguments, "order_by", identifier_list(orders[:1]))
    return frozenset(converted)


def _order_by_streams(tree: exp.Expression) -> None:
    """Each call in ``tree`` that reads ``TABLE(STREAM(x, format => ...))`` (or a STREAM with
    its own ``order_by``) reads the change rows the stream gives
    (:func:`sqlext.streaming.sources.as_change_rows`), so where the call names no ``order_by``
    it is given their ordering column (``source_lsn``, ``_change_ordinal``, or the STREAM's
    ``order_by`` as the change rows name it): the default the call has with ``format`` given to
    it. Its inputs (streams, and inner calls' change rows) must then name their ordering
    columns alike. Where the call gives ``format`` too, the two must be the same: the call's
    ``format`` then maps the input, as without the STREAM's (which is left out, its
    ``order_by`` going to the call)."""
    from sqlext.functions.arguments import set_literal
    from sqlext.functions.input_formats import option_clash, order_clash, order_column, take_format
    from sqlext.rewrites.dialect import stream_argument
    from sqlext.streaming.sources import stream_order, stream_shape

    # inner calls first: an outer call reads their change rows, ordered as they are
    for table in reversed([t for t in tree.find_all(exp.Table, bfs=False) if keyed_call(t) is not None]):
        keyed = keyed_call(table)
        call = keyed.read(table)
        given = take_format(keyed.name, dict(call.literals)) if "format" in call.literals else None
        order_by = call.literals.get("order_by")
        orders, shaped = [], False
        for name in keyed.tables:
            argument = call.tables.get(name)
            inner = argument.this if argument is not None else None
            if inner is not None and _is_stream(inner):
                stream, options = inner.this, stream_options(inner.this)
                if options and given is not None:
                    if "format" in options and stream_shape(stream) != given:
                        raise option_clash(keyed.name, name, to_sql(stream), "format", given, options["format"])
                    moved = options.get("order_by")
                    if moved is not None and order_by is not None and moved != order_by:
                        raise option_clash(keyed.name, name, to_sql(stream), "order_by", order_by, moved)
                    if moved is not None:
                        order_by = moved
                        set_literal(table, keyed.arguments, "order_by", moved)
                    stream.set("expressions", [stream_argument(stream)])
                    continue
                shaped = shaped or bool(options)
                orders.append((name, to_sql(stream), stream_order(stream)))
            elif inner is not None and keyed_call(inner) is not None:
                upstream = keyed_call(inner).read(inner)
                shape = take_format(upstream.function, dict(upstream.literals))
                orders.append((name, f"the change rows of {keyed_call(inner).name}",
                               order_column(shape, upstream.literals.get("order_by"))))
        if not shaped or given is not None or order_by is not None:
            continue
        if len({order.lower() for _, _, order in orders}) > 1:
            raise order_clash(keyed.name, orders)
        set_literal(table, keyed.arguments, "order_by", identifier_list([orders[0][2]]))


def _refuse_table_input(function: str, name: str, argument) -> None:
    """A table argument that is neither a stream nor another call: read whole each run."""
    source = to_sql(argument.this) if argument is not None and isinstance(argument.this, exp.Table) else "my_changes"
    if function == FK_JOIN:
        raise SqlextError(
            "UNSUPPORTED_STREAM", function=FUNCTION, what=f"an FK_JOIN whose {name} input is a table",
            reason=f"its {name} input {source} is read whole, not as a stream; an incremental FK_JOIN reads both "
                   "inputs as streams, because a change of either meets rows of the other",
            fix=f"Write {name} => TABLE(STREAM({source})), with a change feed of {source} as that stream.")
    raise SqlextError("UNSUPPORTED_STREAM", function=FUNCTION, what=f"a {function} over a table",
                      reason="a streaming statement reads its inputs as streams",
                      fix=f"Write {name} => TABLE(STREAM({source})).")


def _refuse_shape(calls: list, streams: list) -> exp.Table:
    """What a run of keyed operators runs: one CHANGELOG_FILTER or FK_JOIN call, whose table
    arguments are streams or other such calls (a pipeline), and no stream outside it; anything
    else is refused, saying what is missing or extra. Returns the outermost call."""
    if not streams:
        raise _reads_no_stream()
    roots = [c for c in calls if not any(a in calls for a in _ancestors(c))]
    if len(roots) != 1:
        raise SqlextError(
            "UNSUPPORTED_STREAM", function=FUNCTION, what="this statement",
            reason=f"it holds {len(roots)} separate calls of CHANGELOG_FILTER or FK_JOIN; an incremental run keeps "
                   "the state of one call and of the calls it reads through its table arguments (or runs one WITH "
                   "RECURSIVE over a stream of edges)",
            fix="Feed one call into the other (left => TABLE(CHANGELOG_FILTER(...))), or run each call over "
                "STREAM(...) as its own statement, with its own checkpoint and output.")
    root = roots[0]
    outside = [to_sql(t) for t in streams if root not in _ancestors(t)]
    if outside:
        raise SqlextError(
            "UNSUPPORTED_STREAM", function=FUNCTION, what="this statement",
            reason=f"it reads {', '.join(outside)} outside the {root.this.name.upper()} call; the rows around the "
                   "call are read whole each run",
            fix="Read that source as a table (without STREAM), or in its own incremental statement.")
    return root


def _ancestors(node: exp.Expression) -> list:
    found, current = [], node.find_ancestor(exp.Table)
    while current is not None:
        found.append(current)
        current = current.find_ancestor(exp.Table)
    return found


def _is_recursion(tree: exp.Expression) -> bool:
    return any(w.args.get("recursive") for w in tree.find_all(exp.With)) or bool(find_calls(tree, "RECURSIVE_EXPAND"))


def _refuse_recursion(tree: exp.Expression) -> None:
    """A recursion over a stream runs incrementally only on its own
    (:mod:`sqlext.streaming.recursion`); anywhere else it would see each micro-batch's rows alone."""
    if _is_recursion(tree) and any(_is_stream(t) for t in tree.find_all(exp.Table)):
        raise SqlextError(
            "UNSUPPORTED_STREAM", function=FUNCTION, what="a recursion here",
            reason="a recursion runs incrementally only as a statement of its own (it would "
                   "see each micro-batch's rows alone)",
            fix="Run WITH RECURSIVE over STREAM(edges) as its own statement, or as a batch "
                "query (sqlext.sql).")


def _replace(table: exp.Table, view: str) -> None:
    replacement = exp.Table(this=exp.to_identifier(view))
    if table.args.get("alias"):
        replacement.set("alias", table.args["alias"].copy())
    table.replace(replacement)


CHECKPOINT_FOLDER = "_sqlext_checkpoint"


def reads_streams(sql: str) -> bool:
    """Whether ``sql`` reads a ``STREAM(...)`` source (text that does not parse reads none)."""
    try:
        tree = parse_one(sql)
    except Exception:  # noqa: BLE001 - sqlglot fails in several ways on text it cannot read
        return False
    return any(_is_stream(t) for t in tree.find_all(exp.Table))


def run_into_table(spark, sql: str, table: str, *, full_refresh: bool = False,
                   sources: Mapping[str, str] | None = None, source_format: str = "parquet",
                   schemas: Mapping[str, str] | None = None,
                   source_options: Mapping[str, Mapping[str, str]] | None = None,
                   bad_records: Mapping[str, str] | None = None, schema_evolution: Mapping[str, str] | None = None):
    """One incremental run of ``sql`` (which reads ``STREAM(...)`` tables or folders) into the
    catalog table ``table``: the rows of the changes that arrived since the last run are
    appended. Returns the number of bad records the run set aside in the quarantine (0 where
    it met none, or none of its folders asks for one).

    The table is a Parquet table over a folder that also holds the run's checkpoint (in
    ``_sqlext_checkpoint``, which Spark's file readers skip), so the output and the state
    that produced them stay together: dropping the folder starts over. A new table's folder is
    ``<its database's location>/<name>``. ``full_refresh`` drops the table and its folder first,
    so the run processes the whole history again. A table that exists without such a
    checkpoint (written by something else), or whose columns differ from the statement's, is
    refused: ``full_refresh`` rebuilds it.

    ``sources``, ``source_format``, ``schemas``, ``source_options``, ``bad_records`` and
    ``schema_evolution`` are :func:`stream`'s: folders of change files read by name, their
    files' format, columns, reader options, what happens to a record that cannot be read, and
    how a source's columns may change. A quarantined record goes to
    ``_sqlext_checkpoint/quarantine`` in the table's folder. A column a source gained is added
    to the table once the run wrote its rows (``ALTER TABLE ... ADD COLUMNS``); a wider type is
    refused, as Spark does not change the type of a column of a table of files."""
    from sqlext.session import ensure_installed
    from sqlext.storage import resolve
    from sqlext.streaming.bad_records import Quarantine
    from sqlext.streaming.summary import committed_batches

    ensure_installed(spark)
    target = table_name(table)
    name = to_sql(target)
    settings = dict(sources=sources, source_format=source_format, schemas=schemas, source_options=source_options,
                    bad_records=bad_records, schema_evolution=schema_evolution)
    # the settings, and the names the statement reads, are checked before anything is dropped or read
    folders = Sources(spark, sources, source_format, schemas, None, source_options, bad_records, schema_evolution)
    folders.check_used(one_statement(sql), "sources= (a dbt model's sqlext_sources)")
    exists = spark.catalog.tableExists(name)
    folder = resolve(spark, table_folder(spark, target, exists))
    if full_refresh:
        if exists:
            spark.sql(to_sql(exp.Drop(tables=[target.copy()], kind="TABLE", exists=True)))
            exists = False
        folder.delete()
    schema = _result_schema(spark, sql, folders)
    if exists:
        if not (folder / CHECKPOINT_FOLDER).is_dir():
            raise SqlextError("STREAM_TABLE_NOT_INCREMENTAL", function=FUNCTION, table=name, folder=folder.uri)
        have = [(f.name, f.dataType.simpleString()) for f in spark.table(name).schema.fields]
        want = [(f.name, f.dataType.simpleString()) for f in schema.fields]
        added = _added_columns(have, want)
        if added is None:
            raise SqlextError("STREAM_TABLE_COLUMNS_DIFFER", function=FUNCTION, table=name,
                              have=_columns(have), want=_columns(want))
    checkpoint = folder / CHECKPOINT_FOLDER
    committed = committed_batches(checkpoint)
    run_available_now(spark, sql, checkpoint=checkpoint.uri, output=folder.uri, start_over=START_OVER_DBT, **settings)
    if not exists:
        spark.catalog.createTable(name, path=folder.uri, source="parquet", schema=schema)
    elif added:  # a source's columns grew, as its schema evolution allowed (the run checked)
        spark.sql(to_sql(exp.Alter(this=target.copy(), kind="TABLE", actions=[exp.Schema(expressions=[
            exp.ColumnDef(this=exp.to_identifier(f.name, quoted=True), kind=exp.DataType.build(f.dataType.simpleString(),
                                                                                             dialect="spark"))
            for f in schema.fields if f.name in added])])))
    spark.catalog.refreshTable(name)
    # counted as sqlext stream's summary counts them: the records of the batches this run committed
    return Quarantine(checkpoint).count(sorted(committed_batches(checkpoint) - committed))


def _added_columns(have: list, want: list) -> list[str] | None:
    """The columns a table of ``have`` (name, type) gains to hold rows of ``want``: none where
    they hold the same columns (in any order: a table of files is read by name, and a column it
    gained is at its end); those ``want`` adds where it only adds (a source's schema evolution);
    None where a column would change type, or go, which a table of files cannot do.

    >>> _added_columns([("id", "bigint")], [("id", "bigint"), ("c", "string")])
    ['c']
    >>> _added_columns([("id", "bigint"), ("c", "string")], [("c", "string"), ("id", "bigint")])
    []
    >>> _added_columns([("id", "int")], [("id", "bigint")]) is None
    True
    """
    wanted = dict(want)
    if any(wanted.get(name) != kind for name, kind in have):
        return None
    return [name for name, _ in want if name not in dict(have)]


def _result_schema(spark, sql: str, sources: Sources | None = None):
    """The columns the statement's runs write, without running it: those of the statement
    over the whole of each source read as a run reads it (a source in another shape,
    ``STREAM(x, format => ...)``, as its change rows, and the calls over it ordered by their
    ordering column: :func:`_order_by_streams`; a folder of ``sources`` as the columns a run
    reads from its files, with no row). sqlext computes a recursion when it is read, so a
    recursion's columns are found as its runs find them (:func:`_recursion_schema`)."""
    from sqlext.api import sql as run_sql
    from sqlext.streaming.engine import temporary_view

    sources = sources or Sources(spark)
    tree = parse_one(sql)
    if _is_recursion(tree):
        return _recursion_schema(spark, tree, sources)
    _order_by_streams(tree)
    with ExitStack() as views:
        for table in [t for t in tree.find_all(exp.Table) if _is_stream(t)]:
            if stream_options(table.this) or sources.folder_of(table.this) is not None:
                _replace(table, views.enter_context(temporary_view(_batch_rows(spark, table.this, sources))))
        return run_sql(spark, batch_form(to_sql(tree))).schema


def _batch_rows(spark, call: exp.Anonymous, sources: Sources):
    """All the rows of the source ``STREAM(...)`` reads, as a run reads them: in another shape
    (``format => ...``), as change rows; a folder, as an empty frame of the columns a run
    reads from it."""
    from sqlext.api import sql as run_sql
    from sqlext.streaming.sources import DELTA_SHAPE, as_change_rows, stream_shape

    if sources.folder_of(call) is not None:
        return sources.batch_frame(call)
    rows = run_sql(spark, batch_form(to_sql(exp.select("*").from_(exp.Table(this=call.copy())))))
    return rows if stream_shape(call) == DELTA_SHAPE else as_change_rows(spark, call, rows)


def _recursion_schema(spark, tree: exp.Expression, sources: Sources):
    """The columns of an incremental recursion's runs, found by the code of the run
    (:class:`sqlext.streaming.recursion.RecursionRun`): the recursion's rows over the
    edges as the run reads them, through the outer query, and over a change feed of edges
    the change columns a run carries (``_change_type`` and the stream's ordering column)."""
    from pyspark.sql.types import StructField, StringType, StructType

    from sqlext.runner import run_statement
    from sqlext.streaming.engine import temporary_view
    from sqlext.streaming.recursion import RecursionShape, _compiled
    from sqlext.streaming.run import outer_over
    from sqlext.streaming.sources import stream_order

    shape = RecursionShape(tree)
    edges = _batch_rows(spark, shape.stream.this, sources).schema
    order = stream_order(shape.stream.this)
    order_by = next((f.name for f in edges.fields if f.name.lower() == order.lower()), order)
    fields = [f for f in edges.fields if f.name not in (CHANGE_TYPE, order_by)]
    rows, _ = _compiled(spark, shape, StructType(fields))
    carry = []
    if CHANGE_TYPE in edges.names:
        carry = [StructField(CHANGE_TYPE, StringType(), True)] + [f for f in edges.fields if f.name == order_by]
    with temporary_view(spark.createDataFrame([], StructType(list(rows.fields) + carry))) as view:
        # the outer query over the run's rows, as a run writes it (the change columns kept)
        outer = outer_over(shape.main, shape.name, view, [f.name for f in carry])
        return run_statement(spark, to_sql(outer)).schema


def _columns(columns) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in columns)

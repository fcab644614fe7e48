"""Run: a bound and planned statement started as Spark's streaming query and waited for.
:func:`stream` starts it (by default ``availableNow``: what arrived since the last run, then
stop) and returns a :class:`RunningQuery`, whose errors are sqlext's classes and which forgets a
batch that failed on its input; :func:`run_available_now` runs once and waits;
:func:`streaming_frame` gives the run's output as a streaming DataFrame for any sink."""

from __future__ import annotations

from typing import Mapping

from sqlext.errors import SqlextError, current_surface, find_in, surface, surfaced
from sqlext.storage import resolve
from sqlext.streaming.bad_records import Door, Quarantine
from sqlext.streaming.batches import INPUT_ERRORS, forget_batch
from sqlext.streaming.bind import FUNCTION, bind, one_statement, stateless
from sqlext.streaming.checkpoint import (START_OVER, Before, check_columns, claim, clear_for_full_refresh,
                                         output_columns)
from sqlext.streaming.plan import stateful_function, stateless_frame
from sqlext.streaming.registry import purpose_of
from sqlext.streaming.sources import Sources

OUTPUT_IN_CHECKPOINT = "sqlext-output"  # streaming_frame's output folder when it is given none


# what the Python functions of incremental runs are called as, at the start of their errors
STREAM_FUNCTION = "sqlext.stream"


@surfaced(STREAM_FUNCTION)
def stream(spark, sql: str, *, checkpoint: str, output: str | None = None, trigger: str = "available_now",
           output_format: str = "parquet", sources: Mapping[str, str] | None = None,
           source_format: str | Mapping[str, str] = "parquet", query_name: str | None = None,
           schemas: Mapping[str, str] | None = None, start_over: str = START_OVER,
           source_options: Mapping[str, Mapping[str, str]] | None = None, bad_records: Mapping[str, str] | None = None,
           schema_evolution: Mapping[str, str] | None = None, full_refresh: bool = False):
    """Start the statement as a streaming query writing to ``output`` (a folder, in
    ``output_format``) with its progress and state in ``checkpoint``; returns the
    ``StreamingQuery``. ``trigger`` is ``"available_now"`` (what arrived since the last run,
    then stop) or a processing-time interval such as ``"10 seconds"`` (keep running).

    ``sources`` maps a name ``STREAM(name)`` reads to a folder of change files (or a Delta
    table's folder), whose files are in ``source_format``: one format for every folder
    (``"json"``), or one per name (``{"orders": "json", "customers": "parquet"}``; a folder
    it leaves out holds Parquet files), so that one statement joins a JSON topic to a Parquet
    folder.

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
    start over, in the caller's words. ``full_refresh=True`` starts over: the checkpoint and the
    output folder are deleted (after a line saying which, on standard output), then the run
    processes the whole history as a first run does; a folder that holds what no run of sqlext
    made is refused first (``[FULL_REFRESH_REFUSED]``), and nothing is deleted.

    The query returned raises sqlext's classed error (:class:`~sqlext.errors.SqlextError`) from
    ``awaitTermination``, where the run failed with one."""
    tree = one_statement(sql)
    checkpoint = resolve(spark, checkpoint)
    output = None if output is None else resolve(spark, output)
    # the settings, and the names the statement reads, are checked before anything is deleted
    reads = Sources(spark, sources, source_format, schemas, checkpoint, source_options, bad_records, schema_evolution)
    if full_refresh:
        reads.check_used(tree)
        clear_for_full_refresh(checkpoint, output, say=print)
    before = Before(checkpoint, output)
    try:
        query, run = _start(spark, tree, checkpoint, output, trigger, output_format, reads, query_name, start_over)
    except BaseException:
        before.undo()  # a first run that fails before it starts leaves no records behind
        raise
    return RunningQuery(query, checkpoint, reads, run, before)


# the log Spark's file sink keeps in its output folder, of the files it committed
SPARK_SINK_LOG = "_spark_metadata"


def _start(spark, tree, checkpoint, output, trigger, output_format, sources: "Sources", query_name, start_over):
    """The query started, and the ``foreachBatch`` function that runs its micro-batches (None
    where Spark's own sink writes them)."""
    sources.check_used(tree)
    bound = bind(tree)  # what cannot run incrementally is refused before the checkpoint is claimed
    claim(checkpoint, output, purpose_of(tree), start_over)
    run = None
    try:
        if bound.kind != "stateless":
            if output is None:
                raise SqlextError("UNSUPPORTED_STREAM", function=FUNCTION,
                                  what="a statement that keeps state without an output folder",
                                  reason="its micro-batches write their rows into a folder",
                                  fix="Pass output=..., or use sqlext.streaming.streaming_frame for other sinks "
                                      "(it reads the output folder as a stream).")
            source, run = stateful_function(spark, bound, sources, checkpoint, output, output_format)
            writer = source.writeStream.foreachBatch(Door(run, checkpoint, sources.records)) \
                .option("checkpointLocation", checkpoint.uri)
        else:  # nothing to keep between runs: Spark's own streaming query
            frame = stateless_frame(spark, tree, sources)
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


@surfaced("sqlext.streaming.run_available_now")
def run_available_now(spark, sql: str, **options):
    """One incremental run: start with ``availableNow``, wait for it, and raise its error as a
    classed :class:`SqlextError` where it is one (else Spark's own); returns the finished query."""
    query = stream(spark, sql, trigger="available_now", **options)
    try:
        query.awaitTermination()
    except Exception:
        query.before.undo()  # a first run that fails leaves no records behind
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

    def __init__(self, query, checkpoint, sources: "Sources | None" = None, run=None, before: Before | None = None):
        self._query, self._checkpoint, self._sources, self._run = query, checkpoint, sources, run
        self.before = before  # what the checkpoint and output held before the run claimed them
        self._surface = current_surface(STREAM_FUNCTION)  # what its errors are named by: what started it
        self._earlier = None if run is None else run.last  # a run function serves every run of its statement

    @property
    def last_batch(self):
        """How this query's last micro-batch went (:class:`~sqlext.streaming.run.BatchReport`:
        where it computed, the seconds of each step); None before its first, or where Spark's own
        sink writes the statement's rows."""
        last = None if self._run is None else self._run.last
        return None if last is self._earlier else last

    @property
    def source_records(self) -> list:
        """How the run reads each folder source's files: their
        :class:`~sqlext.streaming.bad_records.SourceRecords` (each with its place among the
        query's sources); none where the run reads no folder."""
        return [] if self._sources is None else list(self._sources.records)

    def __getattr__(self, name: str):
        return getattr(self._query, name)

    def __repr__(self) -> str:
        return repr(self._query)

    def awaitTermination(self, timeout: int | None = None):
        return self._classed(lambda: self._query.awaitTermination(timeout) if timeout is not None
                             else self._query.awaitTermination())

    def processAllAvailable(self) -> None:
        return self._classed(self._query.processAllAvailable)

    def _forgettable(self) -> bool:
        """Whether the batch that failed may be forgotten: not where it was applied in parts and
        a part is committed (:func:`~sqlext.streaming.batch_parts.forget_parts`); Spark then
        runs it again with the same files, from the part that failed."""
        from sqlext.streaming.batch_parts import forget_parts
        from sqlext.streaming.batches import planned_batch
        from sqlext.streaming.checkpoint import STATE_FOLDER

        batch = planned_batch(self._checkpoint)
        return batch is None or forget_parts(self._checkpoint / STATE_FOLDER, batch)

    def _classed(self, call):
        with surface(self._surface):
            return self._classed_error(call)

    def _classed_error(self, call):
        try:
            return call()
        except Exception as error:
            ours = find_in(error)
            if ours is None:
                raise
            if ours.error_class in INPUT_ERRORS and self._forgettable():
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


@surfaced("sqlext.streaming.streaming_frame")
def streaming_frame(spark, sql: str, sources: Mapping[str, str] | None = None,
                    source_format: str | Mapping[str, str] = "parquet",
                    checkpoint: str | None = None, schemas: Mapping[str, str] | None = None,
                    output: str | None = None, trigger: str = "available_now", query_name: str | None = None,
                    source_options: Mapping[str, Mapping[str, str]] | None = None,
                    bad_records: Mapping[str, str] | None = None, schema_evolution: Mapping[str, str] | None = None,
                    full_refresh: bool = False):
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
    ``source_format``, ``source_options``, ``bad_records``, ``schema_evolution`` and ``full_refresh`` are
    :func:`stream`'s."""
    tree = one_statement(sql)
    if stateless(tree):
        folder = None if checkpoint is None else resolve(spark, checkpoint)
        sources = Sources(spark, sources, source_format, schemas, folder, source_options, bad_records,
                          schema_evolution)
        sources.check_used(tree)
        return stateless_frame(spark, tree, sources)
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
                   schema_evolution=schema_evolution, full_refresh=full_refresh)
    if trigger == "available_now":
        run_available_now(spark, sql, **options)
    else:
        stream(spark, sql, trigger=trigger, **options).processAllAvailable()
    return spark.readStream.schema(_output_schema(spark, folder, output)).parquet(output.uri)


def _output_schema(spark, checkpoint, output):
    """The columns the runs write into ``output``: those the checkpoint recorded, else the files'."""
    return output_columns(checkpoint) or spark.read.parquet(output.uri).schema



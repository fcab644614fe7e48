"""Incremental runs: a statement over ``STREAM(source)`` as a Spark Structured Streaming query.

``STREAM(name)`` (the spelling of Spark Declarative Pipelines) reads a source as a stream: a
streaming temporary view (any streaming DataFrame: files, Kafka, ...), a table Spark can read
as a stream, or a folder of change files given with ``sources={name: folder}``. A table
function whose input is ``TABLE(STREAM(name))`` runs incrementally, keeping its state in the
query's checkpoint; the rest of the statement is plain Spark SQL on the stream.

A run goes through three phases, each a module: :mod:`~sqlext.streaming.bind` reads the
statement once (parse, kind, refusals), :mod:`~sqlext.streaming.plan` builds its run (sources,
operators, the ``foreachBatch`` function; cached per checkpoint) and
:mod:`~sqlext.streaming.query` starts it as Spark's query and waits for it.
:mod:`~sqlext.streaming.tables` runs a statement into a catalog table (dbt's incremental models).
"""

from sqlext.language.dialect import batch_form
from sqlext.streaming.bind import FUNCTION, one_statement, reads_streams
from sqlext.streaming.query import (OUTPUT_IN_CHECKPOINT, RunningQuery, jobs_of, run_available_now, stream,
                                    streaming_frame)
from sqlext.streaming.tables import CHECKPOINT_FOLDER, run_into_table

__all__ = ["CHECKPOINT_FOLDER", "FUNCTION", "OUTPUT_IN_CHECKPOINT", "RunningQuery", "batch_form", "jobs_of",
           "one_statement", "reads_streams", "run_available_now", "run_into_table", "stream", "streaming_frame"]

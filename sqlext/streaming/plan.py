"""Plan: the run of a bound statement built, once per statement and checkpoint in a process
(:data:`_COMPILED`): its sources read as streams, its operators (one per stateful call, and the
aggregate over them) and the ``foreachBatch`` function that runs them
(:func:`stateful_function`), or, for a statement that keeps no state, Spark's own streaming frame
(:func:`stateless_frame`). :func:`result_schema` gives the columns a statement's runs write
without running it (a catalog table is made with them)."""

from __future__ import annotations

import itertools
import re
from contextlib import ExitStack

from sqlglot import exp

from sqlext.errors import SqlextError
from sqlext.functions.arguments import set_literal
from sqlext.functions.changes import CHANGE_TYPE
from sqlext.functions.input_formats import ARGUMENT, DELTA, take_format
from sqlext.language.dialect import (
    TableArgument, batch_form, parse_one, stream_options, to_sql, is_stream as _is_stream,
)
from sqlext.language.sqltree import identifier_list
from sqlext.runner import run_statement
from sqlext.session import ensure_installed
from sqlext.storage import folder_bytes
from sqlext.streaming.bad_records import QUARANTINE
from sqlext.streaming.bind import (
    FUNCTION, Bound, is_recursion, order_by_streams, read_shape, reads_no_stream, refuse_table_input, replace_table,
)
from sqlext.streaming.checkpoint import STATE_FOLDER, STATEMENT_FILE, START_OVER, LAYOUT_FILE
from sqlext.streaming.recent import Recent
from sqlext.streaming.record_problems import header_hint
from sqlext.streaming.registry import build_operator, keyed_call
from sqlext.streaming.run import arrow_schema, outer_over, spark_schema
from sqlext.streaming.shapes import (
    DEBEZIUM_SHAPE, DELTA_SHAPE, as_change_rows, change_rows_frame, stream_order, stream_shape,
)
from sqlext.streaming.sources import Sources

_views = itertools.count(1)


def stateful_function(spark, bound: Bound, sources: "Sources", checkpoint, output, output_format):
    """The streaming source and the foreachBatch function of a bound statement that keeps
    state (:func:`~sqlext.streaming.bind.bind`): built by its kind's builder (:data:`PLANS`)."""
    ensure_installed(spark)
    return PLANS[bound.kind](spark, bound, sources, checkpoint, output, output_format)


def _recursion(spark, bound: Bound, sources: "Sources", checkpoint, output, output_format):
    """A recursion over a stream of edges: its run of its own
    (:mod:`sqlext.streaming.operators.recursion`)."""
    from sqlext.streaming.operators.recursion import RecursionRun, RecursionShape

    shape = RecursionShape(bound.tree)
    source = sources.read(shape.stream.this)
    return source, RecursionRun(shape, checkpoint, output, output_format, spark, source.schema,
                                folder=sources.rows_folder(shape.stream.this))


def _self_join(spark, bound: Bound, sources: "Sources", checkpoint, output, output_format):
    """A self-join of one stream: the engine's operator where it pairs the statement (and the
    operator of an aggregate over its pairs after it), else the run of its own (keys and a band
    it does not pair)."""
    from sqlext.streaming.operators.self_join import SelfJoinRun, SelfJoinShape

    stream = bound.streams[0].this
    source = sources.read(stream)
    shape = SelfJoinShape(spark, bound.tree, source.schema)
    placeholder = f"__sx_result_{next(_views)}"
    if shape.pairing is None:
        return source, SelfJoinRun(shape, placeholder, checkpoint, output, output_format, source.schema,
                                   sources.rows_folder(stream))
    from sqlext.streaming.engine import Input, Pipeline
    from sqlext.streaming.inputs import inputs_stream
    from sqlext.streaming.operators.self_join import SelfJoinOperator

    events = Input("events", arrow_schema(source.schema), source.schema, source=0, folder=sources.rows_folder(stream))
    buckets = _buckets(spark, checkpoint, [sources.parquet_folder(stream)])
    operator = SelfJoinOperator(shape, checkpoint / STATE_FOLDER, events, buckets)
    if shape.grouped is None:
        return inputs_stream([source]), Pipeline([operator], operator.outer(placeholder), placeholder, checkpoint,
                                                 output, output_format)
    from sqlext.streaming.operators.self_join_aggregate import SelfJoinAggregateOperator

    aggregate = SelfJoinAggregateOperator(shape, checkpoint / STATE_FOLDER, operator, buckets)
    if shape.projection is not None:  # each task writes a file of projected pairs per bucket of the groups
        operator.split = aggregate.route
    return inputs_stream([source]), Pipeline([operator, aggregate], aggregate.outer(placeholder), placeholder,
                                             checkpoint, output, output_format)


def _calls(spark, bound: Bound, sources: "Sources", checkpoint, output, output_format):
    """Calls of keyed functions (and any SQL around them): the engine's operators, one per call
    (and the aggregate over them), built once per statement and checkpoint in a process."""
    tree, root = bound.tree, bound.root
    statement = to_sql(tree)
    placeholder = f"__sx_result_{next(_views)}"
    numbered = [t for t in root.find_all(exp.Table) if _is_stream(t)]  # the sources, numbered in the order of the text
    frames = []
    for table in numbered:
        frames.append(sources.read(table.this))
    # the streams of Debezium's events, whose connectors send events again after a restart
    repeating = frozenset(i for i, t in enumerate(numbered) if read_shape(t.this) == DEBEZIUM_SHAPE)
    converted = _as_change_rows(spark, root, numbered, frames)
    from sqlext.streaming.inputs import inputs_stream

    folders = [sources.parquet_folder(t.this) for t in numbered]
    key = _compiled_key(spark, statement, checkpoint, output, output_format, frames, folders, converted, sources)
    kept = _COMPILED.get(key)
    if kept is not None:
        return kept
    pipeline = _pipeline(spark, tree, root, placeholder, numbered, frames, sources, checkpoint, output, output_format,
                         converted, repeating)
    compiled = inputs_stream(frames), pipeline
    # under the key as it is now: a first run has just written the checkpoint's layout file
    _COMPILED.put(_compiled_key(spark, statement, checkpoint, output, output_format, frames, folders, converted, sources),
                  compiled)
    return compiled


# each kind of statement that keeps state (see bind.KINDS), and what builds its run
PLANS = {"recursion": _recursion, "self-join": _self_join, "calls": _calls}


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
    from sqlext.streaming.engine import BUCKETS_SETTING

    def written(folder, name):
        return tuple((e.name, e.size, e.mtime_ns) for e in folder.entries() if e.name == name and not e.is_dir)

    return (id(spark), statement, checkpoint.uri, output.uri, output_format,
            tuple(f.schema.json() for f in frames), tuple(None if f is None else f.uri for f in folders),
            tuple(sorted(converted)), spark.conf.get(BUCKETS_SETTING, ""),
            tuple((r.name, r.file_format, tuple(sorted(r.options.items())), r.mode) for r in sources.records),
            written(checkpoint, STATEMENT_FILE), written(checkpoint / STATE_FOLDER, LAYOUT_FILE))


def _pipeline(spark, tree, root, placeholder: str, numbered: list, frames: list, sources: "Sources", checkpoint, output,
              output_format: str, converted, repeating: frozenset = frozenset()):
    """The operators of the statement's calls (and of its aggregate) and its foreachBatch function."""
    from sqlext.streaming.operators.aggregate import is_aggregate
    from sqlext.streaming.engine import Pipeline

    operators: list = []
    buckets = _buckets(spark, checkpoint, [sources.parquet_folder(t.this) for t in numbered])

    call = root.copy()
    aggregated = is_aggregate(tree) and keyed_call(call).emit(call) == "final"
    _operator(spark, root, checkpoint / STATE_FOLDER, numbered, frames, sources, operators, buckets, feed=aggregated,
              converted=converted, repeating=repeating)
    replace_table(root, placeholder)
    if aggregated:
        outer = _aggregate(spark, tree, placeholder, checkpoint, operators, buckets)
        if outer is not None:
            return Pipeline(operators, outer, placeholder, checkpoint, output, output_format)
        # an aggregate without an incremental form: the statement runs over the call's final table
        operators = []
        numbered = [t for t in call.find_all(exp.Table) if _is_stream(t)]
        _operator(spark, call, checkpoint / STATE_FOLDER, numbered, frames, sources, operators, buckets,
                  converted=converted, repeating=repeating)
    return Pipeline(operators, tree, placeholder, checkpoint, output, output_format)


def _aggregate(spark, tree: exp.Expression, placeholder: str, checkpoint, operators: list, buckets: int):
    """The incremental GROUP BY over the call's change feed (appended to ``operators``) and the
    statement that then reads its rows; None where the aggregate has no incremental form."""
    from sqlext.streaming.operators.aggregate import AggregateOperator, AggregateShape

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
    """The buckets of a new state, from the bytes its statement's source folders hold now and
    the rows their Parquet files hold (a first run over a long history gets more; see
    :meth:`KeyedOperator.state_buckets`). A state that exists keeps the number it recorded, so
    the folders are only measured before the first run has kept any."""
    from sqlext.streaming.engine import KeyedOperator

    if (checkpoint / STATE_FOLDER).entries():
        return KeyedOperator.state_buckets(spark)
    folders = [f for f in folders if f is not None]
    return KeyedOperator.state_buckets(spark, sum(folder_bytes(f) for f in folders),
                                       sum(_parquet_rows(f) for f in folders))


def _parquet_rows(folder) -> int:
    """The rows the data files under ``folder`` hold, from their Parquet footers. Only a measure
    of the history for the buckets: a file whose footer does not read counts nothing here, and
    the run's reader names it."""
    from sqlext.streaming.source_files import data_files

    total = 0
    for file in data_files(folder):
        try:
            total += file.parquet_rows()
        except Exception:  # noqa: BLE001 - the run's own read refuses the file, naming it
            continue
    return total


def _operator(spark, table: exp.Table, folder, numbered: list, frames: list, sources: "Sources", operators: list,
              buckets: int, feed: bool = False, converted: frozenset = frozenset(),
              repeating: frozenset = frozenset()):
    """The keyed operator of one call (its inner calls first, appended to ``operators`` before it):
    each table argument a stream the statement reads, or another call's change feed. The
    streams numbered in ``converted`` are read as change rows from another shape, so their
    files are not the rows the operator reads."""
    from sqlext.streaming.engine import Input

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
                                 folder=None if index in converted else sources.rows_folder(inner.this),
                                 repeats=index in repeating)
        elif inner is not None and keyed_call(inner) is not None:
            upstream = _operator(spark, inner, folder / "calls" / name, numbered, frames, sources, operators, buckets,
                                 converted=converted, repeating=repeating)
            if upstream.emit != "changes":
                raise SqlextError(
                    "UNSUPPORTED_STREAM", function=FUNCTION, what=f"{upstream.function} with emit => "
                    f"'{upstream.emit}' as the {name} input of {keyed.name}",
                    reason="a call feeds another with its change feed, the rows emit => 'changes' gives",
                    fix=f"Leave emit out of the inner {upstream.function} (or write emit => 'changes'); the outer "
                        "call's emit says what the statement writes.")
            inputs[name] = Input(name, upstream.output_arrow, spark_schema(upstream.output_arrow), upstream=upstream)
        else:
            refuse_table_input(keyed.name, name, argument)
    try:
        operator = build_operator(keyed, spark, table.copy(), call.literals, inputs, folder, buckets, feed)
    except SqlextError as error:
        raise _headerless(error, inputs, sources) from None
    operators.extend(operator.stages)  # the operators that compute its inputs from its streams
    operators.append(operator)
    return operator


_SPARK_CSV_NAME = re.compile(r"_c\d+")


def _headerless(error: SqlextError, inputs: dict, sources: "Sources") -> SqlextError:
    """A call's column missing from an input whose columns are ``_c0``, ``_c1``, ...: the names
    Spark gives the fields of a CSV file read without its header line. Where that input is such
    a folder, the fix is its header, not another argument."""
    given = inputs.get(error.params.get("side")) if error.error_class == "CHANGELOG_MISSING_COLUMN" else None
    columns = error.params.get("columns") or []
    if given is None or given.source is None or not all(_SPARK_CSV_NAME.fullmatch(str(c)) for c in columns):
        return error
    name = sources.headerless(given.source)
    if name is None:
        return error
    fix = (f"Those are the names Spark gives the fields of a CSV file read without its header line: read the files "
           f"of {name} with their header ({header_hint(name)}), or declare their columns (--source-schema "
           f"{name}='id BIGINT, ...', schemas= in Python).")
    return SqlextError(error.error_class, function=error.function, **{**error.params, "fix": fix})


def _as_change_rows(spark, root: exp.Table, numbered: list, frames: list) -> frozenset:
    """Each stream a call reads in another shape (``format => ...``) as sqlext's change rows:
    its frame in ``frames`` replaced by the query of :mod:`sqlext.functions.input_formats` over it,
    and the call rewritten to read change rows (no ``format``; ``order_by`` naming the ordering
    column of the change rows), so that the operators, their checks and the batch function a
    first run may use all see one shape. Returns the indexes of the streams it replaced."""
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


def stateless_frame(spark, tree: exp.Expression, sources: "Sources"):
    """The streaming DataFrame of a statement that keeps no state: each ``STREAM(...)`` read as
    a stream, the rest Spark SQL. Its rows are Spark's own stream, with no place to set bad
    records aside, so a quarantine is refused."""
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
                replace_table(table, views.enter_context(temporary_view(source)))
        frame = spark.sql(to_sql(tree))
    if not frame.isStreaming:
        raise reads_no_stream()
    return frame


def result_schema(spark, sql: str, sources: Sources | None = None):
    """The columns the statement's runs write, without running it: those of the statement
    over the whole of each source read as a run reads it (a source in another shape,
    ``STREAM(x, format => ...)``, as its change rows, and the calls over it ordered by their
    ordering column: :func:`order_by_streams`; a folder of ``sources`` as the columns a run
    reads from its files, with no row). sqlext computes a recursion when it is read, so a
    recursion's columns are found as its runs find them (:func:`_recursion_schema`)."""
    from sqlext.streaming.engine import temporary_view

    ensure_installed(spark)
    sources = sources or Sources(spark)
    tree = parse_one(sql)
    if is_recursion(tree):
        return _recursion_schema(spark, tree, sources)
    order_by_streams(tree)
    with ExitStack() as views:
        for table in [t for t in tree.find_all(exp.Table) if _is_stream(t)]:
            if stream_options(table.this) or sources.folder_of(table.this) is not None:
                replace_table(table, views.enter_context(temporary_view(_batch_rows(spark, table.this, sources))))
        return run_statement(spark, batch_form(to_sql(tree))).schema


def _batch_rows(spark, call: exp.Anonymous, sources: Sources):
    """All the rows of the source ``STREAM(...)`` reads, as a run reads them: in another shape
    (``format => ...``), as change rows; a folder, as an empty frame of the columns a run
    reads from it."""
    if sources.folder_of(call) is not None:
        return sources.batch_frame(call)
    rows = run_statement(spark, batch_form(to_sql(exp.select("*").from_(exp.Table(this=call.copy())))))
    return rows if stream_shape(call) == DELTA_SHAPE else as_change_rows(spark, call, rows)


def _recursion_schema(spark, tree: exp.Expression, sources: Sources):
    """The columns of an incremental recursion's runs, found by the code of the run
    (:class:`sqlext.streaming.operators.recursion.RecursionRun`): the recursion's rows over the
    edges as the run reads them, through the outer query, and over a change feed of edges
    the change columns a run carries (``_change_type`` and the stream's ordering column)."""
    from pyspark.sql.types import StructField, StringType, StructType

    from sqlext.streaming.engine import temporary_view
    from sqlext.streaming.operators.recursion import RecursionShape, compiled

    shape = RecursionShape(tree)
    edges = _batch_rows(spark, shape.stream.this, sources).schema
    order = stream_order(shape.stream.this)
    order_by = next((f.name for f in edges.fields if f.name.lower() == order.lower()), order)
    fields = [f for f in edges.fields if f.name not in (CHANGE_TYPE, order_by)]
    rows, _ = compiled(spark, shape, StructType(fields))
    carry = []
    if CHANGE_TYPE in edges.names:
        carry = [StructField(CHANGE_TYPE, StringType(), True)] + [f for f in edges.fields if f.name == order_by]
    with temporary_view(spark.createDataFrame([], StructType(list(rows.fields) + carry))) as view:
        # the outer query over the run's rows, as a run writes it (the change columns kept)
        outer = outer_over(shape.main, shape.name, view, [f.name for f in carry])
        return run_statement(spark, to_sql(outer)).schema



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
from typing import Mapping

from sqlglot import exp

from sqlext.catalog.arguments import find_calls, read_call
from sqlext.catalog.changes import CHANGE_TYPE, DEFAULT_ORDER_BY
from sqlext.catalog.changelog_filter import ARGUMENTS as FILTER_ARGUMENTS
from sqlext.catalog.changelog_filter import FUNCTION as FILTER
from sqlext.catalog.changelog_filter import check_incremental, filter_spec
from sqlext.catalog.fk_join import ARGUMENTS as FK_JOIN_ARGUMENTS
from sqlext.catalog.fk_join import FUNCTION as FK_JOIN
from sqlext.catalog.fk_join import check_incremental as check_fk_join_incremental
from sqlext.catalog.fk_join import fk_join_spec
from sqlext.errors import SqlextError, find_in
from sqlext.rewrites.dialect import TableArgument, parse_one, to_sql
from sqlext.rewrites.dialect import is_stream as _is_stream

FUNCTION = "sqlext stream"
_views = itertools.count(1)


ENGINES = ("tables", "state_store")


def stream(spark, sql: str, *, checkpoint: str, output: str | None = None, trigger: str = "available_now",
           output_format: str = "parquet", sources: Mapping[str, str] | None = None,
           source_format: str = "parquet", query_name: str | None = None, engine: str = "tables"):
    """Start the statement as a streaming query writing to ``output`` (a folder, in
    ``output_format``) with its progress and state in ``checkpoint``; returns the
    ``StreamingQuery``. ``trigger`` is ``"available_now"`` (what arrived since the last run,
    then stop) or a processing-time interval such as ``"10 seconds"`` (keep running).

    ``engine`` says where CHANGELOG_FILTER keeps its state: ``"tables"`` (snapshots written by
    each micro-batch, every step a native plan: :mod:`sqlext.streaming.tables`) or
    ``"state_store"`` (Spark's state store through ``transformWithState``, one Python call per
    key: :mod:`sqlext.udfs.changelog_stream`)."""
    if engine not in ENGINES:
        raise SqlextError("INVALID_OPTION_VALUE", function=FUNCTION, argument="engine", value=repr(engine),
                          allowed=", ".join(repr(e) for e in ENGINES))
    if engine == "tables":
        if output is None:
            raise SqlextError("UNSUPPORTED_STREAM", function=FUNCTION, what="engine 'tables' without an output folder",
                              reason="its micro-batches write their rows into a folder",
                              fix="Pass output=..., or use engine='state_store' with streaming_frame for other sinks.")
        source, function = _table_state_function(spark, sql, sources, source_format, checkpoint, output, output_format)
        writer = source.writeStream.foreachBatch(function).option("checkpointLocation", checkpoint)
    else:
        frame = streaming_frame(spark, sql, sources=sources, source_format=source_format, checkpoint=checkpoint)
        writer = frame.writeStream.format(output_format).outputMode("append").option("checkpointLocation", checkpoint)
        if output is not None:
            writer = writer.option("path", output)
    if query_name:
        writer = writer.queryName(query_name)
    if trigger == "available_now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=trigger)
    return writer.start()


def run_available_now(spark, sql: str, **options) -> None:
    """One incremental run: start with ``availableNow``, wait for it, and raise its error as a
    classed :class:`SqlextError` where it is one (else Spark's own)."""
    query = stream(spark, sql, trigger="available_now", **options)
    try:
        query.awaitTermination()
    except Exception as error:  # noqa: BLE001 - mapped below, or raised as it is
        ours = find_in(error)
        if ours is not None:
            raise ours from None
        raise


def streaming_frame(spark, sql: str, sources: Mapping[str, str] | None = None, source_format: str = "parquet",
                    checkpoint: str | None = None):
    """The streaming DataFrame of one statement that reads ``STREAM(...)``. With
    ``checkpoint``, the columns of every source are compared with those of the checkpoint's
    first run (a change is ``[STREAM_SCHEMA_CHANGED]``) and recorded on the first run."""
    from sqlext.session import ensure_installed

    ensure_installed(spark)
    _use_rocksdb(spark)
    tree = parse_one(sql)
    views: list[str] = []
    try:
        for table in list(tree.find_all(exp.Table)):
            if _is_stream(table) and not isinstance(table.parent, TableArgument):
                _replace(table, _register(spark, _source(spark, table.this, sources, source_format), views))
        if find_calls(tree, FK_JOIN) and any(_is_stream(t) for t in tree.find_all(exp.Table)):
            raise SqlextError(
                "UNSUPPORTED_STREAM", function=FUNCTION, what="FK_JOIN on engine 'state_store'",
                reason="its state is kept under several keys, which the 'tables' engine does",
                fix="Use engine='tables' (the default).")
        _refuse_recursion(tree)
        for table in find_calls(tree, FILTER):
            call = _stream_call(table, FILTER, FILTER_ARGUMENTS, ("input",))
            argument = call.tables["input"]
            source = _source(spark, argument.this.this, sources, source_format)
            if checkpoint is not None:
                _check_columns(checkpoint, to_sql(argument.this.this), source.schema)
            spec = filter_spec(call.literals, source.columns)
            from sqlext.udfs.changelog_stream import filter_stream

            _replace(table, _register(spark, filter_stream(source, spec), views))
        frame = spark.sql(to_sql(tree))
    finally:
        for view in views:
            spark.catalog.dropTempView(view)
    if not frame.isStreaming:
        raise SqlextError("UNSUPPORTED_STREAM", function=FUNCTION, what="this statement",
                          reason="it reads no STREAM(...) source",
                          fix="Read the changes with STREAM(name), e.g. FROM STREAM(my_changes).")
    return frame


def _table_state_function(spark, sql, sources, source_format, checkpoint, output, output_format):
    """The streaming source and the foreachBatch function of a statement holding one
    CHANGELOG_FILTER over ``STREAM(name)`` or one FK_JOIN over two streams (and any SQL
    around it)."""
    from sqlext.session import ensure_installed

    ensure_installed(spark)
    tree = parse_one(sql)
    filters, joins = find_calls(tree, FILTER), find_calls(tree, FK_JOIN)
    streams = [t for t in tree.find_all(exp.Table) if _is_stream(t)]
    if _is_recursion(tree) and streams and not filters and not joins:
        from sqlext.streaming.recursion import RecursionShape, TableStateRecursion

        shape = RecursionShape(tree)
        source = _source(spark, shape.stream.this, sources, source_format)
        _check_columns(checkpoint, to_sql(shape.stream.this), source.schema)
        return source, TableStateRecursion(shape, checkpoint, output, output_format)
    _refuse_recursion(tree)
    if len(filters) + len(joins) != 1 or len(streams) != (1 if filters else 2):
        raise SqlextError(
            "UNSUPPORTED_STREAM", function=FUNCTION, what="this statement",
            reason="the 'tables' engine runs one CHANGELOG_FILTER over one STREAM(...) source, or one FK_JOIN "
                   "over two, and reads no other stream",
            fix="Read the streams in one CHANGELOG_FILTER or FK_JOIN call.")
    placeholder = f"__sx_result_{next(_views)}"
    if filters:
        table = filters[0]
        call = _stream_call(table, FILTER, FILTER_ARGUMENTS, ("input",))
        name = to_sql(call.tables["input"].this.this)
        source = _source(spark, call.tables["input"].this.this, sources, source_format)
        _check_columns(checkpoint, name, source.schema)
        spec = filter_spec(call.literals, source.columns)
        check_incremental(spec, rewrites_output=True)
        from sqlext.udfs.changelog_stream import checked_predicate

        checked_predicate(source, spec)
        call_node = table.copy()
        _replace(table, placeholder)
        from sqlext.streaming.tables import TableStateFilter

        return source, TableStateFilter(spec, call_node, tree, placeholder, checkpoint, output, output_format)
    table = joins[0]
    call = _stream_call(table, FK_JOIN, FK_JOIN_ARGUMENTS, ("left", "right"))
    inputs = {}
    for side in ("left", "right"):
        stream_call = call.tables[side].this.this
        inputs[side] = _source(spark, stream_call, sources, source_format)
        _check_columns(checkpoint, to_sql(stream_call), inputs[side].schema)
    spec = fk_join_spec(call.literals, inputs["left"].columns, inputs["right"].columns)
    check_fk_join_incremental(spec)
    call_node = table.copy()
    _replace(table, placeholder)
    from sqlext.streaming.fk_join import TableStateFkJoin, one_stream

    return one_stream(inputs["left"], inputs["right"]), \
        TableStateFkJoin(spec, call_node, tree, placeholder, checkpoint, output, output_format)


def _is_recursion(tree: exp.Expression) -> bool:
    return any(w.args.get("recursive") for w in tree.find_all(exp.With)) or bool(find_calls(tree, "RECURSIVE_EXPAND"))


def _refuse_recursion(tree: exp.Expression) -> None:
    """A recursion over a stream runs incrementally only on its own, on the 'tables' engine
    (:mod:`sqlext.streaming.recursion`); anywhere else it would see each micro-batch's rows alone."""
    if _is_recursion(tree) and any(_is_stream(t) for t in tree.find_all(exp.Table)):
        raise SqlextError(
            "UNSUPPORTED_STREAM", function=FUNCTION, what="a recursion here",
            reason="a recursion runs incrementally only as a statement of its own, on engine 'tables' (it would "
                   "see each micro-batch's rows alone)",
            fix="Run WITH RECURSIVE over STREAM(edges) as its own statement with engine 'tables', or as a batch "
                "query (sqlext.sql).")


def _stream_call(table: exp.Table, function: str, arguments, inputs: tuple[str, ...]):
    """A call's arguments, each of ``inputs`` a ``TABLE(STREAM(name))``."""
    call = read_call(table, function, arguments)
    for name in inputs:
        argument = call.tables.get(name)
        if argument is None or not _is_stream(argument.this):
            raise SqlextError(
                "UNSUPPORTED_STREAM", function=FUNCTION, what=f"a {function} over a table",
                reason="a streaming statement reads its inputs as streams",
                fix=f"Write {name} => TABLE(STREAM(my_changes)).")
    return call


def _check_columns(checkpoint: str, name: str, schema) -> None:
    """Compare a source's columns with those recorded by the checkpoint's first run (recorded
    next to Spark's own files, in ``<checkpoint>/sqlext-sources.json``)."""
    import json
    from pathlib import Path

    path = Path(checkpoint) / "sqlext-sources.json"
    recorded = json.loads(path.read_text()) if path.exists() else {}
    now = [[f.name, f.dataType.simpleString()] for f in schema.fields]
    if name not in recorded:
        recorded[name] = now
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(recorded, indent=1))
        return
    before = {n: t for n, t in recorded[name]}
    after = {n: t for n, t in now}
    changes = [f"{n} was added ({t})" for n, t in after.items() if n not in before]
    changes += [f"{n} was dropped" for n in before if n not in after]
    changes += [f"{n} changed from {before[n]} to {t}" for n, t in after.items() if n in before and before[n] != t]
    if changes:
        raise SqlextError("STREAM_SCHEMA_CHANGED", function=FUNCTION, name=name, change="; ".join(changes))


def _stream_argument(call: exp.Anonymous) -> exp.Expression:
    """The one table or view name ``STREAM(...)`` takes (a name, a dotted name or a string)."""
    if len(call.expressions) != 1 or not isinstance(call.expressions[0], (exp.Column, exp.Table, exp.Literal)):
        raise SqlextError("UNSUPPORTED_STREAM", function=FUNCTION, what=to_sql(call),
                          reason="STREAM takes one table or view name", fix="Write STREAM(my_changes).")
    return call.expressions[0]


def _source(spark, call: exp.Anonymous, sources: Mapping[str, str] | None, source_format: str):
    """The streaming DataFrame ``STREAM(name)`` names."""
    argument = _stream_argument(call)
    name = argument.this if isinstance(argument, exp.Literal) else to_sql(argument)
    if sources and name in sources:
        folder = sources[name]
        reader = spark.read.format(source_format)
        if source_format == "parquet":  # every file's columns, so that a changed file is noticed
            reader = reader.option("mergeSchema", "true")
        try:
            schema = reader.load(folder).schema
        except Exception as error:  # noqa: BLE001 - no files, or files whose columns disagree
            said = [line.strip() for line in str(error).splitlines()
                    if "merge" in line.lower() or "incompatible" in line.lower()]
            if said:
                raise SqlextError("STREAM_SCHEMA_CHANGED", function=FUNCTION, name=name,
                                  change=f"its files disagree ({said[0][:300]})") from None
            schema = None
        if schema is None or not schema.fields:
            raise SqlextError("STREAM_SOURCE_EMPTY", function=FUNCTION, name=name, path=folder)
        return spark.readStream.format(source_format).schema(schema).load(folder)
    frame = spark.table(name)
    return frame if frame.isStreaming else spark.readStream.table(name)


def _register(spark, frame, views: list[str]) -> str:
    view = f"__sx_stream_{next(_views)}"
    frame.createOrReplaceTempView(view)
    views.append(view)
    return view


def _replace(table: exp.Table, view: str) -> None:
    replacement = exp.Table(this=exp.to_identifier(view))
    if table.args.get("alias"):
        replacement.set("alias", table.args["alias"].copy())
    table.replace(replacement)


def _use_rocksdb(spark) -> None:
    """transformWithState keeps its state in the RocksDB state store provider."""
    from sqlext.udfs.changelog_stream import ROCKSDB

    key = "spark.sql.streaming.stateStore.providerClass"
    if spark.conf.get(key, "") != ROCKSDB:
        spark.conf.set(key, ROCKSDB)


CHECKPOINT_FOLDER = "_sqlext_checkpoint"


def reads_streams(sql: str) -> bool:
    """Whether ``sql`` reads a ``STREAM(...)`` source (text that does not parse reads none)."""
    try:
        tree = parse_one(sql)
    except Exception:  # noqa: BLE001 - sqlglot fails in several ways on text it cannot read
        return False
    return any(_is_stream(t) for t in tree.find_all(exp.Table))


def batch_form(sql: str) -> str:
    """The same statement over the whole of each ``STREAM(name)`` source read as a table: the
    batch query whose result the incremental runs add up to."""
    tree = parse_one(sql)
    for table in list(tree.find_all(exp.Table)):
        if not _is_stream(table):
            continue
        argument = _stream_argument(table.this)
        if isinstance(argument, exp.Column):
            plain = exp.Table(this=argument.this.copy(), db=argument.args["table"].copy() if argument.args.get("table") else None)
        elif isinstance(argument, exp.Table):
            plain = argument.copy()
        else:
            plain = exp.to_table(argument.this)
        if table.args.get("alias"):
            plain.set("alias", table.args["alias"].copy())
        table.replace(plain)
    return to_sql(tree)


def run_into_table(spark, sql: str, table: str, *, full_refresh: bool = False) -> None:
    """One incremental run of ``sql`` (which reads ``STREAM(...)`` tables) into the catalog
    table ``table``: the rows of the changes that arrived since the last run are appended.

    The table is a Parquet table over a folder that also holds the run's checkpoint (in
    ``_sqlext_checkpoint``, which Spark's file readers skip), so the output and the state
    that produced it stay together: dropping the folder starts over. A new table's folder is
    ``<its database's location>/<name>``. ``full_refresh`` drops the table and its folder first,
    so the run processes the whole history again. A table that exists without such a
    checkpoint (written by something else), or whose columns differ from the statement's, is
    refused: ``full_refresh`` rebuilds it."""
    import shutil
    from pathlib import Path

    from sqlext.session import ensure_installed

    ensure_installed(spark)
    target = _table_name(table)
    name = to_sql(target)
    exists = spark.catalog.tableExists(name)
    folder = Path(_table_folder(spark, target, exists))
    if full_refresh:
        if exists:
            spark.sql(to_sql(exp.Drop(tables=[target.copy()], kind="TABLE", exists=True)))
            exists = False
        shutil.rmtree(folder, ignore_errors=True)
    schema = _result_schema(spark, sql)
    if exists:
        if not (folder / CHECKPOINT_FOLDER).is_dir():
            raise SqlextError("STREAM_TABLE_NOT_INCREMENTAL", function=FUNCTION, table=name, folder=str(folder))
        have = [(f.name, f.dataType.simpleString()) for f in spark.table(name).schema.fields]
        want = [(f.name, f.dataType.simpleString()) for f in schema.fields]
        if have != want:
            raise SqlextError("STREAM_TABLE_COLUMNS_DIFFER", function=FUNCTION, table=name,
                              have=_columns(have), want=_columns(want))
    run_available_now(spark, sql, checkpoint=str(folder / CHECKPOINT_FOLDER), output=str(folder))
    if not exists:
        spark.catalog.createTable(name, path=str(folder), source="parquet", schema=schema)
    spark.catalog.refreshTable(name)


def _result_schema(spark, sql: str):
    """The columns of the statement's batch form, without running it. sqlext computes a
    recursion when it is read, so a recursion's columns come from Spark's own analysis of the
    same recursion with UNION ALL (the same columns and types; Spark refuses UNION there)."""
    from sqlext.api import sql as run_sql

    tree = parse_one(batch_form(sql))
    if not _is_recursion(tree):
        return run_sql(spark, to_sql(tree)).schema
    for with_ in tree.find_all(exp.With):
        for cte in with_.expressions if with_.args.get("recursive") else []:
            if isinstance(cte.this, exp.Union):
                cte.this.set("distinct", False)
    schema = spark.sql(to_sql(tree)).schema
    # over a change feed of edges, a run's rows carry its change columns (see sqlext.streaming.recursion)
    names = {cte.alias_or_name for with_ in tree.find_all(exp.With) for cte in with_.expressions}
    edges = next(t.copy() for t in tree.find_all(exp.Table) if t.name not in names)
    edges.set("alias", None)
    columns = spark.sql(to_sql(exp.select("*").from_(edges))).schema
    if CHANGE_TYPE in columns.names:
        for name in (CHANGE_TYPE, DEFAULT_ORDER_BY):
            if name in columns.names:
                schema = schema.add(columns[name])
    return schema


def _table_name(table: str) -> exp.Table:
    """``table`` (``name``, ``db.name``, quoted with backticks where needed) as a table node."""
    from sqlext.rewrites.dialect import SparkExt

    try:
        target = exp.to_table(table, dialect=SparkExt)
    except Exception:  # noqa: BLE001 - sqlglot fails in several ways on text it cannot read
        target = None
    if not isinstance(target, exp.Table) or not target.name:
        raise SqlextError("INVALID_ARGUMENT_TYPE", function=FUNCTION, argument="table",
                          expected="a table name such as my_db.my_table", value=repr(table),
                          fix="Quote parts holding spaces or dots with backticks.")
    return target


def _table_folder(spark, target: exp.Table, exists: bool) -> str:
    """The local folder of ``target``: its location if it exists, else its database's
    location joined with its name."""
    if exists:
        described = spark.sql(to_sql(exp.Describe(this=target.copy(), style="EXTENDED"))).collect()
        uri = next((row[1] for row in described if row[0] == "Location"), None)
    else:
        database = target.db or spark.catalog.currentDatabase()
        uri = spark.catalog.getDatabase(database).locationUri.rstrip("/") + "/" + target.name
    if uri is None or not (uri.startswith("file:") or uri.startswith("/")):
        raise SqlextError("UNSUPPORTED_STREAM", function=FUNCTION, what=f"a run into {to_sql(target)}",
                          reason=f"its folder {uri!r} is not on the local file system, where the 'tables' "
                                 "engine writes its output and state",
                          fix="Put the table's database on a local folder, or run sqlext.stream with an output folder.")
    from urllib.parse import unquote, urlparse

    return unquote(urlparse(uri).path) if uri.startswith("file:") else uri


def _columns(columns) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in columns)

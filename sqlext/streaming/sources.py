"""The sources a statement reads with ``STREAM(name)``: a folder of change files (given by
name), a Delta table's change data feed (a folder given by name that holds a Delta table, or
``delta.`path```), a streaming temporary view, or a table Spark can read as a stream.

``STREAM(name, format => 'debezium' | 'iceberg' [, order_by => ...])`` reads a source in another
shape (:mod:`sqlext.streaming.shapes`): its rows are mapped to sqlext's change rows as they are
read, so that what reads the stream (a recursion, which has no argument list of its own to take
``format``, or a call, which then orders by the change rows' ordering column:
:func:`sqlext.streaming.bind.order_by_streams`) sees change rows. What a folder's files hold is
read from the files themselves (:mod:`sqlext.streaming.source_files`)."""

from __future__ import annotations

import json
from difflib import get_close_matches
from typing import Mapping

from sqlglot import exp

from sqlext.errors import NANOS_FIX, SqlextError
from sqlext.functions.arguments import quote
from sqlext.functions.input_formats import AFTER, CONNECT_WRAPPER, ENVELOPE_FIELDS
from sqlext.language.dialect import stream_argument, stream_options, to_sql, SparkExt, is_stream
from sqlext.storage import Folder, resolve, decoded
from sqlext.streaming.bad_records import CORRUPT, QUARANTINE, check_options, reader_options
from sqlext.streaming.bind import read_shape, stream_needs
from sqlext.streaming.checkpoint import SOURCES_FILE, check_source_build, check_source_columns, upstream_build
from sqlext.streaming.run import arrow_schema, spark_schema
from sqlext.streaming.schema_evolution import check_modes
from sqlext.streaming.shapes import (
    DEBEZIUM_SHAPE, DELTA_SHAPE, as_change_rows, debezium_envelope, outside_envelope, stream_names, stream_order,
    stream_shape,
)
from sqlext.streaming.source_files import (
    FILE_COLUMNS_FILE, NANOS_SETTING, NO_FILES, FileColumns, cause_of, check_pandas_index, condition_of, data_files,
    disagreement, first_file, has_nanos, microseconds, named_file, schema_json,
)

FUNCTION = "sqlext stream"
DEFAULT_FORMAT = "parquet"  # of a folder's files, where the run is given none
# formats whose files hold no column types (Spark infers them, as BIGINT for any JSON number)
TEXT_FORMATS = ("json", "csv", "text")


class Sources:
    """How a run reads its streams: ``folders`` maps a name to a folder of change files in
    ``file_format`` (one format for all, or a mapping of a format by name, the folders it leaves
    out holding Parquet files); ``schemas`` declares the columns of a folder (DDL such as
    ``"id BIGINT, v STRING"``), so that a run can start before the folder holds a file;
    ``options`` gives a folder's files reader options of Spark's (``{"header": "true"}``), and
    ``bad_records`` what happens to a record that cannot be read (``'fail'``, the default, or
    ``'quarantine'``: :mod:`sqlext.streaming.bad_records`), and ``schema_evolution`` how its
    columns may change between runs (``'fail'``, the default, ``'add_columns'``, ``'widen_types'``
    or ``'evolve'``: :mod:`sqlext.streaming.schema_evolution`; a table's too); any other name is a
    streaming view or a table. :attr:`records` says, for each folder read, how its records are read."""

    def __init__(self, spark, folders: Mapping[str, str] | None = None,
                 file_format: str | Mapping[str, str] = "parquet",
                 schemas: Mapping[str, str] | None = None, checkpoint: Folder | None = None,
                 options: Mapping[str, Mapping[str, str]] | None = None, bad_records: Mapping[str, str] | None = None,
                 schema_evolution: Mapping[str, str] | None = None):
        self.spark, self.folders = spark, dict(folders or {})
        # one format for every folder, or a format by name (the folders it leaves out: Parquet)
        self.formats = {} if isinstance(file_format, str) else dict(file_format)
        self.file_format = file_format if isinstance(file_format, str) else DEFAULT_FORMAT
        for name, given in [(None, self.file_format), *self.formats.items()]:
            if not isinstance(given, str) or not given.strip():
                raise SqlextError("INVALID_ARGUMENT_TYPE", function=FUNCTION,
                                  argument="source_format" + (f" of {name}" if name is not None else ""),
                                  expected="the name of Spark's reader of the files: 'parquet', 'json', 'csv', ...",
                                  value=repr(given), fix="Give it as text, or a mapping {name: 'json', ...}.")
        self.checkpoint = checkpoint
        self.schemas = dict(schemas or {})
        self.options = {name: {str(k): str(v) for k, v in given.items()} for name, given in (options or {}).items()}
        self.bad_records = dict(bad_records or {})
        self.schema_evolution = dict(schema_evolution or {})
        self._columns_before: list | None = None  # the recorded source columns before this run
        self.records: list = []  # SourceRecords of each folder read, with its place among the query's sources
        self._read_count = 0
        self._unrecorded: list = []  # the columns learned of Parquet folders, recorded once they are checked
        # the columns as Spark reads them (a schema's JSON), of folders whose files hold
        # nanosecond timestamps: read so, then cast to Spark's microsecond timestamps
        self._nanos: dict[str, dict] = {}
        self._nanos_before: list = []  # the session's nanos setting before a read turned it on
        self._delta: dict[str, tuple] = {}  # a Delta source's name: its staged commits' folder, its columns
        for option, given in (("--source-format NAME=FORMAT (source_format=)", self.formats),
                              ("--source-schema (schemas=)", self.schemas),
                              ("--source-option (source_options=)", self.options),
                              ("--bad-records (bad_records=)", self.bad_records)):
            unknown = sorted(set(given) - set(self.folders))
            if unknown:
                raise unknown_source(option, unknown[0], list(self.folders))
        check_options(self.options, self.bad_records)
        check_modes(self.schema_evolution)

    def _holders(self, call: exp.Anonymous):
        """For a folder of Parquet files: which files hold given columns (from their footers)."""
        folder = self.parquet_folder(call)
        if folder is None:
            return None

        def holders(columns: list[str]) -> list[str]:
            wanted = {c.lower() for c in columns}
            found = []
            for file in data_files(folder):
                try:
                    if wanted & {n.lower() for n in file.parquet_schema().names}:
                        found.append(file.uri)
                except Exception:  # noqa: BLE001 - a file Arrow cannot read holds no column it can name
                    continue
            return found

        return holders

    def forget_columns(self) -> None:
        """Put back the source columns recorded before this run: its batch was forgotten (an
        input error), so a column it accepted (schema evolution) was never read into the state
        or the output, and a run without the file that brought it must not find it dropped."""
        for name, recorded in self._columns_before or []:
            if recorded is None:
                (self.checkpoint / name).delete()
            else:
                (self.checkpoint / name).write_json(recorded)

    def _absent(self, call: exp.Anonymous):
        """For a folder of Parquet files: the columns some of its files do not hold (from their
        footers), which a source whose columns may grow reads as NULL in those files' rows."""
        folder = self.parquet_folder(call)
        if folder is None:
            return None

        def absent() -> list[str]:
            held = [{n for n in file.parquet_schema().names} for file in data_files(folder)]
            return sorted(set().union(*held) - set.intersection(*held)) if held else []

        return absent

    def check_used(self, tree: exp.Expression, option: str = "--source (sources=)") -> None:
        """A folder given for a name the statement does not read, while it reads a stream that
        has no folder and is no table or view, is a misspelt name (``[UNKNOWN_SOURCE]``): the
        statement would fail on a table that does not exist, and say nothing of the folder. A
        folder beside those of every stream the statement reads is left alone: one mapping of
        sources may serve several statements. ``option`` is how the caller's user gave the folders."""
        from sqlext.delta import path_of

        streams = [t.this for t in tree.find_all(exp.Table) if is_stream(t)]
        spellings = {n for call in streams for n in stream_names(call)}
        unused = [n for n in self.folders if n not in spellings]
        for call in streams if unused else []:
            names = stream_names(call)
            if any(n in self.folders for n in names) or path_of(stream_argument(call)) is not None \
                    or self._is_table(names[-1]):
                continue
            name = (get_close_matches(names[-1], unused, n=1, cutoff=0) or unused)[0]
            raise SqlextError("UNKNOWN_SOURCE", function=FUNCTION, option=option, name=name,
                              problem=f"but the statement reads no STREAM({name}); it reads {to_sql(call)}, which no "
                                      "source names and which is no table or view", other="the statement")

    def _is_table(self, name: str) -> bool:
        try:
            return bool(self.spark.catalog.tableExists(name))
        except Exception:  # noqa: BLE001 - a name the catalog cannot read names no table
            return False

    def format_of(self, name: str) -> str:
        """The format of the files of the folder source ``name``."""
        return self.formats.get(name, self.file_format)

    def headerless(self, index: int) -> str | None:
        """The name of the query's source numbered ``index`` where it is a folder of CSV files
        read without their header line and without declared columns, so that Spark names its
        columns ``_c0``, ``_c1``, ...; else None."""
        records = next((r for r in self.records if r.index == index), None)
        if records is None or records.file_format.lower() != "csv" or records.name in self.schemas:
            return None
        if {k.lower(): v for k, v in records.options.items()}.get("header", "false").lower() == "true":
            return None
        return records.name

    def folder_of(self, call: exp.Anonymous) -> str | None:
        """The folder given for the name ``STREAM(name)`` reads (as the user gave it), or None."""
        return next((self.folders[n] for n in stream_names(call) if n in self.folders), None)

    def batch_frame(self, call: exp.Anonymous):
        """An empty batch DataFrame of the columns a run reads from the folder ``STREAM(name)``
        names (as change rows where it names a shape), for the batch form of a statement over
        folders (a table's columns are learned from it before its first run); None where the
        name has no folder. No row is read and nothing is recorded or staged: a checkpoint's
        records are its runs' to write."""
        from sqlext.delta import DeltaChanges, is_delta_table, spark_reads_delta

        path = self.folder_of(call)
        if path is None:
            return None
        if is_delta_table(resolve(self.spark, path)) and not spark_reads_delta(self.spark):
            # its change rows, as a run stages them (staging needs the checkpoint)
            rows = self.spark.createDataFrame([], spark_schema(DeltaChanges(self.spark, path, FUNCTION).schema()))
            return rows if stream_shape(call) == DELTA_SHAPE else as_change_rows(self.spark, call, rows)
        try:
            schema = self.read(call).schema
        finally:
            self.restore()
        return self.spark.createDataFrame([], schema)

    def parquet_folder(self, call: exp.Anonymous) -> Folder | None:
        """The folder of Parquet files ``STREAM(name)`` reads, if it reads one. None for a
        stream in another shape: its files are not the change rows its readers get."""
        if stream_shape(call) != DELTA_SHAPE:
            return None
        delta = self._delta_source(call)
        if delta is not None:
            return delta[0]
        name = next((n for n in stream_names(call) if n in self.folders), None)
        if name is None or self.format_of(name).lower() != "parquet":
            return None
        return resolve(self.spark, self.folders[name])

    def rows_folder(self, call: exp.Anonymous) -> Folder | None:
        """The folder of Parquet files whose batch files a run may read its rows from itself
        (:meth:`parquet_folder`), or None where Spark reads them: a source whose bad records go
        to the quarantine, whose stream leaves out the change rows the quarantine takes."""
        names = stream_names(call)
        if any(self.bad_records.get(n) == QUARANTINE for n in names if n in self.folders):
            return None
        return self.parquet_folder(call)

    def read(self, call: exp.Anonymous):
        """The streaming DataFrame ``STREAM(name)`` names, as change rows where it names a shape
        (``format => ...``). Its columns are compared with those the checkpoint's first run
        recorded (:func:`~sqlext.streaming.checkpoint.check_source_columns`), and recorded then."""
        from sqlext.streaming.schema_evolution import FAIL

        if self.checkpoint is not None and self._columns_before is None:
            # what to put back if the run's batch is forgotten
            self._columns_before = [(name, (self.checkpoint / name).read_json())
                                    for name in (SOURCES_FILE, FILE_COLUMNS_FILE)]
        known = len(self.records)
        frame = self._read(call)
        options = stream_options(call)
        extra = None  # a Debezium topic's fields outside the envelope
        if stream_shape(call) == DELTA_SHAPE:
            if "order_by" in options:
                from sqlext.functions.changes import resolve_column

                resolve_column("STREAM", to_sql(call), frame.columns, stream_order(call),
                               "Name a column of the stream with order_by => '...'.")
        else:
            extra = outside_envelope(frame) if stream_shape(call) == DEBEZIUM_SHAPE else None
            frame = as_change_rows(self.spark, call, frame)
        if self.checkpoint is not None:
            names = stream_names(call)
            name = next((n for n in names if n in self.schema_evolution), names[-1])
            mode = self.schema_evolution.get(name, FAIL)
            if extra is not None:
                check_source_columns(self.checkpoint, f"{to_sql(call)} (its fields outside the Debezium envelope)",
                                     extra, None, mode)
            optional = check_source_columns(self.checkpoint, to_sql(call), frame.schema, self._holders(call),
                                            mode, self._absent(call))
            for records in self.records[known:]:
                records.optional = frozenset(c.lower() for c in optional)
        while self._unrecorded:  # only columns that passed the check are kept for the next run
            known, schema = self._unrecorded.pop()
            known.record(schema)
        return frame

    def _read(self, call: exp.Anonymous):
        """The streaming DataFrame of the source ``STREAM(name)`` names, as it is."""
        from sqlext.streaming.bad_records import EVERY_FILE_AGE, FAIL, SourceRecords

        index = self._read_count  # Spark numbers a query's sources in the order the plan reads them
        self._read_count += 1
        delta = self._delta_source(call)
        if delta is not None:
            folder, schema, path = delta
            if folder is None:  # Spark with Delta Lake streams the feed itself
                from sqlext.delta import COMMIT_TIMESTAMP

                return self.spark.readStream.format("delta").option("readChangeFeed", "true") \
                    .option("startingVersion", "0").load(resolve(self.spark, path).uri).drop(COMMIT_TIMESTAMP)
            return self.spark.readStream.format("parquet").option("maxFileAge", EVERY_FILE_AGE).schema(schema) \
                .load(folder.uri)
        names = stream_names(call)
        name = next((n for n in names if n in self.folders), None)
        if name is not None:
            folder = self.folders[name]
            self._check_build(name, resolve(self.spark, folder))
            shape = read_shape(call)
            schema = self._declared(name, folder, shape == DEBEZIUM_SHAPE) if name in self.schemas \
                else self._found(name, folder)
            records = SourceRecords(name, self.format_of(name), self.options.get(name, {}), schema,
                                    self.bad_records.get(name, FAIL), index, resolve(self.spark, folder),
                                    change_rows=shape == DELTA_SHAPE, debezium=shape == DEBEZIUM_SHAPE,
                                    needs=stream_needs(call, schema.names) if shape == DELTA_SHAPE else {},
                                    probes=self._probes(name, schema) if shape == DEBEZIUM_SHAPE else ())
            self.records.append(records)
            if name in self._nanos:
                return self._read_nanos(name, folder, schema, records.reader_options())
            frame = self.spark.readStream.format(self.format_of(name)).options(**records.reader_options()) \
                .schema(records.read_schema()).load(folder)
            return records.checked(frame)
        name = names[0]
        frame = self.spark.table(name)
        if frame.isStreaming:
            return frame
        self._check_build(name, self._table_folder(name))
        return self.spark.readStream.table(name)

    def _probes(self, name: str, schema) -> tuple[str, ...]:
        """For a Debezium topic of JSON files read with declared columns: the row's columns (the
        fields of ``after``) and the fields Kafka Connect's JSON converter wraps an event in
        (``schema``, ``payload``), that its records are read with at the top level too. Spark's
        reader sees only the fields it is given, so a plain row, or an event in Connect's wrapper,
        landed among the events would read as a record of no field, a tombstone; read so, it is no
        event (a bad record). A record holding none of these fields and no envelope field (say
        ``{"note": 1}``) still reads as one: with no columns declared, every field is seen."""
        from pyspark.sql.types import StructType

        if name not in self.schemas or self.format_of(name).lower() != "json":
            return ()
        after = next((f for f in schema.fields if f.name.lower() == AFTER), None)
        if after is None or not isinstance(after.dataType, StructType):
            return ()
        top = {n.lower() for n in schema.names}
        probes: dict[str, str] = {}
        for name in [f.name for f in after.dataType.fields] + list(CONNECT_WRAPPER):
            if name.lower() not in top and name.lower() not in ENVELOPE_FIELDS and name != CORRUPT:
                probes.setdefault(name.lower(), name)
        return tuple(probes.values())

    def _check_build(self, name: str, folder: Folder | None) -> None:
        """A source that another sqlext run writes (a chain of statements, of dbt models) must
        be the build this checkpoint's runs read (:func:`~sqlext.streaming.checkpoint.check_source_build`)."""
        if self.checkpoint is not None and folder is not None:
            check_source_build(self.checkpoint, name, upstream_build(self.spark, folder))

    def _table_folder(self, name: str) -> Folder | None:
        """The folder of a catalog table, None where it has none (a view, another source)."""
        try:
            return resolve(self.spark, table_folder(self.spark, table_name(name), True))
        except SqlextError:
            return None

    def _delta_source(self, call: exp.Anonymous) -> tuple | None:
        """For ``STREAM(...)`` over a Delta table (a folder given by name that holds one, or
        ``delta.`path```): the folder of its commits staged for this run (the commits after those
        the checkpoint has, one Parquet file of change rows each; see
        :meth:`sqlext.delta.DeltaChanges.stage`), its columns and its path; the folder and columns
        are None where Spark reads the feed itself. None for any other source. Looked up, and
        staged, once per run."""
        from sqlext.delta import is_delta_table, path_of

        names = stream_names(call)
        name = next((n for n in names if n in self.folders), names[0])
        if name not in self._delta:
            path = self.folders.get(name)
            if path is None:
                path = path_of(stream_argument(call))
            elif not is_delta_table(resolve(self.spark, path)):
                path = None
            self._delta[name] = None if path is None else self._stage(name, path)
        return self._delta[name]

    def _stage(self, name: str, path: str) -> tuple:
        from sqlext.delta import STAGED_FOLDER, DeltaChanges, spark_reads_delta

        if spark_reads_delta(self.spark):
            return None, None, path
        if self.checkpoint is None:
            raise SqlextError("UNSUPPORTED_STREAM", function=FUNCTION, what=f"STREAM({name}) without a checkpoint",
                              reason="a run reads the Delta table's commits after those its checkpoint records",
                              fix="Give the run a checkpoint (sqlext.stream and sqlext stream take one; "
                                  "streaming_frame takes checkpoint=...).")
        feed = DeltaChanges(self.spark, path, FUNCTION)
        schema = spark_schema(feed.schema())
        staging = self.checkpoint / STAGED_FOLDER / feed.staging_name()
        staging.mkdirs()
        feed.stage(staging, arrow_schema(schema))
        return staging, schema, path

    def _read_nanos(self, name: str, folder: str, schema, options: dict):
        """The stream of a folder whose files hold nanosecond timestamps: read as Spark 4 reads
        them, each column then cast to ``schema``'s type (nanosecond timestamps to microseconds,
        Spark's unit: what lies below a microsecond is dropped)."""
        from pyspark.sql import functions as F

        spark = self.spark
        if getattr(spark, "_jvm", None) is None:  # Spark Connect: no JVM here to give the schema to
            raise SqlextError("STREAM_SOURCE_UNREADABLE", function=FUNCTION, name=name,
                              file=first_file(spark, folder, has_nanos) or folder,
                              cause="nanosecond timestamps, which a Spark Connect session does not read",
                              fix=NANOS_FIX)
        self._allow_nanos()
        reader = spark.readStream.format(self.format_of(name)).options(**options)
        types = spark._jvm.org.apache.spark.sql.types
        reader._jreader.schema(types.DataType.fromJson(json.dumps(self._nanos[name])))
        frame = reader.load(folder)
        return frame.select(*[F.col(quote(f.name)).cast(f.dataType).alias(f.name) for f in schema.fields])

    def _allow_nanos(self) -> None:
        """Turn on Spark's setting for nanosecond timestamps, noting what it was."""
        if not self._nanos_before:
            self._nanos_before.append(self.spark.conf.get(NANOS_SETTING, None))
        self.spark.conf.set(NANOS_SETTING, "true")

    def restore(self) -> None:
        """Put back the session's nanos setting, once the query that reads with it has started
        (a query keeps the settings it started with)."""
        if self._nanos_before:
            before = self._nanos_before.pop()
            if before is None:
                self.spark.conf.unset(NANOS_SETTING)
            else:
                self.spark.conf.set(NANOS_SETTING, before)

    def _nanos_schema(self, name: str, folder: str, error: BaseException) -> dict:
        """The columns of a folder whose files hold nanosecond timestamps, read with Spark's
        setting for them (a schema's JSON; PySpark itself has no type for them). Where the
        session cannot (Spark Connect, a Spark without the setting), an error that says how to
        write them."""
        reader = self.spark.read.format(self.format_of(name))
        if self.format_of(name).lower() == "parquet":
            reader = reader.option("mergeSchema", "true")
        try:
            self._allow_nanos()
            return json.loads(reader.load(folder)._jdf.schema().json())
        except Exception:  # noqa: BLE001 - Spark cannot: say what to do instead
            raise SqlextError("STREAM_SOURCE_UNREADABLE", function=FUNCTION, name=name,
                              file=first_file(self.spark, folder, has_nanos) or folder,
                              cause=cause_of(error), fix=NANOS_FIX) from None

    def _declared(self, name: str, folder: str, debezium: bool = False):
        """The declared columns; the folder's files, if any, must hold the same. For a Debezium
        topic, the row's columns may be declared alone: the envelope is built around them
        (:func:`debezium_envelope`)."""
        from pyspark.sql.types import StructType, _parse_datatype_string

        try:
            schema = _parse_datatype_string(self.schemas[name])
        except Exception as error:  # noqa: BLE001 - Spark's parser says why
            raise SqlextError("INVALID_ARGUMENT_TYPE", function=FUNCTION, argument=f"the schema of {name}",
                              expected="a column list such as 'id BIGINT, name STRING'",
                              value=repr(self.schemas[name]), fix=str(error).splitlines()[0][:200]) from None
        if not isinstance(schema, StructType):
            raise SqlextError("INVALID_ARGUMENT_TYPE", function=FUNCTION, argument=f"the schema of {name}",
                              expected="a column list such as 'id BIGINT, name STRING'",
                              value=repr(self.schemas[name]), fix="Name each column and its type.")
        if debezium:
            schema = debezium_envelope(schema)
        resolve(self.spark, folder).mkdirs()
        if self.format_of(name).lower() in TEXT_FORMATS:
            return schema  # text has no types of its own: the declared ones are how Spark reads it
        found = self._found(name, folder, missing_ok=True)
        if found is not None:
            have = [(f.name, f.dataType.simpleString()) for f in found.fields]
            want = [(f.name, f.dataType.simpleString()) for f in schema.fields]
            if sorted(have) != sorted(want):
                raise SqlextError("STREAM_SCHEMA_CHANGED", function=FUNCTION, name=name,
                                  change=f"its files hold ({_columns(have)}) but its declared schema says "
                                         f"({_columns(want)})")
        return schema

    def _found(self, name: str, folder: str, missing_ok: bool = False):
        """The columns of the folder's files (every file's: a changed file is noticed). Parquet
        files already read by an earlier run of the checkpoint are not read again: only the
        footers of new files are compared with the columns recorded then."""
        known = FileColumns(self.checkpoint, name, resolve(self.spark, folder)) \
            if self.format_of(name).lower() == "parquet" and self.checkpoint is not None else None
        if known is not None and known.unchanged():
            return self._as_read(name, known.schema)
        schema = self._inferred(name, folder, missing_ok)
        if known is not None and schema is not None:
            self._unrecorded.append((known, schema))
        return None if schema is None else self._as_read(name, schema)

    def _as_read(self, name: str, schema: dict):
        """The columns (a schema's JSON, as the JVM gives it) as a StructType; nanosecond
        timestamps become Spark's own, and the name is noted to be read with a cast."""
        from pyspark.sql.types import StructType

        micro = microseconds(schema)
        if micro != schema:
            self._nanos[name] = schema
        return StructType.fromJson(_collations_named(micro))

    def _inferred(self, name: str, folder: str, missing_ok: bool) -> dict | None:
        """The columns of the folder's files as Spark reads them (a schema's JSON); None for a
        folder that is missing or holds no file. Any other failure to read them is an error
        naming the file and the cause, never an empty source."""
        reader = self.spark.read.format(self.format_of(name)).options(**reader_options(self.format_of(name),
                                                                                   self.options.get(name, {})))
        if self.format_of(name).lower() == "parquet":
            reader = reader.option("mergeSchema", "true")
        try:
            schema = schema_json(reader.load(folder))
        except Exception as error:  # noqa: BLE001 - sorted out below
            schema = self._unread(name, folder, error)
        if schema is not None:  # a record inference could not read: no column of the source's
            schema["fields"] = [f for f in schema.get("fields", []) if f["name"] != CORRUPT]
            if self.format_of(name).lower() == "parquet":
                check_pandas_index(FUNCTION, name, resolve(self.spark, folder), [f["name"] for f in schema["fields"]])
        if schema is None or not schema.get("fields"):
            if missing_ok:
                return None
            raise SqlextError("STREAM_SOURCE_EMPTY", function=FUNCTION, name=name, path=folder)
        return schema

    def _widened(self, name: str, folder: str) -> tuple[dict | None, str | None]:
        """Where the source's types may widen and its Parquet files hold a column at types that
        widen to one (``INT`` here, ``BIGINT`` there, which Spark's ``mergeSchema`` refuses): the
        columns at the wider types (a schema's JSON), which Spark's reader reads every file as.
        Else None, with the column and files whose types do not widen where that is the cause."""
        from sqlext.streaming.schema_evolution import FAIL, merged_footers, widens

        if self.format_of(name).lower() != "parquet" or not widens(self.schema_evolution.get(name, FAIL)):
            return None, None
        try:
            return merged_footers((f.uri, f.parquet_schema()) for f in data_files(resolve(self.spark, folder))), None
        except ValueError as error:
            return None, str(error)
        except Exception:  # noqa: BLE001 - a footer Arrow cannot read: Spark's own words then
            return None, None

    def _unread(self, name: str, folder: str, error: Exception) -> dict | None:
        """What a failure to read a folder's columns means: no files (None), files whose columns
        disagree, nanosecond timestamps (read again as Spark 4 can), or a file Spark cannot read."""
        condition = condition_of(error)
        if condition in NO_FILES:
            return None
        said = [line.strip() for line in str(error).splitlines()
                if ("merge" in line.lower() or "incompatible" in line.lower()) and not line.strip().startswith("at ")]
        if said:
            widened, problem = self._widened(name, folder)
            if widened is not None:
                return widened
            change = problem or disagreement(self.spark, folder) or f"its files disagree ({said[0][:300]})"
            raise SqlextError("STREAM_SCHEMA_CHANGED", function=FUNCTION, name=name, change=change) from None
        if condition == "PARQUET_TYPE_ILLEGAL" and "NANOS" in str(error):
            return self._nanos_schema(name, folder, error)
        raise SqlextError("STREAM_SOURCE_UNREADABLE", function=FUNCTION, name=name,
                          file=named_file(error) or first_file(self.spark, folder) or folder,
                          cause=cause_of(error),
                          fix=f"Check that it is a {self.format_of(name)} file of changes, or move it out of the "
                              "folder.") from None


def unknown_source(option: str, name: str, folders: list[str]) -> SqlextError:
    """``[UNKNOWN_SOURCE]`` for a setting (``option``, as both the command line and Python spell
    it) of ``name``, which no folder source is called: the sources there are, and the close one."""
    if not folders:
        problem = "but no source is given (--source NAME=DIR, sources={NAME: folder} in Python); a table or view " \
                  "is read as it is, without these settings"
    else:
        near = get_close_matches(name, folders, n=1, cutoff=0.6)
        problem = f"but no source is called {name}: the sources are {', '.join(sorted(folders))}" + \
                  (f" (did you mean {near[0]}?)" if near else "")
    return SqlextError("UNKNOWN_SOURCE", function=FUNCTION, option=option, name=name, problem=problem,
                       other="--source (sources=)")


def _columns(columns) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in columns)


# -- files Spark cannot read as they are


def table_name(table: str) -> exp.Table:
    """``table`` (``name``, ``db.name``, quoted with backticks where needed) as a table node."""
    try:
        target = exp.to_table(table, dialect=SparkExt)
    except Exception:  # noqa: BLE001 - sqlglot fails in several ways on text it cannot read
        target = None
    if not isinstance(target, exp.Table) or not target.name:
        raise SqlextError("INVALID_ARGUMENT_TYPE", function=FUNCTION, argument="table",
                          expected="a table name such as my_db.my_table", value=repr(table),
                          fix="Quote parts holding spaces or dots with backticks.")
    return target


def table_folder(spark, target: exp.Table, exists: bool) -> str:
    """The folder of ``target`` (a URI, on any store): its location if it exists, else its
    database's location joined with its name."""
    if exists:
        described = spark.sql(to_sql(exp.Describe(this=target.copy(), style="EXTENDED"))).collect()
        uri = next((row[1] for row in described if row[0] == "Location"), None)
        if uri is None:
            raise SqlextError("UNSUPPORTED_STREAM", function=FUNCTION, what=f"a run into {to_sql(target)}",
                              reason="the table has no folder (a view, or a table of another source), where the "
                                     "runs would keep their output and state",
                              fix="Drop it and let the run create it, or run sqlext.stream with an output folder.")
        return uri
    database = target.db or spark.catalog.currentDatabase()
    # the catalog gives the database's location as an encoded URI ('ware%20house'); a path
    # string (what DESCRIBE gives for a table, and what resolve takes) holds the characters

    return decoded(spark, spark.catalog.getDatabase(database).locationUri).rstrip("/") + "/" + target.name


def _collations_named(schema: dict) -> dict:
    """A schema's JSON as the JVM gives it, with each column's collation named as PySpark reads
    it: with its provider (``spark.UTF8_LCASE``, ``icu.UNICODE_CI``). The JVM writes a collation
    by its name alone, which PySpark refuses to read (an assertion, not an error)."""
    if isinstance(schema, list):
        return [_collations_named(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    named = {key: _collations_named(value) for key, value in schema.items()}
    metadata = named.get("metadata")
    collations = metadata.get("__COLLATIONS") if isinstance(metadata, dict) else None
    if isinstance(collations, dict):
        named["metadata"] = {**metadata, "__COLLATIONS": {
            column: value if "." in str(value) else ("spark." if str(value).upper().startswith("UTF8_") else "icu.")
            + str(value) for column, value in collations.items()}}
    return named

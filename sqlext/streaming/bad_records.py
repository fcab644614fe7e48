"""Records a run cannot read as they are: refused by name by default, quarantined on request.

A folder of change files is read strictly. In JSON and CSV files (whose text holds no types)
Spark's reader marks a record that does not parse, or whose value does not fit its column, in a
column of its own (:data:`CORRUPT`) instead of turning the value into NULL: the stream of such
a source refuses a marked record (``[BAD_RECORD]``, raised inside Spark as soon as the record is
read), or, for a source whose bad records go to a quarantine (``bad_records={name:
'quarantine'}``), leaves it out of the rows the statement reads. So are records that read but
cannot be taken (:meth:`SourceRecords.faults`): a JSON change without the field of a column the
statement reads as a key, foreign key, change type or order (told from a field given as null by
the column's existence default, :func:`absent_mark`), and in a topic of Debezium events a record
without ``op`` that is no tombstone, or with an ``op`` Debezium does not write. Parquet files
hold their types; there a file whose columns are not the source's (one missing, one added, one
of another type) is refused before the batch runs.

What a refusal costs: nothing of the run is written, and the batch is forgotten (its files are
not marked read, :func:`~sqlext.streaming.batches.forget_batch`), so that a corrected file, under
the same name or another, is read by the next run as if the bad one had never been there.

The quarantine (``<checkpoint>/quarantine``) holds one Parquet file per micro-batch that met bad
records, named by the batch: the source, the file, the line the record starts on, its text, the
error class, the column and what is wrong. A batch that is run again (after a crash) writes the
same file again, so each bad record is there once; a batch that is forgotten loses its file with
it. The run's summary counts them.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa

from sqlext.errors import SqlextError, find_in, message_text, sql_value, SqlextSparkError
from sqlext.functions.arguments import quote
from sqlext.functions.changes import CHANGE_TYPE, CHANGE_TYPES
from sqlext.functions.input_formats import (
    DEBEZIUM_TYPES, NO_OP, OP, TRUNCATE, UNKNOWN_OP, debezium_tombstone, tombstone_columns,
)
from sqlext.language.dialect import to_sql
from sqlext.storage import Folder, resolve
from sqlext.streaming.batches import batch_entries, batch_files
from sqlext.streaming.record_problems import (
    Lines, columns_text, csv_problem, json_misfit, json_problem, json_records,
)
from sqlext.streaming.run import arrow_schema
from sqlext.streaming.source_files import PANDAS_INDEX, pandas_index_error

FUNCTION = "sqlext stream"
CORRUPT = "__sx_bad_record"  # the column Spark's JSON and CSV readers put a record they cannot read in
FILE_PATH = "_metadata.file_path"
FILE = "__sx_file"
_FILLED = "\x00"  # where Spark fills a value into a message of sqlext's
FAIL, QUARANTINE = "fail", "quarantine"
MODES = (FAIL, QUARANTINE)
QUARANTINE_FOLDER = "quarantine"
# the formats whose readers mark the records they cannot read (their files hold text, not types)
PARSED_FORMATS = ("json", "csv")
# reader options sqlext sets itself, or that would lose records or files without a word
RESERVED_OPTIONS = {
    "mode": "sqlext reads every record or refuses it",
    "columnnameofcorruptrecord": "sqlext keeps the records it cannot read in a column of its own",
    "ignorecorruptfiles": "a file Spark cannot read would be skipped without a word",
    "ignoremissingfiles": "a file that goes missing would be skipped without a word",
    "maxfileage": "a file older than the newest ones by more than this would never be read",
}
# Spark's file stream skips a file whose modification time is older than the newest file it has
# seen by more than maxFileAge (7 days by default): a file copied in with its old time kept would
# never be read. sqlext reads every file that lands.
EVERY_FILE_AGE = "36500d"

# the refusals of the change-row rules whose change the door finds in the batch's files
LOCATED = ("UNKNOWN_CHANGE_TYPE", "AMBIGUOUS_ORDER", "NULL_ORDER_VALUE", "LATE_CHANGE", "NOT_A_CHANGE_EVENT")

QUARANTINE_SCHEMA = pa.schema([
    ("batch", pa.int64()), ("source", pa.string()), ("file", pa.string()), ("line", pa.int64()),
    ("record", pa.string()), ("error_class", pa.string()), ("column", pa.string()), ("problem", pa.string()),
])


@dataclass
class SourceRecords:
    """How the records of one folder source are read: its ``name`` in ``STREAM(name)``, its
    files' ``file_format``, the reader ``options`` the user gave, its columns (a Spark
    ``StructType``, without :data:`CORRUPT`), what happens to a bad record (``mode``), and the
    position of the source among the query's sources (Spark's numbering in its offset log);
    ``optional``: the columns (in lower case) a file may lack, its rows reading NULL there, where
    the source's columns may grow (:mod:`sqlext.streaming.schema_evolution`); ``change_rows``:
    its files hold change rows as they are, whose ``_change_type`` a quarantine checks too."""

    name: str
    file_format: str
    options: dict
    schema: object
    mode: str = FAIL
    index: int = 0
    folder: Folder | None = None
    optional: frozenset = frozenset()
    change_rows: bool = False  # its files hold change rows as they are (no format => ... to read them in)
    debezium: bool = False  # its files hold Debezium's change events, read with format => 'debezium'
    # the columns the statement reads as keys, foreign keys, change type, order (-> which of them):
    # a JSON record without the field is a bad record, one holding null a NULL
    needs: dict = field(default_factory=dict)
    # top-level columns (text) a Debezium topic's JSON files are read with beside the envelope
    # declared for them (the row's columns), so that a plain row is no tombstone
    probes: tuple = ()

    @property
    def parsed(self) -> bool:
        """Whether its reader marks the records it cannot read (JSON, CSV)."""
        return self.file_format.lower() in PARSED_FORMATS

    def reader_options(self) -> dict:
        """The options of Spark's reader of its files (:func:`reader_options`)."""
        return reader_options(self.file_format, self.options)

    def read_files(self, spark, files: list[str]):
        """A batch frame of some of its files (URIs), read as the stream reads them, with
        :data:`CORRUPT` and ``_metadata`` to select."""
        return spark.read.format(self.file_format).options(**self.reader_options()).schema(self.read_schema()) \
            .load(files)

    def read_schema(self):
        """Its columns as Spark's reader is given them: with :data:`CORRUPT` where it marks bad
        records, and for JSON each of :meth:`marks` as the value of the field a record lacks."""
        from pyspark.sql.types import StringType, StructField, StructType

        if not self.parsed:
            return self.schema
        marks = self.marks
        fields = [StructField(f.name, f.dataType, f.nullable, {**f.metadata, EXISTS_DEFAULT: marks[f.name]})
                  if f.name in marks else f for f in self.schema.fields]
        probes = [StructField(name, StringType(), True) for name in self.probes]
        return StructType(fields + probes + [StructField(CORRUPT, StringType(), True)])

    @property
    def op(self) -> str | None:
        """The column of its events' ``op``, where it holds Debezium's change events as columns."""
        return next((n for n in self.schema.names if n.lower() == OP), None) if self.debezium else None

    @property
    def marks(self) -> dict[str, str]:
        """In a JSON source, the columns whose field a record must have (:attr:`needs`), each
        with the value (SQL) Spark's reader gives a record that lacks it (a column's existence
        default, which Spark's JSON reader fills in for a field a record lacks, and not for one it
        holds as null): a value no record is expected to hold, :func:`absent_mark`. A column of a
        type with none (BOOLEAN) is read as it is."""
        if self.file_format.lower() != "json":
            return {}
        found = {f.name: absent_mark(f.dataType) for f in self.schema.fields if f.name in self.needs}
        return {name: mark for name, mark in found.items() if mark is not None}

    def faults(self) -> list:
        """What is wrong with records that read but cannot be taken, as Spark conditions over
        :meth:`read_schema`'s columns: (the condition, the column, the words for it, a column of
        text). A field the statement needs that a record lacks (JSON); in a topic of Debezium
        events, a record without an ``op`` that is no tombstone and an ``op`` Debezium does not
        write (a truncate is left to the mapping, which refuses it: it is no fault of a record)."""
        from pyspark.sql import functions as F

        found = [(F.col(quote(name)).eqNullSafe(F.expr(mark)), name, F.lit(missing_field(name, self.needs[name])))
                 for name, mark in self.marks.items()]
        op = self.op
        if op is not None:
            value = F.col(quote(op))
            tombstone = F.expr(to_sql(debezium_tombstone([*self.schema.names, *self.probes])))
            found.append((value.isNull() & ~tombstone, None, F.lit(NO_OP)))
            found.append((value.isNotNull() & ~value.isin(*DEBEZIUM_TYPES, TRUNCATE), op,
                          F.concat(F.lit("has op = '"), value, F.lit(f"', {UNKNOWN_OP}"))))
        return found

    def fits(self, value: dict) -> bool:
        """Whether Spark's reader reads a JSON object as the source's columns (no value misfits)."""
        return json_misfit(value, self.schema) is None

    def fault_of(self, value) -> tuple[str | None, str] | None:
        """:meth:`faults` of one JSON record (as :func:`json.loads` gives it) that Spark reads:
        the column and the words, or None."""
        for name in self.marks:
            if name not in value:
                return name, missing_field(name, self.needs[name])
        op = self.op
        if op is None:
            return None
        kind = value.get(op)
        held = tombstone_columns([*self.schema.names, *self.probes])
        if kind is None and any(value.get(c) is not None for c in held):
            return None, NO_OP
        if kind is not None and str(kind) not in (*DEBEZIUM_TYPES, TRUNCATE):
            return op, f"has op = {sql_value(str(kind))}, {UNKNOWN_OP}"
        return None

    @property
    def change_type(self) -> str | None:
        """The column of its rows' change types, where a quarantine checks them."""
        return next((n for n in self.schema.names if n.lower() == CHANGE_TYPE), None) if self.change_rows else None

    def _unknown_type(self):
        return unknown_change_type(self.change_type)

    def checked(self, frame):
        """``frame`` (read with :meth:`read_schema`) as the statement reads it: a bad record
        refused where it is met (strict), or left out (quarantined by :class:`Door`, as is a
        change row whose change type is unknown)."""
        from pyspark.sql import functions as F

        faults = self.faults()
        corrupt = self._corrupt()
        if self.mode == QUARANTINE:
            for condition, _, _ in faults:
                frame = frame.where(~condition)
            if self.change_type is not None:
                frame = frame.where(~self._unknown_type())
            return self._as_read(frame if corrupt is None else frame.where(~corrupt))
        # sqlext's message, the file and the record filled in by Spark; the door names the line
        # and the column where it can (Door._named)
        refusals = [] if corrupt is None else \
            [(corrupt, self._message(F.lit(f"does not fit the columns ({columns_text(self.schema)})"),
                                     F.substring(F.col(CORRUPT), 1, 300)))]
        values = F.to_json(F.struct(*[F.when(~F.col(quote(n)).eqNullSafe(F.expr(self.marks[n])), F.col(quote(n)))
                                      .alias(n) if n in self.marks else F.col(quote(n)) for n in self.schema.names]))
        refusals += [(condition, self._message(problem, F.substring(values, 1, 300))) for condition, _, problem in faults]
        if not refusals:
            return frame
        check = F.when(refusals[0][0], F.raise_error(refusals[0][1]))
        for condition, message in refusals[1:]:
            check = check.when(condition, F.raise_error(message))
        return self._as_read(frame.where(check.otherwise(F.lit(True))))

    def _corrupt(self):
        """The Spark condition of a record its reader could not read (None where it marks none).
        A ``null`` line of a Debezium topic is read as it is: a tombstone, whose every column is NULL."""
        from pyspark.sql import functions as F

        if not self.parsed:
            return None
        corrupt = F.col(CORRUPT).isNotNull()
        if self.op is not None:
            corrupt = corrupt & (F.trim(F.col(CORRUPT)) != F.lit("null"))
        return corrupt

    def _message(self, problem, record):
        """``[BAD_RECORD]`` as a Spark column of text: the file, the words and the record filled in."""
        from pyspark.sql import functions as F

        text = message_text("BAD_RECORD", function=FUNCTION, name=self.name, place=f"the file {_FILLED}",
                            problem=_FILLED, record=_FILLED, quarantine=_quarantine_hint(self.name))
        before, file, words, after = text.split(_FILLED)
        return F.concat(F.lit(before), F.col(FILE_PATH), F.lit(file), problem, F.lit(words), record, F.lit(after))

    def _as_read(self, frame):
        """The frame in its columns: without :data:`CORRUPT`, and without the marks of fields a
        record lacks (no record that lacks one is left, and the columns' metadata is not a
        default a table written from them should get)."""
        from pyspark.sql import functions as F

        if not self.parsed:
            return frame
        return frame.select(*[F.col(quote(n)).alias(n, metadata={}) if n in self.marks else F.col(quote(n))
                              for n in self.schema.names])  # without CORRUPT and the probes

    def bad_records(self, spark, files: list[str], batch_id: int, unknown_types: bool = False) -> pa.Table:
        """The records of ``files`` (URIs) that its reader cannot read, as quarantine rows; with
        ``unknown_types``, also the change rows whose change type is unknown (a record that
        reads, but is no change: its values as JSON, at its row in a Parquet file)."""
        from pyspark.sql import functions as F

        unknown_types = unknown_types and self.change_type is not None
        faults = self.faults()
        corrupt = self._corrupt()
        if not (corrupt is not None or faults or unknown_types) or not files:
            return QUARANTINE_SCHEMA.empty_table()
        frame = self.read_files(spark, files)
        bad = F.lit(False) if corrupt is None else corrupt
        for condition, _, _ in faults:
            bad = bad | condition
        if unknown_types:
            bad = bad | self._unknown_type()
        # which fault a record has (its number in faults; NULL for none), and its words
        fault, problem = F.lit(None).cast("int"), F.lit(None).cast("string")
        for number, (condition, _, words) in reversed(list(enumerate(faults))):
            fault, problem = F.when(condition, F.lit(number)).otherwise(fault), \
                F.when(condition, words).otherwise(problem)
        parquet = self.file_format.lower() == "parquet"
        places = [F.col(FILE_PATH).alias(FILE), fault.alias("__sx_fault"), problem.alias("__sx_problem")]
        places += [F.col("_metadata.row_index").alias("__sx_row")] if parquet else []
        marks = self.marks
        columns = [F.when(~F.col(quote(n)).eqNullSafe(F.expr(marks[n])), F.col(quote(n))).alias(n) if n in marks
                   else F.col(quote(n)) for n in self.schema.names]
        # every column is read (Spark refuses a query of its files that reads only CORRUPT)
        found = frame.where(bad).select(*columns, *([F.col(CORRUPT)] if self.parsed else []), *places).collect()
        rows = []
        names = set(self.schema.names)
        lines = Lines(spark)
        faulty = FaultyLines(spark, self)
        for row in found:
            file = unquote(row[FILE])
            if row["__sx_fault"] is not None:
                values = {n: v for n, v in row.asDict(recursive=True).items() if n in names and v is not None}
                line, text = faulty.next(file) if self.file_format.lower() == "json" else (None, None)
                rows.append({"batch": batch_id, "source": self.name, "file": file,
                             "line": row["__sx_row"] + 1 if parquet else line,
                             "record": text if text is not None else json.dumps(values, default=str),
                             "error_class": "BAD_RECORD", "column": faults[row["__sx_fault"]][1],
                             "problem": row["__sx_problem"]})
                continue
            record = row[CORRUPT] if self.parsed else None
            if record is not None:
                column, problem = self.problem(record)
                rows.append({"batch": batch_id, "source": self.name, "file": file, "line": lines.of(file, record),
                             "record": record, "error_class": "BAD_RECORD", "column": column, "problem": problem})
                continue
            values = {n: v for n, v in row.asDict(recursive=True).items() if n in names}
            kind = row[self.change_type]
            rows.append({"batch": batch_id, "source": self.name, "file": file,
                         "line": row["__sx_row"] + 1 if parquet else None,
                         "record": json.dumps(values, default=str), "error_class": "UNKNOWN_CHANGE_TYPE",
                         "column": self.change_type,
                         "problem": f"has {self.change_type} = {sql_value(kind)}, which is none of "
                                    f"{', '.join(CHANGE_TYPES)}"})
        return pa.Table.from_pylist(rows, QUARANTINE_SCHEMA)

    def problem(self, record: str) -> tuple[str | None, str]:
        """What is wrong with a record its reader cannot read: the column (None where the record
        as a whole is wrong) and the words for it."""
        if self.file_format.lower() == "json":
            return json_problem(record, self.schema)
        return csv_problem(record, self.schema, self.options, self.name)


# the metadata key of a column's existence default: the value Spark's readers give a record
# (a JSON object, a file) that has no field for the column
EXISTS_DEFAULT = "EXISTS_DEFAULT"


def absent_mark(kind) -> str | None:
    """The value (SQL) a JSON record without the field of a column of type ``kind`` reads as,
    where the statement needs the field: one no record is expected to hold (text beginning with
    a NUL character, an integer type's lowest value, a date or time some 290,000 years before
    ours, minus infinity), so that a record holding the field as null stays a NULL. None for a
    type with no value to spare (BOOLEAN, nested types).

    >>> from pyspark.sql.types import LongType, StringType, BooleanType
    >>> absent_mark(LongType()), absent_mark(BooleanType())
    ('CAST(-9223372036854775808 AS BIGINT)', None)
    """
    from pyspark.sql import types as T

    name = kind.simpleString()
    if isinstance(kind, T.StringType):
        return "'\\u0000sqlext: no such field'"
    if isinstance(kind, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        bits = {T.ByteType: 8, T.ShortType: 16, T.IntegerType: 32, T.LongType: 64}[type(kind)]
        return f"CAST({-(1 << (bits - 1))} AS {name.upper()})"
    if isinstance(kind, (T.FloatType, T.DoubleType)):
        return f"CAST('-Infinity' AS {name.upper()})"
    if isinstance(kind, T.DecimalType):
        return f"CAST(-{'9' * (kind.precision - kind.scale) or '0'}{'.' + '9' * kind.scale if kind.scale else ''} " \
               f"AS {name.upper()})"
    if isinstance(kind, T.DateType):
        return "date_from_unix_date(-106000000)"
    if isinstance(kind, (T.TimestampType, T.TimestampNTZType)):
        return f"CAST(timestamp_micros(-9223372036854775807) AS {name.upper()})"
    return None


def missing_field(column: str, role: str) -> str:
    """What a record without the field of a column the statement needs lacks, in words."""
    return f"has no field {column}, which the statement reads as its {role}"


class FaultyLines:
    """The lines of a source's JSON files whose records read but are faulty
    (:meth:`SourceRecords.fault_of`), in order: the n-th faulty row Spark reads from a file is
    its n-th such line. Read once per file, through the storage module; a file that is not
    plain JSON lines (compressed, a record over several lines) names none."""

    def __init__(self, spark, source: "SourceRecords"):
        self.spark, self.source, self.found = spark, source, {}

    def next(self, file: str) -> tuple[int | None, str | None]:
        """The line and text of the next faulty record of ``file`` (None, None where unknown)."""
        if file not in self.found:
            self.found[file] = iter(self._scan(file))
        return next(self.found[file], (None, None))

    def _scan(self, file: str) -> list[tuple[int, str]]:
        if str(self.source.options.get("multiLine", self.source.options.get("multiline", "false"))).lower() == "true":
            return []
        try:
            text = resolve(self.spark, file).read_bytes().decode("utf-8")
        except (SqlextError, OSError, UnicodeDecodeError):
            return []
        return [(number, line) for number, line, value in json_records(text)
                if isinstance(value, dict) and self.source.fits(value) and self.source.fault_of(value) is not None]


def unknown_change_type(column: str):
    """A Spark condition: the row's change type (in ``column``) is none a change row has, or NULL."""
    from pyspark.sql import functions as F

    kind = F.col(quote(column))
    return kind.isNull() | ~kind.isin(*CHANGE_TYPES)


def reader_options(file_format: str, options: dict) -> dict:
    """The options of Spark's reader of a folder's files: the user's, then sqlext's own (every
    file read whatever its age; in JSON and CSV, the records it cannot read kept in :data:`CORRUPT`)."""
    found = {**options, "maxFileAge": EVERY_FILE_AGE}
    if file_format.lower() in PARSED_FORMATS:
        found.update(mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT)
    return found


def refusal(source: SourceRecords, record: dict) -> SqlextError:
    """``[BAD_RECORD]`` for one quarantine row of ``source``."""
    where = "row" if source.file_format.lower() == "parquet" else "line"
    place = f"{where} {record['line']} of {record['file']}" if record.get("line") else f"the file {record['file']}"
    return SqlextError("BAD_RECORD", function=FUNCTION, name=source.name, place=place, problem=record["problem"],
                       record=_shown(record["record"]), quarantine=_quarantine_hint(source.name))


def _quarantine_hint(name: str) -> str:
    return (f"--bad-records {name}=quarantine on the command line, bad_records={{{name!r}: 'quarantine'}} in Python, "
            f"'bad_records': 'quarantine' in its settings of a dbt model's sqlext_sources")


def _shown(record: str, limit: int = 200) -> str:
    return repr(record if len(record) <= limit else record[:limit] + "...")


# -- the files of a batch: their columns, their bad records, and the quarantine

class Quarantine:
    """The quarantine of a checkpoint: one Parquet file per batch that met bad records."""

    def __init__(self, checkpoint: Folder):
        self.folder = checkpoint / QUARANTINE_FOLDER

    def file(self, batch_id: int) -> Folder:
        return self.folder / f"batch-{batch_id:010d}.parquet"

    def write(self, batch_id: int, records: pa.Table) -> None:
        """The batch's bad records (replacing what an earlier attempt of the batch wrote)."""
        if records.num_rows:
            self.file(batch_id).write_parquet(records)
        else:
            self.file(batch_id).delete()

    def count(self, batch_ids) -> int:
        """The records quarantined by these batches."""
        total = 0
        for batch_id in batch_ids:
            file = self.file(batch_id)
            if file.exists():
                total += file.parquet_rows()
        return total


@dataclass
class Door:
    """The ``foreachBatch`` function of a run around the statement's own (``function``): before
    the batch runs, each folder source's files of the batch are checked (a Parquet file's
    columns) and their bad records quarantined where the source asks for it; a record refused
    inside the batch is named with its line and column."""

    function: object
    checkpoint: Folder
    sources: list[SourceRecords] = field(default_factory=list)

    def __call__(self, batch, batch_id: int) -> None:
        spark = batch.sparkSession
        quarantined = []
        for source in self.sources:
            files = self._files(spark, source, batch_id)
            if source.file_format.lower() == "parquet":
                check_parquet_files(source, files)
            if source.mode == QUARANTINE:
                quarantined.append(source.bad_records(spark, [f.uri for f in files], batch_id, unknown_types=True))
        if any(s.mode == QUARANTINE for s in self.sources):
            Quarantine(self.checkpoint).write(batch_id, pa.concat_tables(quarantined) if quarantined
                                              else QUARANTINE_SCHEMA.empty_table())
        try:
            self.function(batch, batch_id)
        except Exception as error:
            ours = find_in(error)
            named = None
            try:
                if ours is not None and ours.error_class == "BAD_RECORD":
                    named = self._named(spark, batch_id)
                elif ours is not None and ours.error_class in LOCATED:
                    named = self._located(spark, batch_id, ours)
            except Exception:  # noqa: BLE001 - the files do not tell (one Spark reads otherwise): the error as it is
                named = None
            if named is not None:
                raise named from None
            raise

    def _files(self, spark, source: SourceRecords, batch_id: int) -> list[Folder]:
        """The source's files in the batch, from Spark's records of it (named as Spark named them,
        through a mount table where the folder was given through one)."""
        files = batch_files(self.checkpoint, batch_id, source.index, source.folder)
        if files is not None:
            return files
        entries = batch_entries(self.checkpoint, batch_id, source.index)
        if entries is None:
            raise SqlextError("INTERNAL_ERROR", function=FUNCTION,
                              reason=f"the files of {source.name} in batch {batch_id} are not in Spark's records of it")
        return [resolve(spark, unquote(entry["path"])) for entry in entries]

    def _named(self, spark, batch_id: int) -> SqlextError | None:
        """The first bad record of the batch, with its line and column: ``[BAD_RECORD]``."""
        for source in self.sources:
            if source.mode == FAIL and (source.parsed or source.faults()):
                found = source.bad_records(spark, [f.uri for f in self._files(spark, source, batch_id)], batch_id)
                if found.num_rows:
                    return refusal(source, found.slice(0, 1).to_pylist()[0])
        return None


    def _located(self, spark, batch_id: int, error: SqlextError) -> SqlextError | None:
        """``error`` (a change that breaks the change-row rules, found by a kernel that sees rows,
        not files) with the file that holds the change, and its row in a Parquet file: the rows
        of the batch's files with a change type no change row has (``UNKNOWN_CHANGE_TYPE``), or
        of the key the message names (``AMBIGUOUS_ORDER``, ``NULL_ORDER_VALUE``, ``LATE_CHANGE``).
        None where the files do not tell."""
        from pyspark.sql import functions as F

        by_kind = error.error_class in ("UNKNOWN_CHANGE_TYPE", "NOT_A_CHANGE_EVENT")
        key = None if by_kind else _named_key(str(error))
        if key is None and not by_kind:
            return None
        for source in self.sources:
            names = {n.lower(): n for n in source.schema.names}
            if error.error_class == "NOT_A_CHANGE_EVENT":
                if source.op is None:
                    continue
                wanted = F.col(quote(source.op)) == F.lit(TRUNCATE)  # the one such event a folder's records pass
            elif key is None and CHANGE_TYPE in names:
                wanted = unknown_change_type(CHANGE_TYPE)
            elif key is not None and all(k.lower() in names for k in key):
                wanted = F.lit(True)
                for column, value in key.items():
                    found = F.col(quote(names[column.lower()]))
                    wanted = wanted & (found.isNull() if value is None else found == F.lit(value))
            else:
                continue
            files = [f.uri for f in self._files(spark, source, batch_id)]
            if not files:
                continue
            frame = source.read_files(spark, files)
            row_index = source.file_format.lower() == "parquet"
            columns = [F.col(FILE_PATH).alias(FILE)] + ([F.col("_metadata.row_index").alias("row")] if row_index else [])
            found = frame.where(wanted).select("*", *columns).limit(2).collect()
            if found:
                places = [unquote(r[FILE]) + (f", row {r['row'] + 1}" if row_index else "") for r in found]
                return SqlextSparkError(error.error_class,
                                        f"{str(error).rstrip('.')}. The change is in {' and '.join(dict.fromkeys(places))}.")
        return None


def _named_key(message: str) -> dict | None:
    """The key a change-row error names (``key id=1, region='EU'``) and the change's ordering
    value, as column -> value; None where the message names no key, or a value that is no plain
    literal.

    >>> _named_key("[AMBIGUOUS_ORDER] F: two changes of key id=1, name='a, b' share v = 2, so ...")
    {'id': 1, 'name': 'a, b', 'v': 2}
    >>> _named_key("[NULL_ORDER_VALUE] F: a change of key id=3 has NULL in the ordering column v. Fill ...")
    {'id': 3, 'v': None}
    """
    found = re.search(r"\bkey (?P<key>.+?) (?:share|has) ", message)
    if found is None:
        return None
    pairs = re.findall(r"(\w+)=('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^,]+)(?:, |$)", found.group("key"))
    order = re.search(r"\b(?:share|has) (\w+) = ('(?:[^'\\]|\\.)*'|[^,\s]+),", message) \
        or re.search(r"\bhas NULL in the ordering column (\w+)()", message)
    try:
        key = {name: ast.literal_eval(value) for name, value in pairs}
        if key and order is not None:  # and the change's ordering value
            key[order.group(1)] = ast.literal_eval(order.group(2)) if order.group(2) else None
    except (ValueError, SyntaxError):
        return None
    return key or None


def check_parquet_files(source: SourceRecords, files: list[Folder]) -> None:
    """Each Parquet file of the batch holds the source's columns, as their types: a file without
    one (which Spark would read as NULL in every row; unless the column is one the source gained,
    :attr:`SourceRecords.optional`), with one more, or with another type is refused, naming the
    file and the column."""
    want = arrow_schema(source.schema)
    for file in files:
        try:
            have = file.parquet_schema(as_read=True)
        except Exception as error:  # noqa: BLE001 - the file is no Parquet file Arrow reads
            raise SqlextError("STREAM_SOURCE_UNREADABLE", function=FUNCTION, name=source.name, file=file.uri,
                              cause=_reason(error), fix="Write it again as a Parquet file of the source's columns, "
                                                        "or move it out of the folder, and run again; nothing of this "
                                                        "run was written.") from None
        names = {n.lower(): n for n in have.names}
        partitions = _partition_columns(source.folder, file)  # in the file's path, not in the file
        missing = [f.name for f in want if f.name.lower() not in names and f.name.lower() not in partitions
                   and f.name.lower() not in source.optional]
        wanted = {f.name.lower() for f in want}
        for column in [n for n in have.names if n.lower() not in wanted and PANDAS_INDEX.fullmatch(n)]:
            raise pandas_index_error(FUNCTION, source.name, column, [file.uri], [])
        for column in [n for n in missing if PANDAS_INDEX.fullmatch(n)]:  # a file of the batch holds it
            holders = [f.uri for f in files if f is not file and _holds(f, column)]
            if holders:
                raise pandas_index_error(FUNCTION, source.name, column, holders, [file.uri])
        if missing:
            raise SqlextError("SOURCE_FILE_MISSING_COLUMN", function=FUNCTION, file=file.uri, name=source.name,
                              column=", ".join(missing), have=", ".join(have.names))
        changes = [f"{n} was added, in {file.uri}" for n in have.names if n.lower() not in wanted]
        for column in want:
            if column.name.lower() not in names:
                continue  # a partition column
            found = have.field(names[column.name.lower()]).type
            if not _reads_as(found, column.type):
                changes.append(f"{column.name} is {found} in {file.uri}, not {column.type}")
        if changes:
            raise SqlextError("STREAM_SCHEMA_CHANGED", function=FUNCTION, name=source.name, change="; ".join(changes))


def _holds(file: Folder, column: str) -> bool:
    try:
        return column in file.parquet_schema().names
    except Exception:  # noqa: BLE001 - a file Arrow cannot read is refused as it is met
        return False


def _partition_columns(folder: Folder | None, file: Folder) -> set[str]:
    """The partition columns a file's path names below the source's folder (``date=2026-11-29/``),
    in lower case, as Spark reads them into the rows.

    >>> from sqlext.storage import local
    >>> sorted(_partition_columns(local("/data/a"), local("/data/a/Day=1/hour=2/part-0.parquet")))
    ['day', 'hour']
    """
    if folder is None or not file.uri.startswith(folder.uri.rstrip("/") + "/"):
        return set()
    inside = file.uri[len(folder.uri.rstrip("/")) + 1:].split("/")[:-1]
    return {unquote(part.split("=", 1)[0]).lower() for part in inside if "=" in part}


def _reads_as(found: pa.DataType, want: pa.DataType) -> bool:
    """Whether a Parquet column of type ``found`` reads exactly as ``want`` (Spark's type as
    Arrow's): the same type; text and bytes of either width; timestamps of any unit (Spark reads
    each as its own); a column of NULLs only (pandas writes one so); and the widenings Spark's
    reader makes without changing a value (a narrower integer, FLOAT as DOUBLE, a DECIMAL of
    fewer digits at the same scale)."""
    def plain(kind):
        if pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
            return pa.string()
        if pa.types.is_large_binary(kind) or pa.types.is_binary_view(kind):
            return pa.binary()
        if pa.types.is_dictionary(kind):
            return plain(kind.value_type)
        return kind

    found, want = plain(found), plain(want)
    if pa.types.is_null(found) or (pa.types.is_timestamp(found) and pa.types.is_timestamp(want)):
        return True
    if pa.types.is_integer(found) and pa.types.is_integer(want):
        return pa.types.is_signed_integer(found) and found.bit_width <= want.bit_width
    if pa.types.is_floating(found) and pa.types.is_floating(want):
        return found.bit_width <= want.bit_width
    if pa.types.is_decimal(found) and pa.types.is_decimal(want):
        return found.scale == want.scale and found.precision <= want.precision
    if pa.types.is_struct(found) or pa.types.is_list(found) or pa.types.is_map(found):
        return found.num_fields == want.num_fields if type(found) is type(want) else False
    return found == want


def _reason(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


def check_options(options: dict, bad_records: dict) -> None:
    """The per-source settings: reader options that keep every record, known modes."""
    for name, given in options.items():
        for key in given:
            if key.lower() in RESERVED_OPTIONS:
                raise SqlextError("INVALID_ARGUMENT_TYPE", function=FUNCTION, argument=f"the reader option {key} of {name}",
                                  expected="an option of Spark's reader that keeps every record",
                                  value=sql_value(str(given[key])),
                                  fix=f"Leave it out: {RESERVED_OPTIONS[key.lower()]}. Bad records are refused, or "
                                      f"quarantined with {_quarantine_hint(name)}.")
    for name, mode in bad_records.items():
        if mode not in MODES:
            raise SqlextError("INVALID_OPTION_VALUE", function=FUNCTION, argument=f"bad_records of {name}",
                              value=sql_value(mode), allowed=", ".join(repr(m) for m in MODES))

"""What a folder source's files hold, told from the files themselves: their columns as their
footers give them (recorded per checkpoint, so that a run reads only new files' footers:
:class:`FileColumns`), why Spark cannot read some as they are (files that disagree, nanosecond
timestamps), and the rows of a micro-batch read from its files without Spark
(:func:`batch_rows`)."""

from __future__ import annotations

import json
import re

import pyarrow as pa

from sqlext.errors import SqlextError, spark_error_summary
from sqlext.storage import Folder, resolve, walk_files, read_parquet
from sqlext.streaming.batches import batch_files

# Spark's classes for a folder that is missing or holds no file to read columns from
NO_FILES = ("UNABLE_TO_INFER_SCHEMA", "PATH_NOT_FOUND")
# Spark 4's setting that reads Parquet's nanosecond timestamps (pandas' and pyarrow's default
# unit) as TIMESTAMP_NTZ(9) and TIMESTAMP_LTZ(9); without it they are PARQUET_TYPE_ILLEGAL
NANOS_SETTING = "spark.sql.timestampNanosTypes.enabled"
_NANOS_TYPE = re.compile(r"^timestamp(?P<kind>_ntz|_ltz)?\([7-9]\)$")
_TYPE_KEYS = ("type", "elementType", "keyType", "valueType")


def condition_of(error: BaseException) -> str | None:
    """A Spark error's class (for a JVM error PySpark did not wrap, the class it names)."""
    try:
        condition = error.getCondition()
    except Exception:  # noqa: BLE001 - not a PySpark error, or no JVM to ask
        condition = None
    if condition is None:
        found = re.search(r"\[([A-Z][A-Z0-9_]+)(?:\.[A-Z0-9_]+)?\]", str(error))
        condition = found.group(1) if found else None
    return condition


def schema_json(frame) -> dict:
    """A frame's schema as JSON, from the JVM where there is one: PySpark has no type for
    Spark 4's nanosecond timestamps, which a session with their setting on reads."""
    jdf = getattr(frame, "_jdf", None)
    return json.loads(jdf.schema().json()) if jdf is not None else frame.schema.jsonValue()


def microseconds(schema):
    """A schema's JSON with nanosecond timestamps (``timestamp_ntz(9)``, ``timestamp_ltz(9)``,
    at any depth) as Spark's microsecond ``timestamp_ntz`` and ``timestamp``.

    >>> microseconds({"type": "struct", "fields": [{"name": "ts", "type": "timestamp_ntz(9)"},
    ...     {"name": "a", "type": {"type": "array", "elementType": "timestamp_ltz(9)"}}]})["fields"]
    [{'name': 'ts', 'type': 'timestamp_ntz'}, {'name': 'a', 'type': {'type': 'array', 'elementType': 'timestamp'}}]
    """
    if isinstance(schema, list):
        return [microseconds(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    changed = {}
    for key, value in schema.items():
        if key in _TYPE_KEYS and isinstance(value, str) and _NANOS_TYPE.match(value):
            changed[key] = "timestamp_ntz" if _NANOS_TYPE.match(value).group("kind") == "_ntz" else "timestamp"
        elif key in _TYPE_KEYS or key == "fields":
            changed[key] = microseconds(value)
        else:
            changed[key] = value
    return changed


def cause_of(error: BaseException) -> str:
    """Spark's reason, on one line, without the JVM exception's name before it."""
    return re.sub(r"^[\w.$]+(?:Exception|Error): ", "", spark_error_summary(error)).rstrip(".")


def named_file(error: BaseException) -> str | None:
    """The file a Spark error names ("... reading file file:/data/x.parquet. ...")."""
    found = re.search(r"\bfile (\S+?)\.?(?:\s|$)", str(error))
    return found.group(1) if found else None


def data_files(folder: Folder) -> list[Folder]:
    """A folder's data files, at any depth (not Spark's or sqlext's records), in order."""
    return sorted((f for f in walk_files(folder) if not f.name.startswith((".", "_"))), key=lambda f: f.uri)


def first_file(spark, folder: str, test=None) -> str | None:
    """The first data file of a folder (that ``test`` holds for, given its Arrow schema, or
    that Arrow cannot read), or None."""
    try:
        files = data_files(resolve(spark, folder))
    except Exception:  # noqa: BLE001 - a folder that cannot be listed: name the folder
        return None
    for file in files:
        if test is None:
            return file.uri
        try:
            if test(file.parquet_schema()):
                return file.uri
        except Exception:  # noqa: BLE001 - Arrow cannot read it either: that is the file
            return file.uri
    return None


def disagreement(spark, folder: str) -> str | None:
    """Where a folder's Parquet files disagree on a column's type: the column, and a file of each
    type (from the files' footers); None where the footers do not tell."""
    seen: dict[str, tuple[str, str]] = {}
    try:
        for file in data_files(resolve(spark, folder)):
            for field in file.parquet_schema():
                kind = str(field.type)
                first = seen.setdefault(field.name.lower(), (kind, file.uri))
                if first[0] != kind:
                    return (f"its files disagree on the type of {field.name}: {kind} in {file.uri}, "
                            f"{first[0]} in {first[1]}")
    except Exception:  # noqa: BLE001 - a footer Arrow cannot read: Spark's own words then
        return None
    return None


def has_nanos(schema) -> bool:
    """Whether an Arrow schema holds a nanosecond timestamp, at any depth."""
    import pyarrow as pa

    def nanos(kind) -> bool:
        if pa.types.is_timestamp(kind):
            return kind.unit == "ns"
        return any(nanos(kind.field(i).type) for i in range(kind.num_fields)) if kind.num_fields else False

    return any(nanos(field.type) for field in schema)


# how pandas' DataFrame.to_parquet writes an unnamed index that is not a plain 0, 1, 2, ... range
# (after a filter or a concat) unless given index=False: a column of row labels, no data of the
# source. It is refused where the folder's files disagree on it, naming the files that hold it,
# and read as a column where every file holds it, as Spark's batch reader of the folder reads it.
PANDAS_INDEX = re.compile(r"__index_level_\d+__")


def pandas_index_error(function: str, name: str, column: str, holders: list[str],
                       others: list[str]) -> SqlextError:
    """``[SOURCE_FILE_PANDAS_INDEX]``: the files ``holders`` of source ``name`` hold pandas'
    index ``column``, which the files ``others`` do not (none: the source's columns, as earlier
    files gave them, do not)."""
    def listed(files: list[str]) -> str:
        shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        return ("the file " if len(files) == 1 else "the files ") + shown

    one = len(holders) == 1
    return SqlextError("SOURCE_FILE_PANDAS_INDEX", function=function, name=name, column=column,
                       files=listed(holders), hold="holds" if one else "hold",
                       others=listed(others) if others else "the source's other files",
                       lack="lacks" if len(others) == 1 else "lack", them="it" if one else "them")


def check_pandas_index(function: str, name: str, folder: Folder, columns: list[str]) -> None:
    """Refuse a Parquet folder some of whose files hold pandas' index as a column
    (:data:`PANDAS_INDEX`, among ``columns``, the folder's merged columns) and some do not.
    The footers are read only where the columns hold one."""
    wanted = [c for c in columns if PANDAS_INDEX.fullmatch(c)]
    if not wanted:
        return
    footers = []
    for file in data_files(folder):
        try:
            footers.append((file.uri, set(file.parquet_schema().names)))
        except Exception:  # noqa: BLE001 - Arrow cannot read it: Spark's reading of it says why
            continue
    for column in wanted:
        holders = [uri for uri, names in footers if column in names]
        others = [uri for uri, names in footers if column not in names]
        if holders and others:
            raise pandas_index_error(function, name, column, holders, others)


FILE_COLUMNS_FILE = "sqlext-source-files.json"


class FileColumns:
    """What an earlier run of a checkpoint learned of a Parquet folder's columns: Spark's schema,
    the files' own (Arrow) schema, and the files it read them from (in
    ``<checkpoint>/sqlext-source-files.json``). A later run reads the footers of new files only."""

    def __init__(self, checkpoint: Folder, name: str, folder: Folder):
        self.path, self.name, self.folder = checkpoint / FILE_COLUMNS_FILE, name, folder
        self.schema = None

    def _files(self) -> list[Folder] | None:
        """The folder's data files; None where it holds folders (partitions), left to Spark."""
        entries = self.folder.entries()
        if not entries:
            return None
        files = []
        for entry in entries:
            if entry.name.startswith((".", "_")):
                continue
            if entry.is_dir:
                return None
            files.append(self.folder / entry.name)
        return sorted(files, key=lambda f: f.name)

    def _recorded(self) -> dict:
        return self.path.read_json() or {}

    def unchanged(self) -> bool:
        """Whether the recorded columns still hold: every file not read before has the same
        footer schema as those that were."""
        record = self._recorded().get(self.name)
        files = self._files()
        if record is None or not files:
            return False
        seen = set(record["files"])
        if seen - {file.name for file in files}:  # a file was taken away: the columns may be fewer
            return False
        try:
            for file in files:
                if file.name not in seen and _footer(file.parquet_schema()) != record["footer"]:
                    return False
        except Exception:  # noqa: BLE001 - not a Parquet file Arrow can read: Spark decides
            return False
        self.schema = record["spark"]
        self.record(self.schema, files)
        return True

    def record(self, schema: dict, files: list[Folder] | None = None) -> None:
        files = self._files() if files is None else files
        if not files:
            return
        try:
            footer = _footer(files[0].parquet_schema())
        except Exception:  # noqa: BLE001 - nothing to record: Spark reads every file next time
            return
        records = self._recorded()
        records[self.name] = {"spark": schema, "footer": footer, "files": [f.name for f in files]}
        self.path.write_json(records)


def _footer(schema) -> str:
    """A Parquet file's columns as Arrow reads them (names and types). Whether a column is
    required is left out: Spark reads every column of a Parquet file as nullable, so files that
    differ only there (one written from a literal, one from a join) read as the same columns."""
    return str(pa.schema([field.with_nullable(True) for field in schema]))


# -- the rows of one micro-batch, read without Spark

def batch_rows(batch, batch_id: int, checkpoint: Folder, folder: Folder | None, schema):
    """Micro-batch ``batch_id``'s rows of a query reading one stream, as Arrow data of
    ``schema``: read straight from their files in ``folder`` (the stream's Parquet folder, or
    None) where Arrow reads them as Spark does (no Spark job), else collected from Spark."""
    if folder is not None:
        files = batch_files(checkpoint, batch_id, 0, folder)
        if files is not None and readable_files(files, schema):
            return read_parquet(files, schema)
    return batch.toArrow().cast(schema)


def readable_files(files: list[Folder], schema) -> bool:
    """Whether every Parquet file holds each column of ``schema`` (Arrow) under its name with
    its type, so that Arrow reads the files as Spark does (from their footers)."""
    import pyarrow as pa

    try:
        for file in files:
            found = file.parquet_schema(as_read=True)
            for field in schema:
                index = found.get_field_index(field.name)
                if index < 0 or found.field(index).type != field.type:
                    return False
    except (OSError, pa.ArrowException, SqlextError):
        return False
    return True



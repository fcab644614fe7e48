"""What is wrong with a record a folder source's reader could not read, in words, for the
message that refuses it and for the quarantine (Spark's readers only mark such a record): a
JSON line that does not parse or holds a value that does not fit its column
(:func:`json_problem`), a CSV line of the wrong width, a header line, a value of another type
(:func:`csv_problem`), and the line a record starts on in its file (:class:`Lines`)."""

from __future__ import annotations

import csv
import json
from decimal import Decimal, InvalidOperation

from sqlext.errors import SqlextError, counted, sql_value
from sqlext.storage import resolve


def columns_text(schema) -> str:
    """A source's columns as a message names them (``id BIGINT, name STRING``)."""
    return ", ".join(f"{f.name} {f.dataType.simpleString().upper()}" for f in schema.fields)


class Lines:
    """The line each bad record starts on, in its file (read once, through the storage module):
    the n-th bad record of a file with a given text is the n-th place that text starts at."""

    def __init__(self, spark):
        self.spark, self.texts, self.after = spark, {}, {}

    def of(self, file: str, record: str) -> int | None:
        if file not in self.texts:
            try:
                self.texts[file] = resolve(self.spark, file).read_bytes().decode("utf-8", errors="replace")
            except (SqlextError, OSError):
                self.texts[file] = None
        text = self.texts[file]
        if text is None:
            return None
        start = self.after.get((file, record), 0)
        at = text.find(record, start)
        while at > 0 and text[at - 1] not in "\r\n":  # a record starts a line
            at = text.find(record, at + 1)
        if at < 0:
            return None
        self.after[(file, record)] = at + max(len(record), 1)
        return text.count("\n", 0, at) + 1


def json_problem(record: str, schema) -> tuple[str | None, str]:
    """
    >>> from pyspark.sql.types import StructType, StructField, LongType, StringType
    >>> schema = StructType([StructField("id", LongType()), StructField("name", StringType())])
    >>> json_problem('{"id": 1, "name": "Ada"', schema)
    (None, "does not parse as JSON (Expecting ',' delimiter at character 23)")
    >>> json_problem('{"id": 1, "name": "Ada', schema)
    (None, 'does not parse as JSON (Unterminated string starting at character 18)')
    >>> json_problem('{"id": "one", "name": "Ada"}', schema)
    ('id', "has 'one' in column id, which is not a BIGINT")
    """
    try:
        value = json.loads(record)
    except ValueError as error:
        reason = getattr(error, "msg", str(error))
        position = getattr(error, "pos", None)
        if position is None:
            return None, f"does not parse as JSON ({reason})"
        # Python's words may end in "at" already ("Unterminated string starting at")
        at = " character" if reason.endswith(" at") else " at character"
        return None, f"does not parse as JSON ({reason}{at} {position})"
    if not isinstance(value, dict):
        return None, f"is {json_kind(value)}, not an object of the columns"
    found = json_misfit(value, schema)
    if found is not None:
        return found
    return None, f"does not fit the columns ({columns_text(schema)})"


def json_records(text: str):
    """The records of a file of JSON lines as Spark's reader reads them: (line number, the
    line, its value as :func:`json.loads` gives it, or None where it does not parse), a line
    holding an array of objects giving each of them; blank lines hold none.

    >>> [(n, v) for n, _, v in json_records('{"a": 1}\\n\\n[{"a": 2}, {"a": 3}]\\nnot json\\n')]
    [(1, {'a': 1}), (3, {'a': 2}), (3, {'a': 3}), (4, None)]
    """
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            yield number, line, None
            continue
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for item in value:
                yield number, line, item
        else:
            yield number, line, value


def json_kind(value) -> str:
    """What a JSON value is, in JSON's words (as :func:`json.loads` gives it).

    >>> [json_kind(v) for v in (None, [1], "a", 1.5, True, {})]
    ['JSON null', 'a JSON array', 'a JSON string', 'a JSON number', 'JSON true', 'a JSON object']
    """
    if value is None:
        return "JSON null"
    if isinstance(value, bool):
        return f"JSON {'true' if value else 'false'}"
    if isinstance(value, (int, float)):
        return "a JSON number"
    return {list: "a JSON array", str: "a JSON string", dict: "a JSON object"}[type(value)]


def json_misfit(value: dict, schema, prefix: str = "") -> tuple[str, str] | None:
    """The first column whose value in a JSON object Spark's reader does not read as its type,
    with the words for it; None where every value fits."""
    from pyspark.sql.types import StructType

    for column in schema.fields:
        if column.name not in value or value[column.name] is None:
            continue
        name, item = prefix + column.name, value[column.name]
        if isinstance(column.dataType, StructType):
            if not isinstance(item, dict):
                return name, f"has {_json_text(item)} in column {name}, which is not a struct"
            inner = json_misfit(item, column.dataType, name + ".")
            if inner is not None:
                return inner
            continue
        if not _json_fits(item, column.dataType):
            return name, f"has {_json_text(item)} in column {name}, which is not a {column.dataType.simpleString().upper()}"
    return None


def _json_text(value) -> str:
    return sql_value(value) if isinstance(value, (str, bool)) or value is None else json.dumps(value)


def _json_fits(value, kind) -> bool:
    """Whether Spark's JSON reader reads ``value`` (as json.loads gives it) as ``kind``."""
    from pyspark.sql import types as T

    if isinstance(kind, T.StringType):
        return True
    if isinstance(kind, T.BooleanType):
        return isinstance(value, bool)
    if isinstance(kind, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return isinstance(value, int) and not isinstance(value, bool) and _in_range(value, kind)
    if isinstance(kind, (T.FloatType, T.DoubleType)):
        return (isinstance(value, (int, float)) and not isinstance(value, bool)) or value in ("NaN", "Infinity", "-Infinity")
    if isinstance(kind, T.DecimalType):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and _fits_decimal(Decimal(str(value)), kind)
    if isinstance(kind, T.ArrayType):
        return isinstance(value, list) and all(v is None or _json_fits(v, kind.elementType) for v in value)
    if isinstance(kind, (T.MapType, T.StructType)):
        return isinstance(value, dict)
    return True  # dates, timestamps and the rest: Spark's own parsing of their text decides


def _in_range(value: int, kind) -> bool:
    from pyspark.sql import types as T

    bits = {T.ByteType: 8, T.ShortType: 16, T.IntegerType: 32, T.LongType: 64}[type(kind)]
    return -(1 << (bits - 1)) <= value < (1 << (bits - 1))


def _fits_decimal(value: Decimal, kind) -> bool:
    if not value.is_finite():
        return False
    digits = value.as_tuple()
    return len(digits.digits) + digits.exponent <= kind.precision - kind.scale  # the digits before the point


def header_hint(name: str) -> str:
    """How to read the CSV files of source ``name`` with their header line, on every surface."""
    return (f"--source-option {name}.header=true on the command line, source_options={{{name!r}: {{'header': "
            f"'true'}}}} in Python, 'options': {{'header': 'true'}} in its settings of a dbt model's sqlext_sources")


def csv_problem(record: str, schema, options: dict, name: str = "NAME") -> tuple[str | None, str]:
    """What is wrong with a CSV record of source ``name`` that does not fit its columns.

    >>> from pyspark.sql.types import StructType, StructField, LongType, StringType
    >>> schema = StructType([StructField("id", LongType()), StructField("balance", LongType())])
    >>> csv_problem("1,abc", schema, {})
    ('balance', "has 'abc' in column balance, which is not a BIGINT")
    >>> csv_problem("1,2,3", schema, {})
    (None, 'has 3 fields, where the source has 2 columns (id BIGINT, balance BIGINT)')
    >>> csv_problem("1,2", StructType(schema.fields[:1]), {})[1]
    'has 2 fields, where the source has 1 column (id BIGINT)'
    """
    lowered = {k.lower(): v for k, v in options.items()}
    delimiter = lowered.get("sep", lowered.get("delimiter", ","))
    quote = lowered.get("quote", '"')
    null = lowered.get("nullvalue", "")
    try:
        fields = next(csv.reader([record], delimiter=delimiter[:1] or ",", quotechar=quote[:1] or '"',
                                 escapechar=lowered.get("escape", "\\")[:1] or None))
    except (csv.Error, StopIteration) as error:
        return None, f"does not parse as CSV ({error})"
    if [f.strip().lower() for f in fields] == [c.name.lower() for c in schema.fields]:
        return None, f"is a header line (the column names): read such files with their header ({header_hint(name)})"
    if len(fields) != len(schema.fields):
        return None, (f"has {counted(len(fields), 'field')}, where the source has "
                      f"{counted(len(schema.fields), 'column')} ({columns_text(schema)})")
    for column, text in zip(schema.fields, fields):
        if text == null or text == "":
            continue
        if not _csv_fits(text.strip(), column.dataType):
            return column.name, (f"has {sql_value(text)} in column {column.name}, which is not a "
                                 f"{column.dataType.simpleString().upper()}")
    return None, f"does not fit the columns ({columns_text(schema)})"


def _csv_fits(text: str, kind) -> bool:
    """Whether Spark's CSV reader reads ``text`` as ``kind``."""
    from pyspark.sql import types as T

    try:
        if isinstance(kind, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
            return _in_range(int(text), kind)
        if isinstance(kind, (T.FloatType, T.DoubleType)):
            float(text)
            return True
        if isinstance(kind, T.DecimalType):
            return _fits_decimal(Decimal(text), kind)
        if isinstance(kind, T.BooleanType):
            return text.lower() in ("true", "false")
    except (ValueError, InvalidOperation, OverflowError):
        return False
    return True

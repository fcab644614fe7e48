"""Results as HiveServer2 sends them: a column's Spark type as a type id (and qualifiers),
a result collected through Arrow, and a page of it as columnar ``TColumn`` values.

Each column travels in the Thrift column of its kind (booleans as ``boolVal``, integers by
width, FLOAT and DOUBLE as ``doubleVal``, strings as ``stringVal``, BINARY as ``binaryVal``).
Every other type travels as text, in the form Spark's own Thrift server gives it, with the type
id of its real type: DECIMAL, DATE and TIMESTAMP as Spark casts them to strings
(``2024-01-31 10:00:00.5``, in the session's time zone), arrays, maps and structs as JSON,
intervals as Hive writes them (``1-2`` for a year-month interval, ``1 02:03:04.000000000``
for a day-time one). A client reads each by the type id the result's schema gives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark.sql import types as T

from sqlext.server.hive.protocol import ttypes

TypeId = ttypes.TTypeId

# the Thrift column a type's values travel in; a type not here travels as text
_COLUMN_KINDS = {
    T.BooleanType: "boolVal", T.ByteType: "byteVal", T.ShortType: "i16Val", T.IntegerType: "i32Val",
    T.LongType: "i64Val", T.FloatType: "doubleVal", T.DoubleType: "doubleVal", T.StringType: "stringVal",
    T.BinaryType: "binaryVal",
}
_COLUMN_CLASSES = {
    "boolVal": ttypes.TBoolColumn, "byteVal": ttypes.TByteColumn, "i16Val": ttypes.TI16Column,
    "i32Val": ttypes.TI32Column, "i64Val": ttypes.TI64Column, "doubleVal": ttypes.TDoubleColumn,
    "stringVal": ttypes.TStringColumn, "binaryVal": ttypes.TBinaryColumn,
}
# the placeholder a NULL takes in a column's values (its bit in the bitmap says NULL)
_PLACEHOLDERS = {"boolVal": False, "byteVal": 0, "i16Val": 0, "i32Val": 0, "i64Val": 0, "doubleVal": 0.0,
                 "stringVal": "", "binaryVal": b""}

_TYPE_IDS = [
    (T.BooleanType, TypeId.BOOLEAN_TYPE), (T.ByteType, TypeId.TINYINT_TYPE), (T.ShortType, TypeId.SMALLINT_TYPE),
    (T.IntegerType, TypeId.INT_TYPE), (T.LongType, TypeId.BIGINT_TYPE), (T.FloatType, TypeId.FLOAT_TYPE),
    (T.DoubleType, TypeId.DOUBLE_TYPE), (T.VarcharType, TypeId.VARCHAR_TYPE), (T.CharType, TypeId.CHAR_TYPE),
    (T.StringType, TypeId.STRING_TYPE), (T.BinaryType, TypeId.BINARY_TYPE), (T.DecimalType, TypeId.DECIMAL_TYPE),
    (T.DateType, TypeId.DATE_TYPE), (T.TimestampType, TypeId.TIMESTAMP_TYPE),
    (T.TimestampNTZType, TypeId.TIMESTAMP_TYPE), (T.ArrayType, TypeId.ARRAY_TYPE), (T.MapType, TypeId.MAP_TYPE),
    (T.StructType, TypeId.STRUCT_TYPE), (T.NullType, TypeId.NULL_TYPE),
    (T.YearMonthIntervalType, TypeId.INTERVAL_YEAR_MONTH_TYPE),
    (T.DayTimeIntervalType, TypeId.INTERVAL_DAY_TIME_TYPE),
]


def type_id(data_type) -> int:
    """The HiveServer2 type id of a Spark type (STRING for one Hive has no id for, as
    CALENDAR intervals, VARIANT or a user-defined type).

    >>> [type_id(t) for t in (T.IntegerType(), T.DecimalType(10, 2), T.ArrayType(T.LongType()), T.VariantType())]
    [3, 15, 10, 7]
    """
    for spark_type, hive in _TYPE_IDS:
        if isinstance(data_type, spark_type):
            return hive
    return TypeId.STRING_TYPE


def column_kind(data_type) -> str:
    """The Thrift column (``TColumn`` field) a type's values travel in."""
    if isinstance(data_type, (T.VarcharType, T.CharType)):
        return "stringVal"
    for spark_type, kind in _COLUMN_KINDS.items():
        if type(data_type) is spark_type:
            return kind
    return "stringVal"


def type_desc(data_type):
    """A column's ``TTypeDesc``: one entry with its type id, and the qualifiers of DECIMAL
    (precision, scale) and VARCHAR or CHAR (length)."""
    qualifiers = None
    if isinstance(data_type, T.DecimalType):
        qualifiers = {"precision": ttypes.TTypeQualifierValue(i32Value=data_type.precision),
                      "scale": ttypes.TTypeQualifierValue(i32Value=data_type.scale)}
    elif isinstance(data_type, (T.VarcharType, T.CharType)):
        qualifiers = {"characterMaximumLength": ttypes.TTypeQualifierValue(i32Value=data_type.length)}
    entry = ttypes.TPrimitiveTypeEntry(
        type=type_id(data_type),
        typeQualifiers=ttypes.TTypeQualifiers(qualifiers=qualifiers) if qualifiers else None)
    return ttypes.TTypeDesc(types=[ttypes.TTypeEntry(primitiveEntry=entry)])


@dataclass
class Result:
    """A result held at the server: its columns (name, Spark type) and its rows as an Arrow
    table, one Arrow column per result column, in order; ``offset`` is where the next page
    starts."""

    fields: list = field(default_factory=list)  # [(name, DataType)]
    table: object = None  # pyarrow.Table, or None for a result without rows (or columns)
    offset: int = 0

    @property
    def row_count(self) -> int:
        return 0 if self.table is None else self.table.num_rows

    def schema(self):
        return ttypes.TTableSchema(columns=[
            ttypes.TColumnDesc(columnName=name, typeDesc=type_desc(data_type), position=index + 1,
                               comment="")
            for index, (name, data_type) in enumerate(self.fields)])

    def page(self, max_rows: int, from_start: bool = False):
        """The next ``max_rows`` rows (from the first row again with ``from_start``) as a
        columnar ``TRowSet``, and whether rows are left after it."""
        if from_start:
            self.offset = 0
        start = self.offset
        count = max(0, min(max_rows if max_rows > 0 else self.row_count, self.row_count - start))
        self.offset = start + count
        columns = []
        for index, (_, data_type) in enumerate(self.fields):
            values = self.table.column(index).slice(start, count).to_pylist() if count else []
            columns.append(encode_column(data_type, values))
        return (ttypes.TRowSet(startRowOffset=start, rows=[], columns=columns, columnCount=len(columns)),
                self.offset < self.row_count)


def encode_column(data_type, values: list):
    """One ``TColumn`` of values (None for NULL) of a result column of ``data_type``, the
    values already in the form they travel in (see :func:`prepare`)."""
    kind = column_kind(data_type)
    nulls = null_bitmap(values)
    placeholder = _PLACEHOLDERS[kind]
    convert = _CONVERTERS.get(type(data_type), _same)
    carried = [placeholder if value is None else convert(value) for value in values]
    return ttypes.TColumn(**{kind: _COLUMN_CLASSES[kind](values=carried, nulls=nulls)})


def null_bitmap(values: list) -> bytes:
    """Bit i set where value i is None, least significant bit first in each byte.

    >>> null_bitmap([None, 1, 1, None, 1, 1, 1, 1, None])
    b'\\t\\x01'
    >>> null_bitmap([1, 2])
    b''
    """
    bits = bytearray((len(values) + 7) // 8)
    for index, value in enumerate(values):
        if value is None:
            bits[index // 8] |= 1 << (index % 8)
    return bytes(bits).rstrip(b"\0")


def _same(value):
    return value


def _float(value):
    """A FLOAT as the double whose shortest text is the FLOAT's (1.1, not 1.100000023841858)."""
    import numpy as np

    return float(str(np.float32(value)))


def _year_month(months: int) -> str:
    """Hive's text of a year-month interval from its months.

    >>> _year_month(14), _year_month(-3)
    ('1-2', '-0-3')
    """
    sign = "-" if months < 0 else ""
    years, rest = divmod(abs(months), 12)
    return f"{sign}{years}-{rest}"


def _day_time(delta) -> str:
    """Hive's text of a day-time interval.

    >>> import datetime
    >>> _day_time(datetime.timedelta(days=1, hours=2, minutes=3, seconds=4, microseconds=5))
    '1 02:03:04.000005000'
    >>> _day_time(-datetime.timedelta(seconds=1))
    '-0 00:00:01.000000000'
    """
    micros = delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds
    sign = "-" if micros < 0 else ""
    seconds, fraction = divmod(abs(micros), 1_000_000)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    days, hour = divmod(hours, 24)
    return f"{sign}{days} {hour:02d}:{minute:02d}:{second:02d}.{fraction * 1000:09d}"


_CONVERTERS = {T.FloatType: _float, T.YearMonthIntervalType: _year_month, T.DayTimeIntervalType: _day_time}


def prepare(frame):
    """The columns of a DataFrame (name, type) and a DataFrame of the same rows whose columns
    are in the form they travel in: the types that travel as text cast to it by Spark (JSON
    for arrays, maps and structs), a year-month interval as its months. The columns are
    renamed by position first, so that duplicate or odd names select nothing wrong."""
    from pyspark.sql import functions as F

    fields = [(f.name, f.dataType) for f in frame.schema.fields]
    positional = frame.toDF(*[f"c{index}" for index in range(len(fields))])
    columns = []
    for index, (_, data_type) in enumerate(fields):
        column = F.col(f"c{index}")
        if column_kind(data_type) != "stringVal" or isinstance(data_type, (T.StringType, T.VarcharType, T.CharType)):
            columns.append(column)
        elif isinstance(data_type, (T.ArrayType, T.MapType, T.StructType)):
            columns.append(F.to_json(column, {"ignoreNullFields": "false"}))
        elif isinstance(data_type, T.YearMonthIntervalType):
            columns.append(F.extract(F.lit("YEAR"), column) * 12 + F.extract(F.lit("MONTH"), column))
        elif isinstance(data_type, T.DayTimeIntervalType):
            columns.append(column)  # Arrow carries it as a duration
        else:
            columns.append(column.cast("string"))
    return fields, positional.select(*[c.alias(f"c{i}") for i, c in enumerate(columns)])


def collect(frame) -> Result:
    """A DataFrame's result, collected at the server through Arrow (all its rows)."""
    if not frame.columns:
        return Result()
    fields, travelling = prepare(frame)
    return Result(fields=fields, table=travelling.toArrow())


def rows_result(fields: list, rows: list) -> Result:
    """A result built here (the catalog calls): ``rows`` are tuples in the order of ``fields``."""
    import pyarrow as pa

    arrays = [pa.array([row[index] for row in rows], type=_arrow_type(data_type))
              for index, (_, data_type) in enumerate(fields)]
    names = [f"c{index}" for index in range(len(fields))]
    return Result(fields=fields, table=pa.table(arrays, names=names) if fields else None)


def _arrow_type(data_type):
    import pyarrow as pa

    return {"boolVal": pa.bool_(), "byteVal": pa.int8(), "i16Val": pa.int16(), "i32Val": pa.int32(),
            "i64Val": pa.int64(), "doubleVal": pa.float64(), "stringVal": pa.string(),
            "binaryVal": pa.binary()}[column_kind(data_type)]

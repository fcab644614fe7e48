"""The catalog calls BI tools browse with (GetSchemas, GetTables, GetColumns, ...): result sets
whose columns are named and typed as JDBC's ``DatabaseMetaData`` names them, read from a
session's catalog (``spark.catalog``), with JDBC search patterns (``%``, ``_``, ``\\``) on names.

As Spark's own Thrift server does, tables have the empty catalog name (``TABLE_CAT`` is ''),
and a session's temporary views are listed as VIEWs with no schema (``global_temp``'s views
under that schema). GetFunctions lists Spark's functions and sqlext's table functions
(``FK_JOIN``, ...), which exist only as rewrites, each with its description.
"""

from __future__ import annotations

import re
from functools import lru_cache

from pyspark.sql import types as T
from sqlglot import exp

from sqlext.server.hive.rowsets import Result, rows_result

S, I, SI, TI, B = T.StringType(), T.IntegerType(), T.ShortType(), T.ByteType(), T.BooleanType()

# java.sql.Types
BOOLEAN, TINYINT, SMALLINT, INTEGER, BIGINT, FLOAT, REAL, DOUBLE, DECIMAL = 16, -6, 5, 4, -5, 6, 7, 8, 3
CHAR, VARCHAR, DATE, TIMESTAMP, BINARY, NULL, OTHER = 1, 12, 91, 93, -2, 0, 1111
ARRAY, STRUCT, JAVA_OBJECT = 2003, 2002, 2000
# DatabaseMetaData: columnNoNulls, columnNullable; typeSearchable; functionResultUnknown, functionReturnsTable
NO_NULLS, NULLABLE, SEARCHABLE, RESULT_UNKNOWN, RETURNS_TABLE = 0, 1, 3, 0, 2

TABLE_TYPES = ("TABLE", "VIEW")


def pattern(text: str | None):
    r"""A JDBC search pattern as a regular expression matching whole names, any case: ``%``
    any run of characters, ``_`` any one, ``\`` takes the next literally. None, '' and ``*``
    match everything.

    >>> [bool(pattern(p).fullmatch(n)) for p, n in [("ord%", "ORDERS"), ("o_d", "odd"), (r"a\_b", "axb"), (None, "x")]]
    [True, True, False, True]
    """
    if text in (None, "", "*"):
        return re.compile(".*", re.DOTALL)
    parts, escaped = [], False
    for char in text:
        if escaped:
            parts.append(re.escape(char))
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "%":
            parts.append(".*")
        elif char == "_":
            parts.append(".")
        else:
            parts.append(re.escape(char))
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL)


def _matches(regex, name) -> bool:
    return regex.fullmatch(name or "") is not None


def quoted_name(*parts: str) -> str:
    """A table's name as Spark reads it, each part quoted (a part may hold backticks, dots or
    spaces): written from a sqlglot tree."""
    from sqlext.language.dialect import to_sql

    *db, table = parts
    node = exp.Table(this=exp.to_identifier(table, quoted=True),
                     db=exp.to_identifier(db[-1], quoted=True) if db and db[-1] else None)
    return to_sql(node)


def catalogs(spark) -> Result:
    """No catalog names: tables have the empty catalog, as in Spark's Thrift server."""
    return rows_result([("TABLE_CAT", S)], [])


def schemas(spark, schema_pattern: str | None) -> Result:
    wanted = pattern(schema_pattern)
    names = [db.name for db in spark.catalog.listDatabases()]
    global_temp = _global_temp(spark)
    if global_temp not in names:
        names.append(global_temp)
    rows = [(name, "") for name in sorted(names) if _matches(wanted, name)]
    return rows_result([("TABLE_SCHEM", S), ("TABLE_CATALOG", S)], rows)


def table_types() -> Result:
    return rows_result([("TABLE_TYPE", S)], [(kind,) for kind in TABLE_TYPES])


TABLE_FIELDS = [("TABLE_CAT", S), ("TABLE_SCHEM", S), ("TABLE_NAME", S), ("TABLE_TYPE", S), ("REMARKS", S),
                ("TYPE_CAT", S), ("TYPE_SCHEM", S), ("TYPE_NAME", S), ("SELF_REFERENCING_COL_NAME", S),
                ("REF_GENERATION", S)]


def _tables(spark, schema_pattern, table_pattern):
    """(schema, table name, TABLE or VIEW, remarks) of the tables and views that match, the
    temporary views with schema None (global temporary ones under ``global_temp``)."""
    schema_regex, table_regex = pattern(schema_pattern), pattern(table_pattern)
    found = []
    for db in spark.catalog.listDatabases():
        if not _matches(schema_regex, db.name):
            continue
        for table in spark.catalog.listTables(db.name):
            if not table.isTemporary and _matches(table_regex, table.name):
                kind = "VIEW" if table.tableType == "VIEW" else "TABLE"
                found.append((db.name, table.name, kind, table.description or ""))
    global_temp = _global_temp(spark)
    listed = spark.catalog.listTables(global_temp) if _matches(schema_regex, global_temp) else \
        [t for t in spark.catalog.listTables() if t.isTemporary and not t.namespace]
    for view in listed:
        if view.isTemporary and _matches(table_regex, view.name):
            found.append((global_temp if view.namespace else None, view.name, "VIEW", view.description or ""))
    return found


def tables(spark, schema_pattern, table_pattern, types) -> Result:
    wanted = {t.upper() for t in types} if types else None
    rows = [("", schema, name, kind, remarks, None, None, None, None, None)
            for schema, name, kind, remarks in _tables(spark, schema_pattern, table_pattern)
            if wanted is None or kind in wanted]
    rows.sort(key=lambda row: (row[3], row[1] or "", row[2]))
    return rows_result(TABLE_FIELDS, rows)


COLUMN_FIELDS = [
    ("TABLE_CAT", S), ("TABLE_SCHEM", S), ("TABLE_NAME", S), ("COLUMN_NAME", S), ("DATA_TYPE", I),
    ("TYPE_NAME", S), ("COLUMN_SIZE", I), ("BUFFER_LENGTH", TI), ("DECIMAL_DIGITS", I), ("NUM_PREC_RADIX", I),
    ("NULLABLE", I), ("REMARKS", S), ("COLUMN_DEF", S), ("SQL_DATA_TYPE", I), ("SQL_DATETIME_SUB", I),
    ("CHAR_OCTET_LENGTH", I), ("ORDINAL_POSITION", I), ("IS_NULLABLE", S), ("SCOPE_CATALOG", S),
    ("SCOPE_SCHEMA", S), ("SCOPE_TABLE", S), ("SOURCE_DATA_TYPE", SI), ("IS_AUTO_INCREMENT", S),
]


def columns(spark, schema_pattern, table_pattern, column_pattern) -> Result:
    column_regex = pattern(column_pattern)
    rows = []
    for schema, name, _, _ in _tables(spark, schema_pattern, table_pattern):
        listed = spark.catalog.listColumns(quoted_name(schema, name) if schema else quoted_name(name))
        for position, column in enumerate(listed, start=1):
            if not _matches(column_regex, column.name):
                continue
            data_type = parse_type(spark, column.dataType)
            size, digits, radix = _size(data_type)
            rows.append(("", schema, name, column.name, jdbc_type(data_type), type_name(data_type), size, None,
                         digits, radix, NULLABLE if column.nullable else NO_NULLS, column.description or "",
                         None, None, None, None, position, "YES" if column.nullable else "NO", None, None, None,
                         None, "NO"))
    return rows_result(COLUMN_FIELDS, rows)


def parse_type(spark, text: str):
    """A type as the catalog writes it (``decimal(10,2)``, ``array<int>``) as a Spark type."""
    return _parse_type(text)


@lru_cache(maxsize=512)
def _parse_type(text: str):
    from pyspark.sql.types import _parse_datatype_string

    try:
        return _parse_datatype_string(text)
    except Exception:  # noqa: BLE001 - a type PySpark cannot read back: shown as text
        return T.StringType()


def jdbc_type(data_type) -> int:
    """The ``java.sql.Types`` code of a Spark type, as Spark's Thrift server gives it."""
    for spark_type, code in [
        (T.BooleanType, BOOLEAN), (T.ByteType, TINYINT), (T.ShortType, SMALLINT), (T.IntegerType, INTEGER),
        (T.LongType, BIGINT), (T.FloatType, FLOAT), (T.DoubleType, DOUBLE), (T.DecimalType, DECIMAL),
        (T.CharType, CHAR), (T.VarcharType, VARCHAR), (T.StringType, VARCHAR), (T.DateType, DATE),
        (T.TimestampType, TIMESTAMP), (T.TimestampNTZType, TIMESTAMP), (T.BinaryType, BINARY),
        (T.ArrayType, ARRAY), (T.StructType, STRUCT), (T.MapType, JAVA_OBJECT), (T.NullType, NULL),
    ]:
        if isinstance(data_type, spark_type):
            return code
    return OTHER


def type_name(data_type) -> str:
    """The type's name as Spark writes it in SQL (``INT``, ``DECIMAL(10,2)``, ``ARRAY<INT>``)."""
    return data_type.simpleString().upper()


def _size(data_type) -> tuple[int | None, int | None, int | None]:
    """COLUMN_SIZE, DECIMAL_DIGITS and NUM_PREC_RADIX of a type."""
    if isinstance(data_type, T.DecimalType):
        return data_type.precision, data_type.scale, 10
    if isinstance(data_type, (T.VarcharType, T.CharType)):
        return data_type.length, None, None
    sizes = {T.ByteType: (3, 0, 10), T.ShortType: (5, 0, 10), T.IntegerType: (10, 0, 10), T.LongType: (19, 0, 10),
             T.FloatType: (7, 7, 10), T.DoubleType: (15, 15, 10), T.BooleanType: (1, None, None),
             T.DateType: (10, None, None), T.TimestampType: (29, 6, None), T.TimestampNTZType: (29, 6, None)}
    return sizes.get(type(data_type), (None, None, None))


TYPE_INFO_FIELDS = [
    ("TYPE_NAME", S), ("DATA_TYPE", I), ("PRECISION", I), ("LITERAL_PREFIX", S), ("LITERAL_SUFFIX", S),
    ("CREATE_PARAMS", S), ("NULLABLE", SI), ("CASE_SENSITIVE", B), ("SEARCHABLE", SI), ("UNSIGNED_ATTRIBUTE", B),
    ("FIXED_PREC_SCALE", B), ("AUTO_INCREMENT", B), ("LOCAL_TYPE_NAME", S), ("MINIMUM_SCALE", SI),
    ("MAXIMUM_SCALE", SI), ("SQL_DATA_TYPE", I), ("SQL_DATETIME_SUB", I), ("NUM_PREC_RADIX", I),
]

def _interval_types() -> list:
    """Every ANSI interval type, as Spark names them (``INTERVAL YEAR`` ... ``INTERVAL DAY TO SECOND``)."""
    year_month, day_time = T.YearMonthIntervalType, T.DayTimeIntervalType
    return ([year_month(start, end) for start in (year_month.YEAR, year_month.MONTH)
             for end in (year_month.YEAR, year_month.MONTH) if start <= end]
            + [day_time(start, end) for start in range(day_time.DAY, day_time.SECOND + 1)
               for end in range(start, day_time.SECOND + 1)])


# the types getTypeInfo lists: every type a column can have, one row each, with the name
# getColumns gives it (type_name) without its parameters
_TYPES = [T.BooleanType(), T.ByteType(), T.ShortType(), T.IntegerType(), T.LongType(), T.FloatType(),
          T.DoubleType(), T.DecimalType(38, 18), T.StringType(), T.VarcharType(65535), T.CharType(255),
          T.BinaryType(), T.DateType(), T.TimestampType(), T.TimestampNTZType(), *_interval_types(),
          T.ArrayType(T.StringType()), T.MapType(T.StringType(), T.StringType()), T.StructType([]),
          T.VariantType(), T.NullType()]


def base_type_name(data_type) -> str:
    """A type's name as :func:`type_name` gives it, without its parameters: ``DECIMAL`` for
    ``DECIMAL(10,2)``, ``ARRAY`` for ``ARRAY<INT>``; the name of its row in getTypeInfo.

    >>> [base_type_name(t) for t in (T.LongType(), T.DecimalType(10, 2), T.ArrayType(T.IntegerType()), T.DayTimeIntervalType(0, 0))]
    ['BIGINT', 'DECIMAL', 'ARRAY', 'INTERVAL DAY']
    """
    return re.split(r"[(<]", type_name(data_type), maxsplit=1)[0]


_CREATE_PARAMS = {T.DecimalType: "precision,scale", T.VarcharType: "length", T.CharType: "length"}


def type_info() -> Result:
    """getTypeInfo: one row per type, named as getColumns names a column's type (Spark's SQL
    names: ``INT``, ``BIGINT``, ``INTERVAL DAY TO SECOND``), with its ``java.sql.Types`` code."""
    rows = []
    for data_type in _TYPES:
        size, _, radix = _size(data_type)
        numeric = isinstance(data_type, T.NumericType)
        text = isinstance(data_type, (T.StringType, T.VarcharType, T.CharType))
        rows.append((base_type_name(data_type), jdbc_type(data_type), size, "'" if text else None,
                     "'" if text else None, _CREATE_PARAMS.get(type(data_type)), NULLABLE, text, SEARCHABLE, not numeric,
                     False, False, None, 0, data_type.precision if isinstance(data_type, T.DecimalType) else 0,
                     None, None, radix))
    return rows_result(TYPE_INFO_FIELDS, rows)


FUNCTION_FIELDS = [("FUNCTION_CAT", S), ("FUNCTION_SCHEM", S), ("FUNCTION_NAME", S), ("REMARKS", S),
                   ("FUNCTION_TYPE", I), ("SPECIFIC_NAME", S)]


def functions(spark, schema_pattern, function_pattern) -> Result:
    """Spark's functions (persistent ones under their schema) and sqlext's table functions,
    which return tables."""
    from sqlext.functions import catalogue

    schema_regex, name_regex = pattern(schema_pattern), pattern(function_pattern)
    ours = {f.name for f in catalogue.functions()}
    rows = [(None, None, f.name, f.summary, RETURNS_TABLE, f.name)
            for f in catalogue.functions() if _matches(name_regex, f.name)]
    for function in spark.catalog.listFunctions():
        if function.name.upper() in ours or not _matches(name_regex, function.name):
            continue
        schema = function.namespace[-1] if function.namespace else None
        if schema is not None and not _matches(schema_regex, schema):
            continue
        rows.append((None, schema, function.name, function.description or "", RESULT_UNKNOWN,
                     function.className or function.name))
    rows.sort(key=lambda row: (row[1] or "", row[2].lower()))
    return rows_result(FUNCTION_FIELDS, rows)


def primary_keys() -> Result:
    return rows_result([("TABLE_CAT", S), ("TABLE_SCHEM", S), ("TABLE_NAME", S), ("COLUMN_NAME", S),
                        ("KEY_SEQ", I), ("PK_NAME", S)], [])


def cross_reference() -> Result:
    return rows_result([("PKTABLE_CAT", S), ("PKTABLE_SCHEM", S), ("PKTABLE_NAME", S), ("PKCOLUMN_NAME", S),
                        ("FKTABLE_CAT", S), ("FKTABLE_SCHEM", S), ("FKTABLE_NAME", S), ("FKCOLUMN_NAME", S),
                        ("KEY_SEQ", SI), ("UPDATE_RULE", SI), ("DELETE_RULE", SI), ("FK_NAME", S), ("PK_NAME", S),
                        ("DEFERRABILITY", SI)], [])


def _global_temp(spark) -> str:
    return spark.conf.get("spark.sql.globalTempDatabase", "global_temp")

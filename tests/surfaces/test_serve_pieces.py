"""The pieces of ``sqlext serve`` and its JDBC endpoint that need no server: the names the
catalog calls give types, the JDBC endpoint's setting, the ports the starting command asks the
server to bind, the server's first statements, and what a project's git ignores. The servers
themselves are tested in test_serve.py (``sqlext serve``) and test_hiveserver.py (the endpoint
in this process)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from pyspark.sql import types as T

from sqlext.errors import SqlextError
from sqlext.server.hive import catalog
from sqlext.session_options import SessionOptions

ROOT = Path(__file__).resolve().parents[2]


# -- getTypeInfo and getColumns: one set of names, Spark's

def test_type_info_names_each_type_as_get_columns_does():
    info = catalog.type_info().table
    names, codes = info.column(0).to_pylist(), info.column(1).to_pylist()
    assert len(names) == len(set(names))
    assert not {"BYTE", "SHORT", "INTEGER", "LONG"} & set(names)
    by_name = dict(zip(names, codes))
    columns = [T.BooleanType(), T.ByteType(), T.ShortType(), T.IntegerType(), T.LongType(), T.FloatType(),
               T.DoubleType(), T.DecimalType(10, 2), T.StringType(), T.VarcharType(10), T.CharType(3), T.BinaryType(),
               T.DateType(), T.TimestampType(), T.TimestampNTZType(), T.ArrayType(T.IntegerType()),
               T.MapType(T.StringType(), T.LongType()), T.StructType([T.StructField("a", T.IntegerType())]),
               T.VariantType(), T.NullType(), T.YearMonthIntervalType(), T.YearMonthIntervalType(0, 0),
               T.DayTimeIntervalType(), T.DayTimeIntervalType(1, 2), T.DayTimeIntervalType(3, 3)]
    for data_type in columns:  # the TYPE_NAME getColumns gives, without its parameters, has a row
        name = re.split(r"[(<]", catalog.type_name(data_type))[0]
        assert by_name.get(name) == catalog.jdbc_type(data_type), (name, data_type)
    assert {"TINYINT", "SMALLINT", "INT", "BIGINT", "INTERVAL YEAR TO MONTH", "INTERVAL DAY TO SECOND"} <= set(names)


# -- sqlext.jdbc.showTables

def test_the_show_tables_setting_takes_hive_or_spark_and_hive_is_the_default():
    from sqlext.server.hive.settings import SHOW_TABLES, is_show_tables_key, show_tables_shape

    assert show_tables_shape(None) == "hive"
    assert [show_tables_shape(v) for v in ("hive", "SPARK", " Hive ")] == ["hive", "spark", "hive"]
    with pytest.raises(SqlextError) as refused:
        show_tables_shape("tables")
    assert str(refused.value).startswith(
        "[INVALID_SETTING] sqlext serve: the setting sqlext.jdbc.showTables is 'tables', which is not 'hive' or "
        "'spark'. Set it to 'hive' or 'spark' (for example --conf sqlext.jdbc.showTables=spark)")
    assert all(is_show_tables_key(k) for k in (SHOW_TABLES, f"set:hiveconf:{SHOW_TABLES}", f"set:hivevar:{SHOW_TABLES}"))
    assert not is_show_tables_key("spark.sql.ansi.enabled")

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


def test_serve_takes_the_setting_for_its_endpoint_and_refuses_a_bad_one_before_spark(tmp_path):
    from sqlext.serve import server_settings, start
    from sqlext.server.hive.settings import SHOW_TABLES

    options = SessionOptions(conf=((SHOW_TABLES, "spark"), ("spark.sql.shuffle.partitions", "3")))
    settings = server_settings(options, 15002, 16)
    assert SHOW_TABLES not in settings and settings["spark.sql.shuffle.partitions"] == "3"  # not Spark's setting
    with pytest.raises(SqlextError, match=r"^\[INVALID_SETTING\] sqlext serve: the setting sqlext.jdbc.showTables"):
        start(tmp_path, SessionOptions(conf=((SHOW_TABLES, "tables"),)), timeout=1.0)
    assert list(tmp_path.iterdir()) == []  # refused before anything started


# -- the ports

def test_the_server_binds_the_default_port_or_the_next_ones_and_a_named_one_alone():
    import socket

    from sqlext.serve import DEFAULT_PORT, PORT_RETRIES, _first_port, server_settings
    from sqlext.server.process import CONNECT_PORT, CONNECT_RETRIES

    with socket.socket() as taker:
        taker.bind(("127.0.0.1", 0))
        taker.listen()
        taken = taker.getsockname()[1]
        with pytest.raises(SqlextError, match=rf"^\[SERVER_NOT_STARTED\] sqlext serve: .*127.0.0.1:{taken} cannot be "
                                               r"listened on .*Give another with --port N"):
            _first_port(taken)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            free = probe.getsockname()[1]
        assert _first_port(free) == (free, 0)
    # the default, with the ports after it should another process take it meanwhile; a free one
    # the system gives where it is taken already
    assert _first_port(None) in {(DEFAULT_PORT, PORT_RETRIES), (0, 0)}
    settings = server_settings(SessionOptions(), DEFAULT_PORT, PORT_RETRIES)
    assert (settings[CONNECT_PORT], settings[CONNECT_RETRIES]) == (str(DEFAULT_PORT), str(PORT_RETRIES))


# -- the server's first statements

def test_the_warm_up_runs_each_of_sqlexts_functions_on_inline_rows():
    """Each function once through sqlext, and each registered table function once as Spark
    calls it, on rows written inline (TABLE(SELECT ...), which every function's rule reads)."""
    from sqlext.functions import catalogue
    from sqlext.server.process import WARM_UP, WARM_UP_TABLE_FUNCTIONS

    for function in catalogue.functions():
        called = (function.called_as or f"{function.name}(").upper()
        assert sum(called in text.upper() for text in WARM_UP) == 1, function.name
        registered = sum(text.upper().startswith(f"SELECT * FROM {function.name}(") for text in WARM_UP_TABLE_FUNCTIONS)
        assert registered == (function.table_function is not None), function.name
    for text in WARM_UP + WARM_UP_TABLE_FUNCTIONS:
        assert not re.search(r"\b(CREATE|INSERT|VIEW)\b|TABLE\((?!SELECT)", text, re.IGNORECASE), text


# -- a project's .gitignore

def test_what_commands_and_the_server_leave_in_a_folder_is_ignored_as_the_docs_advise(tmp_path):
    from sqlext.serve import LOG
    from sqlext.server_state import STATE

    advised = re.search(r"```text\n# \.gitignore\n(.*?)```", (ROOT / "docs" / "command-line.md").read_text(), re.DOTALL)
    assert advised, "docs/command-line.md shows a project's .gitignore"
    assert set(advised.group(1).split()) <= set((ROOT / ".gitignore").read_text().split())  # this clone's too
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text(advised.group(1))
    left = [STATE, LOG, f"{STATE}.ready", f"{STATE}.spec", "metastore_db/x", "spark-warehouse/t/part-0", "derby.log"]
    for name in left:  # as a project's git reads the advised lines
        done = subprocess.run(["git", "check-ignore", "-q", "--no-index", name], cwd=tmp_path, capture_output=True)
        assert done.returncode == 0, name

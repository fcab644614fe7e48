"""The HiveServer2 endpoint (sqlext.server.hive): what JDBC (beeline, the client PySpark
ships), PyHive's DB-API and its SQLAlchemy dialect get from it. Statements run through sqlext
(FK_JOIN, a recursive UNION Spark refuses, a self-join sqlext rewrites) and give the rows
``sqlext.sql`` gives; a wrong token is refused; clients have sessions of their own; a
statement is cancelled; the catalog calls list tables, views, columns and sqlext's functions;
errors carry a SQLSTATE and sqlext's one line."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections import Counter
from contextlib import closing
from pathlib import Path

import pytest
from sqlglot import exp

import sqlext
from sqlext.language.dialect import to_sql
from sqlext.server.hive import start_endpoint

pytestmark = pytest.mark.spark

TOKEN = "t0ken-for-tests"
# names holding a quote, a backtick, braces and spaces: Spark's catalog allows them only for
# temporary views (a table's or database's name is letters, digits and _)
ODD_NAME = "my `t' {1}"
ODD_DB = "no 'such {db}"

SETUP = [
    "CREATE OR REPLACE TEMPORARY VIEW customers_changes AS SELECT * FROM VALUES "
    "(1, 'Ada', 'London', 'insert', 1L), (2, 'Grace', 'NYC', 'insert', 1L), "
    "(1, 'Ada', 'London', 'update_preimage', 3L), (1, 'Ada', 'Paris', 'update_postimage', 3L), "
    "(2, 'Grace', 'NYC', 'delete', 5L) AS t(id, name, city, _change_type, _commit_version)",
    "CREATE OR REPLACE TEMPORARY VIEW orders_changes AS SELECT * FROM VALUES "
    "(100, 1, 25.0D, 2L), (101, 2, 40.0D, 2L), (102, 3, 10.0D, 2L), (101, 1, 40.0D, 4L), "
    "(102, NULL, NULL, 6L) AS t(order_id, customer_id, amount, _commit_version)",
    "CREATE OR REPLACE TEMPORARY VIEW links AS SELECT * FROM VALUES (1, 2), (2, 3), (3, 1), (3, 4) AS t(src, dst)",
    "CREATE OR REPLACE TEMPORARY VIEW clicks AS SELECT * FROM VALUES "
    "(1, 'ann', TIMESTAMP '2026-11-22 09:00:00', 'home'), (2, 'ann', TIMESTAMP '2026-11-22 09:04:00', 'shoes'), "
    "(3, 'ann', TIMESTAMP '2026-11-22 11:00:00', 'cart'), (4, 'bob', TIMESTAMP '2026-11-22 09:01:00', 'home'), "
    "(5, NULL, TIMESTAMP '2026-11-22 09:03:00', 'home') AS t(id, user_name, ts, page)",
]
# each query's first column has a name of its own, to find its rows in beeline's output
QUERIES = {
    "fk_order_id": "SELECT order_id AS fk_order_id, customer_id, amount, name, city, _change_type, _commit_version "
                   "FROM FK_JOIN(left => TABLE(orders_changes), right => TABLE(customers_changes), "
                   "left_key => 'order_id', foreign_key => 'customer_id', right_key => 'id', join_type => 'inner', "
                   "emit => 'changes')",
    "reached": "WITH RECURSIVE reach(node) AS (SELECT 1 UNION SELECT l.dst FROM reach AS r JOIN links AS l "
               "ON r.node = l.src) SELECT node AS reached FROM reach",
    "near_a": "SELECT a.id AS near_a, b.id AS near_b FROM clicks a JOIN clicks b ON a.user_name = b.user_name "
              "AND b.ts BETWEEN a.ts - INTERVAL 10 MINUTES AND a.ts + INTERVAL 10 MINUTES",
}


def _text(value) -> str:
    return "NULL" if value is None else str(value)


@pytest.fixture(scope="module")
def expected(spark):
    """Each query's rows as sqlext.sql gives them, on a session of its own."""
    session = spark.newSession()
    for statement in SETUP:
        sqlext.sql(session, statement)
    found = {name: Counter(tuple(row) for row in sqlext.sql(session, query).collect())
             for name, query in QUERIES.items()}
    assert all(found.values())  # each query has rows to compare
    return found


@pytest.fixture(scope="module")
def endpoint(spark):
    spark.sql("CREATE DATABASE IF NOT EXISTS hs2_db")
    spark.sql("CREATE TABLE IF NOT EXISTS hs2_db.priced (id INT, label STRING, price DECIMAL(10, 2)) USING parquet")
    spark.sql("CREATE TABLE IF NOT EXISTS hs2_items (item_id BIGINT, item_name STRING) USING parquet")
    spark.sql("INSERT OVERWRITE hs2_items VALUES (1, 'pen'), (2, 'ink')")
    served = start_endpoint(spark, token=TOKEN)
    yield served
    served.stop()
    spark.sql("DROP TABLE IF EXISTS hs2_items")
    spark.sql("DROP TABLE IF EXISTS hs2_db.priced")
    spark.sql("DROP DATABASE IF EXISTS hs2_db")


def _connect(endpoint, password=TOKEN, **kwargs):
    from pyhive import hive

    return hive.connect("localhost", port=endpoint.port, username="someone", password=password, auth="CUSTOM",
                        **kwargs)


# -- beeline

def _beeline(endpoint, script: Path, password: str) -> subprocess.CompletedProcess:
    import pyspark

    beeline = os.path.join(os.path.dirname(pyspark.__file__), "bin", "beeline")
    return subprocess.run([beeline, "-u", f"jdbc:hive2://localhost:{endpoint.port}/default", "-n", "someone",
                           "-p", password, "--outputformat=csv2", "--silent=true", "-f", str(script)],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))


def _results(output: str) -> dict[str, Counter]:
    """The rows of each query in beeline's CSV output, by the name of its first column."""
    results, current = {}, None
    for line in output.splitlines():
        # beeline 2.3 prints a line "null" after some statements, the next output on its end
        cells = re.sub(r"^(null *)+", "", line).split(",")
        if cells[0] in QUERIES:
            current = results.setdefault(cells[0], Counter())
        elif current is not None and cells != [""]:
            current[tuple(cells)] += 1
    return results


def test_beeline_runs_statements_through_sqlext_and_a_wrong_token_is_refused(endpoint, expected, tmp_path):
    script = tmp_path / "statements.sql"
    script.write_text("".join(f"{s};\n" for s in [*SETUP, *QUERIES.values()]))
    done = _beeline(endpoint, script, TOKEN)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    results = _results(done.stdout)
    for name, rows in expected.items():
        assert results.get(name) == Counter({tuple(_text(v) for v in row): n for row, n in rows.items()}), name

    refused = _beeline(endpoint, script, "not-the-token")
    assert refused.returncode != 0
    assert "[JDBC_TOKEN_REFUSED]" in refused.stdout + refused.stderr


# -- PyHive

def test_pyhive_gets_the_same_rows_and_the_column_types(endpoint, expected):
    with closing(_connect(endpoint)) as connection, closing(connection.cursor()) as cursor:
        for statement in SETUP:
            cursor.execute(statement)
        for name, query in QUERIES.items():
            cursor.execute(query)
            assert Counter(cursor.fetchall()) == expected[name], name
        cursor.execute(QUERIES["fk_order_id"])
        assert [(d[0], d[1]) for d in cursor.description] == [
            ("fk_order_id", "INT_TYPE"), ("customer_id", "INT_TYPE"), ("amount", "DOUBLE_TYPE"),
            ("name", "STRING_TYPE"), ("city", "STRING_TYPE"), ("_change_type", "STRING_TYPE"),
            ("_commit_version", "BIGINT_TYPE")]


def test_values_of_each_type_travel_in_their_form(endpoint):
    import datetime
    from decimal import Decimal

    with closing(_connect(endpoint)) as connection, closing(connection.cursor()) as cursor:
        cursor.execute("SELECT true AS b, CAST(1 AS TINYINT) AS t, CAST(2 AS SMALLINT) AS s, CAST(1.1 AS FLOAT) AS f, "
                       "CAST(12.5 AS DECIMAL(6, 2)) AS d, DATE '2024-02-29' AS dt, "
                       "TIMESTAMP '2024-01-31 10:00:00.5' AS ts, X'CAFE' AS bin, array(1, 2) AS arr, "
                       "named_struct('a', 1, 'b', CAST(NULL AS STRING)) AS st, INTERVAL '1 02:03:04' DAY TO SECOND AS i, "
                       "CAST(NULL AS BIGINT) AS nothing FROM range(3)")
        rows = cursor.fetchall()
        assert [d[1] for d in cursor.description] == [
            "BOOLEAN_TYPE", "TINYINT_TYPE", "SMALLINT_TYPE", "FLOAT_TYPE", "DECIMAL_TYPE", "DATE_TYPE",
            "TIMESTAMP_TYPE", "BINARY_TYPE", "ARRAY_TYPE", "STRUCT_TYPE", "INTERVAL_DAY_TIME_TYPE", "BIGINT_TYPE"]
        assert rows == [(True, 1, 2, 1.1, Decimal("12.50"), "2024-02-29", datetime.datetime(2024, 1, 31, 10, 0, 0, 500000),
                         b"\xca\xfe", "[1,2]", '{"a":1,"b":null}', "1 02:03:04.000000000", None)] * 3


def test_results_come_in_pages(endpoint):
    with closing(_connect(endpoint)) as connection, closing(connection.cursor(arraysize=7)) as cursor:
        cursor.execute("SELECT id FROM range(100)")
        assert [row[0] for row in cursor.fetchall()] == list(range(100))


def test_a_wrong_token_is_refused_with_its_class(endpoint):
    with pytest.raises(Exception) as refused:
        _connect(endpoint, password="wrong")
    assert "[JDBC_TOKEN_REFUSED]" in str(refused.value)


def test_sqlalchemy_lists_tables_and_columns_and_runs_a_statement(endpoint):
    """PyHive's dialect (Superset's hive://) reads the first column of SHOW TABLES as the names:
    Hive's shape, one column tab_name, is the default. A connection's sqlext.jdbc.showTables=spark
    gives Spark's shape, and a session's SET changes it; a value it cannot take is refused, naming
    the setting, and the session keeps the shape it had."""
    from pyhive import hive
    from pyhive.exc import OperationalError
    from sqlalchemy import create_engine, inspect, text

    engine = create_engine(f"hive://someone:{TOKEN}@localhost:{endpoint.port}/default", connect_args={"auth": "CUSTOM"})
    try:
        inspector = inspect(engine)
        assert "default" in inspector.get_schema_names()
        names = inspector.get_table_names()
        assert "hs2_items" in names and "default" not in names, names
        assert inspector.get_table_names(schema="hs2_db") == ["priced"]
        columns = inspector.get_columns("hs2_items")
        assert [(c["name"], type(c["type"]).__name__) for c in columns] == [("item_id", "BigInteger"), ("item_name", "String")]
        with engine.connect() as connection:
            assert sorted(connection.execute(text("SELECT item_name FROM hs2_items")).scalars()) == ["ink", "pen"]
    finally:
        engine.dispose()

    spark_shape = ["namespace", "tableName", "isTemporary"]
    with closing(hive.connect("localhost", port=endpoint.port, username="u", password=TOKEN, auth="CUSTOM",
                              configuration={"sqlext.jdbc.showTables": "spark"})) as connection:
        cursor = connection.cursor()
        cursor.execute("SHOW TABLES")
        assert [column[0] for column in cursor.description] == spark_shape
        cursor.execute("SET sqlext.jdbc.showTables=hive")
        cursor.execute("SHOW TABLES IN hs2_db")
        assert [column[0] for column in cursor.description] == ["tab_name"] and cursor.fetchall() == [("priced",)]
        with pytest.raises(OperationalError) as refused:
            cursor.execute("SET sqlext.jdbc.showTables=tables")
        status = refused.value.args[0].status
        assert status.errorMessage.startswith("[INVALID_SETTING] sqlext serve: the setting sqlext.jdbc.showTables "
                                              "is 'tables'") and status.sqlState == "22023", status
        cursor.execute("SHOW TABLES IN hs2_db")
        assert [column[0] for column in cursor.description] == ["tab_name"]
    with pytest.raises(Exception, match=r"INVALID_SETTING.*sqlext.jdbc.showTables"):
        hive.connect("localhost", port=endpoint.port, username="u", password=TOKEN, auth="CUSTOM",
                     configuration={"sqlext.jdbc.showTables": "tables"})


def test_two_clients_at_once_each_have_their_own_session(endpoint):
    results, errors = {}, []

    views = {"a": "CREATE OR REPLACE TEMPORARY VIEW mine AS SELECT id AS v FROM range(3)",
             "b": "CREATE OR REPLACE TEMPORARY VIEW mine AS SELECT id * 100 AS v FROM range(3)"}

    def client(name):
        try:
            with closing(_connect(endpoint)) as connection, closing(connection.cursor()) as cursor:
                cursor.execute(views[name])
                time.sleep(0.5)  # both views exist now
                cursor.execute("SELECT v FROM mine")
                results[name] = sorted(row[0] for row in cursor.fetchall())
        except Exception as error:  # noqa: BLE001 - reported by the test
            errors.append(error)

    threads = [threading.Thread(target=client, args=(name,)) for name in views]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert results == {"a": [0, 1, 2], "b": [0, 100, 200]}


def test_a_long_statement_is_cancelled_and_the_session_goes_on(endpoint):
    from pyhive import hive
    from TCLIService.ttypes import TOperationState

    with closing(_connect(endpoint)) as connection, closing(connection.cursor()) as cursor:
        # minutes of work on two cores; Spark's tasks check for a kill between batches of the
        # range (a cross join's inner loop would not, and its cancelled tasks would run on)
        cursor.execute("SELECT sum(id % 7) AS s FROM range(200000000000)", async_=True)
        deadline = time.time() + 60
        while cursor.poll().operationState != TOperationState.RUNNING_STATE and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # its Spark job is running
        started = time.time()
        cursor.cancel()
        while cursor.poll().operationState == TOperationState.RUNNING_STATE and time.time() < deadline:
            time.sleep(0.1)
        assert cursor.poll().operationState == TOperationState.CANCELED_STATE
        with pytest.raises(hive.OperationalError):
            cursor.fetchall()
        cursor.execute("SELECT 41 + 1")
        assert cursor.fetchall() == [(42,)]
        assert time.time() - started < 30


# -- the catalog calls, through PyHive's Thrift client

def _catalog(connection, call: str, **arguments):
    """Call a catalog method on the connection's session; its rows as dicts."""
    from pyhive.hive import _check_status, _unwrap_column
    from TCLIService import ttypes

    request = getattr(ttypes, f"T{call}Req")(sessionHandle=connection.sessionHandle, **arguments)
    response = getattr(connection.client, call)(request)
    _check_status(response)
    handle = response.operationHandle
    schema = connection.client.GetResultSetMetadata(ttypes.TGetResultSetMetadataReq(handle))
    names = [column.columnName for column in schema.schema.columns]
    rows = []
    while True:
        fetched = connection.client.FetchResults(ttypes.TFetchResultsReq(
            operationHandle=handle, orientation=ttypes.TFetchOrientation.FETCH_NEXT, maxRows=1000))
        _check_status(fetched)
        page = list(zip(*[_unwrap_column(column) for column in fetched.results.columns]))
        if not page:
            break
        rows += [dict(zip(names, row)) for row in page]
    connection.client.CloseOperation(ttypes.TCloseOperationReq(handle))
    return names, rows


def test_the_catalog_lists_tables_views_columns_and_sqlexts_functions(endpoint):
    with closing(_connect(endpoint)) as connection, closing(connection.cursor()) as cursor:
        cursor.execute("CREATE OR REPLACE TEMPORARY VIEW hs2_recent AS SELECT 1 AS n")
        names, tables = _catalog(connection, "GetTables", schemaName="%", tableName="hs2%")
        assert names[:5] == ["TABLE_CAT", "TABLE_SCHEM", "TABLE_NAME", "TABLE_TYPE", "REMARKS"]
        found = {(t["TABLE_SCHEM"], t["TABLE_NAME"], t["TABLE_TYPE"]) for t in tables}
        assert {("default", "hs2_items", "TABLE"), (None, "hs2_recent", "VIEW")} <= found
        _, views = _catalog(connection, "GetTables", schemaName="%", tableName="hs2%", tableTypes=["VIEW"])
        assert {t["TABLE_NAME"] for t in views} == {"hs2_recent"}

        names, columns = _catalog(connection, "GetColumns", schemaName="default", tableName="hs2_items")
        assert names[:5] == ["TABLE_CAT", "TABLE_SCHEM", "TABLE_NAME", "COLUMN_NAME", "DATA_TYPE"] and len(names) == 23
        assert [(c["COLUMN_NAME"], c["DATA_TYPE"], c["TYPE_NAME"], c["ORDINAL_POSITION"]) for c in columns] == [
            ("item_id", -5, "BIGINT", 1), ("item_name", 12, "STRING", 2)]

        # getTypeInfo names each type as getColumns does (Spark's names), intervals included
        cursor.execute("CREATE OR REPLACE TEMPORARY VIEW hs2_typed AS SELECT CAST(1 AS TINYINT) AS t, "
                       "CAST(1 AS SMALLINT) AS s, 1 AS i, 1L AS l, CAST(1 AS DECIMAL(5, 1)) AS d, "
                       "INTERVAL '1' DAY AS days, INTERVAL '1-2' YEAR TO MONTH AS months, "
                       "TIMESTAMP_NTZ '2024-01-01 00:00:00' AS ntz")
        _, typed = _catalog(connection, "GetColumns", tableName="hs2_typed")
        _, types = _catalog(connection, "GetTypeInfo")
        codes = {t["TYPE_NAME"]: t["DATA_TYPE"] for t in types}
        assert [(c["TYPE_NAME"], c["DATA_TYPE"]) for c in typed] == [
            ("TINYINT", -6), ("SMALLINT", 5), ("INT", 4), ("BIGINT", -5), ("DECIMAL(5,1)", 3),
            ("INTERVAL DAY", 1111), ("INTERVAL YEAR TO MONTH", 1111), ("TIMESTAMP_NTZ", 93)]
        assert all(codes[c["TYPE_NAME"].partition("(")[0]] == c["DATA_TYPE"] for c in typed), codes

        names, functions = _catalog(connection, "GetFunctions", functionName="%JOIN%")
        assert names == ["FUNCTION_CAT", "FUNCTION_SCHEM", "FUNCTION_NAME", "REMARKS", "FUNCTION_TYPE", "SPECIFIC_NAME"]
        fk_join = [f for f in functions if f["FUNCTION_NAME"] == "FK_JOIN"]
        assert len(fk_join) == 1 and fk_join[0]["REMARKS"] and fk_join[0]["FUNCTION_TYPE"] == 2

        names, keys = _catalog(connection, "GetPrimaryKeys", schemaName="default", tableName="hs2_items")
        assert "KEY_SEQ" in names and keys == []


def _open_session(connection, database: str):
    from TCLIService import ttypes

    return connection.client.OpenSession(ttypes.TOpenSessionReq(
        client_protocol=ttypes.TProtocolVersion.HIVE_CLI_SERVICE_PROTOCOL_V6, configuration={"use:database": database}))


def test_names_with_quotes_backticks_braces_and_spaces(endpoint):
    from TCLIService import ttypes

    odd = exp.Table(this=exp.to_identifier(ODD_NAME, quoted=True))
    with closing(_connect(endpoint)) as connection, closing(connection.cursor()) as cursor:
        cursor.execute(to_sql(exp.Create(this=odd, kind="VIEW", replace=True,
                                         properties=exp.Properties(expressions=[exp.TemporaryProperty()]),
                                         expression=exp.select(exp.alias_(exp.Literal.number(7), "n")))))
        _, tables = _catalog(connection, "GetTables", tableName=ODD_NAME)
        assert [(t["TABLE_NAME"], t["TABLE_TYPE"]) for t in tables] == [(ODD_NAME, "VIEW")]
        _, columns = _catalog(connection, "GetColumns", tableName=ODD_NAME)
        assert [(c["TABLE_NAME"], c["COLUMN_NAME"], c["DATA_TYPE"]) for c in columns] == [(ODD_NAME, "n", 4)]
        _, columns = _catalog(connection, "GetColumns", schemaName="hs2_db", tableName="priced")
        assert [(c["COLUMN_NAME"], c["TYPE_NAME"], c["COLUMN_SIZE"], c["DECIMAL_DIGITS"]) for c in columns] == [
            ("id", "INT", 10, 0), ("label", "STRING", None, None), ("price", "DECIMAL(10,2)", 10, 2)]

        # a second session on the connection, opened in a database (use:database)
        opened = _open_session(connection, "hs2_db")
        assert opened.status.statusCode == ttypes.TStatusCode.SUCCESS_STATUS, opened.status
        run = connection.client.ExecuteStatement(ttypes.TExecuteStatementReq(
            sessionHandle=opened.sessionHandle, statement="SELECT current_database() AS db"))
        fetched = connection.client.FetchResults(ttypes.TFetchResultsReq(
            operationHandle=run.operationHandle, orientation=ttypes.TFetchOrientation.FETCH_NEXT, maxRows=10))
        assert fetched.results.columns[0].stringVal.values == ["hs2_db"]
        connection.client.CloseSession(ttypes.TCloseSessionReq(sessionHandle=opened.sessionHandle))
        # a database name with quotes and backticks is one name, not SQL: not found, named whole
        refused = _open_session(connection, ODD_DB)
        assert refused.status.statusCode == ttypes.TStatusCode.ERROR_STATUS
        assert refused.status.errorMessage.startswith("[SCHEMA_NOT_FOUND]"), refused.status
        assert refused.status.sqlState == "42704"


# -- errors

def test_errors_carry_a_sqlstate_and_sqlexts_one_line(endpoint):
    from pyhive.exc import OperationalError

    with closing(_connect(endpoint)) as connection, closing(connection.cursor()) as cursor:
        with pytest.raises(OperationalError) as syntax:
            cursor.execute("SELEC 1")
        status = syntax.value.args[0].status
        assert status.sqlState == "42601"
        assert status.errorMessage.startswith("[PARSE_SYNTAX_ERROR]") and "\n" not in status.errorMessage
        assert "at org.apache" not in status.errorMessage

        cursor.execute("CREATE OR REPLACE TEMPORARY VIEW acc AS SELECT 1 AS id, 2 AS ref")
        with pytest.raises(OperationalError) as missing:
            cursor.execute("SELECT * FROM FK_JOIN(left => TABLE(acc), right => TABLE(acc), left_key => 'id', "
                           "right_key => 'id')")
        status = missing.value.args[0].status
        assert status.errorMessage.startswith("[MISSING_ARGUMENT] FK_JOIN: ") and status.sqlState == "4274K"

        # an error of a statement run asynchronously: in the operation's status
        cursor.execute("SELECT * FROM no_such_table_here", async_=True)
        deadline = time.time() + 60
        while (reply := cursor.poll()).operationState in (1, 0) and time.time() < deadline:
            time.sleep(0.1)
        assert reply.errorMessage.startswith("[TABLE_OR_VIEW_NOT_FOUND]") and reply.sqlState == "42P01"

        # a text of several statements that does not all parse runs none of them
        with pytest.raises(OperationalError):
            cursor.execute("CREATE OR REPLACE TEMPORARY VIEW never AS SELECT 1; SELEC 2")
        cursor.execute("SHOW VIEWS LIKE 'never'")
        assert cursor.fetchall() == []


def test_without_a_token_any_password_and_clients_without_sasl_are_taken(spark):
    from pyhive import hive

    open_endpoint = start_endpoint(spark)  # token=None: no password check, on purpose
    try:
        for connect in (lambda: hive.connect("localhost", port=open_endpoint.port, auth="NOSASL"),
                        lambda: hive.connect("localhost", port=open_endpoint.port, username="u", password="anything",
                                             auth="CUSTOM")):
            with closing(connect()) as connection, closing(connection.cursor()) as cursor:
                cursor.execute("SELECT 'open' AS door")
                assert cursor.fetchall() == [("open",)]
    finally:
        open_endpoint.stop()
    with pytest.raises(Exception):  # stopped: nothing listens any more
        hive.connect("localhost", port=open_endpoint.port, auth="NOSASL")

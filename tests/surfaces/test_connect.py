"""sqlext on a Spark Connect (remote) session: install, sqlext.sql with FK_JOIN and the
self-join rewrite, plain spark.sql with the registered CHANGELOG_FILTER, and sqlext build.

The test process already has a classic session (the session fixture), and PySpark refuses
``remote("local")`` next to one, so the Connect server is started on that session's
SparkContext (what Spark's Connect plugin does at startup) on a free port, and the client
connects to ``sc://localhost:PORT``. If the server cannot start, the tests are skipped
with the reason.
"""

import os
import socket
from pathlib import Path

import pytest

import sqlext
from sqlext.session import SparkRelations
from rows import multiset, ordered
from sqlext.statements import split_statements

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def fk_on_classic(spark):
    """The FK_JOIN example's first result on the classic session, before Connect mode is on."""
    return _first_result(spark, ROOT / "sql_examples" / "fk_join.sql")


@pytest.fixture(scope="module")
def remote(spark, fk_on_classic):  # fk_on_classic is computed before Connect mode is on
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.utils import check_dependencies

    check_dependencies()  # the client's packages are dev dependencies: missing ones fail here
    port = _free_port()
    context = spark.sparkContext
    service = context._jvm.org.apache.spark.sql.connect.service.SparkConnectService
    try:
        context._conf.set("spark.connect.grpc.binding.port", str(port))
        service.start(context._jsc.sc())
    except Exception as error:  # noqa: BLE001 - a server that cannot start means: skip, saying why
        reason = f"the Spark Connect server cannot start here: {type(error).__name__}: {str(error)[:300]}"
        print(reason)
        pytest.skip(reason)
    # Creating a Connect session switches the whole process to Connect mode (PySpark sets
    # SPARK_CONNECT_MODE_ENABLED), after which pyspark.sql functions dispatch to Connect; the
    # classic session of the other test modules needs it off again afterwards.
    mode_before = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    session = SparkSession.builder.remote(f"sc://localhost:{port}").create()
    yield session
    session.stop()
    service.stop(getattr(service, "stop$default$1")(), getattr(service, "stop$default$2")())
    if mode_before is None:
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
    else:
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = mode_before


def test_remote_session_is_a_connect_session(remote):
    assert type(remote).__module__ == "pyspark.sql.connect.session"
    assert sqlext.install(remote) is remote


def _first_result(session, path: Path) -> list[tuple]:
    """The first query result of an example file, its statements run through sqlext."""
    for statement in split_statements(path.read_text()):
        frame = sqlext.sql(session, statement.text)
        if frame.columns:
            return ordered(frame.collect())
    raise AssertionError(f"{path} has no query")


def test_fk_join_runs_rewritten_on_connect_as_on_classic(fk_on_classic, remote):
    example = ROOT / "sql_examples" / "fk_join.sql"  # its first query: FK_JOIN changes
    on_connect = _first_result(remote, example)
    assert on_connect and on_connect == fk_on_classic


def test_self_join_rewrite_on_connect_returns_the_original_rows(remote):
    example = ROOT / "sql_examples" / "self_join.sql"
    statements = split_statements(example.read_text())
    sqlext.sql(remote, statements[0].text)  # the clicks view, on the remote session
    query = statements[1].text
    [explained] = sqlext.explain(query, spark=remote)
    assert explained.changed  # the session told the rules the columns and types
    rewritten = multiset(sqlext.sql(remote, query).collect())
    assert rewritten and rewritten == multiset(remote.sql(query).collect())


def test_registered_table_function_runs_through_plain_spark_sql(remote):
    remote.sql("CREATE OR REPLACE TEMP VIEW c_changes AS SELECT * FROM VALUES "
               "(1, 5, 1L), (1, -1, 2L), (2, 3, 2L) AS c_changes(id, v, _commit_version)")
    rows = remote.sql("SELECT id, _change_type, _commit_version FROM CHANGELOG_FILTER("
                      "input => TABLE(c_changes), key => 'id', predicate => 'v > 0') "
                      "ORDER BY _commit_version, id").collect()
    assert ordered(rows) == [(1, "insert", 1), (1, "delete", 2), (2, "insert", 2)]


def test_relations_on_connect_have_columns_but_no_size_estimate(remote):
    relations = SparkRelations(remote)
    assert relations.columns("SELECT 1 AS a, 'x' AS b", None) == ["a", "b"]
    assert relations.expression_type("SELECT 1 AS a", "a > 0") == "boolean"
    assert relations.size_in_bytes("SELECT 1 AS a") is None  # no _jdf on Connect


def test_models_build_on_connect(remote, tmp_path):
    from sqlext.models import build

    results = build(remote, ROOT / "tests" / "dbt_project", tmp_path, out=lambda line: None)
    assert [(r.name, r.status) for r in results] == [("accounts_changes", "OK"), ("accounts_in_credit", "OK")]
    assert remote.table("accounts_in_credit").count() == results[1].rows == 3


def test_sqlexts_error_raised_on_the_server_is_sqlexts_on_the_client(remote):
    """The client's one handler of the server's errors is hooked as PySpark's classic
    conversion is: sqlext's error, from the client's Spark error and of its class too."""
    from pyspark.errors.exceptions import connect

    from sqlext.errors import SqlextError

    sqlext.install(remote)
    remote.sql("CREATE OR REPLACE TEMP VIEW c_tied AS SELECT * FROM VALUES "
               "(1, 5, 'insert', 1L), (1, 6, 'update_postimage', 1L) AS c_tied(id, v, _change_type, _commit_version)")
    query = "SELECT * FROM CHANGELOG_FILTER(input => TABLE(c_tied), key => 'id', predicate => 'v > 0') ORDER BY id"
    cases = [(lambda: sqlext.sql(remote, query).collect(), connect.SparkRuntimeException, "USER_RAISED_EXCEPTION"),
             (lambda: sqlext.sql(remote, query).toArrow(), connect.SparkRuntimeException, "USER_RAISED_EXCEPTION"),
             # the registered table function, in a Python worker of the server (the client's
             # PythonException has no condition)
             (lambda: remote.sql(query).collect(), connect.PythonException, None)]
    for action, spark_class, condition in cases:
        with pytest.raises(SqlextError) as raised:
            action()
        error = raised.value
        assert error.error_class == "AMBIGUOUS_ORDER" and str(error).startswith("[AMBIGUOUS_ORDER] CHANGELOG_FILTER:")
        assert type(error.__cause__) is spark_class and isinstance(error, spark_class)
        assert error.getCondition() == error.__cause__.getCondition()
        assert condition is None or error.getCondition() == condition
    # Spark's own error stays the client's, unchanged
    with pytest.raises(connect.AnalysisException) as raised:
        sqlext.sql(remote, query.replace("SELECT *", "SELECT nope")).collect()
    assert not isinstance(raised.value, SqlextError)

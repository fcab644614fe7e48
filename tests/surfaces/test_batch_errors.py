"""What a batch query that a new user writes gets instead of Spark's routine-resolution errors:
``STREAM(...)`` outside an incremental run says where it runs and how to run the statement in
batch; a misspelt sqlext function names the one meant. And what any action on its DataFrame
raises where sqlext's error is raised inside Spark (a rewrite's check in Spark's tasks, a table
function in a Python worker): ``SqlextError``, from Spark's error and still of its class, while
Spark's own errors stay exactly Spark's."""

from __future__ import annotations

import pytest

import sqlext
from sqlext.cli import main
from sqlext.errors import SqlextError

STREAMED = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(clicks_feed)), key => 'id', "
            "predicate => 'v > 0') ORDER BY id")


@pytest.fixture
def clicks_feed(view):
    return view("clicks_feed", [(1, 5, 1), (2, -1, 1)], "id BIGINT, v BIGINT, _commit_version BIGINT")


def test_stream_in_a_batch_query_says_where_it_runs_and_how_to_run_it_in_batch(spark, clicks_feed):
    for statement in (STREAMED, "SELECT id FROM STREAM(clicks_feed) AS c WHERE c.v > 0 ORDER BY id"):
        with pytest.raises(SqlextError) as raised:
            sqlext.sql(spark, statement)
        assert raised.value.error_class == "STREAM_IN_BATCH_QUERY"
    # the statement it offers runs in batch, over the whole feed
    assert [r.id for r in sqlext.sql(spark, raised.value.params["batch"]).collect()] == [1]


def test_stream_in_a_file_run_in_batch_is_the_same_error(spark, clicks_feed, tmp_path, capsys):
    query = tmp_path / "q.sql"
    query.write_text("SELECT 1 AS first;\nSELECT * FROM STREAM(clicks_feed);\n")
    assert main(["run", str(query)]) == 1
    assert f"{query}:2:1: [STREAM_IN_BATCH_QUERY] sqlext run:" in capsys.readouterr().err


@pytest.mark.parametrize("call, meant", [
    ("CHANGELOG_FILTR(input => TABLE(clicks_feed), key => 'id', predicate => 'v > 0')", "CHANGELOG_FILTER"),
    ("fk_jion(left => TABLE(clicks_feed), right => TABLE(clicks_feed), left_key => 'id', foreign_key => 'v', "
     "right_key => 'id')", "FK_JOIN"),
])
def test_a_misspelt_function_names_the_sqlext_function_meant(spark, clicks_feed, call, meant):
    with pytest.raises(SqlextError) as raised:
        sqlext.sql(spark, f"SELECT * FROM {call}")
    assert raised.value.error_class == "UNKNOWN_FUNCTION" and raised.value.params["nearest"] == meant


def test_a_function_unlike_any_of_sqlexts_keeps_sparks_error(spark):
    from pyspark.errors import PySparkException

    with pytest.raises(PySparkException) as raised:
        sqlext.sql(spark, "SELECT * FROM no_such_generator(3)")
    assert raised.value.getCondition() == "UNRESOLVABLE_TABLE_VALUED_FUNCTION"


# -- sqlext's errors raised inside Spark, whichever action runs the query

TIED = "id INT, v INT, _change_type STRING, _commit_version BIGINT"
TIED_CALL = "CHANGELOG_FILTER(input => TABLE(tied), key => 'id', predicate => 'v > 0')"
# ordered, so that take(1) and first() read every row too
TIED_QUERY = "SELECT * FROM " + TIED_CALL + " ORDER BY id"


@pytest.fixture
def tied(view):
    """Two changes of one key at one version: AMBIGUOUS_ORDER when the query runs."""
    return view("tied", [(1, 5, "insert", 1), (1, 6, "update_postimage", 1)], TIED)


def _write_table(spark, frame, name):
    spark.sql("DROP TABLE IF EXISTS " + name)
    spark.sql("CREATE TABLE " + name + " (" + TIED + ") USING parquet")
    try:
        frame.write.insertInto(name)
    finally:
        spark.sql("DROP TABLE IF EXISTS " + name)


def _save_as_table(spark, frame, name):
    try:
        frame.write.mode("overwrite").saveAsTable(name)
    finally:
        spark.sql("DROP TABLE IF EXISTS " + name)


def _read_through_view(spark, frame, name):
    frame.createOrReplaceTempView(name)
    try:
        spark.table(name).collect()
    finally:
        spark.catalog.dropTempView(name)


def _arrow_pandas(spark, frame):
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    try:
        frame.toPandas()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.pyspark.enabled")


ACTIONS = {
    "collect": lambda spark, frame, tmp_path: frame.collect(),
    "count": lambda spark, frame, tmp_path: frame.count(),
    "show": lambda spark, frame, tmp_path: frame.show(),
    "toPandas": lambda spark, frame, tmp_path: frame.toPandas(),
    "toPandas over Arrow": lambda spark, frame, tmp_path: _arrow_pandas(spark, frame),
    "toArrow": lambda spark, frame, tmp_path: frame.toArrow(),
    "take": lambda spark, frame, tmp_path: frame.take(1),
    "first": lambda spark, frame, tmp_path: frame.first(),
    "head": lambda spark, frame, tmp_path: frame.head(2),
    "toLocalIterator": lambda spark, frame, tmp_path: list(frame.toLocalIterator()),
    "write.save": lambda spark, frame, tmp_path: frame.write.format("parquet").save(str(tmp_path / "out")),
    "write.saveAsTable": lambda spark, frame, tmp_path: _save_as_table(spark, frame, "sx_tied_saved"),
    "write.insertInto": lambda spark, frame, tmp_path: _write_table(spark, frame, "sx_tied_inserted"),
    "spark.table": lambda spark, frame, tmp_path: _read_through_view(spark, frame, "sx_tied_view"),
}


def assert_sqlexts_from_sparks(error, spark_class, condition):
    """``error`` is sqlext's AMBIGUOUS_ORDER, raised from Spark's error of ``spark_class`` (not
    sqlext's), whose class it has too, and answers Spark's methods as that error does."""
    from pyspark.errors import PySparkException

    assert isinstance(error, SqlextError) and error.error_class == "AMBIGUOUS_ORDER"
    assert str(error).startswith("[AMBIGUOUS_ORDER] CHANGELOG_FILTER: two changes of key id=1 share")
    assert "JVM stacktrace" not in str(error) and "Traceback" not in str(error)
    cause = error.__cause__
    assert type(cause) is spark_class and not isinstance(cause, SqlextError)
    assert isinstance(error, spark_class) and isinstance(error, PySparkException)
    assert error.getCondition() == cause.getCondition() == condition
    assert error.getMessageParameters() == cause.getMessageParameters()


@pytest.mark.parametrize("action", list(ACTIONS))
def test_any_action_on_a_rewritten_query_raises_sqlexts_error(spark, tied, tmp_path, action):
    from pyspark.errors.exceptions.captured import SparkRuntimeException

    frame = sqlext.sql(spark, TIED_QUERY)  # the rewrite: the check is Spark's raise_error
    with pytest.raises(SqlextError) as raised:
        ACTIONS[action](spark, frame, tmp_path)
    assert_sqlexts_from_sparks(raised.value, SparkRuntimeException, "USER_RAISED_EXCEPTION")


@pytest.mark.parametrize("action", ["collect", "toArrow", "take", "write.save"])
def test_the_table_function_in_plain_spark_sql_raises_sqlexts_error(spark, tied, tmp_path, action):
    """Plain spark.sql on a session sqlext is installed on runs the registered Python table
    function: its error comes from a Python worker."""
    from pyspark.errors.exceptions.captured import PythonException

    with pytest.raises(SqlextError) as raised:
        ACTIONS[action](spark, spark.sql(TIED_QUERY), tmp_path)
    assert_sqlexts_from_sparks(raised.value, PythonException, "PYTHON_EXCEPTION")


def test_code_that_catches_sparks_class_still_catches_it(spark, tied):
    from pyspark.errors import SparkRuntimeException

    with pytest.raises(SparkRuntimeException) as raised:
        sqlext.sql(spark, TIED_QUERY).collect()
    assert raised.value.getCondition() == "USER_RAISED_EXCEPTION" and raised.value.error_class == "AMBIGUOUS_ORDER"


@pytest.mark.parametrize("statement, spark_class, condition", [
    # an analysis error: the plan Spark prints holds the rewrite's own checks
    ("SELECT nope FROM " + TIED_CALL, "AnalysisException", "UNRESOLVED_COLUMN.WITH_SUGGESTION"),
    ("SELECT raise_error('boom')", "SparkRuntimeException", "USER_RAISED_EXCEPTION"),
    # text in sqlext's form, with a class sqlext does not have
    ("SELECT raise_error('[NOT_SQLEXTS] CHANGELOG_FILTER: two changes')", "SparkRuntimeException",
     "USER_RAISED_EXCEPTION"),
    ("SELECT 1 / 0", "ArithmeticException", "DIVIDE_BY_ZERO"),
])
def test_sparks_own_errors_pass_unchanged(spark, tied, statement, spark_class, condition):
    from pyspark.errors.exceptions import captured

    with pytest.raises(Exception) as raised:
        sqlext.sql(spark, statement).collect()
    error = raised.value
    assert type(error) is getattr(captured, spark_class) and not isinstance(error, SqlextError)
    assert error.getCondition() == condition
    assert error.__cause__ is None and error.__suppress_context__  # as PySpark raises it


def _hook_layers(function) -> int:
    """How many of sqlext's error hooks wrap ``function``."""
    layers = 0
    while function is not None:
        layers += bool(getattr(function, "__sqlext_error_hook__", False))
        function = getattr(function, "__wrapped__", None)
    return layers


def test_installing_again_hooks_once_and_a_new_session_keeps_the_hook(spark, tied):
    import py4j.java_gateway
    from pyspark.errors.exceptions import captured
    from pyspark.sql.pandas import conversion

    def hooked():
        return [_hook_layers(f) for f in (py4j.java_gateway.get_return_value, captured.capture_sql_exception,
                                          captured.unwrap_spark_exception, conversion.unwrap_spark_exception)]

    sqlext.install(spark)
    sqlext.install(spark)
    assert hooked() == [1, 1, 1, 1]
    # what PySpark does for each session it makes: wrap py4j's function anew
    captured.install_exception_handler()
    assert hooked() == [1, 1, 1, 1]
    with pytest.raises(SqlextError) as raised:
        sqlext.sql(spark, TIED_QUERY).collect()
    assert raised.value.error_class == "AMBIGUOUS_ORDER"

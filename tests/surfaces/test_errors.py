import pytest

from sqlext.errors import MESSAGES, SqlextError, find_in


def test_message_names_class_function_value_and_fix():
    error = SqlextError("CHANGELOG_MISSING_COLUMN", function="CHANGELOG_FILTER", side="input",
                        column="_commit_version", columns=["id", "v"],
                        fix="Name the ordering column with order_by => '...'.")
    text = str(error)
    assert text.startswith("[CHANGELOG_MISSING_COLUMN] CHANGELOG_FILTER: ")
    assert "'_commit_version'" in text and "['id', 'v']" in text and "order_by =>" in text
    assert error.error_class == "CHANGELOG_MISSING_COLUMN"


def test_unknown_class_is_a_programming_error():
    with pytest.raises(KeyError):
        SqlextError("NO_SUCH_CLASS")


def test_find_in_recovers_our_error_from_spark_text():
    spark_text = ("An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
                  '  File "udfs/changelog_filter.py", line 116, in eval\n    raise SqlextError(\n'
                  "sqlext.errors.SqlextError: [AMBIGUOUS_ORDER] CHANGELOG_FILTER: two changes of key id=1 "
                  "share _commit_version = 3, so their order is unknown. SQLSTATE: P0001")
    found = find_in(RuntimeError(spark_text))
    assert found.error_class == "AMBIGUOUS_ORDER"
    assert str(found).startswith("[AMBIGUOUS_ORDER] CHANGELOG_FILTER: two changes")
    assert "SQLSTATE" not in str(found)


def test_find_in_ignores_other_errors():
    assert find_in(RuntimeError("[TABLE_OR_VIEW_NOT_FOUND] The table or view `x` cannot be found.")) is None


def test_every_message_has_a_fix_or_context():
    for cls, template in MESSAGES.items():
        assert template.startswith("{function}: "), cls


def test_carried_by_is_sqlexts_error_and_still_of_sparks_class():
    """What the Python API raises for a Spark error that carries sqlext's: both classes, Spark's
    state kept for Spark's methods, sqlext's message as its text."""
    import pickle

    from pyspark.errors.exceptions.base import AnalysisException, PySparkException, SparkRuntimeException

    from sqlext.errors import SqlextSparkError, carried_by

    spark = SparkRuntimeException(message="[AMBIGUOUS_ORDER] CHANGELOG_FILTER: two changes of key id=1 share "
                                          "_commit_version = 1, so their order is unknown. SQLSTATE: P0001")
    ours = carried_by(spark)
    assert isinstance(ours, SqlextError) and isinstance(ours, SparkRuntimeException)
    assert ours.error_class == "AMBIGUOUS_ORDER" and ours.function == "CHANGELOG_FILTER"
    assert str(ours).startswith("[AMBIGUOUS_ORDER] CHANGELOG_FILTER: two changes") and "SQLSTATE" not in str(ours)
    assert ours.getMessage() == spark.getMessage() and ours.cause is spark
    # one class per Spark class
    assert type(carried_by(SparkRuntimeException(message=str(spark)))) is type(ours)
    # no process but this one has Spark's side: a copy is sqlext's alone
    copy = pickle.loads(pickle.dumps(ours))
    assert type(copy) is SqlextSparkError and copy.error_class == "AMBIGUOUS_ORDER" and str(copy) == str(ours)
    # Spark's own errors, and sqlext's, are not replaced
    plan = ("[UNRESOLVED_COLUMN.WITH_SUGGESTION] `nope` cannot be resolved.;\n'Project [raise_error("
            "'[AMBIGUOUS_ORDER] CHANGELOG_FILTER: two changes ...')]")
    assert carried_by(AnalysisException(message=plan)) is None
    assert carried_by(PySparkException(message="[NOT_SQLEXTS] X: y")) is None
    assert carried_by(ours) is None


# Spark Connect's errors as the client builds them from a server's reply (texts as a server
# sends them: the plan, the SQL fragment, and the JVM's stack trace the client shows when the
# server's settings ask for it)
_CONNECT_TRACE = ("org.apache.spark.sql.AnalysisException\n\tat org.apache.spark.sql.errors."
                  "QueryCompilationErrors$.dataPathNotExistError(QueryCompilationErrors.scala:1952)")
_CONNECT_ERRORS = [
    ("AnalysisException", "TABLE_OR_VIEW_NOT_FOUND",
     "[TABLE_OR_VIEW_NOT_FOUND] The table or view `nope` cannot be found.\nSearch path: [`spark_catalog`.`default`]. "
     "SQLSTATE: 42P01; line 1 pos 14;\n'Project [*]\n+- 'UnresolvedRelation [nope], [], false\n",
     "[TABLE_OR_VIEW_NOT_FOUND] The table or view `nope` cannot be found. Search path: [`spark_catalog`.`default`]. "
     "SQLSTATE: 42P01; line 1 pos 14"),
    ("AnalysisException", "PATH_NOT_FOUND", "[PATH_NOT_FOUND] Path does not exist: file:/nonexist. SQLSTATE: 42K03",
     "[PATH_NOT_FOUND] Path does not exist: file:/nonexist. SQLSTATE: 42K03"),
    ("ParseException", "PARSE_SYNTAX_ERROR",
     "\n[PARSE_SYNTAX_ERROR] Syntax error at or near '='. SQLSTATE: 42601 (line 1, pos 27)\n\n== SQL ==\n"
     "SELECT * FROM t WHERE id = = 1\n---------------------------^^^\n",
     "[PARSE_SYNTAX_ERROR] Syntax error at or near '='. SQLSTATE: 42601; line 1 pos 27"),
    ("ArithmeticException", "DIVIDE_BY_ZERO",
     "[DIVIDE_BY_ZERO] Division by zero. SQLSTATE: 22012\n== SQL (line 1, position 8) ==\nSELECT 1/0\n       ^^^\n",
     "[DIVIDE_BY_ZERO] Division by zero. SQLSTATE: 22012; line 1 pos 8"),
]


@pytest.mark.parametrize("kind, condition, message, line", _CONNECT_ERRORS, ids=[e[1] for e in _CONNECT_ERRORS])
def test_a_spark_connect_error_is_one_line_as_a_classic_one_whatever_the_server_sends(kind, condition, message, line):
    """Attached to a server, Spark's error reads as it does on Spark of the command's own: its
    class and message on one line, without the plan, the SQL fragment or the JVM's stack trace
    (which the client adds to the message when the server's settings ask for it)."""
    from pyspark.errors.exceptions import connect

    from sqlext.errors import spark_error_summary
    from sqlext.runner import error_message, jvm_stack_trace

    error = getattr(connect, kind)(message, errorClass=condition, messageParameters={}, server_stacktrace=_CONNECT_TRACE,
                                   display_server_stacktrace=True)
    assert "JVM stacktrace" in str(error)  # what PySpark shows
    assert spark_error_summary(error) == line
    assert error_message(error, "sqlext run") == line
    assert jvm_stack_trace(error) == _CONNECT_TRACE  # what SQLEXT_DEBUG=1 adds

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

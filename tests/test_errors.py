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

"""Bad input to FK_JOIN: one error class each, before or while the query runs."""

import pytest

import sqlext
from sqlext.errors import find_in

LEFT = "id STRING, fk BIGINT, note STRING, _commit_version BIGINT"
RIGHT = "rid BIGINT, name STRING, _commit_version BIGINT"


@pytest.fixture
def inputs(view):
    view("el", [("a", 1, "n", 1), ("b", 2, "n", 2)], LEFT)
    view("er", [(1, "x", 1), (2, "y", 3)], RIGHT)


GOOD = {"left": "TABLE(el)", "right": "TABLE(er)", "left_key": "'id'", "foreign_key": "'fk'",
        "right_key": "'rid'"}


def error_class(spark, **change):
    args = {**GOOD, **change}
    args = {k: v for k, v in args.items() if v is not None}
    query = "SELECT * FROM FK_JOIN(" + ", ".join(f"{k} => {v}" for k, v in args.items()) + ")"
    with pytest.raises(Exception) as caught:
        sqlext.sql(spark, query).collect()
    found = find_in(caught.value)
    assert found is not None, repr(caught.value)[:400]
    return found.error_class


@pytest.mark.parametrize("change, expected", [
    ({"left_key": "'order_id'"}, "CHANGELOG_MISSING_COLUMN"),
    ({"right_key": "'id'"}, "CHANGELOG_MISSING_COLUMN"),
    ({"order_by": "'version'"}, "CHANGELOG_MISSING_COLUMN"),
    ({"foreign_key": "'customer'"}, "CHANGELOG_MISSING_COLUMN"),
    ({"foreign_key": "'fk +'"}, "INVALID_SQL_EXPRESSION"),
    ({"foreign_key": "'fk) UNION SELECT 1 --'"}, "INVALID_SQL_EXPRESSION"),
    ({"foreign_key": "'note'"}, "EXPRESSION_TYPE_MISMATCH"),
    ({"foreign_key": "'fk > 0'"}, "EXPRESSION_TYPE_MISMATCH"),
    ({"join_type": "'full'"}, "INVALID_OPTION_VALUE"),
    ({"emit": "'all'"}, "INVALID_OPTION_VALUE"),
    ({"right_key": None}, "MISSING_ARGUMENT"),
    ({"right": None}, "MISSING_ARGUMENT"),
    ({"right": "'er'"}, "INVALID_ARGUMENT_TYPE"),
    ({"on": "'x'"}, "UNKNOWN_ARGUMENT"),
])
def test_bad_arguments(spark, inputs, change, expected):
    assert error_class(spark, **change) == expected


def test_duplicated_right_key_at_one_version(spark, view):
    view("el", [("a", 1, "n", 1)], LEFT)
    view("er", [(1, "x", 1), (1, "y", 1)], RIGHT)
    assert error_class(spark) == "AMBIGUOUS_ORDER"


def test_left_ties_in_order(spark, view):
    view("el", [("a", 1, "n", 1), ("a", 2, "m", 1)], LEFT)
    view("er", [(1, "x", 1)], RIGHT)
    assert error_class(spark) == "AMBIGUOUS_ORDER"


def test_null_order_value(spark, view):
    view("el", [("a", 1, "n", None)], LEFT)
    view("er", [(1, "x", 1)], RIGHT)
    assert error_class(spark) == "NULL_ORDER_VALUE"


def test_sequence_by_ignores_stale_changes_on_either_side(spark, view):
    left = "id STRING, fk BIGINT, ts BIGINT, _commit_version BIGINT"
    right = "rid BIGINT, name STRING, ts BIGINT, _commit_version BIGINT"
    view("sl", [("a", 1, 10, 1), ("a", 2, 5, 2)], left)          # the fk change to 2 is stale
    view("sr", [(1, "x", 10, 1), (1, "y", 4, 3), (2, "z", 1, 1)], right)  # the rename to y is stale
    rows = sqlext.sql(spark, "SELECT * FROM FK_JOIN(left => TABLE(sl), right => TABLE(sr), left_key => 'id', "
                             "foreign_key => 'fk', right_key => 'rid', sequence_by => 'ts', emit => 'records')"
                      ).collect()
    assert [(r.id, r.fk, r.name, r._change_type, r._commit_version) for r in rows] == [("a", 1, "x", "upsert", 1)]

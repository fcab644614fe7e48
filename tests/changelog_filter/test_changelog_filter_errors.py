"""Bad input to CHANGELOG_FILTER: each problem has its own error class, through both the
native rewrite (sqlext.sql) and the registered table function (plain spark.sql)."""

import pytest

import sqlext
from sqlext.errors import SqlextError, find_in

ROWS = [(1, 10, "insert", 1), (1, 20, "update_postimage", 2), (2, -3, "insert", 2)]
SCHEMA = "id BIGINT, balance BIGINT, _change_type STRING, _commit_version BIGINT"


def error_class(run, query):
    with pytest.raises(Exception) as caught:
        run(query)
    found = find_in(caught.value)
    assert found is not None, f"not a sqlext error: {caught.value!r}"[:500]
    assert "\tat org.apache" not in str(found)
    return found.error_class


@pytest.fixture(params=["native", "udtf"])
def run(request, spark):
    if request.param == "native":
        return lambda q: sqlext.sql(spark, q).collect()
    return lambda q: spark.sql(q).collect()


@pytest.fixture
def accounts(view):
    return view("accounts", ROWS, SCHEMA)


def call(**args):
    text = ", ".join(f"{k} => {v}" for k, v in args.items())
    return f"SELECT * FROM CHANGELOG_FILTER({text})"


GOOD = {"input": "TABLE(accounts)", "key": "'id'", "predicate": "'balance >= 0'"}

BAD = {
    "key column missing": ({"key": "'account'"}, "CHANGELOG_MISSING_COLUMN"),
    "order column missing": ({"order_by": "'version'"}, "CHANGELOG_MISSING_COLUMN"),
    "predicate column missing": ({"predicate": "'amount > 0'"}, "CHANGELOG_MISSING_COLUMN"),
    "predicate does not parse": ({"predicate": "'balance >='"}, "INVALID_SQL_EXPRESSION"),
    "predicate smuggles a statement": (
        {"predicate": "'1=1) UNION SELECT * FROM secrets --'"}, "INVALID_SQL_EXPRESSION"),
    "predicate with a subquery": (
        {"predicate": "'balance IN (SELECT 1)'"}, "INVALID_SQL_EXPRESSION"),
    "unknown emit": ({"emit": "'everything'"}, "INVALID_OPTION_VALUE"),
    "non-boolean predicate": ({"predicate": "'balance + 1'"}, "EXPRESSION_TYPE_MISMATCH"),
    "unknown argument": ({"filter": "'x'"}, "UNKNOWN_ARGUMENT"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_arguments(case, run, accounts):
    change, expected = BAD[case]
    assert error_class(run, call(**{**GOOD, **change})) == expected


def test_missing_argument(run, accounts):
    assert error_class(run, call(input="TABLE(accounts)", key="'id'")) == "MISSING_ARGUMENT"


@pytest.mark.parametrize("rows, expected", [
    ([(1, 10, "insert", 1), (1, 20, "update_postimage", 1)], "AMBIGUOUS_ORDER"),
    # a delete and an insert at one version are the one pair that is not a tie; more, or others, are
    ([(1, 10, "delete", 1), (1, 10, "delete", 1), (1, 20, "insert", 1)], "AMBIGUOUS_ORDER"),
    ([(1, 10, "delete", 1), (1, 20, "insert", 1), (1, 30, "insert", 1)], "AMBIGUOUS_ORDER"),
    ([(1, 10, "insert", 1), (1, 10, "delete", 2), (1, 20, "update_postimage", 2)], "AMBIGUOUS_ORDER"),
    ([(1, 10, "insert", None)], "NULL_ORDER_VALUE"),
    ([(1, 10, "upsert", 1)], "UNKNOWN_CHANGE_TYPE"),
])
def test_bad_data(rows, expected, run, view):
    view("accounts", rows, SCHEMA)
    assert error_class(run, call(**GOOD)) == expected


def test_pre_and_post_image_of_one_version_are_not_a_tie(run, view):
    view("accounts", [(1, 10, "insert", 1), (1, 10, "update_preimage", 2), (1, 20, "update_postimage", 2)], SCHEMA)
    assert len(run(call(**GOOD))) == 3  # insert, then the pre/post pair


def test_a_delete_and_an_insert_of_one_version_are_the_delete_then_the_insert(run, view):
    """As Delta's protocol orders a commit's removed rows before its added ones, whichever row
    comes first in the input: the key's row goes from 10 to 20 at version 2, one update."""
    view("accounts", [(1, 10, "insert", 1), (1, 20, "insert", 2), (1, 10, "delete", 2), (2, 5, "delete", 2),
                      (2, 5, "insert", 1), (2, 5, "insert", 2)], SCHEMA)
    got = sorted((r.id, r.balance, r._change_type, r._commit_version) for r in run(call(**GOOD)))
    assert got == [(1, 10, "insert", 1), (1, 10, "update_preimage", 2), (1, 20, "update_postimage", 2),
                   (2, 5, "insert", 1)]  # key 2's row is rewritten as it was: no change


def test_a_tombstone_and_a_value_of_an_upsert_log_at_one_version_are_a_tie(run, view):
    """The pair is a rule of change feeds' delete and insert; an upsert log has no commits to
    order its rows by."""
    view("accounts", [(1, 10, 1), (1, None, 2), (1, 20, 2)], "id BIGINT, balance BIGINT, _commit_version BIGINT")
    assert error_class(run, call(**GOOD)) == "AMBIGUOUS_ORDER"


def test_null_sequence_value(run, view):
    view("accounts", [(1, 10, None, 1)], "id BIGINT, balance BIGINT, ts BIGINT, _commit_version BIGINT")
    assert error_class(run, call(**GOOD, sequence_by="'ts'")) == "NULL_SEQUENCE_VALUE"


def test_partition_clause_that_disagrees_with_key(spark, accounts):
    query = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(accounts) PARTITION BY balance, "
             "key => 'id', predicate => 'balance >= 0')")
    with pytest.raises(SqlextError) as caught:
        sqlext.sql(spark, query)
    assert caught.value.error_class == "CONFLICTING_PARTITIONING"


def test_partition_clause_supplies_key_and_order(spark, accounts):
    clause = sqlext.sql(spark, "SELECT * FROM CHANGELOG_FILTER(input => TABLE(accounts) PARTITION BY id "
                               "ORDER BY _commit_version, predicate => 'balance >= 0')").collect()
    named = sqlext.sql(spark, call(**GOOD)).collect()
    assert sorted(clause) == sorted(named) and len(named) == 3

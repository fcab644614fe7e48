"""What a user meets in the first hour: each message says what is wrong in the user's own
words (the value as written in SQL, the fix that works), and a mistake that would give wrong
rows in silence is refused instead."""

from __future__ import annotations

import datetime

import pytest

import sqlext
from sqlext.errors import SqlextError, find_in

ACCOUNTS = "id INT, status STRING, balance INT, _change_type STRING, _commit_version BIGINT"
ROWS = [(1, "open", 10, "insert", 1), (1, "closed", 5, "update_postimage", 2), (2, "open", 7, "insert", 2)]


@pytest.fixture
def acc(view):
    return view("acc", ROWS, ACCOUNTS)


@pytest.fixture(params=["native", "udtf"])
def run(request, spark):
    """Through sqlext's rewrite (sqlext.sql) and through the registered table function."""
    if request.param == "native":
        return lambda q: sqlext.sql(spark, q).collect()
    return lambda q: spark.sql(q).collect()


def raised(run, query) -> SqlextError:
    with pytest.raises(Exception) as caught:
        run(query)
    found = find_in(caught.value)
    assert found is not None, repr(caught.value)[:500]
    return found


def cf(predicate="'balance >= 0'", **more) -> str:
    extra = "".join(f", {k} => {v}" for k, v in more.items())
    return f"SELECT * FROM CHANGELOG_FILTER(input => TABLE(acc), key => 'id', predicate => {predicate}{extra})"


def test_the_suggested_predicate_with_a_doubled_quote_runs(run, acc):
    # the fix EXPRESSION_TYPE_MISMATCH suggests, pasted as it is written there
    suggestion = raised(run, cf("'status'"))
    assert suggestion.error_class == "EXPRESSION_TYPE_MISMATCH" and "'status = ''open'''" in str(suggestion)
    assert "STRING" in str(suggestion)  # the SQL type, not Python's name for it
    got = sorted(tuple(r) for r in run(cf("'status = ''open'''", emit="'final'")))
    assert got == [(2, "open", 7)]


def test_a_table_written_without_table_names_the_fix_with_the_users_table(spark, acc):
    error = raised(lambda q: sqlext.sql(spark, q).collect(),
                   "SELECT * FROM CHANGELOG_FILTER(input => acc, key => 'id', predicate => 'balance > 0')")
    assert error.error_class == "INVALID_ARGUMENT_TYPE" and "TABLE(acc)" in str(error)
    error = raised(lambda q: sqlext.sql(spark, q).collect(),
                   "SELECT * FROM FK_JOIN(left => TABLE(acc), right => acc, left_key => 'id', "
                   "foreign_key => 'balance', right_key => 'id')")
    assert error.error_class == "INVALID_ARGUMENT_TYPE" and "right => TABLE(acc)" in str(error)


def test_an_unclosed_string_in_a_predicate_is_described_in_the_users_words(run, acc):
    error = raised(run, cf("'status = ''open'"))
    assert error.error_class == "INVALID_SQL_EXPRESSION"
    text = str(error)
    assert "predicate => 'status = ''open'" in text and "'open" in text
    assert "SELECT" not in text and "tokeniz" not in text.lower()


def test_a_null_option_is_shown_as_null(run, acc):
    error = raised(run, cf(emit="NULL"))
    assert error.error_class == "INVALID_OPTION_VALUE"
    assert "emit => NULL" in str(error) and "None" not in str(error)


def test_late_change_and_incremental_model_messages_name_the_way_out():
    from sqlext.functions.changes import late_change

    late = late_change("CHANGELOG_FILTER", "id=1", "_commit_version", "1", "2", across_inputs=False)
    assert late.error_class == "LATE_CHANGE"
    assert "new checkpoint" in str(late) and "--full-refresh" in str(late) and "sequence_by" in str(late)
    unsupported = SqlextError("INCREMENTAL_MODEL_UNSUPPORTED", function="sqlext dbt", model="m",
                              functions="CHANGELOG_FILTER", reason="r")
    assert "STREAM(" in str(unsupported)


# An ordering column of a text type sorts '10' before '9'.

TEXT_ORDER = "id INT, balance INT, _change_type STRING, seq STRING"


def test_a_string_ordering_column_is_refused(run, view):
    view("acc", [(1, 5, "insert", "9"), (1, 7, "update_postimage", "10")], TEXT_ORDER)
    error = raised(run, "SELECT * FROM CHANGELOG_FILTER(input => TABLE(acc), key => 'id', "
                        "predicate => 'balance > 0', order_by => 'seq')")
    assert error.error_class == "ORDER_BY_TEXT" and "seq" in str(error) and "CAST(seq AS BIGINT)" in str(error)


def test_a_string_ordering_column_of_either_fk_join_input_is_refused(spark, view):
    view("orders", [(1, 1, "1")], "oid INT, cid INT, seq STRING")
    view("customers", [(1, "x", "1")], "cid INT, name STRING, seq STRING")
    error = raised(lambda q: sqlext.sql(spark, q).collect(),
                   "SELECT * FROM FK_JOIN(left => TABLE(orders), right => TABLE(customers), left_key => 'oid', "
                   "foreign_key => 'cid', right_key => 'cid', order_by => 'seq')")
    assert error.error_class == "ORDER_BY_TEXT"


@pytest.mark.parametrize("kind, values", [
    ("TIMESTAMP", [datetime.datetime(2024, 9, 1), datetime.datetime(2024, 10, 1)]),
    ("DATE", [datetime.date(2024, 9, 1), datetime.date(2024, 10, 1)]),
    ("DECIMAL(10, 2)", [__import__("decimal").Decimal("9.00"), __import__("decimal").Decimal("10.00")]),
])
def test_numeric_date_and_timestamp_ordering_columns_still_run(run, view, kind, values):
    view("acc", [(1, 5, "insert", values[0]), (1, 7, "update_postimage", values[1])],
         f"id INT, balance INT, _change_type STRING, seq {kind}")
    rows = run("SELECT id, balance, _change_type FROM CHANGELOG_FILTER(input => TABLE(acc), key => 'id', "
               "predicate => 'balance > 0', order_by => 'seq')")
    assert sorted(tuple(r) for r in rows) == [(1, 5, "insert"), (1, 5, "update_preimage"),
                                              (1, 7, "update_postimage")]


@pytest.mark.storage("viewfs")  # the folders named as on a remote store
def test_a_string_ordering_column_is_refused_incrementally_and_nothing_is_written(spark, tmp_path, storage):
    from sqlext.streaming import run_available_now

    source, output = tmp_path / "changes", tmp_path / "out"
    spark.createDataFrame([(1, 5, "insert", "9"), (1, 7, "update_postimage", "10")], TEXT_ORDER) \
        .coalesce(1).write.parquet(storage.uri(source))
    with pytest.raises(SqlextError) as caught:
        run_available_now(spark, "SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(changes)), key => 'id', "
                                 "predicate => 'balance > 0', order_by => 'seq')",
                          checkpoint=storage.uri(tmp_path / "checkpoint"), output=storage.uri(output),
                          sources={"changes": storage.uri(source)})
    assert caught.value.error_class == "ORDER_BY_TEXT"
    assert not list(output.glob("*.parquet"))


# One argument order for the API: the session first, as sqlext.sql(spark, text).

def test_explain_and_sql_take_the_session_first_and_still_read_the_old_order(spark, acc):
    text = cf()
    [first] = sqlext.explain(spark, text)
    assert first.changed  # the session told the rewrite the input's columns
    assert [first.sql] == [r.sql for r in sqlext.explain(text, spark)] == [r.sql for r in sqlext.explain(text, spark=spark)]
    assert not sqlext.explain(text)[0].changed  # without a session, the call is left as it is
    assert sorted(sqlext.sql(text, spark).collect()) == sorted(sqlext.sql(spark, text).collect())
    with pytest.raises(TypeError):
        sqlext.explain(text, text)

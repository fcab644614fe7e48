"""What a batch query that a new user writes gets instead of Spark's routine-resolution errors:
``STREAM(...)`` outside an incremental run says where it runs and how to run the statement in
batch; a misspelt sqlext function names the one meant."""

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

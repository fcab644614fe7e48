"""The one statement runner: a rewritten statement is a plan (the SQL and the recursions it
reads), the recursions' temporary views are gone once the statement is handed to Spark or has
failed, and every surface reports errors through the same function."""

import pytest

import sqlext
from sqlext.errors import SqlextError
from sqlext.rewrites.pipeline import rewrite_statement
from sqlext.runner import error_message, run_and_fetch

TWO = """
WITH RECURSIVE a(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM a WHERE n < 3),
b(m) AS (SELECT 10 UNION ALL SELECT m + 10 FROM b WHERE m < 30)
SELECT n, m FROM a CROSS JOIN b"""


def internal_views(spark):
    return sorted(t.name for t in spark.catalog.listTables() if t.name.startswith("__sx_"))


def test_the_plan_lists_each_recursion_and_the_statement_reads_their_views():
    plan = rewrite_statement(TWO)
    assert "RECURSIVE_EXPAND" in plan.sql and "RECURSIVE_EXPAND" not in plan.runnable_sql
    assert [r.spec.name for r in plan.recursions] == ["a", "b"]
    for recursion in plan.recursions:
        assert recursion.view in plan.runnable_sql
    assert rewrite_statement("SELECT 1").recursions == []


@pytest.mark.parametrize("route", ["walk", "levels"])
def test_views_are_dropped_after_the_statement_and_its_rows_stay_readable(spark, path, route):
    path(route)
    before = internal_views(spark)
    frame = sqlext.sql(spark, TWO)
    assert internal_views(spark) == before
    assert sorted(tuple(r) for r in frame.collect()) == [(n, m) for n in (1, 2, 3) for m in (10, 20, 30)]


def test_views_are_dropped_when_a_later_recursion_fails(spark, path):
    path("levels")
    before = internal_views(spark)
    runaway = """
    WITH RECURSIVE a(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM a WHERE n < 3),
    b(m) MAX RECURSION LEVEL 5 AS (SELECT 1 UNION ALL SELECT m + 1 FROM b WHERE m < 100)
    SELECT * FROM a CROSS JOIN b"""
    with pytest.raises(SqlextError, match="RECURSION_LEVEL_LIMIT_EXCEEDED"):
        sqlext.sql(spark, runaway).collect()
    assert internal_views(spark) == before


def test_views_are_dropped_when_spark_refuses_the_statement(spark, path):
    path("levels")
    before = internal_views(spark)
    outcome = run_and_fetch(spark, "WITH RECURSIVE a(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM a WHERE n < 3) "
                                   "SELECT no_such_column FROM a", 10)
    assert outcome.error is not None and "no_such_column" in outcome.error
    assert internal_views(spark) == before


def test_run_and_fetch_gives_rows_limit_and_the_error_line(spark):
    outcome = run_and_fetch(spark, "SELECT id FROM range(5)", 3)
    assert outcome.columns == ["id"] and outcome.rows == [(0,), (1,), (2,)] and outcome.truncated
    assert run_and_fetch(spark, "CREATE OR REPLACE TEMPORARY VIEW runner_v AS SELECT 1 AS x", 3).columns == []
    failed = run_and_fetch(spark, "SELECT * FROM CHANGELOG_FILTER(input => TABLE(runner_v), key => 'nope', "
                                  "predicate => 'x > 0')", 3)
    assert failed.error.startswith("[") and "CHANGELOG_FILTER" in failed.error
    assert error_message(ValueError("not a statement's error")) is None


def test_a_statement_without_a_query_is_passed_on_unread_and_fast():
    """dbt-spark loads a seed as INSERT ... VALUES of thousands of rows: no rule rewrites such
    a statement, and parsing it would cost seconds, so it reaches Spark unread and unchanged.
    A value that spells 'select' only makes it read, and still unchanged."""
    import time

    rows = ",".join(f"({i}, 'name {i}', cast('2024-01-01' as date))" for i in range(50_000))
    text = "insert into raw.items values " + rows
    started = time.perf_counter()
    plan = rewrite_statement(text)
    assert time.perf_counter() - started < 0.5
    assert plan.sql == plan.runnable_sql == text and not plan.changed
    assert {note.rule for note in plan.notes} >= {"fk_join_to_sql", "changelog_filter_to_sql"}
    spelled = "insert into raw.items values (1, 'Select the best')"
    assert rewrite_statement(spelled).sql == spelled

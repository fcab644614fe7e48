"""KIP-857's termination rules: steps that cannot stop are refused before anything runs
(RECURSION_NON_TERMINATING), and a recursion still producing rows at its level limit fails
with RECURSION_LEVEL_LIMIT_EXCEEDED, counted as Spark counts levels."""

import pytest

import sqlext
from recursion_graphs import error_of
from rows import multiset
from sqlext.cli import main


NON_TERMINATING = [
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT * FROM r) SELECT * FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n FROM r) SELECT * FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT * FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT r.n FROM r LEFT JOIN e ON r.n = e.src) SELECT * FROM r",
    # the CTE on the null-supplying side: every level repeats e's rows whatever r holds
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT e.dst FROM e LEFT JOIN r ON r.n = e.src) SELECT * FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT r.n + 1 FROM r CROSS JOIN e) SELECT * FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT r.n + e.w FROM r JOIN e) SELECT * FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT e.dst FROM e ANTI JOIN r ON r.n = e.src) SELECT * FROM r",
    # a LATERAL subquery that does not filter on the CTE's row, or that keeps it (LEFT), ends nothing
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT r.n + 1 FROM r, LATERAL (SELECT 1 FROM e WHERE e.src = 1) AS f) "
    "SELECT * FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT r.n + 1 FROM r LEFT JOIN LATERAL "
    "(SELECT 1 FROM e WHERE e.src = r.n) AS f ON TRUE) SELECT * FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT r.n + 1 FROM r, LATERAL (SELECT r.n FROM e) AS f) SELECT * FROM r",
]

TERMINATING = [
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT e.dst FROM r JOIN e ON r.n = e.src) SELECT * FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION SELECT (n + 1) % 5 FROM r) SELECT * FROM r",  # UNION ends it
    "WITH RECURSIVE r(a, b) AS (SELECT 1, 2 UNION SELECT b, a FROM r) SELECT * FROM r",
    # an identity step ends after one level when a row that comes again adds nothing
    "WITH RECURSIVE r(a, b) AS (SELECT 1, 2 UNION SELECT a, b FROM r) SELECT * FROM r",
    "WITH RECURSIVE r(n) USING KEY (n) AS (SELECT 1 UNION ALL SELECT n FROM r) SELECT * FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT e.dst FROM e LEFT SEMI JOIN r ON r.n = e.src) SELECT * FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT r.n + 1 FROM r CROSS JOIN e WHERE r.n < 3) SELECT * FROM r",
    # a correlated LATERAL subquery returns no row for a row of the CTE its filter rejects
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT a.n + 1 FROM r AS a, LATERAL "
    "(SELECT 1 FROM e WHERE e.src = a.n) AS f) SELECT * FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT r.n + 1 FROM r CROSS JOIN LATERAL "
    "(SELECT 1 FROM e WHERE e.src = r.n) AS f) SELECT * FROM r",
]


@pytest.mark.parametrize("text", NON_TERMINATING)
def test_steps_that_cannot_stop_are_refused_without_spark(text):
    with pytest.raises(sqlext.SqlextError) as error:
        sqlext.rewrite(text)
    assert error.value.error_class == "RECURSION_NON_TERMINATING"
    assert "r" == error.value.params["name"] and error.value.params["step"].startswith("SELECT")


@pytest.mark.parametrize("text", TERMINATING)
def test_steps_with_a_way_to_stop_are_accepted(text):
    assert "RECURSIVE_EXPAND(" in sqlext.rewrite(text)


def test_refused_before_anything_runs(spark):
    jobs_before = spark.sparkContext.statusTracker().getJobIdsForGroup()
    with pytest.raises(sqlext.SqlextError) as error:
        sqlext.sql(spark, NON_TERMINATING[0])
    assert error.value.error_class == "RECURSION_NON_TERMINATING"
    assert spark.sparkContext.statusTracker().getJobIdsForGroup() == jobs_before


CHAIN = """WITH RECURSIVE r(n) MAX RECURSION LEVEL {limit} AS (
  SELECT 1 UNION ALL SELECT e.dst FROM r JOIN le_edges e ON r.n = e.src) SELECT * FROM r"""


@pytest.mark.parametrize("name", ["walk", "levels"])
def test_level_limit_is_counted_like_spark(spark, view, path, name):
    # a chain 1 -> 2 -> ... -> 6: levels 0..5 hold rows
    view("le_edges", [(i, i + 1) for i in range(1, 6)], "src int, dst int")
    path(name)
    assert len(sqlext.sql(spark, CHAIN.format(limit=6)).collect()) == 6
    assert len(spark.sql(CHAIN.format(limit=6)).collect()) == 6
    error = error_of(lambda: sqlext.sql(spark, CHAIN.format(limit=5)).collect())
    assert error.error_class == "RECURSION_LEVEL_LIMIT_EXCEEDED"
    assert "recursion level limit 5" in str(error) and "MAX RECURSION LEVEL" in str(error)
    with pytest.raises(Exception, match="RECURSION_LEVEL_LIMIT_EXCEEDED"):
        spark.sql(CHAIN.format(limit=5)).collect()


@pytest.mark.parametrize("name", ["walk", "levels"])
def test_union_all_on_a_cycle_hits_the_limit_and_union_does_not(spark, view, path, name):
    view("lc_edges", [(1, 2), (2, 3), (3, 1)], "src int, dst int")
    path(name)
    step = "SELECT e.dst FROM r JOIN lc_edges e ON r.n = e.src"
    error = error_of(lambda: sqlext.sql(
        spark, f"WITH RECURSIVE r(n) MAX RECURSION LEVEL 20 AS (SELECT 1 UNION ALL {step}) SELECT * FROM r").collect())
    assert error.error_class == "RECURSION_LEVEL_LIMIT_EXCEEDED"
    rows = sqlext.sql(spark, f"WITH RECURSIVE r(n) MAX RECURSION LEVEL 20 AS (SELECT 1 UNION {step}) SELECT * FROM r")
    assert multiset(rows.collect()) == multiset([(1,), (2,), (3,)])


def test_integer_overflow_fails_as_in_spark(spark, view, path):
    view("lo_edges", [(1, 2), (2, 3), (3, 4)], "src int, dst int")
    query = """WITH RECURSIVE r(n, d) AS (SELECT 1, 2147483646
               UNION ALL SELECT e.dst, r.d + 1 FROM r JOIN lo_edges e ON r.n = e.src) SELECT * FROM r"""
    path("walk")
    assert error_of(lambda: sqlext.sql(spark, query).collect()).error_class == "RECURSION_VALUE_OUT_OF_RANGE"
    path("levels")
    with pytest.raises(Exception, match="ARITHMETIC_OVERFLOW"):
        sqlext.sql(spark, query).collect()
    with pytest.raises(Exception, match="ARITHMETIC_OVERFLOW"):
        spark.sql(query).collect()


def test_cli_reports_the_class_with_file_and_line(spark, capsys, tmp_path):
    sql = tmp_path / "loop.sql"
    sql.write_text("SELECT 1;\nWITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n FROM r) SELECT * FROM r;\n")
    assert main(["run", str(sql)]) == 1
    err = capsys.readouterr().err
    assert f"{sql}:2:1: [RECURSION_NON_TERMINATING] RECURSIVE_EXPAND: the step of r cannot stop" in err
    assert "Traceback" not in err

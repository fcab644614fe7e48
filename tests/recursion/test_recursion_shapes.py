"""Recursions shaped the way people who never read sqlext's code write them: steps that
select a joined relation's column named like a CTE column, aliases with column lists, views,
runaway steps, a LIMIT that ends the recursion, bad USING KEY clauses. Each runs through
sqlext and, where Spark can run it, through Spark's native recursion: the same rows, or a
classed error within seconds."""

import time

import pytest

import sqlext
from recursion_graphs import error_of
from rows import multiset, ordered
from sqlext.errors import find_in

PATHS = ["auto", "walk", "levels"]


def both(spark, query):
    return multiset(sqlext.sql(spark, query).collect()), multiset(spark.sql(query).collect())


@pytest.fixture
def letters(view):
    return view("sh_e", [("a", "b"), ("b", "c"), ("c", "d")], "src string, dst string")


@pytest.mark.parametrize("name", ["auto", "levels"])
@pytest.mark.parametrize("step", [
    "SELECT sh_e.dst FROM sh_e JOIN p ON p.dst = sh_e.src",        # the relation's dst into p(dst)
    "SELECT e.dst FROM sh_e AS e JOIN p ON p.dst = e.src",
    "SELECT d.dst FROM p JOIN (SELECT * FROM sh_e) AS d ON p.dst = d.src",
])
def test_step_selects_a_column_named_like_the_ctes(spark, letters, path, name, step):
    path(name)
    query = f"WITH RECURSIVE p(dst) AS (SELECT 'a' UNION ALL {step}) SELECT * FROM p"
    ours, native = both(spark, query)
    assert ours == native and sorted(ours) == [("a",), ("b",), ("c",), ("d",)]


@pytest.mark.parametrize("name", ["auto", "levels"])
def test_step_selects_star_of_the_joined_relation(spark, letters, path, name):
    path(name)
    query = ("WITH RECURSIVE p(src, dst) AS (SELECT 'x', 'a' UNION ALL "
             "SELECT d.* FROM sh_e AS d JOIN p ON p.dst = d.src) SELECT * FROM p")
    ours, native = both(spark, query)
    assert ours == native and sum(ours.values()) == 4


@pytest.mark.parametrize("name", PATHS)
def test_alias_with_a_column_list_in_the_step(spark, view, path, name):
    view("sh_t", [(1, 2), (2, 3), (3, 4)], "a int, b int")
    path(name)
    query = ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT t1.zzz FROM sh_t AS t1(yyy, zzz) "
             "JOIN r ON t1.yyy = r.n) SELECT * FROM r")
    ours, native = both(spark, query)
    assert ours == native and sorted(ours) == [(1,), (2,), (3,), (4,)]


def test_a_nested_cte_does_not_capture_the_outer_name(spark, letters):
    # the inner sh_e holds one row that would end the walk at once if it leaked out
    query = """WITH x AS (WITH sh_e AS (SELECT 'z' AS src, 'y' AS dst) SELECT * FROM sh_e),
    y AS (WITH RECURSIVE p(dst) AS (SELECT 'a' UNION ALL SELECT sh_e.dst FROM sh_e JOIN p ON p.dst = sh_e.src)
          SELECT * FROM p)
    SELECT * FROM y"""
    ours, native = both(spark, query)
    assert ours == native and sum(ours.values()) == 4


def test_the_recursion_reads_the_innermost_definition(spark, letters):
    query = """WITH sh_e AS (SELECT 'q' AS src, 'r' AS dst),
    y AS (WITH sh_e AS (SELECT * FROM VALUES ('a', 'b'), ('b', 'c') AS v(src, dst)),
               p AS (WITH RECURSIVE p(dst) AS (SELECT 'a' UNION ALL SELECT e.dst FROM sh_e AS e JOIN p ON p.dst = e.src)
                     SELECT * FROM p)
          SELECT * FROM p)
    SELECT * FROM y"""
    ours, native = both(spark, query)
    assert ours == native and sorted(ours) == [("a",), ("b",), ("c",)]


@pytest.mark.parametrize("name", PATHS)
def test_temporary_view_sees_later_changes(spark, view, path, name):
    path(name)
    view("sh_limit", [(3,)], "top int")
    text = ("CREATE OR REPLACE TEMPORARY VIEW sh_counter AS WITH RECURSIVE r(n) AS "
            "(SELECT 1 UNION ALL SELECT n + 1 FROM r JOIN sh_limit ON r.n < sh_limit.top) SELECT * FROM r")
    try:
        sqlext.sql(spark, text)
        assert multiset(sqlext.sql(spark, "SELECT * FROM sh_counter").collect()) == multiset([(1,), (2,), (3,)])
        view("sh_limit", [(5,)], "top int")
        assert len(sqlext.sql(spark, "SELECT * FROM sh_counter").collect()) == 5
        notes = sqlext.explain(text, spark=spark)[0].notes
        assert any("view" in n.text for n in notes if n.rule == "recursive_cte_to_expand")
    finally:
        spark.catalog.dropTempView("sh_counter")


def test_persistent_view_over_a_recursion(spark, tmp_path):
    spark.sql("DROP VIEW IF EXISTS sh_pview")
    spark.sql("DROP TABLE IF EXISTS sh_ptable")
    spark.sql(f"CREATE TABLE sh_ptable (src INT, dst INT) USING parquet LOCATION '{tmp_path}/t'")
    try:
        spark.sql("INSERT INTO sh_ptable VALUES (1, 2), (2, 3)")
        sqlext.sql(spark, "CREATE VIEW sh_pview AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL "
                          "SELECT e.dst FROM r JOIN sh_ptable AS e ON r.n = e.src) SELECT * FROM r")
        assert multiset(sqlext.sql(spark, "SELECT * FROM sh_pview").collect()) == multiset([(1,), (2,), (3,)])
        spark.sql("INSERT INTO sh_ptable VALUES (3, 4)")
        assert multiset(spark.sql("SELECT * FROM sh_pview").collect()) == multiset([(1,), (2,), (3,), (4,)])
    finally:
        spark.sql("DROP VIEW IF EXISTS sh_pview")
        spark.sql("DROP TABLE IF EXISTS sh_ptable")


RUNAWAYS = [
    # CTE on the null-supplying side, cross join: refused before running
    ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT x.k FROM sh_x AS x LEFT JOIN r ON x.k = r.n) "
     "SELECT * FROM r", "RECURSION_NON_TERMINATING"),
    ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT r.n + 1 FROM r CROSS JOIN sh_x) SELECT * FROM r",
     "RECURSION_NON_TERMINATING"),
    # the CTE on the right of a semi join: level 1 repeats level 0
    ("WITH RECURSIVE r(n) AS (SELECT 7 UNION ALL SELECT x.k FROM sh_x AS x LEFT SEMI JOIN r ON x.k = r.n) "
     "SELECT * FROM r", "RECURSION_REPEATS"),
    ("WITH RECURSIVE r(n) AS (SELECT 7 UNION ALL SELECT x.k FROM r JOIN sh_x AS x ON x.k = r.n) "
     "SELECT * FROM r", "RECURSION_REPEATS"),
    # a new key every level: only the level limit ends it
    ("WITH RECURSIVE r(n) USING KEY (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT * FROM r",
     "RECURSION_LEVEL_LIMIT_EXCEEDED"),
]


@pytest.mark.parametrize("query, error_class", RUNAWAYS)
def test_runaway_steps_fail_within_seconds(spark, view, query, error_class):
    view("sh_x", [(7,)], "k int")
    started = time.monotonic()
    error = error_of(lambda: sqlext.sql(spark, query).collect())
    assert error.error_class == error_class
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("name", ["walk", "levels"])
def test_row_limit_names_the_setting(spark, view, path, name):
    view("sh_fan", [(i, j) for i in range(1, 5) for j in range(1, 4)], "src int, dst int")
    path(name)
    spark.conf.set("spark.sqlext.recursion.rowLimit", "50")
    try:
        # every node has three children drawn from 1..3: the result triples each level
        query = ("WITH RECURSIVE r(n, d) AS (SELECT 1, 0 UNION ALL SELECT e.dst, r.d + 1 FROM r "
                 "JOIN sh_fan AS e ON r.n = e.src WHERE r.d < 8) SELECT * FROM r")
        error = error_of(lambda: sqlext.sql(spark, query).collect())
        assert error.error_class == "RECURSION_ROW_LIMIT_EXCEEDED"
        assert "spark.sqlext.recursion.rowLimit" in str(error)
    finally:
        spark.conf.unset("spark.sqlext.recursion.rowLimit")


@pytest.mark.parametrize("name", ["auto", "levels"])
@pytest.mark.parametrize("query", [
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION SELECT n FROM r) SELECT * FROM r",
    "WITH RECURSIVE r(n) USING KEY (n) AS (SELECT 1 UNION ALL SELECT n FROM r) SELECT * FROM r",
])
def test_identity_step_ends_under_union_or_using_key(spark, path, name, query):
    path(name)
    assert ordered(sqlext.sql(spark, query).collect()) == [(1,)]


def test_a_limit_ends_a_recursion_as_in_spark(spark):
    query = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT * FROM r LIMIT 10"
    ours, native = both(spark, query)
    assert ours == native and sum(ours.values()) == 10
    notes = sqlext.explain(query)[0].notes
    assert any("LIMIT" in n.text for n in notes if n.rule == "recursive_cte_to_expand")


@pytest.mark.parametrize("query", [
    "WITH RECURSIVE r(a) USING KEY (b) AS (SELECT 1 UNION ALL SELECT a + 1 FROM r WHERE a < 3) SELECT * FROM r",
    "WITH RECURSIVE r(a) USING KEY (a, `b c`) AS (SELECT 1 UNION ALL SELECT a + 1 FROM r WHERE a < 3) SELECT * FROM r",
])
def test_using_key_naming_no_column(spark, query):
    with pytest.raises(sqlext.SqlextError) as error:
        sqlext.sql(spark, query)
    assert error.value.error_class == "UNSUPPORTED_STATEMENT" and "USING KEY" in str(error.value)


@pytest.mark.parametrize("query", [
    "WITH RECURSIVE r(a) USING KEY (a) AS (SELECT FROM WHERE UNION ALL SELECT a + 1 FROM r WHERE a < 3) SELECT * FROM r",
    "WITH RECURSIVE r(a) USING KEY (a) AS (SELECT 1 + UNION ALL SELECT a + 1 FROM r WHERE a < 3) SELECT * FROM r",
    "WITH RECURSIVE r(a) USING KEY () AS (SELECT 1 UNION ALL SELECT a + 1 FROM r WHERE a < 3) SELECT * FROM r",
    "WITH RECURSIVE r(a) USING KEY (a) AS (SELECT 'x UNION ALL SELECT a FROM r) SELECT * FROM r",
    "WITH RECURSIVE r USING KEY (a) AS (SELECT 1 AS a UNION ALL SELECT a + 1 FROM r WHERE a < 3) SELECT * FROM r",
])
def test_malformed_keyed_recursion_gives_a_classed_error(spark, query):
    from pyspark.errors import PySparkException

    try:
        rows = sqlext.sql(spark, query).collect()
    except sqlext.SqlextError:
        return
    except PySparkException as error:  # Spark's own error about Spark's own syntax
        assert find_in(error) is None or find_in(error).error_class
        assert "Traceback" not in str(error)
        return
    assert rows  # a statement that reads fine runs


@pytest.mark.parametrize("name", PATHS)
@pytest.mark.parametrize("union", ["UNION ALL", "UNION"])
def test_alias_with_a_column_list_on_the_cte_itself(spark, path, name, union):
    query = f"WITH RECURSIVE t(x) AS (SELECT 1 {union} SELECT zzz + 1 FROM t AS t1(zzz) WHERE zzz < 3) SELECT * FROM t"
    # Spark refuses UNION in a recursion; on data without repeats it is UNION ALL made distinct
    native_query = query.replace("UNION SELECT", "UNION ALL SELECT").replace("SELECT * FROM t", "SELECT DISTINCT * FROM t")
    path(name)
    frame = sqlext.sql(spark, query)
    assert frame.schema.simpleString() == "struct<x:int>"
    assert multiset(frame.collect()) == multiset(spark.sql(native_query).collect()) == multiset([(1,), (2,), (3,)])


WIDER_STEP = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1L FROM r WHERE n < 3) SELECT * FROM r"


@pytest.mark.parametrize("name", PATHS)
def test_a_wider_step_is_cast_to_the_anchors_types(spark, path, name):
    # Spark refuses an INT anchor with a BIGINT step (CANNOT_MERGE_INCOMPATIBLE_DATA_TYPE);
    # sqlext casts the step's values to the anchor's types: native's rows with the cast written out
    with pytest.raises(Exception, match="CANNOT_MERGE_INCOMPATIBLE_DATA_TYPE"):
        spark.sql(WIDER_STEP)
    native = spark.sql(WIDER_STEP.replace("SELECT n + 1L", "SELECT CAST(n + 1L AS INT)"))
    path(name)
    frame = sqlext.sql(spark, WIDER_STEP)
    assert frame.schema == native.schema
    assert multiset(frame.collect()) == multiset(native.collect()) == multiset([(1,), (2,), (3,)])


@pytest.mark.parametrize("name", ["auto", "levels"])
def test_a_wider_step_spark_cannot_be_told_to_cast_runs_in_sqlexts_loop(spark, view, path, name):
    # e.* cannot carry a cast: Spark's recursion fails with an error PySpark does not class
    # (a bare Py4JJavaError), and sqlext's own loop runs the recursion instead
    view("sh_wide", [(2,), (3,)], "v bigint")
    query = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT e.* FROM r JOIN sh_wide AS e ON e.v = r.n + 1) SELECT * FROM r"
    path(name)
    frame = sqlext.sql(spark, query)
    assert frame.schema.simpleString() == "struct<n:int>"
    assert multiset(frame.collect()) == multiset([(1,), (2,), (3,)])


def test_a_wider_step_runs_from_the_command_line(spark, capsys, tmp_path):
    from sqlext.cli import main

    sql = tmp_path / "wider.sql"
    sql.write_text(WIDER_STEP + ";\n")
    assert main(["run", str(sql)]) == 0
    captured = capsys.readouterr()
    assert "(3 rows)" in captured.out and "Traceback" not in captured.err + captured.out


LATERAL_STEPS = [
    "SELECT d.i + 1 FROM c AS d, LATERAL (SELECT 1 FROM sh_b AS e WHERE e.i = d.i) AS f",
    "SELECT d.i + 1 FROM c AS d CROSS JOIN LATERAL (SELECT 1 FROM sh_b AS e WHERE e.i = d.i) AS f",
    "SELECT c.i + 1 FROM c JOIN LATERAL (SELECT e.i FROM sh_b AS e WHERE e.i = c.i GROUP BY e.i) AS f ON TRUE",
]


@pytest.mark.parametrize("name", ["auto", "levels"])
@pytest.mark.parametrize("step", LATERAL_STEPS)
def test_a_correlated_lateral_subquery_ends_the_recursion_like_a_join(spark, view, path, name, step):
    view("sh_b", [(0,)], "i int")
    path(name)
    query = f"WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL {step}) SELECT * FROM c"
    ours, native = both(spark, query)
    assert ours == native == multiset([(0,), (1,)])
    union = query.replace("UNION ALL", "UNION")
    assert multiset(sqlext.sql(spark, union).collect()) == native


def test_a_recursion_nested_in_the_step_of_another_reading_it(spark):
    query = """WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL (WITH RECURSIVE s(m) AS
      (SELECT n + 1 FROM t WHERE n < 3 UNION ALL SELECT m + 10 FROM s WHERE m < 10) SELECT * FROM s))
    SELECT * FROM t"""
    ours, native = both(spark, query)
    assert ours == native == multiset([(1,), (2,), (12,), (3,), (13,)])
    notes = [n for n in sqlext.explain(query)[0].notes if n.rule == "recursive_cte_to_expand"]
    assert notes and not any(n.fired for n in notes)
    assert any("inside the recursive CTE t" in n.text for n in notes)

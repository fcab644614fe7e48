"""The Spark dialect extension reads and writes back every construct sqlext relies on."""

import pytest
from sqlglot import exp

from rows import multiset
from sqlext.language.dialect import TableArgument, parse_one, to_sql

ROUND_TRIPS = [
    "SELECT * FROM F(arg => TABLE(t), x => 'y')",
    "SELECT * FROM F(arg => TABLE(t) PARTITION BY k ORDER BY ts, x => 'y')",
    "SELECT * FROM F(arg => TABLE(db.t) PARTITION BY (k, j) ORDER BY (ts DESC, z), x => 'y')",
    "SELECT * FROM F(arg => TABLE(SELECT a FROM t WHERE a > 1), x => 'y')",
    "SELECT * FROM F(TABLE(t) WITH SINGLE PARTITION)",
    "SELECT * FROM F(TABLE(t) WITH SINGLE PARTITION ORDER BY a)",
    "WITH RECURSIVE r(c) MAX RECURSION LEVEL 10 AS (SELECT 1 UNION ALL SELECT c + 1 FROM r WHERE c < 10) SELECT * FROM r",
    "WITH RECURSIVE r(c) AS (SELECT 1 UNION ALL SELECT c + 1 FROM r WHERE c < 10) SELECT * FROM r",
    "SELECT * EXCEPT (a) FROM t",
]


@pytest.mark.parametrize("sql", ROUND_TRIPS)
def test_round_trip(sql):
    assert to_sql(parse_one(sql)) == sql


def test_table_argument_is_a_node_with_its_clauses():
    tree = parse_one("SELECT * FROM F(input => TABLE(t) PARTITION BY (a, b) ORDER BY ts, k => 'v')")
    arg = tree.find(TableArgument)
    assert isinstance(arg.this, exp.Table) and arg.this.name == "t"
    assert [p.name for p in arg.args["partition_by"]] == ["a", "b"]
    assert arg.args["order"][0].this.name == "ts"
    # the comma after ORDER BY ts ends the table argument, not the sort list
    kwargs = tree.find(exp.Anonymous).expressions
    assert [k.this.name for k in kwargs] == ["input", "k"]


def test_table_argument_over_a_query():
    arg = parse_one("SELECT * FROM F(TABLE(SELECT a FROM t) WITH SINGLE PARTITION)").find(TableArgument)
    assert isinstance(arg.this, exp.Select)
    assert arg.args["single_partition"] is True


def test_max_recursion_level_is_kept_on_the_cte():
    tree = parse_one("WITH RECURSIVE r(c) MAX RECURSION LEVEL 7 AS (SELECT 1 UNION ALL SELECT c + 1 FROM r) SELECT * FROM r")
    cte = tree.find(exp.CTE)
    assert cte.args["max_recursion_level"].this == "7"
    assert cte.alias == "r"


@pytest.mark.spark
def test_spark_accepts_what_the_dialect_writes(spark):
    sql = to_sql(parse_one(
        "WITH RECURSIVE r(c) MAX RECURSION LEVEL 10 AS (SELECT 1 UNION ALL SELECT c + 1 FROM r WHERE c < 5) SELECT * FROM r"))
    assert multiset((r.c,) for r in spark.sql(sql).collect()) == multiset([(1,), (2,), (3,), (4,), (5,)])


def test_stream_takes_a_name_then_named_arguments():
    from sqlext.language.dialect import batch_form, stream_argument, stream_options

    sql = "SELECT * FROM STREAM(`my ``edges`, format => 'debezium', ORDER_BY => 'source.`l sn`') AS e"
    call = parse_one(sql).find(exp.Anonymous)
    assert to_sql(stream_argument(call)) == "`my ``edges`"
    assert stream_options(call) == {"format": "debezium", "order_by": "source.`l sn`"}
    assert to_sql(parse_one(sql)) == sql
    assert batch_form(sql) == "SELECT * FROM `my ``edges` AS e"


@pytest.mark.parametrize("sql, error", [
    ("SELECT * FROM STREAM(e, shape => 'debezium')", r"\[UNKNOWN_ARGUMENT\] STREAM: .*shape.*format, order_by"),
    ("SELECT * FROM STREAM(e, format => 'iceberg', format => 'delta')", r"\[DUPLICATE_ARGUMENT\] STREAM: .*format"),
    ("SELECT * FROM STREAM(e, format => iceberg)", r"\[INVALID_ARGUMENT_TYPE\] STREAM: format must be a string"),
    ("SELECT * FROM STREAM(format => 'iceberg', e)", r"\[UNSUPPORTED_STREAM\].*one table or view name"),
    ("SELECT * FROM STREAM(e, f)", r"\[UNSUPPORTED_STREAM\].*one table or view name"),
])
def test_stream_arguments_it_does_not_take_are_classed_errors(sql, error):
    from sqlext.errors import SqlextError
    from sqlext.language.dialect import stream_argument

    with pytest.raises(SqlextError, match=error):
        stream_argument(parse_one(sql).find(exp.Anonymous))

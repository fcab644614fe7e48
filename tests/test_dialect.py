"""The Spark dialect extension reads and writes back every construct sqlext relies on."""

import pytest
from sqlglot import exp

from rows import multiset
from sqlext.functions import catalogue
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


# Spark reads an inline table as a table argument's query: TABLE(VALUES ... AS t(...))
INLINE = "VALUES (1, 7, 1L), (2, 8, 2L) AS o(order_id, customer_id, _commit_version)"


@pytest.mark.parametrize("name", [f.name for f in catalogue.functions() if f.tables])
def test_table_argument_over_values_for_every_function(name):
    # every table argument of every function, named and positional, is read as the query
    # SELECT * FROM VALUES ... it means (the form the rules know), its clauses after it kept
    function = catalogue.function(name)
    named = ", ".join(f"{t} => TABLE({INLINE}) PARTITION BY order_id" for t in function.tables)
    positional = ", ".join(f"TABLE({INLINE})" for _ in function.tables)
    for arguments in (named, positional):
        tree = parse_one(f"SELECT * FROM {name}({arguments})")
        tables = list(tree.find_all(TableArgument))
        assert len(tables) == len(function.tables)
        for arg in tables:
            assert to_sql(arg.this) == to_sql(parse_one(f"SELECT * FROM {INLINE}"))
    tree = parse_one(f"SELECT * FROM {name}({named})")
    assert [p.name for p in tree.find(TableArgument).args["partition_by"]] == ["order_id"]
    # no alias: Spark names the columns col1, col2, ...; a union keeps its other branch
    for inner in ("VALUES (1, 2), (3, 4)", "VALUES (1, 2) AS v(a, b) UNION ALL SELECT 3, 4"):
        arg = parse_one(f"SELECT * FROM {name}(TABLE({inner}))").find(TableArgument)
        assert isinstance(arg.this, exp.Query) and arg.this.find(exp.Values) is not None


def test_rules_rewrite_calls_over_values_without_spark():
    # an inline table names its columns (AS o(a, b)): a rule needs no session to know them
    import sqlext

    cf = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(VALUES (1, 7, 'insert', 1L) AS "
          "o(id, balance, _change_type, _commit_version)), key => 'id', predicate => 'balance > 0')")
    fk = (f"SELECT * FROM FK_JOIN(left => TABLE({INLINE}), right => TABLE(VALUES (7, 'x', 1L) AS "
          "c(customer_id, name, _commit_version)), left_key => 'order_id', foreign_key => 'customer_id', "
          "right_key => 'customer_id')")
    for sql, name in ((cf, "CHANGELOG_FILTER("), (fk, "FK_JOIN(")):
        rewritten = sqlext.rewrite(sql)
        assert name not in rewritten and "VALUES (1, 7" in rewritten


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


@pytest.mark.spark
def test_calls_over_values_run_the_rewrite_with_the_rows_of_the_select_form(spark):
    # TABLE(VALUES ...) had been refused (FK_JOIN) or left to the registered table function
    # (CHANGELOG_FILTER). Now the rule runs, and it runs the very SQL of the form
    # TABLE(SELECT * FROM VALUES ...), so the same rows: FK_JOIN's are the join's
    import sqlext

    left = "VALUES (1, 7, 'insert', 1L), (1, -1, 'update_postimage', 2L) AS o(id, customer_id, _change_type, _commit_version)"
    right = "VALUES (7, 'x', 'insert', 1L) AS c(customer_id, name, _change_type, _commit_version)"
    cases = [  # (the rule, the statement, its rows: run for the call that had been refused)
        ("changelog_filter_to_sql",
         "SELECT * FROM CHANGELOG_FILTER(input => TABLE({l}), key => 'id', predicate => 'customer_id > 0')", None),
        ("fk_join_to_sql",
         "SELECT * FROM FK_JOIN(left => TABLE({l}), right => TABLE({r}), left_key => 'id', "
         "foreign_key => 'customer_id', right_key => 'customer_id')",
         [(1, 7, 7, "x", "insert", 1), (1, 7, 7, "x", "delete", 2)]),
    ]
    for rule, template, expected in cases:
        plain = template.format(l=left, r=right)
        [explained] = sqlext.explain(spark, plain)
        assert rule in explained.notes.fired, explained.notes.lines(verbose=True)
        [select_form] = sqlext.explain(spark, template.format(l=f"SELECT * FROM {left}", r=f"SELECT * FROM {right}"))
        assert explained.sql == select_form.sql
        if expected is not None:
            assert multiset(tuple(r) for r in sqlext.sql(spark, plain).collect()) == multiset(expected)


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

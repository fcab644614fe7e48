"""Names holding ``{``, ``}``, backticks, quotes and spaces, through every table function and
rewrite: as relation names, key columns, foreign-key expressions, ordering columns, value
columns, aliases and CTE names. Each query gives the same multiset of rows as the plain Spark
formulation of the same query (written here by hand, the names quoted), or a classed error;
and the rule that should expand it did fire (the suite runs in strict mode, so a rule that
fails on a tree it did not expect fails the test instead of leaving the statement as it was).
"""

from __future__ import annotations

from collections import Counter

import pytest

import sqlext
from sqlext.errors import SqlextError, find_in
from sqlext.rewrites import pipeline
from sqlext.rewrites.pipeline import rewrite_statement
from sqlext.session import SparkRelations


def q(name: str) -> str:
    """A name as Spark reads it: in backticks, a backtick written twice."""
    return "`" + name.replace("`", "``") + "`"


def lit(text: str) -> str:
    """A string literal as Spark reads it."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def multiset(frame) -> Counter:
    return Counter(tuple(row) for row in frame.collect())


def fired(spark, query: str) -> list[str]:
    return rewrite_statement(query, SparkRelations(spark), strict=True).notes.fired


# --- FK_JOIN and CHANGELOG_FILTER inputs ------------------------------------------------

KEY = "id `{k}`"
FK = "f'k {0}"
NOTE = 'say "hi" {}'
ORDER = "v{x}"
RKEY = "r`id' {}"
RNAME = 'n"{a}me'
LEFT = "left {t} `s'"
RIGHT = 'right "r" {}'

# (key, fk, note, version): an upsert log, all values NULL is a tombstone
LEFT_ROWS = [("a", 1, "x", 1), ("b", 2, "y", 2), ("a", 2, "x2", 4), ("b", None, None, 6), ("c", 3, "z", 7),
             ("d", 9, "w", 8)]
# (rid, name, change type, version): a change data feed
RIGHT_ROWS = [(1, "one", "insert", 1), (2, "two", "insert", 3), (1, "one", "update_preimage", 5),
              (1, "uno", "update_postimage", 5), (2, "two", "delete", 6), (3, "three", "insert", 7)]


@pytest.fixture(scope="module")
def fk_inputs(spark):
    """The inputs under awkward names, and the same rows under plain names."""
    from pyspark.sql.types import _parse_datatype_string

    def register(name, rows, columns):
        schema = _parse_datatype_string(", ".join(f"{q(c)} {t}" for c, t in columns))
        spark.createDataFrame(rows, schema).createOrReplaceTempView(q(name))

    register(LEFT, LEFT_ROWS, [(KEY, "STRING"), (FK, "BIGINT"), (NOTE, "STRING"), (ORDER, "BIGINT")])
    register(RIGHT, RIGHT_ROWS, [(RKEY, "BIGINT"), (RNAME, "STRING"), ("_change_type", "STRING"),
                                 (ORDER, "BIGINT")])
    register("fk_plain_left", LEFT_ROWS, [("id", "STRING"), ("fk", "BIGINT"), ("note", "STRING"), ("ver", "BIGINT")])
    register("fk_plain_right", RIGHT_ROWS, [("rid", "BIGINT"), ("name", "STRING"), ("_change_type", "STRING"),
                                            ("ver", "BIGINT")])
    yield
    for name in (LEFT, RIGHT, "fk_plain_left", "fk_plain_right"):
        spark.catalog.dropTempView(name)  # (creating parses the name; dropping takes it as it is)


def fk_call(left, right, key, fk, rkey, order, join_type, emit) -> str:
    return (f"SELECT * FROM FK_JOIN(left => TABLE({left}), right => TABLE({right}), left_key => {lit(key)}, "
            f"foreign_key => {lit(fk)}, right_key => {lit(rkey)}, order_by => {lit(order)}, "
            f"join_type => '{join_type}', emit => '{emit}')")


def test_the_reported_order_by_is_expanded_not_swallowed(spark, fk_inputs):
    """The repro: a ``{`` in the ordering column made the rule's template raise KeyError,
    which the pipeline swallowed, leaving FK_JOIN unexpanded."""
    query = fk_call(q(LEFT), q(RIGHT), q(KEY), q(FK), q(RKEY), q(ORDER), "inner", "changes")
    assert "order_by => '`v{x}`'" in query
    assert fired(spark, query) == ["fk_join_to_sql"]
    out = rewrite_statement(query, SparkRelations(spark), strict=False)
    assert out.changed and "FK_JOIN(" not in out.sql  # (its error messages still name FK_JOIN)
    assert not [n for n in out.notes if "could not read" in n.text]


@pytest.mark.parametrize("emit", ["changes", "records", "final"])
@pytest.mark.parametrize("join_type", ["inner", "left"])
def test_fk_join_matches_the_plain_named_call(spark, fk_inputs, emit, join_type):
    awkward = fk_call(q(LEFT), q(RIGHT), q(KEY), q(FK), q(RKEY), q(ORDER), join_type, emit)
    plain = fk_call("fk_plain_left", "fk_plain_right", "id", "fk", "rid", "ver", join_type, emit)
    assert fired(spark, awkward) == ["fk_join_to_sql"]
    frame = sqlext.sql(spark, awkward)
    names = [KEY, FK, NOTE, RKEY, RNAME] + ([] if emit == "final" else ["_change_type", ORDER])
    assert frame.columns == names
    rows = multiset(frame)
    assert rows == multiset(sqlext.sql(spark, plain))
    assert rows  # the data has joined rows in every mode


@pytest.mark.parametrize("join_type", ["inner", "left"])
def test_fk_join_final_matches_a_plain_join(spark, fk_inputs, join_type):
    """emit => 'final' against the join of the two final tables, written by hand."""
    fk_expression = f"CAST({q(FK)} AS BIGINT) + 0"  # an expression, not only a column
    query = fk_call(q(LEFT), q(RIGHT), q(KEY), fk_expression, q(RKEY), q(ORDER), join_type, "final")
    assert fired(spark, query) == ["fk_join_to_sql"]
    join = "JOIN" if join_type == "inner" else "LEFT JOIN"
    expected = spark.sql(f"""
        WITH l AS (
          SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY {q(KEY)} ORDER BY {q(ORDER)} DESC) AS rn
                         FROM {q(LEFT)})
          WHERE rn = 1 AND NOT ({q(FK)} IS NULL AND {q(NOTE)} IS NULL)),
        r AS (
          SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY {q(RKEY)} ORDER BY {q(ORDER)} DESC) AS rn
                         FROM {q(RIGHT)} WHERE _change_type <> 'update_preimage')
          WHERE rn = 1 AND _change_type IN ('insert', 'update_postimage'))
        SELECT l.{q(KEY)}, l.{q(FK)}, l.{q(NOTE)}, r.{q(RKEY)}, r.{q(RNAME)}
        FROM l {join} r ON CAST(l.{q(FK)} AS BIGINT) + 0 = r.{q(RKEY)}""")
    assert multiset(sqlext.sql(spark, query)) == multiset(expected)


def test_fk_join_bad_names_are_classed_errors(spark, fk_inputs):
    missing = fk_call(q(LEFT), q(RIGHT), q(KEY), "`no {such}`", q(RKEY), q(ORDER), "inner", "changes")
    with pytest.raises(SqlextError) as caught:
        sqlext.sql(spark, missing)
    assert caught.value.error_class == "CHANGELOG_MISSING_COLUMN"
    unterminated = fk_call(q(LEFT), q(RIGHT), "`id {k}", q(FK), q(RKEY), q(ORDER), "inner", "changes")
    with pytest.raises(SqlextError) as caught:
        sqlext.sql(spark, unterminated)
    assert caught.value.error_class == "INVALID_ARGUMENT_TYPE"


# --- CHANGELOG_FILTER --------------------------------------------------------------------

ACCOUNTS = "acc {x} `'\""
BAL = 'bal "{}"'
CF_ROWS = [(1, 10, "insert", 1), (2, -3, "insert", 1), (1, 10, "update_preimage", 2), (1, -1, "update_postimage", 2),
           (2, -3, "update_preimage", 3), (2, 8, "update_postimage", 3), (3, 4, "insert", 3), (3, 4, "delete", 5),
           (1, -1, "update_preimage", 6), (1, 12, "update_postimage", 6)]


@pytest.fixture(scope="module")
def cf_inputs(spark):
    from pyspark.sql.types import _parse_datatype_string

    for name, columns in [(ACCOUNTS, [KEY, BAL, "_change_type", ORDER]),
                          ("cf_plain", ["id", "bal", "_change_type", "ver"])]:
        types = ["BIGINT", "BIGINT", "STRING", "BIGINT"]
        schema = _parse_datatype_string(", ".join(f"{q(c)} {t}" for c, t in zip(columns, types)))
        spark.createDataFrame(CF_ROWS, schema).createOrReplaceTempView(q(name))
    yield
    for name in (ACCOUNTS, "cf_plain"):
        spark.catalog.dropTempView(name)


def cf_call(table, key, predicate, order, emit, partitioned=False) -> str:
    if partitioned:  # key and order from the table argument's clauses
        return (f"SELECT * FROM CHANGELOG_FILTER(input => TABLE({table}) PARTITION BY {key} ORDER BY {order}, "
                f"predicate => {lit(predicate)}, emit => '{emit}')")
    return (f"SELECT * FROM CHANGELOG_FILTER(input => TABLE({table}), key => {lit(key)}, "
            f"predicate => {lit(predicate)}, order_by => {lit(order)}, emit => '{emit}')")


@pytest.mark.parametrize("emit", ["changes", "records", "final"])
@pytest.mark.parametrize("partitioned", [False, True], ids=["arguments", "partition-by"])
def test_changelog_filter_matches_the_plain_named_call(spark, cf_inputs, emit, partitioned):
    awkward = cf_call(q(ACCOUNTS), q(KEY), f"{q(BAL)} >= 0", q(ORDER), emit, partitioned)
    plain = cf_call("cf_plain", "id", "bal >= 0", "ver", emit, partitioned)
    assert fired(spark, awkward) == ["changelog_filter_to_sql"]
    frame = sqlext.sql(spark, awkward)
    assert frame.columns == [KEY, BAL] + ([] if emit == "final" else ["_change_type", ORDER])
    rows = multiset(frame)
    assert rows == multiset(sqlext.sql(spark, plain))
    assert rows


def test_changelog_filter_final_matches_plain_spark(spark, cf_inputs):
    query = cf_call(q(ACCOUNTS), q(KEY), f"{q(BAL)} >= 0", q(ORDER), "final")
    expected = spark.sql(f"""
        SELECT {q(KEY)}, {q(BAL)} FROM (
          SELECT *, row_number() OVER (PARTITION BY {q(KEY)} ORDER BY {q(ORDER)} DESC) AS rn
          FROM {q(ACCOUNTS)} WHERE _change_type <> 'update_preimage')
        WHERE rn = 1 AND _change_type IN ('insert', 'update_postimage') AND {q(BAL)} >= 0""")
    rows = multiset(sqlext.sql(spark, query))
    assert rows == multiset(expected) == Counter({(1, 12): 1, (2, 8): 1})
    # the registered table function (plain spark.sql) reads the same names
    assert multiset(spark.sql(query)) == rows


def test_changelog_filter_data_error_names_the_awkward_key(spark):
    from pyspark.sql.types import _parse_datatype_string

    bad = "bad {x}"
    schema = _parse_datatype_string(f"{q(KEY)} BIGINT, {q(BAL)} BIGINT, _change_type STRING, {q(ORDER)} BIGINT")
    spark.createDataFrame([(1, 5, "insert", None)], schema).createOrReplaceTempView(q(bad))
    query = cf_call(q(bad), q(KEY), f"{q(BAL)} >= 0", q(ORDER), "changes")
    try:
        assert fired(spark, query) == ["changelog_filter_to_sql"]
        with pytest.raises(Exception) as caught:
            sqlext.sql(spark, query).collect()
    finally:
        spark.catalog.dropTempView(bad)
    found = find_in(caught.value)
    assert found is not None and found.error_class == "NULL_ORDER_VALUE"
    assert f"{KEY}=1" in str(found) and ORDER in str(found)


# --- self-joins ------------------------------------------------------------------------

EVENTS = "ev {x} `'"
ID, K, TS, V = "i d{}", "k`'", 't"s', "v {v}"
A, B = "a {x}", "b'q"
EVENT_ROWS = [(1, 1, 1, 5), (2, 1, 2, 3), (3, 1, 4, None), (4, 2, 1, 7), (5, 2, 3, 1), (6, None, 2, 2),
              (7, 1, None, 4), (2, 1, 2, 3)]


@pytest.fixture(scope="module")
def events(spark):
    from pyspark.sql.types import _parse_datatype_string

    schema = _parse_datatype_string(", ".join(f"{q(c)} INT" for c in (ID, K, TS, V)))
    spark.createDataFrame(EVENT_ROWS, schema).createOrReplaceTempView(q(EVENTS))
    yield
    spark.catalog.dropTempView(EVENTS)


SELF_JOINS = {
    "band_self_join_to_window": (
        f"SELECT {q(A)}.{q(ID)}, {q(B)}.{q(ID)} AS {q('other {}')}, {q(B)}.{q(V)} "
        f"FROM {{source}} {q(A)} JOIN {{source}} {q(B)} ON {q(A)}.{q(K)} = {q(B)}.{q(K)} "
        f"AND {q(B)}.{q(TS)} BETWEEN {q(A)}.{q(TS)} - 1 AND {q(A)}.{q(TS)} + 2"),
    "self_join_aggregate_to_window": (
        f"SELECT {q(A)}.{q(ID)}, SUM({q(B)}.{q(V)}) AS {q('total `{}`')}, COUNT(*) "
        f"FROM {{source}} {q(A)} JOIN {{source}} {q(B)} ON {q(A)}.{q(K)} = {q(B)}.{q(K)} "
        f"AND {q(B)}.{q(TS)} <= {q(A)}.{q(TS)} GROUP BY {q(A)}.{q(ID)}"),
}


@pytest.mark.parametrize("rule", list(SELF_JOINS))
@pytest.mark.parametrize("source", ["table", "cte"])
def test_self_join_rules_match_the_join(spark, events, rule, source):
    cte = "c {x}`'\""
    template = SELF_JOINS[rule]
    if source == "table":
        query = template.replace("{source}", q(EVENTS))
    else:
        query = f"WITH {q(cte)} AS (SELECT * FROM {q(EVENTS)}) " + template.replace("{source}", q(cte))
    assert rule in fired(spark, query)
    frame = sqlext.sql(spark, query)
    expected = spark.sql(query)  # Spark runs the join as written
    assert frame.columns == expected.columns
    rows = multiset(frame)
    assert rows == multiset(expected)
    assert rows


# --- recursion -------------------------------------------------------------------------

EDGES = "ed {g}`'"
SRC, DST = "s'rc {}", 'd"st`'
R, N, D = "r {x}`'", "n {}", "d`'"
EDGE_ROWS = [(1, 2), (2, 3), (1, 3), (3, 4), (4, 1), (None, 2), (2, None)]


@pytest.fixture(scope="module")
def edges(spark):
    from pyspark.sql.types import _parse_datatype_string

    schema = _parse_datatype_string(f"{q(SRC)} BIGINT, {q(DST)} BIGINT")
    spark.createDataFrame(EDGE_ROWS, schema).createOrReplaceTempView(q(EDGES))
    yield
    spark.catalog.dropTempView(EDGES)


def reachable(union: str) -> Counter:
    """The recursion's rows by plain semi-naive evaluation in Python."""
    level, rows, seen = [(1, 0)], [], set()
    while level:
        if union == "UNION":
            level = [r for r in dict.fromkeys(level) if r not in seen]
            seen.update(level)
        rows += level
        level = [(dst, d + 1) for n, d in level if d < 4 for src, dst in EDGE_ROWS if src is not None and src == n]
    return Counter(rows)


@pytest.mark.parametrize("union", ["UNION ALL", "UNION"])
@pytest.mark.parametrize("route", ["walk", "levels"])
def test_recursion_with_awkward_names(spark, edges, path, union, route):
    from sqlext.recursion.paths import last_path

    e, r = "e {e}`", "r'r"
    query = (f"WITH RECURSIVE {q(R)}({q(N)}, {q(D)}) AS (SELECT CAST(1 AS BIGINT), 0 {union} "
             f"SELECT {q(e)}.{q(DST)}, {q(r)}.{q(D)} + 1 FROM {q(R)} {q(r)} JOIN {q(EDGES)} {q(e)} "
             f"ON {q(r)}.{q(N)} = {q(e)}.{q(SRC)} WHERE {q(r)}.{q(D)} < 4) "
             f"SELECT {q(N)}, {q(D)} FROM {q(R)}")
    assert fired(spark, query) == ["recursive_cte_to_expand"]
    path(route)
    frame = sqlext.sql(spark, query)
    assert frame.columns == [N, D]
    assert multiset(frame) == reachable(union)
    assert last_path["path"] == route


def test_recursion_columns_holding_commas_reach_the_expansion():
    """A column name with a comma survives the column list the rule hands RECURSIVE_EXPAND."""
    from sqlext.language.dialect import parse_one
    from sqlext.functions.arguments import find_calls, read_call
    from sqlext.functions.recursive_expand import ARGUMENTS, spec_from_call

    names = ["a, b", "c`d", "e {f}"]
    query = (f"WITH RECURSIVE r({', '.join(q(n) for n in names)}) AS (SELECT 1, 2, 3 UNION ALL "
             f"SELECT {q(names[0])} + 1, {q(names[1])}, {q(names[2])} FROM r WHERE {q(names[0])} < 3) SELECT * FROM r")
    out = rewrite_statement(query, strict=True)
    assert out.notes.fired == ["recursive_cte_to_expand"]
    call = read_call(find_calls(parse_one(out.sql), "RECURSIVE_EXPAND")[0], "RECURSIVE_EXPAND", ARGUMENTS)
    assert spec_from_call(call.literals, "SELECT 1, 2, 3").columns == names


# --- strict mode -------------------------------------------------------------------------

def test_the_suite_runs_in_strict_mode():
    assert pipeline.strict_default() is True


def test_a_failing_rule_raises_in_strict_mode_and_is_noted_otherwise(monkeypatch):
    def broken_rule(expression):
        raise KeyError("x")

    monkeypatch.setattr(pipeline, "SELF_JOIN_RULES", [*pipeline.SELF_JOIN_RULES, broken_rule])
    text = "SELECT 1 AS one"
    with pytest.raises(KeyError):
        rewrite_statement(text, strict=True)
    monkeypatch.setenv(pipeline.STRICT_ENV, "0")
    out = rewrite_statement(text)  # production: the statement is passed through, the failure noted
    assert out.sql == text
    assert [n.text for n in out.notes if n.rule == "broken_rule"][0].startswith("the rule could not read")


def test_classed_errors_are_raised_in_both_modes():
    bad = "SELECT * FROM CHANGELOG_FILTER(input => TABLE(t), key => 'id', predicate => 'v >', emit => 'x')"
    schema = {"t": ["id", "v", "_commit_version"]}
    from sqlext.analysis.relations import MappingRelations

    for strict in (True, False):
        with pytest.raises(SqlextError):
            rewrite_statement(bad, MappingRelations(schema), strict=strict)

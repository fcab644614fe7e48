"""Expressions a run computes over Arrow data instead of asking Spark: for random conditions
of the shapes taken (comparisons of integers, strings and booleans with columns and literals,
BETWEEN, IS NULL, AND, OR, NOT, parentheses) over random rows with NULLs, Arrow's value is
Spark's, row by row; other shapes are left to Spark."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

from sqlext.streaming.arrow_sql import arrow_expression, evaluate

SCHEMA = pa.schema([("i", pa.int64()), ("j", pa.int32()), ("s", pa.string()), ("b", pa.bool_()), ("d", pa.float64())])

integers = st.sampled_from(["i", "j", "I", "-2", "0", "3", "2147483648"])
strings = st.sampled_from(["s", "'a'", "'b'", "''", "'ä'"])
booleans = st.sampled_from(["b", "TRUE", "FALSE"])


@st.composite
def conditions(draw, depth=0):
    kind = draw(st.integers(0, 5 if depth < 2 else 2))
    if kind == 0:
        op = draw(st.sampled_from(["=", "<>", "<", "<=", ">", ">="]))
        return f"{draw(integers)} {op} {draw(integers)}"
    if kind == 1:
        op = draw(st.sampled_from(["=", "<>", "<", ">="]))
        return f"{draw(strings)} {op} {draw(strings)}"
    if kind == 2:
        choice = draw(st.integers(0, 2))
        return [f"b = {draw(booleans)}", f"{draw(st.sampled_from(['i', 's', 'b']))} IS NULL",
                f"i BETWEEN {draw(integers)} AND {draw(integers)}"][choice]
    left, right = draw(conditions(depth=depth + 1)), draw(conditions(depth=depth + 1))
    return [f"({left}) AND ({right})", f"({left}) OR ({right})", f"NOT ({left})"][kind - 3]


rows = st.lists(st.tuples(st.one_of(st.none(), st.integers(-3, 3)), st.one_of(st.none(), st.integers(-3, 3)),
                          st.one_of(st.none(), st.sampled_from(["a", "b", "", "ä", "A"])), st.one_of(st.none(), st.booleans()),
                          st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))), max_size=12)


@settings(max_examples=examples(40, 400), deadline=None, suppress_health_check=list(HealthCheck))
@given(condition=conditions(), data=rows)
def test_a_condition_over_arrow_is_sparks(spark, condition, data):
    expression = arrow_expression(condition, SCHEMA, boolean=True)
    assert expression is not None, condition
    assert_sparks(spark, condition, expression, data)


def assert_sparks(spark, text, expression, data):
    """Arrow's value of ``expression`` over the rows ``data`` is Spark's of ``text``, row by row."""
    table = pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in data], schema=SCHEMA)
    ours = evaluate(table, {"c": expression})["c"].to_pylist() if data else []
    frame = spark.createDataFrame(table.to_pandas() if data else [], "i BIGINT, j INT, s STRING, b BOOLEAN, d DOUBLE")
    theirs = [r[0] for r in frame.selectExpr(text).collect()]
    assert ours == theirs, text


@pytest.mark.parametrize("text", ["d > 0", "i + 1 > 2", "CAST(i AS STRING) = '1'", "i = 's'", "upper(s) = 'A'",
                                  "i IN (1, 2)", "b < TRUE", "x > 1", "1.5 > i", "i"])
def test_shapes_whose_result_may_not_be_sparks_are_left_to_spark(text):
    assert arrow_expression(text, SCHEMA, boolean=True) is None


@settings(max_examples=examples(30, 300), deadline=None, suppress_health_check=list(HealthCheck))
@given(tested=st.sampled_from(["i", "j"]), then=st.sampled_from(["NULL", "i", "j"]), other=st.sampled_from(
    ["CAST(i AS DOUBLE) / j", "CAST(j AS DOUBLE) / i", "i", "j", "NULL"]), data=rows)
def test_an_if_and_a_division_its_test_guards_over_arrow_are_sparks(spark, tested, then, other, data):
    """What an aggregate's table is computed with: IF(c = 0, a, b) with SQL's NULL test, a
    64-bit integer as a double, and a double divided by the column the IF found not zero."""
    text = f"IF({tested} = 0, {then}, {other})"
    expression = arrow_expression(text, SCHEMA)
    divides_by = other.rsplit("/ ", 1)[-1] if "/" in other else None
    if divides_by is not None and divides_by != tested:  # not guarded: Spark's (an error under ANSI)
        assert expression is None
        return
    if divides_by is not None and then in ("i", "j"):  # an integer beside a double: Spark widens, left to it
        assert expression is None
        return
    assert expression is not None, text
    assert_sparks(spark, text, expression, data)


def test_a_division_no_if_guards_is_left_to_spark():
    assert arrow_expression("CAST(i AS DOUBLE) / j", SCHEMA) is None
    assert arrow_expression("IF(i = 0, NULL, CAST(i AS DOUBLE) / j)", SCHEMA) is None

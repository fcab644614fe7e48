"""Generated statements against Spark's own answers: recursive CTEs (join kinds, CTE columns
named like the step's relation's, aliases with column lists, nested and shadowing WITH,
views over the recursion) and rewritable self-joins wrapped in nested, shadowing CTEs. Every
statement runs through sqlext and through plain ``spark.sql``: the same multiset of rows."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

import sqlext
from recursion_graphs import dag
from rows import multiset
from sqlext.rewrites.pipeline import rewrite_statement
from sqlext.session import SparkRelations

SETTINGS = settings(max_examples=examples(6, 120), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def graph(spark):
    rows = [(s, d, (s * 7 + d) % 5 + 1) for s, d in dag(random.Random(13), 14, 24)]
    spark.createDataFrame(rows, "src int, dst int, w int").createOrReplaceTempView("gs_e")
    spark.createDataFrame([(1, 1, 10), (1, 2, 20), (1, 3, 30), (2, 1, 5), (2, 1, 6), (3, None, 7), (None, 4, 8)],
                          "uid int, ts int, v int").createOrReplaceTempView("gs_ev")
    yield
    for name in ("gs_e", "gs_ev"):
        spark.catalog.dropTempView(name)


@st.composite
def recursions(draw):
    """A linear recursion over the DAG gs_e(src, dst, w) that ends on acyclic data."""
    columns = draw(st.sampled_from([("dst",), ("dst", "d"), ("src", "dst"), ("node", "d")]))
    walk_col = "node" if "node" in columns else "dst"
    alias_list = draw(st.booleans())
    e_cols = ("a", "b", "c") if alias_list else ("src", "dst", "w")
    e_ref = "gs_e AS e(a, b, c)" if alias_list else draw(st.sampled_from(["gs_e AS e", "gs_e e"]))
    src, dst = f"e.{e_cols[0]}", f"e.{e_cols[1]}"
    anchor_values = {"dst": "1", "d": "0", "src": "0", "node": "1"}
    anchor = "SELECT " + ", ".join(f"{anchor_values[c]} AS {c}" if i == 0 else anchor_values[c]
                                   for i, c in enumerate(columns))
    outputs = {"dst": dst, "node": dst, "d": "r.d + 1", "src": src}
    # (Spark refuses the CTE on the right of a semi join, so that shape is tested elsewhere)
    kind = draw(st.sampled_from(["join", "comma"]))
    select = ", ".join(outputs[c] for c in columns)
    if kind == "join":
        step = f"SELECT {select} FROM r JOIN {e_ref} ON r.{walk_col} = {src}"
    else:
        step = f"SELECT {select} FROM r, {e_ref} WHERE r.{walk_col} = {src}"
    if "d" in columns and draw(st.booleans()):
        step += (" AND " if kind == "comma" else " WHERE ") + "r.d < 3"
    recursion = f"r({', '.join(columns)}) AS ({anchor} UNION ALL {step})"
    reader = draw(st.sampled_from(["SELECT * FROM r", "SELECT count(*) AS n FROM r",
                                   f"SELECT {columns[-1]}, count(*) AS n FROM r GROUP BY {columns[-1]}"]))
    nesting = draw(st.sampled_from(["top", "inside", "shadowed"]))
    if nesting == "top":
        return f"WITH RECURSIVE {recursion} {reader}"
    inner = f"(WITH RECURSIVE {recursion} {reader})"
    if nesting == "inside":
        return f"WITH y AS {inner} SELECT * FROM y"
    # a sibling CTE defines gs_e inside itself only; the recursion must still read the view
    return (f"WITH x AS (WITH gs_e AS (SELECT 99 AS src, 98 AS dst, 0 AS w) SELECT * FROM gs_e), "
            f"y AS {inner} SELECT * FROM y")


@SETTINGS
@given(query=recursions(), path_name=st.sampled_from(["auto", "levels"]))
def test_generated_recursions_match_native_spark(spark, graph, path, query, path_name):
    path(path_name)
    rewritten = rewrite_statement(query, SparkRelations(spark))
    assert "recursive_cte_to_expand" in rewritten.notes.fired, [str(n) for n in rewritten.notes]
    ours = multiset(sqlext.sql(spark, query).collect())
    assert ours == multiset(spark.sql(query).collect()), rewritten.sql
    assert sum(ours.values()) > 0


@SETTINGS
@given(query=recursions())
def test_a_view_over_a_generated_recursion_matches_native_spark(spark, graph, query):
    sqlext.sql(spark, f"CREATE OR REPLACE TEMPORARY VIEW gs_view AS {query}")
    try:
        assert multiset(sqlext.sql(spark, "SELECT * FROM gs_view").collect()) == \
            multiset(spark.sql(query).collect())
    finally:
        spark.catalog.dropTempView("gs_view")


@st.composite
def wrapped_self_joins(draw):
    """A rewritable self-join of ``rel`` inside nested and shadowing CTEs."""
    name = draw(st.sampled_from(["gs_ev", "ev", "`e v`"]))
    form = draw(st.sampled_from(["aggregate", "band"]))
    if form == "aggregate":
        join = (f"SELECT a.uid, a.ts, SUM(b.v) AS s FROM {name} a JOIN {name} b "
                f"ON a.uid = b.uid AND b.ts <= a.ts GROUP BY a.uid, a.ts")
    else:
        join = (f"SELECT a.uid, a.ts, b.v FROM {name} a JOIN {name} b "
                f"ON a.uid = b.uid AND b.ts BETWEEN a.ts - 1 AND a.ts + 1")
    decoy = f"{name} AS (SELECT 9 AS uid, 9 AS ts, 9 AS v)"
    defines = [] if name == "gs_ev" else [f"{name} AS (SELECT * FROM gs_ev WHERE v > 5)"]
    where = draw(st.sampled_from(["sibling", "inner", "wrapped", "none"]))
    if where == "sibling":  # a sibling CTE shadows the name inside itself only
        ctes = defines + [f"x AS (WITH {decoy} SELECT * FROM {name})"]
        return f"WITH {', '.join(ctes)} {join}"
    if where == "inner":  # the self-join reads an inner definition that shadows an outer one
        outer = [f"{name} AS (SELECT 9 AS uid, 9 AS ts, 9 AS v)"]
        inner = defines or [f"{name} AS (SELECT * FROM gs_ev)"]
        return f"WITH {', '.join(outer)} SELECT * FROM (WITH {', '.join(inner)} {join}) AS q"
    if where == "wrapped":  # the self-join sits in a CTE body next to a decoy of its own name
        body = f"WITH {decoy} SELECT 1 AS one" if draw(st.booleans()) else "SELECT 1 AS one"
        ctes = defines + [f"d AS ({body})", f"j AS ({join})"]
        return f"WITH {', '.join(ctes)} SELECT * FROM j"
    return f"WITH {', '.join(defines)} {join}" if defines else join


@SETTINGS
@given(query=wrapped_self_joins())
def test_self_joins_inside_nested_ctes_match_native_spark(spark, graph, query):
    rewritten = rewrite_statement(query, SparkRelations(spark))
    assert {"self_join_aggregate_to_window", "band_self_join_to_window"} & set(rewritten.notes.fired), \
        [str(n) for n in rewritten.notes]
    assert multiset(sqlext.sql(spark, query).collect()) == multiset(spark.sql(query).collect()), rewritten.sql

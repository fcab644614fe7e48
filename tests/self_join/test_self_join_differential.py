"""Differential tests of the self-join rules: the original and the rewritten query, run on
Spark over random data (NULL keys and times, duplicate rows), return the same multiset of
rows with the same column names and types."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

from sqlext.rewrites.pipeline import rewrite_statement
from sqlext.session import SparkRelations
from rows import multiset
from self_join_fixtures import FIXTURE_RELATIONS, read_fixtures, register_fixture_relations

FIXTURES = read_fixtures().cases
RUNNABLE = [f for f in FIXTURES if not f.noop]


@pytest.fixture(scope="module", params=[1, 2])
def events(request, spark):
    register_fixture_relations(spark, request.param)
    yield "events"
    for name in FIXTURE_RELATIONS:
        spark.catalog.dropTempView(name)


def assert_same(spark, original, rewritten):
    """The two statements give the same column names and types and the same multiset of rows.
    Both run in one Spark job: each row tagged with the side it comes from."""
    from pyspark.sql import functions as F

    a, b = spark.sql(original), spark.sql(rewritten)
    assert [(f.name, f.dataType) for f in b.schema] == [(f.name, f.dataType) for f in a.schema]
    side = "sqlext test side"
    rows = a.select(F.lit(0).alias(side), "*").unionAll(b.select(F.lit(1).alias(side), "*")).collect()
    rows_a = multiset(tuple(r)[1:] for r in rows if r[0] == 0)
    rows_b = multiset(tuple(r)[1:] for r in rows if r[0] == 1)
    assert rows_b == rows_a
    return sum(rows_a.values())


def rewritten(spark, query, *excuses):
    """The query rewritten with the session's facts; left alone only for one of ``excuses``
    (words of a rule's reason)."""
    out = rewrite_statement(query, SparkRelations(spark))
    reasons = [n.text for n in out.notes if not n.fired]
    assert out.changed or any(e in r for e in excuses for r in reasons), (query, reasons)
    return out


@pytest.mark.parametrize("fixture", RUNNABLE, ids=[f.title for f in RUNNABLE])
def test_fixture_gives_the_same_rows(spark, events, fixture):
    out = rewrite_statement(fixture.query, SparkRelations(spark))
    assert out.sql == fixture.expected  # the session's facts give the same rewrite as the mapping
    assert_same(spark, fixture.query, out.sql)


def test_kip_862s_self_join_pairs_each_record_with_itself_and_its_window(spark, view):
    # KIP-862: every record joins with itself, and with every other record of its key in the window
    view("clicks", [(1, "u", 0), (2, "u", 5), (3, "u", 30), (4, "v", 0), (5, None, 0)], "id int, k string, t int")
    query = ("SELECT a.id AS this, b.id AS other FROM clicks a JOIN clicks b "
             "ON a.k = b.k AND b.t BETWEEN a.t - 10 AND a.t + 10")
    out = rewrite_statement(query, SparkRelations(spark))
    assert out.notes.fired == ["band_self_join_to_window"]
    pairs = multiset(spark.sql(out.sql).collect())
    assert pairs == multiset([(1, 1), (1, 2), (2, 1), (2, 2), (3, 3), (4, 4)])
    assert_same(spark, query, out.sql)


KEYS = st.sampled_from([
    ["a.user_id = b.user_id"], ["b.user_id = a.user_id"], ["a.user_id <=> b.user_id"],
    ["a.user_id = b.user_id", "a.page = b.page"],
])
BANDS = st.sampled_from([
    ("n", "{b} BETWEEN {a} - {x} AND {a} + {y}"), ("n", "{b} <= {a}"), ("n", "{b} < {a}"),
    ("n", "{b} > {a} - {x} AND {b} <= {a} + {y}"), ("n", "{a} >= {b} - {y} AND {a} < {b} + {x}"),
    ("n", "{b} = {a} + {y}"),
    ("ts", "{b} BETWEEN {a} - INTERVAL {x} MINUTES AND {a} + INTERVAL {y} MINUTES"),
    ("ts", "{b} < {a}"), ("ts", "{b} > {a} AND {b} <= {a} + INTERVAL {y} MINUTES"),
    ("amount", "{b} BETWEEN {a} - {x} AND {a} + {y}"), ("amount", "{b} < {a} AND {b} > {a} - {x}"),
])
EXTRA = st.lists(st.sampled_from([
    "a.v > 0", "b.v > 0", "b.page <> 'home'", "a.page = 'cart'", "a.v < b.v", "b.n >= a.n - 20",
]), max_size=2, unique=True)
SHAPES = st.sampled_from([
    ("SELECT a.id, b.id AS other, b.v FROM events a JOIN events b ON {on}{where}", ""),
    ("SELECT a.id, a.ts, COUNT(*) AS c, SUM(b.v) AS s, MAX(b.page) AS m, AVG(b.v) FROM events a JOIN events b "
     "ON {on}{where} GROUP BY a.id, a.ts", ""),
    ("SELECT a.user_id, MIN(b.ts), COUNT(b.v) FROM events a JOIN events b ON {on}{where} GROUP BY a.user_id", ""),
    ("SELECT COUNT(*) AS pairs FROM events a JOIN events b ON {on}{where}", ""),
])


@settings(max_examples=examples(12, 250), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=KEYS, band=BANDS, extra=EXTRA, shape=SHAPES, x=st.integers(0, 12), y=st.integers(0, 12),
       in_where=st.booleans())
def test_generated_self_joins_give_the_same_rows(spark, events, keys, band, extra, shape, x, y, in_where):
    column, template = band
    condition = template.format(a=f"a.{column}", b=f"b.{column}", x=x, y=y)
    conjuncts = keys + [condition] + extra
    on, where = conjuncts, []
    if in_where:
        on, where = conjuncts[:1], conjuncts[1:]
    query = shape[0].format(on=" AND ".join(on), where=(" WHERE " + " AND ".join(where)) if where else "")
    out = rewritten(spark, query, "is empty")
    assert_same(spark, query, out.sql)


# Chains of inner joins holding one self-join pair (KIP-862's shape): the pair with one or two
# other relations, joined before or after it, through a or b, with conditions in ON or WHERE.
OTHERS = st.lists(st.sampled_from([
    ("users u", "u.user_id = {s}.user_id", "u.name"),
    ("users u", "u.tier <= {s}.n", "u.tier"),
    ("pages p", "p.page = {s}.page", "p.section"),
    ("(SELECT DISTINCT user_id AS uid FROM users) d", "d.uid = {s}.user_id", "d.uid"),
]), min_size=1, max_size=2, unique_by=lambda o: o[0].split()[-1])
CHAIN_SHAPES = st.sampled_from(["pairs", "aggregate", "grouped by other"])


@settings(max_examples=examples(6, 120), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=KEYS, band=BANDS, extra=EXTRA, others=OTHERS, shape=CHAIN_SHAPES, x=st.integers(0, 12),
       y=st.integers(0, 12), data=st.data())
def test_generated_chains_of_joins_give_the_same_rows(spark, events, keys, band, extra, others, shape, x, y, data):
    column, template = band
    pair = keys + [template.format(a=f"a.{column}", b=f"b.{column}", x=x, y=y)] + extra
    # each other relation is joined through a or b, before the pair, between its sides or after it
    items = [("events a", []), ("events b", pair)]
    for relation, condition, _ in others:
        side = data.draw(st.sampled_from(["a", "b"]))
        items.insert(data.draw(st.integers(0, len(items))), (relation, [condition.format(s=side)]))
    # a condition stays in an ON clause only when every relation it names is joined by then
    # (for inner joins, ON and WHERE are one conjunction); the rest, and some by choice, go to WHERE
    to_where = data.draw(st.booleans())
    where, seen = [], set()
    for i, (relation, conditions) in enumerate(items):
        seen.add(relation.split()[-1])
        keep = []
        for condition in conditions:
            named = {c.split(".")[0] for c in condition.replace("(", " ").split() if "." in c}
            if i == 0 or not named <= seen or (to_where and keep):
                where.append(condition)
            else:
                keep.append(condition)
        items[i] = (relation, keep)
    text = items[0][0] + "".join(
        f" JOIN {relation}" + (f" ON {' AND '.join(conditions)}" if conditions else "")
        for relation, conditions in items[1:]
    ) + (f" WHERE {' AND '.join(where)}" if where else "")
    selected = ", ".join(o[2] for o in others)
    if shape == "pairs":
        query = f"SELECT a.id, b.id AS other, b.v AS bv, {selected} FROM {text}"
    elif shape == "aggregate":
        query = f"SELECT a.id, COUNT(*) AS c, SUM(b.v) AS s, MAX(b.page) AS m FROM {text} GROUP BY a.id"
    else:
        query = f"SELECT {selected}, COUNT(b.v) AS c, MIN(b.ts) AS first FROM {text} GROUP BY {selected}"
    out = rewritten(spark, query, "is empty", "no band of its own")
    assert_same(spark, query, out.sql)


# Chains holding two self-joins of one relation (a/b, then c joined to a or b on a key,
# with or without a band of its own): the first self-join is rewritten, the later one stays
# a join (KIP-862's optimizer rewrites a join of one source with itself, and in
# a.join(b).join(c) that is the first join only).
SECOND = st.sampled_from([
    "c.user_id = {s}.user_id", "c.user_id = {s}.user_id AND c.n >= {s}.n",
    "c.user_id = {s}.user_id AND c.ts BETWEEN {s}.ts - INTERVAL 10 MINUTES AND {s}.ts", "c.id = {s}.id",
])


@settings(max_examples=examples(5, 100), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=KEYS, band=BANDS, second=SECOND, side=st.sampled_from(["a", "b"]), x=st.integers(0, 12),
       y=st.integers(0, 12), shape=st.sampled_from(["pairs", "aggregate"]), in_where=st.booleans())
def test_generated_chains_of_two_self_joins_rewrite_the_first(spark, events, keys, band, second, side, x, y,
                                                               shape, in_where):
    from sqlglot import exp

    from sqlext.language.dialect import parse_one

    column, template = band
    pair = " AND ".join(keys + [template.format(a=f"a.{column}", b=f"b.{column}", x=x, y=y)])
    later = second.format(s=side)
    text = (f"events a JOIN events b ON {pair} JOIN events c ON TRUE WHERE {later}" if in_where
            else f"events a JOIN events b ON {pair} JOIN events c ON {later}")
    if shape == "pairs":
        query = f"SELECT a.id, b.id AS other, b.v AS bv, c.id AS third FROM {text}"
    else:
        query = f"SELECT a.id, COUNT(*) AS k, SUM(c.v) AS s FROM {text} GROUP BY a.id"
    out = rewritten(spark, query, "is empty")
    if out.changed:
        joined = [j.this.alias_or_name for j in parse_one(out.sql).find_all(exp.Join)]
        assert joined == ["c"], out.sql  # the later self-join is still a join, the pair is not
    assert_same(spark, query, out.sql)

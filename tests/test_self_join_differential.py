"""Differential tests of the self-join rules: the original and the rewritten query, run on
Spark over random data (NULL keys and times, duplicate rows), return the same multiset of
rows with the same column names and types."""

import random
from collections import Counter
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rewrites.pipeline import rewrite_statement
from sqlext.session import SparkRelations
from self_join_fixtures import EVENTS, read_fixtures

_, FIXTURES = read_fixtures()
RUNNABLE = [f for f in FIXTURES if not f.noop]
DDL = ", ".join(f"{c} {t}" for c, t in EVENTS.items())


def random_events(seed: int, rows: int = 160):
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, 12, 0)

    def maybe(value, p=0.08):
        return None if rng.random() < p else value

    out = []
    for i in range(rows):
        out.append((
            i % 150,  # ids repeat: not a unique key
            maybe(rng.choice([1, 2, 3, 4, 5])),
            maybe(start + timedelta(seconds=rng.choice([0, 1, 59, 60, 300, 600, 601, 1800, 3600]) * rng.randint(0, 4))),
            maybe(rng.randint(0, 30)),
            maybe(rng.randint(-2, 5)),
            maybe(rng.choice(["home", "cart", "pay"])),
            maybe(rng.choice([0.0, 0.5, 1.5, 2.25, 3.0, -1.5])),
        ))
    out += rng.sample(out, 12)  # exact duplicate rows
    return out


@pytest.fixture(scope="module", params=[1, 2])
def events(request, spark):
    frame = spark.createDataFrame(random_events(request.param), DDL)
    frame.createOrReplaceTempView("events")
    yield "events"
    spark.catalog.dropTempView("events")


def rows_of(spark, sql):
    frame = spark.sql(sql)
    return [(f.name, f.dataType) for f in frame.schema], Counter(tuple(r) for r in frame.collect())


def assert_same(spark, original, rewritten):
    schema_a, rows_a = rows_of(spark, original)
    schema_b, rows_b = rows_of(spark, rewritten)
    assert schema_b == schema_a
    assert rows_b == rows_a
    return sum(rows_a.values())


@pytest.mark.parametrize("fixture", RUNNABLE, ids=[f.title for f in RUNNABLE])
def test_fixture_gives_the_same_rows(spark, events, fixture):
    out = rewrite_statement(fixture.query, SparkRelations(spark))
    assert out.sql == fixture.expected  # the session's facts give the same rewrite as the mapping
    assert_same(spark, fixture.query, out.sql)


def test_the_seeds_self_join_pairs_each_record_with_itself_and_its_window(spark, view):
    # seed 001: every record joins with itself, and with every other record of its key in the window
    view("clicks", [(1, "u", 0), (2, "u", 5), (3, "u", 30), (4, "v", 0), (5, None, 0)], "id int, k string, t int")
    query = ("SELECT a.id AS this, b.id AS other FROM clicks a JOIN clicks b "
             "ON a.k = b.k AND b.t BETWEEN a.t - 10 AND a.t + 10")
    out = rewrite_statement(query, SparkRelations(spark))
    assert out.notes.fired == ["band_self_join_to_window"]
    pairs = sorted(tuple(r) for r in spark.sql(out.sql).collect())
    assert pairs == [(1, 1), (1, 2), (2, 1), (2, 2), (3, 3), (4, 4)]
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


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
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
    out = rewrite_statement(query, SparkRelations(spark))
    reasons = [n.text for n in out.notes if not n.fired]
    assert out.changed or any("is empty" in r for r in reasons), reasons
    assert_same(spark, query, out.sql)

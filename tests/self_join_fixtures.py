"""The tables the self-join fixtures (``tests/fixtures/self_joins.sql``) read, the fixtures, and
random rows of those tables registered as temporary views (:func:`register_fixture_relations`)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from fixture_files import load

# The one table the fixtures read (types as Spark names them).
EVENTS = {
    "id": "int", "user_id": "int", "ts": "timestamp", "n": "int", "v": "int", "page": "string",
    "amount": "double",
}
# Relations joined with the pair in the chain-of-joins fixtures (not unique on their keys).
USERS = {"user_id": "int", "name": "string", "tier": "int"}
PAGES = {"page": "string", "section": "string"}
SCHEMA = {"events": EVENTS, "users": USERS, "pages": PAGES}


def read_fixtures():
    """The file of self-join cases (``.cases``: title, query, expected text or noop)."""
    return load("self_joins.sql")


def cluster_cases():
    """The runnable cases the standalone cluster runs: every third, in file order (both shapes of
    rewrite are among them). All of them run in local mode, on two random relations each, in
    the differential tests; on the cluster the plans are Spark's own window functions, and
    running a third of them keeps the cluster job's share of the suite small."""
    return [case for case in read_fixtures().cases if not case.noop][::3]


DDL = ", ".join(f"{c} {t}" for c, t in EVENTS.items())


def ddl(columns: dict[str, str]) -> str:
    return ", ".join(f"{c} {t}" for c, t in columns.items())


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


def random_dimensions(seed: int):
    """users and pages for the chain-of-joins cases: keys repeat (a join multiplies rows),
    some are NULL, some keys of events have no row at all."""
    rng = random.Random(seed + 1000)
    users = [(rng.choice([1, 2, 3, 4, None]), rng.choice(["ann", "bo", "cart", None]), rng.choice([0, 1, 2, None]))
             for _ in range(7)]
    pages = [(rng.choice(["home", "cart", "pay", None]), rng.choice(["shop", "home", "cart", None])) for _ in range(5)]
    return users + users[:2], pages + pages[:1]


FIXTURE_RELATIONS = ("events", "users", "pages")


def register_fixture_relations(spark, seed: int) -> None:
    """The relations the fixtures read, as temporary views of random rows."""
    users, pages = random_dimensions(seed)
    spark.createDataFrame(random_events(seed), DDL).createOrReplaceTempView("events")
    spark.createDataFrame(users, ddl(USERS)).createOrReplaceTempView("users")
    spark.createDataFrame(pages, ddl(PAGES)).createOrReplaceTempView("pages")

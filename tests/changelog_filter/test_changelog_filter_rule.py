"""changelog_filter_to_sql against its fixture pairs (``tests/fixtures/changelog_filter.sql``):
each input rewrites to exactly the expected SQL with the header's schema, every noop case comes
back unchanged; and on Spark, each rewritten query gives the rows that the registered table
function gives for the call as written (plain ``spark.sql``), over small tables with updates,
deletes, a delete and insert at one version, unchanged updates, stale changes, NULL keys and
NULL values."""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime

import pytest

from fixture_files import REGENERATE, load
from rule_fixtures import call_span, check_case, json_rows, rewrite, schema, temp_views

RULE = "changelog_filter_to_sql"
FILE = load("changelog_filter.sql")
SCHEMA = schema(FILE)
CASES = FILE.cases
REWRITTEN = [c for c in CASES if not c.noop]


def ts(hour: int) -> datetime:
    return datetime(2024, 5, 1, hour)


# (id, owner, balance, _change_type, _commit_version)
ACCOUNTS = [
    # 1: passes, fails, passes again, deleted
    (1, "ann", 10, "insert", 1), (1, "ann", 10, "update_preimage", 2), (1, "ann", -5, "update_postimage", 2),
    (1, "ann", -5, "update_preimage", 4), (1, "ann", 20, "update_postimage", 4), (1, "ann", 20, "delete", 6),
    # 2: filtered, then passes; then its owner changes (for a key of id and owner: a new key)
    (2, "bob", -3, "insert", 1), (2, "bob", -3, "update_preimage", 3), (2, "bob", 8, "update_postimage", 3),
    (2, "bob", 8, "update_preimage", 5), (2, "cy", 8, "update_postimage", 5),
    # 3: a delete and an insert at one version (the row replaced)
    (3, "cy", 4, "insert", 2), (3, "cy", 4, "delete", 4), (3, "cy", 7, "insert", 4),
    # 4: an update that changes nothing
    (4, "ann", 5, "insert", 1), (4, "ann", 5, "update_preimage", 2), (4, "ann", 5, "update_postimage", 2),
    # 5: a NULL owner; 6: a large balance; a NULL key
    (5, None, 9, "insert", 3), (6, "cy", 150, "insert", 1),
    (None, "bob", 12, "insert", 2), (None, "bob", 12, "delete", 3),
]
# (id, balance, updated_at, version): an upsert log; a NULL balance removes the key (with
# sequence_by; without it, updated_at is one more value and the row stays, filtered)
BALANCES = [
    (1, 10, ts(1), 1), (1, 20, ts(3), 2), (1, 15, ts(2), 3),  # version 3 is older than version 2
    (1, None, ts(4), 4),
    (2, -1, ts(1), 1), (2, 5, ts(2), 2), (2, 5, ts(5), 3),
    (3, None, ts(2), 1),  # the removal of a key that has no row
    (None, 3, ts(1), 2),
]
ICEBERG_TYPES = {"insert": "INSERT", "delete": "DELETE", "update_preimage": "UPDATE_BEFORE",
                 "update_postimage": "UPDATE_AFTER"}
ROWS = {
    "accounts": ACCOUNTS,
    "balances": BALANCES,
    # the rows of accounts as Iceberg's changelog view gives them
    "ledger_changelog": [(i, o, b, ICEBERG_TYPES[t], v, 1000 + v) for i, o, b, t, v in ACCOUNTS],
    "owners": [("ann", "north"), ("bob", "south"), ("cy", "north"), ("dee", "east")],
    # (`acc id`, `it's`, `say "hi" {}`, `back``tick`, _change_type, `v{x}`)
    "odd {t} 's": [
        # 1 stops passing (`back``tick` becomes 'x'); 2 starts; 3's NULL makes the predicate NULL
        (1, 5, "a", "y", "insert", 1), (1, 5, "a", "y", "update_preimage", 2),
        (1, 6, "b", "x", "update_postimage", 2),
        (2, -1, "c", "y", "insert", 1), (2, -1, "c", "y", "update_preimage", 3),
        (2, 3, "d", "y", "update_postimage", 3),
        (3, 4, "e", None, "insert", 2),
    ],
}


def test_regenerate_fixtures_when_asked():
    if not REGENERATE:
        assert all(c.noop or c.expected for c in CASES), "a fixture has no expected query"
        return
    FILE.regenerate(lambda query: rewrite(query, SCHEMA).sql)


@pytest.mark.parametrize("case", CASES, ids=[c.title for c in CASES])
def test_fixture(case):
    check_case(case, SCHEMA, RULE, ("CHANGELOG_FILTER",))


def test_the_file_fires_the_rule_and_covers_its_surface():
    fired = Counter()
    for case in CASES:
        fired.update(rewrite(case.query, SCHEMA).notes.fired)
    assert fired[RULE] >= len(REWRITTEN)
    text = "\n".join(c.query for c in REWRITTEN)
    for needle in ("emit => 'changes'", "emit => 'records'", "emit => 'final'", "order_by => ", "sequence_by => ",
                   "format => 'iceberg'", "PARTITION BY", "WITH ", "JOIN ", "TABLE(CHANGELOG_FILTER(", "`"):
        assert needle in text, needle
    assert any("emit =>" not in c.query and "order_by =>" not in c.query for c in REWRITTEN)  # defaults
    assert sum(c.noop for c in CASES) >= 3


# The independent answer for a case is its own text run by plain Spark, where sqlext's table
# function is registered under the name CHANGELOG_FILTER; where plain Spark cannot read the call
# as written, the same call in a form it reads.
def _without_partitioning(query: str) -> str:
    """TABLE(t) PARTITION BY k ORDER BY o becomes TABLE(t), key => 'k', order_by => 'o' (the
    registered function partitions its input itself; Spark refuses the clauses on top)."""
    return re.sub(r"TABLE\((\w+)\) PARTITION BY (\w+) ORDER BY (\w+)", r"TABLE(\1), key => '\2', order_by => '\3'",
                  query)


def _inner_call_as_query(query: str) -> str:
    """TABLE(CHANGELOG_FILTER(...)) becomes TABLE(SELECT * FROM CHANGELOG_FILTER(...))."""
    offset = query.index("TABLE(CHANGELOG_FILTER(") + len("TABLE(")
    _, end = call_span(query[offset:], "CHANGELOG_FILTER")
    return query[:offset] + "SELECT * FROM " + query[offset:offset + end] + query[offset + end:]


def _as_delta(query: str) -> str:
    """The Iceberg view's call as the same call over the change feed it was made from (the
    ordering column named as the Iceberg view names it)."""
    query = query.replace("TABLE(ledger_changelog)", "TABLE(accounts)").replace(", format => 'iceberg'", "")
    return query.replace("SELECT * FROM", "SELECT id, owner, balance, _change_type, "
                                           "_commit_version AS _change_ordinal FROM", 1)


ANSWERS = {
    "key and order from the table argument's PARTITION BY and ORDER BY": _without_partitioning,
    "a call feeding another call": _inner_call_as_query,
    "Iceberg's changelog view (format => 'iceberg'), ordered by _change_ordinal": _as_delta,
    "Iceberg's changelog view with emit records": _as_delta,
}


@pytest.fixture(scope="module")
def views(spark):
    with temp_views(spark, FILE, ROWS):
        yield {}  # rows by query text, for the cases that share a text


@pytest.mark.parametrize("case", REWRITTEN, ids=[c.title for c in REWRITTEN])
def test_rewrite_matches_the_table_function(spark, views, case):
    got = json_rows(spark, rewrite(case.query, SCHEMA).sql, views)
    assert got == json_rows(spark, ANSWERS.get(case.title, lambda q: q)(case.query), views)
    assert got, "the case's rows give it nothing to compare"

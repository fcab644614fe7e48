"""The self-join rules against their fixture pairs (no Spark): each input rewrites to exactly
the expected SQL, and every noop case comes back unchanged with a reason from each rule."""

import pytest

import sqlext
from sqlext.rewrites.band_self_join_to_window import band_self_join_to_window
from sqlext.language.dialect import parse_one, to_sql
from sqlext.analysis.notes import Notes
from sqlext.rewrites.pipeline import rewrite_statement
from sqlext.analysis.relations import MappingRelations
from sqlext.rewrites.self_join_aggregate_to_window import self_join_aggregate_to_window
from fixture_files import REGENERATE
from self_join_fixtures import SCHEMA, read_fixtures

FILE = read_fixtures()
FIXTURES = FILE.cases


def test_regenerate_fixtures_when_asked():
    if not REGENERATE:
        assert all(f.noop or f.expected for f in FIXTURES), "a fixture has no expected query"
        return
    FILE.regenerate(lambda query: sqlext.rewrite(query, SCHEMA))


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.title for f in FIXTURES])
def test_fixture(fixture):
    out = rewrite_statement(fixture.query, MappingRelations(SCHEMA))
    if fixture.noop:
        assert out.sql == fixture.query
        assert not out.changed
        assert any(not n.fired and n.rule.endswith("_to_window") and "nothing" not in n.text for n in out.notes) \
            or "other_events" in fixture.query
    else:
        assert out.changed, [str(n) for n in out.notes]
        assert out.sql == fixture.expected


def test_fixtures_cover_both_rules_and_the_merge():
    fired = set()
    for fixture in FIXTURES:
        fired |= set(rewrite_statement(fixture.query, MappingRelations(SCHEMA)).notes.fired)
    assert {"merge_duplicate_sources", "self_join_aggregate_to_window", "band_self_join_to_window"} <= fired


def test_unknown_columns_leave_the_query_unchanged():
    query = "SELECT a.id, b.id FROM events a JOIN events b ON a.user_id = b.user_id AND b.n <= a.n"
    out = rewrite_statement(query, MappingRelations({}))
    assert out.sql == query
    assert any("columns" in n.text for n in out.notes if n.rule == "band_self_join_to_window")


def test_unknown_band_type_leaves_the_query_unchanged():
    query = "SELECT a.id, b.id FROM events a JOIN events b ON a.user_id = b.user_id AND b.n <= a.n"
    out = rewrite_statement(query, MappingRelations({"events": list(SCHEMA["events"])}))
    assert out.sql == query
    assert any("type" in n.text for n in out.notes if n.rule == "band_self_join_to_window")


def test_empty_band_is_left_alone():
    query = "SELECT a.id FROM events a JOIN events b ON a.user_id = b.user_id AND b.n BETWEEN a.n + 3 AND a.n + 1"
    notes = Notes()
    tree = band_self_join_to_window(parse_one(query), MappingRelations(SCHEMA), notes)
    assert to_sql(tree) == to_sql(parse_one(query))
    assert "empty" in notes.items[0].text


@pytest.mark.parametrize("condition, frame", [
    ("b.n BETWEEN a.n - 3 AND a.n + 2", "RANGE BETWEEN 3 PRECEDING AND 2 FOLLOWING"),
    ("a.n BETWEEN b.n - 2 AND b.n + 3", "RANGE BETWEEN 3 PRECEDING AND 2 FOLLOWING"),
    ("b.n < a.n", "RANGE BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING"),
    ("a.n < b.n", "RANGE BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING"),
    ("b.n + 1 = a.n", "RANGE BETWEEN 1 PRECEDING AND 1 PRECEDING"),
    ("b.n >= a.n - 9 AND b.n >= a.n - 4 AND b.n <= a.n", "RANGE BETWEEN 4 PRECEDING AND CURRENT ROW"),
    ("b.ts <= a.ts + INTERVAL 90 MINUTES AND b.ts >= a.ts", "RANGE BETWEEN CURRENT ROW AND INTERVAL '5400' SECOND FOLLOWING"),
    ("b.ts < a.ts AND b.ts >= a.ts - INTERVAL '1.5' SECOND",
     "RANGE BETWEEN INTERVAL '1.5' SECOND PRECEDING AND INTERVAL '0.000001' SECOND PRECEDING"),
])
def test_frames(condition, frame):
    query = f"SELECT a.id, COUNT(*) FROM events a JOIN events b ON a.user_id = b.user_id AND {condition} GROUP BY a.id"
    tree = self_join_aggregate_to_window(parse_one(query), MappingRelations(SCHEMA))
    assert frame in to_sql(tree)


@pytest.mark.parametrize("query, reason", [
    ("SELECT a.id, b.id FROM events a JOIN events b ON a.user_id = b.user_id AND b.n <= a.n "
     "LEFT JOIN users u ON u.user_id = a.user_id", "LEFT JOIN in the chain of joins"),
    # the first self-join of the chain (a/b) has no band; the later one (b/c) is not rewritten
    ("SELECT a.id, c.id FROM events a JOIN events b ON a.id = b.id "
     "JOIN events c ON c.user_id = b.user_id AND c.n <= b.n", "no band of its own"),
    ("SELECT a.id FROM events a JOIN users u ON u.user_id = a.user_id JOIN events b "
     "ON a.user_id = b.user_id AND b.n BETWEEN a.n AND u.tier", "no band of its own"),
    ("SELECT a.id FROM events a JOIN events b ON a.user_id = b.user_id AND b.n <= a.n "
     "JOIN users u ON u.user_id = a.user_id WHERE v > 0", "column v has no relation's alias"),
    # the name Spark gives `b.v + 1` is not known without a session: nothing is touched
    ("SELECT a.id, b.v + 1 FROM events a JOIN events b ON a.user_id = b.user_id AND b.n <= a.n "
     "JOIN users u ON u.user_id = a.user_id", "the name Spark gives it is unknown here"),
])
def test_chains_left_alone_say_why(query, reason):
    out = rewrite_statement(query, MappingRelations(SCHEMA))
    assert out.sql == query and not out.changed
    assert any(reason in n.text for n in out.notes if n.rule == "band_self_join_to_window"), \
        [str(n) for n in out.notes]


def test_chain_aggregate_with_a_condition_through_b_takes_the_band_form():
    query = ("SELECT a.id, SUM(b.v) AS s FROM events a JOIN events b ON a.user_id = b.user_id AND b.n <= a.n "
             "JOIN pages p ON p.page = b.page GROUP BY a.id")
    out = rewrite_statement(query, MappingRelations(SCHEMA))
    assert out.notes.fired == ["band_self_join_to_window"]
    assert any("p.page = b.page relates b with another relation" in n.text
               for n in out.notes if n.rule == "self_join_aggregate_to_window")


def test_a_chain_of_two_self_joins_rewrites_the_first_and_names_the_other():
    query = ("SELECT a.id, c.id FROM events a JOIN events b ON a.user_id = b.user_id AND b.n <= a.n "
             "JOIN events c ON c.user_id = b.user_id AND c.n >= b.n")
    out = rewrite_statement(query, MappingRelations(SCHEMA))
    assert out.notes.fired == ["band_self_join_to_window"]
    [note] = [n for n in out.notes if n.fired]
    assert "b/c" in note.text
    assert "JOIN events AS c ON c.user_id = a.`__sx_pair_" in out.sql  # c still joins b's columns

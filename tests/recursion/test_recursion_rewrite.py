"""The recursion rule on SQL text, without Spark: fixture pairs (input, expected output),
``noop`` for every shape it must leave to Spark, and what ``explain`` says."""

import pytest

import sqlext
from fixture_files import REGENERATE, load
from sqlext.language.dialect import parse_one, to_sql
from sqlext.analysis.notes import Notes
from sqlext.rewrites.pipeline import rewrite_statement
from sqlext.rewrites.recursive_expand import recursive_cte_to_expand

FILE = load("recursive_expand.sql")


def read_fixtures():
    """(input, expected) per case; a noop case expects its input back."""
    return [pytest.param(c.query, c.query if c.noop else c.expected, id=c.title) for c in FILE.cases]


def test_regenerate_fixtures_when_asked():
    if not REGENERATE:
        assert all(c.noop or c.expected for c in FILE.cases), "a fixture has no expected query"
        return
    FILE.regenerate(lambda query: to_sql(recursive_cte_to_expand(parse_one(query))))


@pytest.mark.parametrize("source, expected", read_fixtures())
def test_fixture(source, expected):
    assert to_sql(recursive_cte_to_expand(parse_one(source))) == expected


@pytest.mark.parametrize("source, expected", read_fixtures())
def test_rewritten_text_parses_back(source, expected):
    assert to_sql(parse_one(expected)) == expected


def test_every_shape_has_a_noop_case():
    assert sum(c.noop for c in FILE.cases) >= 6


def test_the_file_fires_the_rule_through_the_pipeline():
    """Each case the rule rewrites alone is one the pipeline rewrites with it (no other rule
    takes the statement first), and each noop case is one no rule touches."""
    for case in FILE.cases:
        out = rewrite_statement(case.query)
        if case.noop:
            assert not out.changed, case.title
        else:
            assert "recursive_cte_to_expand" in out.notes.fired, case.title


def test_pipeline_fires_and_explain_says_why():
    rewritten = rewrite_statement("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) "
                                  "SELECT * FROM r")
    assert rewritten.changed and "RECURSIVE_EXPAND(" in rewritten.sql
    assert "recursive_cte_to_expand" in rewritten.notes.fired


def test_unsupported_recursion_passes_through_unchanged_and_says_why():
    text = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT a.n + b.n FROM r a JOIN r b ON a.n = b.n WHERE a.n < 3) SELECT * FROM r"
    rewritten = rewrite_statement(text)
    assert rewritten.sql == text
    [note] = [n for n in rewritten.notes if n.rule == "recursive_cte_to_expand"]
    assert not note.fired and "reads r 2 times" in note.text


def test_public_rewrite_shows_the_call():
    assert "RECURSIVE_EXPAND(name => 'r'" in sqlext.rewrite(
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r")


def test_rule_only_changes_recursive_ctes_it_expands():
    tree = parse_one("WITH RECURSIVE a AS (SELECT 1 AS n), r(n) AS (SELECT 1 UNION ALL SELECT a.n FROM r JOIN a ON r.n = a.n) "
                     "SELECT * FROM r")
    notes = Notes()
    out = to_sql(recursive_cte_to_expand(tree, notes=notes))
    assert out.startswith("WITH a AS (SELECT 1 AS n), r AS (SELECT * FROM RECURSIVE_EXPAND(")
    assert notes.fired == ["recursive_cte_to_expand"]

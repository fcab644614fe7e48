"""Binding a statement of an incremental run: its kind decided from its text alone, every
refusal made before the checkpoint is touched, and one builder of a run for each kind that keeps
state (the plan dispatches by the kind, nothing else)."""

from __future__ import annotations

import pytest

from sqlext.errors import SqlextError
from sqlext.language.dialect import parse_one, to_sql
from sqlext.streaming import run_available_now
from sqlext.streaming.bind import KINDS, bind
from sqlext.streaming.plan import PLANS

FILTER = "CHANGELOG_FILTER(input => TABLE(STREAM(acc)), key => 'id', predicate => 'balance >= 0')"
STATEMENTS = {
    "stateless": "SELECT id FROM STREAM(acc) WHERE balance > 0",
    "recursion": ("WITH RECURSIVE r(a, b) AS (SELECT src, dst FROM STREAM(e) UNION "
                  "SELECT r.a, e.dst FROM r JOIN STREAM(e) AS e ON r.b = e.src) SELECT * FROM r"),
    "self-join": ("SELECT a.id, b.id AS `b id` FROM STREAM(ev) AS a JOIN STREAM(ev) AS b "
                  "ON a.k = b.k AND b.ts BETWEEN a.ts - 3 AND a.ts"),
    "calls": f"SELECT * FROM {FILTER}",
}


@pytest.mark.parametrize("kind", sorted(STATEMENTS))
def test_each_kind_is_read_off_the_text(kind):
    bound = bind(parse_one(STATEMENTS[kind]))
    assert bound.kind == kind
    assert (bound.root is not None) == (kind == "calls")
    assert [t.this.name.lower() for t in bound.streams] and all(t.this.name == "STREAM" for t in bound.streams)


def test_every_kind_that_keeps_state_has_one_builder():
    assert set(PLANS) == set(KINDS) - {"stateless"}


def test_binding_leaves_the_statement_as_it_was():
    tree = parse_one(f"SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(acc, format => 'debezium')), "
                     "key => 'id', predicate => 'balance >= 0')")
    text = to_sql(tree)
    bound = bind(tree)
    assert to_sql(tree) == text and to_sql(bound.tree) != text  # the bound copy names its ordering column


@pytest.mark.parametrize("sql, said", [
    (f"SELECT * FROM {FILTER} JOIN {FILTER.replace('acc', 'other')} USING (id)", "2 separate calls"),
    ("WITH RECURSIVE r(a) AS (SELECT 1 UNION SELECT a + 1 FROM r WHERE a < 3) "
     f"SELECT * FROM r JOIN {FILTER} ON r.a = id", "a recursion here"),
    ("SELECT 1 AS one", "reads no STREAM"),
])
def test_what_cannot_run_is_refused_before_the_checkpoint_is_touched(spark, tmp_path, sql, said):
    checkpoint = tmp_path / "cp"
    with pytest.raises(SqlextError) as error:
        run_available_now(spark, sql, checkpoint=str(checkpoint), output=str(tmp_path / "out"),
                          sources={"acc": str(tmp_path / "acc"), "other": str(tmp_path / "other")})
    assert error.value.error_class == "UNSUPPORTED_STREAM" and said in str(error.value)
    assert not checkpoint.exists() or not any(checkpoint.iterdir())

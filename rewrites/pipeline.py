"""The ordered list of rules (RULES) and the one entry point that runs them.

Each rule is a function from an expression tree to an expression tree, in its own module. A
rule receives only the keyword arguments it names (``relations``: what is known about the
relations a statement reads; ``notes``: where it says what it did). A rule never raises
because a pattern does not fit; it leaves that part of the tree unchanged and says why.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from rewrites.changelog_filter_to_sql import changelog_filter_to_sql
from rewrites.fk_join_to_sql import fk_join_to_sql
from rewrites.recursive_cte_to_expand import recursive_cte_to_expand
from rewrites.dialect import SparkExt, parse_one, to_sql
from rewrites.notes import Notes
from rewrites.relations import MappingRelations, Relations

RULES: list[Callable[..., exp.Expression]] = [
    changelog_filter_to_sql,
    fk_join_to_sql,
    recursive_cte_to_expand,
]


def rewrite(expression: exp.Expression, **facts) -> exp.Expression:
    """Copy the tree once and run every rule over it, in order."""
    expression = expression.copy()
    for rule in RULES:
        accepted = inspect.signature(rule).parameters
        expression = rule(expression, **{k: v for k, v in facts.items() if k in accepted})
    return expression


@dataclass
class Rewritten:
    """One statement before and after rewriting."""

    original: str
    sql: str
    notes: Notes

    @property
    def changed(self) -> bool:
        return bool(self.notes.fired)


def rewrite_statement(text: str, relations: Relations | None = None) -> Rewritten:
    """Rewrite one statement's text. Text no rule changes is returned exactly as given, so a
    statement with nothing to rewrite reaches Spark as the user wrote it."""
    notes = Notes()
    try:
        tree = parse_one(text)
    except (ParseError, TokenError, ValueError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        notes.skip("parse", f"sqlglot cannot read this statement ({reason}); it is passed to Spark unchanged")
        return Rewritten(text, text, notes)
    out = rewrite(tree, relations=relations, notes=notes)
    spoken = {n.rule for n in notes}
    for rule in RULES:
        if rule.__name__ not in spoken:
            notes.skip(rule.__name__, "nothing in this statement for it to rewrite")
    if not notes.fired:
        return Rewritten(text, text, notes)
    return Rewritten(text, to_sql(out), notes)


__all__ = [
    "RULES", "MappingRelations", "Notes", "Relations", "Rewritten", "SparkExt", "rewrite",
    "rewrite_statement",
]

"""The ordered list of rules (:func:`rules`) and the one entry point that runs them.

Each rule is a function from an expression tree to an expression tree, in its own module. A
rule receives only the keyword arguments it names (``relations``: what is known about the
relations a statement reads; ``notes``: where it says what it did). A rule never raises
because a pattern does not fit; it leaves that part of the tree unchanged and says why.
"""

from __future__ import annotations

import inspect
import os
import re
from dataclasses import dataclass, field
from typing import Callable

from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from sqlext.rewrites.band_self_join_to_window import band_self_join_to_window
from sqlext.rewrites.merge_duplicate_sources import merge_duplicate_sources
from sqlext.rewrites.self_join_aggregate_to_window import self_join_aggregate_to_window
from sqlext.language.dialect import SparkExt, is_stream, parse_one, to_sql
from sqlext.analysis.notes import Notes
from sqlext.analysis.relations import MappingRelations, Relations, Scope
from sqlext.language.sqltree import fresh
from sqlext.functions import catalogue
from sqlext.functions.arguments import find_calls, read_call
from sqlext.functions.recursive_expand import ARGUMENTS as RECURSIVE_ARGUMENTS
from sqlext.functions.recursive_expand import FUNCTION as RECURSIVE_EXPAND
from sqlext.functions.recursive_expand import RecursiveSpec, spec_from_call
from sqlext.errors import SqlextError

# self-joins: name a relation written twice once, then the aggregate form before the band form
# (a band feeding an aggregate needs no pairs at all)
SELF_JOIN_RULES: list[Callable[..., exp.Expression]] = [
    merge_duplicate_sources,
    self_join_aggregate_to_window,
    band_self_join_to_window,
]


def rules() -> list[Callable[..., exp.Expression]]:
    """The rules, in the order they run: each function's rule that writes its calls as plain
    Spark SQL (in the catalogue's order), then the self-join rules, then the rules that write a
    call from other SQL (``WITH RECURSIVE``): those see the statement as the user wrote it, after
    the self-joins inside it were rewritten."""
    functions = [f for f in catalogue.functions() if f.rule is not None]
    return ([f.part("rule") for f in functions if not f.written_by_rule] + SELF_JOIN_RULES
            + [f.part("rule") for f in functions if f.written_by_rule])


STRICT_ENV = "SQLEXT_STRICT"


def strict_default() -> bool:
    """Strict mode unless told otherwise: on when the environment sets ``SQLEXT_STRICT=1``
    (the test suite does, so that a rule's blind spot fails a test instead of being noted)."""
    return os.environ.get(STRICT_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def rewrite(expression: exp.Expression, strict: bool | None = None, **facts) -> exp.Expression:
    """Copy the tree once and run every rule over it, in order.

    A rule that fails on a tree it did not expect (anything but a :class:`SqlextError`, which
    reports bad input to a function) leaves the statement as it was before the rule ran, and
    the failure is noted: passing SQL through unchanged is always safe. In strict mode
    (``strict=True``, or by default when ``SQLEXT_STRICT=1``) that failure propagates instead.
    """
    strict = strict_default() if strict is None else strict
    expression = expression.copy()
    notes = facts.get("notes")
    for rule in rules():
        accepted = inspect.signature(rule).parameters
        before = expression.copy()
        try:
            expression = rule(expression, **{k: v for k, v in facts.items() if k in accepted})
        except SqlextError:
            raise
        except Exception as error:  # noqa: BLE001 - a rule's blind spot must not break the statement
            if strict:
                raise
            expression = before
            if notes is not None:
                notes.items = [n for n in notes.items if n.rule != rule.__name__]
                notes.skip(rule.__name__, f"the rule could not read this statement ({type(error).__name__}: "
                                          f"{str(error)[:120]}); it is left unchanged")
    return expression


@dataclass
class Recursion:
    """A recursion the rewritten statement reads: run it first (``spec``, whose anchor and
    step texts ``scoped`` puts under the CTEs visible where the recursion was written) and
    register its result as the temporary view ``view``."""

    view: str
    spec: RecursiveSpec
    scoped: Callable[[str], str]


@dataclass
class Rewritten:
    """One statement before and after rewriting, as a plan to run: ``sql`` is the rewritten
    text (what ``sqlext.rewrite`` shows); ``recursions`` must run before ``runnable_sql``,
    which reads their results by view name. Without recursions ``runnable_sql`` is ``sql``."""

    original: str
    sql: str
    notes: Notes
    recursions: list[Recursion] = field(default_factory=list)
    runnable_sql: str = ""
    # the path each recursion will take and why, one line each (``sqlext.explain`` with a
    # session fills it in: deciding needs Spark)
    paths: list[str] = field(default_factory=list)
    # the sources the statement reads with STREAM(name), as written: only an incremental run
    # reads them (a batch run refuses the statement, saying so)
    streams: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.runnable_sql = self.runnable_sql or self.sql

    @property
    def changed(self) -> bool:
        return bool(self.notes.fired)


def recursions_of(tree: exp.Expression) -> tuple[exp.Expression, list[Recursion]]:
    """The ``RECURSIVE_EXPAND`` calls of a rewritten tree as :class:`Recursion` steps, innermost
    first, and a copy of the tree where each call is replaced by its view."""
    tree = tree.copy()
    steps = []
    while True:
        calls = find_calls(tree, RECURSIVE_EXPAND)
        if not calls:
            return tree, steps
        table = calls[0]
        call = read_call(table, RECURSIVE_EXPAND, RECURSIVE_ARGUMENTS)
        anchor = call.tables.get("anchor")
        if anchor is None or "step" not in call.literals:
            raise SqlextError("MISSING_ARGUMENT", function=RECURSIVE_EXPAND, argument="anchor and step",
                              example="TABLE(SELECT ...), step => 'SELECT ...'")
        spec = spec_from_call(call.literals, to_sql(anchor.this))
        scope = Scope.at(table).without(spec.name)

        def scoped(text: str, scope=scope) -> str:
            return to_sql(scope.wrap(parse_one(text)))

        view = fresh("recursive_")
        steps.append(Recursion(view, spec, scoped))
        replacement = exp.Table(this=exp.to_identifier(view))
        if table.args.get("alias"):
            replacement.set("alias", table.args["alias"].copy())
        table.replace(replacement)


_MAY_HOLD_A_QUERY = re.compile("select", re.IGNORECASE)


def rewrite_statement(text: str, relations: Relations | None = None, strict: bool | None = None) -> Rewritten:
    """Rewrite one statement's text. Text no rule changes is returned exactly as given, so a
    statement with nothing to rewrite reaches Spark as the user wrote it. ``strict``: see
    :func:`rewrite` (text sqlglot cannot parse is passed through in both modes)."""
    notes = Notes()
    if not _MAY_HOLD_A_QUERY.search(text):
        # every rule rewrites a query; a statement without one (an INSERT ... VALUES of loaded
        # rows, DDL, SET) is passed on unread: parsing a large one costs seconds
        for rule in rules():
            notes.skip(rule.__name__, "the statement holds no query")
        return Rewritten(text, text, notes)
    try:
        tree = parse_one(text)
    except (ParseError, TokenError, ValueError, IndexError, KeyError, AttributeError, TypeError,
            RecursionError) as error:  # sqlglot's parser fails in these ways on malformed text
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        notes.skip("parse", f"sqlglot cannot read this statement ({reason}); it is passed to Spark unchanged")
        return Rewritten(text, text, notes)
    streams = [to_sql(table.this) for table in tree.find_all(exp.Table) if is_stream(table)]
    out = rewrite(tree, strict=strict, relations=relations, notes=notes)
    spoken = {n.rule for n in notes}
    for rule in rules():
        if rule.__name__ not in spoken:
            notes.skip(rule.__name__, "nothing in this statement for it to rewrite")
    if not notes.fired:
        return Rewritten(text, text, notes, streams=streams)
    runnable, recursions = recursions_of(out)
    return Rewritten(text, to_sql(out), notes, recursions, to_sql(runnable) if recursions else "", streams=streams)


__all__ = [
    "SELF_JOIN_RULES", "STRICT_ENV", "MappingRelations", "Notes", "Relations", "Rewritten", "SparkExt", "rewrite", "rules",
    "rewrite_statement", "strict_default",
]

"""The engine's dispatch: which of a statement's FROM items calls a function that runs as a
keyed operator (:func:`keyed_call`), and the purpose a checkpoint records for a statement
(:func:`purpose_of`). Both read the function catalogue (:mod:`sqlext.functions.catalogue`): a
function with an operator there runs incrementally, and its entry says which arguments take a
table and which name its keys.
"""

from __future__ import annotations

from sqlglot import exp

from sqlext.functions import catalogue
from sqlext.functions.arguments import find_calls
from sqlext.functions.definition import Function
from sqlext.language.dialect import to_sql
from sqlext.streaming.checkpoint import Purpose


def keyed_call(table: exp.Expression) -> Function | None:
    """The keyed function a FROM item calls, if it calls one."""
    if isinstance(table, exp.Table) and isinstance(table.this, (exp.Anonymous, exp.Func)):
        found = catalogue.function(table.this.name)
        return found if found is not None and found.operator is not None else None
    return None


def build_operator(keyed: Function, spark, table, literals, inputs, folder, buckets, feed):
    """The operator of one call of ``keyed`` (its class's ``build``)."""
    return keyed.part("operator").build(spark, table, literals, inputs, folder, buckets, feed)


def purpose_of(tree: exp.Expression):
    """The purpose of a parsed statement (read from its text alone: no Spark)."""
    statement = to_sql(_without_comments(tree))
    calls = [(call, keyed) for keyed in catalogue.keyed() for call in find_calls(tree, keyed.name)]
    if calls:  # the outermost call: the one whose rows the statement reads
        call, keyed = min(calls, key=lambda c: _depth(c[0]))
        literals = keyed.read(call).literals
        keys = tuple(f"{name} => {literals[name]!r}" for name in keyed.keys if literals.get(name) is not None)
        return Purpose(statement, keyed.name, literals.get("emit") or "changes", keys)
    if any(w.args.get("recursive") for w in tree.find_all(exp.With)):
        return Purpose(statement, "WITH RECURSIVE")
    return Purpose(statement, "SELECT")


def _depth(node: exp.Expression) -> int:
    depth = 0
    while node.parent is not None:
        node, depth = node.parent, depth + 1
    return depth


def _without_comments(tree: exp.Expression) -> exp.Expression:
    tree = tree.copy()
    for node in tree.walk():
        node.comments = None
    return tree

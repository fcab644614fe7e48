"""The functions that run incrementally as keyed operators, each registered once.

An entry says what the engine and everything around it need to know of a function: its
arguments and which of them take a table (an input: a stream, or another call's change feed),
the arguments that name its keys (a checkpoint records them), why it keeps state (the reason a
run over the new rows alone would be wrong, which the dbt adapter gives), and how its operator
is built over its inputs. The dispatcher (:mod:`sqlext.streaming`), the checkpoint's purpose
(:mod:`sqlext.streaming.checkpoint`) and the dbt adapter read this table; adding a function is
its operator module and an entry here (docs/contributing.md shows it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sqlglot import exp


@dataclass(frozen=True)
class Keyed:
    """One function that runs as a keyed operator."""

    name: str
    arguments: tuple[str, ...]
    tables: tuple[str, ...]  # the arguments that take a table
    keys: tuple[str, ...]  # the arguments that name its keys
    why: str  # why a run over the new rows alone would be wrong
    # (spark, the call's node, its literal arguments, its inputs by argument, its state folder,
    #  its state's buckets, whether it feeds an aggregate) -> the operator
    build: Callable

    def read(self, call: exp.Table):
        """The call's arguments, read and checked (:func:`sqlext.functions.arguments.read_call`)."""
        from sqlext.functions.arguments import read_call

        return read_call(call, self.name, self.arguments, tables=self.tables)

    def emit(self, call: exp.Table) -> str:
        return (self.read(call).literals.get("emit") or "changes").lower()


def _filter(spark, table, literals, inputs, folder, buckets, feed):
    from sqlext.streaming.changelog_filter import FilterOperator

    return FilterOperator.build(spark, table, literals, inputs, folder, buckets, feed)


def _fk_join(spark, table, literals, inputs, folder, buckets, feed):
    from sqlext.streaming.fk_join import FkJoinOperator

    return FkJoinOperator.build(spark, table, literals, inputs, folder, buckets, feed)


def _registry() -> dict[str, Keyed]:
    from sqlext.functions import changelog_filter, fk_join

    return {
        changelog_filter.FUNCTION: Keyed(
            changelog_filter.FUNCTION, tuple(changelog_filter.ARGUMENTS), changelog_filter.TABLES, ("key",),
            "filtering its input change feed to the new versions turns the update of a key seen in an earlier "
            "run into an insert, and loses its delete", _filter),
        fk_join.FUNCTION: Keyed(
            fk_join.FUNCTION, tuple(fk_join.ARGUMENTS), fk_join.TABLES, ("left_key", "foreign_key", "right_key"),
            "filtering its input change feeds to the new versions turns the update of a key seen in an earlier "
            "run into an insert, and joins new rows only to new rows", _fk_join),
    }


KEYED: dict[str, Keyed] = _registry()


def keyed_call(table: exp.Expression) -> Keyed | None:
    """The registered function a FROM item calls, if it calls one."""
    if isinstance(table, exp.Table) and isinstance(table.this, (exp.Anonymous, exp.Func)):
        return KEYED.get(table.this.name.upper())
    return None


def purpose_of(tree: exp.Expression):
    """The purpose of a parsed statement (read from its text alone: no Spark)."""
    from sqlext.functions.arguments import find_calls
    from sqlext.language.dialect import to_sql
    from sqlext.streaming.checkpoint import Purpose

    statement = to_sql(_without_comments(tree))
    calls = [(call, keyed) for keyed in KEYED.values() for call in find_calls(tree, keyed.name)]
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

"""What sqlext knows of one function (:class:`Function`), as its spec module defines it and the
catalogue (:mod:`sqlext.functions.catalogue`) lists it."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from sqlext.functions.arguments import read_call


@dataclass(frozen=True)
class Function:
    """One sqlext function, as every part of sqlext sees it."""

    name: str  # as a statement calls it: FROM NAME(...)
    summary: str  # one line: what it does (the CLI's list of functions)
    arguments: tuple[str, ...]
    tables: tuple[str, ...] = ()  # the arguments that take a table
    keys: tuple[str, ...] = ()  # the arguments that name its keys (a checkpoint records them)
    # for each table argument, the arguments naming columns every one of its rows must hold a
    # value for (a key, a foreign key, an order): a JSON record without such a field is refused
    needs: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # why a run over only the new rows would be wrong (the function keeps state between runs);
    # empty for a function whose result over new rows alone is right
    why: str = ""
    # "module:attribute" of each part, imported when first used (None: the function has none)
    rule: str | None = None  # the rewrite rule: a tree in, a tree out
    operator: str | None = None  # the incremental operator (a KeyedOperator subclass)
    table_function: str | None = None  # a Python table function registered under ``name``
    # the SQL a user writes where a rule writes the call from other SQL (WITH RECURSIVE);
    # None: users call the function by its name
    called_as: str | None = None

    @property
    def written_by_rule(self) -> bool:
        """Whether users write other SQL that the function's rule turns into a call of it (its
        rule then runs after the rules that rewrite calls and self-joins, seeing that SQL)."""
        return self.called_as is not None

    @property
    def shown_as(self) -> str:
        """The name a user knows the function by."""
        return self.called_as or self.name

    def part(self, which: str) -> Any:
        """The part ``which`` (``"rule"``, ``"operator"``, ``"table_function"``), imported."""
        reference = getattr(self, which)
        if reference is None:
            raise LookupError(f"{self.name} has no {which}")
        module, _, attribute = reference.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def read(self, call):
        """A call's arguments, read and checked (:func:`sqlext.functions.arguments.read_call`)."""
        return read_call(call, self.name, self.arguments, tables=self.tables)

    def emit(self, call) -> str:
        """What a call emits (``changes`` unless it says otherwise)."""
        return (self.read(call).literals.get("emit") or "changes").lower()

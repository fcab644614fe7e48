"""The catalogue of sqlext's functions: one :class:`~sqlext.functions.definition.Function` per function, and every part of
sqlext that needs the list of functions reads it from here.

A function's spec module (``sqlext/functions/<stem>.py``) defines its ``DEFINITION``: its name,
its arguments, which of them take a table and which name its keys, why its result depends on
all earlier input, and where its parts live: the rule that writes a call as plain Spark SQL
(``sqlext.rewrites.<stem>``), the kernel registered as a table function in each session
(``sqlext.udfs.<stem>``), the operator that runs it incrementally
(``sqlext.streaming.<stem>``). The parts are named as ``"module:attribute"`` and imported when
first used, so this layer, below the rules and the engine, names them without importing them.

The consumers: the rewrite pipeline's rules (:func:`sqlext.rewrites.pipeline.rules`), the table
functions a session registers (:func:`sqlext.session.register_table_functions`), the names a
misspelt function is compared with (:func:`sqlext.runner.nearest_function`), the engine's
dispatch and refusals (:mod:`sqlext.streaming.registry`, :mod:`sqlext.streaming.bind`), dbt's
stateful models (``dbt.adapters.sqlext.impl.stateful_functions``) and the CLI's list of
functions (``sqlext --help``). Adding a function adds its modules and one line to
:data:`CATALOGUE`; docs/contributing.md says which files.

>>> [f.name for f in functions()]
['CHANGELOG_FILTER', 'FK_JOIN', 'RECURSIVE_EXPAND']
>>> [f.name for f in keyed()], [f.called_as for f in functions() if f.written_by_rule]
(['CHANGELOG_FILTER', 'FK_JOIN'], ['WITH RECURSIVE'])
"""

from __future__ import annotations

from sqlext.functions import changelog_filter, fk_join, recursive_expand
from sqlext.functions.definition import Function


# Every function, by name, in the order their rules run; one line per function. Read it through
# the functions below (a test adds a function here and sees it everywhere).
CATALOGUE: dict[str, Function] = {f.name: f for f in (
    changelog_filter.DEFINITION,
    fk_join.DEFINITION,
    recursive_expand.DEFINITION,
)}


def functions() -> list[Function]:
    return list(CATALOGUE.values())


def function(name: str) -> Function | None:
    """The function called ``name`` (any case), if sqlext has one."""
    return CATALOGUE.get(name.upper())


def keyed() -> list[Function]:
    """The functions that run incrementally as keyed operators."""
    return [f for f in functions() if f.operator is not None]


def stateful() -> list[Function]:
    """The functions whose result depends on all earlier input."""
    return [f for f in functions() if f.why]


def callable_names() -> list[str]:
    """The names users call functions by in FROM (a misspelt one is compared with these)."""
    return [f.name for f in functions() if not f.written_by_rule]


def listing() -> str:
    """The functions, one line each, as ``sqlext --help`` lists them."""
    width = max(len(f.shown_as) for f in functions())
    return "\n".join(f"  {f.shown_as.ljust(width)}  {f.summary}" for f in functions())

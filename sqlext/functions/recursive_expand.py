"""RECURSIVE_EXPAND in the catalogue: the call that the recursive-CTE rule writes for a
``WITH RECURSIVE`` query (its arguments), the recursion it describes (:class:`RecursiveSpec`),
and the errors a recursion can end with, as every execution path reports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlext.errors import SqlextError
from sqlext.functions.definition import Function
from sqlext.language.sqltree import read_identifier_list

FUNCTION = "RECURSIVE_EXPAND"
ARGUMENTS = ["name", "columns", "anchor", "step", "distinct", "max_level", "key"]

# At most this many rows in a recursion's result, unless the session sets
# spark.sqlext.recursion.rowLimit (Spark's native recursion has spark.sql.cteRecursionRowLimit).
DEFAULT_ROW_LIMIT = 10_000_000
ROW_LIMIT_CONF = "spark.sqlext.recursion.rowLimit"

DEFINITION = Function(
    FUNCTION, "a recursive CTE run as one pass of a graph walk, or level by level", tuple(ARGUMENTS),
    tables=("anchor",),
    why="a recursion over only the new rows misses every path through the rows of earlier runs",
    rule="sqlext.rewrites.recursive_expand:recursive_cte_to_expand",
    called_as="WITH RECURSIVE")


@dataclass
class RecursiveSpec:
    name: str
    columns: list[str]
    anchor_sql: str
    step_sql: str
    distinct: bool
    max_level: int
    key: list[str] = field(default_factory=list)
    row_limit: int = DEFAULT_ROW_LIMIT


def level_limit_error(name: str, level: int, limit: int) -> SqlextError:
    return SqlextError("RECURSION_LEVEL_LIMIT_EXCEEDED", function=FUNCTION, name=name, level=level,
                       limit=limit, suggested=max(2 * limit, 100))


def row_limit_error(name: str, level: int, limit: int) -> SqlextError:
    return SqlextError("RECURSION_ROW_LIMIT_EXCEEDED", function=FUNCTION, name=name, level=level,
                       limit=limit, suggested=10 * limit)


def repeats_error(name: str, level: int) -> SqlextError:
    return SqlextError("RECURSION_REPEATS", function=FUNCTION, name=name, level=level, previous=level - 1)


def spec_from_call(literals: dict[str, Any], anchor_sql: str) -> RecursiveSpec:
    # the rule writes each list with sqltree.identifier_list: a name may hold a comma or a backtick
    columns = read_identifier_list(literals.get("columns"))
    key = read_identifier_list(literals.get("key"))
    return RecursiveSpec(
        name=literals["name"], columns=columns, anchor_sql=anchor_sql, step_sql=literals["step"],
        distinct=str(literals.get("distinct")).lower() == "true", max_level=int(literals["max_level"]),
        key=key,
    )

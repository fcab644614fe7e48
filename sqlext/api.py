"""The public API: install sqlext on a session, rewrite SQL text, explain what the rules do,
and run SQL (``sqlext.sql``). ``import sqlext`` re-exports all of it."""

from __future__ import annotations

from typing import Mapping

from sqlext.errors import SqlextError
from sqlext.runner import run_statement
from sqlext.session import install

__all__ = ["install", "rewrite", "explain", "sql"]


def rewrite(text: str, schema: Mapping | None = None) -> str:
    """The Spark SQL that would run for ``text`` (one or more statements), without Spark.

    ``schema`` maps table names to their columns (``{"t": ["id", "v", "_commit_version"]}``
    or ``{"t": {"id": "bigint", ...}}``); calls over relations it does not describe are kept
    as they are, for the registered table functions.
    """
    from sqlext.rewrites.pipeline import MappingRelations, rewrite_statement
    from sqlext.statements import split_statements

    relations = MappingRelations(schema)
    parts = [rewrite_statement(s.text, relations).sql for s in split_statements(text)]
    return ";\n".join(parts)


def explain(text: str, spark=None, schema: Mapping | None = None):
    """Each statement of ``text`` before and after rewriting, with what every rule did."""
    from sqlext.rewrites.pipeline import MappingRelations, rewrite_statement
    from sqlext.session import SparkRelations
    from sqlext.statements import split_statements

    relations = SparkRelations(spark) if spark is not None else MappingRelations(schema)
    results = []
    for statement in split_statements(text):
        results.append(rewrite_statement(statement.text, relations))
        if spark is not None and _defines_temp_view(statement.text):
            # later statements of the file read it; a temporary view lives in this session only
            run_statement(spark, statement.text)
    return results


def _defines_temp_view(text: str) -> bool:
    from sqlglot import exp

    from sqlext.rewrites.dialect import parse_one

    try:
        tree = parse_one(text)
    except Exception:  # noqa: BLE001 - not one sqlglot reads, so not one explain runs
        return False
    return (isinstance(tree, exp.Create) and (tree.kind or "").upper() == "VIEW"
            and any(isinstance(p, exp.TemporaryProperty) for p in tree.find_all(exp.TemporaryProperty)))


def sql(spark, text: str):
    """Rewrite ``text`` and run it on ``spark``; returns the DataFrame of the last statement.

    sqlext is installed on the session first if it is not yet.
    """
    from sqlext.session import ensure_installed
    from sqlext.statements import split_statements

    ensure_installed(spark)
    frame = None
    for statement in split_statements(text):
        frame = run_statement(spark, statement.text)
    if frame is None:
        raise SqlextError(
            "UNSUPPORTED_STATEMENT", function="sqlext sql", reason="the text holds no statement",
            fix="Pass at least one SQL statement.",
        )
    return frame

"""The public API: install sqlext on a session, rewrite SQL text, explain what the rules do,
and run SQL (``sqlext.sql``). ``import sqlext`` re-exports all of it."""

from __future__ import annotations

from typing import Mapping

from sqlext.errors import SqlextError
from sqlext.language.dialect import parse_one
from sqlext.runner import recursion_paths, run_statement
from sqlext.session import install, SparkRelations, ensure_installed
from sqlext.statements import split_statements

__all__ = ["install", "rewrite", "explain", "sql"]


def rewrite(text: str, schema: Mapping | None = None) -> str:
    """The Spark SQL that would run for ``text`` (one or more statements), without Spark.

    ``schema`` maps table names to their columns (``{"t": ["id", "v", "_commit_version"]}``
    or ``{"t": {"id": "bigint", ...}}``); calls over relations it does not describe are kept
    as they are, for the registered table functions.
    """
    from sqlext.rewrites.pipeline import MappingRelations, rewrite_statement

    relations = MappingRelations(schema)
    parts = [rewrite_statement(s.text, relations).sql for s in split_statements(text)]
    return ";\n".join(parts)


def explain(*spark_and_text, spark=None, schema: Mapping | None = None):
    """Each statement of the text before and after rewriting, with what every rule did and,
    given a session, the path each recursion will take (``paths``).

    ``explain(spark, text)``, in the order of ``sql(spark, text)``, asks the session about the
    relations the text reads; ``explain(text)`` (with ``schema=`` as for :func:`rewrite`) needs
    no Spark. The older order, ``explain(text, spark)`` or ``explain(text, spark=spark)``, is
    read too: the text is the argument that is a string.
    """
    from sqlext.rewrites.pipeline import MappingRelations, rewrite_statement

    spark, text = _session_and_text(spark_and_text, spark, "explain")
    relations = SparkRelations(spark) if spark is not None else MappingRelations(schema)
    results = []
    for statement in split_statements(text):
        result = rewrite_statement(statement.text, relations)
        if spark is not None:
            result.paths = recursion_paths(spark, result)
        results.append(result)
        if spark is not None and _defines_temp_view(statement.text):
            # later statements of the file read it; a temporary view lives in this session only
            run_statement(spark, statement.text)
    return results


def _session_and_text(given: tuple, spark, function: str) -> tuple:
    """``(spark, text)`` from positional arguments in either order (the text is the string)
    and an optional ``spark=`` keyword.

    >>> _session_and_text(("SELECT 1",), None, "explain")
    (None, 'SELECT 1')
    >>> _session_and_text(("SELECT 1", "session"), None, "explain")
    Traceback (most recent call last):
    TypeError: sqlext.explain takes a Spark session and one SQL text, in either order; got 2 strings
    """
    texts = [g for g in given if isinstance(g, str)]
    sessions = [g for g in given if not isinstance(g, str) and g is not None]
    if spark is not None:
        sessions.append(spark)
    if len(texts) != 1 or len(sessions) > 1 or len(given) > 2:
        got = f"{len(texts)} strings" if len(texts) != 1 else f"{len(sessions)} sessions"
        raise TypeError(f"sqlext.{function} takes a Spark session and one SQL text, in either order; got {got}")
    return (sessions[0] if sessions else None), texts[0]


def _defines_temp_view(text: str) -> bool:
    from sqlglot import exp

    try:
        tree = parse_one(text)
    except Exception:  # noqa: BLE001 - not one sqlglot reads, so not one explain runs
        return False
    return (isinstance(tree, exp.Create) and (tree.kind or "").upper() == "VIEW"
            and any(isinstance(p, exp.TemporaryProperty) for p in tree.find_all(exp.TemporaryProperty)))


def sql(spark, text: str):
    """Rewrite ``text`` and run it on ``spark``; returns the DataFrame of the last statement.

    sqlext is installed on the session first if it is not yet. ``sql(text, spark)`` is read
    too (the text is the argument that is a string), as :func:`explain` reads either order.
    """
    spark, text = _session_and_text((spark, text), None, "sql")
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

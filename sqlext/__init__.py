"""sqlext: Kafka Streams table semantics for Spark SQL.

>>> import sqlext
>>> "CHANGELOG_FILTER" in sqlext.rewrite(
...     "SELECT * FROM CHANGELOG_FILTER(input => TABLE(t), key => 'id', predicate => 'v > 0')")
True

(Without a session or a schema the input's columns are unknown, so the call is kept for the
registered table function; with ``schema=`` it is expanded into native SQL.)
"""

from __future__ import annotations

from typing import Mapping

from sqlext.errors import SqlextError

__all__ = ["SqlextError", "install", "rewrite", "sql", "explain", "load_ipython_extension"]
__version__ = "0.1.0"


def install(spark):
    """Register sqlext's table functions on ``spark`` and return it."""
    from sqlext.session import INSTALLED_FLAG, register_table_functions

    register_table_functions(spark)
    spark.conf.set(INSTALLED_FLAG, "true")
    return spark


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
    from sqlext.session import INSTALLED_FLAG
    from sqlext.statements import split_statements

    if spark.conf.get(INSTALLED_FLAG, "false") != "true":
        install(spark)
    frame = None
    for statement in split_statements(text):
        frame = run_statement(spark, statement.text)
    if frame is None:
        raise SqlextError(
            "UNSUPPORTED_STATEMENT", function="sqlext sql", reason="the text holds no statement",
            fix="Pass at least one SQL statement.",
        )
    return frame


def run_statement(spark, text: str):
    """Rewrite one statement against the session and hand it to Spark (lazily, as spark.sql)."""
    from pyspark.errors import PySparkException

    from sqlext.rewrites.pipeline import rewrite_statement
    from sqlext.errors import find_in
    from sqlext.session import SparkRelations

    from sqlglot.errors import ParseError, TokenError

    rewritten = rewrite_statement(text, SparkRelations(spark))
    try:
        if "recursive_cte_to_expand" in rewritten.notes.fired:
            from sqlext.udfs.recursive_plan import run_calls

            return spark.sql(run_calls(spark, rewritten.sql))
        return spark.sql(rewritten.sql)
    except (ParseError, TokenError) as error:  # a part sqlext wrote cannot be read back
        raise SqlextError(
            "UNSUPPORTED_STATEMENT", function="sqlext sql",
            reason=f"sqlext cannot read back a part of the rewritten statement "
                   f"({str(error).splitlines()[0] if str(error) else type(error).__name__})",
            fix="Run it with spark.sql, or simplify the recursive CTE's anchor or step.") from None
    except PySparkException as error:
        ours = find_in(error)
        if ours is not None:
            raise ours from None
        raise


def load_ipython_extension(ipython) -> None:
    """``%load_ext sqlext``: the ``%%sqlext`` cell magic (see ``sqlext.magic``)."""
    from sqlext.magic import load_ipython_extension as load

    load(ipython)

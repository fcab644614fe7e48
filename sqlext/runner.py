"""The one statement runner: every surface (``sqlext.sql``, the CLI, the notebook magic, the
model runner) runs a statement and reports its error through here.

A statement is rewritten into a plan (:class:`sqlext.rewrites.pipeline.Rewritten`): the SQL to
run, and the recursions it reads, which must run first. Each recursion's result is registered
as a temporary view under the name the plan gives it, the statement is handed to Spark, and
the views are dropped again, also when something fails. Spark analyses a statement when
``spark.sql`` returns, so the DataFrame keeps what it read after the views are gone. A Spark
Connect session analyses lazily, on every action: there the views stay for the session.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlext.errors import SqlextError, find_in, note_rewritten, spark_error_summary

FUNCTION = "sqlext sql"


def run_statement(spark, text: str, on_plan=None):
    """Rewrite one statement against the session and hand it to Spark (lazily, as spark.sql).

    ``on_plan``, if given, is called with the statement's plan (a
    :class:`sqlext.rewrites.pipeline.Rewritten`) before anything runs, so that a caller can
    log what the rules did. Raises :class:`SqlextError` for input sqlext refuses, or Spark's
    own exception.
    """
    from pyspark.errors import PySparkException
    from sqlglot.errors import ParseError, TokenError

    from sqlext.rewrites.pipeline import rewrite_statement
    from sqlext.session import SparkRelations

    plan = rewrite_statement(text, SparkRelations(spark))
    if on_plan is not None:
        on_plan(plan)
    views: list[str] = []
    try:
        for recursion in plan.recursions:
            from sqlext.udfs.recursion import expand

            expand(spark, recursion.spec, recursion.scoped).createOrReplaceTempView(recursion.view)
            views.append(recursion.view)
        return spark.sql(plan.runnable_sql)
    except (ParseError, TokenError) as error:  # a part sqlext wrote cannot be read back
        raise SqlextError(
            "UNSUPPORTED_STATEMENT", function=FUNCTION,
            reason=f"sqlext cannot read back a part of the rewritten statement "
                   f"({str(error).splitlines()[0] if str(error) else type(error).__name__})",
            fix="Run it with spark.sql, or simplify the recursive CTE's anchor or step.") from None
    except PySparkException as error:
        ours = find_in(error)
        if ours is not None:
            raise ours from None
        if plan.changed:
            note_rewritten(error)
        raise
    finally:
        if views and not _is_connect(spark):
            for view in views:
                spark.catalog.dropTempView(view)


def _is_connect(spark) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def error_message(error: BaseException) -> str | None:
    """The ``[CLASS] message`` line to show a user for an error a statement raised, or None
    when the error is not one a statement reports (a bug: let it propagate)."""
    from pyspark.errors import PySparkException

    if isinstance(error, SqlextError):
        return str(error)
    if isinstance(error, PySparkException):
        ours = find_in(error)
        return str(ours) if ours else spark_error_summary(error)
    return None


@dataclass
class Outcome:
    """A statement's result as the interactive surfaces show it: the frame, its first rows
    (``limit`` of them; ``truncated`` if there were more), or the error's message."""

    frame: object = None
    columns: list | None = None
    rows: list | None = None
    truncated: bool = False
    error: str | None = None


def run_and_fetch(spark, text: str, limit: int) -> Outcome:
    """Run one statement and fetch up to ``limit`` rows of its result (none for a statement
    without columns); a statement's error becomes ``Outcome.error``."""
    plans = []
    try:
        frame = run_statement(spark, text, on_plan=plans.append)
        if not frame.columns:
            return Outcome(frame=frame, columns=[])
        rows = [tuple(r) for r in frame.limit(limit + 1).collect()]
    except Exception as error:  # noqa: BLE001 - only errors with a message are reported
        if plans and plans[0].changed:
            note_rewritten(error)
        message = error_message(error)
        if message is None:
            raise
        return Outcome(error=message)
    return Outcome(frame=frame, columns=list(frame.columns), rows=rows[:limit], truncated=len(rows) > limit)

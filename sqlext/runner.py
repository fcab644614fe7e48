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

from sqlext.errors import SqlextError, exception_chain, find_in, note_rewritten, spark_error_summary

FUNCTION = "sqlext sql"


def run_statement(spark, text: str, on_plan=None, function: str = FUNCTION):
    """Rewrite one statement against the session and hand it to Spark (lazily, as spark.sql).

    ``on_plan``, if given, is called with the statement's plan (a
    :class:`sqlext.rewrites.pipeline.Rewritten`) before anything runs, so that a caller can
    log what the rules did. Raises :class:`SqlextError` for input sqlext refuses, or Spark's
    own exception.
    """
    from pyspark.errors import PySparkException
    from sqlglot.errors import ParseError, TokenError

    from sqlext.delta import with_change_feeds
    from sqlext.rewrites.pipeline import rewrite_statement
    from sqlext.session import SparkRelations

    # the Delta change feeds the statement reads, as temporary views (dropped with the others)
    runnable, views = with_change_feeds(spark, text, function)
    try:
        plan = rewrite_statement(runnable, SparkRelations(spark))
        if plan.streams:
            raise stream_in_batch(plan.streams, text, function)
        if on_plan is not None:
            on_plan(plan)
    except BaseException:
        _drop_views(spark, views)
        raise
    try:
        for recursion in plan.recursions:
            from sqlext.recursion.paths import expand

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
        if isinstance(error, SqlextError):  # raised as sqlext's already, from Spark's (spark_errors)
            raise
        ours = find_in(error) or misspelt_function(error, function)
        if ours is not None:
            raise ours from None
        if plan.changed:
            note_rewritten(error)
        raise
    finally:
        _drop_views(spark, views)


def _drop_views(spark, views: list[str]) -> None:
    if views and not is_connect(spark):
        for view in views:
            spark.catalog.dropTempView(view)


def stream_in_batch(streams: list[str], text: str, function: str = FUNCTION) -> SqlextError:
    """The error of a batch run over ``STREAM(...)``: only an incremental run reads a stream.
    It shows the same statement with each source read whole, the batch query it adds up to."""
    from sqlext.language.dialect import batch_form

    try:
        batch = batch_form(text)
    except Exception:  # noqa: BLE001 - a STREAM(...) sqlext cannot read back: name the sources only
        batch = None
    return SqlextError("STREAM_IN_BATCH_QUERY", function=function, streams=", ".join(dict.fromkeys(streams)),
                       batch=batch or "the statement with STREAM(name) replaced by name")


def table_functions() -> list[str]:
    """The names a statement calls in FROM that are sqlext's: the catalogue's functions that users
    call by name, and STREAM (a misspelt name is compared with them)."""
    from sqlext.functions import catalogue

    return [*catalogue.callable_names(), "STREAM"]


# Spark's classes for a function it does not know: in FROM, and anywhere else
_UNKNOWN_FUNCTION = {"UNRESOLVABLE_TABLE_VALUED_FUNCTION": "name", "UNRESOLVED_ROUTINE": "routineName"}


def misspelt_function(error: BaseException, function: str = FUNCTION) -> SqlextError | None:
    """``[UNKNOWN_FUNCTION]`` for Spark's error about a function it does not know, where the
    name is close to one of sqlext's table functions (``CHANGELOG_FILTR``); None otherwise.

    >>> nearest_function("`changelog_filtr`"), nearest_function("fk_jion"), nearest_function("explode_outer")
    ('CHANGELOG_FILTER', 'FK_JOIN', None)
    """
    try:
        condition = error.getCondition()
        parameters = dict(error.getMessageParameters() or {})
    except Exception:  # noqa: BLE001 - not a classed Spark error
        return None
    name = parameters.get(_UNKNOWN_FUNCTION.get(condition, ""), "")
    nearest = nearest_function(name)
    if nearest is None:
        return None
    return SqlextError("UNKNOWN_FUNCTION", function=function, name=name.replace("`", ""), nearest=nearest,
                       available=", ".join(table_functions()))


def nearest_function(name: str) -> str | None:
    """The sqlext table function whose name is closest to ``name`` (a Spark name, perhaps
    quoted and qualified), if one is close enough to be a misspelling of it."""
    import difflib

    plain = name.replace("`", "").split(".")[-1].upper()
    names = table_functions()
    if not plain or plain in names:
        return None
    found = difflib.get_close_matches(plain, names, n=1, cutoff=0.75)
    return found[0] if found else None


def recursion_paths(spark, plan) -> list[str]:
    """The path each recursion of ``plan`` will take and why, one line each, decided by the code
    that runs it (:func:`sqlext.recursion.paths.choose_path`): only Spark's analysis runs. A
    recursion that reads another one's result is decided when it runs, after that one."""
    from dataclasses import replace

    from sqlglot import exp

    from sqlext.language.dialect import parse_one
    from sqlext.recursion.paths import choose_path

    lines = []
    earlier: dict[str, str] = {}  # view -> the recursion it holds
    for recursion in plan.recursions:
        spec = recursion.spec
        read = {t.name for text in (spec.anchor_sql, spec.step_sql)
                for t in parse_one(recursion.scoped(text)).find_all(exp.Table)}
        first = next((earlier[view] for view in earlier if view in read), None)
        if first is not None:
            lines.append(f"recursion {spec.name}: its path is chosen when it runs, after {first}, whose "
                         "result it reads")
        else:
            try:
                lines.append(choose_path(spark, replace(spec, columns=list(spec.columns)),
                                         recursion.scoped).describe())
            except Exception as error:  # noqa: BLE001 - only errors with a message are reported
                message = error_message(error)
                if message is None:
                    raise
                lines.append(f"recursion {spec.name} cannot be planned here: {message}")
        earlier[recursion.view] = spec.name
    return lines


def is_connect(spark) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def error_message(error: BaseException, function: str = FUNCTION) -> str | None:
    """The ``[CLASS] message`` line to show a user for an error a statement raised, or None
    when the error is not one a statement reports (a bug: let it propagate)."""
    from py4j.protocol import Py4JJavaError, Py4JNetworkError
    from pyspark.errors import PySparkException

    if isinstance(error, SqlextError):
        return str(error)
    if isinstance(error, (PySparkException, Py4JJavaError)):  # the latter: a JVM call PySpark did not wrap
        ours = find_in(error) or misspelt_function(error, function)
        if ours is not None:
            return str(ours)
        summary = spark_error_summary(error)
        if summary.startswith("["):  # Spark's own error class
            return summary
        return str(SqlextError("SPARK_ERROR", function=function, reason=summary))
    if isinstance(error, Py4JNetworkError):
        return str(SqlextError("SPARK_UNAVAILABLE", function=function, reason=_first_line(error)))
    return None


def report_line(error: BaseException, function: str = FUNCTION) -> str:
    """The one line a command shows for any error: :func:`error_message`'s, or for anything
    else an ``[INTERNAL_ERROR]`` that says how to report it."""
    message = error_message(error, function)
    if message is not None:
        return message
    reason = f"{type(error).__name__}: {_first_line(error)}" if str(error).strip() else type(error).__name__
    return str(SqlextError("INTERNAL_ERROR", function=function, reason=reason))


DEBUG_ENV = "SQLEXT_DEBUG"


def debug_traceback(error: BaseException) -> None:
    """Print the error's traceback to standard error when ``SQLEXT_DEBUG`` is set (to anything
    but empty or 0), and for a Spark error the JVM's stack trace (the server's, for a Spark
    Connect session): commands show one line per error, and this is how to see the rest."""
    import os
    import sys
    import traceback

    if os.environ.get(DEBUG_ENV, "") in ("", "0"):
        return
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    print(text, end="", file=sys.stderr)
    trace = jvm_stack_trace(error)
    if trace is not None and trace not in text:  # PySpark's text holds it where Spark's settings say so
        print(f"JVM stacktrace:\n{trace}", file=sys.stderr)


def jvm_stack_trace(error: BaseException) -> str | None:
    """The JVM's stack trace of a Spark error or of the Spark error it came from: as a Spark
    Connect client received it from the server, or as PySpark read it from the driver's JVM.
    None for an error without one."""
    for current in exception_chain(error, _trace_causes):
        get = getattr(current, "getStackTrace", None)  # Spark Connect's
        trace = get() if callable(get) else getattr(current, "_stackTrace", None)  # classic: PySpark's
        if isinstance(trace, str) and trace.strip():
            return trace
        if getattr(current, "java_exception", None) is not None:  # a Py4JJavaError: its text holds it
            return str(current)
    return None


def _trace_causes(error: BaseException) -> list[BaseException]:
    causes = [getattr(error, "cause", None), getattr(error, "_cause", None), error.__cause__]
    return [cause for cause in causes if isinstance(cause, BaseException)]


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


@dataclass
class Outcome:
    """A statement's result as the interactive surfaces show it: the frame, its first rows
    (``limit`` of them; ``truncated`` if there were more), or the error's message."""

    frame: object = None
    columns: list | None = None
    rows: list | None = None
    truncated: bool = False
    error: str | None = None


def run_and_fetch(spark, text: str, limit: int, function: str = FUNCTION) -> Outcome:
    """Run one statement and fetch up to ``limit`` rows of its result (none for a statement
    without columns); a statement's error becomes ``Outcome.error`` (``function`` names the
    command in a message of sqlext's own)."""
    plans = []
    try:
        frame = run_statement(spark, text, on_plan=plans.append, function=function)
        if not frame.columns:
            return Outcome(frame=frame, columns=[])
        rows = [tuple(r) for r in frame.limit(limit + 1).collect()]
    except Exception as error:  # noqa: BLE001 - only errors with a message are reported
        if plans and plans[0].changed:
            note_rewritten(error)
        message = error_message(error, function)
        if message is None:
            raise
        debug_traceback(error)
        return Outcome(error=message)
    return Outcome(frame=frame, columns=list(frame.columns), rows=rows[:limit], truncated=len(rows) > limit)

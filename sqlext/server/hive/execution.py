"""Running a client's statement text as ``sqlext sql`` runs a script, and the error a client
is told: sqlext's one line and a SQLSTATE.

A text may hold several statements (separated by ``;``): every one is read first (a string or
quoted name left open, a select list ending in a comma, a statement neither Spark's parser nor
sqlext's reads), so that a text that does not parse runs nothing; then each runs in order
through :func:`sqlext.runner.run_statement`, and the result is the last one's.
"""

from __future__ import annotations

import re

from sqlext.errors import MESSAGES, SqlextError, sql_state
from sqlext.runner import report_line, run_statement
from sqlext.server.hive.settings import DEFAULT_SHOW_TABLES, HIVE, SHOW_TABLES, show_tables_shape
from sqlext.statements import split_statements, unclosed_quote
from sqlext.syntax import spark_parse_error, trailing_comma, unclosed_error

# how messages name the endpoint ("[UNSUPPORTED_STATEMENT] sqlext serve: ...")
FUNCTION = "sqlext serve"
_SHOW_TABLES = re.compile(r"\s*SHOW\s+TABLES\b", re.IGNORECASE)


class Refusal(Exception):
    """A text refused before anything ran, with the message and SQLSTATE to report."""

    def __init__(self, message: str, state: str):
        super().__init__(message)
        self.state = state


def run_text(spark, text: str, show_tables: str = DEFAULT_SHOW_TABLES):
    """Run every statement of ``text`` on ``spark``; the last one's DataFrame (a SHOW TABLES
    in the shape the session's ``sqlext.jdbc.showTables`` names, else ``show_tables``, the
    server's: :mod:`sqlext.server.hive.settings`). Raises what a statement raises, or
    :class:`Refusal` / :class:`SqlextError` before running anything; a ``SET`` of the setting
    to a value it cannot take is refused after it ran, and the session's value put back."""
    statements = split_statements(text)
    if not statements:
        raise SqlextError("UNSUPPORTED_STATEMENT", function=FUNCTION, reason="the text holds no statement",
                          fix="Send at least one SQL statement.")
    quote = unclosed_quote(text)
    if quote is not None:
        raise unclosed_error(quote, FUNCTION)
    for statement in statements:
        comma = trailing_comma(statement, FUNCTION)
        if comma is not None:
            raise Refusal(comma.message, sql_state("SYNTAX_ERROR"))
        error = spark_parse_error(spark, statement, FUNCTION)
        if error is not None:
            raise error
    sets_shape = SHOW_TABLES.lower() in text.lower()  # a SET of the setting, checked once it ran
    before = spark.conf.get(SHOW_TABLES, None) if sets_shape else None
    frame = None
    for statement in statements:
        frame = run_statement(spark, statement.text, function=FUNCTION)
    if sets_shape:
        try:
            show_tables_shape(spark.conf.get(SHOW_TABLES, None))
        except SqlextError:
            if before is None:
                spark.conf.unset(SHOW_TABLES)
            else:
                spark.conf.set(SHOW_TABLES, before)
            raise
    if _SHOW_TABLES.match(statements[-1].text) and "tableName" in frame.columns:
        if show_tables_shape(spark.conf.get(SHOW_TABLES, None) or show_tables) == HIVE:
            frame = frame.select(frame["tableName"].alias("tab_name"))
    return frame


_CLASS = re.compile(r"^\[(?P<cls>[A-Z][A-Z0-9_]*)\]")


def describe(error: BaseException) -> tuple[str, str]:
    """The one line a client is told for ``error`` (as ``sqlext sql`` prints it, without a
    stack trace) and its SQLSTATE: sqlext's class's, else the one Spark gives, else HY000."""
    if isinstance(error, Refusal):
        return str(error), error.state
    message = " ".join(report_line(error, FUNCTION).split("\n"))
    found = _CLASS.match(message)
    if found and found.group("cls") in MESSAGES:
        return message, sql_state(found.group("cls"))
    state = None
    try:
        state = error.getSqlState()
    except Exception:  # noqa: BLE001 - not a Spark error, or no JVM to ask
        pass
    return message, state or "HY000"

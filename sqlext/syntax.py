"""A file's syntax, checked before any of its statements runs, and positions in the file.

``sqlext run`` and ``sqlext explain`` read the whole file first: a string or quoted name left
open (:func:`unclosed`), a select list that ends with a comma before ``FROM`` (which Spark's
parser takes for a column named FROM and reports only when the statement runs), and any
statement Spark's parser refuses (:func:`check`). A statement Spark's parser refuses but
sqlext's reads is sqlext's own syntax (``USING KEY``), which sqlext rewrites before Spark sees
it. Without Spark (``explain --no-spark``), sqlext's parser decides.

Every position is in the file's own lines and columns: Spark's positions, which count from
the start of the statement, are moved to the file (:func:`in_file`, :func:`located`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlext.errors import SqlextError, spark_error_summary
from sqlext.language.dialect import SparkExt, parse_one
from sqlext.statements import Statement, position, unclosed_quote


@dataclass(frozen=True)
class Problem:
    """What is wrong and where, in the file's lines and columns (1-based)."""

    line: int
    column: int
    message: str

    def report(self, path) -> str:
        return f"{path}:{self.line}:{self.column}: {self.message}"


def in_file(statement: Statement, line: int, column: int) -> tuple[int, int]:
    """A position in a statement's text (1-based line and column) as one in its file.

    >>> in_file(Statement("SELECT a,\\nFROM t", line=3, column=5), 2, 1)
    (4, 1)
    >>> in_file(Statement("SELECT a,\\nFROM t", line=3, column=5), 1, 9)
    (3, 13)
    """
    return statement.line + line - 1, (statement.column + column - 1 if line == 1 else column)


# how spark_error_summary ends a message with Spark's position in the statement's text
_SPARK_POSITION = re.compile(r"; line (?P<line>\d+) pos (?P<pos>\d+)$")


def located(statement: Statement, message: str) -> Problem:
    """An error message of a statement, placed in the file: at Spark's position where the
    message ends with one (taken off the message), else at the statement's start.

    >>> located(Statement("SELECT\\n  nope", 4, 1), "[UNRESOLVED_COLUMN] nope; line 2 pos 2")
    Problem(line=5, column=3, message='[UNRESOLVED_COLUMN] nope')
    """
    found = _SPARK_POSITION.search(message)
    if found is None:
        return Problem(statement.line, statement.column, message)
    line, column = in_file(statement, int(found.group("line")), int(found.group("pos")) + 1)
    return Problem(line, column, message[:found.start()])


def unclosed_error(quote: Statement, function: str) -> SqlextError:
    """``[UNCLOSED_QUOTE]`` for the string or quoted name ``quote`` opens and never closes."""
    first = quote.text.splitlines()[0]
    start = first[:30] + ("..." if len(first) > 30 or len(quote.text) > len(first) else "")
    return SqlextError("UNCLOSED_QUOTE", function=function, what="name" if quote.text[0] == "`" else "string",
                       line=quote.line, column=quote.column, start=start, quote=quote.text[0])


def unclosed(source: str, function: str) -> Problem | None:
    """A string or quoted name that the file opens and never closes, as a problem."""
    quote = unclosed_quote(source)
    if quote is None:
        return None
    return Problem(quote.line, quote.column, str(unclosed_error(quote, function)))


def check(statements: list[Statement], function: str, spark=None, parse: bool = True) -> Problem | None:
    """The first syntax problem of the statements, in file order, or None. With ``spark`` (a
    classic session, or one attached to a Spark Connect server), Spark's parser reads each
    statement; without it, sqlext's; with ``parse=False`` neither (only the checks that need
    no parser)."""
    for statement in statements:
        problem = trailing_comma(statement, function)
        if problem is None and parse:
            problem = _spark_problem(spark, statement, function) if spark is not None \
                else _sqlglot_problem(statement, function)
        if problem is not None:
            return problem
    return None


def trailing_comma(statement: Statement, function: str) -> Problem | None:
    """A comma just before ``FROM`` (``SELECT a,`` then ``FROM t``): Spark's parser reads
    ``FROM`` as a column, and the error comes only when the statement runs."""
    from sqlglot.tokens import TokenType

    try:
        tokens = SparkExt().tokenize(statement.text)
    except Exception:  # noqa: BLE001 - text sqlglot's tokenizer cannot read: the parsers decide
        return None
    for comma, following in zip(tokens, tokens[1:]):
        if comma.token_type == TokenType.COMMA and following.token_type == TokenType.FROM:
            line, column = in_file(statement, *position(statement.text, comma.start))
            return Problem(line, column, str(SqlextError(
                "SYNTAX_ERROR", function=function, reason="the select list ends with a comma, just before FROM",
                fix="Remove the comma.")))
    return None


def _spark_problem(spark, statement: Statement, function: str) -> Problem | None:
    """Spark's parse error of the statement, where sqlext's parser cannot read it either."""
    from pyspark.errors import PySparkException

    try:
        summary = _spark_parse(spark, statement.text)
    except PySparkException as error:
        summary = spark_error_summary(error)
    if summary is None or _sqlglot_problem(statement, function) is None:
        return None  # it parses, or it is sqlext's own syntax, which Spark reads once sqlext has rewritten it
    return located(statement, summary)


def spark_parse_error(spark, statement: Statement, function: str):
    """The exception of a classic session's parser for the statement (``[PARSE_SYNTAX_ERROR]``,
    with its SQLSTATE), where sqlext's parser cannot read it either; None if either reads it."""
    from pyspark.errors import PySparkException

    try:
        spark._jsparkSession.sessionState().sqlParser().parsePlan(statement.text)
        return None
    except PySparkException as error:
        return None if _sqlglot_problem(statement, function) is None else error


def _spark_parse(spark, text: str) -> str | None:
    """Spark's parser's refusal of a statement, as :func:`spark_error_summary` words it (with
    its position in the statement's text), or None when it reads it. A classic session's
    parser raises its refusal (Spark's ParseException).

    A classic session's parser is asked in the driver's JVM. A Spark Connect client has no
    parser: the server's is asked through ``EXPLAIN``, which parses the statement and plans
    it without running it (Spark plans a command under EXPLAIN without executing it, and an
    error of the plan is the EXPLAIN's result, not an error); only a statement Spark's parser
    refuses raises. The statement starts on EXPLAIN's second line: the position Spark names
    is moved back by a line."""
    from pyspark.errors import ParseException, PySparkException

    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is not None:
        jsession.sessionState().sqlParser().parsePlan(text)
        return None
    try:
        spark.sql("EXPLAIN\n" + text)  # the user's text as written: a parser's input, built by no rule
        return None
    except ParseException as error:
        summary = spark_error_summary(error)
    except PySparkException:  # not the parser's refusal: the statement's run will say what it is
        return None
    found = _SPARK_POSITION.search(summary)
    if found is None:
        return summary
    line = max(1, int(found.group("line")) - 1)
    return f"{summary[:found.start()]}; line {line} pos {found.group('pos')}"


def _sqlglot_problem(statement: Statement, function: str) -> Problem | None:
    """sqlext's parser's error of the statement, at the token it stopped at."""
    from sqlglot.errors import ParseError, TokenError

    try:
        parse_one(statement.text)
        return None
    except (ParseError, TokenError, ValueError, IndexError, KeyError, AttributeError, TypeError,
            RecursionError) as error:  # sqlglot's parser fails in these ways on malformed text
        details = getattr(error, "errors", None) or [{}]
        first = details[0]
        description = first.get("description") or (str(error).splitlines()[0] if str(error) else type(error).__name__)
        description = re.sub(r"<Token token_type: TokenType\.(\w+), text: ([^,]*),.*>", r"\2", description)
        line = first.get("line") or 1
        column = max(1, (first.get("col") or 1) - len(first.get("highlight") or "x") + 1)
        line, column = in_file(statement, line, column)
        return Problem(line, column, str(SqlextError(
            "SYNTAX_ERROR", function=function, reason=f"sqlext's parser cannot read the statement ({description})",
            fix="Fix the SQL there. Without Spark (--no-spark), sqlext reads the file with its own parser, which may "
                "not know every statement Spark reads; without --no-spark, Spark's parser decides.")))

"""Every error sqlext raises: one class, UPPER_SNAKE error classes, all message text here.

A message says what is wrong, shows the bad value (and what was available), and says how to
fix it. Tests assert the error class, never the wording.

>>> str(SqlextError("INVALID_OPTION_VALUE", function="CHANGELOG_FILTER", argument="emit",
...                 value="'all'", allowed="'changes', 'records', 'final'"))
"[INVALID_OPTION_VALUE] CHANGELOG_FILTER: emit => 'all' is not a known value. Use one of 'changes', 'records', 'final'."
"""

from __future__ import annotations

import re

MESSAGES: dict[str, str] = {
    # arguments of a table function call
    "MISSING_ARGUMENT": (
        "{function}: the argument {argument} is required. Add {argument} => {example} to the call."
    ),
    "UNKNOWN_ARGUMENT": (
        "{function}: there is no argument named {argument}; the function takes {allowed}. "
        "Check the spelling or remove it."
    ),
    "DUPLICATE_ARGUMENT": "{function}: the argument {argument} is given twice. Keep one of them.",
    "INVALID_ARGUMENT_TYPE": "{function}: {argument} must be {expected}; got {value}. {fix}",
    "INVALID_OPTION_VALUE": (
        "{function}: {argument} => {value} is not a known value. Use one of {allowed}."
    ),
    "CONFLICTING_PARTITIONING": (
        "{function}: the input's {clause} ({value}) does not match {argument} => {expected}. "
        "Remove the clause (the function partitions and orders its input itself) or make them agree."
    ),
    # columns and expressions
    "CHANGELOG_MISSING_COLUMN": (
        "{function}: {side} has no column {column!r}; got {columns}. {fix}"
    ),
    "INVALID_SQL_EXPRESSION": (
        "{function}: {argument} => {value} is not a single SQL expression ({reason}). "
        "Pass one expression over the input's columns, such as {example}."
    ),
    "EXPRESSION_TYPE_MISMATCH": (
        "{function}: {argument} => {value} has type {actual}, but {expected} is needed. {fix}"
    ),
    # data errors found while running
    "AMBIGUOUS_ORDER": (
        "{function}: two changes of key {key} share {order_by} = {value}, so their order is unknown. "
        "Give each change of a key its own {order_by}, or name a finer column with order_by => '...'."
    ),
    "NULL_ORDER_VALUE": (
        "{function}: a change of key {key} has NULL in the ordering column {order_by}. "
        "Fill the column, or name another with order_by => '...'."
    ),
    "NULL_SEQUENCE_VALUE": (
        "{function}: a change of key {key} has NULL in the sequence_by column {sequence_by}. "
        "Fill the column, or drop sequence_by."
    ),
    "UNKNOWN_CHANGE_TYPE": (
        "{function}: a change of key {key} has _change_type = {value}; expected one of "
        "'insert', 'update_preimage', 'update_postimage', 'delete'. Fix the input, or drop the "
        "_change_type column to read it as an upsert log."
    ),
    # statements and the command line
    "UNSUPPORTED_STATEMENT": "{function}: {reason}. {fix}",
    "SPARK_ERROR": "{function}: Spark rejected the statement: {reason}",
    # models (sqlext build)
    "MODEL_NOT_FOUND": (
        "{function}: {what} {name!r} is not a model in {directory}; models there: {available}. "
        "Check the spelling, or add {name}.sql."
    ),
    "DUPLICATE_MODEL": (
        "{function}: two files define the model {name!r}: {paths}. A model is named by its "
        "file, so rename one of them."
    ),
    "MODEL_CYCLE": (
        "{function}: models refer to each other in a cycle: {cycle}. Break the cycle: a model "
        "cannot depend on itself through ref()."
    ),
    "MODEL_TEMPLATE_ERROR": "{function}: the Jinja template does not render: {reason}. {fix}",
    "INVALID_MODEL_CONFIG": "{function}: config({argument}={value}) is not supported. Use {allowed}.",
    "MODEL_NOT_BUILT": (
        "{function}: model {name!r} reads {upstream!r}, which is not selected and has no table in "
        "{warehouse}. Build it first, or select the upstream models too with '+{name}'."
    ),
    "EMPTY_MODEL": "{function}: the model file holds no SQL statement. {fix}",
    # incremental runs on Structured Streaming
    "LATE_CHANGE": (
        "{function}: a change of key {key} has {order_by} = {value}, not above {last}, {earlier}, "
        "so applying it now would differ from the batch result. {fix} Nothing of this run was "
        "written; the next run retries it."
    ),
    "UNSUPPORTED_STREAM": "{function}: {what} cannot run incrementally: {reason}. {fix}",
    "STREAM_SCHEMA_CHANGED": (
        "{function}: the columns of {name} changed since the first run of this checkpoint: {change}. "
        "The state kept so far was built for the old columns. Restore them, or start over with a new "
        "checkpoint and output folder."
    ),
    "STREAM_CHECKPOINT_MISMATCH": (
        "{function}: the checkpoint {checkpoint} was made for another statement: {differences}. A "
        "checkpoint and its output folder belong to one statement; this run would read its state "
        "under another meaning and mix two results in one output, so nothing was read or written. "
        "{fix}."
    ),
    "STREAM_OUTPUT_IN_USE": (
        "{function}: the output folder {output} {why}, so this run's rows would be mixed with "
        "them; nothing was read or written. {fix}"
    ),
    # dbt models (the sqlext dbt adapter)
    "INCREMENTAL_MODEL_UNSUPPORTED": (
        "{function}: model {model} calls {functions}, and this run is incremental (its table exists "
        "and is_incremental() is true), which sqlext does not support under dbt yet: {reason}, so "
        "the result would be wrong without any error. Rebuild it with dbt build --full-refresh, "
        "materialize it as a table (config(materialized='table')), or call the function in an "
        "upstream model over the whole input and filter that model's output here."
    ),
    "STREAM_TABLE_NOT_INCREMENTAL": (
        "{function}: the table {table} exists, but its folder {folder} holds no checkpoint of "
        "incremental runs, so sqlext cannot tell which changes its rows already hold. Rebuild it "
        "from the whole history with a full refresh (dbt build --full-refresh), or drop it."
    ),
    "STREAM_TABLE_COLUMNS_DIFFER": (
        "{function}: the table {table} has the columns ({have}), but the statement gives ({want}). "
        "Rebuild it from the whole history with a full refresh (dbt build --full-refresh), or "
        "change the statement back."
    ),
    "DELETE_OF_ABSENT_ROW": (
        "{function}: the changes of {name} so far delete the row {row} {excess} more time(s) than "
        "they insert it, so it is not there to take away. A change feed "
        "deletes only rows it inserted: check that the feed is complete from its first version. "
        "Nothing of this run was written."
    ),
    "STREAM_SOURCE_EMPTY": (
        "{function}: the change files of {name} in {path} are missing or empty, so their columns are "
        "unknown. Put at least one file of changes there before the first run, or declare its "
        "columns (--source-schema NAME='id BIGINT, ...' on the command line, schemas={{NAME: '...'}} "
        "in Python)."
    ),
    # recursion (KIP-857)
    "RECURSION_NON_TERMINATING": (
        "{function}: the step of {name} cannot stop: {reason} (step: {step}). {fix}."
    ),
    "RECURSION_LEVEL_LIMIT_EXCEEDED": (
        "{function}: {name} still produced rows at level {level}, the recursion level limit {limit}. "
        "If the data is deep rather than cyclic, raise the limit with "
        "WITH RECURSIVE {name}(...) MAX RECURSION LEVEL {suggested} AS (...); on cyclic data, "
        "use UNION instead of UNION ALL or add a condition that ends the recursion."
    ),
    "RECURSION_ROW_LIMIT_EXCEEDED": (
        "{function}: {name} holds more than {limit} rows after level {level}, the recursion row "
        "limit. If the result is meant to be that large, raise the limit with "
        "SET spark.sqlext.recursion.rowLimit = {suggested}; if not, add a condition that ends the "
        "recursion or use UNION instead of UNION ALL."
    ),
    "RECURSION_REPEATS": (
        "{function}: level {level} of {name} holds exactly the rows of level {previous}, so under "
        "UNION ALL every later level would repeat them and the recursion never ends. Use UNION "
        "instead of UNION ALL, or add a condition that ends the recursion."
    ),
    "RECURSION_VALUE_OUT_OF_RANGE": (
        "{function}: a value computed for {name} does not fit its column's type ({reason}). "
        "Cast the anchor's column to a wider type, such as CAST(0 AS BIGINT)."
    ),
}

# How a sqlext message starts, wherever it travels (inside a Spark or Python worker error).
_MESSAGE_START = re.compile(r"\[(?P<cls>[A-Z][A-Z0-9_]+)\] (?P<function>[A-Z][A-Z_]+|sqlext [a-z]+): ")


class SqlextError(Exception):
    """An error with an UPPER_SNAKE class and named parameters.

    ``function`` names what raised it (``CHANGELOG_FILTER``, ``FK_JOIN``, ``sqlext run``).
    """

    def __init__(self, error_class: str, *, function: str = "sqlext", **params):
        if error_class not in MESSAGES:
            raise KeyError(f"unknown sqlext error class {error_class!r}")
        self.error_class = error_class
        self.function = function
        self.params = params
        message = MESSAGES[error_class].format(function=function, **params)
        super().__init__(f"[{error_class}] {message}")

    @property
    def message(self) -> str:
        return str(self)


class SqlextSparkError(SqlextError):
    """A sqlext error that surfaced through Spark while a query ran (for example an ordering
    tie found by the native plan, or an error from a Python worker)."""

    def __init__(self, error_class: str, text: str, cause: BaseException | None = None):
        Exception.__init__(self, text)
        self.error_class = error_class
        self.function = text.split(":", 1)[0].split("] ", 1)[-1]
        self.params = {}
        self.cause = cause


def message_text(error_class: str, function: str, **params) -> str:
    """The full message of an error, for code that must carry it as text (SQL raise_error)."""
    return str(SqlextError(error_class, function=function, **params))


def find_in(exception: BaseException) -> SqlextError | None:
    """Recover a sqlext error carried inside a Spark exception's text, if there is one."""
    if isinstance(exception, SqlextError):
        return exception
    text = str(exception)
    for line in text.splitlines():
        start = line.find("[")
        while start != -1:
            match = _MESSAGE_START.match(line, start)
            if match and match.group("cls") in MESSAGES:
                message = line[start:]
                # Spark appends its own context after our text; keep ours only.
                message = re.split(r"\. SQLSTATE: |\s+SQLSTATE: |\n", message)[0]
                message = message.rstrip()
                if not message.endswith("."):
                    message += "."
                return SqlextSparkError(match.group("cls"), message, exception)
            start = line.find("[", start + 1)
    return None


def spark_error_summary(exception: BaseException) -> str:
    """Spark's own first line of an error, without the JVM stack trace."""
    text = str(exception).strip()
    first = text.splitlines()[0] if text else type(exception).__name__
    return first.split("\n\tat ")[0]

"""Every error sqlext raises: one class, UPPER_SNAKE error classes, all message text here.

A message says what is wrong, shows the bad value (and what was available), and says how to
fix it. Tests assert the error class, never the wording.

>>> str(SqlextError("INVALID_OPTION_VALUE", function="CHANGELOG_FILTER", argument="emit",
...                 value="'all'", allowed="'changes', 'records', 'final'"))
"[INVALID_OPTION_VALUE] CHANGELOG_FILTER: emit => 'all' is not a known value. Use one of 'changes', 'records', 'final'."
"""

from __future__ import annotations

import functools
import re
import threading
from contextlib import contextmanager

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
    "ORDER_BY_TEXT": (
        "{function}: the ordering column {order_by} of {side} has type {actual}, which sorts as text "
        "('10' before '9'), so changes would be applied out of order. Cast it to a number or a timestamp "
        "in the input (CAST({order_by} AS BIGINT) AS {order_by}), or name a numeric, DATE or TIMESTAMP "
        "column with order_by => '...'."
    ),
    "ORDER_BY_REQUIRED": (
        "{function}: {side} (format => '{format}') has no default ordering column: {reason}. Name one "
        "with order_by => '...'; the input has {candidates}. {fix}."
    ),
    "ORDER_COLUMN_CLASH": (
        "{function}: the ordering column {path} of {side} is named {name} in the change rows, which is also "
        "the name of a data column. Rename that column in a view, or order by another column."
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
    "NOT_A_CHANGE_EVENT": (
        "{function}: {side} holds a record that {problem}: {record}. {fix}"
    ),
    # statements and the command line
    "UNSUPPORTED_STATEMENT": "{function}: {reason}. {fix}",
    "SPARK_ERROR": "{function}: Spark rejected the statement: {reason}",
    "UNKNOWN_FUNCTION": (
        "{function}: there is no function {name}; did you mean {nearest}? sqlext's table functions are "
        "{available}. Correct the name."
    ),
    "STREAM_IN_BATCH_QUERY": (
        "{function}: the statement reads {streams}, which only an incremental run reads (the changes since "
        "the last run): run it with sqlext stream FILE.sql, sqlext.stream(...) in Python, or as a dbt "
        "incremental model. To run it in batch over the whole input instead, read each source without "
        "STREAM: {batch}"
    ),
    "UNCLOSED_QUOTE": (
        "{function}: the {what} that starts at line {line}, column {column} ({start}) is never closed, so "
        "the statement there never ends. Close it with {quote} and end the statement with ;."
    ),
    "SYNTAX_ERROR": "{function}: the statement does not parse: {reason}. {fix}",
    "PATH_NOT_FOUND": "{function}: there is no {what} {path}. {fix}",
    "NO_MODELS": (
        "{function}: the folder {path} holds no *.sql model. Put one SELECT per file there (the file "
        "names the model), or give the folder that holds them."
    ),
    "INVALID_SETTING": (
        "{function}: the setting {setting} is {value}, which is not {expected}. Set it to {expected} "
        "(for example --conf {setting}={example}), or leave it unset for {default}."
    ),
    "DBT_REFUSED": (
        "{function}: dbt stopped before building the project {path}: {reason}. Check the arguments given "
        "to dbt (--select, --vars) and where its profiles.yml is (DBT_PROFILES_DIR, the current folder, "
        "~/.dbt or the project folder)."
    ),
    "SPARK_UNAVAILABLE": (
        "{function}: Spark's JVM stopped answering ({reason}), so the command could not finish. It may "
        "have run out of memory: run the command again, with more memory for the driver "
        "(spark.driver.memory) if it happens again."
    ),
    "SPARK_DID_NOT_START": (
        "{function}: Spark did not start: {reason}. Check the session options (--master takes local, "
        "local[N], spark://HOST:PORT, k8s://... or yarn; --conf takes Spark's own settings; --packages "
        "needs the network or a local Ivy cache), or run without them for the embedded local Spark."
    ),
    "INTERNAL_ERROR": (
        "{function}: sqlext failed on its own, not because of the SQL: {reason}. Please report it to the "
        "sqlext project with the statement that ran and the traceback that SQLEXT_DEBUG=1 prints when "
        "set before the command."
    ),
    # the session a command runs on (session options, sqlext serve)
    "CATALOG_IN_USE": (
        "{function}: the catalog in {folder} (metastore_db) is open in another process{holder}, and its "
        "Derby database admits one process at a time. {fix}"
    ),
    "REMOTE_SESSION_OPTION": (
        "{function}: {option} applies where a command starts Spark, and this one attaches to the Spark "
        "Connect server at {address}, which runs with its own settings. Give {option} to sqlext serve "
        "when you start the server, or add --master local[2] to run this command on Spark of its own "
        "(with a catalog of its own, --catalog DIR or --catalog memory, while the server has the folder's)."
    ),
    "SERVER_NOT_STARTED": "{function}: the Spark Connect server did not start: {reason}. {fix}",
    "SERVER_UNREACHABLE": (
        "{function}: the Spark Connect server at {address} does not answer ({reason}). Start it (sqlext "
        "serve, in the folder where the commands run), correct --remote or {env}, or unset {env} to run "
        "on Spark of the command's own."
    ),
    "SERVER_GONE": (
        "{function}: the server sqlext serve started in {folder} stopped answering before the run ended. "
        "The checkpoint keeps what the run committed: run the command again (with no server there, it "
        "runs on Spark of its own)."
    ),
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
        "written, and every later run meets this change again: if the feed was re-seeded or rewritten "
        "from its start, start over with a new checkpoint and output folder (dbt: dbt build --full-refresh)."
    ),
    "UNSUPPORTED_STREAM": "{function}: {what} cannot run incrementally: {reason}. {fix}",
    "STREAM_SCHEMA_CHANGED": (
        "{function}: the columns of {name} changed since the first run of this checkpoint: {change}. "
        "The state kept so far was built for the old columns. Restore them, let the source's columns "
        "evolve where the change is a new column or a wider type (--schema-evolution NAME=add_columns, "
        "widen_types or evolve; schema_evolution= in Python), or start over with a new checkpoint and "
        "output folder."
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
    "FULL_REFRESH_REFUSED": (
        "{function}: the full refresh would delete {path}, which {why}, so it deleted nothing. A full "
        "refresh deletes only a checkpoint and an output folder of sqlext's runs: check the path, or "
        "delete or move what it holds yourself."
    ),
    # dbt models (the sqlext dbt adapter)
    "INCREMENTAL_MODEL_UNSUPPORTED": (
        "{function}: model {model} calls {functions}, and this run is incremental (its table exists "
        "and is_incremental() is true), which sqlext does not support under dbt yet: {reason}, so "
        "the result would be wrong without any error. Read its input as a stream instead, "
        "TABLE(STREAM(name)) in the call (or FROM STREAM(name)): an incremental model over STREAM(...) "
        "runs incrementally, with the function's state kept between runs. Or rebuild it with dbt build "
        "--full-refresh, materialize it as a table (config(materialized='table')), or call the function "
        "in an upstream model over the whole input and filter that model's output here."
    ),
    "STREAM_SOURCE_REBUILT": (
        "{function}: {what} cannot run incrementally: {rebuilt}, which it reads with STREAM(...), is the output "
        "of a run that started over (a new checkpoint, a full refresh) since this checkpoint's last run, whose "
        "state and rows hold the changes of that output as it was; the new output's files are named as its "
        "first files were, so this run would take them for files it already read and skip their changes. {fix}"
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
    "STORAGE_ERROR": (
        "{function}: could not {what} {path}: {cause}. Check that the path is right, that Spark has the "
        "connector and credentials for its scheme (spark.hadoop.* settings, --packages), and that the "
        "store is reachable."
    ),
    "STREAM_SOURCE_EMPTY": (
        "{function}: the change files of {name} in {path} are missing or empty, so their columns are "
        "unknown. Put at least one file of changes there before the first run, or declare its "
        "columns (--source-schema NAME='id BIGINT, ...' on the command line, schemas={{NAME: '...'}} "
        "in Python)."
    ),
    "STREAM_SOURCE_UNREADABLE": (
        "{function}: Spark cannot read the change files of {name}: the file {file} gives {cause}. {fix}"
    ),
    "BAD_RECORD": (
        "{function}: {name}: {place} holds a record that {problem}: {record}. Nothing of this run was "
        "written and the file was not consumed: correct the record (in that file, or in a file that "
        "replaces it) and run again, or send the bad records of {name} to a quarantine ({quarantine})."
    ),
    "SOURCE_FILE_MISSING_COLUMN": (
        "{function}: the file {file} of {name} has no column {column} (it holds {have}), so each of its "
        "rows would read NULL there. Nothing of this run was written and the file was not consumed: "
        "write the file again with the column, or move it out of the folder, and run again."
    ),
    "UNKNOWN_SOURCE": (
        "{function}: {option} names {name}, {problem}. Check the spelling of the name in {option} and in {other}."
    ),
    "SOURCE_FILE_PANDAS_INDEX": (
        "{function}: {files} of {name} {hold} the column {column}, the index of the pandas DataFrame "
        "written there ({column} is how DataFrame.to_parquet writes an unnamed index that is not 0, 1, "
        "2, ..., unless given index=False), which {others} {lack}: it is no column of the source. "
        "Nothing of this run was written and no file was consumed: write {them} again with "
        "df.to_parquet(path, index=False), or move {them} out of the folder, and run again."
    ),
    # Delta tables' change data feeds (sqlext.delta)
    "DELTA_NOT_INSTALLED": (
        "{function}: {what} the Delta table {path} needs the deltalake package, "
        "which is not installed here. Install sqlext with its delta extra: pip install \"sqlext[delta]\"."
    ),
    "DELTA_PATH_UNSUPPORTED": (
        "{function}: the Delta table {path} is kept in {store}, which deltalake (sqlext's reader of Delta "
        "tables where Spark has no Delta Lake) cannot open. Copy the table to a local disk, S3, GCS or "
        "Azure storage, or run on a Spark with Delta Lake (its io.delta package), whose reader sqlext uses."
    ),
    "DELTA_CHANGES_UNREADABLE": (
        "{function}: cannot read the change data feed of the Delta table {path}: {cause}. {fix}"
    ),
    # the JDBC/ODBC endpoint (sqlext.server.hive): HiveServer2's protocol
    "JDBC_TOKEN_REFUSED": (
        "{function}: the connection was refused: {reason}. Connect with the endpoint's token as the "
        "password (any user name), the token the server was started with."
    ),
    "JDBC_CLIENT_UNSUPPORTED": (
        "{function}: the client speaks HiveServer2 protocol {version}, older than V6 (results by "
        "column), the oldest this endpoint serves. Connect with a newer Hive JDBC or ODBC driver."
    ),
    "JDBC_NOT_SUPPORTED": "{function}: {what} is not supported by this endpoint. {fix}",
    "JDBC_UNKNOWN_HANDLE": (
        "{function}: the {what} handle is not open on this endpoint: it was closed, or opened on "
        "another server. {fix}"
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

# The SQLSTATE of each class (ISO SQL's classes, with Spark's own where Spark has a like error):
# what a JDBC or ODBC client reads as SQLException.getSQLState(). 42: the statement or its
# arguments are wrong; 22: the data is; 0A: not supported; 08: a connection; 58: a file or
# store outside; 55: a resource in use; XX: sqlext's own failure. docs/errors.md lists them.
SQL_STATES: dict[str, str] = {
    "MISSING_ARGUMENT": "4274K", "UNKNOWN_ARGUMENT": "4274K", "DUPLICATE_ARGUMENT": "4274K",
    "INVALID_ARGUMENT_TYPE": "42K09", "INVALID_OPTION_VALUE": "22023", "CONFLICTING_PARTITIONING": "42000",
    "CHANGELOG_MISSING_COLUMN": "42703", "INVALID_SQL_EXPRESSION": "42601", "ORDER_BY_TEXT": "42K09",
    "ORDER_BY_REQUIRED": "42000", "ORDER_COLUMN_CLASH": "42711", "EXPRESSION_TYPE_MISMATCH": "42K09",
    "AMBIGUOUS_ORDER": "22000", "NULL_ORDER_VALUE": "22004", "NULL_SEQUENCE_VALUE": "22004",
    "UNKNOWN_CHANGE_TYPE": "22023", "NOT_A_CHANGE_EVENT": "22023",
    "UNSUPPORTED_STATEMENT": "0A000", "SPARK_ERROR": "42000", "UNKNOWN_FUNCTION": "42883",
    "STREAM_IN_BATCH_QUERY": "0A000", "UNCLOSED_QUOTE": "42601", "SYNTAX_ERROR": "42601",
    "PATH_NOT_FOUND": "42K03", "NO_MODELS": "42K03", "INVALID_SETTING": "22023", "DBT_REFUSED": "42000",
    "SPARK_UNAVAILABLE": "08006", "SPARK_DID_NOT_START": "08001", "INTERNAL_ERROR": "XX000",
    "CATALOG_IN_USE": "55006", "REMOTE_SESSION_OPTION": "0A000", "SERVER_NOT_STARTED": "08001",
    "SERVER_UNREACHABLE": "08001",
    "MODEL_NOT_FOUND": "42704", "DUPLICATE_MODEL": "42710", "MODEL_CYCLE": "42000", "MODEL_TEMPLATE_ERROR": "42601",
    "INVALID_MODEL_CONFIG": "22023", "MODEL_NOT_BUILT": "42P01", "EMPTY_MODEL": "42000",
    "LATE_CHANGE": "22000", "UNSUPPORTED_STREAM": "0A000", "STREAM_SCHEMA_CHANGED": "42000",
    "STREAM_CHECKPOINT_MISMATCH": "42000", "STREAM_OUTPUT_IN_USE": "55006", "FULL_REFRESH_REFUSED": "55000",
    "INCREMENTAL_MODEL_UNSUPPORTED": "0A000",
    "STREAM_SOURCE_REBUILT": "42000", "STREAM_TABLE_NOT_INCREMENTAL": "42000", "STREAM_TABLE_COLUMNS_DIFFER": "42000",
    "DELETE_OF_ABSENT_ROW": "22000", "STORAGE_ERROR": "58030", "STREAM_SOURCE_EMPTY": "42000",
    "STREAM_SOURCE_UNREADABLE": "22000", "BAD_RECORD": "22000", "SOURCE_FILE_MISSING_COLUMN": "42703",
    "UNKNOWN_SOURCE": "42000", "SOURCE_FILE_PANDAS_INDEX": "42000",
    "DELTA_NOT_INSTALLED": "0A000", "DELTA_PATH_UNSUPPORTED": "0A000", "DELTA_CHANGES_UNREADABLE": "58030",
    "JDBC_TOKEN_REFUSED": "28000", "JDBC_CLIENT_UNSUPPORTED": "08001", "JDBC_NOT_SUPPORTED": "0A000",
    "JDBC_UNKNOWN_HANDLE": "HY000",
    "RECURSION_NON_TERMINATING": "42000", "RECURSION_LEVEL_LIMIT_EXCEEDED": "54000",
    "RECURSION_ROW_LIMIT_EXCEEDED": "54000", "RECURSION_REPEATS": "42000", "RECURSION_VALUE_OUT_OF_RANGE": "22003",
}


def sql_state(error_class: str) -> str:
    """The SQLSTATE of a sqlext error class (``HY000``, a general error, for none known).

    >>> sql_state("SYNTAX_ERROR"), sql_state("NULL_ORDER_VALUE")
    ('42601', '22004')
    """
    return SQL_STATES.get(error_class, "HY000")


# the fix of STREAM_SOURCE_UNREADABLE for nanosecond timestamps a session cannot read
NANOS_FIX = ("Its timestamps are in nanoseconds, which this session cannot read. Write them in microseconds, "
             "Spark's unit: df.to_parquet(path, coerce_timestamps='us', allow_truncated_timestamps=True) in "
             "pandas, pq.write_table(table, path, coerce_timestamps='us', allow_truncated_timestamps=True) "
             "in pyarrow.")

# How a sqlext message starts, wherever it travels (inside a Spark or Python worker error):
# a function (FK_JOIN), a command (sqlext stream) or a Python function (sqlext.stream)
_MESSAGE_START = re.compile(
    r"\[(?P<cls>[A-Z][A-Z0-9_]+)\] (?P<function>[A-Z][A-Z_]+|sqlext [a-z]+|sqlext(?:\.[a-z_]+)+): ")


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


# what the incremental engine's errors name as raised inside it; :func:`surface` puts in its
# place the name of what the user called (a command, a Python function, the dbt adapter)
ENGINE = "sqlext stream"
_SURFACE = threading.local()


@contextmanager
def surface(function: str, engine: str = ENGINE):
    """Run the block as ``function`` (``sqlext.stream``, ``sqlext dbt``), what the user called:
    an error raised in it that names ``engine`` (the incremental engine's modules are shared by
    every surface) names ``function`` instead, so a message starts with the name the user knows.
    Where surfaces nest (the command line calls the Python functions), the outermost names it.

    >>> with surface("sqlext dbt"):
    ...     with surface("sqlext.streaming.run_into_table"):
    ...         raise SqlextError("UNSUPPORTED_STREAM", function=ENGINE, what="x", reason="y", fix="Z.")
    Traceback (most recent call last):
    sqlext.errors.SqlextError: [UNSUPPORTED_STREAM] sqlext dbt: x cannot run incrementally: y. Z.
    """
    if getattr(_SURFACE, "name", None) is not None:  # an outer surface names the errors
        yield
        return
    _SURFACE.name = function
    try:
        yield
    except SqlextError as error:
        renamed(error, function, engine)
        raise
    finally:
        _SURFACE.name = None


def surfaced(function: str):
    """A decorator: the function runs as the surface ``function`` (:func:`surface`)."""
    def wrap(body):
        @functools.wraps(body)
        def run(*args, **kwargs):
            with surface(function):
                return body(*args, **kwargs)
        return run
    return wrap


def current_surface(default: str) -> str:
    """The name of the surface the current block runs as (:func:`surface`), else ``default``."""
    return getattr(_SURFACE, "name", None) or default


def renamed(error: SqlextError, function: str, engine: str = ENGINE) -> SqlextError:
    """``error``, where it names ``engine`` as what raised it, naming ``function`` instead (the
    same object, whatever its class: a Spark class it is also an instance of stays)."""
    prefix = f"[{error.error_class}] {engine}: "
    text = Exception.__str__(error)
    if error.function == engine and text.startswith(prefix):
        error.args = (f"[{error.error_class}] {function}: {text[len(prefix):]}", *error.args[1:])
        error.function = function
    return error


class SqlextSparkError(SqlextError):
    """A sqlext error that surfaced through Spark while a query ran (for example an ordering
    tie found by the native plan, or an error from a Python worker)."""

    def __init__(self, error_class: str, text: str, cause: BaseException | None = None):
        Exception.__init__(self, text)
        self.error_class = error_class
        self.function = text.split(":", 1)[0].split("] ", 1)[-1]
        self.params = {}
        self.cause = cause


def carried_by(error: BaseException) -> SqlextError | None:
    """The error to raise in place of Spark's ``error`` where it carries a sqlext error (as
    :func:`find_in` finds one); None where it carries none, or is sqlext's already.

    The error returned is a :class:`SqlextError` of the class the carried one has, and also an
    instance of the class of ``error`` (``SparkRuntimeException``, ``PythonException``, their
    Spark Connect namesakes, ...), so that code written to catch Spark's class still catches
    it. It is sound to be both, because nothing of Spark's side changes: the error holds the
    state of ``error`` itself, so ``getCondition()``, ``getMessageParameters()``,
    ``getSqlState()`` and ``getQueryContext()`` answer as Spark's error did
    (``USER_RAISED_EXCEPTION`` for a rewrite's check, ``PYTHON_EXCEPTION`` for a table function's
    error). Only its text is sqlext's message, ``[CLASS] FUNCTION: ...``, without the JVM
    stack trace or the worker's traceback; ``error`` stays readable whole as the cause
    (raise it ``from error``). ``error_class`` is sqlext's class, ``getCondition()`` Spark's.

    Where Python cannot make a class of both (bases whose layouts conflict), the error is a
    plain :class:`SqlextSparkError`, raised from Spark's all the same.
    """
    if isinstance(error, SqlextError):
        return None
    found = find_in(error)
    if found is None:
        return None
    text = str(found)
    both = _with_spark_class(type(error))
    if both is None:
        ours = SqlextSparkError(found.error_class, text, error)
    else:
        ours = both.__new__(both, text)  # Spark's __init__ would convert the error again
        ours.__dict__.update(vars(error))
        ours.cause = error
    ours.error_class, ours.function, ours.params = found.error_class, found.function, dict(found.params)
    return ours


# Spark's exception class -> the class of sqlext's errors it carries (made on first use)
_WITH_SPARK_CLASS: dict[type, type | None] = {}


def _with_spark_class(spark_class: type) -> type | None:
    """A subclass of :class:`SqlextSparkError` and ``spark_class``, one per Spark class, named
    after it (``SqlextSparkRuntimeException``)."""
    if spark_class not in _WITH_SPARK_CLASS:
        namespace = {
            "__module__": __name__,
            "__doc__": f"A sqlext error that Spark raised as {spark_class.__module__}.{spark_class.__qualname__}: "
                       "see sqlext.errors.carried_by.",
            # sqlext's message, never the Spark class's own text (its JVM stack trace)
            "__str__": lambda self: Exception.__str__(self),
            # Spark's side refers to the JVM (or the server), which no other process has
            "__reduce__": lambda self: (SqlextSparkError, (self.error_class, Exception.__str__(self))),
        }
        try:
            made = type(f"Sqlext{spark_class.__name__}", (SqlextSparkError, spark_class), namespace)
        except TypeError:  # layouts Python cannot combine
            made = None
        _WITH_SPARK_CLASS.setdefault(spark_class, made)  # two threads at once: one class all the same
    return _WITH_SPARK_CLASS[spark_class]


def sql_value(value) -> str:
    """A value for a message, written as in SQL: NULL, true, a number, or a string in single
    quotes (a quote inside doubled, as Spark reads it).

    >>> print(sql_value(None), sql_value(True), sql_value("status = 'open"), sql_value(3))
    NULL true 'status = ''open' 3
    """
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)


def counted(number: int, noun: str) -> str:
    """A count and its noun, in the plural unless the count is one.

    >>> counted(1, "row"), counted(0, "row"), counted(3, "bad record")
    ('1 row', '0 rows', '3 bad records')
    """
    return f"{number} {noun}{'' if number == 1 else 's'}"


def message_text(error_class: str, function: str, **params) -> str:
    """The full message of an error, for code that must carry it as text (SQL raise_error)."""
    return str(SqlextError(error_class, function=function, **params))


def find_in(exception: BaseException) -> SqlextError | None:
    """The sqlext error an exception carries as its own message, if it carries one.

    Only what was raised decides: a Spark ``raise_error`` (class USER_RAISED_EXCEPTION, the
    text in its parameters), the exception a Python worker raised (the last line of its
    traceback), or, through a wrapper (a failed job, a stopped stream), the error it was caused
    by. The rest of an exception's text (the plan Spark prints, which holds the rewrite's own
    ``raise_error`` literals) never does: an analysis error stays Spark's.

    >>> class Worker(Exception): pass
    >>> find_in(Worker("An exception was thrown from the Python worker:\\nTraceback (most recent "
    ...                "call last):\\n  File \\"x.py\\", line 1\\nsqlext.errors.SqlextError: "
    ...                "[NULL_ORDER_VALUE] FK_JOIN: a change of key id=1 has NULL ...")).error_class
    'NULL_ORDER_VALUE'
    >>> find_in(Worker("[UNRESOLVED_COLUMN] x; Project [raise_error('[AMBIGUOUS_ORDER] FK_JOIN: two ...')]")) is None
    True
    """
    for current in exception_chain(exception):
        if isinstance(current, SqlextError):
            return current
        message = _own_message(current)
        found = _parse(message, exception) if message is not None else None
        if found is not None:
            return found
    return None


def exception_chain(exception: BaseException, causes=None):
    """The exception and what it wraps (``causes(e)``, by default :func:`_causes`), each once,
    nearest first; what an exception wraps is asked only once the caller goes on past it."""
    causes = causes or _causes
    seen: set[int] = set()
    pending: list[BaseException | None] = [exception]
    while pending:
        current = pending.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending.extend(causes(current))


# Spark's class for raise_error(...) in SQL; its text is the parameter errorMessage.
_USER_RAISED = "USER_RAISED_EXCEPTION"
# A Spark Connect error names the server's exception class first: "(org.apache...) ".
_REASON_PREFIX = re.compile(r"^\([\w.$]+\) ")
_TRACEBACK = "Traceback (most recent call last):"


def _own_message(exception: BaseException) -> str | None:
    """The text an exception was raised with, without a plan or stack trace after it."""
    condition, parameters = _condition(exception)
    if condition == _USER_RAISED:
        return parameters.get("errorMessage")
    if condition is not None:
        # a Python worker's error (PYTHON_EXCEPTION, a table function's analyze or eval)
        # carries the worker's traceback as a parameter; any other class is Spark's own
        tracebacks = [value for value in parameters.values() if _TRACEBACK in str(value)]
        return _worker_message(tracebacks[0]) if tracebacks else None
    java = getattr(exception, "java_exception", None)  # an unconverted Py4JJavaError
    text = str(java.getMessage() or "") if java is not None else str(exception)
    if _TRACEBACK in text:
        return _worker_message(text)
    return _REASON_PREFIX.sub("", text.strip()).split("\n", 1)[0]


def _condition(exception: BaseException) -> tuple[str | None, dict]:
    """A Spark error's class and message parameters (None, {} for any other exception)."""
    try:
        from pyspark.errors import PySparkException
    except ImportError:  # pragma: no cover - sqlext always runs with PySpark
        return None, {}
    if not isinstance(exception, PySparkException):
        return None, {}
    try:
        return exception.getCondition(), dict(exception.getMessageParameters() or {})
    except Exception:  # noqa: BLE001 - a stopped JVM cannot tell; read the message instead
        return None, {}


def _worker_message(traceback: str) -> str | None:
    """The message of the exception a Python traceback ends with."""
    _, sep, message = (_worker_exception(traceback) or "").partition(": ")
    return message if sep else None


def _worker_exception(traceback: str) -> str | None:
    """The line naming the exception a Python traceback ends with ("ValueError: ...")."""
    lines = traceback.split(_TRACEBACK)[-1].splitlines()
    for line in lines[1:] if len(lines) > 1 else lines:
        if line and not line[0].isspace():
            return line
    return None


def _causes(exception: BaseException) -> list[BaseException | None]:
    """What an exception wraps: PySpark's converted JVM cause, and Python's own chain."""
    causes = [getattr(exception, "_cause", None), exception.__cause__]
    java = getattr(exception, "java_exception", None)
    if java is not None:
        try:
            from pyspark.errors.exceptions.captured import convert_exception

            causes.append(convert_exception(java))
        except Exception:  # noqa: BLE001 - no JVM to ask: nothing more to read
            pass
    return causes


def _parse(message: str, exception: BaseException) -> SqlextError | None:
    """A sqlext error if ``message`` starts as one ("[CLASS] FUNCTION: ...")."""
    message = _REASON_PREFIX.sub("", message.strip())
    message = re.sub(rf"^\[{_USER_RAISED}\] ", "", message)
    match = _MESSAGE_START.match(message)
    if not match or match.group("cls") not in MESSAGES:
        return None
    # Spark appends its own context after our text; keep ours only.
    message = re.split(r"\. SQLSTATE: |\s+SQLSTATE: |\n", message)[0].rstrip()
    if not message.endswith("."):
        message += "."
    return SqlextSparkError(match.group("cls"), message, exception)


def spark_error_summary(exception: BaseException) -> str:
    """Spark's own message of an error on one line: its class and text, without the plan or
    the JVM stack trace, and with the position Spark names only when it points into text the
    user wrote (not into a statement sqlext rewrote: see :func:`note_rewritten`)."""
    java = getattr(exception, "java_exception", None)
    if java is not None:  # a JVM error PySpark did not wrap (a Py4JJavaError): read it as PySpark would
        return _java_error_summary(exception, java)
    condition, parameters = _condition(exception)
    text = str(exception).strip()
    tracebacks = [value for value in parameters.values() if _TRACEBACK in str(value)]
    if condition is not None and tracebacks:  # a Python worker's error: the exception it raised
        return f"[{condition}] {_worker_exception(tracebacks[0]) or text.splitlines()[0]}"
    if condition is not None:
        message = _connect_message(exception)
        if message is None:
            try:
                message = exception.getMessage()  # built from class and parameters: no plan
            except Exception:  # noqa: BLE001 - a stopped JVM: fall back to the text's first line
                message = ""
        if message:
            message = " ".join(line.strip() for line in message.strip().splitlines())
            position = _POSITION.search(text)
            if position and not getattr(exception, _REWRITTEN, False):
                message += f"; line {position.group('line')} pos {position.group('pos')}"
            return message
    first = text.splitlines()[0] if text else type(exception).__name__
    first = first.split("\n\tat ")[0]
    if getattr(exception, _REWRITTEN, False):
        first = _POSITION.sub("", first)
    return first


# what follows a Spark Connect error's message in the server's text: the plan (";\n'Project
# ..."), the SQL fragment ("== SQL ==", "== SQL (line 1, position 8) =="), the JVM's stack trace
_CONNECT_CONTEXT = re.compile(r";\n|\n+== (?:SQL|DataFrame)\b|\n+JVM stacktrace:")
_TRAILING_POSITION = re.compile(r";? ?\(?line \d+,? pos(?:ition)? \d+\)?;?$")


def _connect_message(exception: BaseException) -> str | None:
    """A Spark Connect error's message as a classic session's ``getMessage()`` gives it: the
    server's text up to the plan, the SQL fragment or the JVM's stack trace after it (which the
    client adds when the server's settings ask for it), without the position (the caller adds
    it as it does for a classic error). None for an error that is not Spark Connect's."""
    if not any(cls.__module__ == "pyspark.errors.exceptions.connect" for cls in type(exception).__mro__):
        return None
    text = str(getattr(exception, "_message", None) or "").strip()
    message = _CONNECT_CONTEXT.split(text, maxsplit=1)[0].strip()
    return _TRAILING_POSITION.sub("", message).rstrip()


def _java_error_summary(exception: BaseException, java) -> str:
    try:
        from pyspark.errors.exceptions.captured import convert_exception

        converted = convert_exception(java)
        if converted.getCondition() is not None:
            if getattr(exception, _REWRITTEN, False):
                note_rewritten(converted)
            return spark_error_summary(converted)
        text = str(java.toString())
    except Exception:  # noqa: BLE001 - no JVM to ask: Python's text of it
        text = str(exception)
    text = text.strip()
    return text.splitlines()[0] if text else type(exception).__name__


# Where Spark says an error is: "; line 1 pos 7", "(line 1, pos 0)", "== SQL (line 1, position 8) ==".
_POSITION = re.compile(r";? ?\(?line (?P<line>\d+),? pos(?:ition)? (?P<pos>\d+)\)?;?")
_REWRITTEN = "sqlext_rewritten"


def note_rewritten(exception: BaseException) -> None:
    """Mark a Spark error as raised by a statement sqlext rewrote, whose positions point into
    text the user never wrote."""
    try:
        setattr(exception, _REWRITTEN, True)
    except AttributeError:  # an exception type without attributes of its own
        pass

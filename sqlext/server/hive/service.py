"""The calls of HiveServer2's TCLIService, served on Spark sessions: one session of Spark per
client session (``spark.newSession()``: its own temporary views and settings, the catalog
shared), and an operation per statement or catalog call, whose result is held until the
client closes it.

A statement runs on a thread of its own (the caller waits for it unless the client asked to
run asynchronously), with its Spark jobs tagged: cancelling the operation cancels the jobs of
its tag, again until the thread has stopped, since a statement may start a job after another
(a recursion starts one per level). Every call answers a status; an error's carries a SQLSTATE
and sqlext's one-line message, never a stack trace.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid

from sqlglot import exp

from sqlext.errors import SqlextError, sql_state
from sqlext.server.hive import catalog
from sqlext.server.hive.execution import FUNCTION, describe, run_text
from sqlext.server.hive.protocol import V6, V10, ttypes
from sqlext.server.hive.rowsets import Result, collect
from sqlext.server.hive.settings import SHOW_TABLES, is_show_tables_key, show_tables_shape

log = logging.getLogger(__name__)

State = ttypes.TOperationState
Kind = ttypes.TOperationType
# how long a cancel goes on cancelling the jobs of its tag after the statement's thread stopped
_CANCEL_GRACE_SECONDS = 10.0
_DONE = (State.FINISHED_STATE, State.ERROR_STATE, State.CANCELED_STATE, State.CLOSED_STATE)


def ok():
    return ttypes.TStatus(statusCode=ttypes.TStatusCode.SUCCESS_STATUS)


def failed(message: str, state: str, code=ttypes.TStatusCode.ERROR_STATUS):
    return ttypes.TStatus(statusCode=code, sqlState=state, errorMessage=message, errorCode=0)


def error_status(error: BaseException):
    """The status of a call that raised ``error``."""
    if isinstance(error, SqlextError) and error.error_class == "JDBC_UNKNOWN_HANDLE":
        return failed(str(error), sql_state(error.error_class), ttypes.TStatusCode.INVALID_HANDLE_STATUS)
    return failed(*describe(error))


def _handle_id():
    return ttypes.THandleIdentifier(guid=uuid.uuid4().bytes, secret=os.urandom(16))


class Operation:
    """A statement or a catalog call, and its result once it has one."""

    def __init__(self, session: "Session", kind: int):
        self.session = session
        self.kind = kind
        self.id = _handle_id()
        self.state = State.INITIALIZED_STATE
        self.error: tuple[str, str] | None = None  # message, SQLSTATE
        self.result: Result | None = None
        self.started = int(time.time() * 1000)
        self.completed = 0
        self.tag = f"sqlext-jdbc-{self.id.guid.hex()}"
        self.thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def handle(self):
        return ttypes.TOperationHandle(operationId=self.id, operationType=self.kind, hasResultSet=True)

    def _finish(self, state: int, result: Result | None = None, error=None) -> None:
        with self._lock:
            if self.state in _DONE:  # cancelled or closed meanwhile: its outcome is dropped
                return
            self.state, self.result, self.error = state, result, error
            self.completed = int(time.time() * 1000)

    def run_now(self, work) -> None:
        """Run a catalog call on the calling thread."""
        self.state = State.RUNNING_STATE
        try:
            self._finish(State.FINISHED_STATE, work())
        except Exception as error:  # noqa: BLE001 - the client is told, in one line
            self._finish(State.ERROR_STATE, error=describe(error))

    def start(self, work) -> None:
        """Run a statement on a thread of its own, its Spark jobs tagged with ``self.tag``."""
        self.state = State.RUNNING_STATE
        context = self.session.spark.sparkContext

        def run():
            context.addJobTag(self.tag)
            try:
                self._finish(State.FINISHED_STATE, work())
            except Exception as error:  # noqa: BLE001 - the client is told, in one line
                log.debug("statement failed", exc_info=True)
                self._finish(State.ERROR_STATE, error=describe(error))
            finally:
                try:
                    context.removeJobTag(self.tag)
                except Exception:  # noqa: BLE001 - Spark stopped meanwhile (the server stopping)
                    pass

        self.thread = threading.Thread(target=run, name=f"sqlext-jdbc-op-{self.id.guid.hex()[:8]}", daemon=True)
        self.thread.start()

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()

    def cancel(self, final_state: int = State.CANCELED_STATE) -> None:
        """End the operation (CANCELED, or CLOSED) and cancel its Spark jobs, in the background
        until its thread stops."""
        with self._lock:
            running = self.state not in _DONE
            if final_state == State.CLOSED_STATE:
                self.state, self.result = State.CLOSED_STATE, None
            elif running:
                self.state = State.CANCELED_STATE
            if running:
                self.completed = int(time.time() * 1000)
        thread = self.thread
        if running and thread is not None and thread.is_alive():
            context = self.session.spark.sparkContext

            def keep_cancelling():
                # A job the statement started may outlive its thread: Arrow's serving thread in
                # the JVM goes on planning and running after Python has seen the first error.
                # So the tag's jobs are cancelled while any job runs, for a while after the
                # thread stopped (cancelling a tag touches only the jobs that carry it).
                try:
                    tracker = context.statusTracker()
                    stopped = None
                    while stopped is None or (time.monotonic() - stopped < _CANCEL_GRACE_SECONDS
                                              and tracker.getActiveJobsIds()):
                        context.cancelJobsWithTag(self.tag)
                        thread.join(0.25)
                        if stopped is None and not thread.is_alive():
                            stopped = time.monotonic()
                            time.sleep(0.5)  # a job about to start
                except Exception:  # noqa: BLE001 - Spark stopped (the server stopping): no job is left
                    pass

            threading.Thread(target=keep_cancelling, name="sqlext-jdbc-cancel", daemon=True).start()


class Session:
    """A client's session: a Spark session of its own and its operations."""

    def __init__(self, spark, user: str | None, protocol: int):
        self.spark = spark
        self.user = user
        self.protocol = protocol
        self.id = _handle_id()
        self.operations: dict[bytes, Operation] = {}
        self.lock = threading.Lock()

    def add(self, operation: Operation) -> Operation:
        with self.lock:
            self.operations[operation.id.guid] = operation
        return operation

    def close(self) -> None:
        with self.lock:
            operations = list(self.operations.values())
            self.operations.clear()
        for operation in operations:
            operation.cancel(State.CLOSED_STATE)


class Service:
    """The handler of TCLIService's calls (a thriftpy2 processor calls its methods by name).
    ``spark`` is the endpoint's session, from which each client session is made;
    ``show_tables`` the server's shape of SHOW TABLES (None: ``spark``'s
    ``sqlext.jdbc.showTables``, else Hive's)."""

    def __init__(self, spark, show_tables: str | None = None):
        from sqlext.session import ensure_installed

        self.spark = spark
        ensure_installed(spark)
        self.show_tables = show_tables_shape(show_tables if show_tables is not None
                                             else spark.conf.get(SHOW_TABLES, None))
        self.sessions: dict[bytes, Session] = {}
        self.operations: dict[bytes, Operation] = {}
        self.lock = threading.Lock()

    # sessions

    def OpenSession(self, req):
        try:
            if req.client_protocol is None or req.client_protocol < V6:
                version = ttypes.TProtocolVersion._VALUES_TO_NAMES.get(req.client_protocol, req.client_protocol)
                raise SqlextError("JDBC_CLIENT_UNSUPPORTED", function=FUNCTION, version=version)
            session = Session(self._new_spark(), req.username, min(req.client_protocol, V10))
            self._configure(session, req.configuration or {})
        except Exception as error:  # noqa: BLE001 - the client is told, in one line
            return ttypes.TOpenSessionResp(status=error_status(error), serverProtocolVersion=V10)
        with self.lock:
            self.sessions[session.id.guid] = session
        return ttypes.TOpenSessionResp(status=ok(), serverProtocolVersion=session.protocol,
                                       sessionHandle=ttypes.TSessionHandle(sessionId=session.id), configuration={})

    def _new_spark(self):
        from sqlext.session import ensure_installed

        return ensure_installed(self.spark.newSession())

    def _configure(self, session: Session, configuration: dict) -> None:
        """``set:hiveconf:K``/``set:hivevar:K`` of a spark.* key sets it, and
        ``sqlext.jdbc.showTables`` (with or without the prefix) the session's shape of SHOW
        TABLES; ``use:database`` makes that database the current one."""
        from sqlext.language.dialect import to_sql
        from sqlext.runner import run_statement

        for key, value in configuration.items():
            for prefix in ("set:hiveconf:", "set:hivevar:"):
                if key.startswith(prefix) and key[len(prefix):].startswith("spark."):
                    session.spark.conf.set(key[len(prefix):], value)
            if is_show_tables_key(key):
                session.spark.conf.set(SHOW_TABLES, show_tables_shape(value))
        database = configuration.get("use:database")
        if database:
            use = exp.Use(this=exp.Table(this=exp.to_identifier(database, quoted=True)))
            run_statement(session.spark, to_sql(use), function=FUNCTION)

    def CloseSession(self, req):
        try:
            session = self.close_session(req.sessionHandle.sessionId.guid)
            if session is None:
                raise _unknown("session", "Open a new session (reconnect).")
        except Exception as error:  # noqa: BLE001
            return ttypes.TCloseSessionResp(status=error_status(error))
        return ttypes.TCloseSessionResp(status=ok())

    def close_session(self, guid: bytes) -> Session | None:
        with self.lock:
            session = self.sessions.pop(guid, None)
            if session is not None:
                for op_guid in list(session.operations):
                    self.operations.pop(op_guid, None)
        if session is not None:
            session.close()
        return session

    def close_all(self, seconds: float = 10.0) -> None:
        """Close every session (cancelling its statements), and wait up to ``seconds`` for the
        statements to end, so that Spark can be stopped after."""
        with self.lock:
            sessions = list(self.sessions.values())
        threads = []
        for session in sessions:
            with session.lock:
                threads += [op.thread for op in session.operations.values() if op.thread is not None]
            self.close_session(session.id.guid)
        deadline = time.monotonic() + seconds
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _session(self, handle) -> Session:
        with self.lock:
            session = self.sessions.get(handle.sessionId.guid) if handle is not None else None
        if session is None:
            raise _unknown("session", "Open a new session (reconnect).")
        return session

    def _operation(self, handle) -> Operation:
        with self.lock:
            operation = self.operations.get(handle.operationId.guid) if handle is not None else None
        if operation is None:
            raise _unknown("operation", "Run the statement again.")
        return operation

    def _register(self, operation: Operation) -> Operation:
        operation.session.add(operation)
        with self.lock:
            self.operations[operation.id.guid] = operation
        return operation

    # information

    def GetInfo(self, req):
        try:
            session = self._session(req.sessionHandle)
            value = self._info(session, req.infoType)
        except Exception as error:  # noqa: BLE001
            return ttypes.TGetInfoResp(status=error_status(error), infoValue=ttypes.TGetInfoValue(stringValue=""))
        return ttypes.TGetInfoResp(status=ok(), infoValue=value)

    def _info(self, session: Session, info_type: int):
        Info, Value = ttypes.TGetInfoType, ttypes.TGetInfoValue
        strings = {Info.CLI_SERVER_NAME: "sqlext", Info.CLI_DBMS_NAME: "Spark SQL (sqlext)",
                   Info.CLI_DBMS_VER: self.spark.version, Info.CLI_IDENTIFIER_QUOTE_CHAR: "`",
                   Info.CLI_SEARCH_PATTERN_ESCAPE: "\\", Info.CLI_USER_NAME: session.user or "",
                   Info.CLI_DATA_SOURCE_READ_ONLY: "N", Info.CLI_CATALOG_NAME: "N",
                   Info.CLI_DATA_SOURCE_NAME: "sqlext"}
        lengths = {Info.CLI_MAX_COLUMN_NAME_LEN: 128, Info.CLI_MAX_SCHEMA_NAME_LEN: 128,
                   Info.CLI_MAX_TABLE_NAME_LEN: 128, Info.CLI_MAX_IDENTIFIER_LEN: 128,
                   Info.CLI_MAX_CATALOG_NAME_LEN: 0, Info.CLI_MAX_STATEMENT_LEN: 0}
        if info_type in strings:
            return Value(stringValue=strings[info_type])
        if info_type in lengths:
            return Value(lenValue=lengths[info_type])
        if info_type == Info.CLI_TXN_CAPABLE:
            return Value(smallIntValue=0)  # SQL_TC_NONE
        name = Info._VALUES_TO_NAMES.get(info_type, str(info_type))
        raise SqlextError("JDBC_NOT_SUPPORTED", function=FUNCTION, what=f"GetInfo of {name}",
                          fix="The client goes on without it.")

    # statements

    def ExecuteStatement(self, req):
        try:
            session = self._session(req.sessionHandle)
            operation = self._register(Operation(session, Kind.EXECUTE_STATEMENT))
            spark, text = session.spark, req.statement
            overlay = {k: v for k, v in (req.confOverlay or {}).items() if k.startswith("spark.") or k == SHOW_TABLES}

            def work():
                if overlay:  # a statement's own settings: set for it, then put back
                    before = {key: spark.conf.get(key, None) for key in overlay}
                    for key, value in overlay.items():
                        spark.conf.set(key, value)
                    try:
                        return collect(run_text(spark, text, self.show_tables))
                    finally:
                        for key, value in before.items():
                            if value is None:
                                spark.conf.unset(key)
                            else:
                                spark.conf.set(key, value)
                return collect(run_text(spark, text, self.show_tables))

            operation.start(work)
            if not req.runAsync:
                operation.wait()
                if operation.state == State.ERROR_STATE:
                    return ttypes.TExecuteStatementResp(status=failed(*operation.error),
                                                        operationHandle=operation.handle())
        except Exception as error:  # noqa: BLE001
            return ttypes.TExecuteStatementResp(status=error_status(error))
        return ttypes.TExecuteStatementResp(status=ok(), operationHandle=operation.handle())

    def GetOperationStatus(self, req):
        try:
            operation = self._operation(req.operationHandle)
        except Exception as error:  # noqa: BLE001
            return ttypes.TGetOperationStatusResp(status=error_status(error))
        message, state = operation.error if operation.state == State.ERROR_STATE else (None, None)
        return ttypes.TGetOperationStatusResp(
            status=ok(), operationState=operation.state, sqlState=state, errorMessage=message,
            errorCode=0 if message else None, operationStarted=operation.started,
            operationCompleted=operation.completed or None, hasResultSet=True)

    def CancelOperation(self, req):
        try:
            self._operation(req.operationHandle).cancel()
        except Exception as error:  # noqa: BLE001
            return ttypes.TCancelOperationResp(status=error_status(error))
        return ttypes.TCancelOperationResp(status=ok())

    def CloseOperation(self, req):
        try:
            operation = self._operation(req.operationHandle)
            with self.lock:
                self.operations.pop(operation.id.guid, None)
            with operation.session.lock:
                operation.session.operations.pop(operation.id.guid, None)
            operation.cancel(State.CLOSED_STATE)
        except Exception as error:  # noqa: BLE001
            return ttypes.TCloseOperationResp(status=error_status(error))
        return ttypes.TCloseOperationResp(status=ok())

    # results

    def _finished(self, handle) -> Operation:
        operation = self._operation(handle)
        if operation.state == State.ERROR_STATE:
            raise _Failed(*operation.error)
        if operation.state != State.FINISHED_STATE:
            what = {State.CANCELED_STATE: "cancelled", State.CLOSED_STATE: "closed"}.get(operation.state, "still running")
            raise SqlextError("JDBC_NOT_SUPPORTED", function=FUNCTION,
                              what=f"reading the results of an operation that is {what}",
                              fix="Wait until GetOperationStatus says FINISHED.")
        return operation

    def GetResultSetMetadata(self, req):
        try:
            operation = self._finished(req.operationHandle)
        except Exception as error:  # noqa: BLE001
            return ttypes.TGetResultSetMetadataResp(status=_status(error))
        return ttypes.TGetResultSetMetadataResp(status=ok(), schema=operation.result.schema())

    def FetchResults(self, req):
        try:
            if req.fetchType == 1:  # the operation's log: none is kept
                self._operation(req.operationHandle)
                empty = ttypes.TColumn(stringVal=ttypes.TStringColumn(values=[], nulls=b""))
                return ttypes.TFetchResultsResp(status=ok(), hasMoreRows=False, results=ttypes.TRowSet(
                    startRowOffset=0, rows=[], columns=[empty], columnCount=1))
            orientation = req.orientation or ttypes.TFetchOrientation.FETCH_NEXT
            if orientation not in (ttypes.TFetchOrientation.FETCH_NEXT, ttypes.TFetchOrientation.FETCH_FIRST):
                name = ttypes.TFetchOrientation._VALUES_TO_NAMES.get(orientation, orientation)
                raise SqlextError("JDBC_NOT_SUPPORTED", function=FUNCTION, what=f"the fetch orientation {name}",
                                  fix="Fetch the next rows, or the first ones again.")
            operation = self._finished(req.operationHandle)
            rows, more = operation.result.page(req.maxRows or 0,
                                               from_start=orientation == ttypes.TFetchOrientation.FETCH_FIRST)
        except Exception as error:  # noqa: BLE001
            return ttypes.TFetchResultsResp(status=_status(error))
        return ttypes.TFetchResultsResp(status=ok(), hasMoreRows=more, results=rows)

    # the catalog

    def _catalog_call(self, req, kind: int, work, response):
        try:
            session = self._session(req.sessionHandle)
            operation = self._register(Operation(session, kind))
            operation.run_now(lambda: work(session.spark))
            if operation.state == State.ERROR_STATE:
                return response(status=failed(*operation.error))
        except Exception as error:  # noqa: BLE001
            return response(status=error_status(error))
        return response(status=ok(), operationHandle=operation.handle())

    def GetCatalogs(self, req):
        return self._catalog_call(req, Kind.GET_CATALOGS, catalog.catalogs, ttypes.TGetCatalogsResp)

    def GetSchemas(self, req):
        return self._catalog_call(req, Kind.GET_SCHEMAS, lambda spark: catalog.schemas(spark, req.schemaName),
                                  ttypes.TGetSchemasResp)

    def GetTables(self, req):
        return self._catalog_call(
            req, Kind.GET_TABLES, lambda spark: catalog.tables(spark, req.schemaName, req.tableName, req.tableTypes),
            ttypes.TGetTablesResp)

    def GetTableTypes(self, req):
        return self._catalog_call(req, Kind.GET_TABLE_TYPES, lambda spark: catalog.table_types(),
                                  ttypes.TGetTableTypesResp)

    def GetColumns(self, req):
        return self._catalog_call(
            req, Kind.GET_COLUMNS,
            lambda spark: catalog.columns(spark, req.schemaName, req.tableName, req.columnName),
            ttypes.TGetColumnsResp)

    def GetTypeInfo(self, req):
        return self._catalog_call(req, Kind.GET_TYPE_INFO, lambda spark: catalog.type_info(),
                                  ttypes.TGetTypeInfoResp)

    def GetFunctions(self, req):
        return self._catalog_call(
            req, Kind.GET_FUNCTIONS, lambda spark: catalog.functions(spark, req.schemaName, req.functionName),
            ttypes.TGetFunctionsResp)

    def GetPrimaryKeys(self, req):
        return self._catalog_call(req, Kind.UNKNOWN, lambda spark: catalog.primary_keys(),
                                  ttypes.TGetPrimaryKeysResp)

    def GetCrossReference(self, req):
        return self._catalog_call(req, Kind.UNKNOWN, lambda spark: catalog.cross_reference(),
                                  ttypes.TGetCrossReferenceResp)

    # delegation tokens

    def _no_tokens(self, response):
        error = SqlextError("JDBC_NOT_SUPPORTED", function=FUNCTION, what="delegation tokens",
                            fix="Connect with the endpoint's token as the password.")
        return response(status=error_status(error))

    def GetDelegationToken(self, req):
        return self._no_tokens(ttypes.TGetDelegationTokenResp)

    def CancelDelegationToken(self, req):
        return self._no_tokens(ttypes.TCancelDelegationTokenResp)

    def RenewDelegationToken(self, req):
        return self._no_tokens(ttypes.TRenewDelegationTokenResp)


class _Failed(Exception):
    """An operation's own error, told again where its results are asked for."""

    def __init__(self, message: str, state: str):
        super().__init__(message)
        self.state = state


def _status(error: BaseException):
    if isinstance(error, _Failed):
        return failed(str(error), error.state)
    return error_status(error)


def _unknown(what: str, fix: str) -> SqlextError:
    return SqlextError("JDBC_UNKNOWN_HANDLE", function=FUNCTION, what=what, fix=fix)

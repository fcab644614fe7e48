"""dbt-spark's session cursor, with each statement run by sqlext's statement runner.

dbt-spark's ``Cursor.execute`` takes the process's Spark session and calls ``spark.sql``; here
the statement goes through ``sqlext.runner.run_statement`` instead, which rewrites it (FK_JOIN,
CHANGELOG_FILTER, self-joins, WITH RECURSIVE) and returns the DataFrame. Fetching rows and
describing columns are dbt-spark's own.
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager
from typing import Any, Dict, Optional

from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.spark.session import Connection, Cursor, SessionConnectionWrapper
from dbt_common.exceptions import DbtRuntimeError

logger = AdapterLogger("sqlext")

_lock = threading.Lock()
_session = None


def spark_session(parameters: Dict[str, str]):
    """The process's Spark session with sqlext installed, started once.

    If the process has no session yet, sqlext's embedded local session is started (local
    Spark on all cores, UI off, few shuffle partitions, quiet logs) with Hive support, so that
    tables persist between dbt runs in Spark's metastore (``metastore_db`` and
    ``spark-warehouse`` in the working directory unless ``parameters`` say otherwise), and
    with ``parameters`` (the profile's ``server_side_parameters``) as its settings. A session
    the process already has (a script that started Spark before invoking dbt) is used as it
    is, with ``parameters`` applied as Spark applies settings to an existing session. A
    session started here closes its catalog when the process ends.
    """
    global _session
    with _lock:
        if _session is None or _session.sparkContext._jsc is None:
            from pyspark import SparkContext
            from pyspark.sql import SparkSession

            from sqlext.local_spark import local_builder, quiet_python_logs, quiet_start
            from sqlext.session import ensure_installed
            from sqlext.session_options import close_catalog_at_exit, command_options, merged

            existing = SparkContext._active_spark_context is not None
            # the session options of `sqlext build` (none when dbt runs on its own): the profile's
            # parameters apply over them, and their --conf over the profile's
            options = command_options()
            if existing:
                builder = SparkSession.builder
            else:
                builder = local_builder("sqlext-dbt", cores=os.cpu_count() or 1,
                                        master=options.master if options else None).enableHiveSupport()
            if options is not None:
                parameters = merged(options.settings(), parameters, options.conf_settings())
            for key, value in parameters.items():
                builder = builder.config(key, value)
            session = quiet_start(builder)
            if not existing:
                session.sparkContext.setLogLevel("ERROR")
                quiet_python_logs()
                # dbt's JVM outlives dbt by half a second or more, with the catalog open: the
                # next command of a script (dbt build && sqlext sql ...) would find it in use
                close_catalog_at_exit(session)
            # dbt sends statements sqlglot reads only as commands (SHOW TABLE EXTENDED ...);
            # sqlext passes them to Spark unchanged, so sqlglot's warning about each is noise
            logging.getLogger("sqlglot").setLevel(logging.ERROR)
            _session = ensure_installed(session)
        return _session


@contextmanager
def as_dbt_errors():
    """A sqlext error reaches dbt as its "[CLASS] FUNCTION: ..." line, Spark's own as its
    "[CLASS] message" (without the plan and the JVM stack trace, as sqlext's commands show it).
    An incremental run's errors name the adapter, ``sqlext dbt`` (:func:`sqlext.errors.surface`)."""
    from pyspark.errors import PySparkException

    from sqlext.errors import SqlextError, surface
    from sqlext.runner import error_message

    try:
        with surface("sqlext dbt"):
            yield
    except (SqlextError, PySparkException) as error:
        raise DbtRuntimeError(error_message(error, "sqlext dbt") or str(error)) from error


class SqlextCursor(Cursor):
    def execute(self, sql: str, *parameters: Any) -> None:
        from sqlext.runner import run_statement

        if len(parameters) > 0:
            sql = sql % parameters
        spark = spark_session(self.server_side_parameters)
        with as_dbt_errors():
            self._df = run_statement(spark, sql, on_plan=_log_plan)


def _log_plan(plan) -> None:
    """Log, at debug level (dbt's log file), which rules rewrote a statement and how."""
    if plan.changed:
        fired = "; ".join(f"{note.rule}: {note.text}" for note in plan.notes if note.fired)
        logger.debug(f"sqlext rewrote the statement ({fired})")


class SqlextConnection(Connection):
    def cursor(self) -> SqlextCursor:
        return SqlextCursor(server_side_parameters=self.server_side_parameters)


class SqlextSessionConnectionWrapper(SessionConnectionWrapper):
    handle: SqlextConnection
    _cursor: Optional[SqlextCursor]  # type: ignore[assignment]

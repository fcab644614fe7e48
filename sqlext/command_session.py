"""Where a command's Spark session runs: attached to a Spark Connect server (``--remote``,
``$SPARK_REMOTE``, or the server ``sqlext serve`` started in the working folder), or Spark of
the command's own with its session options (:mod:`sqlext.session_options`) applied over
sqlext's defaults. Either way sqlext is installed on it.

pyspark is imported where a session starts: the CLI imports this module as it starts, and
``sqlext --help`` does not wait for pyspark.
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlparse

from sqlext.errors import SqlextError
from sqlext.local_spark import embedded_settings, quiet_python_logs, quiet_start
from sqlext.server_state import running_server
from sqlext.session import install
from sqlext.session_options import (CATALOG_MEMORY, REMOTE_ENV, SessionOptions, check_catalog_free,
                                    close_catalog_at_exit, merged)


def command_session(options: SessionOptions, function: str, app_name: str = "sqlext", attach: bool = True):
    """The session of a command: attached to a Spark Connect server where ``attach`` allows
    and :func:`attach_address` finds one, else Spark of the command's own with the options
    applied (:func:`embedded_session`). sqlext is installed on it."""
    from pyspark import SparkContext

    if attach:
        address = attach_address(options)
        if address is not None:
            return attached_session(address, options, function)
    elif options.catalog is None and SparkContext._active_spark_context is None:
        if running_server(Path.cwd()) is not None:  # it has the folder's catalog open
            options = replace(options, catalog=CATALOG_MEMORY)
            print(f"-- {function} keeps its tables in memory: the server sqlext serve started here has this "
                  "folder's catalog (--catalog DIR gives it another)", file=sys.stderr)
    return embedded_session(options, function, app_name)


def attach_address(options: SessionOptions) -> str | None:
    """Where a command attaches: ``--remote``; else nowhere with ``--master`` (Spark of the
    command's own) or in a process that already runs Spark; else ``$SPARK_REMOTE``; else the
    server ``sqlext serve`` started in the working folder, while it runs."""
    from pyspark import SparkContext

    if options.remote:
        return options.remote
    if options.master or SparkContext._active_spark_context is not None:
        return None
    if os.environ.get(REMOTE_ENV):
        return os.environ[REMOTE_ENV]
    server = running_server(Path.cwd())
    return None if server is None else server.address


def attached_session(address: str, options: SessionOptions, function: str):
    """A Spark Connect session on the server at ``address``, with ``--conf`` set on it and
    sqlext installed; it is released when the command ends. Options that only apply where
    Spark starts are refused: the server already runs with its own."""
    from pyspark.sql import SparkSession

    given = options.starting_options()
    if given:
        raise SqlextError("REMOTE_SESSION_OPTION", function=function, option=given[0], address=public(address))
    reason = unreachable(address)
    if reason is not None:  # the client would retry for minutes before it says so
        raise SqlextError("SERVER_UNREACHABLE", function=function, address=public(address), reason=reason,
                          env=REMOTE_ENV)
    quiet_python_logs()
    spark = SparkSession.builder.remote(address).getOrCreate()
    atexit.register(_release, spark)
    for key, value in options.conf:
        spark.conf.set(key, value)
    return install(spark)


def _release(spark) -> None:
    try:
        spark.stop()
    except Exception:  # noqa: BLE001 - the server went away: nothing to release
        pass


def unreachable(address: str, seconds: float = 5.0) -> str | None:
    """Why nothing answers at a Spark Connect address, or None when something listens there."""
    try:
        parsed = urlparse(address.partition("/;")[0].replace("sc://", "http://", 1))
        host, port = parsed.hostname or "localhost", parsed.port or 15002
    except ValueError as error:
        return str(error)
    try:
        socket.create_connection((host, port), timeout=seconds).close()
    except OSError as error:
        return f"{host}:{port}: {error.strerror or error}"
    return None


def public(address: str) -> str:
    """A Spark Connect address as a message may show it: without its token."""
    base, _, params = address.partition("/;")
    kept = [p for p in params.split(";") if p and not p.startswith("token=")]
    return base + ("/;" + ";".join(kept) if kept else "")


def embedded_session(options: SessionOptions, function: str, app_name: str = "sqlext"):
    """Spark of the command's own (the embedded local engine, or ``--master``), with the
    options applied over sqlext's defaults; a process that already runs Spark keeps its
    session (only runtime settings then apply, as Spark applies them)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    # PySpark would start a Spark Connect client instead of Spark while SPARK_REMOTE is set
    os.environ.pop(REMOTE_ENV, None)
    folder = options.catalog_folder()
    if folder is not None and SparkContext._active_spark_context is None:
        check_catalog_free(folder, function)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(options.master or "local[2]")
    for key, value in merged(embedded_settings(app_name), options.settings(), options.conf_settings()).items():
        builder = builder.config(key, value)
    started = SparkContext._active_spark_context is None
    spark = quiet_start(builder, function)
    if started and folder is not None:
        close_catalog_at_exit(spark, folder)
    spark.sparkContext.setLogLevel("ERROR")
    quiet_python_logs()
    return install(spark)

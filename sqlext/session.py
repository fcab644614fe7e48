"""Session wiring: the embedded local Spark, registering sqlext on a session, and asking a
session about relations (analysis only, nothing runs)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sqlglot import exp

_LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
INSTALLED_FLAG = "spark.sqlext.installed"


def local_builder(app_name: str = "sqlext", cores: int = 2, shuffle_partitions: int = 4, master: str | None = None,
                  driver_memory: str = "4g"):
    """A builder for the embedded default engine: local Spark, UI off, quiet logs.

    Worker processes use this interpreter, so they see the same pyarrow and sqlext. With
    ``master`` (``spark://host:port``) the same settings run on a standalone cluster whose
    workers share this machine's Python environment.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    java_options = f"-Dlog4j2.configurationFile=file:{_LOG_CONFIG}"
    return (
        SparkSession.builder.master(master or f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        # in local mode the driver's JVM runs the executors too; Spark's 1 GB default ran out
        # of memory on 10^7-row recursions (bench scale)
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.adaptive.enabled", "true")
        # split a skewed join partition (a right row with very many subscribed left rows)
        # sooner than Spark's 256 MB default
        .config("spark.sql.adaptive.skewJoin.skewedPartitionThresholdInBytes", "64m")
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.executor.extraJavaOptions", java_options)
        .config("spark.sql.execution.pyspark.udf.faulthandler.enabled", "true")
        .config("spark.python.worker.faulthandler.enabled", "true")
        # a Python worker connects back to the JVM (and a streaming state client to its state
        # server) within this time; Spark's 15 s default timed out on a machine loaded 10x
        # over its cores
        .config("spark.python.authenticate.socketTimeout", "120s")
        # an incremental run writes its progress (offsets, commits, the file sources' logs)
        # through Hadoop's FileSystem API: on the local disk of the embedded engine its rename is
        # atomic, and it costs a third of what the default (FileContext) does per file, which an
        # incremental run over a small increment pays several times
        .config("spark.sql.streaming.checkpointFileManagerClass",
                "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager")
        # transformWithState (incremental runs) keeps its state in RocksDB
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    )


def local_session(app_name: str = "sqlext", conf: dict[str, str] | None = None, **options):
    """Start (or reuse) the embedded local session and install sqlext on it.

    ``conf`` holds further Spark settings (``--conf key=value`` on the command line); they
    are applied after the embedded defaults, so they override them.
    """
    builder = local_builder(app_name, **options)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = quiet_start(builder)
    spark.sparkContext.setLogLevel("ERROR")
    quiet_python_logs()
    return install(spark)


# What the JVM prints on its standard error as it starts, whatever the log configuration:
# Spark's launcher adds the incubator module jdk.incubator.vector, and the JVM warns of it.
JVM_START_NOISE = ("WARNING: Using incubator modules: ",)


def quiet_start(builder):
    """``builder.getOrCreate()``, with the lines of :data:`JVM_START_NOISE` kept off the
    terminal when this starts the JVM (log4j2.properties quiets Spark's own logs).

    The JVM inherits the process's standard error when PySpark launches it, so for the launch
    the descriptor points at a pipe; a daemon thread copies what arrives there to the real
    standard error, all but those lines, for as long as the process runs (the JVM and the
    Python workers it starts keep writing there).
    """
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return builder.getOrCreate()  # no JVM starts here
    try:
        sys.stderr.flush()
        terminal = os.dup(2)
        read_end, write_end = os.pipe()
    except OSError:  # no standard error to filter
        return builder.getOrCreate()
    import threading

    threading.Thread(target=_copy_without_noise, args=(read_end, terminal), name="sqlext-jvm-stderr",
                     daemon=True).start()
    os.dup2(write_end, 2)
    try:
        return builder.getOrCreate()
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)
        os.close(write_end)


def _copy_without_noise(source: int, target: int) -> None:
    """Copy ``source`` to ``target`` line by line, leaving out the JVM's start-up noise; never
    stop reading while the pipe is open (a full pipe would block the JVM)."""
    pending = b""
    noise = tuple(line.encode() for line in JVM_START_NOISE)
    while True:
        try:
            chunk = os.read(source, 65536)
        except OSError:
            return
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        kept = b"".join(line + b"\n" for line in lines if not line.startswith(noise))
        if pending and not any(n.startswith(pending) or pending.startswith(n) for n in noise):
            kept, pending = kept + pending, b""  # a partial line that is not noise: show it now
        if kept:
            try:
                os.write(target, kept)
            except OSError:  # the terminal went away: keep draining the pipe
                pass
    if pending and not pending.startswith(noise):
        try:
            os.write(target, pending)
        except OSError:
            pass


def install(spark):
    """Register sqlext's table functions on ``spark`` and return it."""
    register_table_functions(spark)
    spark.conf.set(INSTALLED_FLAG, "true")
    return spark


def ensure_installed(spark):
    """Install sqlext on ``spark`` unless it already is; return it."""
    if spark.conf.get(INSTALLED_FLAG, "false") != "true":
        install(spark)
    return spark


def quiet_query_context_logs() -> None:
    """PySpark logs every failed query with its JVM stack trace before raising it; sqlext
    reports errors itself, so the embedded session turns those two loggers off."""
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True


def quiet_python_logs() -> None:
    """The Python side's loggers that print what sqlext reports itself: PySpark's failed-query
    loggers (:func:`quiet_query_context_logs`), and py4j's, which logs the traceback of every
    Python function the JVM calls back that raises (a streaming micro-batch that fails), before
    the error reaches the caller as the run's error."""
    import logging

    quiet_query_context_logs()
    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    logging.getLogger("py4j.java_gateway").setLevel(logging.CRITICAL)


def register_table_functions(spark) -> None:
    from pyspark.sql.functions import udtf

    from sqlext.udfs.changelog_filter import ChangelogFilterUDTF

    spark.udtf.register("CHANGELOG_FILTER", udtf(ChangelogFilterUDTF, useArrow=True))


class SparkRelations:
    """Relations answered by a Spark session: it analyses queries, never runs them."""

    def __init__(self, spark):
        self._spark = spark

    def columns(self, query: str, relation: exp.Expression) -> list[str] | None:
        schema = self._schema(query)
        return None if schema is None else schema.fieldNames()

    def expression_type(self, query: str, expression: str) -> str | None:
        schema = self._schema(f"SELECT ({expression}) AS __sx_value FROM ({query})")
        if schema is None:
            return None
        return schema.fields[0].dataType.simpleString()

    def size_in_bytes(self, query: str) -> int | None:
        from pyspark.errors import PySparkException

        try:
            frame = self._spark.sql(query)
            return int(str(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
        except (PySparkException, AttributeError, ValueError):
            return None  # no estimate (for example on a Spark Connect session)

    def _schema(self, query: str):
        from pyspark.errors import PySparkException

        try:
            return self._spark.sql(query).schema
        except PySparkException:
            # Let the statement itself report the problem when it runs.
            return None

"""The embedded local Spark: its settings, a builder for it, and starting it quietly (the
JVM's start-up noise kept off the terminal, a JVM that does not start said in one line, the
Python loggers that repeat what sqlext reports itself turned off).

pyspark is imported where a session is built or started, not when this module is: ``import
sqlext`` (whose :mod:`sqlext.session` imports this module) works where pyspark is missing, and
``sqlext --help`` does not wait for it.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from pathlib import Path

from sqlext.errors import SqlextError

_LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
# where the JVM this process started writes its standard error (quiet_start), so that a stop on
# purpose can keep what the ending makes it say off the terminal (quiet_stop)
_JVM_OUTPUT: "_StartOutput | None" = None


def embedded_settings(app_name: str = "sqlext", shuffle_partitions: int = 4,
                      driver_memory: str = "4g") -> dict[str, str]:
    """The Spark settings of the embedded default engine (UI off, quiet logs), apart from the
    master: what :func:`local_builder` starts a session with, and what ``sqlext serve`` starts
    its server with."""
    java_options = f"-Dlog4j2.configurationFile=file:{_LOG_CONFIG}"
    return {
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        # in local mode the driver's JVM runs the executors too; Spark's 1 GB default ran out
        # of memory on 10^7-row recursions (bench scale)
        "spark.driver.memory": driver_memory,
        "spark.sql.adaptive.enabled": "true",
        # split a skewed join partition (a right row with very many subscribed left rows)
        # sooner than Spark's 256 MB default
        "spark.sql.adaptive.skewJoin.skewedPartitionThresholdInBytes": "64m",
        "spark.driver.extraJavaOptions": java_options,
        "spark.executor.extraJavaOptions": java_options,
        "spark.sql.execution.pyspark.udf.faulthandler.enabled": "true",
        "spark.python.worker.faulthandler.enabled": "true",
        # a Python worker connects back to the JVM (and a streaming state client to its state
        # server) within this time; Spark's 15 s default timed out on a machine loaded 10x
        # over its cores
        "spark.python.authenticate.socketTimeout": "120s",
        # an incremental run writes its progress (offsets, commits, the file sources' logs)
        # through Hadoop's FileSystem API: on the local disk of the embedded engine its rename is
        # atomic, and it costs a third of what the default (FileContext) does per file, which an
        # incremental run over a small increment pays several times
        "spark.sql.streaming.checkpointFileManagerClass":
            "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
        # Spark's own stateful streaming (a user's stream-stream join, the benchmarks' native
        # formulations) keeps its state in RocksDB rather than in the executors' heap
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    }


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
    builder = SparkSession.builder.master(master or f"local[{cores}]")
    for key, value in embedded_settings(app_name, shuffle_partitions, driver_memory).items():
        builder = builder.config(key, value)
    return builder


# What the JVM prints on its standard error as it starts, whatever the log configuration:
# Spark's launcher adds the incubator module jdk.incubator.vector, and the JVM warns of it.
JVM_START_NOISE = ("WARNING: Using incubator modules: ",)


def quiet_start(builder, function: str = "sqlext"):
    """``builder.getOrCreate()``, with the lines of :data:`JVM_START_NOISE` kept off the
    terminal when this starts the JVM (log4j2.properties quiets Spark's own logs).

    The JVM inherits the process's standard error when PySpark launches it, so for the launch
    the descriptor points at a pipe; a daemon thread copies what arrives there to the real
    standard error, all but those lines, for as long as the process runs (the JVM and the
    Python workers it starts keep writing there). What the JVM writes while it starts is held
    back until it has started: a JVM that does not start (a master Spark does not know, a
    setting it refuses) is ``[SPARK_DID_NOT_START]`` with the JVM's own reason, not its stack.
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
    global _JVM_OUTPUT
    held = _JVM_OUTPUT = _StartOutput(terminal)
    threading.Thread(target=_copy_without_noise, args=(read_end, held), name="sqlext-jvm-stderr",
                     daemon=True).start()
    os.dup2(write_end, 2)
    try:
        spark = builder.getOrCreate()
    except Exception as error:  # noqa: BLE001 - PySpark's JAVA_GATEWAY_EXITED and the like
        sys.stderr.flush()
        reason = held.reason()
        if reason is None:
            held.release()
            raise
        raise SqlextError("SPARK_DID_NOT_START", function=function, reason=reason) from error
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)
        os.close(write_end)
    held.release()
    return spark


class _StartOutput:
    """Where the JVM's standard error goes: held while it starts, then the terminal."""

    def __init__(self, terminal: int):
        self.terminal, self.lock, self.held, self.holding = terminal, threading.Lock(), [], True
        self.muted = False

    def write(self, data: bytes) -> None:
        with self.lock:
            if self.muted:
                return
            if self.holding:
                self.held.append(data)
                return
        try:
            os.write(self.terminal, data)
        except OSError:  # the terminal went away: keep draining the pipe
            pass

    def release(self) -> None:
        """Show what was held, and let later lines through."""
        with self.lock:
            self.holding, held = False, b"".join(self.held)
            self.held = []
        if held:
            self.write(held)

    def mute(self) -> None:
        """Drop whatever arrives from now on (the pipe is still drained)."""
        with self.lock:
            self.muted, self.held = True, []

    def reason(self) -> str | None:
        """The JVM's first error line of what it wrote while it failed to start (waiting a
        moment for the copy to catch up), without its stack; None if it wrote none."""
        for _ in range(20):
            with self.lock:
                text = b"".join(self.held).decode(errors="replace")
            lines = [line.strip() for line in text.splitlines()
                     if line.strip() and not line.startswith(("\tat ", "\t... ")) and not line.startswith(" ")]
            found = next((line for line in lines if "Exception" in line or "Error" in line), None)
            if found is not None:
                return re.sub(r"^Exception in thread \"main\" ", "", found)[:300]
            time.sleep(0.05)
        return None


def _copy_without_noise(source: int, target: "_StartOutput") -> None:
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
            target.write(kept)
    if pending and not pending.startswith(noise):
        target.write(pending)


def quiet_stop(spark) -> None:
    """Before Spark is stopped on purpose while it works (Ctrl-C on a run): what the stop makes
    it say is kept off the terminal for the rest of the process. Stopping the queries and then
    Spark under running tasks makes the JVM log errors with their stack traces (a task's
    broadcast block removed under it, ``RpcEnvStoppedException`` from the stream's thread, a
    task result the stopped scheduler refuses), print the stack of the stream's thread ended by
    the stop, and py4j log the calls that the ending JVM no longer answers. So: every JVM
    logger is turned off (log4j's levels, set through the JVM while it still answers), the
    JVM's standard error (and its Python workers', which write there) is no longer copied to
    the terminal (:func:`quiet_start`'s pipe), and Python's logging is off (py4j logs through
    the root logger). Only a stop the user asked for calls this: a run that fails by itself
    reports its error as always."""
    if _JVM_OUTPUT is not None:
        _JVM_OUTPUT.mute()
    logging.disable(logging.CRITICAL)
    try:
        log4j = spark._jvm.org.apache.logging.log4j
        log4j.core.config.Configurator.setAllLevels(log4j.LogManager.ROOT_LOGGER_NAME, log4j.Level.OFF)
    except Exception:  # noqa: BLE001 - a JVM that no longer answers says nothing more either
        pass


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
    quiet_query_context_logs()
    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
    logging.getLogger("py4j.java_gateway").setLevel(logging.CRITICAL)

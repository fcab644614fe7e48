"""Session wiring: the embedded local Spark, registering sqlext on a session, and asking a
session about relations (analysis only, nothing runs)."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from sqlglot import exp

_LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
INSTALLED_FLAG = "spark.sqlext.installed"


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

    from sqlext.errors import SqlextError

    if SparkContext._active_spark_context is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return builder.getOrCreate()  # no JVM starts here
    try:
        sys.stderr.flush()
        terminal = os.dup(2)
        read_end, write_end = os.pipe()
    except OSError:  # no standard error to filter
        return builder.getOrCreate()
    import threading

    held = _StartOutput(terminal)
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
        import threading

        self.terminal, self.lock, self.held, self.holding = terminal, threading.Lock(), [], True

    def write(self, data: bytes) -> None:
        with self.lock:
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

    def reason(self) -> str | None:
        """The JVM's first error line of what it wrote while it failed to start (waiting a
        moment for the copy to catch up), without its stack; None if it wrote none."""
        import time

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


def install(spark):
    """Register sqlext's table functions on ``spark`` and return it. From then on, an error
    of sqlext's that Spark raises in this process is raised as ``SqlextError``
    (:mod:`sqlext.spark_errors`)."""
    from sqlext.spark_errors import install_error_hooks

    install_error_hooks(spark)
    register_table_functions(spark)
    spark.conf.set(INSTALLED_FLAG, "true")
    return spark


def ensure_installed(spark):
    """Install sqlext on ``spark`` unless it already is; return it. The error hooks are
    per process, and a Spark Connect server's session may have been installed on by another
    client: they are installed in any case (once)."""
    from sqlext.spark_errors import install_error_hooks

    if spark.conf.get(INSTALLED_FLAG, "false") != "true":
        install(spark)
    else:
        install_error_hooks(spark)
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
    """Register, under its name, each function of the catalogue that has a Python table function."""
    from pyspark.sql.functions import udtf

    from sqlext.functions import catalogue

    for function in catalogue.functions():
        if function.table_function is not None:
            spark.udtf.register(function.name, udtf(function.part("table_function"), useArrow=True))


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


# -- the session options of the commands that start Spark (sqlext run, sql, explain, stream,
# build, bench, serve): parsed here, and applied here

CATALOG_MEMORY = "memory"
METASTORE = "metastore_db"
WAREHOUSE = "spark-warehouse"
REMOTE_ENV = "SPARK_REMOTE"  # Spark's own: the Spark Connect server a client attaches to
_JAVA_OPTIONS = ("spark.driver.extraJavaOptions",)


@dataclass(frozen=True)
class SessionOptions:
    """What a command's options say about its Spark session, in spark-submit's words where
    spark-submit has them. ``catalog`` is a folder (None: the working folder) or ``memory``;
    ``remote`` a Spark Connect address to attach to."""

    master: str | None = None
    conf: tuple[tuple[str, str], ...] = ()
    packages: tuple[str, ...] = ()
    jars: tuple[str, ...] = ()
    driver_memory: str | None = None
    catalog: str | None = None
    remote: str | None = None

    def starting_options(self) -> list[str]:
        """The options given that only mean something where the command starts Spark."""
        given = [("--master", self.master), ("--packages", self.packages), ("--jars", self.jars),
                 ("--driver-memory", self.driver_memory), ("--catalog", self.catalog)]
        return [name for name, value in given if value]

    def to_argv(self) -> list[str]:
        """The options as a command line gives them."""
        argv = ["--master", self.master] if self.master else []
        for key, value in self.conf:
            argv += ["--conf", f"{key}={value}"]
        argv += ["--packages", ",".join(self.packages)] if self.packages else []
        argv += ["--jars", ",".join(self.jars)] if self.jars else []
        argv += ["--driver-memory", self.driver_memory] if self.driver_memory else []
        argv += ["--catalog", self.catalog] if self.catalog else []
        return argv + (["--remote", self.remote] if self.remote else [])

    def catalog_folder(self) -> Path | None:
        """The folder holding ``metastore_db`` and ``spark-warehouse``; None for a catalog in
        memory."""
        if self.catalog == CATALOG_MEMORY:
            return None
        return Path(self.catalog or os.getcwd()).resolve()

    def settings(self) -> dict[str, str]:
        """The Spark settings these options stand for, apart from the master, in the order
        they apply: the catalog, then the packages, jars and driver memory, then ``--conf``
        (last, so it overrides the others). Merge them over :func:`embedded_settings` with
        :func:`merged`."""
        settings: dict[str, str] = {}
        folder = self.catalog_folder()
        if folder is None:
            settings["spark.sql.catalogImplementation"] = "in-memory"
        else:
            settings.update(catalog_settings(folder))
        if self.packages:
            settings["spark.jars.packages"] = ",".join(self.packages)
        if self.jars:
            settings["spark.jars"] = ",".join(self.jars)
        if self.driver_memory:
            settings["spark.driver.memory"] = self.driver_memory
        return settings

    def conf_settings(self) -> dict[str, str]:
        return dict(self.conf)


def catalog_settings(folder: Path) -> dict[str, str]:
    """A persistent catalog in ``folder``, as spark-sql keeps one: the tables' definitions in
    a Derby database ``metastore_db`` (Spark's Hive metastore, whose jars PySpark bundles) and
    their files under ``spark-warehouse``; Derby's log goes to ``derby.log`` there too."""
    log = str(folder / "derby.log")
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(folder / WAREHOUSE),
        "spark.hadoop.javax.jdo.option.ConnectionURL":
            "jdbc:derby:;databaseName=" + str(folder / METASTORE) + ";create=true",
        "spark.driver.extraJavaOptions": f'"-Dderby.stream.error.file={log}"' if " " in log
        else f"-Dderby.stream.error.file={log}",
    }


def merged(*layers: dict[str, str]) -> dict[str, str]:
    """Settings layered in order, a later layer's value replacing an earlier one's, except
    that sqlext's own layers add to the driver's Java options rather than replace them (the
    last layer, ``--conf``, replaces them as spark-submit does)."""
    result: dict[str, str] = {}
    for index, layer in enumerate(layers):
        for key, value in layer.items():
            if key in _JAVA_OPTIONS and key in result and index < len(layers) - 1:
                result[key] = f"{result[key]} {value}"
            else:
                result[key] = value
    return result


_command_options: SessionOptions | None = None


def set_command_options(options: SessionOptions | None) -> None:
    """Keep the session options of the command this process runs, for a session that starts
    later in it: ``sqlext build`` hands a dbt project to dbt in this process, and the adapter
    starts the session (``dbt/adapters/sqlext/session.py``)."""
    global _command_options
    _command_options = options


def command_options() -> SessionOptions | None:
    return _command_options


def add_session_arguments(parser, remote: bool = True, what: str = "the command") -> None:
    """The session options, on every command that starts Spark (``remote``: the command can
    attach to a Spark Connect server instead)."""
    group = parser.add_argument_group(
        "session", "Where Spark runs and with which settings (the names are spark-submit's).")
    group.add_argument("--master", metavar="URL", default=None,
                       help="the Spark master: local[N], spark://host:port, ... (default: local[2], the embedded "
                            "local Spark)")
    group.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                       help="a Spark setting, applied after sqlext's and the options' own; repeatable")
    group.add_argument("--packages", action="append", default=[], metavar="COORDINATES",
                       help="Maven coordinates group:artifact:version of jars for the session, comma-separated; "
                            "repeatable (spark.jars.packages; needs the network or a local Ivy cache)")
    group.add_argument("--jars", action="append", default=[], metavar="JARS",
                       help="jar files for the session, comma-separated; repeatable (spark.jars)")
    group.add_argument("--driver-memory", metavar="MEM", default=None,
                       help="memory of the driver, which runs the executors too in local mode (default: 4g)")
    group.add_argument("--catalog", metavar="DIR|memory", default=None,
                       help="where tables are kept: metastore_db and spark-warehouse in DIR (default: the working "
                            "folder, as spark-sql), or memory: tables last as long as the command")
    if remote:
        group.add_argument("--remote", metavar="sc://HOST:PORT", default=None,
                           help=f"run {what} on this Spark Connect server (default: $SPARK_REMOTE, else the server "
                                "'sqlext serve' started in the working folder, else Spark of its own)")


def session_options(args) -> SessionOptions:
    """The session options of parsed arguments; ValueError (its message says which option
    and why) for a value that cannot be one, before anything starts."""
    conf = []
    for item in getattr(args, "conf", None) or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf {item!r} is not KEY=VALUE")
        conf.append((key.strip(), value.strip()))
    split = lambda items: tuple(part.strip() for item in items or [] for part in item.split(",") if part.strip())
    catalog = getattr(args, "catalog", None)
    if catalog is not None and not catalog.strip():
        raise ValueError("--catalog needs a folder, or memory")
    remote = getattr(args, "remote", None)
    if remote is not None and not remote.startswith("sc://"):
        raise ValueError(f"--remote {remote!r} is not a Spark Connect address (sc://host:port)")
    return SessionOptions(master=getattr(args, "master", None), conf=tuple(conf),
                          packages=split(getattr(args, "packages", None)), jars=split(getattr(args, "jars", None)),
                          driver_memory=getattr(args, "driver_memory", None), catalog=catalog, remote=remote)


def check_catalog_free(folder: Path, function: str) -> None:
    """Refuse at once a catalog whose Derby database another process has open (Derby lets one
    process open it; Spark would try for half a minute, then fail with thousands of lines of
    stack trace). Derby holds a lock on ``dbex.lck`` while it has the database open."""
    from sqlext.errors import SqlextError

    if catalog_open(folder):
        from sqlext.server_state import running_server

        if running_server(folder) is not None:
            holder = ", the server sqlext serve started there"
            fix = ("Leave out --master to attach to the server, or give this command a catalog of its own with "
                   "--catalog DIR or --catalog memory.")
        else:
            holder = " (another sqlext command, spark-sql, or a server working there)"
            fix = ("Run sqlext serve there, so that the commands started there share one session and its "
                   "catalog; give this command a catalog of its own with --catalog DIR or --catalog memory; or "
                   "wait for the other process to end.")
        raise SqlextError("CATALOG_IN_USE", function=function, folder=str(folder), holder=holder, fix=fix)


def catalog_open(folder: Path) -> bool:
    """Whether a process (another than this one) has the catalog's Derby database open."""
    import fcntl

    try:
        descriptor = os.open(folder / METASTORE / "dbex.lck", os.O_RDWR)
    except OSError:  # no database yet, or not ours to open: Spark says what is wrong
        return False
    try:
        fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.lockf(descriptor, fcntl.LOCK_UN)
        return False
    except OSError:
        return True
    finally:
        os.close(descriptor)


def _close_catalog_at_exit(spark, folder: Path) -> None:
    """When the command ends, close the catalog's Derby database in its JVM if it is open:
    PySpark lets the JVM end on its own after Python has gone, and until then the catalog
    would stay open, so that the next command, started at once (a script), found it in use.
    Derby's own shutdown closes it (and raises, as it says it has)."""
    import atexit

    def close() -> None:
        if not catalog_open(folder):
            return
        try:
            spark._jvm.java.sql.DriverManager.getConnection("jdbc:derby:;shutdown=true")
        except Exception:  # noqa: BLE001 - Derby reports a shutdown as an error (XJ015)
            pass

    atexit.register(close)


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
        from sqlext.server_state import running_server

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
    from sqlext.server_state import running_server

    server = running_server(Path.cwd())
    return None if server is None else server.address


def attached_session(address: str, options: SessionOptions, function: str):
    """A Spark Connect session on the server at ``address``, with ``--conf`` set on it and
    sqlext installed; it is released when the command ends. Options that only apply where
    Spark starts are refused: the server already runs with its own."""
    import atexit

    from pyspark.sql import SparkSession

    from sqlext.errors import SqlextError

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
    import socket
    from urllib.parse import urlparse

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

    # PySpark would start a Spark Connect client instead of Spark while SPARK_REMOTE is set
    os.environ.pop(REMOTE_ENV, None)
    folder = options.catalog_folder()
    if folder is not None and SparkContext._active_spark_context is None:
        check_catalog_free(folder, function)
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(options.master or "local[2]")
    for key, value in merged(embedded_settings(app_name), options.settings(), options.conf_settings()).items():
        builder = builder.config(key, value)
    started = SparkContext._active_spark_context is None
    spark = quiet_start(builder, function)
    if started and folder is not None:
        _close_catalog_at_exit(spark, folder)
    spark.sparkContext.setLogLevel("ERROR")
    quiet_python_logs()
    return install(spark)

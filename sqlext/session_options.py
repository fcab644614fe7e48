"""The session options of the commands that start Spark (``sqlext run``, ``sql``, ``explain``,
``stream``, ``build``, ``bench``, ``serve``): their arguments, what they parse to, and the Spark
settings they stand for; and the catalog folder a command's own Spark keeps its tables in
(``metastore_db`` and ``spark-warehouse``, as spark-sql keeps them), refused while another
process has it open (after a few seconds' wait for a process that is ending)."""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from pathlib import Path

from sqlext.errors import SqlextError
from sqlext.server_state import running_server

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
        (last, so it overrides the others). Merge them over
        :func:`sqlext.local_spark.embedded_settings` with :func:`merged`."""
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


# How long a command waits for a catalog another process has open to be released: PySpark's
# JVM outlives its Python process by half a second or more (dbt's, a command's), and holds the
# catalog until it ends, so a command chained after one (dbt build && sqlext sql ...) would
# otherwise find it in use.
CATALOG_WAIT = 5.0


def check_catalog_free(folder: Path, function: str, wait: float = CATALOG_WAIT) -> None:
    """Refuse a catalog whose Derby database another process has open (Derby lets one
    process open it; Spark would try for half a minute, then fail with thousands of lines of
    stack trace). Derby holds a lock on ``dbex.lck`` while it has the database open.

    A process that has just ended may still hold it for a moment (its JVM ending): the
    command waits up to ``wait`` seconds for it to be released before it refuses it. The
    server ``sqlext serve`` started in the folder does not end: it is refused at once."""
    if not catalog_open(folder):
        return
    if running_server(folder) is not None:
        holder = ", the server sqlext serve started there"
        fix = ("Leave out --master to attach to the server, or give this command a catalog of its own with "
               "--catalog DIR or --catalog memory.")
    elif _released_within(folder, wait):
        return
    else:
        holder = f" (another sqlext command, spark-sql, or a server working there), still open after {wait:g} s"
        fix = ("Run sqlext serve there, so that the commands started there share one session and its "
               "catalog; give this command a catalog of its own with --catalog DIR or --catalog memory; or "
               "wait for the other process to end.")
    raise SqlextError("CATALOG_IN_USE", function=function, folder=str(folder), holder=holder, fix=fix)


def _released_within(folder: Path, seconds: float) -> bool:
    """Whether the catalog's Derby database is released within ``seconds``."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        if not catalog_open(folder):
            return True
    return False


def catalog_open(folder: Path) -> bool:
    """Whether a process (another than this one) has the catalog's Derby database open."""
    import fcntl  # POSIX only: imported where a catalog's lock is tried, not where the CLI starts

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


def close_catalog_at_exit(spark, folder: Path | None = None) -> None:
    """When the command ends, close the catalog's Derby database in its JVM if it is open:
    PySpark lets the JVM end on its own after Python has gone, and until then the catalog
    would stay open, so that the next command, started at once (a script), found it in use.
    Derby's own shutdown closes it (and raises, as it says it has). Without ``folder`` (a
    session whose settings put the database elsewhere: dbt's), whatever Derby has open."""
    def close() -> None:
        if folder is not None and not catalog_open(folder):
            return
        try:
            spark._jvm.java.sql.DriverManager.getConnection("jdbc:derby:;shutdown=true")
        except Exception:  # noqa: BLE001 - Derby reports a shutdown as an error (XJ015)
            pass

    atexit.register(close)

"""The server process of ``sqlext serve`` (its program is ``python -m sqlext.cli.server_process
SPEC``, which hands :func:`main` the run of ``sqlext stream``).

It starts Spark in this process, a classic PySpark session with the settings a command's own
Spark would have, and Spark Connect inside that driver (Spark's ``SparkConnectPlugin``), so
that the commands that attach over Spark Connect and the runs that need the driver itself
(``sqlext stream``, the JDBC endpoint) share one JVM, one catalog and one warm set of Python
workers. ``SPEC`` is a JSON file, readable by its owner alone, that the starting command wrote
and this process deletes once read: the Spark settings, the master, and the JDBC endpoint's
address if one is asked for. The token every client must present is in the environment
(:data:`TOKEN_ENV`), off the command line. Each door binds its port itself (Spark Connect the
one the settings name, trying the next ones where the spec allows retries; a port of 0 is one
the system gives), so no other process can take a port between a check and the bind: when
everything listens, the process writes the ports it holds, read back from the sockets, to the
folder's state file (:mod:`sqlext.server_state`) and the ``ready`` file the spec names (or,
when a port was taken, which one, and ends), and runs until SIGTERM (``sqlext serve --stop``),
when it stops the doors, then Spark.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
CONNECT_PORT = "spark.connect.grpc.binding.port"
CONNECT_RETRIES = "spark.connect.grpc.port.maxRetries"  # the next ports Spark Connect tries (0: none)
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"  # Spark Connect reads its token here
MODULE = "sqlext.cli.server_process"  # the server's program (sqlext serve --stop checks its command line)
# a few change rows written inline, as a table argument
_CHANGES = "TABLE(SELECT * FROM VALUES (1, 5, 1L), (1, -1, 2L) AS t(id, v, _commit_version))"
# first statements, so that the clients after serve find Spark warm (the JVM's JIT, the
# analyser, the plans sqlext's rewrites give): each of sqlext's functions once, through sqlext
# as a statement over a table calls it, on a few rows written inline (no view is left behind)
# (tests/surfaces/test_serve_pieces.py checks that each function of the catalogue is here)
WARM_UP = (
    "SELECT 1",
    f"SELECT * FROM CHANGELOG_FILTER(input => {_CHANGES}, key => 'id', predicate => 'v > 0')",
    "SELECT * FROM FK_JOIN(left => TABLE(SELECT * FROM VALUES (1, 7, 1L) AS o(order_id, customer_id, "
    "_commit_version)), right => TABLE(SELECT * FROM VALUES (7, 'a', 1L) AS c(id, name, _commit_version)), "
    "left_key => 'order_id', foreign_key => 'customer_id', right_key => 'id')",
    "WITH RECURSIVE reach(node) AS (SELECT 1 UNION SELECT e.dst FROM reach AS r JOIN "
    "(SELECT * FROM VALUES (1, 2), (2, 3) AS e(src, dst)) AS e ON r.node = e.src) SELECT node FROM reach",
)
# and each function's registered table function (the catalogue's table_function), as Spark
# itself calls it (past sqlext's rewrite: a plain spark.sql, a notebook's), which starts Spark's
# Python workers
WARM_UP_TABLE_FUNCTIONS = (
    f"SELECT * FROM CHANGELOG_FILTER(input => {_CHANGES}, key => 'id', predicate => 'v > 0')",
)


def with_connect(settings: dict[str, str]) -> dict[str, str]:
    """``settings`` with Spark Connect's plugin among the driver's plugins."""
    plugins = [name for name in settings.get("spark.plugins", "").split(",") if name.strip()]
    if CONNECT_PLUGIN not in plugins:
        plugins.append(CONNECT_PLUGIN)
    return {**settings, "spark.plugins": ",".join(plugins)}


def start_spark(settings: dict[str, str], master: str):
    """The server's classic session, sqlext installed on it."""
    from pyspark.sql import SparkSession

    from sqlext.local_spark import quiet_python_logs
    from sqlext.session import install

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master)
    for key, value in with_connect(settings).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    quiet_python_logs()
    return install(spark)


def warm_up(spark) -> None:
    import sqlext

    for text in WARM_UP:
        sqlext.sql(spark, text).collect()
    for text in WARM_UP_TABLE_FUNCTIONS:
        spark.sql(text).collect()
    spark.catalog.listTables()  # opens the catalog (a Hive metastore: seconds, the first time)


def connect_port(spark) -> int:
    """The port Spark Connect listens on, as its server reports it (the one it bound)."""
    service = getattr(spark._jvm.org.apache.spark.sql.connect.service, "SparkConnectService$")
    return int(getattr(service, "MODULE$").localPort())


def _port_taken(error: BaseException) -> bool:
    """Whether ``error`` is a bind refused because the port is taken (Spark's, through py4j, or
    a socket's)."""
    from sqlext.errors import exception_chain

    return any(isinstance(e, OSError) and e.errno == errno.EADDRINUSE or "BindException" in str(e)
               for e in exception_chain(error))


def _name_itself(spec: dict, token: str, ports: dict) -> None:
    """The folder's state file, once everything listens: from now on the folder's commands
    attach, and ``sqlext serve --status`` names the server (while the starting command still
    warms it up)."""
    from pyspark import __version__

    from sqlext.server_state import Server, write_state

    jdbc = spec.get("jdbc") or {}
    write_state(Path(spec["folder"]), Server(
        address=f"sc://localhost:{ports['connect_port']}/;token={token}", port=ports["connect_port"], pid=os.getpid(),
        log=spec["log"], folder=spec["folder"], spark_version=__version__, stream_port=ports["stream_port"],
        jdbc_port=ports["jdbc_port"] or 0, jdbc_host=jdbc.get("host", "")))


def _write_ready(path: Path, ports: dict) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(ports))
    partial.replace(path)


def main(argv: list[str], run_stream) -> int:
    """Serve until SIGTERM; ``run_stream`` is the stream door's run (:class:`StreamDoor`)."""
    spec_path = Path(argv[0])
    spec = json.loads(spec_path.read_text())
    spec_path.unlink()
    stopping = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda *_: stopping.set())
    token = os.environ[TOKEN_ENV]
    ready = Path(spec["ready"])
    try:
        spark = start_spark(spec["settings"], spec["master"])
    except Exception as error:
        if not _port_taken(error):
            raise
        _write_ready(ready, {"taken": "--port", "port": int(spec["settings"].get(CONNECT_PORT, 0))})
        return 1
    ports = {"connect_port": connect_port(spark), "stream_port": None, "jdbc_port": None}
    warm_up(spark)

    from sqlext.server.streams import StreamDoor

    doors = [StreamDoor(spark, token, Path.cwd(), run_stream)]
    ports["stream_port"] = doors[0].port
    jdbc = spec.get("jdbc")
    if jdbc is not None:
        from sqlext.server.hive import start_endpoint

        try:
            endpoint = start_endpoint(spark, host=jdbc["host"], port=jdbc["port"],
                                      token=token if jdbc["token"] else None, show_tables=jdbc.get("show_tables"))
        except OSError as error:
            if not _port_taken(error):
                raise
            _write_ready(ready, {"taken": "--jdbc-port", "port": jdbc["port"], "host": jdbc["host"]})
            _stop(doors, spark)
            return 1
        doors.append(endpoint)
        ports["jdbc_port"] = endpoint.port
    _name_itself(spec, token, ports)
    _write_ready(ready, ports)
    print(f"sqlext serve: ready ({', '.join(f'{k} {v}' for k, v in ports.items() if v)})", flush=True)
    while not stopping.wait(1.0):
        pass
    print("sqlext serve: stopping", flush=True)
    _stop(doors, spark)
    print("sqlext serve: stopped", flush=True)
    return 0


def _stop(doors: list, spark) -> None:
    """Stop the doors (each ends its statements and runs first), then Spark, once no task runs."""
    for door in doors:
        try:
            door.stop()
        except Exception as error:  # noqa: BLE001 - stop the others, and Spark, whatever one says
            print(f"sqlext serve: a door did not stop cleanly: {error!r}", flush=True)
    _drain(spark)
    spark.stop()


def _drain(spark, seconds: float = 10.0) -> None:
    """Cancel every job and wait, up to ``seconds``, until no task runs: a cancelled task runs on
    until it checks for the kill, and one that reports its end to a scheduler being stopped
    leaves the JVM's trace in the log."""
    context = spark.sparkContext
    try:
        context.cancelAllJobs()
        tracker = context._jsc.sc().statusTracker()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and any(info.numRunningTasks() for info in tracker.getExecutorInfos()):
            time.sleep(0.1)
    except Exception as error:  # noqa: BLE001 - Spark is stopped next, whatever this says
        print(f"sqlext serve: the running tasks could not be waited for: {error!r}", flush=True)

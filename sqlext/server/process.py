"""The server process of ``sqlext serve`` (its program is ``python -m sqlext.cli.server_process
SPEC``, which hands :func:`main` the run of ``sqlext stream``).

It starts Spark in this process, a classic PySpark session with the settings a command's own
Spark would have, and Spark Connect inside that driver (Spark's ``SparkConnectPlugin``), so
that the commands that attach over Spark Connect and the runs that need the driver itself
(``sqlext stream``, the JDBC endpoint) share one JVM, one catalog and one warm set of Python
workers. ``SPEC`` is a JSON file, readable by its owner alone, that the starting command wrote
and this process deletes once read: the Spark settings, the master, and the JDBC endpoint's
address if one is asked for. The token every client must present is in the environment
(:data:`TOKEN_ENV`), off the command line. When everything listens, the process writes the
doors' ports to the ``ready`` file the spec names, and runs until SIGTERM (``sqlext serve
--stop``), when it stops the doors and Spark.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
TOKEN_ENV = "SPARK_CONNECT_AUTHENTICATE_TOKEN"  # Spark Connect reads its token here
MODULE = "sqlext.cli.server_process"  # the server's program (sqlext serve --stop checks its command line)
# first statements, so that the clients after serve find Spark warm (the JVM's JIT, the
# analyser, the plans sqlext's rewrites give, the Python workers)
WARM_UP = (
    "SELECT 1",
    "SELECT * FROM CHANGELOG_FILTER(input => TABLE(VALUES (1, 5, 1L), (1, -1, 2L) AS t(id, v, _commit_version)), "
    "key => 'id', predicate => 'v > 0')",
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
    spark.catalog.listTables()  # opens the catalog (a Hive metastore: seconds, the first time)


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
    spark = start_spark(spec["settings"], spec["master"])
    warm_up(spark)

    from sqlext.server.streams import StreamDoor

    doors = [StreamDoor(spark, token, Path.cwd(), run_stream)]
    ports = {"stream_port": doors[0].port, "jdbc_port": None}
    jdbc = spec.get("jdbc")
    if jdbc is not None:
        from sqlext.server.hive import start_endpoint

        endpoint = start_endpoint(spark, host=jdbc["host"], port=jdbc["port"],
                                  token=token if jdbc["token"] else None)
        doors.append(endpoint)
        ports["jdbc_port"] = endpoint.port
    _write_ready(Path(spec["ready"]), ports)
    print(f"sqlext serve: ready ({', '.join(f'{k} {v}' for k, v in ports.items() if v)})", flush=True)
    while not stopping.wait(1.0):
        pass
    print("sqlext serve: stopping", flush=True)
    for door in doors:
        try:
            door.stop()
        except Exception as error:  # noqa: BLE001 - stop the others, and Spark, whatever one says
            print(f"sqlext serve: a door did not stop cleanly: {error!r}", flush=True)
    spark.stop()
    return 0

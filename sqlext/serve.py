"""``sqlext serve``: a warm session for the clients of a folder.

Every command that starts Spark pays the JVM's start (several seconds, more on a busy
machine). ``sqlext serve`` starts the server process (:mod:`sqlext.server.process`) in the
background: a Spark driver with the settings a command's own Spark would have (sqlext's
defaults, the folder's catalog, the session options given to it), Spark Connect inside it, and
the doors of :mod:`sqlext.server`; it runs first queries so that the JIT and the Python workers
are warm, and returns. While it runs, ``sqlext sql``, ``run``, ``explain`` and ``build`` started
in that folder attach to it over Spark Connect (:func:`sqlext.command_session.attach_address`),
``sqlext stream`` carries its run out in the server's driver (:mod:`sqlext.server.streams`),
and with ``--jdbc-port`` JDBC, ODBC and PyHive clients reach it over HiveServer2's protocol
(:mod:`sqlext.server.hive`). Each client gets a session of its own (its temporary views and
settings are its own), and all of them share the server's catalog.

The server is the folder's: it runs there (its catalog is the folder's ``metastore_db`` and
``spark-warehouse``), listens on the loopback address only (the JDBC endpoint on another only
where ``--jdbc-host`` names it), and admits only clients that present its token. The state
file ``.sqlext-server`` in the folder (readable by its owner alone) names its addresses with
the token, its process and its log; ``sqlext serve --stop`` stops it and removes the file, and
a command that finds the file but no server answering ignores it (and removes it when the
process is gone).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import sqlext
from sqlext.errors import SqlextError
from sqlext.local_spark import embedded_settings, quiet_python_logs
from sqlext.server.process import MODULE as SERVER_MODULE
from sqlext.server.process import TOKEN_ENV, WARM_UP
from sqlext.server_state import STATE, Server, alive, listening, read_state, running_server, write_state
from sqlext.session_options import check_catalog_free, merged

FUNCTION = "sqlext serve"
LOG = ".sqlext-server.log"
DEFAULT_PORT = 15002  # Spark Connect's own default


def add_arguments(parser) -> None:
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--stop", action="store_true", help="stop the server this folder's sqlext serve started")
    what.add_argument("--status", action="store_true",
                      help="print the running server's address (with its token, for --remote or SPARK_REMOTE); "
                           "exit status 1 if none runs here")
    parser.add_argument("--port", type=int, default=None, metavar="N",
                        help=f"the port to listen on (default: {DEFAULT_PORT}, or a free one if that is taken)")
    parser.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                        help="how long to wait for the server to answer")
    parser.add_argument("--jdbc-port", type=int, default=None, metavar="N",
                        help="also listen for JDBC, ODBC and PyHive clients (HiveServer2's protocol) on port N "
                             "(10000 is HiveServer2's usual one; 0: a free port); off by default")
    parser.add_argument("--jdbc-host", default="127.0.0.1", metavar="ADDRESS",
                        help="the address the JDBC endpoint listens on: the loopback address unless you name "
                             "another (0.0.0.0: every interface)")
    parser.add_argument("--jdbc-no-token", action="store_true",
                        help="let JDBC clients in without the server's token as their password (anyone who "
                             "reaches the port runs SQL as you: only on a machine that is yours alone)")


def main(args) -> int:
    folder = Path.cwd().resolve()
    if args.stop:
        return stop(folder)
    if args.status:
        server = running_server(folder)
        if server is None:
            print(f"{FUNCTION}: no server runs in {folder}", file=sys.stderr)
            return 1
        print(server.address)
        print(f"{FUNCTION}: {server.shown} (process {server.pid}), log {server.log}", file=sys.stderr)
        if server.jdbc_port:
            print(f"{FUNCTION}: JDBC at {jdbc_url(server)}, password {server.token}", file=sys.stderr)
        return 0
    import fcntl

    with open(folder / LOG, "ab") as log:
        fcntl.flock(log.fileno(), fcntl.LOCK_EX)  # one sqlext serve at a time starts the folder's server
        server = running_server(folder)
        if server is not None:
            print(f"{FUNCTION}: already running in {folder}: {server.shown} (process {server.pid}); "
                  f"sqlext serve --stop stops it")
            return 0
        jdbc = None if args.jdbc_port is None else {"host": args.jdbc_host, "port": args.jdbc_port,
                                                     "token": not args.jdbc_no_token}
        server = start(folder, args.session, port=args.port, timeout=args.timeout, jdbc=jdbc)
    catalog = args.session.catalog_folder()
    print(f"{FUNCTION}: Spark Connect at {server.shown} (process {server.pid}), "
          f"catalog {'in memory' if catalog is None else catalog}")
    if server.jdbc_port:
        print(f"  JDBC at {jdbc_url(server)} ({jdbc_login(server, args.jdbc_no_token)})")
    print(f"  sqlext sql, run, explain and build started in {folder} attach to it; from elsewhere, "
          "--remote ADDRESS or SPARK_REMOTE=ADDRESS (sqlext serve --status here prints it)")
    print(f"  log: {server.log}; stop: sqlext serve --stop")
    return 0


def jdbc_url(server: Server) -> str:
    """The JDBC URL of the server's HiveServer2 endpoint."""
    host = "localhost" if server.jdbc_host in ("127.0.0.1", "") else server.jdbc_host
    return f"jdbc:hive2://{host}:{server.jdbc_port}/default"


def jdbc_login(server: Server, no_token: bool) -> str:
    if no_token:
        return "any user, no password: --jdbc-no-token"
    return "any user; password: the server's token, which sqlext serve --status prints"


def _is_our_server(pid: int) -> bool:
    """Whether ``pid`` is still a server sqlext serve started (not a process that took its number)."""
    try:
        done = subprocess.run(["ps", "-ww", "-p", str(pid), "-o", "command="], capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.SubprocessError):
        return alive(pid)
    return done.returncode == 0 and SERVER_MODULE in done.stdout


# -- starting and stopping

def _free_port(wanted: int | None, host: str = "127.0.0.1", what: str = "--port") -> int:
    """``wanted``, or the default port if it is free, or a free port the system gives."""
    for port in ([wanted] if wanted is not None else [DEFAULT_PORT, 0]):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
                return probe.getsockname()[1]
            except OSError as error:
                if wanted is not None:
                    raise SqlextError("SERVER_NOT_STARTED", function=FUNCTION,
                                      reason=f"{host}:{port} cannot be listened on ({error.strerror or error})",
                                      fix=f"Give another with {what} N.") from None
    raise AssertionError("unreachable")


def server_settings(options, port: int) -> dict[str, str]:
    """The server's Spark settings: those of a command's own Spark (sqlext's defaults, the
    catalog, the session options), listening on the loopback address alone."""
    listen = {"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port)}
    return merged(embedded_settings("sqlext serve"), options.settings(), listen, options.conf_settings())


def start(folder: Path, options, port: int | None = None, timeout: float = 300.0, jdbc: dict | None = None) -> Server:
    """Start the server in ``folder`` and return once it has answered a first query.
    ``jdbc``: the HiveServer2 endpoint's ``host``, ``port`` and whether a client must present
    the ``token``; None for none."""
    from pyspark import __version__

    catalog = options.catalog_folder()
    if catalog is not None:
        check_catalog_free(catalog, FUNCTION)
    port = _free_port(port)
    if jdbc is not None:
        jdbc = dict(jdbc, port=_free_port(jdbc["port"], host=jdbc["host"], what="--jdbc-port"))
    token = uuid.uuid4().hex
    log = folder / LOG
    ready = folder / f"{STATE}.ready"
    ready.unlink(missing_ok=True)
    spec = folder / f"{STATE}.spec"  # the settings, off the server's argv (they may hold secrets)
    descriptor = os.open(spec, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump({"settings": server_settings(options, port), "master": options.master or "local[2]",
                   "jdbc": jdbc, "ready": str(ready)}, file)
    env = {key: value for key, value in os.environ.items()
           if key not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE")}
    env.update({TOKEN_ENV: token, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable})
    with open(log, "ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", SERVER_MODULE, str(spec)], cwd=folder, env=env, stdin=subprocess.DEVNULL,
            stdout=output, stderr=subprocess.STDOUT, start_new_session=True)  # it outlives this command
    server = Server(address=f"sc://localhost:{port}/;token={token}", port=port, pid=process.pid, log=str(log),
                    folder=str(folder), spark_version=__version__)
    try:
        ports = _await(process, server, ready, timeout)
        server.stream_port = ports["stream_port"]
        if jdbc is not None:
            server.jdbc_port, server.jdbc_host = ports["jdbc_port"], jdbc["host"]
        _warm_up(server)
    except BaseException:
        end_server(process.pid)
        process.wait()
        raise
    finally:
        spec.unlink(missing_ok=True)
        ready.unlink(missing_ok=True)
    write_state(folder, server)
    return server


def _await(process, server: Server, ready: Path, timeout: float) -> dict:
    """The server's ports, once it has written them (everything listens) and Spark Connect answers."""
    deadline = time.monotonic() + timeout
    while not (ready.exists() and listening(server.port, 0.5)):
        if process.poll() is not None:
            raise SqlextError("SERVER_NOT_STARTED", function=FUNCTION, fix=_see_log(server.log),
                              reason=f"it stopped with status {process.returncode}{_last_error(server.log)}")
        if time.monotonic() > deadline:
            raise SqlextError("SERVER_NOT_STARTED", function=FUNCTION, fix=_see_log(server.log),
                              reason=f"it did not answer within {timeout:g} s (--timeout)")
        time.sleep(0.25)
    return json.loads(ready.read_text())


def _see_log(log: str) -> str:
    return f"Its log is {log}: fix what it says, and run sqlext serve again."


def _last_error(log: str) -> str:
    try:
        lines = [line for line in Path(log).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines if "Exception" in line or "ERROR" in line or "Error" in line]
    return f" ({(errors or lines or [''])[-1].strip()[:300]})" if lines else ""


def _warm_up(server: Server) -> None:
    """Run the first queries, as a command's client would, so that the server is warm."""
    from pyspark.sql import SparkSession

    quiet_python_logs()
    session = SparkSession.builder.remote(server.address).create()
    try:
        sqlext.install(session)
        for text in WARM_UP:
            sqlext.sql(session, text).collect()
        session.catalog.listTables()  # opens the catalog (a Hive metastore: seconds, the first time)
    finally:
        session.stop()


def end_server(pid: int, seconds: float = 30.0) -> None:
    """End the server's process group (the JVM and the Python workers it started): politely,
    then, after ``seconds``, at once."""
    for sent, wait in ((signal.SIGTERM, seconds), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sent)
        except ProcessLookupError:
            return
        except PermissionError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not alive(pid) or _reaped(pid):
                return
            time.sleep(0.2)


def _reaped(pid: int) -> bool:
    """Reap ``pid`` if it is this process's child that ended (a zombie still 'exists')."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child: os.kill tells
        return False
    return done == pid


def stop(folder: Path) -> int:
    server = read_state(folder)
    if server is None:
        print(f"{FUNCTION}: no server runs in {folder}", file=sys.stderr)
        return 0
    if alive(server.pid) and _is_our_server(server.pid):
        end_server(server.pid)
        print(f"{FUNCTION}: stopped the server at {server.shown} (process {server.pid})")
    else:
        print(f"{FUNCTION}: the server at {server.shown} was no longer running", file=sys.stderr)
    (folder / STATE).unlink(missing_ok=True)
    return 0

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
where ``--jdbc-host`` names it), and admits only clients that present its token. The server
binds its ports itself and, as soon as everything listens, writes the state file
``.sqlext-server`` in the folder (readable by its owner alone), which names its addresses with
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
from sqlext.server.hive.settings import SHOW_TABLES, show_tables_shape
from sqlext.server.process import CONNECT_PORT, CONNECT_RETRIES, TOKEN_ENV
from sqlext.server.process import MODULE as SERVER_MODULE
from sqlext.server_state import STATE, Server, alive, listening, read_state, running_server
from sqlext.session_options import check_catalog_free, merged

FUNCTION = "sqlext serve"
LOG = ".sqlext-server.log"
DEFAULT_PORT = 15002  # Spark Connect's own default
# how many ports after the default Spark Connect tries when another process took it meanwhile
PORT_RETRIES = 16


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

def _check_free(port: int, host: str = "127.0.0.1", what: str = "--port") -> None:
    """Refuse a port the user named that cannot be listened on now, before Spark starts (the
    server binds it itself, and says so if another process took it meanwhile)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as error:
            raise _port_refused(host, port, what, error.strerror or str(error)) from None


def _port_refused(host: str, port: int, what: str, reason: str) -> SqlextError:
    return SqlextError("SERVER_NOT_STARTED", function=FUNCTION, reason=f"{host}:{port} cannot be listened on ({reason})",
                       fix=f"Give another with {what} N, or leave {what} out for a free one.")


def _first_port(wanted: int | None) -> tuple[int, int]:
    """The port Spark Connect binds first and how many after it it may try: the one named
    (alone), else the default (and the next ones, should another process take it before the
    server binds it), else, where the default is taken, one the system gives."""
    if wanted is not None:
        _check_free(wanted)
        return wanted, 0
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", DEFAULT_PORT))
        except OSError:
            return 0, 0
    return DEFAULT_PORT, PORT_RETRIES


def server_settings(options, port: int, retries: int = 0) -> dict[str, str]:
    """The server's Spark settings: those of a command's own Spark (sqlext's defaults, the
    catalog, the session options), listening on the loopback address alone. The JDBC
    endpoint's own setting (``sqlext.jdbc.showTables``) is not Spark's: the spec carries it."""
    listen = {"spark.connect.grpc.binding.address": "127.0.0.1", CONNECT_PORT: str(port),
              CONNECT_RETRIES: str(retries)}
    conf = {key: value for key, value in options.conf_settings().items() if key != SHOW_TABLES}
    return merged(embedded_settings("sqlext serve"), options.settings(), listen, conf)


def start(folder: Path, options, port: int | None = None, timeout: float = 300.0, jdbc: dict | None = None) -> Server:
    """Start the server in ``folder`` and return once it has answered a first query (the
    server writes the folder's state file itself, as soon as it listens). ``port``: Spark
    Connect's (None: the default, or a free one); ``jdbc``: the HiveServer2 endpoint's
    ``host``, ``port`` (0: a free one) and whether a client must present the ``token``; None
    for none."""
    show_tables = show_tables_shape(options.conf_settings().get(SHOW_TABLES), FUNCTION)  # before Spark starts
    catalog = options.catalog_folder()
    if catalog is not None:
        check_catalog_free(catalog, FUNCTION)
    port, retries = _first_port(port)
    if jdbc is not None:
        if jdbc["port"]:
            _check_free(jdbc["port"], host=jdbc["host"], what="--jdbc-port")
        jdbc = dict(jdbc, show_tables=show_tables)
    token = uuid.uuid4().hex
    log = folder / LOG
    ready = folder / f"{STATE}.ready"
    ready.unlink(missing_ok=True)
    spec = folder / f"{STATE}.spec"  # the settings, off the server's argv (they may hold secrets)
    descriptor = os.open(spec, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump({"settings": server_settings(options, port, retries), "master": options.master or "local[2]",
                   "jdbc": jdbc, "ready": str(ready), "folder": str(folder), "log": str(log)}, file)
    env = {key: value for key, value in os.environ.items()
           if key not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE")}
    env.update({TOKEN_ENV: token, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable})
    with open(log, "ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", SERVER_MODULE, str(spec)], cwd=folder, env=env, stdin=subprocess.DEVNULL,
            stdout=output, stderr=subprocess.STDOUT, start_new_session=True)  # it outlives this command
    try:
        _await(process, str(log), ready, timeout)
        server = read_state(folder)  # the server wrote it as it began to listen
        if server is None or server.pid != process.pid:
            raise SqlextError("SERVER_NOT_STARTED", function=FUNCTION, fix=_see_log(str(log)),
                              reason=f"it did not write its state file {folder / STATE}")
        _warm_up(server)
    except BaseException:
        end_server(process.pid)
        process.wait()
        server = read_state(folder)
        if server is not None and server.pid == process.pid:
            (folder / STATE).unlink(missing_ok=True)
        raise
    finally:
        spec.unlink(missing_ok=True)
        ready.unlink(missing_ok=True)
    return server


def _await(process, log: str, ready: Path, timeout: float) -> dict:
    """The server's ports, once it has written them (everything listens) and Spark Connect
    answers; a port another process took is refused, naming it."""
    deadline = time.monotonic() + timeout
    while True:
        if ready.exists():
            ports = json.loads(ready.read_text())
            if "taken" in ports:
                process.wait()
                raise _port_refused(ports.get("host", "127.0.0.1"), ports["port"], ports["taken"],
                                    "another process listens there")
            if listening(ports["connect_port"], 0.5):
                return ports
        if process.poll() is not None:
            raise SqlextError("SERVER_NOT_STARTED", function=FUNCTION, fix=_see_log(log),
                              reason=f"it stopped with status {process.returncode}{_last_error(log)}")
        if time.monotonic() > deadline:
            raise SqlextError("SERVER_NOT_STARTED", function=FUNCTION, fix=_see_log(log),
                              reason=f"it did not answer within {timeout:g} s (--timeout)")
        time.sleep(0.25)


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
    """A first session over Spark Connect, as a command's client opens one, so that the first
    command finds Connect's own paths warm too (the server's driver has run each of sqlext's
    functions and opened the catalog: :data:`sqlext.server.process.WARM_UP`)."""
    from pyspark.sql import SparkSession

    quiet_python_logs()
    session = SparkSession.builder.remote(server.address).create()
    try:
        sqlext.install(session)
        sqlext.sql(session, "SELECT 1").collect()
    finally:
        session.stop()


def end_server(pid: int, seconds: float = 30.0) -> None:
    """End the server: SIGTERM to its process alone, which stops its doors, then Spark (its JVM
    and Python workers end with it); what is left of its process group after ``seconds`` is
    ended politely, then at once. (SIGTERM to the whole group would stop the JVM under the
    process while it still calls it, and leave py4j's tracebacks in its log.)"""
    _send(lambda: os.kill(pid, signal.SIGTERM))
    _wait(lambda: not alive(pid) or _reaped(pid), seconds)
    for sent in (signal.SIGTERM, signal.SIGKILL):
        if _wait(lambda: not _group_alive(pid), 5.0):
            return
        _send(lambda: os.killpg(pid, sent))  # noqa: B023 - called at once
    _wait(lambda: not _group_alive(pid), 5.0)


def _send(signal_it) -> None:
    try:
        signal_it()
    except (ProcessLookupError, PermissionError):
        pass


def _wait(done, seconds: float) -> bool:
    """Whether ``done()`` came true within ``seconds``."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _group_alive(pid: int) -> bool:
    """Whether a process of the group ``pid`` led is left (``pid`` reaped first, where it is
    this process's child that ended)."""
    _reaped(pid)
    try:
        os.killpg(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


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

"""The door of ``sqlext stream`` into the server's warm driver.

An incremental run needs the driver's JVM: it reads and writes its checkpoint through Hadoop's
FileSystem and runs its micro-batches in ``foreachBatch`` functions. A Spark Connect client has
no JVM, so ``sqlext stream`` started in a folder where ``sqlext serve`` runs does not attach
over Spark Connect: it hands its arguments to the server process through this door, and the
run is carried out there, on a session of its own (``spark.newSession()``: its settings and
temporary views are its own; the catalog and the JVM are shared), exactly as the command would
carry it out on Spark of its own. What the run prints comes back to the command and is printed
there; the command's exit status is the run's.

The door listens on the loopback address and takes a connection only with the server's
token. The talk is JSON, one object a line: the command sends ``{"token", "argv", "cwd"}``;
the server sends ``{"out": text}`` and ``{"err": text}`` as the run prints, then
``{"exit": status}``. A command that is interrupted (Ctrl-C) sends ``{"stop": true}``; one that
goes away (killed) closes the connection. Either way the server stops the run's queries, as
Ctrl-C stops a run on Spark of its own: the checkpoint keeps what was committed, and the next
run goes on from there.
"""

from __future__ import annotations

import hmac
import io
import json
import signal
import socket
import socketserver
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from sqlext.errors import SqlextError

FUNCTION = "sqlext stream"

_routing = threading.local()  # the sink of the current thread's output, while a run prints


class _Routed(io.TextIOBase):
    """Standard output (or error) of the server process: what a thread running a command's run
    writes goes to that command; the rest to the log, as before."""

    def __init__(self, fallback, key: str):
        self._fallback, self._key = fallback, key

    def write(self, text: str) -> int:
        sink = getattr(_routing, "sink", None)
        if sink is None:
            return self._fallback.write(text)
        sink(self._key, text)
        return len(text)

    def flush(self) -> None:
        if getattr(_routing, "sink", None) is None:
            self._fallback.flush()

    def fileno(self) -> int:
        return self._fallback.fileno()

    @property
    def encoding(self):  # noqa: D401 - what print and the logging module ask
        return getattr(self._fallback, "encoding", "utf-8")


def route_output() -> None:
    """Make the process's standard output and error routable per thread (once)."""
    if not isinstance(sys.stdout, _Routed):
        sys.stdout = _Routed(sys.stdout, "out")
    if not isinstance(sys.stderr, _Routed):
        sys.stderr = _Routed(sys.stderr, "err")


def stop_queries(spark) -> None:
    """Stop the streaming queries a session runs (Spark's ``stop``: the micro-batch in progress
    is interrupted, nothing it had not committed counts)."""
    for query in spark.streams.active:
        try:
            query.stop()
        except Exception:  # noqa: BLE001 - it ended on its own meanwhile
            pass


class StreamDoor:
    """The door: a thread per command, each run on a session of its own. ``run(session, argv,
    stopping)`` carries out ``sqlext stream ARGV`` on the session and returns its exit status
    (the command's own, :func:`sqlext.cli.stream.run_on`); ``stopping`` is set when the
    command asks to stop."""

    def __init__(self, spark, token: str, folder: Path, run):
        route_output()
        door = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                door._serve(self.rfile, self.connection)

        self._spark, self._token, self._folder, self._run = spark, token, folder, run
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler, bind_and_activate=True)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="sqlext-stream-door", daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _serve(self, reader, connection: socket.socket) -> None:
        lock = threading.Lock()

        def send(message: dict) -> None:
            data = (json.dumps(message) + "\n").encode()
            with lock:
                try:
                    connection.sendall(data)
                except OSError:  # the command went away: the watcher stops the run
                    pass

        try:
            request = json.loads(reader.readline() or b"{}")
        except ValueError:
            return
        if not hmac.compare_digest(str(request.get("token", "")).encode(), self._token.encode()):
            send({"err": f"[SERVER_UNREACHABLE] {FUNCTION}: the server refused the run: wrong token\n", "exit": 2})
            return
        if Path(request.get("cwd", "")).resolve() != self._folder:
            send({"err": f"{FUNCTION}: the server runs in {self._folder}, not in {request.get('cwd')}\n", "exit": 2})
            return
        from sqlext.session import install

        session = install(self._spark.newSession())
        stopping, done = threading.Event(), threading.Event()
        threading.Thread(target=self._watch, args=(reader, session, stopping, done), daemon=True,
                         name="sqlext-stream-watch").start()
        _routing.sink = lambda key, text: send({key: text})
        try:
            status = self._run(session, list(request.get("argv", [])), stopping)
        except SystemExit as exit_:  # argparse's refusal of an option: it printed why
            status = exit_.code if isinstance(exit_.code, int) else 2
        except BaseException as error:  # noqa: BLE001 - said to the command, not the log
            from sqlext.runner import report_line

            print(report_line(error, FUNCTION), file=sys.stderr)
            status = 1
        finally:
            _routing.sink = None
            done.set()
            stop_queries(session)
        send({"exit": status})

    @staticmethod
    def _watch(reader, session, stopping: threading.Event, done: threading.Event) -> None:
        """Until the run is done: a ``stop`` from the command, or the command gone, stops it."""
        try:
            for line in reader:
                if json.loads(line).get("stop"):
                    break
        except (OSError, ValueError):
            pass
        if done.is_set():
            return
        stopping.set()
        while not done.wait(0.2):  # a query may start after the stop was asked: stop it too
            stop_queries(session)


def run_attached(server, argv: list[str]) -> int:
    """Carry out ``sqlext stream ARGV`` in ``server`` (:class:`~sqlext.server_state.Server`),
    printing what the run prints; its exit status. Ctrl-C asks the server to stop the run and
    waits for it to say it has; a second Ctrl-C leaves at once."""
    try:
        connection = socket.create_connection(("127.0.0.1", server.stream_port), timeout=10)
    except OSError as error:
        raise SqlextError("SERVER_UNREACHABLE", function=FUNCTION, address=f"127.0.0.1:{server.stream_port}",
                          reason=error.strerror or str(error), env="SPARK_REMOTE") from None
    connection.settimeout(None)
    with connection:
        connection.sendall((json.dumps({"token": server.token, "argv": argv, "cwd": str(Path.cwd())}) + "\n")
                           .encode())
        with _stop_on_interrupt(connection):
            reader = connection.makefile("rb")
            while True:
                line = reader.readline()
                if not line:
                    raise SqlextError("SERVER_GONE", function=FUNCTION, folder=server.folder)
                message = json.loads(line)
                for key, stream in (("out", sys.stdout), ("err", sys.stderr)):
                    if key in message:
                        stream.write(message[key])
                        stream.flush()
                if "exit" in message:
                    return int(message["exit"])


@contextmanager
def _stop_on_interrupt(connection: socket.socket):
    """While the run goes on, a first Ctrl-C asks the server to stop it (the command then waits
    for the server to say it has), a second one leaves at once (KeyboardInterrupt). A signal
    handler rather than catching KeyboardInterrupt: Ctrl-C may come while the command prints,
    not only while it waits. Where SIGINT is ignored (a script's background job), it stays so."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield
        return
    asked = []

    def interrupted(number, frame):
        if asked:
            raise KeyboardInterrupt
        asked.append(True)
        try:
            connection.sendall(b'{"stop": true}\n')
        except OSError:  # the server went: reading says so
            pass

    before = signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)

"""A HiveServer2 endpoint whose statements run through sqlext: JDBC and ODBC drivers, BI tools,
beeline and PyHive connect to it as to Spark's Thrift server (Thrift's binary protocol, SASL
PLAIN), and each statement is rewritten by sqlext and run as ``sqlext sql`` runs it.

    endpoint = start_endpoint(spark, port=10000, token="s3cret")
    ...  # jdbc:hive2://localhost:10000/default, any user, password s3cret
    endpoint.stop()

Each connection is served on a thread of its own (daemon threads), so several clients run at
once; each client session works on a Spark session of its own made from ``spark``
(``newSession()``: its own temporary views and settings, the catalog shared). See
``docs/drafts/jdbc-endpoint.md``.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import threading

from sqlext.server.hive.transport import ClientGone, Refused, accept

log = logging.getLogger(__name__)

__all__ = ["Endpoint", "start_endpoint"]


def start_endpoint(spark, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                   show_tables: str | None = None) -> "Endpoint":
    """Listen on ``host``:``port`` (0: a free port, see ``Endpoint.port``) and serve HiveServer2
    clients on sessions made from the classic session ``spark``. With ``token``, a client must
    give it as its password (any user name); ``token=None`` checks no password. ``show_tables``:
    the server's shape of SHOW TABLES, ``hive`` or ``spark`` (:mod:`sqlext.server.hive.settings`;
    None: ``spark``'s ``sqlext.jdbc.showTables``, else Hive's)."""
    endpoint = Endpoint(spark, host, port, token, show_tables)
    endpoint._start()
    return endpoint


class Endpoint:
    """A listening endpoint: ``port`` is the port it is bound to; ``stop()`` closes it."""

    def __init__(self, spark, host: str, port: int, token: str | None, show_tables: str | None = None):
        from sqlext.server.hive.service import Service

        self.spark = spark
        self.token = token
        self.service = Service(spark, show_tables)
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        endpoint = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                endpoint._serve(self.request)

        self._server = _Server((host, port), Handler)
        self.port: int = self._server.server_address[1]
        self.host = host
        self._thread: threading.Thread | None = None
        self._stopped = False

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"sqlext-jdbc-{self.port}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop listening, close every connection, and end every session (cancelling the
        statements still running). The endpoint's Spark session is left running."""
        if self._stopped:
            return
        self._stopped = True
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.service.close_all()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    # one connection

    def _serve(self, connection: socket.socket) -> None:
        from thriftpy2.protocol.binary import TBinaryProtocol
        from thriftpy2.thrift import TProcessor

        from sqlext.errors import SqlextError
        from sqlext.server.hive.execution import FUNCTION
        from sqlext.server.hive.protocol import ttypes

        with self._lock:
            if self._stopped:
                return
            self._connections.add(connection)
        opened = []

        def refused(reason: str) -> str:
            return str(SqlextError("JDBC_TOKEN_REFUSED", function=FUNCTION, reason=reason))

        try:
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            transport, user = accept(connection, self.token, refused)
            # the connection's view of the service: the sessions it opens are closed with it
            service = _ConnectionService(self.service, user, opened.append)
            protocol = TBinaryProtocol(transport, decode_response=True)
            processor = TProcessor(ttypes.TCLIService, service)
            while not self._stopped:
                processor.process(protocol, protocol)
        except (ClientGone, Refused, ConnectionError, OSError):
            pass
        except Exception:  # noqa: BLE001 - a malformed message: drop the connection, keep serving
            log.debug("connection dropped", exc_info=True)
        finally:
            for session in opened:
                self.service.close_session(session.id.guid)
            with self._lock:
                self._connections.discard(connection)


class _ConnectionService:
    """The service as one connection sees it: its user name, and its sessions noted."""

    def __init__(self, service, user, on_session):
        self._service = service
        self._user = user
        self._on_session = on_session

    def OpenSession(self, req):
        if not req.username and self._user:
            req.username = self._user
        response = self._service.OpenSession(req)
        if response.sessionHandle is not None:
            with self._service.lock:
                session = self._service.sessions.get(response.sessionHandle.sessionId.guid)
            if session is not None:
                self._on_session(session)
        return response

    def __getattr__(self, name):
        return getattr(self._service, name)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False

"""The bytes under HiveServer2's Thrift calls: the SASL PLAIN handshake a client opens with
(where the password is checked), then frames (a 4-byte big-endian length, then that many
bytes of a Thrift message), as a server side of Hive's ``TSaslServerTransport`` does for
PLAIN, which wraps nothing. A client that opens without SASL (JDBC's ``auth=noSasl``,
PyHive's ``auth='NOSASL'``) speaks Thrift's binary protocol straight over the socket: that is
accepted only when the endpoint checks no password.

A SASL message is one status byte, a 4-byte big-endian length and the payload. The client
sends START with the mechanism's name, then (in an OK or COMPLETE message) its response,
``authzid NUL user NUL password``; the server answers COMPLETE with an empty payload, or BAD
with the reason, which the client shows (beeline: "Peer indicated failure: ...").
"""

from __future__ import annotations

import hmac
import struct

START, OK, BAD, ERROR, COMPLETE = 1, 2, 3, 4, 5
MECHANISM = b"PLAIN"
# a SASL message or a frame larger than this is not a client of ours: the connection is dropped
MAX_SASL_MESSAGE = 64 * 1024
MAX_FRAME = 256 * 1024 * 1024
# the first byte of a strict binary-protocol message (its version, 0x8001, comes first)
_BINARY_PROTOCOL_FIRST_BYTE = 0x80


class Refused(Exception):
    """The client's handshake was refused (the reason was sent to it)."""


class ClientGone(EOFError):
    """The client closed the connection."""


def read_exactly(sock, count: int) -> bytes:
    """``count`` bytes from the socket, or :class:`ClientGone` if it closes first."""
    parts = []
    while count:
        chunk = sock.recv(min(count, 1 << 20))
        if not chunk:
            raise ClientGone()
        parts.append(chunk)
        count -= len(chunk)
    return b"".join(parts)


def accept(sock, token: str | None, refused_message) -> tuple[object, str | None]:
    """Read the client's opening, check its password against ``token`` (any user name;
    ``token=None`` checks none) and return the transport its Thrift messages travel on and
    the user name it gave (None without SASL). Raises :class:`Refused` after telling the
    client why, or :class:`ClientGone`. ``refused_message(reason)`` makes the text sent."""
    first = read_exactly(sock, 1)[0]
    if first != START:
        if first == _BINARY_PROTOCOL_FIRST_BYTE and token is None:
            return UnframedTransport(sock, bytes([first])), None
        # a client without SASL, while a password is required: it cannot read a SASL reply
        raise Refused(refused_message("the client opened without SASL (auth=noSasl), and this endpoint "
                                      "requires the token as the password"))
    mechanism = _payload(sock)
    if mechanism != MECHANISM:
        _send(sock, BAD, refused_message(f"the SASL mechanism {mechanism.decode(errors='replace')!r} is not "
                                         "offered; use PLAIN (user name and password)"))
        raise Refused("mechanism")
    status = read_exactly(sock, 1)[0]
    if status not in (OK, COMPLETE):
        raise Refused("the client abandoned the handshake")
    parts = _payload(sock).split(b"\0")
    if len(parts) != 3:
        _send(sock, BAD, refused_message("the PLAIN response is not 'authzid NUL user NUL password'"))
        raise Refused("malformed")
    _, user, password = parts
    if token is not None and not hmac.compare_digest(password, token.encode()):
        _send(sock, BAD, refused_message("the password is not this endpoint's token"))
        raise Refused("wrong token")
    _send(sock, COMPLETE, "")
    return FramedTransport(sock), user.decode(errors="replace")


def _payload(sock) -> bytes:
    (length,) = struct.unpack(">I", read_exactly(sock, 4))
    if length > MAX_SASL_MESSAGE:
        raise Refused("a SASL message too large")
    return read_exactly(sock, length)


def _send(sock, status: int, text: str) -> None:
    payload = text.encode()
    try:
        sock.sendall(struct.pack(">BI", status, len(payload)) + payload)
    except OSError:
        pass  # the client left: nothing to tell it


class FramedTransport:
    """Thrift's messages in frames after the handshake: reads are served from the current
    frame (the next one is read when it is used up), writes are gathered and sent as one
    frame at ``flush``."""

    def __init__(self, sock):
        self.sock = sock
        self._frame = b""
        self._at = 0
        self._out: list[bytes] = []

    def read(self, count: int) -> bytes:
        parts = []
        while count:
            if self._at == len(self._frame):
                self._next_frame()
            taken = self._frame[self._at:self._at + count]
            self._at += len(taken)
            count -= len(taken)
            parts.append(taken)
        return b"".join(parts)

    def _next_frame(self) -> None:
        (length,) = struct.unpack(">I", read_exactly(self.sock, 4))
        if length > MAX_FRAME:
            raise ClientGone(f"a frame of {length} bytes")
        self._frame, self._at = read_exactly(self.sock, length), 0

    def write(self, data: bytes) -> None:
        self._out.append(bytes(data))

    def flush(self) -> None:
        payload = b"".join(self._out)
        self._out = []
        self.sock.sendall(struct.pack(">I", len(payload)) + payload)


class UnframedTransport:
    """Thrift's binary protocol straight over the socket (a client without SASL); ``first``
    holds the bytes already read to tell it from a SASL client."""

    def __init__(self, sock, first: bytes = b""):
        self.sock = sock
        self._pending = first
        self._out: list[bytes] = []

    def read(self, count: int) -> bytes:
        taken, self._pending = self._pending[:count], self._pending[count:]
        return taken + read_exactly(self.sock, count - len(taken)) if count > len(taken) else taken

    def write(self, data: bytes) -> None:
        self._out.append(bytes(data))

    def flush(self) -> None:
        payload = b"".join(self._out)
        self._out = []
        self.sock.sendall(payload)

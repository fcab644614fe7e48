"""The state file of the server ``sqlext serve`` starts in a folder: where it
listens and which process it is, read by every command started in that folder to attach to it
(:mod:`sqlext.command_session`) and written by ``sqlext serve`` (:mod:`sqlext.serve`)."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path

STATE = ".sqlext-server"


@dataclass
class Server:
    """What the state file says of a running server."""

    address: str  # sc://localhost:PORT/;token=...
    port: int
    pid: int
    log: str
    folder: str
    spark_version: str
    stream_port: int = 0  # sqlext stream's door into the server's driver (sqlext.server.streams)
    jdbc_port: int = 0  # the HiveServer2 endpoint's, where sqlext serve --jdbc-port asked for one
    jdbc_host: str = ""

    @property
    def token(self) -> str:
        """The token a client presents (the Spark Connect address carries it)."""
        return self.address.partition(";token=")[2].split(";")[0]

    @property
    def shown(self) -> str:
        return f"sc://localhost:{self.port}"


# -- the state file

def read_state(folder: Path) -> Server | None:
    try:
        data = json.loads((folder / STATE).read_text())
        return Server(**{key: data[key] for key in Server.__dataclass_fields__ if key in data})
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_state(folder: Path, server: Server) -> None:
    """The state file, readable by its owner alone (the address holds the token)."""
    descriptor = os.open(folder / STATE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        os.fchmod(descriptor, 0o600)
        json.dump(asdict(server), file, indent=2)
        file.write("\n")


def running_server(folder: Path) -> Server | None:
    """The server ``sqlext serve`` started in ``folder``, if it runs and answers; a state file
    whose process is gone is removed."""
    server = read_state(folder)
    if server is None:
        return None
    if not alive(server.pid):
        try:
            (folder / STATE).unlink()
        except OSError:
            pass
        return None
    return server if listening(server.port) else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # a process of another user: alive, and not ours
        return True
    return True


def listening(port: int, seconds: float = 1.0) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(seconds)
        return probe.connect_ex(("127.0.0.1", port)) == 0

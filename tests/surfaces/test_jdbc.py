"""What a JDBC client (beeline, as a BI tool would connect) gets from Spark's Thrift server
started on a session with sqlext installed: the registered CHANGELOG_FILTER runs (as the
Python table function, without sqlext's rewrite); FK_JOIN, which exists only as a rewrite,
is not a function the server knows."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def test_a_jdbc_client_gets_the_registered_function_not_the_rewrites(tmp_path, spark_child_env):
    script = Path(__file__).resolve().parents[1] / "jdbc_server.py"
    done = subprocess.run([sys.executable, str(script), str(_free_port()), str(tmp_path / "warehouse")],
                          cwd=tmp_path, env=spark_child_env, capture_output=True, text=True, timeout=600)
    outputs = done.stdout.split("=== STATEMENT")[1:]
    assert len(outputs) == 2, done.stdout[-2000:] + done.stderr[-2000:]
    filtered, fk_join = outputs
    assert [line for line in filtered.splitlines() if re.fullmatch(r"\d+,-?\d+,\w+,\d+", line)] == [
        "1,10,insert,1", "1,10,delete,2", "2,5,insert,2"], filtered
    assert "[UNRESOLVABLE_TABLE_VALUED_FUNCTION]" in fk_join and "`FK_JOIN`" in fk_join, fk_join[:2000]

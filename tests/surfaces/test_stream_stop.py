"""Ctrl-C on ``sqlext stream`` running on Spark of its own: the run stops in one line (no
py4j traceback), and when the command returns, its JVM and Python workers have ended too (a
script that starts the next run at once finds nothing of the last one still running)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sqlext.cli.stream import STOPPED

SQLEXT = Path(sys.executable).with_name("sqlext")
QUERY = "SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(acc)), key => 'id', predicate => 'balance >= 0')\n"


def write_changes(folder: Path, name: str, rows: list[tuple]) -> None:
    """A Parquet file of account changes (id, balance, _change_type, _commit_version)."""
    folder.mkdir(parents=True, exist_ok=True)
    ids, balances, kinds, versions = zip(*rows)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "balance": pa.array(balances, pa.int64()),
                             "_change_type": list(kinds), "_commit_version": pa.array(versions, pa.int64())}),
                   folder / name)


def interrupted(argv: list[str], env: dict, cwd: Path, after: str) -> tuple[subprocess.CompletedProcess, str]:
    """Run ``argv`` in a process group of its own, send the group SIGINT (what Ctrl-C in a
    terminal does) once a line starting with ``after`` is on its output; the command's outcome,
    and the processes of its group still there the moment it returned."""
    child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, stdin=subprocess.DEVNULL)
    first = child.stdout.readline()
    assert first.startswith(after), first + child.stderr.read()
    os.killpg(child.pid, signal.SIGINT)
    out, err = child.communicate(timeout=180)
    listing = subprocess.run(["ps", "-eo", "pgid=,stat=,args="], capture_output=True, text=True).stdout
    left = "\n".join(line for line in listing.splitlines()  # a zombie has ended: its parent went first
                     if line.split()[0] == str(child.pid) and not line.split()[1].startswith("Z"))
    return subprocess.CompletedProcess(argv, child.returncode, first + out, err), left


def test_ctrl_c_stops_a_run_in_one_line_and_leaves_no_jvm(tmp_path, spark_child_env):
    write_changes(tmp_path / "changes", "part-0.parquet", [(1, 10, "insert", 1), (1, -3, "update_postimage", 2)])
    (tmp_path / "q.sql").write_text(QUERY)
    env = {k: v for k, v in spark_child_env.items() if not k.startswith("PYTEST_") and k != "SPARK_REMOTE"}
    done, left = interrupted([str(SQLEXT), "stream", "q.sql", "--source", "acc=changes", "--checkpoint", "cp",
                              "--output", "out", "--every", "1 second"], env, tmp_path, "-- streaming every")
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == STOPPED and "Traceback" not in done.stderr, done.stderr
    assert "py4j" not in done.stderr and "ERROR" not in done.stderr, done.stderr
    assert left == "", f"still running after the command returned:\n{left}"

"""Ctrl-C on ``sqlext stream`` running on Spark of its own: the run stops in one line (no
py4j traceback, none of the JVM's stack traces of the tasks and threads the stop ends), and
when the command returns, its JVM and Python workers have ended too (a script that starts the
next run at once finds nothing of the last one still running)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
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


def many_changes(folder: Path, rows: int) -> None:
    """A Parquet file of ``rows`` inserts of accounts 0, 1, ...: a first run over it takes
    seconds of Spark jobs."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = np.arange(rows, dtype=np.int64)
    pq.write_table(pa.table({"id": ids, "balance": ids % 100, "_change_type": pa.array(["insert"] * rows),
                             "_commit_version": np.ones(rows, dtype=np.int64)}), folder / "part-0.parquet")


def interrupted(argv: list[str], env: dict, cwd: Path, after: str, started: Path | None = None,
                wait: float = 0.0) -> tuple[subprocess.CompletedProcess, str]:
    """Run ``argv`` in a process group of its own, send the group SIGINT (what Ctrl-C in a
    terminal does) once a line starting with ``after`` is on its output (and, where given, the
    file ``started`` is there, then ``wait`` seconds later); the command's outcome, and the
    processes of its group still there the moment it returned."""
    child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, stdin=subprocess.DEVNULL)
    first = child.stdout.readline()
    assert first.startswith(after), first + child.stderr.read()
    while started is not None and not started.exists() and child.poll() is None:
        time.sleep(0.05)
    time.sleep(wait)
    os.killpg(child.pid, signal.SIGINT)
    out, err = child.communicate(timeout=180)
    listing = subprocess.run(["ps", "-eo", "pgid=,stat=,args="], capture_output=True, text=True).stdout
    left = "\n".join(line for line in listing.splitlines()  # a zombie has ended: its parent went first
                     if line.split()[0] == str(child.pid) and not line.split()[1].startswith("Z"))
    return subprocess.CompletedProcess(argv, child.returncode, first + out, err), left


# what the JVM and py4j print of a stack: its frames, its causes, a thread's end, a logged error
TRACE_LINE = re.compile(r"^\s+at |^\s*\.\.\. \d+ more|^Caused by:|Exception|^Traceback|ERROR|py4j")


def test_ctrl_c_stops_a_run_in_one_line_and_leaves_no_jvm(tmp_path, spark_child_env):
    # the first batch, over 3M rows, runs Spark jobs for seconds (tens of them on a loaded
    # machine): the stop lands among its tasks, where stopping Spark used to make the JVM print
    # 20-130 lines of stack traces (a broadcast block removed under a task, RpcEnvStoppedException)
    many_changes(tmp_path / "changes", 3_000_000)
    (tmp_path / "q.sql").write_text(QUERY)
    env = {k: v for k, v in spark_child_env.items() if not k.startswith("PYTEST_") and k != "SPARK_REMOTE"}
    done, left = interrupted([str(SQLEXT), "stream", "q.sql", "--source", "acc=changes", "--checkpoint", "cp",
                              "--output", "out", "--every", "1 second"], env, tmp_path, "-- streaming every",
                             started=tmp_path / "cp" / "offsets" / "0", wait=4.0)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "cp" / "commits" / "0").exists(), "the batch ended before the stop: stop it sooner"
    assert done.stderr.strip().splitlines()[-1] == STOPPED, done.stderr
    traces = [line for line in done.stderr.splitlines() if TRACE_LINE.search(line)]
    assert traces == [], done.stderr
    assert left == "", f"still running after the command returned:\n{left}"

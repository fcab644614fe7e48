"""What a command costs with and without a warm session: ``sqlext sql -e "SELECT 1"`` as a
user runs it, each time a new process, in a new folder: first on Spark of its own (a JVM
starts), then after ``sqlext serve``, attached to the server.

    sqlext bench serve --runs 5
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUERY = "SELECT 1"


def _sqlext(folder: Path, *argv: str) -> float:
    """Run ``sqlext ARGV`` in ``folder`` as a new process; its wall time in seconds."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sqlext.cli", *argv], cwd=folder, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"sqlext {' '.join(argv)} failed: {done.stderr.strip()[-500:]}")
    return seconds


def bench_serve(runs: int = 5, session_argv: list[str] | None = None) -> tuple[list[float], float, list[float]]:
    """The cold runs, the time ``sqlext serve`` took, and the warm runs (seconds)."""
    options = list(session_argv or [])
    folder = Path(tempfile.mkdtemp(prefix="sqlext-bench-serve-"))
    try:
        cold = [_sqlext(folder, "sql", "-S", *options, "-e", QUERY) for _ in range(runs)]
        print(f'sqlext sql -e "{QUERY}", Spark of its own:   median {statistics.median(cold):.2f} s   runs: '
              + ", ".join(f"{s:.2f}" for s in cold))
        serve = _sqlext(folder, "serve", *options)
        print(f"sqlext serve (start, warm-up):              {serve:.2f} s")
        try:
            warm = [_sqlext(folder, "sql", "-S", "-e", QUERY) for _ in range(runs)]
        finally:
            _sqlext(folder, "serve", "--stop")
        print(f'sqlext sql -e "{QUERY}", attached:           median {statistics.median(warm):.2f} s   runs: '
              + ", ".join(f"{s:.2f}" for s in warm))
        print(f"  cold/warm ratio: {statistics.median(cold) / statistics.median(warm):.1f}x")
        return cold, serve, warm
    finally:
        shutil.rmtree(folder, ignore_errors=True)

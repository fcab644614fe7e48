"""What a command costs with and without a warm session, as a user runs it, each time a new
process, in a new folder: first on Spark of its own (a JVM starts), then after ``sqlext
serve``, attached to the server. Two commands: ``sqlext sql -e "SELECT 1"``, and an
incremental run of ``sqlext stream`` over a small folder (a CHANGELOG_FILTER over ten new
changes a run, as a scheduler calls it every minute); the two series of stream runs must write
the same rows.

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


STREAM_QUERY = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(acc)), key => 'id', "
                "predicate => 'balance >= 0')\n")


def _stream_runs(folder: Path, name: str, runs: int, options: list[str]) -> list[float]:
    """``runs`` incremental runs of the stream query, each after ten new changes arrived in
    ``folder/name-changes``; the seconds of each."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    changes = folder / f"{name}-changes"
    changes.mkdir()
    seconds = []
    for run in range(runs):
        ids = list(range(run * 5, run * 5 + 10))
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()),
                                 "balance": pa.array([(k * 7) % 11 - 3 for k in ids], pa.int64()),
                                 "_change_type": ["insert"] * 10, "_commit_version": pa.array([run] * 10, pa.int64())}),
                       changes / f"part-{run:04d}.parquet")
        seconds.append(_sqlext(folder, "stream", "stream.sql", "--source", f"acc={changes.name}", "--checkpoint",
                               f"{name}-cp", "--output", f"{name}-out", *options))
    return seconds


def _written(output: Path) -> list[tuple]:
    import pyarrow.parquet as pq

    table = pq.read_table(output).select(["id", "balance", "_change_type", "_commit_version"])
    return sorted(tuple(row.values()) for row in table.to_pylist())


def _line(what: str, seconds: list[float]) -> str:
    return f"{what:<44} median {statistics.median(seconds):.2f} s   runs: " + ", ".join(f"{s:.2f}" for s in seconds)


def bench_serve(runs: int = 5, session_argv: list[str] | None = None) -> dict[str, list[float]]:
    """The cold runs, the time ``sqlext serve`` took, and the warm runs (seconds), of both commands."""
    options = list(session_argv or [])
    folder = Path(tempfile.mkdtemp(prefix="sqlext-bench-serve-"))
    (folder / "stream.sql").write_text(STREAM_QUERY)
    try:
        times = {"sql cold": [_sqlext(folder, "sql", "-S", *options, "-e", QUERY) for _ in range(runs)]}
        print(_line(f'sqlext sql -e "{QUERY}", Spark of its own:', times["sql cold"]))
        times["stream cold"] = _stream_runs(folder, "cold", runs, options)
        print(_line("sqlext stream, Spark of its own:", times["stream cold"]))
        times["serve"] = [_sqlext(folder, "serve", *options)]
        print(f"{'sqlext serve (start, warm-up):':<44} {times['serve'][0]:.2f} s")
        try:
            times["sql warm"] = [_sqlext(folder, "sql", "-S", "-e", QUERY) for _ in range(runs)]
            times["stream warm"] = _stream_runs(folder, "warm", runs, [])
        finally:
            _sqlext(folder, "serve", "--stop")
        print(_line(f'sqlext sql -e "{QUERY}", attached:', times["sql warm"]))
        print(_line("sqlext stream, in the server's driver:", times["stream warm"]))
        for what in ("sql", "stream"):
            ratio = statistics.median(times[f"{what} cold"]) / statistics.median(times[f"{what} warm"])
            print(f"  {what}: cold/warm ratio {ratio:.1f}x")
        written = [_written(folder / f"{name}-out") for name in ("cold", "warm")]
        if written[0] != written[1]:
            raise RuntimeError("the stream runs wrote different rows in the server's driver and on Spark of their own")
        print(f"  both series of stream runs wrote the same {len(written[0])} rows")
        return times
    finally:
        shutil.rmtree(folder, ignore_errors=True)

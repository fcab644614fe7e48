"""What every benchmark shares: timing a query to Spark's no-op sink (wall and JVM CPU time),
an order-free fingerprint of a result, alternating sqlext and native runs, the report with
medians and their ratio, and sampling the peak memory of the driver and the JVM."""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Timing:
    name: str
    seconds: list[float]
    # CPU seconds of Spark's JVM per run (local mode: driver and executors), where known
    cpu: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu) if self.cpu else None


def jvm_cpu_seconds(spark) -> float | None:
    """CPU time Spark's JVM has used so far. In local mode it runs the executors as well, so
    the difference over a run is the run's whole CPU cost (tasks, driver, JIT and garbage
    collection), which moves less from run to run than wall time on a busy machine."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    try:
        return spark.sparkContext._jvm.java.lang.ProcessHandle.current().info() \
            .totalCpuDuration().get().toNanos() / 1e9
    except (AttributeError, Py4JError, PySparkException):
        return None  # not reported on this platform, or no JVM gateway (Spark Connect)


def settle(spark, seconds: float = 1.0) -> None:
    """Let the machine finish the last measurement before the next starts: flush written files
    to disk, ask the JVM to collect the garbage the last query left, and wait a moment. Without
    it a short run timed right after a long one pays for the long one's writeback and garbage."""
    from py4j.protocol import Py4JError

    os.sync()
    try:
        spark.sparkContext._jvm.java.lang.System.gc()
    except (AttributeError, Py4JError):
        pass  # no JVM gateway (Spark Connect)
    time.sleep(seconds)


def time_query(spark, frame_factory, timing: Timing | None = None) -> None:
    """Run the query once, writing every row to Spark's no-op sink; record wall and CPU time."""
    frame = frame_factory()
    cpu = jvm_cpu_seconds(spark)
    started = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    seconds = time.perf_counter() - started
    after = jvm_cpu_seconds(spark)
    if timing is not None:
        timing.seconds.append(seconds)
        if cpu is not None and after is not None:
            timing.cpu.append(after - cpu)


def fingerprint(spark, frame):
    """Row count and an order-free checksum of all columns: equal results, equal prints."""
    row = frame.selectExpr("count(*) AS n", "sum(hash(*)) AS h").collect()[0]
    return row.n, row.h


def compare(spark, name: str, ours, native, runs: int) -> tuple[Timing, Timing]:
    if fingerprint(spark, ours()) != fingerprint(spark, native()):
        raise SystemExit(f"bench {name}: sqlext and the native formulation return different rows")
    return alternate(spark, ours, native, runs)


def alternate(spark, ours, native, runs: int) -> tuple[Timing, Timing]:
    """One warm-up each, then alternate, so that drift in the machine hits both sides alike."""
    time_query(spark, ours)
    time_query(spark, native)
    mine, theirs = Timing("sqlext", []), Timing("native", [])
    for _ in range(runs):
        time_query(spark, ours, mine)
        time_query(spark, native, theirs)
    return mine, theirs


def report(title: str, mine: Timing, theirs: Timing) -> None:
    print(f"{title}")
    for timing in (mine, theirs):
        runs = ", ".join(f"{s:.2f}" for s in timing.seconds)
        cpu = "" if timing.cpu_median is None else f"   CPU median {timing.cpu_median:6.2f} s"
        print(f"  {timing.name:<8} median {timing.median:8.2f} s{cpu}   runs: {runs}")
    print(f"  ratio sqlext/native: {mine.median / theirs.median:.2f}x")
    if mine.cpu_median and theirs.cpu_median:
        print(f"  CPU ratio sqlext/native: {mine.cpu_median / theirs.cpu_median:.2f}x")


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class _Sampling:
    """A block during which a thread calls :meth:`sample` every 50 ms."""

    def __enter__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            time.sleep(0.05)

    def sample(self) -> None:
        raise NotImplementedError

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


@dataclass
class Sampler(_Sampling):
    pids: tuple[int, int]
    peaks: list[float] = field(default_factory=lambda: [0.0, 0.0])

    def sample(self) -> None:
        for i, pid in enumerate(self.pids):
            self.peaks[i] = max(self.peaks[i], _rss_mb(pid))


class WorkerPeak(_Sampling):
    """The highest resident memory (MB) of any one of Spark's Python workers on this machine,
    and of this (the driver's) process, while the block runs: sampled every 50 ms. The workers
    are the processes forked from ``pyspark.daemon`` (they keep its command line)."""

    def __init__(self):
        self.worker = self.driver = 0.0

    def sample(self) -> None:
        for pid in _python_workers():
            self.worker = max(self.worker, _rss_mb(pid))
        self.driver = max(self.driver, _rss_mb(os.getpid()))


def _python_workers() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    if b"pyspark.daemon" in cmdline.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def jvm_pid(spark) -> int:
    process = getattr(spark.sparkContext._gateway, "proc", None)
    return process.pid if process is not None else os.getpid()

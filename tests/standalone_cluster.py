"""A real Spark standalone cluster on this machine: one master and two workers, each its own
JVM process, started with the ``spark-class`` script that ships with PySpark. The daemons take
the JVM options they are given (the tests': the quick JIT and the class archive, which maps
their classes too: their class path is the driver's)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)  # the workers start once the master listens
    raise TimeoutError(f"nothing listens on port {port} after {seconds} s")


class Cluster:
    def __init__(self, directory: Path, java_options: str = ""):
        self.directory = directory
        self.java_options = java_options
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.worker_folders: list[Path] = []

    def _start(self, name: str, *arguments: str) -> subprocess.Popen:
        env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1",
                   PYSPARK_PYTHON=sys.executable, SPARK_NO_DAEMONIZE="1", SPARK_DAEMON_JAVA_OPTS=self.java_options)
        log = open(self.directory / f"{name}.log", "w")
        # each daemon leads its own process group, so that killing a worker also kills the
        # executor it started (a lost machine, not a lost daemon)
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *arguments], env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def start(self, workers: int = 2, wait: bool = True) -> "Cluster":
        """Start the master, wait for it to listen, and start the workers; with ``wait``, wait for
        them to register (else :meth:`wait_for_workers` does: a driver may start meanwhile, and
        the master gives it executors as the workers register)."""
        self.master = self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                  "--port", str(self.port), "--webui-port", str(free_port()))
        _wait_for_port(self.port, 60)
        for i in range(workers):
            work = self.directory / f"worker-{i}"
            work.mkdir(exist_ok=True)
            self.worker_folders.append(work)
            self.workers.append(self._start(
                f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                "--cores", "1", "--memory", "1g", "--work-dir", str(work), "--webui-port", str(free_port())))
        if wait:
            self.wait_for_workers()
        return self

    def wait_for_workers(self, seconds: float = 60) -> None:
        count = len(self.workers)
        deadline = time.monotonic() + seconds
        log = self.directory / "master.log"
        while time.monotonic() < deadline:
            if log.exists() and log.read_text().count("Registering worker") >= count:
                return
            time.sleep(0.3)
        raise TimeoutError(f"{count} workers did not register with the master in {seconds} s:\n{log.read_text()[-2000:]}")

    def worker_running(self, folder: Path) -> int:
        """The worker whose work folder holds ``folder`` (an executor's: ``<application>/<id>``)."""
        for index, work in enumerate(self.worker_folders):
            if folder.resolve().is_relative_to(work.resolve()):
                return index
        raise ValueError(f"{folder} is in no worker's folder {self.worker_folders}")

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker and the executor it runs, as when a machine is lost."""
        os.killpg(self.workers[index].pid, signal.SIGKILL)

    def stop(self) -> None:
        for process in [*self.workers, self.master]:
            if process is not None and process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for process in [*self.workers, self.master]:
            if process is not None:
                process.wait(timeout=30)


@contextmanager
def standalone_cluster(directory: Path, workers: int = 2, java_options: str = "", wait: bool = True):
    cluster = Cluster(directory, java_options)
    try:
        yield cluster.start(workers, wait)
    finally:
        cluster.stop()

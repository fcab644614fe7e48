"""How the tests name the folders of incremental runs (the ``storage`` fixture, see conftest.py):
the same local folder as a plain path, a ``file://`` URI, or a ``viewfs://`` URI through a Hadoop
mount table that stands in for a remote store."""

from __future__ import annotations

import os
import shlex
import tempfile

TEMP = os.path.realpath(tempfile.gettempdir())
# a Hadoop mount table standing in for a remote store: viewfs://lake/data/... is TEMP/...
VIEWFS = "viewfs://lake/data"
STORAGE_CONF = {"spark.hadoop.fs.viewfs.mounttable.lake.link./data": "file://" + TEMP}
# the order a file's tests take them in: a file's first test is most often its broadest (a
# property test of many runs), and a plain path is the quickest form to run it in; a mount
# table costs a call into the driver's JVM for every file a run touches
STORAGE_FORMS = ("plain", "viewfs", "file")


class Storage:
    """How a test names its checkpoint, output and source folders: ``form`` is ``plain`` (a
    local path), ``file`` (a ``file://`` URI) or ``viewfs`` (the same folder through the mount
    table above). The test keeps its local paths to look at files; sqlext gets :meth:`uri`."""

    def __init__(self, form: str):
        assert form in STORAGE_FORMS, form
        self.form = form

    def uri(self, path) -> str:
        path = os.path.realpath(str(path))
        if self.form == "plain":
            return path
        if self.form == "file":
            return "file://" + path
        inside = os.path.relpath(path, TEMP)
        assert not inside.startswith(".."), f"{path} is not under {TEMP}, which the viewfs mount table maps"
        return VIEWFS + "/" + inside

    def qualified(self, path) -> str:
        """The URI Hadoop makes of :meth:`uri`, by which sqlext names the folder in its messages
        and records: ``file:/...`` for a plain path or a ``file://`` URI, a viewfs URI as it is."""
        return self.uri(path) if self.form == "viewfs" else "file:" + os.path.realpath(str(path))

    def child_env(self, env: dict | None = None) -> dict:
        """The environment of a child process that starts Spark (``sqlext stream``) over these
        folders: its session is given the mount table too (through ``PYSPARK_SUBMIT_ARGS``,
        which PySpark's launcher hands to ``spark-submit``)."""
        env = dict(os.environ if env is None else env)
        settings = " ".join("--conf " + shlex.quote(f"{key}={value}") for key, value in STORAGE_CONF.items())
        env["PYSPARK_SUBMIT_ARGS"] = settings + " " + env.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
        return env

    def run_until_killed(self, script: str, *args: str) -> None:
        """``python -c script args``, a ``sqlext stream`` over these folders that SIGKILLs its own
        process group (itself and its JVM) at a point the script sets, in a session of its own;
        it must end so (it is killed after five minutes otherwise, and the test fails)."""
        import signal
        import subprocess
        import sys

        child = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True,
                                 env=self.child_env(dict(os.environ, PYSPARK_PYTHON=sys.executable)))
        try:
            child.wait(timeout=300)
        finally:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        assert child.returncode == -signal.SIGKILL, "the run was not killed inside its batch"

    def __repr__(self) -> str:
        return self.form

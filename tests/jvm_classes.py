"""A class-data archive for the JVMs the tests start, made once per venv.

Every JVM the suite starts (the session of each worker, and those of the child processes: the
CLI, dbt, the server) loads the same several thousand Spark classes, and a child's start is most
of what a test of a command costs. The JVM can map classes it loaded in an earlier run from an
archive (HotSpot's class-data sharing, "AppCDS", ``-XX:SharedArchiveFile``) instead of reading,
parsing and verifying them again: measured on this machine, ``sqlext sql -e "SELECT 1"`` took
7.5-8.3 s without one and 4.6-5.0 s with one. The archive is made by one small Spark run that
dumps the classes it loaded as its JVM exits (``-XX:ArchiveClassesAtExit``), named by what it
depends on (the Java build, Spark's jars, the JVM options), and kept beside the venv; a JVM whose
class path differs (beeline) ignores it without a word. A standalone cluster's daemons and
executors have the driver's class path and map it too (a master started in 1.5-1.6 s with it and
the quick JIT, 3.4-4.1 s with neither). Making it costs about half a minute, so the run makes it while the tests start, and the JVMs started once
it is there use it (tests/conftest.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the JVM's own notes on the archive (a class it cannot archive, a class path that differs) would
# go to the standard output of every command a test reads
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"

# What the archive's run does: start the session as the tests do, and run the kinds of work they
# run (a shuffle, Parquet written and read, an Arrow function, sqlext's table functions, an
# incremental run), so that the classes they load are in it.
WORKLOAD = """
import sys
from pathlib import Path
from sqlext.session import local_session
from sqlext.runner import run_statement
from sqlext.statements import split_statements

spark = local_session("sqlext-test-classes", shuffle_partitions=2)
work = Path(sys.argv[2])
spark.range(2000).selectExpr("id % 7 AS k", "id AS v").write.parquet(str(work / "rows"))
spark.read.parquet(str(work / "rows")).groupBy("k").count().collect()
spark.range(10).mapInArrow(lambda batches: batches, "id long").collect()
for statement in split_statements((Path(sys.argv[1]) / "changelog_filter.sql").read_text()):
    run_statement(spark, statement.text).collect()
spark.stop()
"""


def archive_path(java_options: str) -> Path:
    """Where the archive for JVMs started with ``java_options`` is kept (it may not exist yet):
    named by the Java build, Spark's jars and the options."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    names = sorted(p.name for p in jars.glob("*.jar"))
    key = hashlib.sha256("\n".join([java, str(jars), java_options, *names]).encode()).hexdigest()[:16]
    return Path(sys.prefix) / f"sqlext-test-classes-{key}.jsa"


def build_archive(archive: Path, java_options: str, env: dict[str, str], groups: list[int]) -> bool:
    """Make the archive (the JVM writes it as it exits: about half a minute on two busy cores).
    It appears at ``archive`` only once whole; False where it could not be made. The process
    group making it is added to ``groups``, for a run that ends first to end it
    (:func:`end_group`)."""
    examples = Path(__file__).resolve().parents[1] / "sql_examples"
    work = Path(tempfile.mkdtemp(prefix="sqlext-test-classes-"))
    # written beside the archive, so that the rename is one step on one file system (a temporary
    # folder may be another, where a rename fails)
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    options = f"{java_options} -XX:ArchiveClassesAtExit={partial} {QUIET}"
    child = subprocess.Popen([sys.executable, "-c", WORKLOAD, str(examples), str(work)],
                             env={**env, "SPARK_SUBMIT_OPTS": options}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True)
    groups.append(child.pid)
    ended = False
    try:
        child.wait(timeout=300)
        ended = _group_ended(child.pid, 120)  # the JVM writes the archive as it exits, after Python
    except subprocess.TimeoutExpired:
        pass
    finally:
        end_group(child.pid)
    made = ended and child.returncode == 0 and partial.exists()
    if made:
        partial.replace(archive)
    partial.unlink(missing_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    return made


def _group_ended(group: int, seconds: float) -> bool:
    """Whether every process of ``group`` has ended within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def end_group(group: int) -> None:
    """Kill every process of ``group`` that is left."""
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass

"""One Spark session for the whole test run (local[2], UI off, few shuffle partitions), the
``spark`` marker, and the hypothesis profiles.

Every test that starts Spark is marked ``spark``: it requests the session (directly or
through a fixture that does), or ``spark_child_env`` (a child process that starts Spark), or
it is marked ``spark`` or ``cluster`` itself. ``pytest -m "not spark"`` runs the others, with
no JVM: when a run selects no ``spark`` test, Spark cannot start in it or in its children,
and a test that tries fails the run, named.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import settings

from jvm_classes import QUIET, archive_path, build_archive, end_group
from profiles import PROFILE
from storage_forms import STORAGE_CONF, STORAGE_FORMS, Storage

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# a rule that fails on a tree it did not expect fails the test (production notes it and
# leaves the statement unchanged)
os.environ.setdefault("SQLEXT_STRICT", "1")
# Every JVM the tests start (the session's and those of child processes: the CLI, dbt, JDBC)
# compiles with the quick JIT only and collects garbage on one thread: the tests' queries are
# small and many, so the optimising JIT's compilations cost more CPU than they win back (on
# two cores they halved a child's start and cut the session's CPU by a third). Its code cache
# is made larger: a long-lived child (dbt running eight commands) filled the default one, and
# the JVM then stopped compiling ("CodeCache is full. Compiler has been disabled").
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=240m"
os.environ.setdefault("SPARK_SUBMIT_OPTS", JVM_OPTIONS)
os.environ.setdefault("SPARK_LAUNCHER_OPTS", JVM_OPTIONS)

# Property tests (hypothesis): the default profile derandomises them (each run tries the same
# examples, a few per test); SQLEXT_HYPOTHESIS_PROFILE=nightly tries many more, at random
# (tests/profiles.py holds each test's two counts).
settings.register_profile("default", deadline=None, derandomize=True, print_blob=True)
settings.register_profile("nightly", deadline=None, derandomize=False, print_blob=True)
settings.load_profile(PROFILE)


# -- where incremental runs keep their files: plain paths, file: URIs, or a viewfs mount table
# (tests/storage_forms.py)

_storage_counts: dict[str, int] = {}


def pytest_generate_tests(metafunc):
    """A test that takes ``storage`` runs with its folders named in one of the forms, the forms
    taken in turn through a file's tests (plain first), so every file meets each of them; under
    the nightly profile every such test runs in all three. A test marked
    ``@pytest.mark.storage("viewfs")`` runs in the forms it names (all three under nightly) and
    leaves the turn to the next test."""
    if "storage" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("storage")
    if PROFILE == "nightly":
        forms = list(STORAGE_FORMS)
    elif marker is not None:
        forms = list(marker.args)
    else:
        module = metafunc.module.__name__
        count = _storage_counts.get(module, 0)
        _storage_counts[module] = count + 1
        forms = [STORAGE_FORMS[count % len(STORAGE_FORMS)]]
    metafunc.parametrize("storage", [Storage(f) for f in forms], ids=list(forms))


@pytest.fixture(scope="session")
def spark():
    from sqlext.session import local_session

    warehouse = tempfile.mkdtemp(prefix="sqlext-tests-warehouse-")
    session = local_session("sqlext-tests", shuffle_partitions=2,
                            conf={**STORAGE_CONF, "spark.sql.warehouse.dir": warehouse})
    yield session
    session.stop()
    shutil.rmtree(warehouse, ignore_errors=True)


@pytest.fixture(scope="session")
def spark_child_env():
    """The environment of a child process that starts Spark: its driver and workers run this
    interpreter. A test that requests it is marked ``spark``."""
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)


@pytest.fixture
def view(spark):
    """Register rows as a temp view: view(name, rows, schema_ddl) -> name."""
    from pyspark.sql.types import _parse_datatype_string

    names = []

    def make(name, rows, schema):
        frame = spark.createDataFrame(rows, schema=_parse_datatype_string(schema))
        frame.createOrReplaceTempView(name)
        names.append(name)
        return name

    yield make
    for name in names:
        spark.catalog.dropTempView(name)


@pytest.fixture
def path(spark):
    """Force the recursion's evaluation path ('auto', 'walk' or 'levels') for one test."""
    def use(name):
        spark.conf.set("spark.sqlext.recursion.path", name)
    yield use
    spark.conf.unset("spark.sqlext.recursion.path")


# -- the spark marker

STARTS_SPARK = {"spark", "spark_child_env"}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items):
    for item in items:
        if STARTS_SPARK & set(getattr(item, "fixturenames", ())) or item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.spark)
    items.sort(key=_heaviest_first)


# -- the order the two workers take the files in
#
# A worker takes a whole file at a time (--dist loadfile), in the order collected
# (--no-loadscope-reorder): the files that cost the most go first, so that the run does not end
# with one worker still in a long file while the other has nothing left. The list is the files
# that cost the most, heaviest first, from a run's per-file times (the test times of a
# `pytest --junitxml=FILE` run summed by file); the others follow in their own order. A file missing here costs only balance.
HEAVIEST_FILES = (
    "tests/fk_join/test_streaming_fk_join.py",
    "tests/dbt_adapter/test_dbt.py",
    "tests/fk_join/test_fk_join_subscriptions.py",
    "tests/recursion/test_streaming_recursion.py",
    "tests/dbt_adapter/test_dbt_chain.py",
    "tests/engine/test_cluster.py",
    "tests/engine/test_streaming.py",
    "tests/recursion/test_recursion_jump.py",
    "tests/surfaces/test_readme.py",
    "tests/recursion/test_recursion_shapes.py",
    "tests/recursion/test_recursion_differential.py",
    "tests/self_join/test_self_join_differential.py",
    "tests/surfaces/test_serve.py",
    "tests/engine/test_input_formats.py",
    "tests/surfaces/test_session_options.py",
    "tests/self_join/test_streaming_self_join.py",
    "tests/engine/test_stream_into_table.py",
    "tests/fk_join/test_fk_join.py",
    "tests/engine/test_delta.py",
    "tests/engine/test_streaming_pipeline.py",
    "tests/engine/test_rescale.py",
    "tests/recursion/test_recursion_bench.py",
    "tests/engine/test_batch_parts.py",
    "tests/test_rewriter_fuzz.py",
    "tests/dbt_adapter/test_dbt_sources.py",
    "tests/surfaces/test_cli.py",
    "tests/engine/test_bad_input.py",
    "tests/recursion/test_recursion_keyed.py",
    "tests/test_generated_shapes.py",
    "tests/surfaces/test_models.py",
    "tests/engine/test_bad_input_properties.py",
)


def _heaviest_first(item) -> int:
    name = item.nodeid.split("::", 1)[0]
    return HEAVIEST_FILES.index(name) if name in HEAVIEST_FILES else len(HEAVIEST_FILES)


_NO_SPARK = """#!/bin/sh
# Stands in for Spark's launcher in a test run that selected no spark test.
echo "${PYTEST_CURRENT_TEST:-outside a test}" >> "$SQLEXT_TESTS_SPARK_STARTS"
echo "a test run without spark tests started Spark: mark this test spark" >&2
exit 1
"""


def pytest_configure(config):
    """The file where Spark's stand-in launcher records who called it: made by the process that
    reports (the run itself, or the controller of the run's workers), for every worker to share;
    and what the working folder holds before the tests (they must leave nothing there)."""
    if not hasattr(config, "workerinput"):
        _share_classes(config)
        folder = Path(tempfile.mkdtemp(prefix="sqlext-spark-starts-"))
        os.environ["SQLEXT_TESTS_SPARK_STARTS"] = str(folder / "starts")
        config.stash[_starts_folder_key] = folder
        config.stash[_cwd_key] = set(os.listdir(os.getcwd()))


def _share_classes(config) -> None:
    """The class archive every JVM the tests start maps Spark's classes from (tests/jvm_classes.py),
    made once per venv, in the background while the tests start (the process that reports makes
    it); where the JVM options are the suite's own. Not in a run without Spark."""
    if os.environ["SPARK_SUBMIT_OPTS"] != JVM_OPTIONS or "not spark" in (config.option.markexpr or "") \
            or config.option.collectonly:
        return
    archive = archive_path(JVM_OPTIONS)
    os.environ[CLASS_ARCHIVE] = str(archive)
    if not archive.exists():
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
        threading.Thread(target=build_archive, args=(archive, JVM_OPTIONS, env, _archive_groups), daemon=True).start()


CLASS_ARCHIVE = "SQLEXT_TESTS_CLASS_ARCHIVE"
_archive_groups: list[int] = []  # the process making the archive, ended with the run


def _use_shared_classes() -> str:
    """From the moment the class archive is there, the JVMs this process starts (and its
    children's) use it; the session's JVM, if it started before, goes on without. Returns the
    options the JVMs this process starts now take."""
    archive = os.environ.get(CLASS_ARCHIVE)
    if archive and os.environ["SPARK_SUBMIT_OPTS"] == JVM_OPTIONS and os.path.exists(archive):
        os.environ["SPARK_SUBMIT_OPTS"] = f"{JVM_OPTIONS} -XX:SharedArchiveFile={archive} {QUIET}"
    return os.environ["SPARK_SUBMIT_OPTS"]


@pytest.fixture(autouse=True)
def _shared_classes():
    _use_shared_classes()
    yield


@pytest.fixture(scope="module")
def jvm_options() -> str:
    """The options of the JVMs a module's fixture starts (a standalone cluster's daemons and
    executors): the suite's, with the class archive if it is there when the fixture starts
    (module fixtures start before the autouse one above)."""
    return _use_shared_classes()


def pytest_collection_finish(session):
    """With no ``spark`` test selected, Spark's launcher (found through SPARK_HOME, here and in
    every child process) is a script that records who called it and fails."""
    if session.config.option.collectonly or any(item.get_closest_marker("spark") for item in session.items):
        return
    home = Path(tempfile.mkdtemp(prefix="sqlext-no-spark-"))
    (home / "bin").mkdir()
    for name in ("spark-submit", "spark-class"):
        (home / "bin" / name).write_text(_NO_SPARK)
        (home / "bin" / name).chmod(0o755)
    os.environ["SPARK_HOME"] = str(home)
    session.config.stash[_home_key] = home


_home_key = pytest.StashKey[Path]()
_cwd_key = pytest.StashKey[set]()
_left_key = pytest.StashKey[list]()
_starts_folder_key = pytest.StashKey[Path]()
_starts_key = pytest.StashKey[list]()


def pytest_sessionfinish(session):
    shutil.rmtree(session.config.stash.get(_home_key, ""), ignore_errors=True)
    for group in _archive_groups:
        end_group(group)
    folder = session.config.stash.get(_starts_folder_key, None)
    if folder is None:  # a worker: its controller reports
        return
    starts = folder / "starts"
    names = sorted(set(starts.read_text().splitlines()) - {""}) if starts.exists() else []
    shutil.rmtree(folder, ignore_errors=True)
    session.config.stash[_starts_key] = names
    before = session.config.stash.get(_cwd_key, None)
    left = sorted(set(os.listdir(os.getcwd())) - before - {".pytest_cache", ".hypothesis"}) if before is not None else []
    session.config.stash[_left_key] = left
    if names or left:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config):
    left = config.stash.get(_left_key, [])
    if left:
        terminalreporter.section("The tests left files in the working folder", red=True)
        terminalreporter.line(", ".join(left) + ": a test wrote where it was run from (a path read as a local "
                              "folder name?); write into a temporary folder")
    names = config.stash.get(_starts_key, [])
    if names:
        terminalreporter.section("Spark started in a run that selected no spark test", red=True)
        for name in names:
            terminalreporter.line(f"{name}: mark it spark (or have it request spark or spark_child_env)")

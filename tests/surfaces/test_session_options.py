"""The session options of every command that starts Spark (``sqlext run``, ``sql``,
``explain``, ``build``, ``stream``, ``bench``, ``serve``): spark-submit's names, parsed in one
place and applied in one place (``sqlext/session_options.py``; a command's session starts in
``sqlext/command_session.py``); and the catalog a command's own Spark keeps, persistent in the
working folder as spark-sql keeps it, or in memory.

Most tests need no Spark: they check what the options parse to, that each command hands them
to the one function that starts its session, and the settings they stand for. One test runs
the commands as a user types them, in a shell in a folder of its own: a table created by one
command is found by the next, with ``--master``, ``--conf`` and ``--catalog`` applied.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sqlext.cli import build_parser, main
from sqlext.errors import SqlextError
from sqlext.command_session import attach_address, attached_session, public
from sqlext.local_spark import embedded_settings
from sqlext.session_options import CATALOG_MEMORY, SessionOptions, check_catalog_free, merged, session_options

SQLEXT = Path(sys.executable).with_name("sqlext")
GIVEN = ["--master", "local[3]", "--conf", "spark.sql.shuffle.partitions=5", "--conf", "spark.x.y = a=b",
         "--packages", "org.example:one:1.0,org.example:two:2.0", "--jars", "/jars/a.jar", "--jars", "/jars/b.jar",
         "--driver-memory", "2g", "--catalog", CATALOG_MEMORY]
PARSED = SessionOptions(master="local[3]", conf=(("spark.sql.shuffle.partitions", "5"), ("spark.x.y", "a=b")),
                        packages=("org.example:one:1.0", "org.example:two:2.0"), jars=("/jars/a.jar", "/jars/b.jar"),
                        driver_memory="2g", catalog=CATALOG_MEMORY)


@pytest.fixture
def inputs(tmp_path):
    """A file of one statement, and a folder of one model, for the commands to be given."""
    query = tmp_path / "q.sql"
    query.write_text("SELECT 1 AS x")
    models = tmp_path / "models"
    models.mkdir()
    (models / "m.sql").write_text("SELECT 1 AS x")
    return {"q": str(query), "models": str(models), "dir": str(tmp_path)}


def commands(inputs) -> dict[str, tuple[list[str], bool]]:
    """Each command that starts Spark, as argv before the session options, and whether it may
    attach to a Spark Connect server."""
    return {
        "run": (["run", inputs["q"]], True),
        "sql": (["sql", "-e", "SELECT 1"], True),
        "explain": (["explain", inputs["q"]], True),
        "build": (["build", inputs["models"], "--warehouse", inputs["dir"] + "/wh"], True),
        "stream": (["stream", inputs["q"], "--checkpoint", inputs["dir"] + "/cp", "--output", inputs["dir"] + "/out"],
                   False),
        **{f"bench {name}": (["bench", name], False)
           for name in ("filter", "fk", "selfjoin", "scale", "recursion", "incremental")},
    }


class Started(Exception):
    """Raised where the command would start its session."""


def test_every_command_that_starts_spark_hands_the_same_options_to_the_one_session_start(inputs, monkeypatch,
                                                                                         capsys):
    import sqlext.cli.bench
    import sqlext.cli.explain
    import sqlext.cli.run
    import sqlext.cli.stream
    import sqlext.models
    import sqlext.shell

    calls = []

    def command_session(options, function, app_name="sqlext", attach=True):
        calls.append((options, attach))
        raise Started()

    # the commands' modules import command_session by name: replace it where each looks it up
    for module in (sqlext.cli.run, sqlext.cli.explain, sqlext.cli.stream, sqlext.cli.bench, sqlext.shell,
                   sqlext.models):
        monkeypatch.setattr(module, "command_session", command_session)
    for name, (argv, attaches) in commands(inputs).items():
        calls.clear()
        assert main([*argv, *GIVEN]) == 1, name  # Started ends as one line and status 1
        assert calls == [(PARSED, attaches)], name
    capsys.readouterr()


def test_serve_and_every_command_parse_the_session_options_alike(inputs):
    parser = build_parser()
    for argv, _ in [*commands(inputs).values(), (["serve"], False)]:
        assert session_options(parser.parse_args([*argv, *GIVEN])) == PARSED, argv
    remote = ["sql", "--remote", "sc://host:15002"]
    assert session_options(parser.parse_args(remote)).remote == "sc://host:15002"
    for no_remote in (["stream", inputs["q"], "--checkpoint", "c", "--output", "o"], ["bench", "fk"], ["serve"]):
        with pytest.raises(SystemExit):  # they run on Spark of their own: no --remote
            parser.parse_args([*no_remote, "--remote", "sc://host:15002"])


def test_the_options_round_trip_through_a_command_line():
    assert session_options(build_parser().parse_args(["sql", *PARSED.to_argv()])) == PARSED


@pytest.mark.parametrize("argv, why", [
    (["run", "q.sql", "--conf", "spark.sql.shuffle.partitions"], "is not KEY=VALUE"),
    (["explain", "q.sql", "--conf", "=1"], "is not KEY=VALUE"),
    (["sql", "--remote", "localhost:15002", "-e", "SELECT 1"], "is not a Spark Connect address"),
    (["bench", "fk", "--catalog", " "], "needs a folder, or memory"),
])
def test_a_session_option_that_cannot_be_one_is_refused_before_spark_starts(argv, why, capsys):
    assert main(argv) == 2
    assert why in capsys.readouterr().err


def test_the_options_stand_for_spark_settings_layered_over_sqlexts(tmp_path):
    options = SessionOptions(packages=("g:a:1",), jars=("/j.jar",), driver_memory="2g", catalog=str(tmp_path),
                             conf=(("spark.sql.shuffle.partitions", "7"), ("spark.driver.memory", "3g")))
    settings = merged(embedded_settings(), options.settings(), options.conf_settings())
    assert settings["spark.jars.packages"] == "g:a:1" and settings["spark.jars"] == "/j.jar"
    assert settings["spark.driver.memory"] == "3g"  # --conf last: over --driver-memory
    assert settings["spark.sql.shuffle.partitions"] == "7"
    # the catalog in the folder given, as spark-sql keeps it in the working folder
    assert settings["spark.sql.catalogImplementation"] == "hive"
    assert settings["spark.sql.warehouse.dir"] == str(tmp_path / "spark-warehouse")
    assert str(tmp_path / "metastore_db") in settings["spark.hadoop.javax.jdo.option.ConnectionURL"]
    # Derby's log goes there too, after sqlext's own Java options (the quiet logs stay)
    java = settings["spark.driver.extraJavaOptions"]
    assert java.startswith("-Dlog4j2.configurationFile=") and f"-Dderby.stream.error.file={tmp_path}/derby.log" in java
    assert SessionOptions(catalog=CATALOG_MEMORY).settings()["spark.sql.catalogImplementation"] == "in-memory"
    assert SessionOptions().catalog_folder() == Path.cwd().resolve()


def _holding_the_catalog(folder: Path, seconds: float | None = None) -> subprocess.Popen:
    """A process that locks ``metastore_db/dbex.lck`` in ``folder`` as Derby does while it has
    the database open, and lets go after ``seconds`` (or when its standard input closes)."""
    lock = folder / "metastore_db" / "dbex.lck"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""\
        import fcntl, os, sys, time
        descriptor = os.open({str(lock)!r}, os.O_RDWR)
        fcntl.lockf(descriptor, fcntl.LOCK_EX)
        print("locked", flush=True)
        time.sleep({seconds}) if {seconds is not None} else sys.stdin.read()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_a_catalog_another_process_keeps_open_is_refused_after_a_bounded_wait(tmp_path):
    """Derby locks dbex.lck while a process has the database open; a second process would try
    for half a minute and fail with thousands of lines of stack trace."""
    check_catalog_free(tmp_path, "sqlext run")  # no catalog there yet
    (tmp_path / "metastore_db").mkdir()
    (tmp_path / "metastore_db" / "dbex.lck").write_text("")
    check_catalog_free(tmp_path, "sqlext run")  # left behind by a process that ended
    holder = _holding_the_catalog(tmp_path)
    try:
        started = time.monotonic()
        with pytest.raises(SqlextError) as refused:
            check_catalog_free(tmp_path, "sqlext run", wait=0.5)
        assert 0.5 <= time.monotonic() - started < 3
        assert refused.value.error_class == "CATALOG_IN_USE" and str(tmp_path) in str(refused.value)
        assert "still open after 0.5 s" in str(refused.value)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    check_catalog_free(tmp_path, "sqlext run")


def test_a_catalog_a_process_releases_as_it_ends_is_waited_for(tmp_path):
    """A command chained after one that just ended (dbt build && sqlext sql ...) finds the
    catalog still open for a moment: PySpark's JVM outlives its Python process by half a second
    or more. The command waits for it (CATALOG_WAIT seconds at most) rather than refuse it."""
    from sqlext.session_options import CATALOG_WAIT

    (tmp_path / "metastore_db").mkdir()
    (tmp_path / "metastore_db" / "dbex.lck").write_text("")
    holder = _holding_the_catalog(tmp_path, seconds=1.5)
    try:
        started = time.monotonic()
        check_catalog_free(tmp_path, "sqlext sql")
        assert 1.0 <= time.monotonic() - started < CATALOG_WAIT
    finally:
        holder.wait(timeout=30)


@pytest.fixture
def no_spark_here(monkeypatch, tmp_path):
    """As in a new process in a folder of its own: no SparkContext, no SPARK_REMOTE."""
    from pyspark import SparkContext

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_where_a_command_attaches(no_spark_here, monkeypatch):
    assert attach_address(SessionOptions()) is None  # no server here: Spark of its own
    monkeypatch.setenv("SPARK_REMOTE", "sc://from-env:1")
    assert attach_address(SessionOptions()) == "sc://from-env:1"
    assert attach_address(SessionOptions(remote="sc://given:2")) == "sc://given:2"
    assert attach_address(SessionOptions(master="local[1]")) is None  # --master: Spark of its own


def test_an_attaching_command_refuses_what_cannot_apply_or_answer():
    for given in (SessionOptions(packages=("g:a:1",)), SessionOptions(jars=("/j.jar",)),
                  SessionOptions(driver_memory="8g"), SessionOptions(catalog=CATALOG_MEMORY)):
        with pytest.raises(SqlextError) as refused:  # before it connects: nothing answers at port 1
            attached_session("sc://localhost:1/;token=secret", given, "sqlext sql")
        assert refused.value.error_class == "REMOTE_SESSION_OPTION"
        assert "secret" not in str(refused.value) and "sc://localhost:1" in str(refused.value)
    with socket.socket() as probe:  # a port where nothing listens
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    with pytest.raises(SqlextError) as unreachable:  # at once: the client would retry for minutes
        attached_session(f"sc://localhost:{closed}/;token=secret", SessionOptions(), "sqlext sql")
    assert unreachable.value.error_class == "SERVER_UNREACHABLE" and "secret" not in str(unreachable.value)
    assert public("sc://h:1/;token=t;user_id=u") == "sc://h:1/;user_id=u" and public("sc://h:1") == "sc://h:1"


def test_stream_says_it_runs_on_spark_of_its_own_where_a_server_is_named(no_spark_here, monkeypatch, capsys):
    from sqlext.cli.stream import say_stream_runs_its_own_spark

    say_stream_runs_its_own_spark()
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("SPARK_REMOTE", "sc://localhost:15002")
    say_stream_runs_its_own_spark()
    assert "runs on Spark of its own, not on $SPARK_REMOTE" in capsys.readouterr().err


def user_shell_environment(spark_child_env: dict, home: Path) -> dict:
    """The environment of a user's shell after the quick start (the venv's bin on PATH)."""
    env = {k: v for k, v in spark_child_env.items() if not k.startswith("PYTEST_") and k != "SPARK_REMOTE"}
    env["PATH"] = os.pathsep.join([str(SQLEXT.parent), env.get("PATH", "")])
    env["SQLEXT_HISTORY"] = str(home / "history")
    return env


def test_a_table_created_by_one_command_is_found_by_the_next(spark_child_env, tmp_path):
    """The first hour, in a shell, in a folder of its own: ``sqlext sql`` creates a table, and
    ``sqlext run`` started next finds it (it was TABLE_OR_VIEW_NOT_FOUND, and creating it again
    LOCATION_ALREADY_EXISTS), on the master and with the settings given (--master, --conf); the
    catalog is in the working folder, where spark-sql keeps it."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "q.sql").write_text("SELECT a FROM t1;\nSET spark.sql.shuffle.partitions;\nSET spark.master;\n")
    script = textwrap.dedent(f"""\
        cd {project}
        sqlext sql -S -e "CREATE TABLE t1 USING parquet AS SELECT 1 AS a"
        sqlext run q.sql --master 'local[1]' --conf spark.sql.shuffle.partitions=3
        """)
    done = subprocess.run(["bash", "-c", "set -e\n" + script], capture_output=True, text=True, timeout=900,
                          env=user_shell_environment(spark_child_env, tmp_path), stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "| a |\n+---+\n| 1 |" in out, out  # found by the next command, in another process
    assert "| spark.sql.shuffle.partitions | 3 " in out and "| spark.master | local[1] " in out, out
    assert sorted(os.listdir(project)) == ["derby.log", "metastore_db", "q.sql", "spark-warehouse"]
    assert (project / "spark-warehouse" / "t1").is_dir()


def test_the_first_hour_streams_a_pandas_file_with_the_options_given(spark_child_env, tmp_path):
    """The first hour, continued in a shell: pandas writes a change file (its timestamps in
    nanoseconds), ``sqlext stream`` runs over it with --master and --conf (the setting reaches
    the state it keeps), and a --master Spark does not know is a classed error on the commands
    that start Spark, not the JVM's stack."""
    import pyarrow.parquet as pq

    project = tmp_path / "project"
    project.mkdir()
    (project / "filter.sql").write_text(
        "SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(clicks)), key => 'id',\n"
        "  predicate => 'ts >= TIMESTAMP_NTZ ''2026-11-22 09:02:00''');\n")
    (project / "models").mkdir()
    (project / "models" / "m.sql").write_text("SELECT 1 AS a\n")
    make_file = ("import pandas as pd; pd.DataFrame({'id': [1, 2], 'ts': pd.to_datetime(['2026-11-22 09:00', "
                 "'2026-11-22 09:04']), '_commit_version': [1, 1]}).to_parquet('clicks/part-1.parquet')")
    script = textwrap.dedent(f"""\
        cd {project}
        mkdir clicks
        python -c "{make_file}"
        sqlext stream filter.sql --source clicks=clicks --checkpoint cp --output out --master 'local[1]' \\
            --conf spark.sqlext.streaming.stateBuckets=3
        """)
    env = user_shell_environment(spark_child_env, tmp_path)
    done = subprocess.run(["bash", "-c", "set -e\n" + script], capture_output=True, text=True, timeout=900,
                          env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert str(pq.read_schema(project / "clicks" / "part-1.parquet").field("ts").type) == "timestamp[ns]"
    written = sorted((project / "out").glob("*.parquet"))
    rows = [row for f in written for row in pq.read_table(f).to_pylist()]
    assert [(r["id"], str(r["ts"]), r["_change_type"]) for r in rows] == [(2, "2026-11-22 09:04:00", "insert")]
    recorded = [json.loads(f.read_text()) for f in (project / "cp").rglob("buckets.json")]
    assert recorded and all(r == {"buckets": 3} for r in recorded), recorded  # --conf reached the run
    # every command starts Spark through the one session start (the first test here), so two that
    # report errors differently stand for the rest: the models runner and the shell
    for command in (["build", "models"], ["sql", "-e", "SELECT 1"]):
        failed = subprocess.run(["sqlext", *command, "--master", "nope://x"], capture_output=True, text=True,
                                timeout=300, env=env, stdin=subprocess.DEVNULL, cwd=project)
        assert failed.returncode != 0
        assert f"[SPARK_DID_NOT_START] sqlext {command[0]}: Spark did not start:" in failed.stderr, failed.stderr
        assert "Master must either be yarn or start with spark, k8s, or local" in failed.stderr
        assert "\tat org.apache" not in failed.stderr, failed.stderr


def test_a_command_of_its_own_keeps_its_tables_in_memory_where_the_folders_server_has_the_catalog(
        no_spark_here, monkeypatch, capsys):
    """sqlext stream and sqlext bench start Spark of their own; in a folder whose catalog
    sqlext serve's server has open, they would find it in use."""
    import sqlext.command_session

    started = []
    monkeypatch.setattr(sqlext.command_session, "embedded_session", lambda options, *rest: started.append(options))
    sqlext.command_session.command_session(SessionOptions(), "sqlext stream", attach=False)
    assert started.pop() == SessionOptions() and capsys.readouterr().err == ""  # no server: the folder's catalog
    monkeypatch.setattr(sqlext.command_session, "running_server", lambda folder: object())
    sqlext.command_session.command_session(SessionOptions(), "sqlext stream", attach=False)
    assert started.pop() == SessionOptions(catalog=CATALOG_MEMORY)
    assert "sqlext stream keeps its tables in memory" in capsys.readouterr().err
    sqlext.command_session.command_session(SessionOptions(catalog="elsewhere"), "sqlext stream", attach=False)
    assert started.pop() == SessionOptions(catalog="elsewhere")  # a catalog given is kept

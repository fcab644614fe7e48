"""``sqlext serve``: a warm session for the commands of a folder.

One server for the module, started as a user starts it, in a folder of its own; its
teardown stops it whatever the tests did. The commands after it run with a Spark launcher
that fails (``SPARK_HOME`` points at a stand-in), so a command that started Spark of its own
instead of attaching would fail: each one shows that it attached.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

SQLEXT = Path(sys.executable).with_name("sqlext")
FILTER = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(VALUES (1, 5, 1L), (1, -1, 2L) AS t(id, v, _commit_version)), "
          "key => 'id', predicate => 'v > 0') ORDER BY _commit_version")
NO_SPARK = "#!/bin/sh\necho 'this command started Spark of its own' >&2\nexit 1\n"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# what the module's server start showed (the served fixture fills it)
START: dict = {}


def _hold_ports(spec: dict) -> list[socket.socket]:
    """Listen on the ports the starting command's spec names for the server, as another
    process might in the seconds before the server binds them (none where the spec leaves the
    port to the system, or where another process has it already)."""
    wanted = [int(spec["settings"]["spark.connect.grpc.binding.port"]), int(spec["jdbc"]["port"])]
    held = []
    for port in wanted:
        if port:
            taker = socket.socket()
            try:
                taker.bind(("127.0.0.1", port))
                taker.listen()
                held.append(taker)
            except OSError:
                taker.close()
    return held


def _start_watched(folder: Path, env: dict, argv: list[str]) -> subprocess.CompletedProcess:
    """``sqlext serve ARGV`` in ``folder``, watched as it starts: the ports its spec names for
    the server are taken by this process meanwhile (START["held"]), and ``sqlext serve
    --status`` runs as soon as the JDBC port answers (START["status"])."""
    from sqlext.server_state import STATE, listening

    spec, ready = folder / f"{STATE}.spec", folder / f"{STATE}.ready"
    starting = subprocess.Popen([str(SQLEXT), "serve", *argv], cwd=folder, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    held, START["held"] = None, []
    try:
        while starting.poll() is None:
            if held is None:  # the spec is written once the command has looked at the ports
                try:
                    held = _hold_ports(json.loads(spec.read_text()))
                    START["held"] = [taker.getsockname()[1] for taker in held]
                except (OSError, ValueError, KeyError):  # not yet, or in part
                    pass
            try:
                jdbc_port = json.loads(ready.read_text())["jdbc_port"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.005)
                continue
            if listening(jdbc_port):
                START["status"] = subprocess.run([str(SQLEXT), "serve", "--status"], cwd=folder, env=env,
                                                 capture_output=True, text=True, timeout=60)
                break
        out, err = starting.communicate(timeout=900)
        return subprocess.CompletedProcess(starting.args, starting.returncode, out, err)
    finally:
        for taker in held or []:
            taker.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory, spark_child_env):
    """A folder where ``sqlext serve`` runs, and the environment of the commands after it. It
    starts on the default port (another process takes the ports it was to bind meanwhile),
    with a JDBC port the system gives, and SHOW TABLES in Spark's shape for the whole server."""
    from sqlext.serve import STATE, end_server, read_state

    folder = tmp_path_factory.mktemp("served")
    env = {k: v for k, v in spark_child_env.items() if not k.startswith("PYTEST_") and k != "SPARK_REMOTE"}
    env["SQLEXT_HISTORY"] = str(folder / "history")
    started = _start_watched(folder, env, ["--jdbc-port", "0", "--conf", "sqlext.jdbc.showTables=spark"])
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        no_spark = tmp_path_factory.mktemp("no-spark")
        (no_spark / "bin").mkdir()
        for name in ("spark-submit", "spark-class"):
            (no_spark / "bin" / name).write_text(NO_SPARK)
            (no_spark / "bin" / name).chmod(0o755)
        yield folder, dict(env, SPARK_HOME=str(no_spark)), started.stdout
    finally:
        server = read_state(folder)
        if server is not None and _alive(server.pid):
            end_server(server.pid)
        (folder / STATE).unlink(missing_ok=True)


def sqlext(served, *argv, cwd=None, env=None, **extra):
    folder, commands_env, _ = served
    return subprocess.run([str(SQLEXT), *argv], cwd=cwd or folder, env={**commands_env, **(env or {})},
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, **extra)


def test_serve_names_its_server_in_a_state_file_only_its_owner_reads(served):
    from sqlext.serve import STATE

    folder, _, said = served
    state = json.loads((folder / STATE).read_text())
    assert state["address"].startswith(f"sc://localhost:{state['port']}/;token=") and _alive(state["pid"])
    assert stat.S_IMODE((folder / STATE).stat().st_mode) == 0o600
    assert f"sc://localhost:{state['port']}" in said and state["address"].partition(";token=")[2] not in said
    assert sqlext(served, "serve").stdout.startswith("sqlext serve: already running")
    status = sqlext(served, "serve", "--status")
    assert status.returncode == 0 and status.stdout.strip() == state["address"]
    # while serve still warmed it up, the JDBC port answering: --status named it already
    assert START["status"].returncode == 0 and START["status"].stdout.strip() == state["address"], START["status"]


def test_serve_binds_its_ports_itself_and_names_the_ones_it_holds(served):
    """Another process took the ports the starting command meant for the server, between the
    command's look and the server's bind: the server took the next free port (none was named)
    and the JDBC port the system gave, and the state file names the ports it listens on."""
    from sqlext.serve import STATE
    from sqlext.server_state import listening

    state = json.loads((served[0] / STATE).read_text())
    assert state["port"] not in START["held"] and state["jdbc_port"] not in START["held"], (state, START)
    assert listening(state["port"]) and listening(state["jdbc_port"])


def test_commands_in_the_folder_attach_and_share_its_catalog(served, tmp_path):
    folder = served[0]
    created = sqlext(served, "sql", "-S", "-e", f"CREATE TABLE t1 USING parquet AS SELECT 1 AS a; {FILTER}")
    assert created.returncode == 0, created.stderr
    assert "| 1  | 5 | insert       | 1               |" in created.stdout  # sqlext's function, on the server
    assert "| 1  | 5 | delete       | 2               |" in created.stdout
    query = tmp_path / "q.sql"
    query.write_text("SELECT a FROM t1;\n")
    ran = sqlext(served, "run", str(query))
    assert ran.returncode == 0 and "| a |\n+---+\n| 1 |" in ran.stdout, ran.stderr
    explained = sqlext(served, "explain", str(query))
    assert explained.returncode == 0, explained.stderr
    assert "-- plan as written" in explained.stdout and "FileScan parquet" in explained.stdout
    assert (folder / "spark-warehouse" / "t1").is_dir()


def test_commands_elsewhere_attach_with_remote_or_spark_remote(served, tmp_path):
    address = sqlext(served, "serve", "--status").stdout.strip()
    by_option = sqlext(served, "sql", "-S", "--remote", address, "-e", FILTER, cwd=tmp_path)
    assert by_option.returncode == 0 and "| delete " in by_option.stdout, by_option.stderr
    by_env = sqlext(served, "sql", "-S", "-e", "SELECT 41 + 1 AS answer", cwd=tmp_path, env={"SPARK_REMOTE": address})
    assert by_env.returncode == 0 and "| 42     |" in by_env.stdout, by_env.stderr
    refused = sqlext(served, "sql", "-S", "--catalog", "memory", "-e", "SELECT 1")
    assert refused.returncode == 1 and refused.stderr.startswith("[REMOTE_SESSION_OPTION]")
    in_use = sqlext(served, "sql", "-S", "--master", "local[1]", "-e", "SELECT 1")
    assert in_use.returncode == 1 and in_use.stderr.startswith("[CATALOG_IN_USE]")  # refused before Spark starts
    assert not list(tmp_path.iterdir())


def _rows(spark, folder: Path) -> list:
    return sorted(tuple(row) for row in spark.read.parquet(str(folder)).collect())


def test_stream_runs_in_the_servers_driver_with_the_rows_of_spark_of_its_own(served, spark, tmp_path):
    """sqlext stream in the folder is carried out by the server (Spark of its own would fail
    here: the stand-in); run by run, and after a run whose command was killed, its output is
    what the same runs give on Spark of their own."""
    from sqlext.streaming import run_available_now

    from test_stream_stop import QUERY, write_changes

    changes, query = tmp_path / "changes", tmp_path / "q.sql"
    query.write_text(QUERY)
    argv = ["stream", str(query), "--source", f"acc={changes}", "--checkpoint", str(tmp_path / "cp"),
            "--output", str(tmp_path / "out")]
    increments = [[(1, 10, "insert", 1), (2, 5, "insert", 1)],
                  [(1, -3, "update_postimage", 2), (3, 7, "insert", 2)],
                  [(k, k % 7 - 3, "insert", 3) for k in range(10, 4000)],
                  [(2, -1, "update_postimage", 4), (3, 8, "update_postimage", 4)]]
    for number, rows in enumerate(increments):
        write_changes(changes, f"part-{number}.parquet", rows)
        if number == 2:  # the command killed while the server carries its run out
            killed = subprocess.Popen([str(SQLEXT), *argv], cwd=served[0], env=served[1], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
            try:
                killed.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                killed.kill()
                killed.wait()
        ran = sqlext(served, *argv)
        assert ran.returncode == 0 and ran.stdout.startswith("-- run complete in "), ran.stdout + ran.stderr
        assert "own" not in ran.stderr, ran.stderr
    own = tmp_path / "own"  # the same increments, run by run, on this process's Spark
    for number, rows in enumerate(increments):
        write_changes(own, f"part-{number}.parquet", rows)
        run_available_now(spark, QUERY, checkpoint=str(tmp_path / "own-cp"), output=str(tmp_path / "own-out"),
                          sources={"acc": str(own)})
    assert _rows(spark, tmp_path / "out") == _rows(spark, tmp_path / "own-out")
    bad = sqlext(served, "stream", str(query), "--source", "acc", "--checkpoint", "c", "--output", "o")
    assert bad.returncode == 2 and "--source 'acc' is not NAME=DIR" in bad.stderr  # said by the server, shown here


def test_ctrl_c_on_an_attached_stream_stops_its_run_in_one_line(served, tmp_path):
    from test_stream_stop import QUERY, interrupted, write_changes

    from sqlext.cli.stream import STOPPED

    write_changes(tmp_path / "changes", "part-0.parquet", [(1, 10, "insert", 1)])
    (tmp_path / "q.sql").write_text(QUERY)
    done, _ = interrupted([str(SQLEXT), "stream", str(tmp_path / "q.sql"), "--source", f"acc={tmp_path / 'changes'}",
                           "--checkpoint", str(tmp_path / "cp"), "--output", str(tmp_path / "out"), "--every",
                           "1 second"], served[1], served[0], "-- streaming every")
    assert done.returncode == 0 and done.stderr.strip() == STOPPED, done.stderr
    again = sqlext(served, "stream", str(tmp_path / "q.sql"), "--source", f"acc={tmp_path / 'changes'}",
                   "--checkpoint", str(tmp_path / "cp"), "--output", str(tmp_path / "out"))
    assert again.returncode == 0, again.stderr  # the stopped query no longer holds the checkpoint


def test_an_attached_run_parses_the_whole_file_before_it_runs_a_statement(served, tmp_path):
    """As on Spark of its own: a statement Spark's parser refuses, last in the file, leaves the
    ones before it unrun (the server's parser reads each statement first)."""
    folder = served[0]
    script = tmp_path / "f.sql"
    script.write_text("CREATE TABLE IF NOT EXISTS ledger_unrun (id INT) USING parquet;\n"
                      "INSERT INTO ledger_unrun VALUES (1);\nSELECT * FROM ledger_unrun WHERE id = = 1;\n")
    ran = sqlext(served, "run", str(script))
    assert ran.returncode == 1 and ran.stdout == "", ran.stdout  # nothing ran
    assert ran.stderr == f"{script}:3:39: [PARSE_SYNTAX_ERROR] Syntax error at or near '='. SQLSTATE: 42601\n"
    assert not (folder / "spark-warehouse" / "ledger_unrun").exists()


def test_attached_errors_are_one_line_and_sqlext_debug_adds_the_jvm_trace(served):
    """Spark's errors on a server read as on Spark of its own: one line each, without the plan,
    the SQL fragment or the JVM's stack trace, whatever the server's settings; SQLEXT_DEBUG=1
    adds the trace."""
    folder, commands_env, _ = served
    statements = "SELECT * FROM nope;\nSELECT * FROM parquet.`/no/such/path`;\nSELECT 1 WHERE 1 = = 1;\n"
    piped = subprocess.run([str(SQLEXT), "sql", "-S"], cwd=folder, env=commands_env, input=statements,
                           capture_output=True, text=True, timeout=300)
    lines = piped.stderr.splitlines()
    assert piped.returncode == 1 and len(lines) == 3, piped.stderr
    assert lines[0].startswith("[TABLE_OR_VIEW_NOT_FOUND] The table or view `nope` cannot be found.")
    assert lines[0].endswith("SQLSTATE: 42P01; line 1 pos 14")
    assert lines[1] == "[PATH_NOT_FOUND] Path does not exist: file:/no/such/path. SQLSTATE: 42K03"
    assert lines[2] == "[PARSE_SYNTAX_ERROR] Syntax error at or near '='. SQLSTATE: 42601; line 1 pos 19"
    debug = sqlext(served, "sql", "-S", "-e", "SELECT * FROM nope", env={"SQLEXT_DEBUG": "1"})
    assert debug.returncode == 1 and "\tat org.apache.spark.sql" in debug.stderr
    assert debug.stderr.splitlines()[-1].startswith("[TABLE_OR_VIEW_NOT_FOUND] The table or view `nope`")


def test_jdbc_port_serves_hiveserver2_clients_through_sqlext_with_the_token(served):
    """sqlext serve --jdbc-port: PyHive (HiveServer2's protocol) reaches the server's session,
    sees the folder's tables, runs sqlext's functions, and is refused without the token; the
    server's --conf sets the shape of SHOW TABLES, which a session's SET overrides."""
    from pyhive import hive

    from sqlext.serve import STATE

    folder, _, said = served
    state = json.loads((folder / STATE).read_text())
    token = state["address"].partition(";token=")[2]
    assert state["jdbc_port"] > 0 and f"JDBC at jdbc:hive2://localhost:{state['jdbc_port']}/default" in said
    assert token not in said
    with hive.connect("localhost", port=state["jdbc_port"], username="me", password=token, auth="CUSTOM") as client:
        cursor = client.cursor()
        cursor.execute(FILTER)
        assert cursor.fetchall() == [(1, 5, "insert", 1), (1, 5, "delete", 2)]
        cursor.execute("SHOW TABLES")  # in Spark's shape: the server's --conf sqlext.jdbc.showTables=spark
        assert ("default", "t1", False) in cursor.fetchall()  # made by a command attached over Spark Connect
        cursor.execute("SET sqlext.jdbc.showTables=hive")  # the session's own shape
        cursor.execute("SHOW TABLES")
        assert [d[0] for d in cursor.description] == ["tab_name"] and ("t1",) in cursor.fetchall()
        cursor.execute("RESET sqlext.jdbc.showTables")  # back to the server's
        cursor.execute("SHOW TABLES")
        assert [d[0] for d in cursor.description] == ["namespace", "tableName", "isTemporary"]
    with pytest.raises(Exception, match="JDBC_TOKEN_REFUSED"):
        hive.connect("localhost", port=state["jdbc_port"], username="me", password="not-the-token", auth="CUSTOM")


def test_serve_stop_stops_the_server_and_the_next_command_runs_its_own(served):
    """--stop while a JDBC client's statement runs: the server ends it, stops, and its log
    says so in two lines, without a traceback."""
    from pyhive import hive

    from sqlext.serve import LOG, STATE

    folder = served[0]
    state = json.loads((folder / STATE).read_text())
    client = hive.connect("localhost", port=state["jdbc_port"], username="me",
                          password=state["address"].partition(";token=")[2], auth="CUSTOM")
    client.cursor().execute("SELECT sum(id % 7) AS s FROM range(200000000000)", async_=True)
    time.sleep(1.0)  # its Spark job is running
    stopped = sqlext(served, "serve", "--stop")
    assert stopped.returncode == 0 and "stopped the server" in stopped.stdout
    assert not (folder / STATE).exists() and not _alive(state["pid"])
    stopping = (folder / LOG).read_text().partition("sqlext serve: stopping\n")[2]
    assert stopping == "sqlext serve: stopped\n", stopping
    alone = sqlext(served, "sql", "-S", "-e", "SELECT 1")  # no server: it starts Spark (the stand-in)
    assert alone.returncode != 0 and "started Spark of its own" in alone.stderr
    assert sqlext(served, "serve", "--status").returncode == 1

"""``sqlext sql``, the spark-sql style shell.

The prompt is driven as a user drives it: the shell runs in its own process on a
pseudo-terminal, and the tests type into it (a multi-line statement, statements sqlext
rewrites, errors, Ctrl-C during a long query and at the prompt, ``exit;``). They run in file
order against one shell. ``-e``, ``-f``, ``--conf`` and ``--version`` run in this process on
the test session.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import sys
import termios
import time

import pytest

from sqlext.cli import main

STARTUP_SECONDS = 300  # a JVM start on a machine shared with other Spark sessions
STATEMENT_SECONDS = 120
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]")


class Terminal:
    """A process on a pseudo-terminal: type into it, wait for what it prints."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the shell, with the terminal as its controlling tty
            try:
                os.chdir(cwd)
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        # a wide terminal, so that readline does not wrap the echoed lines
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 250, 0, 0))
        self.raw = b""
        self.position = 0  # where the next expect() starts looking, in text()
        self.status: int | None = None

    def text(self) -> str:
        return ANSI.sub("", self.raw.decode(errors="replace")).replace("\r", "")

    def send(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def type_line(self, line: str) -> None:
        self.send(line + "\r")

    def _read(self, seconds: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], seconds)
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # the child closed the terminal
            return False
        self.raw += chunk
        return bool(chunk)

    def expect(self, pattern: str, seconds: float = STATEMENT_SECONDS) -> str:
        """Wait for ``pattern`` (a regular expression) after the last match; return the text
        from there to the end of the match."""
        deadline = time.monotonic() + seconds
        while True:
            match = re.compile(pattern).search(self.text(), self.position)
            if match:
                seen = self.text()[self.position:match.end()]
                self.position = match.end()
                return seen
            if time.monotonic() > deadline:
                pytest.fail(f"no {pattern!r} within {seconds} s; the shell printed:\n{self.text()[self.position:]}")
            if not self._read(0.2):
                pytest.fail(f"the shell ended before printing {pattern!r}:\n{self.text()[self.position:]}")

    def read_for(self, seconds: float) -> None:
        """Keep reading what the process prints for ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self._read(0.1):
            pass

    def wait(self, seconds: float) -> int | None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._read(0.1)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                return self.status
        return None

    def close(self) -> None:
        if self.status is None and self.wait(0) is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


PROMPT = r"sqlext> "
CONTINUATION = r"      > "


@pytest.fixture(scope="module")
def shell(tmp_path_factory, spark_child_env):
    home = tmp_path_factory.mktemp("shell")
    env = dict(spark_child_env, SQLEXT_HISTORY=str(home / "history"), TERM="dumb")
    terminal = Terminal([sys.executable, "-m", "sqlext.cli", "sql", "--master", "local[1]"], env, str(home))
    terminal.history = home / "history"
    terminal.expect(PROMPT, STARTUP_SECONDS)
    yield terminal
    terminal.close()


def test_a_statement_over_several_lines_runs_at_its_semicolon(shell):
    shell.type_line("SELECT 1 AS a,")
    shell.expect(CONTINUATION)
    shell.type_line("  'x;y' AS b  -- a ; in a string or a comment does not end it")
    shell.expect(CONTINUATION)
    shell.type_line("  ;")
    out = shell.expect(PROMPT)
    assert "| a | b   |" in out and "| 1 | x;y |" in out and "(1 row)" in out
    assert "Time taken:" in out


def test_the_session_runs_on_the_master_given(shell):
    shell.type_line("SET spark.master;")
    assert re.search(r"^\| spark\.master \| local\[1\] +\|$", shell.expect(PROMPT), re.M)


def test_statements_are_rewritten_by_sqlext(shell):
    shell.type_line("CREATE OR REPLACE TEMPORARY VIEW accounts AS SELECT * FROM VALUES")
    shell.type_line("  (1, 120, 'insert', 1L), (1, 120, 'update_preimage', 2L), (1, -30, 'update_postimage', 2L),")
    shell.type_line("  (2, 50, 'insert', 2L) AS accounts(id, balance, _change_type, _commit_version);")
    assert "OK" in shell.expect(PROMPT)
    shell.type_line("SELECT * FROM CHANGELOG_FILTER(input => TABLE(accounts), key => 'id',")
    shell.type_line("  predicate => 'balance >= 0') ORDER BY _commit_version, id;")
    out = shell.expect(PROMPT)
    rows = re.findall(r"^\| (\d+) +\| (-?\d+) +\| (\w+) +\| (\d+) +\|$", out, re.M)
    assert rows == [("1", "120", "insert", "1"), ("1", "120", "delete", "2"), ("2", "50", "insert", "2")]
    # Spark 4.3 refuses UNION in a recursive CTE; sqlext's rewrite runs it (cyclic data ends)
    shell.type_line("WITH RECURSIVE r(n) AS (SELECT 1 UNION SELECT n % 3 + 1 FROM r) SELECT n FROM r ORDER BY n;")
    out = shell.expect(PROMPT)
    assert re.findall(r"^\| (\d+) +\|$", out, re.M) == ["1", "2", "3"], out


def test_errors_are_one_line_with_their_class_and_the_shell_goes_on(shell):
    shell.type_line("SELECT nope FROM VALUES (1) AS t(a);")
    out = shell.expect(PROMPT)
    assert "[UNRESOLVED_COLUMN.WITH_SUGGESTION]" in out and "`nope`" in out
    shell.type_line("SELECT * FROM CHANGELOG_FILTER(input => TABLE(accounts), key => 'id', predicate => 'balance >');")
    out = shell.expect(PROMPT)
    assert "[INVALID_SQL_EXPRESSION] CHANGELOG_FILTER: predicate => 'balance >'" in out
    assert "Traceback" not in shell.text() and "\tat org.apache" not in shell.text()
    shell.type_line("SELECT 'still here' AS status;")
    assert "| still here |" in shell.expect(PROMPT)


def test_ctrl_c_cancels_a_running_query_and_keeps_the_shell(shell):
    # about 10^15 rows: days of work on two cores
    shell.type_line("SELECT count(*) AS n FROM range(0, 1000000000000000);")
    shell.read_for(5)  # let its job start
    assert shell.text().rstrip().endswith("range(0, 1000000000000000);"), "the query ended by itself"
    sent = time.monotonic()
    shell.send("\x03")
    shell.expect(r"Query cancelled\.", 60)
    shell.expect(PROMPT, 10)
    assert time.monotonic() - sent < 60
    shell.type_line("SELECT 42 AS answer;")
    assert "| 42     |" in shell.expect(PROMPT)


def test_ctrl_c_at_the_prompt_drops_the_unfinished_statement(shell):
    shell.type_line("SELECT 'an unfinished")  # an open string: without Ctrl-C the next line continues it
    shell.expect(CONTINUATION)
    # as a person would, press Ctrl-C once the prompt is up: CPython's readline misses a
    # signal that lands in the instant between drawing the prompt and waiting for a key
    shell.read_for(1)
    shell.send("\x03")
    shell.expect(PROMPT, 10)
    shell.type_line("SELECT 7 AS seven;")
    out = shell.expect(PROMPT)
    assert "| seven |" in out and "| 7     |" in out


def test_exit_ends_the_shell_and_keeps_the_history(shell):
    shell.type_line("exit;")
    assert shell.wait(60) == 0
    history = shell.history.read_text()
    assert "SELECT 1 AS a," in history and "SELECT 42 AS answer;" in history


# -e, -f, --conf, exit status, --version (in this process, on the test session)


@pytest.fixture
def shuffle_partitions(spark):
    """The shell applies --conf to the shared session; put the setting back afterwards."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    yield
    spark.conf.set("spark.sql.shuffle.partitions", before)


def test_e_runs_statements_with_conf_and_exits_0(spark, shuffle_partitions, capsys):
    status = main(["sql", "--conf", "spark.sql.shuffle.partitions=3", "--conf", "spark.sqlext.shell.test=on",
                   "-e", "SET spark.sql.shuffle.partitions; SET spark.sqlext.shell.test"])
    assert status == 0
    captured = capsys.readouterr()
    assert re.search(r"^\| spark\.sql\.shuffle\.partitions \| 3 +\|$", captured.out, re.M), captured.out
    assert re.search(r"^\| spark\.sqlext\.shell\.test +\| on +\|$", captured.out, re.M), captured.out
    assert captured.err.count("Time taken:") == 2


def test_e_stops_at_an_error_and_exits_1(spark, shuffle_partitions, capsys):
    status = main(["sql", "-S", "-e", "SELECT 1 AS first; SELECT * FROM no_such_table; SELECT 'never' AS reached"])
    assert status == 1
    captured = capsys.readouterr()
    assert "| first |" in captured.out and "never" not in captured.out
    assert captured.err.startswith("[TABLE_OR_VIEW_NOT_FOUND]")
    assert "Time taken" not in captured.err and "Traceback" not in captured.err


def test_f_runs_a_file_and_reports_errors_by_position(spark, shuffle_partitions, capsys, tmp_path):
    good = tmp_path / "good.sql"
    good.write_text("-- a recursion sqlext rewrites\n"
                    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 4)\n"
                    "SELECT sum(n) AS total FROM r;\n")
    assert main(["sql", "-f", str(good)]) == 0
    assert re.search(r"^\| 10 +\|$", capsys.readouterr().out, re.M)
    bad = tmp_path / "bad.sql"
    bad.write_text("SELECT 1;\n\n  SELECT * FROM CHANGELOG_FILTER(input => TABLE(x), key => 'id', emit => 'all');\n")
    assert main(["sql", "-f", str(bad)]) == 1
    # at the relation Spark cannot find (TABLE(x)), in the file's own line and column
    assert f"{bad}:3:49: [TABLE_OR_VIEW_NOT_FOUND]" in capsys.readouterr().err


def test_a_conf_that_is_not_key_value_is_refused(capsys):
    assert main(["sql", "--conf", "spark.sql.shuffle.partitions", "-e", "SELECT 1"]) == 2
    assert "is not KEY=VALUE" in capsys.readouterr().err


def test_version_is_the_installed_package_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out.strip() == f"sqlext {version('sqlext')}"


def test_statements_piped_into_the_shell_run_without_prompts(spark, shuffle_partitions, capsys, monkeypatch,
                                                               tmp_path):
    import io

    monkeypatch.setenv("SQLEXT_HISTORY", str(tmp_path / "history"))
    monkeypatch.setattr(sys, "stdin", io.StringIO("SELECT nope;\nSELECT 1 AS x;\nSELECT 'a;b'\n  AS y;\nquit;\n"
                                                  "SELECT 'after quit' AS z;\n"))
    assert main(["sql", "-S"]) == 1  # a statement failed (as spark-sql, a script's status says so)
    captured = capsys.readouterr()
    assert "sqlext>" not in captured.out
    assert "| x |" in captured.out and "| a;b |" in captured.out and "after quit" not in captured.out
    assert captured.err.startswith("[UNRESOLVED_COLUMN")  # reported, and the statements after it ran


def test_backslash_q_leaves_the_shell_as_in_psql(spark, shuffle_partitions, capsys, monkeypatch, tmp_path):
    import io

    monkeypatch.setenv("SQLEXT_HISTORY", str(tmp_path / "history"))
    monkeypatch.setattr(sys, "stdin", io.StringIO("SELECT 1 AS x;\n\\q\nSELECT 'after q' AS z;\n"))
    assert main(["sql", "-S"]) == 0
    out = capsys.readouterr().out
    assert "| x |" in out and "after q" not in out
    assert main(["sql", "-S", "-e", "SELECT 1 AS x; \\q"]) == 0


@pytest.mark.parametrize("output_format, expected", [
    ("csv", 'a,b,c\n1,,"x,y"\n'),
    ("tsv", "a\tb\tc\n1\tNULL\tx,y\n"),
])
def test_output_format_prints_csv_or_tsv_for_scripts(spark, shuffle_partitions, capsys, output_format, expected):
    status = main(["sql", "-S", "--output-format", output_format,
                   "-e", "CREATE OR REPLACE TEMP VIEW fmt AS SELECT 1 AS a; "
                         "SELECT a, CAST(NULL AS STRING) AS b, 'x,y' AS c FROM fmt"])
    assert status == 0
    assert capsys.readouterr().out == expected  # the data alone: no "OK" for the view, no row count


def test_init_file_and_database_run_before_the_statements(spark, shuffle_partitions, capsys, tmp_path):
    init = tmp_path / "init.sql"
    init.write_text("CREATE OR REPLACE TEMP VIEW init_view AS SELECT 41 AS n;\n")
    spark.sql("CREATE DATABASE IF NOT EXISTS first_hour_db")
    try:
        status = main(["sql", "-S", "--database", "first_hour_db", "-i", str(init), "--output-format", "tsv",
                       "-e", "SELECT current_database() AS db, n + 1 AS n FROM init_view"])
        assert status == 0
        assert capsys.readouterr().out == "db\tn\nfirst_hour_db\t42\n"
        assert main(["sql", "-S", "--database", "no_such_db", "-e", "SELECT 'never' AS reached"]) == 1
        captured = capsys.readouterr()
        assert "never" not in captured.out and captured.err.startswith("[SCHEMA_NOT_FOUND]")
    finally:
        spark.catalog.setCurrentDatabase("default")
        spark.sql("DROP DATABASE IF EXISTS first_hour_db")

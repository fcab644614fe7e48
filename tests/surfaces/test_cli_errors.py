"""No exception escapes a command as a traceback: every command (``sqlext sql`` with -e, -f
and piped input, ``run``, ``explain``, ``build``, ``stream``) reports any error as one
``[CLASS] message`` line and exits non-zero; piped statements run to the last one, also
without ``;``; output into a closed pipe ends quietly; Spark starts without noise.

Most tests run the command in this process on the test session. The two that start a real
``sqlext`` process (a JVM each) cover what only a process shows: the exit status behind a
pipe that closes, and what reaches the terminal while Spark starts.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from sqlext.cli import EXIT_OUTPUT_CLOSED, main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "sql_examples" / "fk_join.sql"
SQLEXT = Path(sys.executable).with_name("sqlext")
# what the JVM and Spark print on their own as a session starts, unless kept quiet
START_NOISE = ("Using incubator modules", "Setting default log level", "To adjust logging level",
               "NativeCodeLoader", "WARN", "Traceback")


def internal(spark):
    return ValueError("a bug in sqlext")


def jvm_gone(spark):
    from py4j.protocol import Py4JNetworkError

    return Py4JNetworkError("Answer from Java side is empty")


def java_error(spark):
    from py4j.protocol import Py4JJavaError

    return Py4JJavaError("An error occurred while calling o1.sql.\n",
                         spark._jvm.java.lang.IllegalStateException("the JVM refused"))


def spark_error(spark):
    from pyspark.errors import PySparkException

    try:
        spark.sql("SELECT no_such_column").collect()
    except PySparkException as error:
        return error
    raise AssertionError("Spark ran a statement it cannot analyse")


# the exception, and the class of the line that reports it
RAISED = {"internal": (internal, "INTERNAL_ERROR"), "jvm gone": (jvm_gone, "SPARK_UNAVAILABLE"),
          "java": (java_error, "SPARK_ERROR"), "spark": (spark_error, "UNRESOLVED_COLUMN")}


def command(name: str, tmp_path: Path, monkeypatch) -> list[str]:
    """The arguments of a command over one statement; piped input goes to standard input."""
    statement = tmp_path / "one.sql"
    statement.write_text("SELECT 1 AS one")
    if name == "run":
        return ["run", str(statement)]
    if name == "sql -e":
        return ["sql", "-S", "-e", "SELECT 1 AS one"]
    if name == "sql -f":
        return ["sql", "-S", "-f", str(statement)]
    if name == "sql piped":
        monkeypatch.setenv("SQLEXT_HISTORY", str(tmp_path / "history"))
        monkeypatch.setattr(sys, "stdin", io.StringIO("SELECT 1 AS one;\n"))
        return ["sql", "-S"]
    if name == "explain":
        return ["explain", str(statement)]
    if name == "build":
        (tmp_path / "models").mkdir()
        (tmp_path / "models" / "one.sql").write_text("SELECT 1 AS one")
        return ["build", str(tmp_path / "models"), "--warehouse", str(tmp_path / "warehouse")]
    if name == "stream":
        return ["stream", str(statement), "--checkpoint", str(tmp_path / "cp"), "--output", str(tmp_path / "out")]
    raise AssertionError(name)


def raise_in(name: str, error: BaseException, monkeypatch) -> None:
    """Make the command meet ``error`` where it would start its work."""
    def fail(*args, **kwargs):
        raise error

    if name == "stream":
        monkeypatch.setattr("sqlext.cli.stream.run_available_now", fail)
    else:  # every statement of the other commands is rewritten first
        monkeypatch.setattr("sqlext.rewrites.pipeline.rewrite_statement", fail)


COMMANDS = ["run", "sql -e", "sql -f", "sql piped", "explain", "build", "stream"]


@pytest.mark.parametrize("kind", list(RAISED))
@pytest.mark.parametrize("name", COMMANDS)
def test_any_exception_is_one_classed_line_and_a_non_zero_exit(spark, tmp_path, monkeypatch, capsys, name, kind):
    make, error_class = RAISED[kind]
    argv = command(name, tmp_path, monkeypatch)
    raise_in(name, make(spark), monkeypatch)
    monkeypatch.delenv("SQLEXT_DEBUG", raising=False)
    assert main(argv) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert f"[{error_class}" in lines[0] and "Traceback" not in err
    if error_class == "INTERNAL_ERROR":  # says it is one, and how to report it
        assert "ValueError: a bug in sqlext" in lines[0] and "SQLEXT_DEBUG=1" in lines[0]
    if error_class == "SPARK_ERROR":
        assert "IllegalStateException: the JVM refused" in lines[0]


def test_sqlext_debug_adds_the_traceback(spark, tmp_path, monkeypatch, capsys):
    argv = command("run", tmp_path, monkeypatch)
    raise_in("run", ValueError("a bug in sqlext"), monkeypatch)
    monkeypatch.setenv("SQLEXT_DEBUG", "1")
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "[INTERNAL_ERROR] sqlext run" in err


def test_a_statement_spark_rejects_at_run_time_is_one_line(spark, tmp_path, capsys):
    statement = tmp_path / "fails.sql"
    statement.write_text("SELECT 1 AS fine;\nSELECT raise_error('stop here') AS never;\n")
    assert main(["run", str(statement)]) == 1
    assert main(["sql", "-S", "-f", str(statement)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith(f"{statement}:2:1: [USER_RAISED_EXCEPTION] stop here") for line in err)


def test_build_names_a_folder_that_is_not_there(tmp_path, capsys):
    assert main(["build", str(tmp_path / "nowhere")]) == 1
    err = capsys.readouterr().err
    assert "[PATH_NOT_FOUND] sqlext build: there is no folder" in err and str(tmp_path / "nowhere") in err
    (tmp_path / "empty").mkdir()
    assert main(["build", str(tmp_path / "empty")]) == 1
    assert "[NO_MODELS]" in capsys.readouterr().err


def test_run_names_a_file_that_is_not_there(tmp_path, capsys):
    assert main(["run", str(tmp_path / "missing.sql")]) == 1
    assert "[PATH_NOT_FOUND] sqlext run: there is no file" in capsys.readouterr().err


# sqlext sql on piped input


def piped(monkeypatch, tmp_path, text: str) -> int:
    monkeypatch.setenv("SQLEXT_HISTORY", str(tmp_path / "history"))
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    return main(["sql", "-S"])


def test_piped_input_runs_its_last_statement_without_a_semicolon(spark, monkeypatch, tmp_path, capsys):
    assert piped(monkeypatch, tmp_path, "SELECT 1 AS first;\nSELECT 2\n  AS last\n") == 0
    out = capsys.readouterr().out
    assert "| first |" in out and "| last |" in out


def test_piped_input_with_an_error_exits_non_zero(spark, monkeypatch, tmp_path, capsys):
    assert piped(monkeypatch, tmp_path, "SELECT nope;\nSELECT 1 AS after;\n") == 1
    captured = capsys.readouterr()
    assert "| after |" in captured.out and captured.err.startswith("[UNRESOLVED_COLUMN")


def test_piped_input_ending_inside_a_string_is_an_error(spark, monkeypatch, tmp_path, capsys):
    assert piped(monkeypatch, tmp_path, "SELECT 1 AS first;\nSELECT 'it''s; open AS never\n") == 1
    captured = capsys.readouterr()
    assert "| first |" in captured.out and "never" not in captured.out
    assert captured.err.startswith("[UNCLOSED_QUOTE] sqlext sql: the string that starts at line 2, column 8")


def test_e_and_f_ending_inside_a_string_is_an_error(spark, tmp_path, capsys):
    assert main(["sql", "-S", "-e", "SELECT 1 AS first; SELECT `open FROM t"]) == 1
    captured = capsys.readouterr()
    assert "| first |" in captured.out and captured.err.startswith("[UNCLOSED_QUOTE] sqlext sql: the name")


def test_output_into_a_closed_pipe_ends_quietly(spark, monkeypatch, capsys):
    class Closed(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())
    assert main(["run", str(EXAMPLE)]) == EXIT_OUTPUT_CLOSED
    assert capsys.readouterr().err == ""


# real processes


def environment(spark_child_env: dict, tmp_path: Path) -> dict:
    return dict(spark_child_env, SQLEXT_HISTORY=str(tmp_path / "history"))


def test_a_closed_pipe_and_spark_starting_print_nothing(spark_child_env, tmp_path):
    """``sqlext run sql_examples/fk_join.sql | head -2``: the reader goes away after two lines.
    The process ends quietly with SIGPIPE's status, and nothing reached standard error at all
    (nor while Spark started, which happens before the first line)."""
    process = subprocess.Popen([str(SQLEXT), "run", str(EXAMPLE)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               cwd=ROOT, env=environment(spark_child_env, tmp_path))
    head = [process.stdout.readline() for _ in range(2)]
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=600) == EXIT_OUTPUT_CLOSED
    assert head[0].startswith(b"-- ") and err == ""


def test_piped_sql_in_a_real_shell_exits_non_zero_and_runs_the_last_statement(spark_child_env, tmp_path):
    """As a user pipes a script: an error in it makes the exit status 1 (as spark-sql's), the
    last statement runs without ';', and standard error holds the error line alone."""
    done = subprocess.run([str(SQLEXT), "sql", "-S"], input="SELECT nope;\nSELECT 1 AS after;\nSELECT 2 AS last",
                          capture_output=True, text=True, cwd=tmp_path, env=environment(spark_child_env, tmp_path), timeout=600)
    assert done.returncode == 1
    assert "| after |" in done.stdout and "| last |" in done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("[UNRESOLVED_COLUMN"), done.stderr
    assert not any(noise in done.stderr for noise in START_NOISE)

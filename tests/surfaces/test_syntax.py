"""Syntax errors in a file: ``sqlext run`` reads the whole file before running any of it,
``sqlext explain --no-spark`` exits non-zero on one, every position is in the file's own lines
and columns, and an unclosed quote in a file is ``[UNCLOSED_QUOTE]`` as it is in piped input.

The checks that need no Spark run before Spark starts: the tests without the ``spark`` fixture
would fail if the command started it."""

from __future__ import annotations

import pytest

from sqlext.cli import main
from sqlext.statements import split_statements
from sqlext.syntax import check

# the repro: a statement that works, then one whose select list ends with a comma
TRAILING_COMMA = "CREATE TABLE before_error USING parquet AS SELECT 1 AS a;\nSELECT a,\nFROM before_error;\n"


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_run_parses_the_whole_file_before_running_any_of_it(spark, tmp_path, capsys):
    query = tmp_path / "q.sql"
    for text, where, error in (
            (TRAILING_COMMA, "2:9", "[SYNTAX_ERROR]"),  # Spark's parser reads FROM as a column
            (TRAILING_COMMA.replace("SELECT a,", "SELEC a"), "2:1", "[PARSE_SYNTAX_ERROR]")):
        query.write_text(text)
        assert main(["run", str(query)]) == 1
        err = lines(capsys.readouterr().err)
        assert len(err) == 1 and err[0].startswith(f"{query}:{where}: {error}")
        assert not spark.catalog.tableExists("before_error")  # the first statement never ran


def test_explain_without_spark_exits_non_zero_on_a_syntax_error(tmp_path, capsys):
    query = tmp_path / "q.sql"
    for text, where in ((TRAILING_COMMA, "2:9"), ("SELECT 1;\n\n  SELECT 1 FROM;\n", "3:12")):
        query.write_text(text)
        assert main(["explain", "--no-spark", str(query)]) == 1
        err = lines(capsys.readouterr().err)
        assert len(err) == 1 and err[0].startswith(f"{query}:{where}: [SYNTAX_ERROR] sqlext explain:")


@pytest.mark.parametrize("command", [["run"], ["explain", "--no-spark"], ["stream", "--checkpoint", "cp",
                                                                          "--output", "out"]])
def test_an_unclosed_quote_in_a_file_is_unclosed_quote(tmp_path, capsys, command):
    query = tmp_path / "q.sql"
    query.write_text("SELECT 1;\nSELECT 'it''s;\nSELECT 2;\n")
    assert main([command[0], str(query), *command[1:]]) == 1
    err = lines(capsys.readouterr().err)
    assert len(err) == 1 and err[0].startswith(f"{query}:2:8: [UNCLOSED_QUOTE]")


def test_a_spark_error_is_placed_in_the_files_lines_and_columns(spark, tmp_path, capsys):
    query = tmp_path / "q.sql"
    query.write_text("SELECT 1;\n  SELECT 1 AS a,\n    nope FROM (SELECT 1 AS b);\n")
    assert main(["run", str(query)]) == 1
    err = lines(capsys.readouterr().err)
    # Spark says "line 2 pos 4" of the statement, which starts at line 2, column 3 of the file
    assert len(err) == 1 and err[0].startswith(f"{query}:3:5: [UNRESOLVED_COLUMN")
    assert "line 2 pos" not in err[0]
    assert main(["sql", "-S", "-f", str(query)]) == 1
    assert lines(capsys.readouterr().err)[-1].startswith(f"{query}:3:5: [UNRESOLVED_COLUMN")


def test_sqlext_syntax_spark_refuses_is_left_to_the_rewrite(spark):
    keyed = ("WITH RECURSIVE d(node, dist) USING KEY (node) AS (SELECT 1, 0 UNION SELECT e.dst, d.dist + 1 "
             "FROM d JOIN edges AS e ON d.node = e.src) SELECT * FROM d")
    assert check(split_statements(keyed), "sqlext run", spark) is None
    assert check(split_statements("SELEC 1"), "sqlext run", spark) is not None

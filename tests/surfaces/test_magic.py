"""The notebook magic through a real IPython shell: %load_ext sqlext, %%sqlext runs a cell
(rewritten) and shows a table, %sqlext explain shows the rewrite, errors are one line."""

import pytest

IPython = pytest.importorskip("IPython", reason="IPython is a dev dependency")

CELL = """
CREATE OR REPLACE TEMP VIEW magic_changes AS
SELECT * FROM VALUES (1, 10, 'insert', 1L), (1, 10, 'update_preimage', 2L),
                     (1, -5, 'update_postimage', 2L), (2, 7, 'insert', 2L)
AS magic_changes(id, v, _change_type, _commit_version);

SELECT * FROM CHANGELOG_FILTER(input => TABLE(magic_changes), key => 'id', predicate => 'v > 0')
ORDER BY _commit_version, id
"""


@pytest.fixture(scope="module")
def shell(spark):
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.user_ns["spark"] = spark
    ip.run_line_magic("load_ext", "sqlext")
    yield ip
    InteractiveShell.clear_instance()


def test_cell_magic_runs_the_rewritten_cell_and_shows_a_table(shell, spark):
    result = shell.run_cell_magic("sqlext", "", CELL)
    assert result.columns == ["id", "v", "_change_type", "_commit_version"]
    assert result.rows == [(1, 10, "insert", 1), (1, 10, "delete", 2), (2, 7, "insert", 2)]
    text = repr(result)
    assert "| id | v  | _change_type | _commit_version |" in text and "(3 rows)" in text
    assert "<td>delete</td>" in result._repr_html_()
    assert shell.user_ns["_sqlext"].count() == 3  # the DataFrame, for further work


def test_limit_option(shell):
    result = shell.run_cell_magic("sqlext", "--limit 1", "SELECT * FROM range(5)")
    assert result.rows == [(0,)] and result.truncated


def test_explain_shows_the_rewrite(shell, capsys):
    shell.run_cell_magic("sqlext", "", CELL.split(";")[0])
    shell.run_line_magic(
        "sqlext", "explain SELECT * FROM CHANGELOG_FILTER(input => TABLE(magic_changes), key => 'id', predicate => 'v > 0')")
    out = capsys.readouterr().out
    assert "-- before" in out and "-- after" in out and "LAG(" in out
    assert "fired  changelog_filter_to_sql" in out


def test_errors_are_one_line_with_position_and_class(shell, capsys):
    result = shell.run_cell_magic(
        "sqlext", "", "SELECT 1;\n\nSELECT * FROM CHANGELOG_FILTER(input => TABLE(magic_changes), key => 'id', predicate => 'v >')")
    assert result is None
    err = capsys.readouterr().err
    assert "cell:3:1: [INVALID_SQL_EXPRESSION]" in err
    assert "Traceback" not in err

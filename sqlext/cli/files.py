"""The SQL files the commands read (``sqlext run``, ``explain``, ``stream``): read whole, checked
before Spark starts, and an error of a statement reported at its place in its file."""

from __future__ import annotations

import sys
from pathlib import Path

from sqlext.errors import SqlextError
from sqlext.statements import Statement, split_statements
from sqlext.syntax import check, located, unclosed


def read(path: Path, function: str = "sqlext") -> str:
    """The text of a SQL file; a file that is not there is ``[PATH_NOT_FOUND]``."""
    try:
        return path.read_text()
    except FileNotFoundError:
        raise SqlextError("PATH_NOT_FOUND", function=function, what="file", path=str(path),
                          fix="Check the path, or run the command in the folder the path starts from.") from None
    except OSError as error:
        raise SystemExit(f"{function}: cannot read {path}: {error.strerror}") from None


def parsed(files: list[Path], function: str) -> list[tuple[Path, list[Statement]]] | None:
    """Each file's statements, after the checks that need no Spark: the file is there, no
    string or quoted name is left open, no select list ends with a comma before FROM. None
    (after reporting the first problem at its place in its file) if one fails."""
    scripts = []
    for path in files:
        source = read(path, function)
        problem = unclosed(source, function)
        statements = split_statements(source)
        problem = problem or check(statements, function, parse=False)
        if problem is not None:
            print(problem.report(path), file=sys.stderr)
            return None
        scripts.append((path, statements))
    return scripts


def report(path: Path, statement: Statement, message: str) -> None:
    """An error of a statement, at its place in the file (Spark's position in the statement,
    where it gives one, moved to the file's lines and columns)."""
    print(located(statement, message).report(path), file=sys.stderr)

"""The IPython magic: ``%load_ext sqlext``, then

    %%sqlext                 rewrite and run the cell's statements; show the last result as a table
    %%sqlext --limit 50      show at most 50 rows (default 200)
    %%sqlext explain         the cell's statements before and after rewriting, and why
    %sqlext explain SELECT ...   the same for one line

The magic runs on the notebook's session: the variable ``spark`` if the notebook has one (a
classic or a Spark Connect session), else the active session, else the embedded local one.
The result object shows as a text or HTML table; its ``frame`` is the DataFrame, and the
notebook variable ``_sqlext`` holds the last one. A failing statement prints
``cell:LINE:COLUMN: [ERROR_CLASS] message`` (no JVM stack trace) and the cell stops there.
"""

from __future__ import annotations

import html
import re
import sys
from dataclasses import dataclass
from typing import Any

from sqlext.api import explain
from sqlext.display import format_table, format_value
from sqlext.errors import counted
from sqlext.language.dialect import parse_one, to_sql
from sqlext.runner import run_and_fetch
from sqlext.session import ensure_installed, local_session
from sqlext.statements import split_statements


@dataclass
class Result:
    """A result as a notebook shows it: a text table (``repr``) or an HTML one."""

    frame: Any
    columns: list[str]
    rows: list[tuple]
    truncated: bool

    def __repr__(self) -> str:
        return format_table(self.columns, self.rows, truncated=self.truncated)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(format_value(v))}</td>" for v in row) + "</tr>"
            for row in self.rows)
        note = " (more not shown)" if self.truncated else ""
        count = f"{counted(len(self.rows), 'row')}{note}"
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table><p>{count}</p>"


def run_cell(spark, cell: str, limit: int = 200) -> Result | None:
    """Rewrite and run every statement of ``cell``; the last one's result (None if it has no
    columns). Errors are printed as ``cell:LINE:COLUMN: [CLASS] message``; then None."""
    ensure_installed(spark)
    result = None
    for statement in split_statements(cell):
        outcome = run_and_fetch(spark, statement.text, limit)
        if outcome.error is not None:
            _report(statement, outcome.error)
            return None
        result = Result(outcome.frame, outcome.columns, outcome.rows, outcome.truncated) if outcome.columns else None
    return result


def explain_text(spark, text: str) -> str:
    """Each statement of ``text`` before and after rewriting, what every rule did, and the path
    each recursion will take."""
    parts = []
    for result in explain(text, spark=spark):
        after = to_sql(parse_one(result.sql), pretty=True) if result.changed else "(unchanged)"
        notes = [f"   {line}" for line in result.notes.lines(verbose=True)] or ["   no rule applies"]
        paths = ["-- recursion", *[f"   {line}" for line in result.paths]] if result.paths else []
        parts.append("\n".join(["-- before", result.original, "-- after", after, "-- rules", *notes, *paths]))
    return "\n\n".join(parts)


def _report(statement, message: str) -> None:
    print(f"cell:{statement.line}:{statement.column}: {message}", file=sys.stderr)


def session_for(namespace: dict):
    """The notebook's ``spark`` variable, else the active session, else the local one."""
    from pyspark.sql import SparkSession

    spark = namespace.get("spark")
    if spark is not None and hasattr(spark, "sql") and hasattr(spark, "conf"):
        return spark
    active = SparkSession.getActiveSession()
    if active is not None:
        return active

    return local_session()


def parse_options(line: str) -> tuple[str, int, str]:
    """``[explain] [--limit N] [SQL...]`` -> (mode, limit, the SQL exactly as written).

    >>> parse_options("explain --limit 5 SELECT 'a  b'")
    ('explain', 5, "SELECT 'a  b'")
    >>> parse_options("")
    ('run', 200, '')
    """
    mode, limit, rest = "run", 200, line.strip()
    if re.match(r"explain\b", rest):
        mode, rest = "explain", rest[len("explain"):].lstrip()
    while True:
        option = re.match(r"--limit\s+(\d+)\s*", rest)
        if not option:
            break
        limit, rest = int(option.group(1)), rest[option.end():]
    return mode, limit, rest


def _magics():
    from IPython.core.magic import Magics, line_cell_magic, magics_class

    @magics_class
    class SqlextMagics(Magics):
        @line_cell_magic
        def sqlext(self, line: str, cell: str | None = None):
            mode, limit, rest = parse_options(line)
            text = cell if cell is not None else rest
            spark = session_for(self.shell.user_ns)
            if mode == "explain":
                print(explain_text(spark, text))
                return None
            result = run_cell(spark, text, limit)
            if result is not None:
                self.shell.user_ns["_sqlext"] = result.frame
            return result

    return SqlextMagics


def load_ipython_extension(ipython) -> None:
    ipython.register_magics(_magics())

"""The README as a new user follows it: every example in sql_examples/ is indexed in the
gallery, every `sqlext run`/`sqlext build` path it names exists (their output is checked
by test_examples_golden.py and test_models.py), and every code block marked
`<!-- runnable -->` runs as pasted (and, for SQL, returns the rows the README shows after it)."""

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_every_example_is_in_the_gallery():
    gallery = README.split("## Examples gallery", 1)[1].split("\n## ", 1)[0]
    for example in sorted((ROOT / "sql_examples").glob("*.sql")):
        assert f"sqlext run sql_examples/{example.name}" in gallery, example.name


def test_every_path_the_readme_runs_exists():
    commands = re.findall(r"sqlext (?:run|build|explain) ((?:[\w./-]+\.sql|[\w./-]+/?)(?: [\w./-]+\.sql)*)", README)
    paths = [p for c in commands for p in c.split() if "/" in p]
    assert paths
    for path in paths:
        assert (ROOT / path).exists(), path


# Every code block marked runnable runs as pasted, from the clone's root folder.

MARKER = "<!-- runnable -->"
# python and sql blocks that stay unmarked, each named by a text only it holds, and why
UNMARKED = {
    "dbtRunner": "needs dbt and a dbt project",
    "sc://spark-host": "needs a Spark Connect server at that address",
    "HiveThriftServer2": "starts a JDBC server that keeps running; tests/test_jdbc.py runs it and a JDBC client",
    "STREAM(": ("an incremental run, over folders of change files and a checkpoint; tests/test_streaming.py "
                "runs the Python example as pasted, tests/test_dbt.py builds the dbt model over STREAM(...)"),
}


@dataclass
class Block:
    language: str
    text: str
    line: int  # 1-based line of the block's first line of code
    marked: bool
    shown: list[str] | None  # the table rows of an output block right after it, if any


def blocks() -> list[Block]:
    lines = README.splitlines()
    found, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        shown = None
        if end + 1 < len(lines) and lines[end + 1].strip() == "```":
            close = next(j for j in range(end + 2, len(lines)) if lines[j].startswith("```"))
            shown = [row for row in lines[end + 2:close] if row.startswith("|")]
        found.append(Block(lines[i][3:].strip(), "\n".join(lines[i + 1:end]), i + 2,
                           i > 0 and lines[i - 1].strip() == MARKER, shown))
        i = end + 1 if shown is None else close + 1
    return found


RUNNABLE = [b for b in blocks() if b.marked]


def test_every_python_and_sql_block_is_runnable_or_says_why_not():
    assert MARKER in README
    unmarked = [b for b in blocks() if b.language in ("python", "sql") and not b.marked]
    reasons = [next((key for key in UNMARKED if key in b.text), None) for b in unmarked]
    assert [b.line for b, reason in zip(unmarked, reasons) if reason is None] == []
    assert all(b.language in ("python", "sql", "bash") for b in RUNNABLE)
    assert len([b for b in RUNNABLE if b.shown]) == 2  # both shown results are compared


@pytest.fixture
def readme_run(spark, monkeypatch):
    """Run in the clone's root; afterwards drop the temporary views a block made and put back
    the settings the embedded session's builder changes (a block's local_session() returns
    the test session)."""
    monkeypatch.chdir(ROOT)
    views = {t.name for t in spark.catalog.listTables() if t.isTemporary}
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    yield
    for table in spark.catalog.listTables():
        if table.isTemporary and table.name not in views:
            spark.catalog.dropTempView(table.name)
    spark.conf.set("spark.sql.shuffle.partitions", partitions)


@pytest.mark.parametrize("block", RUNNABLE, ids=[f"{b.language}-line{b.line}" for b in RUNNABLE])
def test_runnable_block(block, spark, readme_run, capsys):
    if block.language == "sql":
        _run_sql(spark, block)
    elif block.language == "python":
        code = compile(block.text, f"README.md:{block.line}", "exec")
        exec(code, {"__name__": "__readme__"})  # noqa: S102 - the README's own code
    else:
        _run_sqlext_commands(block)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "\tat org.apache" not in captured.err


def _run_sql(spark, block: Block) -> None:
    from sqlext.display import format_value
    from sqlext.runner import run_statement
    from sqlext.statements import split_statements

    statements = split_statements(block.text)
    assert statements
    for statement in statements:
        frame = run_statement(spark, statement.text)
    rows = frame.collect()  # the last statement's rows (a view's definition runs when read)
    assert rows, f"README.md:{block.line}: the last statement returns no rows"
    if block.shown:
        header, *shown = [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in block.shown]
        assert header == frame.columns
        assert [[format_value(v) for v in row] for row in rows] == shown


def _run_sqlext_commands(block: Block) -> None:
    from sqlext.cli import main

    for line in block.text.replace("\\\n", " ").splitlines():
        if not line.strip():
            continue
        argv = shlex.split(line, comments=True)
        assert argv[0] in ("sqlext", ".venv/bin/sqlext"), f"README.md:{block.line}: {line}"
        assert main(argv[1:]) == 0, line

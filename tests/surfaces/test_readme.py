"""The README and the docs as a new user follows them: the README within its length budget,
every example in sql_examples/ in the README's gallery, every path a `sqlext run`/`sqlext build`
line names exists, every page of docs/ is in the site's navigation, and every code block
marked `<!-- runnable -->` runs as pasted:

- SQL blocks through sqlext on the test session; an output block right after one (a bare
  fence holding `| a | b |` rows) must be exactly the last statement's rows;
- Python blocks in this process, on the same session; an output block after one must appear,
  line by line and in order, in what the block prints;
- shell blocks in a real `bash`, in a copy of the clone, after exactly the README's quick
  start: its setup block (`<!-- runnable: once -->`) runs verbatim once, and every shell
  session (one per page) starts with the quick start's other commands, so `sqlext` is found
  only the way the quick start says. An output block is checked as for Python.

How the quick start runs without reinstalling everything is in docs/contributing.md.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
MARKER = "<!-- runnable -->"
ONCE = "<!-- runnable: once -->"  # the quick start's setup: run once per test run
QUICK_START = ("<!-- --8<-- [start:quick-start] -->", "<!-- --8<-- [end:quick-start] -->")

# Blocks that stay unmarked, each named by a text only it holds, and why. Synopses and other
# text that is not meant to run are fenced as ```text.
UNMARKED = {
    "dbtRunner": "needs dbt and a dbt project",
    "sc://spark-host": "needs a Spark Connect server at that address",
    "hive://me:TOKEN": "needs sqlext serve --jdbc-port running; tests/surfaces/test_hiveserver.py runs PyHive's dialect",
    "STREAM(edges)": "a shape, over a stream the page does not build; tests/recursion/test_streaming_recursion.py runs it",
    "STREAM(edges, format": "a shape, over a stream the page does not build; tests/recursion/test_streaming_recursion.py runs it",
    "STREAM(parents)": "a shape, over a stream the page does not build; tests/recursion/test_streaming_recursion.py runs it",
    "source_format={": "a format per source, over folders the page does not build; tests/engine/test_stream_sources.py "
                       "runs it",
    "STREAM(orders)": "a shape, over streams the page does not build; tests/fk_join/test_streaming_fk_join.py runs it",
    "STREAM(clicks)": "a shape, over a stream the page does not build; tests/self_join/test_streaming_self_join.py runs it",
    ".venv/bin/pytest": "the test command itself (CI runs it)",
    '.[dbt]"': "installs the dbt extra, which the quick start's dev extra already holds",
    "--8<--": "includes a file that other tests run (sql_examples/ by test_examples_golden.py)",
    "timestampNanosTypes": "reads a file the page does not write; tests/engine/test_stream_sources.py reads one so",
    "--output-format csv": "writes a file in the working folder; tests/surfaces/test_shell.py runs --output-format",
}


@dataclass
class Block:
    page: Path
    language: str
    text: str
    line: int  # 1-based line of the block's first line of code
    marker: str | None  # MARKER, ONCE or None
    shown: list[str] | None  # the lines of an output block right after it, if any

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        shown, after = None, end + 1
        if end + 1 < len(lines) and lines[end + 1].strip() == "```":
            close = next(j for j in range(end + 2, len(lines)) if lines[j].startswith("```"))
            shown, after = lines[end + 2:close], close + 1
        before = lines[i - 1].strip() if i > 0 else ""
        found.append(Block(page, lines[i][3:].strip(), "\n".join(lines[i + 1:end]), i + 2,
                           before if before in (MARKER, ONCE) else None, shown))
        i = after
    return found


ALL = [b for page in PAGES for b in blocks(page)]
IN_PROCESS = [b for b in ALL if b.marker == MARKER and b.language in ("sql", "python")]
SHELL = [b for b in ALL if b.marker == MARKER and b.language == "bash"]


def _quick_start_lines() -> tuple[int, int]:
    lines = README.read_text().splitlines()
    return lines.index(QUICK_START[0]) + 1, lines.index(QUICK_START[1]) + 1


def _quick_start() -> tuple[list[Block], list[Block]]:
    """The setup blocks (run once) and the blocks every shell session starts with."""
    first, last = _quick_start_lines()
    inside = [b for b in ALL if b.page == README and first < b.line < last]
    return [b for b in inside if b.marker == ONCE], [b for b in inside if b.marker == MARKER]


SETUP, SESSION_START = _quick_start()


# What the pages say and link to.

def test_every_example_is_in_the_gallery():
    """The README's gallery names every example; the Examples page says how to run each."""
    gallery = README.read_text().split("## Examples gallery", 1)[1].split("\n## ", 1)[0]
    page = (ROOT / "docs" / "examples.md").read_text()
    for example in sorted((ROOT / "sql_examples").glob("*.sql")):
        assert f"`{example.name}`" in gallery, example.name
        assert f"sqlext run sql_examples/{example.name}" in page, example.name
    assert "sql_examples/models" in gallery and "sqlext build sql_examples/models" in page
    assert "delta_accounts.py" in gallery and "python sql_examples/delta_accounts.py" in page


# the README's length, at most: it is the guide; detail goes to the pages of docs/
README_LINES = 300


def test_the_readme_stays_within_its_budget():
    lines = len(README.read_text().splitlines())
    assert lines <= README_LINES, f"README.md has {lines} lines; move detail to docs/*.md (budget {README_LINES})"


def test_every_path_the_pages_run_exists():
    commands = [c for page in PAGES for c in re.findall(
        r"sqlext (?:run|build|explain(?: --no-spark)?) ((?:[\w./-]+\.sql|[\w./-]+/?)(?: [\w./-]+\.sql)*)",
        page.read_text())]
    paths = [p for c in commands for p in c.split() if "/" in p]
    assert len(paths) > 10
    for path in paths:
        assert (ROOT / path).exists(), path


def test_every_docs_page_is_in_the_site_navigation_and_every_link_resolves():
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def targets(nav):
        for item in nav:
            for value in (item.values() if isinstance(item, dict) else [item]):
                yield from (targets(value) if isinstance(value, list) else [value])

    nav = list(targets(config["nav"]))
    assert sorted(nav) == sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    for page in PAGES:
        for link in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / link).resolve().is_file(), (page.name, link)


def test_the_readme_test_command_is_what_ci_runs():
    first, last = _quick_start_lines()
    quick_start = "\n".join(README.read_text().splitlines()[first:last])
    assert "```bash\n.venv/bin/pytest\n```" in quick_start
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert ci[-1] == ".venv/bin/pytest"
    # CI sets up as the quick start does (quietly)
    assert "python3 -m venv .venv" in ci and '.venv/bin/pip install -q -e ".[dev,delta]"' in ci
    assert 'python3 -m venv .venv && .venv/bin/pip install -e ".[dev,delta]"' in SETUP[0].text


def test_every_code_block_is_runnable_or_says_why_not():
    unmarked = [b for b in ALL if b.language in ("python", "sql", "bash") and b.marker is None]
    reasons = {b.name: next((why for key, why in UNMARKED.items() if key in b.text), None) for b in unmarked}
    assert [name for name, why in reasons.items() if why is None] == []
    assert all(b.language in ("sql", "python", "bash") for b in ALL if b.marker)
    assert len(SETUP) == 1 and len(SESSION_START) == 1
    assert "source .venv/bin/activate" in SESSION_START[0].text
    assert {b.page for b in IN_PROCESS} >= {README, ROOT / "docs" / "python.md"}
    assert len([b for b in IN_PROCESS if b.shown]) >= 10  # their shown results are compared


# Python and SQL blocks, in this process.

@pytest.fixture
def page_run(spark, monkeypatch):
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


@pytest.mark.spark
@pytest.mark.parametrize("block", IN_PROCESS, ids=[f"{b.name}-{b.language}" for b in IN_PROCESS])
def test_runnable_block(block, spark, page_run, capsys):
    if block.language == "sql":
        _run_sql(spark, block)
    else:
        code = compile(block.text, block.name, "exec")
        exec(code, {"__name__": "__docs__"})  # noqa: S102 - the page's own code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "\tat org.apache" not in captured.err
    if block.language == "python" and block.shown:
        _assert_shown(block, captured.out)


def _run_sql(spark, block: Block) -> None:
    from sqlext.display import format_value
    from sqlext.runner import run_statement
    from sqlext.statements import split_statements

    statements = split_statements(block.text)
    assert statements
    for statement in statements:
        frame = run_statement(spark, statement.text)
    rows = frame.collect()  # the last statement's rows (a view's definition runs when read)
    assert rows, f"{block.name}: the last statement returns no rows"
    if block.shown:
        header, *shown = [[cell.strip() for cell in row.strip().strip("|").split("|")]
                          for row in block.shown if row.startswith("|")]
        assert header == frame.columns
        assert [[format_value(v) for v in row] for row in rows] == shown


def _assert_shown(block: Block, output: str) -> None:
    """Every line of the block's output block appears in the output, in order."""
    lines = iter(line.rstrip() for line in output.splitlines())
    for expected in block.shown:
        assert any(line == expected.rstrip() for line in lines), (block.name, expected, output)


# Shell blocks, in a real shell, in a copy of the clone.

def _user_environment() -> dict[str, str]:
    """This environment as a user's shell has it: without the suite's venv on PATH and
    without what the suite sets for itself."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SQLEXT_STRICT", "PYTHONPATH")
           and not k.startswith("PYTEST_")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and not (Path(p).parent / "pyvenv.cfg").exists())
    return env


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", "set -eo pipefail\n" + script], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=1800, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A copy of the clone's files after the quick start's setup, run verbatim.

    The copy gets a .venv of its own whose site-packages names the suite venv's in a .pth
    file: the quick start's `python3 -m venv .venv` completes it, and its
    `pip install -e ".[dev,delta]"` finds every dependency installed and installs sqlext from the
    copy into the copy's venv, leaving the suite's venv as it was."""
    env = _user_environment()
    copy = tmp_path_factory.mktemp("clone")
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, text=True,
                            capture_output=True, check=True).stdout.splitlines()
    for name in listed:
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    python3 = shutil.which("python3", path=env["PATH"])
    assert python3, "the quick start needs python3 on PATH"
    version = subprocess.run([python3, "-c", "import sys; print(sys.version_info[:2])"], text=True,
                             capture_output=True, check=True).stdout.strip()
    assert version == str(sys.version_info[:2]), f"python3 on PATH is {version}; the suite runs {sys.version_info[:2]}"
    subprocess.run([python3, "-m", "venv", str(copy / ".venv")], check=True, env=env)
    venv_paths = sysconfig.get_paths(vars={"base": str(copy / ".venv"), "platbase": str(copy / ".venv")})
    for key in ("purelib", "platlib"):
        Path(venv_paths[key], "_sqlext_suite_venv.pth").write_text(
            "\n".join(sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})) + "\n")
    result = _bash("\n".join(b.text for b in SETUP), copy, env)
    assert result.returncode == 0, f"the quick start's setup failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr
    assert "| id | owner | balance | _change_type" in result.stdout  # the main example's first result
    return copy


SHELL_PAGES = sorted({b.page for b in SHELL}, key=PAGES.index)


@pytest.mark.spark
@pytest.mark.parametrize("page", SHELL_PAGES, ids=[str(p.relative_to(ROOT)) for p in SHELL_PAGES])
def test_shell_blocks(page, clone):
    session = [b for b in SESSION_START if b.page != page] + [b for b in SHELL if b.page == page]
    boundary = "@@sqlext-docs-block@@"
    script = "\n".join(f"echo {boundary}{i}\n{b.text}" for i, b in enumerate(session)) + f"\necho {boundary}end"
    result = _bash(script, clone, _user_environment())
    parts = re.split(rf"^{boundary}(\d+|end)$", result.stdout, flags=re.MULTILINE)
    ran = dict(zip(parts[1::2], parts[2::2]))
    last = session[int(parts[-2])].name if len(parts) > 1 and parts[-2] != "end" else page.name
    assert result.returncode == 0 and "end" in ran, (
        f"{last} failed (exit {result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    assert "Traceback" not in result.stderr and "\tat org.apache" not in result.stderr, result.stderr[-3000:]
    for i, block in enumerate(session):
        if block.shown:
            _assert_shown(block, ran[str(i)])

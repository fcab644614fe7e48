"""Every runnable example in sql_examples/ against its golden output in tests/golden/.

Golden files are written by the code, never by hand (the variable that regenerates the
fixture files in tests/fixtures/ too):

    SQLEXT_REGENERATE_FIXTURES=1 pytest tests/test_examples_golden.py
"""

from pathlib import Path

import pytest

from fixture_files import REGENERATE
from sqlext import run_statement
from sqlext.display import format_value
from sqlext.statements import split_statements

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "sql_examples").glob("*.sql"))
GOLDEN = ROOT / "tests" / "golden"


def render(spark, source: str) -> str:
    blocks = []
    for statement in split_statements(source):
        frame = run_statement(spark, statement.text)
        rows = frame.collect() if frame.columns else []
        blocks.append("\n".join([
            "-- !query", statement.text,
            "-- !query schema", frame.schema.simpleString(),
            "-- !query output", *("\t".join(format_value(v) for v in row) for row in rows),
        ]))
    return "\n\n\n".join(blocks) + "\n"


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.name for e in EXAMPLES])
def test_example_matches_golden(spark, example):
    golden = GOLDEN / f"{example.name}.out"
    actual = render(spark, example.read_text())
    if REGENERATE:
        golden.write_text(actual)
    assert golden.exists(), f"no golden file for {example.name}; regenerate with SQLEXT_REGENERATE_FIXTURES=1"
    assert actual == golden.read_text()


def test_every_example_is_checked():
    assert EXAMPLES, "sql_examples/ holds no example"
    assert {g.name for g in GOLDEN.glob("*.out")} == {f"{e.name}.out" for e in EXAMPLES}

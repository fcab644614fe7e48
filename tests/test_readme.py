"""The README as a new user follows it: every example in sql_examples/ is indexed in the
gallery, and every `sqlext run`/`sqlext build` path it names exists (their output is checked
by test_examples_golden.py and test_models.py)."""

import re
from pathlib import Path

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

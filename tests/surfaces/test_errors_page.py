"""The error classes page (docs/errors.md) cannot drift from sqlext/errors.py: it has one
section per class in MESSAGES and no other, and each section says when the class is raised
and how to fix it."""

import re
from pathlib import Path

from sqlext.errors import MESSAGES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "errors.md"


def _sections() -> dict[str, str]:
    parts = re.split(r"^### ([A-Z][A-Z0-9_]+)\n", PAGE.read_text(), flags=re.MULTILINE)
    return {name: body.split("\n## ", 1)[0] for name, body in zip(parts[1::2], parts[2::2])}


def test_the_page_has_a_section_for_each_error_class_and_no_other():
    sections = _sections()
    missing = sorted(set(MESSAGES) - set(sections))
    assert not missing, f"docs/errors.md: add a '### NAME' section (When: ... Fix: ...) for {missing}"
    assert sorted(set(sections) - set(MESSAGES)) == []
    assert len(sections) == len(re.findall(r"^### ", PAGE.read_text(), flags=re.MULTILINE))  # none twice


def test_each_section_says_when_and_how_to_fix():
    for name, body in _sections().items():
        assert "**When:**" in body and "**Fix:**" in body, name

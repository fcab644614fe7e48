"""Splitting a SQL file into statements, remembering where each one starts.

A semicolon ends a statement unless it is inside a string, a quoted identifier or a comment.
Splitting is textual on purpose: a statement sqlglot cannot read still reaches Spark intact.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlext.language.dialect import scan


@dataclass(frozen=True)
class Statement:
    text: str
    line: int  # 1-based line of the statement's first character in its file
    column: int  # 1-based column of that character


def split_statements(source: str) -> list[Statement]:
    statements: list[Statement] = []
    start = 0
    for end in _semicolons(source):
        _add(statements, source, start, end)
        start = end + 1
    _add(statements, source, start, len(source))
    return statements


def complete_statements(source: str) -> tuple[list[Statement], str]:
    r"""The statements of ``source`` that a semicolon ends, and the text after the last such
    semicolon (a statement still being typed; empty or only comments when there is none).

    >>> statements, rest = complete_statements("SELECT ';' AS a; SELECT 1 -- ;\n")
    >>> [s.text for s in statements], rest
    (["SELECT ';' AS a"], ' SELECT 1 -- ;\n')
    """
    ends = _semicolons(source)
    if not ends:
        return [], source
    last = ends[-1]
    return split_statements(source[:last]), source[last + 1:]


def _semicolons(source: str) -> list[int]:
    """Offsets of the semicolons that end statements: not inside a string, a quoted
    identifier or a comment."""
    return scan(source)[0]


def unclosed_quote(source: str) -> Statement | None:
    r"""A string or quoted identifier that ``source`` opens and never closes (its text from
    the quote on, and where it starts), or None.

    >>> unclosed_quote("SELECT 1;\nSELECT 'it''s'")
    >>> unclosed_quote("SELECT 1;\nSELECT 'it''s; SELECT 2")
    Statement(text="'it''s; SELECT 2", line=2, column=8)
    """
    offset = scan(source)[1]
    if offset is None:
        return None
    return Statement(source[offset:], *position(source, offset))


def position(source: str, offset: int) -> tuple[int, int]:
    """The 1-based line and column of ``offset`` in ``source``."""
    return source.count("\n", 0, offset) + 1, offset - (source.rfind("\n", 0, offset) + 1) + 1


def _add(statements: list[Statement], source: str, start: int, end: int) -> None:
    chunk = source[start:end]
    body = _strip_comments_and_space(chunk)
    if not body:
        return
    offset = start + (len(chunk) - len(chunk.lstrip()))
    # skip leading comment lines so positions point at the statement itself
    while True:
        rest = source[offset:end]
        if rest.startswith("--"):
            nl = source.find("\n", offset)
            offset = end if nl == -1 or nl > end else nl + 1
        elif rest.startswith("/*"):
            close = source.find("*/", offset)
            offset = end if close == -1 else close + 2
        else:
            break
        offset += len(source[offset:end]) - len(source[offset:end].lstrip())
    statements.append(Statement(source[offset:end].strip(), *position(source, offset)))


def _strip_comments_and_space(chunk: str) -> str:
    lines = []
    in_block = False
    for raw in chunk.splitlines():
        line = raw.strip()
        if in_block:
            if "*/" in line:
                in_block = False
                line = line.split("*/", 1)[1].strip()
            else:
                continue
        if line.startswith("/*") and "*/" not in line:
            in_block = True
            continue
        if line.startswith("/*") and line.endswith("*/"):
            continue
        if line and not line.startswith("--"):
            lines.append(line)
    return "\n".join(lines)

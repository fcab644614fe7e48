"""Reading and regenerating the SQL fixture files in ``tests/fixtures/``: one format for all.

A fixture file is a header of ``--`` comments, then cases, each starting with a title line::

    -- case: band join within 10 minutes either side
    SELECT ... (the input, one or more lines)
    -- expected
    SELECT ... (what the rules make of it)

    -- case: no recursive CTE
    WITH t AS (SELECT 1 AS n) SELECT * FROM t
    -- noop

After the input comes ``-- expected`` and the expected text, or ``-- noop`` (the rules must
leave the input unchanged), or nothing (a case that is only an input, such as a statement of
the fuzz corpus, or a new case waiting for its expected text).

A header may describe the tables its cases read, one a line, indented by three spaces after
``--``, as a table name and its columns in Spark's DDL (:meth:`FixtureFile.tables`)::

    --   accounts(id INT, balance INT, _change_type STRING, _commit_version BIGINT)
    --   `odd {t} 's`(`acc id` INT, `v{x}` BIGINT)

``SQLEXT_REGENERATE_FIXTURES=1`` makes the tests that own a fixture file rewrite its expected
texts (and ``tests/test_examples_golden.py`` its golden outputs) from what the code does now;
review the diff before committing it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

FIXTURES = Path(__file__).parent / "fixtures"
REGENERATE = os.environ.get("SQLEXT_REGENERATE_FIXTURES") == "1"

TITLE = "-- case: "
TABLE_LINE = re.compile(r"^--   (\S.*\))\s*$")
EXPECTED = "-- expected"
NOOP = "-- noop"


@dataclass
class Case:
    title: str
    query: str
    expected: str | None = None  # None: the case gives no expected text
    noop: bool = False  # the rules must leave the query unchanged


@dataclass(frozen=True)
class Table:
    """A table a fixture file's header describes: its columns and their types, in order."""

    name: str
    types: dict[str, str]  # column -> type, lower case, as Spark names it

    @property
    def ddl(self) -> str:
        """The columns as Spark's DDL writes them (each name in backticks)."""
        return ", ".join("`" + c.replace("`", "``") + "` " + t for c, t in self.types.items())


@dataclass
class FixtureFile:
    path: Path
    header: str
    cases: list[Case] = field(default_factory=list)

    def regenerate(self, rewrite: Callable[[str], str]) -> None:
        """Set every case's expected text to ``rewrite(query)`` (noop cases stay) and write the file."""
        for case in self.cases:
            if not case.noop:
                case.expected = rewrite(case.query)
        self.write()

    def tables(self) -> dict[str, Table]:
        """The tables the header describes, by name."""
        from sqlext.language.dialect import parse_one

        found = {}
        for line in self.header.splitlines():
            match = TABLE_LINE.match(line)
            if match:
                schema = parse_one("CREATE TABLE " + match.group(1)).this
                types = {c.name: c.args["kind"].sql("spark").lower() for c in schema.expressions}
                found[schema.this.name] = Table(schema.this.name, types)
        return found

    def write(self) -> None:
        parts = [self.header.rstrip() + "\n"]
        for case in self.cases:
            lines = [TITLE + case.title, case.query]
            if case.noop:
                lines.append(NOOP)
            elif case.expected is not None:
                lines += [EXPECTED, case.expected]
            parts.append("\n".join(lines) + "\n")
        self.path.write_text("\n".join(parts))


def load(name: str) -> FixtureFile:
    """The fixture file ``tests/fixtures/<name>``, parsed."""
    path = FIXTURES / name
    header, *blocks = re.split(rf"^(?={re.escape(TITLE)})", path.read_text(), flags=re.M)
    cases = []
    for block in blocks:
        title, *body = block.rstrip().splitlines()
        title = title.removeprefix(TITLE).strip()
        if NOOP in body:
            assert body.index(NOOP) == len(body) - 1, f"{path.name}: {title}: '{NOOP}' ends a case"
            cases.append(Case(title, "\n".join(body[:-1]).strip(), None, noop=True))
        elif EXPECTED in body:
            cut = body.index(EXPECTED)
            cases.append(Case(title, "\n".join(body[:cut]).strip(), "\n".join(body[cut + 1:]).strip()))
        else:
            cases.append(Case(title, "\n".join(body).strip()))
        assert cases[-1].query, f"{path.name}: {title}: the case has no input"
    titles = [c.title for c in cases]
    assert len(set(titles)) == len(titles), f"{path.name}: two cases have one title"
    return FixtureFile(path, header, cases)

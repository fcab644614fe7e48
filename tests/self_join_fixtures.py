"""Reading and regenerating ``tests/fixtures/self_joins.sql``: the self-join rules' SQL pairs."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "self_joins.sql"
REGENERATE = os.environ.get("SQLEXT_REGENERATE_FIXTURES") == "1"

# The one table the fixtures read (types as Spark names them).
EVENTS = {
    "id": "int", "user_id": "int", "ts": "timestamp", "n": "int", "v": "int", "page": "string",
    "amount": "double",
}
# Relations joined with the pair in the chain-of-joins fixtures (not unique on their keys).
USERS = {"user_id": "int", "name": "string", "tier": "int"}
PAGES = {"page": "string", "section": "string"}
SCHEMA = {"events": EVENTS, "users": USERS, "pages": PAGES}


@dataclass
class Fixture:
    title: str
    query: str
    expected: str | None  # None: the rules must leave the query unchanged

    @property
    def noop(self) -> bool:
        return self.expected is None


def read_fixtures(path: Path = FIXTURES) -> tuple[str, list[Fixture]]:
    text = path.read_text()
    header, *blocks = re.split(r"^(?=-- title: )", text, flags=re.M)
    fixtures = []
    for block in blocks:
        lines = block.strip().splitlines()
        title = lines[0].removeprefix("-- title: ").strip()
        body = lines[1:]
        if body and body[0].strip() == "-- noop":
            fixtures.append(Fixture(title, "\n".join(body[1:]).strip(), None))
            continue
        if "-- expected" in body:
            cut = body.index("-- expected")
            query, expected = "\n".join(body[:cut]).strip(), "\n".join(body[cut + 1:]).strip()
        else:
            query, expected = "\n".join(body).strip(), ""
        fixtures.append(Fixture(title, query, expected))
    return header, fixtures


def write_fixtures(header: str, fixtures: list[Fixture], path: Path = FIXTURES) -> None:
    parts = [header.rstrip() + "\n"]
    for f in fixtures:
        if f.noop:
            parts.append(f"-- title: {f.title}\n-- noop\n{f.query}\n")
        else:
            parts.append(f"-- title: {f.title}\n{f.query}\n-- expected\n{f.expected}\n")
    path.write_text("\n".join(parts))

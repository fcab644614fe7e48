"""The tables the self-join fixtures (``tests/fixtures/self_joins.sql``) read, and the fixtures."""

from __future__ import annotations

from fixture_files import load

# The one table the fixtures read (types as Spark names them).
EVENTS = {
    "id": "int", "user_id": "int", "ts": "timestamp", "n": "int", "v": "int", "page": "string",
    "amount": "double",
}
# Relations joined with the pair in the chain-of-joins fixtures (not unique on their keys).
USERS = {"user_id": "int", "name": "string", "tier": "int"}
PAGES = {"page": "string", "section": "string"}
SCHEMA = {"events": EVENTS, "users": USERS, "pages": PAGES}


def read_fixtures():
    """The file of self-join cases (``.cases``: title, query, expected text or noop)."""
    return load("self_joins.sql")

"""What the tests of a function's rule fixture file share (``tests/fixtures/<rule module>.sql``):
the schema its header describes, the rewrite the rules make with that schema, the header's
tables as temporary views, and the span of a call in a statement's text."""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager

from fixture_files import FixtureFile
from sqlext.rewrites.pipeline import rewrite_statement
from sqlext.analysis.relations import MappingRelations


def schema(file: FixtureFile) -> dict[str, dict[str, str]]:
    """``{table: {column: type}}`` of the tables the file's header describes."""
    return {name: dict(table.types) for name, table in file.tables().items()}


def rewrite(query: str, tables: dict[str, dict[str, str]]):
    """Every rule over ``query``, the columns and types of ``tables`` known (no Spark)."""
    return rewrite_statement(query, MappingRelations(tables))


def check_case(case, tables: dict[str, dict[str, str]], rule: str, calls: tuple[str, ...]) -> None:
    """One fixture case of ``rule``, whose calls are ``calls`` (``calls[0]`` the rule's own): a
    noop case comes back unchanged, and where it holds the call the rule says why it left it
    (its columns are unknown); any other rewrites to exactly its expected text, the rule fired
    and no call left in it."""
    out = rewrite(case.query, tables)
    if case.noop:
        assert out.sql == case.query
        assert not out.changed
        if f"{calls[0]}(" in case.query:
            assert any(n.rule == rule and not n.fired and "unknown" in n.text for n in out.notes), \
                [str(n) for n in out.notes]
    else:
        assert out.changed, [str(n) for n in out.notes]
        assert rule in out.notes.fired
        assert not any(f"{call}(" in out.sql.upper() for call in calls)
        assert out.sql == case.expected


def quoted(name: str) -> str:
    """A name as Spark reads it: in backticks, a backtick written twice."""
    return "`" + name.replace("`", "``") + "`"


@contextmanager
def temp_views(spark, file: FixtureFile, rows: dict[str, list[tuple]]):
    """Each table of the file's header as a temporary view of ``rows[name]`` (none where
    ``rows`` has no entry), with the header's columns; dropped afterwards."""
    from pyspark.sql.types import _parse_datatype_string

    tables = file.tables()
    assert set(rows) <= set(tables), f"rows for tables the header does not describe: {set(rows) - set(tables)}"
    for name, table in tables.items():
        spark.createDataFrame(rows.get(name, []), _parse_datatype_string(table.ddl)) \
            .createOrReplaceTempView(quoted(name))
    try:
        yield
    finally:
        for name in tables:
            spark.catalog.dropTempView(name)  # (creating parses the name; dropping takes it as it is)


def call_span(text: str, function: str) -> tuple[int, int]:
    """Where the first call of ``function`` (outside string literals and quoted names) starts
    and ends in ``text``: ``text[start:end]`` is ``FUNCTION(...)``."""
    opening = function.upper() + "("
    quote, depth, start, i = None, 0, None, 0
    while i < len(text):
        char = text[i]
        if quote is not None:
            if char == "\\" and quote != "`":
                i += 2
                continue
            if char == quote:
                quote = None
        elif char in "'\"`":
            quote = char
        elif start is None and text[i:i + len(opening)].upper() == opening \
                and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            start, depth, i = i, 1, i + len(opening)
            continue
        elif start is not None and char == "(":
            depth += 1
        elif start is not None and char == ")":
            depth -= 1
            if depth == 0:
                return start, i + 1
        i += 1
    raise ValueError(f"no call of {function} in {text!r}")


def json_rows(spark, query: str, cache: dict[str, Counter] | None = None) -> Counter:
    """The rows of ``query`` as a multiset of JSON objects (every column by name, in order, NULLs
    included), so that two queries compare in names, order of columns and values at once.
    ``cache`` keeps the rows by query text: cases whose texts are the same run once."""
    if cache is not None and query in cache:
        return cache[query]
    frame = spark.sql(f"SELECT to_json(struct(*), map('ignoreNullFields', 'false')) AS row FROM ({query})")
    rows = Counter(r["row"] for r in frame.collect())
    if cache is not None:
        cache[query] = rows
    return rows

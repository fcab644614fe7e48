"""Hostile input for the rewriter: statements of many shapes, mutated at random (tokens
dropped, repeated, swapped, quotes and parentheses cut or added, keywords and numbers
changed). The rewriter never fails with an internal error: it rewrites, passes the text
through unchanged, or raises a classed SqlextError about a table-function call; and what it
does rewrite returns the original's rows."""

import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

import sqlext
from sqlext.rewrites.pipeline import rewrite_statement
from sqlext.analysis.relations import MappingRelations
from fixture_files import load
from rows import multiset
from self_join_fixtures import EVENTS, SCHEMA
from sqlext.errors import SqlextError

CORPUS = [case.query for case in load("fuzz_corpus.sql").cases]
RELATIONS = dict(SCHEMA, feed={"id": "int", "v": "int", "_change_type": "string", "_commit_version": "bigint"},
                 orders={"order_id": "int", "customer_id": "int", "_commit_version": "bigint"},
                 customers={"id": "int", "name": "string", "_commit_version": "bigint"})
TOKENS = re.compile(r"\s+|'[^']*'|`[^`]*`|\w+|[^\w\s]")
NOISE = ["(", ")", "'", "`", ",", ";", "--", "/*", "*/", "JOIN", "ON", "AND", "OR", "NOT", "NULL", "SELECT",
         "TABLE(", "=>", "<=>", "INTERVAL", "-", "+", "1e309", "'\\'", "\u00e9", "0x", "OVER", "WINDOW", "b.", "a."]


def mutate(text: str, rng: random.Random, steps: int) -> str:
    tokens = [t for t in TOKENS.findall(text)]
    for _ in range(steps):
        if not tokens:
            break
        i = rng.randrange(len(tokens))
        action = rng.randrange(6)
        if action == 0:
            del tokens[i]
        elif action == 1:
            tokens.insert(i, tokens[i])
        elif action == 2:
            j = rng.randrange(len(tokens))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif action == 3:
            tokens.insert(i, rng.choice(NOISE))
        elif action == 4 and tokens[i].isdigit():
            tokens[i] = str(rng.choice([0, -1, 2**31, 2**63, 7]))
        else:
            tokens = tokens[: rng.randrange(len(tokens) + 1)]
    return "".join(tokens)


@settings(max_examples=examples(400, 4000), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(0, 6))
def test_mutated_statements_never_break_the_rewriter(seed, steps):
    rng = random.Random(seed)
    text = mutate(rng.choice(CORPUS), rng, steps)
    try:
        out = rewrite_statement(text, MappingRelations(RELATIONS))
    except SqlextError as error:  # a table-function call with bad arguments: a classed, readable error
        assert re.match(r"\[[A-Z_]+\] [A-Z_]+: ", str(error)), str(error)
        return
    assert out.changed or out.sql == text  # what no rule rewrote reaches Spark exactly as written
    if out.changed:  # what a rule did rewrite is SQL sqlglot can read back
        sqlext.rewrite(out.sql)
    try:
        sqlext.rewrite(text + ";\n" + text, RELATIONS)  # and whole files with such statements
    except SqlextError:
        pass


def test_every_corpus_statement_is_read():
    assert len(CORPUS) >= 25
    for text in CORPUS:
        try:
            rewrite_statement(text, MappingRelations(RELATIONS))
        except SqlextError as error:  # pragma: no cover - the corpus holds valid calls
            pytest.fail(f"{text}: {error}")


SELF_JOINS = [t for t in CORPUS if re.search(r"events a(,| JOIN)", t) or re.search(r"s a JOIN s b|\) a JOIN \(", t)]


def numbers_changed(text: str, rng: random.Random) -> str:
    """The same query with its small constants and comparison operators changed: still valid SQL."""
    text = re.sub(r"(?<![\w.'])\d{1,2}(?![\w.'])", lambda m: str(rng.randint(0, 12)), text)
    return re.sub(r" (<=|>=|<|>) ", lambda m: f" {rng.choice(['<=', '>=', '<', '>'])} ", text)


@pytest.fixture(scope="module")
def events(spark):
    from self_join_fixtures import random_events

    ddl = ", ".join(f"{c} {t}" for c, t in EVENTS.items())
    spark.createDataFrame(random_events(7, rows=120), ddl).createOrReplaceTempView("events")
    yield
    spark.catalog.dropTempView("events")


@settings(max_examples=examples(20, 200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_rewritten_mutations_return_the_original_rows(spark, events, seed):
    from pyspark.errors import PySparkException

    from sqlext.session import SparkRelations

    rng = random.Random(seed)
    text = numbers_changed(rng.choice(SELF_JOINS), rng)
    out = rewrite_statement(text, SparkRelations(spark))
    try:
        expected = multiset(spark.sql(text).collect())
    except PySparkException:
        assert not out.changed or out.sql != text  # Spark rejects the original; nothing to compare
        return
    assert multiset(spark.sql(out.sql).collect()) == expected


FRAGMENTS = ["v", "id", " > ", "0", "1=1", ")", "(", "'", "''", "\\'", ";", " UNION SELECT * FROM secrets", " --",
             "/*", "*/", " OR ", " AND ", "`", "x`", "DROP TABLE feed", ",", "TABLE(feed)", " => ", "\n", "NULL",
             "(SELECT 1)", "v IN (SELECT v FROM feed)"]


@settings(max_examples=examples(300, 3000), deadline=None)
@given(parts=st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=8),
       argument=st.sampled_from(["predicate", "key", "order_by"]))
def test_argument_strings_are_rejected_or_confined_to_one_expression(parts, argument):
    from sqlext.language.dialect import parse
    from sqlext.functions.arguments import sql_string

    value = "".join(parts)
    arguments = {"key": "'id'", "predicate": "'v > 0'", "order_by": "'_commit_version'"}
    arguments[argument] = sql_string(value)
    call = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(feed), "
            + ", ".join(f"{k} => {v}" for k, v in arguments.items()) + ")")
    try:
        out = rewrite_statement(call, MappingRelations(RELATIONS))
    except SqlextError as error:
        assert error.error_class in {"INVALID_SQL_EXPRESSION", "CHANGELOG_MISSING_COLUMN", "INVALID_ARGUMENT_TYPE",
                                     "EXPRESSION_TYPE_MISMATCH", "INVALID_OPTION_VALUE"}, str(error)
        return
    statements = [s for s in parse(out.sql) if s is not None]
    assert len(statements) == 1  # nothing smuggled in as a second statement
    assert "secrets" not in out.sql.lower() and "drop table" not in out.sql.lower()

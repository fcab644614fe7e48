"""Every part of sqlext that lists functions reads the function catalogue: a function added to
it (here KEEP_CHANGES, CHANGELOG_FILTER's parts under another name, plus a rule of this
module's) appears in the rules, the session's table functions, the names a misspelling is
compared with, the engine's dispatch and refusals, dbt's stateful models and ``sqlext --help``,
with no other file changed. An incremental run of it gives CHANGELOG_FILTER's rows."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sqlext
from sqlext.errors import SqlextError
from sqlext.functions import catalogue
from sqlext.functions.changelog_filter import DEFINITION as CHANGELOG_FILTER
from sqlext.language.dialect import parse_one, to_sql

NAME = "KEEP_CHANGES"
SEEN: list[str] = []


def toy_rule(expression, notes=None):
    """The added function's rule: it leaves the tree as it is and says that it ran."""
    SEEN.append(to_sql(expression))
    return expression


TOY = dataclasses.replace(CHANGELOG_FILTER, name=NAME, summary="CHANGELOG_FILTER under another name (a test's)",
                          rule=f"{__name__}:toy_rule")


@pytest.fixture
def added(monkeypatch):
    monkeypatch.setitem(catalogue.CATALOGUE, NAME, TOY)
    SEEN.clear()
    return TOY


def call(source: str = "TABLE(accounts)", name: str = NAME) -> str:
    return f"SELECT * FROM {name}(input => {source}, key => 'id', predicate => 'v > 0')"


def test_the_catalogue_names_each_function_once_with_parts_that_import():
    names = [f.name for f in catalogue.functions()]
    assert len(names) == len(set(names)) and {"CHANGELOG_FILTER", "FK_JOIN", "RECURSIVE_EXPAND"} <= set(names)
    for function in catalogue.functions():
        for part in ("rule", "operator", "table_function"):
            if getattr(function, part) is not None:
                assert callable(function.part(part)), (function.name, part)


def test_the_rules_come_from_the_catalogue(added):
    from sqlext.rewrites.pipeline import rewrite_statement, rules

    assert toy_rule in rules()
    out = rewrite_statement(call())
    assert SEEN and NAME in SEEN[0]
    assert "toy_rule" in {note.rule for note in out.notes}


def test_the_cli_lists_the_catalogue(added):
    from sqlext.cli import build_parser

    text = build_parser().format_help()
    assert NAME in text and TOY.summary in text
    assert "WITH RECURSIVE" in text  # a function users reach through other SQL, listed by that SQL


def test_a_misspelt_name_is_compared_with_the_catalogue(added):
    from sqlext.runner import nearest_function, table_functions

    assert NAME in table_functions()
    assert nearest_function("keep_change") == NAME


def test_dbt_knows_the_added_function_keeps_state(added):
    from dbt.adapters.sqlext.impl import _why, stateful_functions

    assert stateful_functions(call("TABLE(ref_accounts)")) == [NAME]
    assert _why(NAME) == CHANGELOG_FILTER.why


def test_the_engine_dispatches_and_refuses_by_the_catalogue(added):
    from sqlext.streaming.bind import refuse_shape
    from sqlext.streaming.registry import keyed_call, purpose_of

    tree = parse_one(call("TABLE(STREAM(accounts))"))
    calls = [t for t in _tables(tree) if keyed_call(t) is not None]
    assert [keyed_call(t).name for t in calls] == [NAME]
    purpose = purpose_of(tree)
    assert purpose.function == NAME and purpose.keys == ("key => 'id'",)
    two = parse_one(f"{call('TABLE(STREAM(a))')} UNION ALL {call('TABLE(STREAM(b))')}")
    with pytest.raises(SqlextError) as caught:
        refuse_shape([t for t in _tables(two) if keyed_call(t) is not None],
                     [t for t in _tables(two) if t.this.name.upper() == "STREAM"])
    assert NAME in str(caught.value)


def _tables(tree):
    from sqlglot import exp

    return list(tree.find_all(exp.Table))


@pytest.mark.spark
def test_the_session_registers_it_and_an_incremental_run_gives_changelog_filters_rows(added, spark, tmp_path):
    from sqlext.session import register_table_functions

    register_table_functions(spark)
    rows = [{"id": 1, "v": 5, "_change_type": "insert", "_commit_version": 1},
            {"id": 1, "v": -1, "_change_type": "update_postimage", "_commit_version": 2},
            {"id": 2, "v": 3, "_change_type": "insert", "_commit_version": 2}]
    spark.createDataFrame(rows).createOrReplaceTempView("catalogue_accounts")
    udtf = spark.sql(call("TABLE(catalogue_accounts)")).collect()  # Spark calls the registered table function
    assert sorted(r["id"] for r in udtf) == [1, 1, 2]

    folder = tmp_path / "accounts"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), str(folder / "part-0.parquet"))
    outputs = {}
    for name in (NAME, "CHANGELOG_FILTER"):
        out = tmp_path / f"out-{name}"
        sqlext.stream(spark, call("TABLE(STREAM(accounts))", name), checkpoint=str(tmp_path / f"cp-{name}"),
                      output=str(out), sources={"accounts": str(folder)}).awaitTermination()
        outputs[name] = sorted(tuple(sorted(r.asDict().items())) for r in spark.read.parquet(str(out)).collect())
    assert outputs[NAME] == outputs["CHANGELOG_FILTER"] and outputs[NAME]

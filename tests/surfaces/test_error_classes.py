"""Which error a user sees: a mistake in the SQL around a function call is Spark's own analysis
error (naming the user's columns), never one of sqlext's data errors.

The rewritten plan holds the functions' own ``raise_error('[AMBIGUOUS_ORDER] ...')`` checks, and
Spark prints the plan in its analysis errors; only the message a raised error carries may decide
its class.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples
from pyspark.errors import AnalysisException, PySparkException

import sqlext
from sqlext.errors import MESSAGES, find_in
from sqlext.runner import error_message

ACCOUNTS = "id INT, balance INT, _change_type STRING, _commit_version BIGINT"
ACCOUNT_ROWS = [(1, 10, "insert", 1), (2, 5, "insert", 1), (1, 20, "update_postimage", 2)]
EDGES = "src INT, dst INT"

CALLS = {
    "CHANGELOG_FILTER": ("SELECT {select} FROM CHANGELOG_FILTER(input => TABLE(acc2), key => 'id', "
                         "predicate => 'balance >= 0', emit => '{emit}')", ["id", "balance"]),
    "FK_JOIN": ("SELECT {select} FROM FK_JOIN(left => TABLE(acc2), right => TABLE(acc2), left_key => 'id', "
                "foreign_key => 'balance', right_key => 'id', emit => '{emit}')", ["id", "balance", "id_right"]),
    "recursion": ("WITH RECURSIVE r(n) AS (SELECT src FROM edges WHERE src = 1 UNION ALL "
                  "SELECT e.dst FROM r JOIN edges AS e ON e.src = r.n) SELECT {select} FROM r", ["n"]),
}


@pytest.fixture
def inputs(view):
    view("acc2", ACCOUNT_ROWS, ACCOUNTS)
    view("edges", [(1, 2), (2, 3)], EDGES)


def misspelt(columns: list[str]):
    """A name one typo away from one of ``columns`` that is none of them."""
    def typo(args):
        name, position, letter, kind = args
        position %= len(name) + 1
        if kind == "drop" and len(name) > 1:
            return name[:position] + name[position + 1:]
        if kind == "double":
            return name[:position] + name[position:position + 1] * 2 + name[position + 1:]
        return name[:position] + letter + name[position:]

    taken = {c.lower() for c in columns} | {"r", "e", "src", "dst"}
    return (st.tuples(st.sampled_from(columns), st.integers(0, 20), st.sampled_from("xqz"),
                      st.sampled_from(["drop", "insert", "double"]))
            .map(typo).filter(lambda n: n and n[0].isalpha() and n.lower() not in taken))


@st.composite
def statements(draw):
    """A statement around a call with a misspelt column in its select list, WHERE, GROUP BY
    or ORDER BY; and the misspelt name."""
    function = draw(st.sampled_from(sorted(CALLS)))
    template, columns = CALLS[function]
    name = draw(misspelt(columns))
    place = draw(st.sampled_from(["select", "where", "group by", "order by"]))
    emit = draw(st.sampled_from(["changes", "records", "final"]))
    select = {"select": f"{columns[0]}, {name}", "group by": columns[0]}.get(place, "*")
    text = template.format(select=select, emit=emit)
    text += {"where": f" WHERE {name} > 1", "group by": f" GROUP BY {name}",
             "order by": f" ORDER BY {name}"}.get(place, "")
    return text, name


def spark_error(spark, text) -> PySparkException:
    with pytest.raises(PySparkException) as caught:
        sqlext.sql(spark, text).collect()
    return caught.value


@settings(max_examples=examples(16, 160), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=statements())
def test_a_misspelt_column_around_a_call_is_sparks_analysis_error(spark, inputs, case):
    text, name = case
    error = spark_error(spark, text)
    assert isinstance(error, AnalysisException), (text, error)
    assert error.getCondition().startswith("UNRESOLVED_COLUMN"), (text, error.getCondition())
    assert find_in(error) is None
    line = error_message(error)
    assert line.startswith("[UNRESOLVED_COLUMN") and name in line
    assert not any(f"[{cls}]" in line for cls in MESSAGES)
    # the suggestions name the user's columns, never the rewrite's internal ones
    assert "__sx_" not in line and "__sx_" not in error.getMessageParameters().get("proposal", "")


CF = "CHANGELOG_FILTER(input => TABLE(acc2), key => 'id', predicate => 'balance >= 0')"


@pytest.mark.parametrize("text, condition, names", [
    (f"SELECT nope FROM {CF}", "UNRESOLVED_COLUMN", ["nope", "balance"]),
    (f"SELECT * FROM {CF} WHERE nope > 1", "UNRESOLVED_COLUMN", ["nope", "balance"]),
    (f"SELECT * FROM {CF} GROUP BY id", "MISSING_AGGREGATION", ["balance"]),
    ("SELECT * FROM FK_JOIN(left => TABLE(acc2), right => TABLE(acc2), left_key => 'id', "
     "foreign_key => 'balance', right_key => 'id') WHERE idd = 1", "UNRESOLVED_COLUMN", ["idd", "id_right"]),
    ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(by_map), key => 'm', predicate => 'v > 0')",
     "EXPRESSION_TYPE_IS_NOT_ORDERABLE", ["MAP<STRING, INT>"]),
])
def test_each_reported_repro_is_sparks_own_error(spark, inputs, view, text, condition, names):
    view("by_map", [({"a": 1}, 1, 1)], "m MAP<STRING, INT>, v INT, _commit_version BIGINT")
    error = spark_error(spark, text)
    assert error.getCondition().startswith(condition)
    assert find_in(error) is None
    line = error_message(error)
    assert line.startswith(f"[{condition}") and all(n in line for n in names), line
    # one line, without the plan (which holds the rewrite's raise_error texts) or a position
    # in the rewritten statement the user never wrote
    assert "\n" not in line and "raise_error" not in line and "AMBIGUOUS_ORDER" not in line
    assert " pos " not in line


def test_a_data_error_is_still_found_in_what_was_raised(spark, view):
    view("tie", [(1, 5, "insert", 1), (1, 6, "update_postimage", 1)], ACCOUNTS.replace("balance", "v"))
    error = spark_error(spark, "SELECT * FROM CHANGELOG_FILTER(input => TABLE(tie), key => 'id', predicate => 'v > 0')")
    assert error.getCondition() == "USER_RAISED_EXCEPTION"
    assert find_in(error).error_class == "AMBIGUOUS_ORDER"


def test_plan_text_never_decides_the_class():
    """An error whose text holds a sqlext message anywhere but at its start (Spark's plan
    printed after its own message) is not sqlext's."""
    text = ("[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column ... `nope` cannot be resolved. SQLSTATE: 42703;\n"
            "'Project ['nope]\n+- Project [CASE WHEN (x = y) THEN raise_error(concat([AMBIGUOUS_ORDER] "
            "CHANGELOG_FILTER: two changes of key , id, share ...))]")
    assert find_in(AnalysisException(message=text)) is None
    assert find_in(RuntimeError(text)) is None
    own = RuntimeError("[AMBIGUOUS_ORDER] CHANGELOG_FILTER: two changes of key id=1 share v = 1, so ...")
    assert find_in(own).error_class == "AMBIGUOUS_ORDER"

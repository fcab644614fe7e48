"""fk_join_to_sql against its fixture pairs (``tests/fixtures/fk_join.sql``): each input
rewrites to exactly the expected SQL with the header's schema, every noop case comes back
unchanged; and on Spark, each rewritten query gives the rows of the same statement with the
call's output computed by the replay of KIP-213's workflow (``tests/reference/fk_join.py``),
over small tables with foreign-key changes, deletes, NULL foreign keys, NULL keys, stale
changes and left and right changes at one version."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import datetime

import pytest
from sqlglot import exp

from fixture_files import REGENERATE, load
from reference.fk_join import TOMBSTONE, replay, result_table_changes
from rule_fixtures import call_span, check_case, json_rows, quoted, rewrite, schema, temp_views
from sqlext.functions.arguments import find_calls, read_call
from sqlext.functions.changes import CHANGE_TYPE, changes_by_key
from sqlext.functions.fk_join import ARGUMENTS, FUNCTION, TABLES, fk_join_spec
from sqlext.language.dialect import TableArgument, parse_one, to_sql

RULE = "fk_join_to_sql"
FILE = load("fk_join.sql")
SCHEMA = schema(FILE)
CASES = FILE.cases
REWRITTEN = [c for c in CASES if not c.noop]


def ts(hour: int) -> datetime:
    return datetime(2024, 5, 1, hour)


# (order_id, customer_id, amount, _change_type, _commit_version)
ORDERS = [
    # 1: its customer changes at 3, its amount at 6
    (1, 10, 5, "insert", 1), (1, 10, 5, "update_preimage", 3), (1, 20, 5, "update_postimage", 3),
    (1, 20, 5, "update_preimage", 6), (1, 20, 12, "update_postimage", 6),
    # 2: points at customer 30 before it exists
    (2, 30, 15, "insert", 2),
    # 3: no customer (NULL foreign key), then customer 10
    (3, None, 8, "insert", 2), (3, None, 8, "update_preimage", 5), (3, 10, 8, "update_postimage", 5),
    # 4: deleted; its customer 20 is deleted before it
    (4, 20, 0, "insert", 3), (4, 20, 0, "delete", 7),
    # 5: arrives at the version its customer changes (the right change applies first)
    (5, 10, 20, "insert", 4),
    # a NULL key
    (None, 10, 1, "insert", 5),
]
# (customer_id, name, _change_type, _commit_version)
CUSTOMERS = [
    (10, "ann", "insert", 1), (10, "ann", "update_preimage", 4), (10, "anne", "update_postimage", 4),
    (20, "bob", "insert", 2), (20, "bob", "delete", 5),
    (30, "cy", "insert", 4),
    (40, "dee", "insert", 1),  # referred to by no order
    (None, "nul", "insert", 2),  # a NULL key, which no foreign key meets
]
# (order_id, ref, amount, updated_at, version): an upsert log; the row with ref and amount NULL
# removes order 1 where updated_at is the sequence column (else it is a row with a NULL key)
ORDER_LOG = [
    (1, "a1", 5, ts(1), 1), (1, "b2", 5, ts(3), 2), (1, "a1", 7, ts(2), 3),  # version 3 is stale
    (1, None, None, ts(4), 5),
    (2, "A1", 3, ts(1), 2),
    (3, None, 9, ts(2), 3),  # a NULL foreign key
    (4, "b2", 6, ts(2), 4),  # a lower-case reference: upper(ref) finds B2
]
# (code, label, updated_at, version)
CODES = [
    ("A1", "alpha", ts(1), 1), ("B2", "beta", ts(2), 1), ("B2", "beta2", ts(1), 3),  # version 3 is stale
    ("A1", None, ts(5), 4),  # removes A1 where updated_at is the sequence column
]
ICEBERG_TYPES = {"insert": "INSERT", "delete": "DELETE", "update_preimage": "UPDATE_BEFORE",
                 "update_postimage": "UPDATE_AFTER"}
ROWS = {
    "orders": ORDERS,
    "customers": CUSTOMERS,
    "order_log": ORDER_LOG,
    "codes": CODES,
    # the rows of orders and customers as Iceberg's changelog view gives them
    "orders_ice": [(*row[:3], ICEBERG_TYPES[row[3]], row[4], 500 + row[4]) for row in ORDERS],
    "customers_ice": [(*row[:2], ICEBERG_TYPES[row[2]], row[3], 500 + row[3]) for row in CUSTOMERS],
    "segments": [("ann", "gold"), ("anne", "gold"), ("bob", "silver")],
    # an upsert log: (`order id`, `f'k {0}`, `say "hi" {}`, `v{x}`)
    "left {t} 's": [(1, 1, "x", 1), (2, 2, "y", 2), (1, 2, "x2", 4), (2, None, None, 6), (3, 3, "z", 7),
                    (4, 9, "w", 8)],
    # a change feed: (`r``id`, `n"{a}me`, _change_type, `v{x}`)
    'right "r" {}': [(1, "one", "insert", 1), (2, "two", "insert", 3), (1, "one", "update_preimage", 5),
                     (1, "uno", "update_postimage", 5), (2, "two", "delete", 6), (3, "three", "insert", 7)],
}


def test_regenerate_fixtures_when_asked():
    if not REGENERATE:
        assert all(c.noop or c.expected for c in CASES), "a fixture has no expected query"
        return
    FILE.regenerate(lambda query: rewrite(query, SCHEMA).sql)


@pytest.mark.parametrize("case", CASES, ids=[c.title for c in CASES])
def test_fixture(case):
    check_case(case, SCHEMA, RULE, ("FK_JOIN", "CHANGELOG_FILTER"))


def test_the_file_fires_the_rule_and_covers_its_surface():
    fired = Counter()
    for case in CASES:
        fired.update(rewrite(case.query, SCHEMA).notes.fired)
    assert fired[RULE] >= len(REWRITTEN)
    assert fired["changelog_filter_to_sql"] >= 1  # the call feeding the left input
    text = "\n".join(c.query for c in REWRITTEN)
    for needle in ("join_type => 'inner'", "join_type => 'left'", "emit => 'changes'", "emit => 'records'",
                   "emit => 'final'", "order_by => ", "sequence_by => ", "format => 'iceberg'",
                   "foreign_key => 'upper(", "WITH ", "JOIN ", "TABLE(CHANGELOG_FILTER(", "`"):
        assert needle in text, needle
    assert any("join_type =>" not in c.query and "emit =>" not in c.query and "order_by =>" not in c.query
               for c in REWRITTEN)  # every default
    assert sum(c.noop for c in CASES) >= 3


# ---- the independent answer: the replay of KIP-213's workflow ---------------------------

def _input_query(argument: TableArgument) -> str:
    """A query of the rows a table argument gives, for plain Spark (where a CHANGELOG_FILTER
    inside runs as the registered table function)."""
    relation = argument.this
    if isinstance(relation, exp.Query):
        return to_sql(relation)
    return f"SELECT * FROM {to_sql(relation)}"


def _as_change_rows(rows: list[dict], iceberg: bool) -> list[dict]:
    """Iceberg's changelog rows as the change rows they stand for (the snapshot id left out)."""
    if not iceberg:
        return rows
    types = {v: k for k, v in ICEBERG_TYPES.items()}
    return [{**{k: v for k, v in r.items() if k != "_commit_snapshot_id"}, CHANGE_TYPE: types[r[CHANGE_TYPE]]}
            for r in rows]


def replayed_output(spark, call_text: str):
    """The output of the FK_JOIN call ``call_text`` by the replay: its rows (tuples) and Spark's
    schema for them."""
    from pyspark.sql.types import StringType, StructField, StructType

    call = read_call(find_calls(parse_one(f"SELECT * FROM {call_text}"), FUNCTION)[0], FUNCTION, ARGUMENTS, TABLES)
    literals = {k.lower(): v for k, v in call.literals.items()}
    iceberg = literals.pop("format", "delta") == "iceberg"
    if iceberg:
        literals.setdefault("order_by", "_change_ordinal")
    left_query, right_query = (_input_query(call.tables[side]) for side in ("left", "right"))
    fk = "__sx_fk"
    left_frame = spark.sql(f"SELECT *, ({literals['foreign_key']}) AS {fk} FROM ({left_query})")
    right_frame = spark.sql(right_query)
    left_rows = _as_change_rows([r.asDict() for r in left_frame.collect()], iceberg)
    right_rows = _as_change_rows([r.asDict() for r in right_frame.collect()], iceberg)
    left_columns = [c for c in left_rows[0] if c != fk] if left_rows else None
    right_columns = list(right_rows[0]) if right_rows else None
    spec = fk_join_spec(literals, left_columns, right_columns)

    events = []
    for key, changes in changes_by_key(spec.left, left_rows).items():
        for change in changes:
            row = {c: change.row[c] for c in (*spec.left.data_columns, fk)}
            events.append((change.order, "left", key, row if change.present else None))
    for (key,), changes in changes_by_key(spec.right, right_rows).items():
        for change in changes:
            row = {c: change.row[c] for c in spec.right.data_columns}
            events.append((change.order, "right", key, row if change.present else None))
    run = replay(events, spec.join_type, lambda row: row[fk])

    def result(key, value) -> tuple:
        if value is TOMBSTONE:
            values = dict(zip(spec.left.key, key))
            left, right = [values.get(c) for c in spec.left.data_columns], [None] * len(spec.right_names)
        else:
            left = [value["left"][c] for c in spec.left.data_columns]
            right = [None if value["right"] is None else value["right"][c] for c in spec.right_names]
        return (*left, *right)

    if spec.emit == "records":
        rows = [(*result(k, v), "delete" if v is TOMBSTONE else "upsert", ver) for k, v, ver in run.records]
    elif spec.emit == "changes":
        rows = [(*result(k, v), kind, ver) for kind, k, v, ver in result_table_changes(run.records)[0]]
    else:
        rows = [result(k, v) for k, v in result_table_changes(run.records)[1].items()]

    fields = [StructField(c, left_frame.schema[c].dataType) for c in spec.left.data_columns]
    fields += [StructField(n, right_frame.schema[c].dataType) for c, n in spec.right_names.items()]
    if spec.emit != "final":
        fields += [StructField(CHANGE_TYPE, StringType()),
                   StructField(spec.left.order_by, left_frame.schema[spec.left.order_by].dataType)]
    return rows, StructType(fields)


_answer_views = itertools.count()


def answer_query(spark, query: str) -> str:
    """``query`` with its FK_JOIN call replaced by a view of the replay's output."""
    start, end = call_span(query, FUNCTION)
    rows, schema_ = replayed_output(spark, query[start:end])
    name = f"fk_join_answer_{next(_answer_views)}"
    spark.createDataFrame(rows, schema_).createOrReplaceTempView(name)
    return query[:start] + quoted(name) + query[end:]


@pytest.fixture(scope="module")
def views(spark):
    with temp_views(spark, FILE, ROWS):
        yield
    for name in spark.catalog.listTables():
        if name.name.startswith("fk_join_answer_"):
            spark.catalog.dropTempView(name.name)


@pytest.mark.parametrize("case", REWRITTEN, ids=[c.title for c in REWRITTEN])
def test_rewrite_matches_the_replay(spark, views, case):
    got = json_rows(spark, rewrite(case.query, SCHEMA).sql)
    assert got == json_rows(spark, answer_query(spark, case.query))
    assert got, "the case's rows give it nothing to compare"

"""The case table of KAFKA-3902, line by line, in every emit mode, for both input shapes,
through all three paths: the reference logic (no JVM), the native rewrite (sqlext.sql) and the
registered table function (plain spark.sql).

Predicate throughout: ``v >= 0``. Events are ``(version, key, v)``; ``v=None`` is a delete.
Expectations are ``(change_type, v, version)`` for changes/records and ``(id, v)`` for final.

The cases of a table run together, as one feed per path, shape and emit mode: each case's keys
are moved to a range of their own, so no two cases share a key (CHANGELOG_FILTER decides per
key), and each case gets back its own rows with its keys as written. A case among others must
give what it gives alone; that is one more thing the table checks, and it costs a dozen Spark
queries where a query per case cost nearly two hundred.
"""

import pytest

from feeds import NULL_V, PATHS, SHAPES, compact, run_filter

CASES = {
    # 2 / 3a: a new row that passes is inserted (records: upserted)
    "3a new row passes": (
        [(1, 1, 5)],
        [("insert", 5, 1)],
        [("upsert", 5, 1)],
        [(1, 5)],
    ),
    # 2 / 3a: a new row that fails: nothing with old values; a tombstone without them
    "3a new row filtered": (
        [(1, 1, -5)],
        [],
        [("delete", None, 1)],
        [],
    ),
    # 3b: delete of a row that passed: a delete carrying the old row
    "3b delete of a passing row": (
        [(1, 1, 5), (2, 1, None)],
        [("insert", 5, 1), ("delete", 5, 2)],
        [("upsert", 5, 1), ("delete", None, 2)],
        [],
    ),
    # 3b: delete of a row that was filtered: nothing (it already left the filtered table)
    "3b delete of a filtered row": (
        [(1, 1, -5), (2, 1, None)],
        [],
        [("delete", None, 1), ("delete", None, 2)],
        [],
    ),
    # 3c1: both pass: the pre/post pair
    "3c1 both pass": (
        [(1, 1, 5), (2, 1, 7)],
        [("insert", 5, 1), ("update_preimage", 5, 2), ("update_postimage", 7, 2)],
        [("upsert", 5, 1), ("upsert", 7, 2)],
        [(1, 7)],
    ),
    # 3c1 made minimal (sqlext's change feeds are minimal): an update whose rows are equal forwards nothing
    "3c1 both pass, row unchanged": (
        [(1, 1, 5, 1), (2, 1, 5, 1)],  # same ts too: ts is data
        [("insert", 5, 1)],
        [("upsert", 5, 1), ("upsert", 5, 2)],
        [(1, 5)],
    ),
    # 3c2: both fail: nothing (records: a tombstone each time)
    "3c2 both filtered": (
        [(1, 1, -5), (2, 1, -7)],
        [],
        [("delete", None, 1), ("delete", None, 2)],
        [],
    ),
    # 3c3: old passes, new fails: {old -> null}, a delete of the old row
    "3c3 passing row becomes filtered": (
        [(1, 1, 5), (2, 1, -7)],
        [("insert", 5, 1), ("delete", 5, 2)],
        [("upsert", 5, 1), ("delete", None, 2)],
        [],
    ),
    # 3c4: old fails, new passes: {null -> new}, an insert of the new row
    "3c4 filtered row starts passing": (
        [(1, 1, -5), (2, 1, 7)],
        [("insert", 7, 2)],
        [("delete", None, 1), ("upsert", 7, 2)],
        [(1, 7)],
    ),
    # a tombstone for a key never seen: nothing with old values, the tombstone without
    "tombstone for a key never seen": (
        [(1, 9, None)],
        [],
        [("delete", None, 1)],
        [],
    ),
    "re-insert after a delete": (
        [(1, 1, 5), (2, 1, None), (3, 1, 6)],
        [("insert", 5, 1), ("delete", 5, 2), ("insert", 6, 3)],
        [("upsert", 5, 1), ("delete", None, 2), ("upsert", 6, 3)],
        [(1, 6)],
    ),
    "a NULL predicate counts as filtered": (
        [(1, 1, 5), (2, 1, NULL_V)],
        [("insert", 5, 1), ("delete", 5, 2)],
        [("upsert", 5, 1), ("delete", None, 2)],
        [],
    ),
}


KEYS_PER_CASE = 1000  # case i's key k is i * 1000 + k in the feed the cases share


def each_case(table, spark, path, shape, emit, **options):
    """Every case of ``table`` run as one feed: the output rows of each case, keys as written."""
    names = list(table)
    events = [(version, number * KEYS_PER_CASE + key, *rest)
              for number, name in enumerate(names) for version, key, *rest in table[name][0]]
    rows = {name: [] for name in names}
    for row in run_filter(path, spark, shape, events, emit=emit, **options):
        number, key = divmod(row["id"], KEYS_PER_CASE)
        rows[names[number]].append({**row, "id": key})
    return rows


@pytest.fixture(scope="module")
def outputs(spark):
    """each_case's rows, computed once per table, path, shape and emit mode for the module."""
    done = {}

    def of(table, path, shape, emit, **options):
        asked = (id(table), path, shape, emit, tuple(sorted(options.items())))
        if asked not in done:
            done[asked] = each_case(table, spark, path, shape, emit, **options)
        return done[asked]
    return of


@pytest.fixture(params=PATHS)
def path(request):
    return request.param


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("case", list(CASES))
def test_case_table(case, shape, path, outputs):
    events, changes, records, final = CASES[case]
    for emit, expected in (("changes", changes), ("records", records), ("final", final)):
        got = compact(outputs(CASES, path, shape, emit)[case], emit)
        assert got == expected, f"{case} / {shape} / {path} / emit => '{emit}'"


SEQUENCED = {
    # the change at version 2 is older (ts 5) than the key's latest (ts 10): ignored
    "stale update ignored": (
        [(1, 1, 5, 10), (2, 1, 7, 5)],
        [("insert", 5, 1)],
        [("upsert", 5, 1)],
        [(1, 5)],
    ),
    "stale delete ignored": (
        [(1, 1, 5, 10), (2, 1, None, 5)],
        [("insert", 5, 1)],
        [("upsert", 5, 1)],
        [(1, 5)],
    ),
    "newer change after a stale one applies": (
        [(1, 1, 5, 10), (2, 1, 7, 5), (3, 1, 9, 12)],
        [("insert", 5, 1), ("update_preimage", 5, 3), ("update_postimage", 9, 3)],
        [("upsert", 5, 1), ("upsert", 9, 3)],
        [(1, 9)],
    ),
    "equal timestamp is not stale": (
        [(1, 1, 5, 10), (2, 1, 7, 10)],
        [("insert", 5, 1), ("update_preimage", 5, 2), ("update_postimage", 7, 2)],
        [("upsert", 5, 1), ("upsert", 7, 2)],
        [(1, 7)],
    ),
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("case", list(SEQUENCED))
def test_sequence_by_ignores_stale_changes(case, shape, path, outputs):
    events, changes, records, final = SEQUENCED[case]
    for emit, expected in (("changes", changes), ("records", records), ("final", final)):
        got = compact(outputs(SEQUENCED, path, shape, emit, sequence_by="ts")[case], emit)
        assert got == expected, f"{case} / {shape} / {path} / emit => '{emit}'"


def test_records_keep_the_key_and_null_every_value(spark):
    rows = run_filter("native", spark, "cdf", [(1, 4, 5), (2, 4, -1)], emit="records")
    tombstone = [r for r in rows if r["_change_type"] == "delete"][0]
    assert tombstone == {"id": 4, "name": None, "v": None, "ts": None, "_change_type": "delete",
                         "_commit_version": 2}
    assert list(rows[0]) == ["id", "name", "v", "ts", "_change_type", "_commit_version"]


def test_changes_carry_all_data_columns_then_change_columns(spark):
    rows = run_filter("native", spark, "upsert", [(1, 4, 5)], emit="changes")
    assert list(rows[0]) == ["id", "name", "v", "ts", "_change_type", "_commit_version"]
    final = run_filter("native", spark, "upsert", [(1, 4, 5)], emit="final")
    assert list(final[0]) == ["id", "name", "v", "ts"]

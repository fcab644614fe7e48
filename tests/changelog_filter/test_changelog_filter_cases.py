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

from feeds import PATHS, SHAPES, compact, run_filter
from kafka_3902 import CASES, KEYS_PER_CASE, SEQUENCED



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

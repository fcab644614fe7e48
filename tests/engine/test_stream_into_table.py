"""Incremental runs into a catalog table (``sqlext.streaming.run_into_table``, what the dbt
adapter's incremental models over ``STREAM(...)`` use): the table holds, after every run,
exactly the batch result over everything that has landed so far; the checkpoint lives in the
table's folder; a table the runs did not write, or whose columns differ from the statement's,
is refused until a full refresh. The database's folder holds quotes, a backtick and
spaces (Spark's catalog refuses them in names), and its LOCATION is given in the test's storage
form (a plain path, a file:// URI, or a viewfs:// URI through a mount table)."""

from __future__ import annotations

from pathlib import Path

import pytest

from feeds import computed_on
from rows import multiset
from sqlext.api import sql as sqlext_sql
from sqlext.errors import SqlextError
from sqlext.streaming import CHECKPOINT_FOLDER, batch_form, reads_streams, run_into_table

# Spark's session catalog takes only letters, digits and _ in names; the folders hold the rest
DATABASE = "sx_into"
FEED = DATABASE + ".feed_1"
TARGET = "`sx_into`.`gold_feed`"
FOLDER = "gold_feed"
LOCATION = "ware house 'o\"dd`"  # (braces would be read as a Hadoop glob)
SCHEMA = "id INT, name STRING, tier STRING, _change_type STRING, _commit_version BIGINT"

GOLD = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(" + FEED + ")), key => 'id', "
        "predicate => \"tier = 'gold'\")")

LANDINGS = [
    [(1, "Ada", "gold", "insert", 1), (2, "Bob", "silver", "insert", 1), (3, "Cy", "gold", "insert", 1)],
    [(2, "Bob", "silver", "update_preimage", 2), (2, "Bob", "gold", "update_postimage", 2)],
    [(1, "Ada", "gold", "update_preimage", 3), (1, "Ada", "silver", "update_postimage", 3),
     (3, "Cy", "gold", "delete", 4)],
]


@pytest.fixture
def database(spark, tmp_path, storage):
    """The database, its LOCATION named in the storage form; the local path of its folder."""
    location = storage.uri(tmp_path / LOCATION).replace("\\", "\\\\").replace("'", "\\'")
    spark.sql(f"CREATE DATABASE {DATABASE} LOCATION '{location}'")
    spark.sql(f"CREATE TABLE {FEED} ({SCHEMA}) USING parquet")
    yield tmp_path / LOCATION
    spark.sql(f"DROP DATABASE {DATABASE} CASCADE")


def land(spark, rows):
    spark.createDataFrame(rows, SCHEMA).coalesce(1).write.insertInto(FEED)


def table_rows(spark, name):
    return multiset([r.asDict() for r in spark.table(name).collect()])


def table_dicts(spark, name):
    return [r.asDict() for r in spark.table(name).collect()]


def batch_rows(spark):
    return multiset([r.asDict() for r in sqlext_sql(spark, batch_form(GOLD)).collect()])


def test_each_run_leaves_the_table_equal_to_the_batch_result_so_far(spark, database):
    for rows in LANDINGS:
        land(spark, rows)
        run_into_table(spark, GOLD, TARGET)
        assert table_rows(spark, TARGET) == batch_rows(spark)
    assert sum(table_rows(spark, TARGET).values()) == 5  # 3 inserts, 2 deletes: nothing twice
    folder = database / FOLDER
    assert (folder / CHECKPOINT_FOLDER).is_dir()

    # nothing new: the table stays as it is; a full refresh rebuilds the same rows from the whole feed
    before = table_rows(spark, TARGET)
    run_into_table(spark, GOLD, TARGET)
    assert table_rows(spark, TARGET) == before
    run_into_table(spark, GOLD, TARGET, full_refresh=True)
    assert table_rows(spark, TARGET) == before


def test_a_table_the_runs_did_not_write_is_refused_until_a_full_refresh(spark, database):
    land(spark, LANDINGS[0])
    spark.sql(f"CREATE TABLE {TARGET} USING parquet AS {batch_form(GOLD)}")
    with pytest.raises(SqlextError, match=r"\[STREAM_TABLE_NOT_INCREMENTAL\]"):
        run_into_table(spark, GOLD, TARGET)
    run_into_table(spark, GOLD, TARGET, full_refresh=True)
    assert table_rows(spark, TARGET) == batch_rows(spark)


def test_a_statement_whose_columns_changed_is_refused_until_a_full_refresh(spark, database):
    land(spark, LANDINGS[0])
    run_into_table(spark, GOLD, TARGET)
    narrower = GOLD.replace("SELECT *", "SELECT id, tier")
    with pytest.raises(SqlextError, match=r"\[STREAM_TABLE_COLUMNS_DIFFER\].*id int, tier string"):
        run_into_table(spark, narrower, TARGET)
    run_into_table(spark, narrower, TARGET, full_refresh=True)
    assert [f.name for f in spark.table(TARGET).schema.fields] == ["id", "tier"]


def test_reads_streams_and_batch_form():
    assert reads_streams(GOLD) and not reads_streams(batch_form(GOLD))
    assert not reads_streams("SELECT * FROM t") and not reads_streams("this is not SQL (")
    assert "TABLE(" + FEED + ")" in batch_form(GOLD).replace("TABLE(", "TABLE(", 1)
    assert batch_form("SELECT s.a FROM STREAM(x) AS s") == "SELECT s.a FROM x AS s"


def test_a_table_name_that_does_not_parse_is_a_classed_error(spark):
    with pytest.raises(SqlextError, match=r"\[INVALID_ARGUMENT_TYPE\]"):
        run_into_table(spark, GOLD, "`unterminated")


def test_the_checkpoint_folder_is_invisible_to_readers_of_the_table(spark, database, storage):
    land(spark, LANDINGS[0])
    run_into_table(spark, GOLD, TARGET)
    folder = Path(database) / FOLDER
    assert any(folder.glob("batch-*")) and (folder / CHECKPOINT_FOLDER).is_dir()
    assert spark.read.parquet(storage.uri(folder)).count() == spark.table(TARGET).count() == 2


def test_a_recursion_runs_into_a_table_without_computing_the_whole_history(spark, database, monkeypatch):
    """The table's columns come from Spark's analysis of the statement, not from running the
    batch recursion (sqlext computes a recursion when it is read): only the incremental run
    computes anything."""
    from sqlext.recursion import paths as recursion

    edges = DATABASE + ".edges"
    spark.sql(f"CREATE TABLE {edges} (src INT, dst INT) USING parquet")
    reach = ("WITH RECURSIVE reach(src, dst) AS (SELECT src, dst FROM STREAM(" + edges + ") "
             "UNION SELECT r.src, e.dst FROM reach AS r JOIN STREAM(" + edges + ") AS e ON r.dst = e.src) "
             "SELECT * FROM reach")
    expansions = []
    original = recursion.expand
    monkeypatch.setattr(recursion, "expand", lambda *a, **k: expansions.append(1) or original(*a, **k))
    for landing in ([(1, 2), (2, 3)], [(3, 4), (7, 1)]):
        spark.createDataFrame(landing, "src int, dst int").coalesce(1).write.insertInto(edges)
        before = len(expansions)
        with computed_on(spark, "spark"):  # where the run's recursion is a Spark query, which counts it
            run_into_table(spark, reach, TARGET)
        assert len(expansions) - before == 1  # the run's own recursion from its seeds, no batch one
    assert [f.name for f in spark.table(TARGET).schema.fields] == ["src", "dst"]
    assert table_rows(spark, TARGET) == multiset([r.asDict() for r in sqlext_sql(spark, batch_form(reach)).collect()])
    assert sum(table_rows(spark, TARGET).values()) == 10  # 1-2 1-3 1-4 2-3 2-4 3-4 7-1 7-2 7-3 7-4


def test_a_recursion_over_a_change_feed_of_edges_appends_its_changes(spark, database):
    """Over edges that can be deleted, the table holds the recursion's change feed: its
    columns end with the change columns, and its inserts less its deletes are the batch
    recursion over the edges present."""
    edges = DATABASE + ".edge_changes"
    spark.sql(f"CREATE TABLE {edges} (src INT, dst INT, _change_type STRING, _commit_version BIGINT) USING parquet")
    reach = ("WITH RECURSIVE reach(src, dst) AS (SELECT src, dst FROM STREAM(" + edges + ") "
             "UNION SELECT r.src, e.dst FROM reach AS r JOIN STREAM(" + edges + ") AS e ON r.dst = e.src) "
             "SELECT * FROM reach")
    for landing in ([(1, 2, "insert", 1), (2, 3, "insert", 1)], [(2, 3, "delete", 2), (3, 4, "insert", 2)]):
        spark.createDataFrame(landing, "src int, dst int, _change_type string, _commit_version bigint") \
            .coalesce(1).write.insertInto(edges)
        run_into_table(spark, reach, TARGET)
    assert [f.name for f in spark.table(TARGET).schema.fields] == ["src", "dst", "_change_type", "_commit_version"]
    rows = spark.table(TARGET).collect()
    applied = multiset([(r.src, r.dst) for r in rows if r._change_type == "insert"])
    applied.subtract(multiset([(r.src, r.dst) for r in rows if r._change_type == "delete"]))
    assert +applied == multiset([(1, 2), (3, 4)])
    assert sorted((r.src, r.dst, r._change_type, r._commit_version) for r in rows if r._commit_version == 2) == [
        (1, 3, "delete", 2), (2, 3, "delete", 2), (3, 4, "insert", 2)]


def test_emit_final_keeps_the_table_equal_to_the_batch_final_table(spark, database):
    """With emit => 'final' each run rewrites the table as the final table, not appending."""
    final = GOLD[:-1] + ", emit => 'final')"
    for landing in LANDINGS:
        land(spark, landing)
        run_into_table(spark, final, TARGET)
        expected = [r.asDict() for r in sqlext_sql(spark, batch_form(final)).collect()]
        assert table_rows(spark, TARGET) == multiset(expected)
    assert "_change_type" not in spark.table(TARGET).columns


def test_chained_tables_run_by_run_equal_the_batch_chain(spark, database):
    """Tables that read each other's change feeds (what chained dbt incremental models do): a
    filtered feed, its join to the branches, and the regions' totals over that join's final
    table. After every landing and one run of each in order, the last table is the batch
    statement over everything landed, and every run reads only what is new."""
    accounts, branches = DATABASE + ".accounts", DATABASE + ".branches"
    spark.sql(f"CREATE TABLE {accounts} (id BIGINT, branch BIGINT, balance BIGINT, _change_type STRING, "
              "_commit_version BIGINT) USING parquet")
    spark.sql(f"CREATE TABLE {branches} (bid BIGINT, region STRING, _change_type STRING, "
              "_commit_version BIGINT) USING parquet")
    models = [
        (DATABASE + ".credit", "SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(" + accounts + ")), key => 'id', "
                               "predicate => 'balance >= 0')"),
        (DATABASE + ".credit_by_branch", "SELECT * FROM FK_JOIN(left => TABLE(STREAM(" + DATABASE + ".credit)), "
                                         "right => TABLE(STREAM(" + branches + ")), left_key => 'id', "
                                         "foreign_key => 'branch', right_key => 'bid')"),
        (DATABASE + ".region_totals", "SELECT region, COUNT(*) AS n, SUM(balance) AS total FROM CHANGELOG_FILTER("
                                      "input => TABLE(STREAM(" + DATABASE + ".credit_by_branch)), key => 'id', "
                                      "predicate => 'true', emit => 'final') GROUP BY region"),
    ]
    landings = [
        ([(10, 1, 5, "insert", 2), (11, 2, -1, "insert", 2)], [(1, "north", "insert", 1), (2, "south", "insert", 1)]),
        ([(11, 2, -1, "update_preimage", 3), (11, 2, 7, "update_postimage", 3)],
         [(1, "north", "update_preimage", 4), (1, "south", "update_postimage", 4)]),
        ([(10, 1, 5, "delete", 5), (12, 1, 3, "insert", 6)], []),
    ]
    schema = {accounts: "id BIGINT, branch BIGINT, balance BIGINT, _change_type STRING, _commit_version BIGINT",
              branches: "bid BIGINT, region STRING, _change_type STRING, _commit_version BIGINT"}
    # the whole chain as one batch statement over the landed tables
    whole = ("SELECT region, COUNT(*) AS n, SUM(balance) AS total FROM CHANGELOG_FILTER(input => TABLE(FK_JOIN("
             "left => TABLE(CHANGELOG_FILTER(input => TABLE(" + accounts + "), key => 'id', predicate => 'balance >= 0'"
             ")), right => TABLE(" + branches + "), left_key => 'id', foreign_key => 'branch', right_key => 'bid')), "
             "key => 'id', predicate => 'true', emit => 'final') GROUP BY region")
    for account_rows, branch_rows in landings:
        for table, rows in ((accounts, account_rows), (branches, branch_rows)):
            if rows:
                spark.createDataFrame(rows, schema[table]).coalesce(1).write.insertInto(table)
        for name, sql in models:
            run_into_table(spark, sql, name)
        assert table_rows(spark, models[-1][0]) == multiset([r.asDict() for r in sqlext_sql(spark, whole).collect()])
    assert table_rows(spark, models[-1][0]) == multiset([{"region": "south", "n": 2, "total": 10}])


EDGES = [("src", "INT"), ("dst", "INT")]
# three landings of edge changes in Delta's shape: a chain, a node that moves, an edge deleted
EDGE_LANDINGS = [
    [(1, 2, "insert", 1), (2, 3, "insert", 1)],
    [(2, 3, "update_preimage", 2), (2, 4, "update_postimage", 2), (4, 5, "insert", 2)],
    [(1, 2, "delete", 3)],
]


def _reach(stream):
    return ("WITH RECURSIVE reach(src, dst) AS (SELECT src, dst FROM " + stream + " "
            "UNION SELECT r.src, e.dst FROM reach AS r JOIN " + stream + " AS e ON r.dst = e.src) "
            "SELECT r2.dst AS `to`, r2.src FROM reach AS r2 WHERE r2.src <> 9")


@pytest.mark.parametrize("shape", ["debezium", "iceberg"])
def test_a_recursion_over_edges_in_another_shape_runs_into_a_table_of_the_columns_its_runs_write(spark, database,
                                                                                                storage, shape):
    """``STREAM(edges, format => ...)`` run into a table: the table's columns are those the
    runs write (the outer query's, then the change columns, the ordering column named as the
    shape's change rows name it), not the envelope's; and run by run the table holds the rows
    the same changes give in Delta's shape."""
    from change_shapes import ORDER_IN, as_delta, in_shape, quoted

    shaped, delta = DATABASE + ".shaped_edges", DATABASE + ".delta_edges"
    spark.sql(f"CREATE TABLE {shaped} ({in_shape(shape, [], EDGES)[1]}) USING parquet")
    spark.sql(f"CREATE TABLE {delta} ({', '.join(quoted(n) + ' ' + k for n, k in EDGES)}, _change_type STRING, "
              "_commit_version BIGINT) USING parquet")
    target, delta_target = DATABASE + ".reach_shaped", DATABASE + ".reach_delta"
    sql = _reach(f"STREAM({shaped}, format => '{shape}')")
    for landing in EDGE_LANDINGS:
        rows = [{"src": s, "dst": d, "_change_type": k, "_commit_version": v} for s, d, k, v in landing]
        spark.createDataFrame([r for _, r in in_shape(shape, rows, EDGES)[0]], in_shape(shape, [], EDGES)[1]) \
            .coalesce(1).write.insertInto(shaped)
        spark.createDataFrame(landing, "src int, dst int, _change_type string, _commit_version bigint") \
            .coalesce(1).write.insertInto(delta)
        run_into_table(spark, sql, target)
        run_into_table(spark, _reach(f"STREAM({delta})"), delta_target)
        written = spark.read.parquet(storage.uri(database / "reach_shaped")).schema
        assert [(f.name, f.dataType) for f in spark.table(target).schema.fields] == \
            [(f.name, f.dataType) for f in written.fields]
        assert multiset(as_delta(table_dicts(spark, target), shape)) == table_rows(spark, delta_target)
    assert spark.table(target).columns == ["to", "src", "_change_type", ORDER_IN[shape]]
    rows = spark.table(target).collect()
    applied = multiset([(r.src, r.to) for r in rows if r._change_type == "insert"])
    applied.subtract(multiset([(r.src, r.to) for r in rows if r._change_type == "delete"]))
    assert +applied == multiset([(2, 4), (2, 5), (4, 5)])


def test_a_recursion_over_a_stream_ordered_by_its_own_column_runs_into_a_table(spark, database):
    """``STREAM(edges, order_by => 'se q')`` over change rows: the table carries that column."""
    edges = DATABASE + ".seq_edges"
    spark.sql(f"CREATE TABLE {edges} (src INT, dst INT, _change_type STRING, `se q` BIGINT) USING parquet")
    spark.createDataFrame([(1, 2, "insert", 7), (2, 3, "insert", 8)],
                          "src int, dst int, _change_type string, `se q` bigint").coalesce(1).write.insertInto(edges)
    run_into_table(spark, _reach(f"STREAM({edges}, order_by => '`se q`')"), TARGET)
    assert spark.table(TARGET).columns == ["to", "src", "_change_type", "se q"]
    assert sorted(tuple(r) for r in spark.table(TARGET).collect()) == [
        (2, 1, "insert", 8), (3, 1, "insert", 8), (3, 2, "insert", 8)]


def test_a_call_over_a_debezium_stream_runs_into_a_table_of_its_change_rows(spark, database):
    """``TABLE(STREAM(feed, format => 'debezium'))`` in a CHANGELOG_FILTER run into a table:
    its columns are the change rows' (``source_lsn``), and run by run it holds what the Delta
    shape's feed gives."""
    from change_shapes import as_delta, in_shape

    data = [("id", "INT"), ("name", "STRING"), ("tier", "STRING")]
    shaped = DATABASE + ".feed_debezium"
    spark.sql(f"CREATE TABLE {shaped} ({in_shape('debezium', [], data)[1]}) USING parquet")
    sql = GOLD.replace("STREAM(" + FEED + ")", "STREAM(" + shaped + ", format => 'debezium')")
    for landing in LANDINGS:
        land(spark, landing)
        rows = [dict(zip(["id", "name", "tier", "_change_type", "_commit_version"], r)) for r in landing]
        spark.createDataFrame([r for _, r in in_shape("debezium", rows, data)[0]], in_shape("debezium", [], data)[1]) \
            .coalesce(1).write.insertInto(shaped)
        run_into_table(spark, sql, TARGET)
        assert multiset(as_delta(table_dicts(spark, TARGET), "debezium")) == batch_rows(spark)
    assert spark.table(TARGET).columns == ["id", "name", "tier", "_change_type", "source_lsn"]


def _event(key: int, name: str, lsn: int) -> str:
    """A Debezium event creating a row, as a topic's JSON file holds it (one per line)."""
    import json

    return json.dumps({"before": None, "after": {"id": key, "name": name}, "op": "c", "ts_ms": lsn,
                       "source": {"lsn": lsn}})


def test_a_folder_source_runs_into_a_table_with_its_settings(spark, database, tmp_path):
    """Folders of change files run into a table with stream()'s per-source settings (what a dbt
    model's ``sqlext_sources`` config gives): the table's columns come from the folder as a run
    reads it (the declared row inside a Debezium envelope, as change rows), before any run. A
    bad line stops a strict run naming its file and line, and the table keeps its rows; with
    the quarantine the run reads the others, the record lands in the checkpoint in the table's
    folder, and the run returns how many it set aside; the next run appends exactly the new rows."""
    from sqlext.streaming.bad_records import QUARANTINE_FOLDER

    topic = tmp_path / "landing" / "customers"
    topic.mkdir(parents=True)
    sql = ("SELECT id, name, source_lsn FROM CHANGELOG_FILTER(input => TABLE(STREAM(customers, "
           "format => 'debezium')), key => 'id', predicate => 'true')")
    settings = dict(sources={"customers": str(topic)}, source_format="json",
                    schemas={"customers": "id BIGINT, name STRING"})

    def rows():
        return sorted(tuple(r) for r in spark.table(TARGET).collect())

    (topic / "part-1.json").write_text(_event(1, "Ada", 10) + "\n")
    with pytest.raises(SqlextError, match=r"\[UNKNOWN_SOURCE\].*customers"):  # a misspelt name, named
        run_into_table(spark, sql.replace("STREAM(customers", "STREAM(customer"), TARGET, **settings)
    assert run_into_table(spark, sql, TARGET, **settings) == 0  # nothing quarantined
    assert spark.table(TARGET).columns == ["id", "name", "source_lsn"] and rows() == [(1, "Ada", 10)]

    (topic / "part-2.json").write_text(_event(2, "Bob", 20) + "\n" + _event(3, "Cy", 30)[:-9] + "\n"
                                       + _event(4, "Dee", 40) + "\n")
    with pytest.raises(SqlextError, match=r"\[BAD_RECORD\].*line 2 of \S*part-2\.json"):
        run_into_table(spark, sql, TARGET, **settings)
    assert rows() == [(1, "Ada", 10)]

    assert run_into_table(spark, sql, TARGET, **settings, bad_records={"customers": "quarantine"}) == 1
    assert rows() == [(1, "Ada", 10), (2, "Bob", 20), (4, "Dee", 40)]
    quarantine = spark.read.parquet(str(database / FOLDER / CHECKPOINT_FOLDER / QUARANTINE_FOLDER)).collect()
    assert [(r.source, r.line, r.file.endswith("part-2.json")) for r in quarantine] == [("customers", 2, True)]

    (topic / "part-3.json").write_text(_event(5, "Eve", 50) + "\n")
    assert run_into_table(spark, sql, TARGET, **settings, bad_records={"customers": "quarantine"}) == 0
    assert rows() == [(1, "Ada", 10), (2, "Bob", 20), (4, "Dee", 40), (5, "Eve", 50)]


def test_a_delta_table_given_as_a_folder_runs_into_a_table(spark, database, tmp_path):
    """A folder that holds a Delta table (what a dbt model's ``sqlext_sources`` path may name):
    the table's columns are its change rows', learned from the table's log before the first run
    (which stages the commits in its checkpoint), and each run appends what the new commits
    changed."""
    import delta_tables

    ddl = "id BIGINT, balance BIGINT"
    path = tmp_path / "landing" / "accounts"
    delta_tables.create(path, ddl)
    delta_tables.commit(path, ddl, "id", [{"id": 1, "balance": 10, "_change_type": "insert"},
                                          {"id": 2, "balance": -5, "_change_type": "insert"}])
    sql = "SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(accounts)), key => 'id', predicate => 'balance >= 0')"
    run_into_table(spark, sql, TARGET, sources={"accounts": str(path)})
    assert spark.table(TARGET).columns == ["id", "balance", "_change_type", "_commit_version"]
    delta_tables.commit(path, ddl, "id", [{"id": 2, "balance": 7, "_change_type": "update_postimage"}])
    run_into_table(spark, sql, TARGET, sources={"accounts": str(path)})
    assert sorted(tuple(r) for r in spark.table(TARGET).collect()) == [(1, 10, "insert", 1), (2, 7, "insert", 2)]

"""A folder source's columns changing between runs, as each source's schema evolution allows:
refused by default, naming the column and the file; with ``add_columns`` a new column is read
(NULL in the rows of files written before it) and the state and the output gain it; with
``widen_types`` a column widens (INT to BIGINT, FLOAT to DOUBLE, a wider DECIMAL). After every
run the output equals the batch statement over every file read at the evolved columns."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

import sqlext
from rows import multiset
from sqlext.errors import SqlextError
from sqlext.storage import resolve
from sqlext.streaming import run_available_now
from sqlext.streaming.checkpoint import output_columns

FILTER = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(accounts)), key => 'id', "
          "predicate => 'balance >= 0')")
FINAL = FILTER[:-1] + ", emit => 'final')"
FK = ("SELECT * FROM FK_JOIN(left => TABLE(STREAM(accounts)), right => TABLE(STREAM(branches)), "
      "left_key => 'id', foreign_key => 'branch', right_key => 'branch')")
BASE = [("id", pa.int64()), ("balance", pa.int32()), ("branch", pa.int64()), ("_change_type", pa.string()),
        ("_commit_version", pa.int64())]


def write(folder, name: str, rows: list[dict], fields) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    schema = pa.schema(fields)
    pq.write_table(pa.table({f.name: pa.array([r.get(f.name) for r in rows], f.type) for f in schema},
                            schema=schema), folder / name)


def change(key, balance, kind, version, branch=0, **more) -> dict:
    return dict(id=key, balance=balance, branch=branch, _change_type=kind, _commit_version=version, **more)


class Runs:
    """One statement's incremental runs over a folder of accounts (and one of branches)."""

    def __init__(self, spark, root, statement: str, evolution: str | None = None):
        self.spark, self.root, self.statement = spark, root, statement
        self.accounts, self.branches = root / "accounts", root / "branches"
        self.options = dict(sources={"accounts": str(self.accounts), "branches": str(self.branches)},
                            checkpoint=str(root / "cp"), output=str(root / "out"))
        if evolution is not None:
            self.options["schema_evolution"] = {"accounts": evolution, "branches": evolution}
        write(self.branches, "b0.parquet", [dict(branch=0, city="Oslo", _commit_version=0),
                                            dict(branch=1, city="Rome", _commit_version=0)],
              [("branch", pa.int64()), ("city", pa.string()), ("_commit_version", pa.int64())])

    def run(self, **more):
        return run_available_now(self.spark, self.statement, **{**self.options, **more})

    def rows(self) -> list[dict]:
        columns = output_columns(resolve(self.spark, self.options["checkpoint"]))
        return [r.asDict() for r in self.spark.read.schema(columns).parquet(self.options["output"]).collect()]

    def output(self):
        return multiset(self.rows())

    def batch(self):
        """The batch statement over every file, each source read at the run's columns."""
        statement = self.statement
        recorded = (resolve(self.spark, self.options["checkpoint"]) / "sqlext-sources.json").read_json()
        for name, folder in (("accounts", self.accounts), ("branches", self.branches)):
            entry = recorded.get(f"STREAM({name})")
            if entry is None:
                continue
            columns = entry if isinstance(entry, list) else entry["columns"]
            view = f"evolved_{name}_{abs(hash(str(self.root))) % 10_000_000}"
            self.spark.read.schema(", ".join(f"`{n}` {t}" for n, t in columns)).parquet(str(folder)) \
                .createOrReplaceTempView(view)
            statement = statement.replace(f"STREAM({name})", view)
        return multiset(r.asDict() for r in sqlext.sql(self.spark, statement).collect())


def refused(run) -> SqlextError:
    with pytest.raises(SqlextError) as raised:
        run()
    return raised.value


def test_a_new_column_is_refused_by_default_and_read_when_the_source_adds_columns(spark, tmp_path):
    runs = Runs(spark, tmp_path, FILTER)
    write(runs.accounts, "a.parquet", [change(1, 5, "insert", 1), change(2, 7, "insert", 1)], BASE)
    runs.run()
    with_currency = BASE + [("currency", pa.string())]
    write(runs.accounts, "b.parquet", [change(1, 5, "update_preimage", 2), change(1, 9, "update_postimage", 2,
                                                                                    currency="EUR"),
                                       change(3, 4, "insert", 2, currency="NOK")], with_currency)
    error = refused(runs.run)
    assert error.error_class == "STREAM_SCHEMA_CHANGED"
    assert "currency was added" in str(error) and "b.parquet" in str(error) and "--schema-evolution" in str(error)
    runs.run(schema_evolution={"accounts": "add_columns"})
    assert runs.output() == runs.batch()
    seen = {(r["id"], r["_change_type"], r["currency"]) for r in runs.rows()}
    assert {(1, "insert", None), (2, "insert", None), (1, "update_postimage", "EUR"), (3, "insert", "NOK")} <= seen
    # a file written before the column (as an old writer still writes) reads NULL there
    write(runs.accounts, "c.parquet", [change(2, 8, "update_preimage", 3), change(2, 8, "update_postimage", 3)], BASE)
    runs.run(schema_evolution={"accounts": "add_columns"})
    assert runs.output() == runs.batch()
    # a column the source had from the start may not go missing, whatever the mode
    write(runs.accounts, "d.parquet", [dict(id=3, branch=0, _change_type="delete", _commit_version=4)],
          [f for f in BASE if f[0] != "balance"])
    error = refused(lambda: runs.run(schema_evolution={"accounts": "evolve"}))
    assert error.error_class == "SOURCE_FILE_MISSING_COLUMN" and "d.parquet" in str(error)


def test_a_widened_column_is_read_at_the_wider_type_and_the_output_widens(spark, tmp_path):
    runs = Runs(spark, tmp_path, FILTER)
    write(runs.accounts, "a.parquet", [change(1, 5, "insert", 1), change(2, 7, "insert", 1)], BASE)
    runs.run()
    wide = [("balance", pa.int64()) if n == "balance" else (n, t) for n, t in BASE]
    write(runs.accounts, "b.parquet", [change(1, 5, "update_preimage", 2), change(1, 2 ** 40, "update_postimage", 2)],
          wide)
    error = refused(lambda: runs.run(schema_evolution={"accounts": "add_columns"}))
    assert error.error_class == "STREAM_SCHEMA_CHANGED" and "balance" in str(error)
    runs.run(schema_evolution={"accounts": "widen_types"})
    assert runs.output() == runs.batch()
    assert output_columns(resolve(spark, runs.options["checkpoint"]))["balance"].dataType.simpleString() == "bigint"
    assert max(r["balance"] for r in runs.rows()) == 2 ** 40
    # a narrowing is never a widening
    write(runs.accounts, "c.parquet", [change(3, 1, "insert", 3)],
          [("balance", pa.int16()) if n == "balance" else (n, t) for n, t in BASE])
    runs.run(schema_evolution={"accounts": "widen_types"})  # an older, narrower file reads as the wider type
    assert runs.output() == runs.batch()
    write(runs.accounts, "d.parquet", [change(4, "1", "insert", 4)],
          [("balance", pa.string()) if n == "balance" else (n, t) for n, t in BASE])
    error = refused(lambda: runs.run(schema_evolution={"accounts": "evolve"}))
    assert error.error_class == "STREAM_SCHEMA_CHANGED" and "d.parquet" in str(error)


def test_first_run_over_files_of_growing_columns(spark, tmp_path):
    """The first run meets files of both shapes: with add_columns the older files' rows read
    NULL in the new column; a column every file holds may not go missing later."""
    runs = Runs(spark, tmp_path, FILTER, evolution="evolve")
    write(runs.accounts, "a.parquet", [change(1, 5, "insert", 1)], BASE)
    write(runs.accounts, "b.parquet", [change(2, 6, "insert", 2, note="x")], BASE + [("note", pa.string())])
    wide = [("balance", pa.int64()) if n == "balance" else (n, t) for n, t in BASE]
    write(runs.accounts, "c.parquet", [change(3, 2 ** 35, "insert", 3)], wide)
    runs.run()
    assert runs.output() == runs.batch()
    assert {r["id"]: r["note"] for r in runs.rows()} == {1: None, 2: "x", 3: None}


def test_fk_join_state_gains_the_columns_of_both_sides(spark, tmp_path):
    runs = Runs(spark, tmp_path, FK, evolution="evolve")
    write(runs.accounts, "a.parquet", [change(1, 5, "insert", 1, branch=0), change(2, 6, "insert", 1, branch=1)], BASE)
    runs.run()
    assert runs.output() == runs.batch()
    # the right side gains a column: every left row it joins is emitted again with it
    write(runs.branches, "b1.parquet", [dict(branch=0, city="Oslo", _commit_version=2, country="NO")],
          [("branch", pa.int64()), ("city", pa.string()), ("_commit_version", pa.int64()), ("country", pa.string())])
    write(runs.accounts, "b.parquet", [change(3, 1, "insert", 3, branch=0, tier=2)], BASE + [("tier", pa.int32())])
    runs.run()
    assert runs.output() == runs.batch()
    # the left side widens a column, and an old left row moves to another branch
    wide = [("balance", pa.int64()) if n == "balance" else (n, t) for n, t in BASE] + [("tier", pa.int64())]
    write(runs.accounts, "c.parquet", [change(2, 6, "update_preimage", 4, branch=1),
                                       change(2, 2 ** 33, "update_postimage", 4, branch=0, tier=7)], wide)
    runs.run()
    assert runs.output() == runs.batch()


def test_emit_final_rewrites_the_table_with_the_new_column(spark, tmp_path):
    runs = Runs(spark, tmp_path, FINAL, evolution="add_columns")
    write(runs.accounts, "a.parquet", [change(1, 5, "insert", 1), change(2, 7, "insert", 1)], BASE)
    runs.run()
    write(runs.accounts, "b.parquet", [change(3, 4, "insert", 2, currency="NOK")], BASE + [("currency", pa.string())])
    runs.run()
    assert runs.output() == runs.batch()
    table = pd.read_parquet(tmp_path / "out")  # one file, the whole table: a reader outside Spark sees the column
    assert sorted(table["id"]) == [1, 2, 3] and "currency" in table.columns


def test_a_forgotten_batch_forgets_the_columns_it_accepted(spark, tmp_path):
    """A run that accepted a new column but failed on its input: once the file that brought the
    column is gone, the next run does not find the column dropped."""
    runs = Runs(spark, tmp_path, FILTER, evolution="add_columns")
    write(runs.accounts, "a.parquet", [change(1, 5, "insert", 1)], BASE)
    runs.run()
    write(runs.accounts, "b.parquet", [change(2, 6, "insert", 2, note="x")], BASE + [("note", pa.string())])
    write(runs.accounts, "c.parquet", [change(3, 6, "insrt", 2)], BASE)
    assert refused(runs.run).error_class == "UNKNOWN_CHANGE_TYPE"
    (runs.accounts / "b.parquet").unlink()
    write(runs.accounts, "c.parquet", [change(3, 6, "insert", 2)], BASE)
    runs.run(schema_evolution={})  # the default mode: no column was ever accepted
    assert runs.output() == runs.batch()


def test_a_delta_output_gains_the_column_and_refuses_a_widening(spark, tmp_path):
    deltalake = pytest.importorskip("deltalake")
    runs = Runs(spark, tmp_path, FILTER, evolution="evolve")
    runs.options["output_format"] = "delta"
    write(runs.accounts, "a.parquet", [change(1, 5, "insert", 1)], BASE)
    runs.run()
    write(runs.accounts, "b.parquet", [change(2, 6, "insert", 2, note="x")], BASE + [("note", pa.string())])
    runs.run()
    table = deltalake.DeltaTable(str(tmp_path / "out")).to_pandas()
    assert sorted(zip(table["id"], table["note"].fillna("-"))) == [(1, "-"), (2, "x")]
    wide = [("balance", pa.int64()) if n == "balance" else (n, t) for n, t in BASE] + [("note", pa.string())]
    write(runs.accounts, "c.parquet", [change(3, 6, "insert", 3)], wide)
    error = refused(runs.run)
    assert error.error_class == "UNSUPPORTED_STREAM" and "balance" in str(error)


def test_an_unknown_mode_is_refused(spark, tmp_path):
    runs = Runs(spark, tmp_path, FILTER)
    error = refused(lambda: runs.run(schema_evolution={"accounts": "merge"}))
    assert error.error_class == "INVALID_ARGUMENT_TYPE" and "'merge'" in str(error) and "add_columns" in str(error)


@st.composite
def histories(draw):
    """Runs of changes to a few accounts; at some runs the files gain a column or widen one."""
    present: dict[int, int] = {}
    version, runs = 0, []
    fields = list(BASE)
    for number in range(draw(st.integers(2, 4))):
        step = draw(st.sampled_from(["same", "add", "widen"]))
        if step == "add":
            fields = fields + [(f"c{number}", pa.string())]
        elif step == "widen" and fields[1][1] == pa.int32():
            fields = [fields[0], ("balance", pa.int64())] + fields[2:]
        changes = []
        for key in draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)):
            version += 1
            extra = {name: f"v{version}" for name, _ in fields[len(BASE):]}
            balance = draw(st.integers(-3, 9))
            if key not in present:
                changes.append(change(key, balance, "insert", version, **extra))
                present[key] = balance
            elif draw(st.booleans()):
                changes.append(change(key, present.pop(key), "delete", version, **extra))
            else:
                changes += [change(key, present[key], "update_preimage", version, **extra),
                            change(key, balance, "update_postimage", version, **extra)]
                present[key] = balance
        runs.append((list(fields), changes))
    return runs


@pytest.mark.spark
@pytest.mark.parametrize("statement", [FILTER, FK], ids=["filter", "fk_join"])
@settings(max_examples=examples(2, 20), suppress_health_check=list(HealthCheck), deadline=None)
@given(history=histories())
def test_evolving_files_give_the_batch_result_after_every_run(spark, tmp_path_factory, statement, history):
    runs = Runs(spark, tmp_path_factory.mktemp("evolve"), statement, evolution="evolve")
    for number, (fields, changes) in enumerate(history):
        write(runs.accounts, f"run-{number}.parquet", changes, fields)
        runs.run()
        assert runs.output() == runs.batch()


def test_a_json_field_that_appears_is_a_new_column_of_an_inferred_source(spark, tmp_path):
    import json

    folder = tmp_path / "accounts"
    folder.mkdir()
    (folder / "a.json").write_text("\n".join(json.dumps(change(k, 5, "insert", 1)) for k in (1, 2)) + "\n")
    options = dict(sources={"accounts": str(folder)}, source_format="json", checkpoint=str(tmp_path / "cp"),
                   output=str(tmp_path / "out"))
    run_available_now(spark, FILTER, **options)
    (folder / "b.json").write_text(json.dumps(change(3, 4, "insert", 2, currency="NOK")) + "\n")
    error = refused(lambda: run_available_now(spark, FILTER, **options))
    assert error.error_class == "STREAM_SCHEMA_CHANGED" and "currency was added" in str(error)
    run_available_now(spark, FILTER, schema_evolution={"accounts": "add_columns"}, **options)
    out = spark.read.option("mergeSchema", "true").parquet(str(tmp_path / "out"))
    assert sorted((r["id"], r["currency"]) for r in out.collect()) == [(1, None), (2, None), (3, "NOK")]


def test_a_catalog_table_gains_the_column_and_refuses_a_widening(spark, tmp_path):
    """What a dbt model's table does: a column a source gained is added to the table once the
    run wrote its rows; a wider type is refused before anything is read."""
    from sqlext.streaming import run_into_table

    accounts = tmp_path / "accounts"
    spark.sql("CREATE DATABASE evolving LOCATION " + "'" + str(tmp_path / "wh").replace("'", "\\'") + "'")
    try:
        settings = dict(sources={"accounts": str(accounts)}, schema_evolution={"accounts": "evolve"})
        write(accounts, "a.parquet", [change(1, 5, "insert", 1)], BASE)
        run_into_table(spark, FILTER, "evolving.filtered", **settings)
        write(accounts, "b.parquet", [change(2, 6, "insert", 2, note="x")], BASE + [("note", pa.string())])
        run_into_table(spark, FILTER, "evolving.filtered", **settings)
        table = spark.table("evolving.filtered")
        assert table.schema.names[-1] == "note"
        assert sorted((r["id"], r["note"]) for r in table.collect()) == [(1, None), (2, "x")]
        write(accounts, "c.parquet", [change(3, 7, "insert", 3)], BASE + [("note", pa.string())])
        run_into_table(spark, FILTER, "evolving.filtered", **settings)  # the table holds the column now
        assert spark.table("evolving.filtered").count() == 3
        wide = [("balance", pa.int64()) if n == "balance" else (n, t) for n, t in BASE]
        write(accounts, "d.parquet", [change(4, 2 ** 40, "insert", 4)], wide)
        with pytest.raises(SqlextError) as raised:
            run_into_table(spark, FILTER, "evolving.filtered", **settings)
        assert raised.value.error_class == "STREAM_TABLE_COLUMNS_DIFFER" and "balance" in str(raised.value)
        assert spark.table("evolving.filtered").count() == 3
    finally:
        spark.sql("DROP DATABASE evolving CASCADE")

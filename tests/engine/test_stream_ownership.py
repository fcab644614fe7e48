"""A checkpoint and its output folder belong to one statement: a run of another statement,
emit mode, key or output columns on them is refused before anything is read or written, and
every file an earlier run wrote stays as it was. Also: what an incremental run refuses says
what is missing, and a folder source can be declared before it holds a file."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from sqlext.errors import SqlextError
from sqlext.streaming import run_available_now, run_into_table, stream

FILTER = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(acc)), key => 'id', "
          "predicate => 'balance >= 0', emit => 'changes')")


def files(*folders: Path) -> dict[str, str]:
    """Every file under the folders, with a digest of its bytes."""
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
            for folder in folders for p in sorted(folder.rglob("*")) if p.is_file()}


class Root:
    """The test's folder: ``root / name`` is a local path to look at files, ``root.uri(name)``
    names the same folder to sqlext and Spark in the test's storage form."""

    def __init__(self, path: Path, storage):
        self.path, self.storage = path, storage

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def uri(self, name: str) -> str:
        return self.storage.uri(self.path / name)


@pytest.fixture
def acc(spark, tmp_path, storage):
    """A folder of account changes with one file, the run's checkpoint and output folders."""
    root = Root(tmp_path, storage)
    spark.createDataFrame(
        [(1, 10, "insert", 1), (2, -5, "insert", 2), (1, 20, "update_postimage", 3)],
        "id BIGINT, balance BIGINT, _change_type STRING, _commit_version BIGINT",
    ).coalesce(1).write.parquet(root.uri("acc"))
    return root


def run(spark, root: Root, sql: str, output: str = "out", checkpoint: str = "cp", **options):
    run_available_now(spark, sql, checkpoint=root.uri(checkpoint), output=root.uri(output),
                      sources={"acc": root.uri("acc")}, **options)


@pytest.mark.parametrize("changed, difference", [
    # the repro: another emit mode, predicate and select list
    (FILTER.replace("SELECT *", "SELECT id, balance").replace("'changes'", "'final'")
     .replace("balance >= 0", "balance > 5"), "emit"),
    (FILTER.replace("balance >= 0", "balance > 5"), "statement"),
    (FILTER.replace("key => 'id'", "key => 'balance'"), "key => 'balance'"),
    (FILTER.replace("SELECT *", "SELECT id, balance"), "statement"),
])
def test_another_statement_on_a_checkpoint_is_refused_and_nothing_written_changes(spark, acc, changed, difference):
    run(spark, acc, FILTER)
    before = files(acc / "cp", acc / "out")
    with pytest.raises(SqlextError) as raised:
        run(spark, acc, changed)
    assert raised.value.error_class == "STREAM_CHECKPOINT_MISMATCH"
    assert difference in str(raised.value) and acc.storage.qualified(acc / "cp") in str(raised.value)
    assert files(acc / "cp", acc / "out") == before


def test_the_same_statement_written_differently_runs_on(spark, acc):
    run(spark, acc, FILTER)
    spark.createDataFrame([(2, 7, "update_postimage", 4)],
                          "id BIGINT, balance BIGINT, _change_type STRING, _commit_version BIGINT") \
        .write.mode("append").parquet(acc.uri("acc"))
    respelt = "-- the same filter\n" + FILTER.replace("SELECT * FROM", "select *\n  from").replace(", key", ",\n key")
    run(spark, acc, respelt)
    rows = sorted(tuple(r) for r in spark.read.parquet(acc.uri("out")).collect())
    assert (2, 7, "insert", 4) in rows


def test_output_columns_that_change_under_the_same_text_are_refused(spark, acc):
    """The statement joins a view whose columns change between runs: the output's columns
    would change under the same text, so the second run is refused before writing."""
    sql = ("SELECT c.*, d.* FROM d_view AS d, CHANGELOG_FILTER(input => TABLE(STREAM(acc)), key => 'id', "
           "predicate => 'balance >= 0') AS c")
    spark.sql("SELECT 1 AS one").createOrReplaceTempView("d_view")
    try:
        run(spark, acc, sql)
        spark.sql("SELECT 1 AS one, 'x' AS two").createOrReplaceTempView("d_view")
        spark.createDataFrame([(2, 7, "update_postimage", 4)],
                              "id BIGINT, balance BIGINT, _change_type STRING, _commit_version BIGINT") \
            .write.mode("append").parquet(acc.uri("acc"))
        before = files(acc / "out")
        with pytest.raises(SqlextError) as raised:
            run(spark, acc, sql)
    finally:
        spark.catalog.dropTempView("d_view")
    assert raised.value.error_class == "STREAM_CHECKPOINT_MISMATCH"
    assert "output columns" in str(raised.value) and "two string" in str(raised.value)
    assert files(acc / "out") == before


def test_an_output_folder_belongs_to_one_checkpoint_not_to_one_made_again_at_its_path(spark, acc, capsys):
    """Another checkpoint, or the same one with another output, is refused. So is a checkpoint
    deleted by hand and made again by the same command (the repro: it would write the output's
    rows a second time, the first file under its old name), naming both folders and the ways
    out; the full refresh deletes them and writes each row once. An output an earlier sqlext
    marked (the checkpoint's path, no identity) is adopted by the checkpoint that committed
    batches at that path."""
    import json

    import sqlext

    def run_stream(**options):
        query = sqlext.stream(spark, FILTER, checkpoint=acc.uri("cp"), output=acc.uri("out"),
                              sources={"acc": acc.uri("acc")}, **options)
        query.awaitTermination()
        return query

    run_stream()
    before = files(acc / "cp", acc / "out")
    with pytest.raises(SqlextError) as raised:  # another checkpoint, the same output
        run(spark, acc, FILTER, checkpoint="cp2")
    assert raised.value.error_class == "STREAM_OUTPUT_IN_USE"
    with pytest.raises(SqlextError) as raised:  # the same checkpoint, another output
        run(spark, acc, FILTER, output="out2")
    assert raised.value.error_class == "STREAM_OUTPUT_IN_USE"
    assert files(acc / "cp", acc / "out") == before
    assert not (acc / "out2").exists() or not any(p for p in (acc / "out2").iterdir() if p.suffix == ".parquet")

    marker = acc / "out" / "_sqlext_statement.json"
    earlier = {k: v for k, v in json.loads(marker.read_text()).items() if k != "checkpoint_id"}
    marker.write_text(json.dumps(earlier))  # as an earlier sqlext marked it: the checkpoint's path only
    spark.createDataFrame([(3, 7, "insert", 4)],
                          "id BIGINT, balance BIGINT, _change_type STRING, _commit_version BIGINT") \
        .write.mode("append").parquet(acc.uri("acc"))
    query = run_stream()
    adopted = json.loads(marker.read_text()).get("checkpoint_id")
    made = json.loads((acc / "cp" / "metadata").read_text())["id"]  # the checkpoint's identity, in Spark's record
    assert query.id == made  # which sqlext wrote before Spark started, and Spark took as its own
    shutil.rmtree(acc / "cp")
    before = files(acc / "out")
    assert len([f for f in before if f.endswith(".parquet")]) == 2
    with pytest.raises(SqlextError) as raised:
        run_stream()
    assert raised.value.error_class == "STREAM_OUTPUT_IN_USE"
    said = str(raised.value)
    assert acc.storage.qualified(acc / "out") in said and acc.storage.qualified(acc / "cp") in said, said
    assert "Name a new output folder" in said and "--full-refresh" in said and "full_refresh=True" in said, said
    assert files(acc / "out") == before
    assert adopted == made
    capsys.readouterr()
    run_stream(full_refresh=True)  # the refused run left no checkpoint: the output is what there is to delete
    assert f"-- full refresh: deleting the output folder {acc.storage.qualified(acc / 'out')};" in \
        capsys.readouterr().out
    assert sorted(tuple(r) for r in spark.read.parquet(acc.uri("out")).collect()) == [
        (1, 10, "insert", 1), (1, 10, "update_preimage", 3), (1, 20, "update_postimage", 3), (3, 7, "insert", 4)]


def test_no_batch_replaces_a_file_an_earlier_run_left_in_the_output(tmp_path):
    """However a checkpoint met an output holding files of another's runs, a batch's file that has
    the name of one of them is not moved onto it: the batch is refused and the file stays."""
    from sqlext.storage import local
    from sqlext.streaming.run import BatchOutput

    out = local(tmp_path / "out")
    (out / "batch-0000000000-part-00000.parquet").write_bytes(b"an earlier run's rows")
    output = BatchOutput(out, local(tmp_path / "cp"), "parquet")
    output.begin(None, 0)
    (output.pending(0) / "batch-0000000000-part-00000.parquet").write_bytes(b"this run's rows")
    with pytest.raises(SqlextError) as raised:
        output.commit(0)
    assert raised.value.error_class == "STREAM_OUTPUT_IN_USE" and "batch-0000000000-part-00000" in str(raised.value)
    assert (tmp_path / "out" / "batch-0000000000-part-00000.parquet").read_bytes() == b"an earlier run's rows"


def test_a_full_refresh_deletes_nothing_where_a_folder_is_not_a_runs(spark, acc):
    """A full refresh given a folder of the user's own files (a path mistyped) deletes nothing."""
    (acc / "mine").mkdir()
    (acc / "mine" / "report.csv").write_text("a,b\n1,2\n")
    for checkpoint, output in (("mine", "out"), ("cp", "mine")):
        with pytest.raises(SqlextError) as raised:
            stream(spark, FILTER, checkpoint=acc.uri(checkpoint), output=acc.uri(output),
                   sources={"acc": acc.uri("acc")}, full_refresh=True)
        assert raised.value.error_class == "FULL_REFRESH_REFUSED" and "report.csv" in str(raised.value)
        assert acc.storage.qualified(acc / "mine") in str(raised.value)
        assert (acc / "mine" / "report.csv").read_text() == "a,b\n1,2\n"


def test_a_checkpoint_or_output_that_cannot_be_created_is_a_storage_error_naming_it(spark, acc, capsys):
    """A folder that cannot be made (/proc holds none) is [STORAGE_ERROR], naming it: in Python, and
    as the one line of sqlext stream."""
    from sqlext.cli import main

    query = acc / "q.sql"
    query.write_text(FILTER)
    for place in ("checkpoint", "output"):
        paths = {"checkpoint": acc.uri("cp"), "output": acc.uri("out"), place: f"/proc/sqlext-{place}"}
        with pytest.raises(SqlextError) as raised:
            stream(spark, FILTER, sources={"acc": acc.uri("acc")}, **paths)
        assert raised.value.error_class == "STORAGE_ERROR" and f"create file:/proc/sqlext-{place}" in str(raised.value)
        assert main(["stream", str(query), "--source", f"acc={acc.uri('acc')}", "--checkpoint", paths["checkpoint"],
                     "--output", paths["output"]]) == 1
        err = capsys.readouterr().err
        assert "[STORAGE_ERROR]" in err and f"/proc/sqlext-{place}" in err and "INTERNAL_ERROR" not in err, err


def test_an_output_folder_holding_other_files_is_refused(spark, acc):
    (acc / "out").mkdir()
    (acc / "out" / "report.csv").write_text("a,b\n1,2\n")
    with pytest.raises(SqlextError) as raised:
        run(spark, acc, FILTER)
    assert raised.value.error_class == "STREAM_OUTPUT_IN_USE" and "report.csv" in str(raised.value)
    assert files(acc / "out") == {str(acc / "out" / "report.csv"): hashlib.sha256(b"a,b\n1,2\n").hexdigest()}


def test_a_failed_first_run_does_not_claim_the_checkpoint(spark, acc):
    """A first run that never committed leaves the checkpoint to the corrected statement."""
    with pytest.raises(Exception):  # Spark's assert_true stops the first batch before its commit
        run(spark, acc, FILTER.replace("balance >= 0", "balance >= 0 AND assert_true(balance < 15) IS NULL"))
    run(spark, acc, FILTER)
    assert sorted(tuple(r) for r in spark.read.parquet(acc.uri("out")).collect()) == [
        (1, 10, "insert", 1), (1, 10, "update_preimage", 3), (1, 20, "update_postimage", 3)]


def test_run_into_table_refuses_another_statement_and_keeps_the_table(spark, acc):
    spark.sql("CREATE DATABASE IF NOT EXISTS owned LOCATION '" + acc.uri("owned.db") + "'")
    try:
        source = FILTER.replace("STREAM(acc)", "STREAM(owned.acc_table)")
        spark.read.parquet(acc.uri("acc")).write.saveAsTable("owned.acc_table")
        run_into_table(spark, source, "owned.filtered")
        folder = acc / "owned.db" / "filtered"
        before = files(folder)
        with pytest.raises(SqlextError) as raised:
            run_into_table(spark, source.replace("'changes'", "'records'"), "owned.filtered")
        assert raised.value.error_class == "STREAM_CHECKPOINT_MISMATCH"
        assert "--full-refresh" in str(raised.value)
        assert files(folder) == before
    finally:
        spark.sql("DROP DATABASE IF EXISTS owned CASCADE")


def test_more_than_one_statement_is_a_classed_error(spark, acc):
    with pytest.raises(SqlextError) as raised:
        run(spark, acc, FILTER + "; SELECT 1")
    assert raised.value.error_class == "UNSUPPORTED_STATEMENT" and "holds 2" in str(raised.value)
    assert not (acc / "cp").exists()


def test_a_statement_without_a_stream_says_so(spark, acc):
    with pytest.raises(SqlextError) as raised:
        run(spark, acc, "SELECT * FROM CHANGELOG_FILTER(input => TABLE(acc_static), key => 'id', "
                        "predicate => 'balance >= 0')")
    assert raised.value.error_class == "UNSUPPORTED_STREAM" and "reads no STREAM" in str(raised.value)


@pytest.mark.parametrize("written, fix", [("STREAM(acc)", "input => TABLE(STREAM(acc))"),
                                           ("acc", "input => TABLE(acc)")])
def test_a_stream_written_without_table_names_the_fix_with_the_users_table(spark, acc, written, fix):
    with pytest.raises(SqlextError) as raised:
        run(spark, acc, f"SELECT * FROM CHANGELOG_FILTER(input => {written}, key => 'id', predicate => 'balance >= 0')")
    assert raised.value.error_class == "INVALID_ARGUMENT_TYPE" and fix in str(raised.value), str(raised.value)
    assert "'...'" not in str(raised.value)
    assert not (acc / "cp").exists()


def test_an_fk_join_with_one_static_input_names_it(spark, acc):
    spark.sql("SELECT 1 AS id, 'a' AS name, 'insert' AS _change_type, 1L AS _commit_version") \
        .createOrReplaceTempView("customer_rows")
    try:
        with pytest.raises(SqlextError) as raised:
            run(spark, acc, "SELECT * FROM FK_JOIN(left => TABLE(STREAM(acc)), right => TABLE(customer_rows), "
                            "left_key => 'id', foreign_key => 'balance', right_key => 'id')")
    finally:
        spark.catalog.dropTempView("customer_rows")
    assert raised.value.error_class == "UNSUPPORTED_STREAM"
    assert "right" in str(raised.value) and "TABLE(STREAM(customer_rows))" in str(raised.value)


def test_a_declared_schema_lets_a_join_start_before_its_right_input_has_a_file(spark, acc):
    """A new customers feed with no changes yet does not hold up the orders feed."""
    import sqlext

    sql = ("SELECT * FROM FK_JOIN(left => TABLE(STREAM(acc)), right => TABLE(STREAM(`cust omers`)), "
           "left_key => 'id', foreign_key => 'balance', right_key => 'cid', join_type => 'left')")
    schemas = {"cust omers": "cid BIGINT, name STRING, _change_type STRING, _commit_version BIGINT"}
    sources = {"acc": acc.uri("acc"), "cust omers": acc.uri("customers")}
    options = dict(checkpoint=acc.uri("cp"), output=acc.uri("out"), sources=sources, schemas=schemas)
    run_available_now(spark, sql, **options)
    spark.createDataFrame([(20, "twenty", "insert", 5)], schemas["cust omers"]).write.mode("append") \
        .parquet(acc.uri("customers"))
    run_available_now(spark, sql, **options)
    got = sorted((tuple(r) for r in spark.read.parquet(acc.uri("out")).collect()), key=repr)
    spark.read.parquet(acc.uri("acc")).createOrReplaceTempView("acc_all")
    spark.read.parquet(acc.uri("customers")).createOrReplaceTempView("customers_all")
    try:
        batch = sqlext.sql(spark, sql.replace("STREAM(acc)", "acc_all").replace("STREAM(`cust omers`)",
                                                                                 "customers_all"))
        assert got == sorted((tuple(r) for r in batch.collect()), key=repr)
    finally:
        spark.catalog.dropTempView("acc_all")
        spark.catalog.dropTempView("customers_all")
    assert any(r[-2] == "update_postimage" and r[-3] == "twenty" for r in got)


def test_a_declared_schema_that_disagrees_with_the_files_is_refused(spark, acc):
    with pytest.raises(SqlextError) as raised:
        run(spark, acc, FILTER, schemas={"acc": "id BIGINT, balance STRING, _change_type STRING, "
                                                "_commit_version BIGINT"})
    assert raised.value.error_class == "STREAM_SCHEMA_CHANGED" and "balance string" in str(raised.value)


def test_stream_refuses_before_starting_a_query(spark, acc):
    run(spark, acc, FILTER)
    with pytest.raises(SqlextError):
        stream(spark, FILTER.replace("'changes'", "'records'"), checkpoint=acc.uri("cp"),
               output=acc.uri("out"), sources={"acc": acc.uri("acc")})
    assert not spark.streams.active


def test_a_checkpoint_whose_state_an_earlier_version_wrote_is_refused(spark, acc):
    """A checkpoint with committed batches and a state in the layout of an earlier sqlext
    (layers straight under sqlext-state, no layout record) is not read as if it were new."""
    run(spark, acc, FILTER)
    state = acc / "cp" / "sqlext-state"
    (state / "layout").unlink()
    (state / "base-0").mkdir()
    before = files(acc / "cp", acc / "out")
    with pytest.raises(SqlextError) as raised:
        run(spark, acc, FILTER)
    assert raised.value.error_class == "STREAM_CHECKPOINT_MISMATCH" and "earlier version" in str(raised.value)
    assert files(acc / "cp", acc / "out") == before


def test_a_reader_of_an_output_that_started_over_is_refused(spark, acc):
    """Two statements chained through a folder: the second reads the first's output as its
    stream. When the first starts over (its checkpoint and output deleted and run again), its
    new files are named as its first ones were, which the reader's stream would take for files
    it already read; so the reader's next run is refused, writing nothing, until it starts
    over too, and then it reads the new output whole."""
    reader = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(passing)), key => 'id', "
              "predicate => 'balance > 15')")

    def read(checkpoint="cp2", output="out2"):
        run_available_now(spark, reader, checkpoint=acc.uri(checkpoint), output=acc.uri(output),
                          sources={"passing": acc.uri("out")})

    run(spark, acc, FILTER)
    read()
    before = files(acc / "cp2", acc / "out2")
    for folder in ("cp", "out"):
        shutil.rmtree(acc / folder)
    run(spark, acc, FILTER)  # started over: batch-0000000000-... again
    with pytest.raises(SqlextError) as raised:
        read()
    assert raised.value.error_class == "STREAM_SOURCE_REBUILT"
    assert "passing" in str(raised.value)
    assert files(acc / "cp2", acc / "out2") == before
    read("cp3", "out3")  # a reader that starts over reads the new output
    assert sorted(spark.read.parquet(acc.uri("out3")).select("id", "_change_type").collect()) == \
        sorted(spark.read.parquet(acc.uri("out2")).select("id", "_change_type").collect())

"""Bad input at the door of an incremental run, as a new user meets it: every record of a folder
source is read exactly, quarantined on request, or refused by a classed error naming the file,
the record and the column, with nothing written and the file not consumed (docs/bad-input.md)."""

from __future__ import annotations

import datetime
import json
import os

import pandas as pd
import pytest

from sqlext.errors import SqlextError
from sqlext.streaming import run_available_now, stream

FILTER = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(accounts)), key => 'id', "
          "predicate => 'balance >= 0')")
ACCOUNTS = "id BIGINT, balance BIGINT, _change_type STRING, _commit_version BIGINT"
DEBEZIUM_FINAL = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(customers, format => 'debezium')), "
                  "key => 'id', predicate => 'true', emit => 'final')")


def write(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def rows(spark, folder, *columns) -> list[tuple]:
    if not os.path.isdir(folder) or all(name.startswith(("_", ".")) for name in os.listdir(folder)):
        return []
    return sorted(tuple(r) for r in spark.read.parquet(str(folder)).select(*columns).collect())


def refused(run) -> SqlextError:
    with pytest.raises(SqlextError) as raised:
        run()
    return raised.value


def test_a_truncated_debezium_line_is_refused_by_line_not_read_as_a_tombstone(spark, tmp_path, storage):
    topic = tmp_path / "topic"
    lines = ['{"before":null,"after":{"id":1,"name":"Ada"},"op":"c","ts_ms":1,"source":{"lsn":100}}',
             '{"before":{"id":2,"name":"Bo"},"after":{"id":2,"name":"Bo"},"op":"u","ts_ms":2,"source":{"lsn":110}}',
             '{"before":{"id":1,"name":"Ada"},"after":null,"op":"d","ts_ms":3,"source":{"lsn":200}']
    write(topic / "part-1.json", "\n".join(lines) + "\n")
    options = dict(sources={"customers": storage.uri(topic)}, source_format="json",
                   checkpoint=storage.uri(tmp_path / "cp"), output=storage.uri(tmp_path / "out"))
    error = refused(lambda: run_available_now(spark, DEBEZIUM_FINAL, **options))
    assert error.error_class == "BAD_RECORD"
    assert "line 3 of" in str(error) and "part-1.json" in str(error)
    assert not (tmp_path / "out").exists() and not (tmp_path / "cp").exists()  # nothing written
    # the record corrected in the same file: the delete of Ada is read, not lost
    write(topic / "part-1.json", "\n".join(lines[:2] + [lines[2] + "}"]) + "\n")
    run_available_now(spark, DEBEZIUM_FINAL, **options)
    assert rows(spark, tmp_path / "out", "id", "name") == [(2, "Bo")]


def test_a_csv_value_that_does_not_parse_is_refused_or_quarantined_never_null(spark, tmp_path, storage):
    changes = tmp_path / "changes"
    write(changes / "part-1.csv", "1,abc,insert,1\n2,5,insert,1\n")
    options = dict(sources={"accounts": storage.uri(changes)}, source_format="csv", schemas={"accounts": ACCOUNTS},
                   checkpoint=storage.uri(tmp_path / "cp"), output=storage.uri(tmp_path / "out"))
    error = refused(lambda: run_available_now(spark, FILTER, **options))
    assert error.error_class == "BAD_RECORD"
    assert "column balance" in str(error) and "'abc'" in str(error) and "line 1 of" in str(error)
    run_available_now(spark, FILTER, bad_records={"accounts": "quarantine"}, **options)
    assert rows(spark, tmp_path / "out", "id", "balance", "_change_type") == [(2, 5, "insert")]
    quarantine = pd.read_parquet(tmp_path / "cp" / "quarantine")
    assert quarantine[["source", "line", "record", "error_class", "column"]].values.tolist() == \
        [["accounts", 1, "1,abc,insert,1", "BAD_RECORD", "balance"]]
    assert quarantine["file"].tolist()[0].endswith("changes/part-1.csv")


def test_reader_options_go_with_their_source_and_a_header_line_says_so(spark, tmp_path):
    changes = tmp_path / "changes"
    write(changes / "part-1.csv", "id;balance;_change_type;_commit_version\n1;10;insert;1\n")
    options = dict(sources={"accounts": str(changes)}, source_format="csv", schemas={"accounts": ACCOUNTS},
                   checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
    error = refused(lambda: run_available_now(spark, FILTER, source_options={"accounts": {"sep": ";"}}, **options))
    assert error.error_class == "BAD_RECORD" and "header line" in str(error)
    # the refusal names the option that reads the header, as each surface spells it, and the
    # function the user called (not the command's name)
    assert "--source-option accounts.header=true" in str(error)
    assert "source_options={'accounts': {'header': 'true'}}" in str(error)
    assert str(error).startswith("[BAD_RECORD] sqlext.streaming.run_available_now: ")
    # without declared columns, Spark names the fields _c0, _c1, ...: the way out is the header,
    # not another key => ...
    undeclared = {k: v for k, v in options.items() if k != "schemas"}
    error = refused(lambda: run_available_now(spark, FILTER, source_options={"accounts": {"sep": ";"}},
                                              **undeclared))
    assert error.error_class == "CHANGELOG_MISSING_COLUMN" and "_c0" in str(error)
    assert "--source-option accounts.header=true" in str(error) and "key =>" not in str(error)
    run_available_now(spark, FILTER, source_options={"accounts": {"sep": ";", "header": "true"}}, **options)
    assert rows(spark, tmp_path / "out", "id", "balance") == [(1, 10)]
    # options that would drop records or files are refused, naming why
    for key in ("mode", "ignoreCorruptFiles", "columnNameOfCorruptRecord", "maxFileAge"):
        error = refused(lambda: run_available_now(spark, FILTER, source_options={"accounts": {key: "x"}}, **options))
        assert error.error_class == "INVALID_ARGUMENT_TYPE" and key in str(error)


def test_a_debezium_snapshot_whose_before_is_always_null_is_read(spark, tmp_path):
    topic = tmp_path / "topic"
    snapshot = ['{"before":null,"after":{"id":1,"name":"Ada"},"op":"r","ts_ms":1,"source":{"lsn":100}}',
                '{"before":null,"after":{"id":2,"name":"Bo"},"op":"r","ts_ms":1,"source":{"lsn":110}}']
    write(topic / "part-1.json", "\n".join(snapshot) + "\n")
    options = dict(sources={"customers": str(topic)}, source_format="json",
                   checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
    run_available_now(spark, DEBEZIUM_FINAL, **options)
    assert rows(spark, tmp_path / "out", "id", "name") == [(1, "Ada"), (2, "Bo")]
    # an update with its row before lands later: its before (text, as the stream's columns have
    # it) is read as a row
    write(topic / "part-2.json", '{"before":{"id":1,"name":"Ada"},"after":{"id":1,"name":"Ada L."},"op":"u",'
                                 '"ts_ms":2,"source":{"lsn":120}}\n')
    run_available_now(spark, DEBEZIUM_FINAL, **options)
    assert rows(spark, tmp_path / "out", "id", "name") == [(1, "Ada L."), (2, "Bo")]
    # in a batch query too
    spark.read.json(str(topic / "part-1.json")).createOrReplaceTempView("snapshot_events")
    batch = spark.sql("SELECT 1")  # the session works; sqlext's batch path:
    import sqlext

    batch = sqlext.sql(spark, "SELECT * FROM CHANGELOG_FILTER(input => TABLE(snapshot_events), key => 'id', "
                              "predicate => 'true', format => 'debezium', emit => 'final')")
    assert sorted((r.id, r.name) for r in batch.collect()) == [(1, "Ada"), (2, "Bo")]


# a topic read as Debezium events, and a file of plain rows landed in its folder (issue 54, item 2)
TOPIC_FILTER = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(acc, format => 'debezium')), key => 'id', "
                "predicate => 'balance >= 0')")
CREATED = '{"before": null, "after": {"id": 1, "balance": 10}, "op": "c", "ts_ms": 1, "source": {"lsn": 100}}'
NO_EVENT = "has no op and is no tombstone"


def test_json_lines_that_are_no_debezium_events_are_refused_not_read_as_tombstones(spark, tmp_path):
    topic = tmp_path / "topic"
    write(topic / "part-1.json", CREATED + "\n")
    options = dict(sources={"acc": str(topic)}, source_format="json", checkpoint=str(tmp_path / "cp"),
                   output=str(tmp_path / "out"))
    run_available_now(spark, TOPIC_FILTER, **options)
    plain = ['{"id": 3, "balance": 7}', '{"id": 4, "balance": 8}']
    write(topic / "part-2.json", "\n".join(plain) + "\n")
    # fields no Debezium envelope has: a change of the source's columns
    error = refused(lambda: run_available_now(spark, TOPIC_FILTER, **options))
    assert error.error_class == "STREAM_SCHEMA_CHANGED" and "outside the Debezium envelope" in str(error)
    assert "id was added" in str(error)
    # taken as columns, its records are still no events: refused by line, or quarantined
    evolving = dict(options, schema_evolution={"acc": "add_columns"})
    error = refused(lambda: run_available_now(spark, TOPIC_FILTER, **evolving))
    assert error.error_class == "BAD_RECORD" and NO_EVENT in str(error)
    assert "line 1 of" in str(error) and "part-2.json" in str(error) and plain[0] in str(error)
    run_available_now(spark, TOPIC_FILTER, bad_records={"acc": "quarantine"}, **evolving)
    assert rows(spark, tmp_path / "out", "id", "balance") == [(1, 10)]
    quarantine = pd.read_parquet(tmp_path / "cp" / "quarantine")
    assert quarantine[["line", "record"]].values.tolist() == [[1, plain[0]], [2, plain[1]]]
    assert quarantine["problem"].str.startswith(NO_EVENT).all()


def test_with_declared_row_columns_a_record_without_op_is_refused_and_a_null_value_is_a_tombstone(spark, tmp_path):
    topic = tmp_path / "topic"
    lines = [CREATED, '{"id": 3, "balance": 7}', "null", '{"before": null, "after": null, "op": null}', "{}",
             '{"before": null, "after": {"id": 5, "balance": 1}, "op": "x", "ts_ms": 2, "source": {"lsn": 110}}',
             # Kafka Connect's JSON with schemas: with the row's columns declared, its envelope is not read
             '{"schema": {"type": "struct"}, "payload": ' + CREATED + '}']
    write(topic / "part-1.json", "\n".join(lines) + "\n")
    options = dict(sources={"acc": str(topic)}, source_format="json", schemas={"acc": "id BIGINT, balance BIGINT"},
                   checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
    error = refused(lambda: run_available_now(spark, TOPIC_FILTER, **options))
    assert error.error_class == "BAD_RECORD" and "line 2 of" in str(error) and NO_EVENT in str(error)
    run_available_now(spark, TOPIC_FILTER, bad_records={"acc": "quarantine"}, **options)
    assert rows(spark, tmp_path / "out", "id", "balance") == [(1, 10)]
    quarantine = pd.read_parquet(tmp_path / "cp" / "quarantine")
    # a null line, an envelope of nulls and {} (Spark's JSON writer writes a row of NULLs so) are
    # tombstones; the plain row is no event, nor is an op Debezium does not write, nor an event in
    # Connect's wrapper
    assert quarantine[["line", "column"]].values.tolist() == [[2, None], [6, "op"], [7, None]]
    assert "has op = 'x'" in quarantine["problem"][1]


def test_a_json_change_without_its_key_field_is_a_bad_record_and_one_of_null_a_null_key(spark, tmp_path, storage):
    changes = tmp_path / "changes"
    lines = ['{"id": 1, "balance": 5, "_change_type": "insert", "_commit_version": 1}',
             '{"id": null, "balance": 6, "_change_type": "insert", "_commit_version": 1}',
             '{"balance": 7, "_change_type": "insert", "_commit_version": 2}',
             '{"id": 4, "balance": 8, "_change_type": "insert"}']
    write(changes / "part-1.json", "\n".join(lines) + "\n")
    options = dict(sources={"accounts": storage.uri(changes)}, source_format="json",
                   schemas={"accounts": ACCOUNTS}, checkpoint=storage.uri(tmp_path / "cp"),
                   output=storage.uri(tmp_path / "out"))
    error = refused(lambda: run_available_now(spark, FILTER, **options))
    assert error.error_class == "BAD_RECORD" and "line 3 of" in str(error)
    assert "has no field id, which the statement reads as its key" in str(error) and lines[2] in str(error)
    run_available_now(spark, FILTER, bad_records={"accounts": "quarantine"}, **options)
    got = spark.read.parquet(storage.uri(tmp_path / "out")).select("id", "balance").collect()
    assert sorted(tuple(r) for r in got if r.id is not None) == [(1, 5)]
    assert [r.balance for r in got if r.id is None] == [6]  # an explicit null: a NULL key
    quarantine = pd.read_parquet(tmp_path / "cp" / "quarantine")
    assert quarantine[["line", "record", "column"]].values.tolist() == [[3, lines[2], "id"],
                                                                       [4, lines[3], "_commit_version"]]
    assert "its ordering column" in quarantine["problem"][1]


def test_a_debezium_null_line_is_a_tombstone_in_a_run_as_in_batch(spark, tmp_path):
    import sqlext

    topic = tmp_path / "topic"
    lines = ['{"before":null,"after":{"id":1,"v":5},"op":"c","ts_ms":1,"source":{"lsn":100}}',
             '{"before":{"id":1,"v":5},"after":null,"op":"d","ts_ms":2,"source":{"lsn":200}}', "null"]
    write(topic / "part-1.json", "\n".join(lines) + "\n")
    statement = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE({}), key => 'id', predicate => 'v > 0'{})")
    run_available_now(spark, statement.format("STREAM(t, format => 'debezium')", ""), sources={"t": str(topic)},
                      source_format="json", checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
    incremental = rows(spark, tmp_path / "out", "id", "v", "_change_type", "source_lsn")
    spark.read.json(str(topic)).createOrReplaceTempView("tombstoned_topic")
    batch = sqlext.sql(spark, statement.format("tombstoned_topic", ", format => 'debezium'")).collect()
    assert incremental == sorted((r.id, r.v, r._change_type, r.source_lsn) for r in batch) == \
        [(1, 5, "delete", 200), (1, 5, "insert", 100)]
    # in a folder of change rows a null line is no change; said in JSON's words
    write(tmp_path / "changes" / "part-1.json", '{"id": 1, "balance": 5, "_change_type": "insert", '
                                                '"_commit_version": 1}\nnull\n[1, 2]\n')
    error = refused(lambda: run_available_now(spark, FILTER, sources={"accounts": str(tmp_path / "changes")},
                                              source_format="json", schemas={"accounts": ACCOUNTS},
                                              checkpoint=str(tmp_path / "cp2"), output=str(tmp_path / "out2")))
    assert "line 2 of" in str(error) and "is JSON null, not an object" in str(error)
    assert "NoneType" not in str(error)


def land(folder, name, data: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(data).to_parquet(folder / name)


def test_a_refused_schema_change_ends_with_the_file_that_brought_it(spark, tmp_path, storage):
    changes = tmp_path / "changes"
    options = dict(sources={"accounts": storage.uri(changes)}, checkpoint=storage.uri(tmp_path / "cp"),
                   output=storage.uri(tmp_path / "out"))
    land(changes, "p1.parquet", {"id": [1], "balance": [10], "_change_type": ["insert"], "_commit_version": [1]})
    run_available_now(spark, FILTER, **options)
    land(changes, "p2.parquet", {"id": [2], "balance": [5], "currency": ["EUR"], "_change_type": ["insert"],
                                 "_commit_version": [2]})
    assert refused(lambda: run_available_now(spark, FILTER, **options)).error_class == "STREAM_SCHEMA_CHANGED"
    (changes / "p2.parquet").unlink()
    land(changes, "p3.parquet", {"id": [3], "balance": [7], "_change_type": ["insert"], "_commit_version": [3]})
    run_available_now(spark, FILTER, **options)
    assert rows(spark, tmp_path / "out", "id", "_commit_version") == [(1, 1), (3, 3)]


def test_a_changed_column_type_names_the_column_and_the_file(spark, tmp_path):
    changes = tmp_path / "changes"
    options = dict(sources={"accounts": str(changes)}, checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
    land(changes, "p1.parquet", {"id": [1], "balance": [10], "_change_type": ["insert"], "_commit_version": [1]})
    run_available_now(spark, FILTER, **options)
    land(changes, "p2.parquet", {"id": [2], "balance": [5.5], "_change_type": ["insert"], "_commit_version": [2]})
    error = refused(lambda: run_available_now(spark, FILTER, **options))
    assert error.error_class == "STREAM_SCHEMA_CHANGED"
    assert "balance" in str(error) and "p2.parquet" in str(error)


def test_a_misspelt_source_name_is_refused(spark, tmp_path):
    changes = tmp_path / "changes"
    land(changes, "p1.parquet", {"id": [1], "balance": [10], "_change_type": ["insert"], "_commit_version": [1]})
    error = refused(lambda: run_available_now(spark, FILTER, sources={"acounts": str(changes)},
                                              checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out")))
    assert error.error_class == "UNKNOWN_SOURCE" and "acounts" in str(error) and "STREAM(accounts)" in str(error)
    # a setting of a name no source has: the sources there are, and the close one (it had been
    # an INVALID_ARGUMENT_TYPE about source options); named by sqlext.stream, the function called
    for setting in ({"source_options": {"accounts": {"header": "true"}}}, {"source_format": {"accounts": "csv"}},
                    {"schemas": {"accounts": ACCOUNTS}}, {"bad_records": {"accounts": "quarantine"}}):
        error = refused(lambda: stream(spark, FILTER, sources={"acounts": str(changes)}, **setting,
                                       checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out")))
        assert error.error_class == "UNKNOWN_SOURCE", error
        assert str(error).startswith("[UNKNOWN_SOURCE] sqlext.stream: ")
        assert "names accounts, but no source is called accounts: the sources are acounts (did you mean acounts?)" \
            in str(error)
    # a folder beside those of every stream the statement reads is left alone (a shared mapping)
    run_available_now(spark, FILTER, sources={"accounts": str(changes), "branches": str(tmp_path / "elsewhere")},
                      checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
    assert rows(spark, tmp_path / "out", "id") == [(1,)]


def pandas_indexed(folder, name, data: dict) -> None:
    """A file as pandas writes a filtered frame: its index is no 0, 1, 2, ... range, which
    to_parquet (without index=False) writes as the column __index_level_0__."""
    folder.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame(data, index=pd.Index([5 + i for i in range(len(data["id"]))], dtype="int64"))
    frame.to_parquet(folder / name)


PANDAS_INDEX = r"the file \S*{file} of accounts holds the column __index_level_0__, the index of the pandas DataFrame"


def test_a_pandas_index_written_as_a_column_is_refused_naming_the_file_that_holds_it(spark, tmp_path):
    import re

    changes = tmp_path / "changes"
    options = dict(sources={"accounts": str(changes)}, checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
    land(changes, "p1.parquet", {"id": [1], "balance": [10], "_change_type": ["insert"], "_commit_version": [1]})
    p2 = {"id": [2], "balance": [5], "_change_type": ["insert"], "_commit_version": [2]}
    pandas_indexed(changes, "p2.parquet", p2)
    # the first run: the file with the index is named, not the good one that lacks it
    error = refused(lambda: run_available_now(spark, FILTER, **options))
    assert error.error_class == "SOURCE_FILE_PANDAS_INDEX"
    assert re.search(PANDAS_INDEX.format(file="p2.parquet"), str(error)), error
    assert re.search(r"which the file \S*p1\.parquet lacks", str(error)) and "index=False" in str(error)
    assert not (tmp_path / "out").exists() and not (tmp_path / "cp").exists()
    land(changes, "p2.parquet", p2)  # written again without it
    run_available_now(spark, FILTER, **options)
    assert rows(spark, tmp_path / "out", "id") == [(1,), (2,)]
    # a later run: a new file with the index is named too (it had been a schema change)
    pandas_indexed(changes, "p3.parquet", {"id": [3], "balance": [7], "_change_type": ["insert"],
                                           "_commit_version": [3]})
    error = refused(lambda: run_available_now(spark, FILTER, **options))
    assert error.error_class == "SOURCE_FILE_PANDAS_INDEX" and re.search(PANDAS_INDEX.format(file="p3.parquet"),
                                                                         str(error))
    assert rows(spark, tmp_path / "out", "id") == [(1,), (2,)]


def test_a_batch_of_a_running_stream_names_the_file_with_a_pandas_index(tmp_path):
    # the files of a micro-batch are checked again as the batch runs (a stream kept running
    # with --every meets files that land after it started)
    import re

    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from sqlext.storage import local
    from sqlext.streaming.bad_records import SourceRecords, check_parquet_files

    changes = tmp_path / "changes"
    land(changes, "p1.parquet", {"id": [1], "balance": [10], "_change_type": ["insert"], "_commit_version": [1]})
    pandas_indexed(changes, "p2.parquet", {"id": [2], "balance": [5], "_change_type": ["insert"],
                                           "_commit_version": [2]})
    columns = [StructField("id", LongType()), StructField("balance", LongType()),
               StructField("_change_type", StringType()), StructField("_commit_version", LongType())]
    files = [local(str(changes / "p1.parquet")), local(str(changes / "p2.parquet"))]
    for schema in (columns, columns + [StructField("__index_level_0__", LongType())]):
        source = SourceRecords("accounts", "parquet", {}, StructType(schema), folder=local(str(changes)))
        with pytest.raises(SqlextError) as raised:
            check_parquet_files(source, files)
        assert raised.value.error_class == "SOURCE_FILE_PANDAS_INDEX"
        assert re.search(PANDAS_INDEX.format(file="p2.parquet"), str(raised.value)), raised.value


FK = ("SELECT * FROM FK_JOIN(left => TABLE(STREAM(orders)), right => TABLE(STREAM(customers)), "
      "left_key => 'order_id', foreign_key => 'customer_id', right_key => 'id')")


def test_a_file_without_a_column_the_statement_needs_is_refused(spark, tmp_path, storage):
    orders, customers = tmp_path / "orders", tmp_path / "customers"
    options = dict(sources={"orders": storage.uri(orders), "customers": storage.uri(customers)},
                   checkpoint=storage.uri(tmp_path / "cp"), output=storage.uri(tmp_path / "out"))
    land(customers, "c1.parquet", {"id": [7], "city": ["Paris"], "_commit_version": [1]})
    land(orders, "o1.parquet", {"order_id": [100], "customer_id": [7], "_commit_version": [2]})
    run_available_now(spark, FK, **options)
    before = rows(spark, tmp_path / "out", "order_id", "_change_type", "_commit_version")
    land(orders, "o2.parquet", {"order_id": [100], "_commit_version": [3]})  # no foreign key
    error = refused(lambda: run_available_now(spark, FK, **options))
    assert error.error_class == "SOURCE_FILE_MISSING_COLUMN"
    assert "customer_id" in str(error) and "o2.parquet" in str(error)
    assert rows(spark, tmp_path / "out", "order_id", "_change_type", "_commit_version") == before
    # a zero-byte Parquet file is not an empty one
    (orders / "o2.parquet").unlink()
    (orders / "o3.parquet").write_bytes(b"")
    error = refused(lambda: run_available_now(spark, FK, **options))
    assert error.error_class == "STREAM_SOURCE_UNREADABLE" and "o3.parquet" in str(error)
    (orders / "o3.parquet").unlink()
    land(orders, "o4.parquet", {"order_id": [100], "customer_id": [7], "_commit_version": [4]})
    run_available_now(spark, FK, **options)  # the refusals left nothing behind
    assert rows(spark, tmp_path / "out", "order_id", "_change_type", "_commit_version") == before


def test_a_data_error_in_a_later_run_lets_a_replacing_file_run(spark, tmp_path):
    changes = tmp_path / "changes"
    options = dict(sources={"accounts": str(changes)}, checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
    land(changes, "p1.parquet", {"id": [1], "balance": [10], "_change_type": ["insert"], "_commit_version": [1]})
    run_available_now(spark, FILTER, **options)
    land(changes, "p2.parquet", {"id": [2], "balance": [5], "_change_type": ["insrt"], "_commit_version": [2]})
    error = refused(lambda: run_available_now(spark, FILTER, **options))
    assert error.error_class == "UNKNOWN_CHANGE_TYPE" and "p2.parquet, row 1" in str(error)
    (changes / "p2.parquet").unlink()
    land(changes, "p2-fixed.parquet", {"id": [2], "balance": [5], "_change_type": ["insert"], "_commit_version": [2]})
    run_available_now(spark, FILTER, **options)
    assert rows(spark, tmp_path / "out", "id", "_commit_version") == [(1, 1), (2, 2)]


def test_a_file_landing_with_an_old_modification_time_is_read(spark, tmp_path):
    changes = tmp_path / "changes"
    options = dict(sources={"accounts": str(changes)}, checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
    land(changes, "p1.parquet", {"id": [1], "balance": [10], "_change_type": ["insert"], "_commit_version": [1]})
    run_available_now(spark, FILTER, **options)
    land(changes, "p2.parquet", {"id": [2], "balance": [5], "_change_type": ["insert"], "_commit_version": [2]})
    old = os.path.getmtime(changes / "p1.parquet") - 30 * 24 * 3600  # copied with a month-old time kept
    os.utime(changes / "p2.parquet", (old, old))
    run_available_now(spark, FILTER, **options)
    assert rows(spark, tmp_path / "out", "id") == [(1,), (2,)]


def test_await_termination_raises_sqlexts_class(spark, tmp_path):
    changes = tmp_path / "changes"
    land(changes, "p1.parquet", {"id": [1, 1], "balance": [10, 11], "_change_type": ["insert", "insert"],
                                 "_commit_version": [1, 1]})
    query = stream(spark, FILTER, sources={"accounts": str(changes)}, checkpoint=str(tmp_path / "cp"),
                   output=str(tmp_path / "out"))
    error = refused(query.awaitTermination)
    assert error.error_class == "AMBIGUOUS_ORDER"
    assert "STREAM_FAILED" not in str(error) and "FOREACH_BATCH" not in str(error)
    assert "p1.parquet, row 1 and " in str(error) and "p1.parquet, row 2" in str(error)  # where the two are
    # raised from Spark's error, whose class it keeps, as an action in batch raises it
    from pyspark.errors import StreamingQueryException

    assert isinstance(error.__cause__, StreamingQueryException) and isinstance(error, StreamingQueryException)


def test_a_late_change_names_its_file(spark, tmp_path):
    changes = tmp_path / "changes"
    options = dict(sources={"accounts": str(changes)}, checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
    land(changes, "p1.parquet", {"id": [1], "balance": [10], "_change_type": ["insert"], "_commit_version": [5]})
    run_available_now(spark, FILTER, **options)
    land(changes, "p2.parquet", {"id": [1, 2], "balance": [3, 4], "_change_type": ["update_postimage", "insert"],
                                 "_commit_version": [4, 6]})
    error = refused(lambda: run_available_now(spark, FILTER, **options))
    assert error.error_class == "LATE_CHANGE" and "p2.parquet, row 1" in str(error)


def test_the_summary_counts_quarantined_records(spark, tmp_path):
    from sqlext.streaming.summary import RunCounter

    changes = tmp_path / "changes"
    write(changes / "a.json", '{"id": 1, "balance": 3, "_change_type": "insert", "_commit_version": 1}\n'
                              '{"id": 2, "balance": 4.5, "_change_type": "insert", "_commit_version": 1}\n'
                              'not json at all\n')
    options = dict(sources={"accounts": str(changes)}, source_format="json", schemas={"accounts": ACCOUNTS},
                   checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"), bad_records={"accounts": "quarantine"})
    counter = RunCounter(spark, options["checkpoint"], options["output"])
    query = run_available_now(spark, FILTER, **options)
    counts = counter.counts(query)
    assert counts.quarantined == 2 and "quarantined 2 bad records" in counts.describe()
    quarantine = pd.read_parquet(tmp_path / "cp" / "quarantine").sort_values("line")
    assert quarantine[["line", "column"]].values.tolist() == [[2, "balance"], [3, None]]
    assert json.loads(json.dumps(quarantine["problem"].tolist()))[1].startswith("does not parse as JSON")


def test_debezium_as_kafka_connect_writes_it_with_schemas_and_with_declared_row_columns(spark, tmp_path):
    import sqlext

    events = [{"before": None, "after": {"id": 1, "name": "Ada"}, "op": "r", "ts_ms": 1, "source": {"lsn": 100}},
              {"before": {"id": 1, "name": "Ada"}, "after": {"id": 1, "name": "Ada L."}, "op": "u", "ts_ms": 2,
               "source": {"lsn": 120}},
              {"before": None, "after": {"id": 2, "name": "Bo"}, "op": "c", "ts_ms": 3, "source": {"lsn": 130}}]
    schema = {"type": "struct", "name": "dbserver1.public.customers.Envelope", "fields": []}  # abridged
    # Kafka Connect's JSON converter with schemas: {"schema": ..., "payload": <envelope>}
    write(tmp_path / "connect" / "part-1.json", "\n".join(json.dumps({"schema": schema, "payload": e})
                                                         for e in events) + "\n")
    options = dict(sources={"customers": str(tmp_path / "connect")}, source_format="json",
                   checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
    run_available_now(spark, DEBEZIUM_FINAL, **options)
    assert rows(spark, tmp_path / "out", "id", "name") == [(1, "Ada L."), (2, "Bo")]
    spark.read.json(str(tmp_path / "connect")).createOrReplaceTempView("connect_events")
    batch = sqlext.sql(spark, "SELECT * FROM CHANGELOG_FILTER(input => TABLE(connect_events), key => 'id', "
                              "predicate => 'true', format => 'debezium', emit => 'final')")
    assert sorted((r.id, r.name) for r in batch.collect()) == [(1, "Ada L."), (2, "Bo")]
    # the row's columns declared once: the envelope is built around them (types as declared)
    write(tmp_path / "plain" / "part-1.json", "\n".join(json.dumps(e) for e in events) + "\n")
    options = dict(sources={"customers": str(tmp_path / "plain")}, source_format="json",
                   schemas={"customers": "id INT, name STRING"},
                   checkpoint=str(tmp_path / "cp2"), output=str(tmp_path / "out2"))
    run_available_now(spark, DEBEZIUM_FINAL, **options)
    out = spark.read.parquet(str(tmp_path / "out2"))
    assert out.schema["id"].dataType.simpleString() == "int"
    assert sorted((r.id, r.name) for r in out.collect()) == [(1, "Ada L."), (2, "Bo")]


def test_a_partitioned_folder_is_read_with_its_partition_columns(spark, tmp_path):
    changes = tmp_path / "changes"
    frame = pd.DataFrame({"id": [1, 2], "balance": [10, -1], "_change_type": ["insert", "insert"],
                          "_commit_version": [1, 1], "day": ["2026-11-28", "2026-11-29"]})
    frame.to_parquet(changes, partition_cols=["day"])  # day=.../<file>.parquet, no day column in the files
    options = dict(sources={"accounts": str(changes)}, checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
    run_available_now(spark, FILTER, **options)
    assert rows(spark, tmp_path / "out", "id", "day") == [(1, datetime.date(2026, 11, 28))]  # as Spark infers it


def test_a_statement_that_keeps_no_state_refuses_a_bad_record_too(spark, tmp_path):
    changes = tmp_path / "changes"
    write(changes / "a.json", '{"id": 1, "balance": 3, "_change_type": "insert", "_commit_version": 1}\n'
                              '{"id": 2, "balance": "lots", "_change_type": "insert", "_commit_version": 1}\n')
    options = dict(sources={"accounts": str(changes)}, source_format="json", schemas={"accounts": ACCOUNTS},
                   checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
    plain = "SELECT id, balance FROM STREAM(accounts) WHERE balance > 0"
    error = refused(lambda: run_available_now(spark, plain, **options))
    assert error.error_class == "BAD_RECORD" and "a.json" in str(error) and "lots" in str(error)
    assert rows(spark, tmp_path / "out", "id") == []
    error = refused(lambda: run_available_now(spark, plain, bad_records={"accounts": "quarantine"}, **options))
    assert error.error_class == "UNSUPPORTED_STREAM" and "quarantine" in str(error)


@pytest.mark.parametrize("file_format", ["parquet", "json"])
def test_a_change_of_unknown_type_is_quarantined_with_its_values_and_row(spark, tmp_path, file_format):
    changes = tmp_path / "changes"
    rows = [(1, 5, "insert", 1), (2, 6, "insrt", 1), (3, 7, "insert", 1)]
    columns = ["id", "balance", "_change_type", "_commit_version"]
    changes.mkdir()
    if file_format == "parquet":
        pd.DataFrame(rows, columns=columns).to_parquet(changes / "part-1.parquet")
    else:
        write(changes / "part-1.json", "".join(json.dumps(dict(zip(columns, r))) + "\n" for r in rows))
    options = dict(sources={"accounts": str(changes)}, source_format=file_format, checkpoint=str(tmp_path / "cp"),
                   output=str(tmp_path / "out"))
    if file_format == "json":
        options["schemas"] = {"accounts": ACCOUNTS}
    error = refused(lambda: run_available_now(spark, FILTER, **options))
    assert error.error_class == "UNKNOWN_CHANGE_TYPE" and "part-1" in str(error)
    run_available_now(spark, FILTER, bad_records={"accounts": "quarantine"}, **options)
    assert rows_of(spark, tmp_path / "out") == [(1, 5), (3, 7)]
    quarantine = pd.read_parquet(tmp_path / "cp" / "quarantine")
    assert quarantine["error_class"].tolist() == ["UNKNOWN_CHANGE_TYPE"]
    assert json.loads(quarantine["record"][0]) == dict(zip(columns, rows[1]))
    # the row of a Parquet file; a text file's line is not known for a record that reads
    assert quarantine["line"].tolist() == [2] if file_format == "parquet" else quarantine["line"].isna().all()
    assert "'insrt'" in quarantine["problem"][0]


def rows_of(spark, folder) -> list[tuple]:
    return rows(spark, folder, "id", "balance")


# ``sqlext stream`` that SIGKILLs its own process group inside micro-batch 1 of a statement that
# keeps no state, once the batch's files are written and before they are committed
KILLED_BEFORE_THE_OUTPUT_COMMIT = """
import os, signal, sys
from sqlext.cli import main
from sqlext.streaming.run import BatchOutput

commit = BatchOutput.commit
def die_first(self, batch_id):
    if batch_id == 1:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    commit(self, batch_id)
BatchOutput.commit = die_first
sys.exit(main(sys.argv[1:]))
"""


def test_a_statement_that_keeps_no_state_shows_readers_outside_spark_only_committed_rows(spark, tmp_path, storage):
    from sqlext.cli import main

    changes, out = tmp_path / "changes", tmp_path / "out"
    changes.mkdir()
    columns = ["id", "balance", "_change_type", "_commit_version"]
    pd.DataFrame([(1, 5, "insert", 1), (2, -1, "insert", 1)], columns=columns).to_parquet(changes / "a.parquet")
    query = tmp_path / "q.sql"
    query.write_text("SELECT id, balance FROM STREAM(accounts) WHERE balance >= 0")
    options = ["--source", f"accounts={changes}", "--checkpoint", str(tmp_path / "cp"), "--output", str(out)]
    assert main(["stream", str(query), *options]) == 0
    pd.DataFrame([(3, 7, "insert", 2)], columns=columns).to_parquet(changes / "b.parquet")
    storage.run_until_killed(KILLED_BEFORE_THE_OUTPUT_COMMIT, "stream", str(query), *options)
    assert sorted(pd.read_parquet(out)["id"]) == [1]  # the killed batch's files are not in the folder
    assert not (out / "_spark_metadata").exists()
    assert main(["stream", str(query), *options]) == 0
    assert sorted(pd.read_parquet(out)["id"]) == [1, 3]
    assert sorted(r["id"] for r in spark.read.parquet(str(out)).collect()) == [1, 3]


def test_a_missing_field_is_told_from_a_null_in_every_type_that_has_a_value_to_spare(spark, tmp_path):
    from pyspark.sql import functions as F
    from pyspark.sql.types import _parse_datatype_string

    from sqlext.streaming.bad_records import SourceRecords

    schema = _parse_datatype_string("s STRING, b TINYINT, i INT, l BIGINT, f FLOAT, d DOUBLE, m DECIMAL(7,2), "
                                    "day DATE, at TIMESTAMP, local TIMESTAMP_NTZ, yes BOOLEAN")
    given = {"s": "x", "b": 1, "i": 2, "l": 3, "f": 1.5, "d": 2.5, "m": 3.25, "day": "2026-01-02",
             "at": "2026-01-02T03:04:05Z", "local": "2026-01-02T03:04:05", "yes": True}
    write(tmp_path / "a.json", "\n".join(json.dumps(r) for r in ({c: None for c in given}, given, {})) + "\n")
    records = SourceRecords("t", "json", {}, schema, needs={c: "key" for c in given})
    assert set(records.marks) == set(given) - {"yes"}  # BOOLEAN has no value to spare
    faults = records.faults()
    rows = records.read_files(spark, [str(tmp_path / "a.json")]) \
        .select(*[condition.alias(column) for condition, column, _ in faults]).collect()
    assert [sorted(c for c in row.asDict() if row[c]) for row in rows] == [[], [], sorted(records.marks)]

"""A folder source as a new user fills it: with pandas, whose timestamps are in nanoseconds.
Such files stream (as Spark's microsecond timestamps); a file Spark cannot read is an error
naming the file, never an "empty" source; a first run that fails leaves no records behind."""

from __future__ import annotations

import pandas as pd
import pytest

from sqlext.errors import SqlextError
from sqlext.streaming import run_available_now
from sqlext.streaming.checkpoint import OUTPUT_FILE, STATEMENT_FILE

FILTER = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(clicks)), key => 'id', "
          "predicate => 'ts >= TIMESTAMP_NTZ ''2026-11-22 09:02:00''')")


def clicks(folder, name, rows):
    """A file of clicks as pandas writes it: ``ts`` in nanoseconds, as pandas keeps it."""
    folder.mkdir(exist_ok=True)
    frame = pd.DataFrame(rows, columns=["id", "user_name", "ts", "_commit_version"])
    frame["ts"] = pd.to_datetime(frame["ts"], format="ISO8601")
    frame.to_parquet(folder / name)
    return folder / name


def test_a_pandas_file_with_nanosecond_timestamps_streams(spark, tmp_path):
    import pyarrow.parquet as pq

    source = tmp_path / "clicks"
    written = clicks(source, "part-1.parquet", [(1, "ann", "2026-11-22 09:00:00", 1),
                                                (2, "bob", "2026-11-22 09:04:00.123456", 1)])
    assert str(pq.read_schema(written).field("ts").type) == "timestamp[ns]"  # the repro: pandas' default
    options = dict(sources={"clicks": str(source)}, checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"))
    run_available_now(spark, FILTER, **options)
    out = spark.read.parquet(str(tmp_path / "out"))
    assert out.schema["ts"].dataType.simpleString() == "timestamp_ntz"
    assert [(r.id, str(r.ts), r._change_type) for r in out.collect()] == [(2, "2026-11-22 09:04:00.123456", "insert")]
    # a later run reads the new file only (the columns recorded by the first run)
    clicks(source, "part-2.parquet", [(1, "ann", "2026-11-22 09:05:00", 2)])
    run_available_now(spark, FILTER, **options)
    rows = sorted((r.id, r._change_type) for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert rows == [(1, "insert"), (2, "insert")]
    # the runs left the session's setting as it was; in batch, as docs/incremental.md says, the
    # setting and a cast read the file
    assert spark.conf.get("spark.sql.timestampNanosTypes.enabled", None) is None
    spark.conf.set("spark.sql.timestampNanosTypes.enabled", "true")
    try:
        batch = spark.read.parquet(str(written)).selectExpr("id", "CAST(ts AS TIMESTAMP_NTZ) AS ts")
        assert [str(r.ts) for r in batch.orderBy("id").collect()] == ["2026-11-22 09:00:00",
                                                                      "2026-11-22 09:04:00.123456"]
    finally:
        spark.conf.unset("spark.sql.timestampNanosTypes.enabled")


def test_a_file_spark_cannot_read_is_named_not_reported_empty(spark, tmp_path):
    source = tmp_path / "clicks"
    source.mkdir()
    (source / "part-1.parquet").write_text("id,user_name\n1,ann\n")  # a CSV file under a Parquet name
    with pytest.raises(SqlextError) as raised:
        run_available_now(spark, FILTER, sources={"clicks": str(source)}, checkpoint=str(tmp_path / "cp"),
                          output=str(tmp_path / "out"))
    assert raised.value.error_class == "STREAM_SOURCE_UNREADABLE"
    assert raised.value.params["file"].endswith("clicks/part-1.parquet")


def test_a_failed_first_run_leaves_no_records_behind(spark, tmp_path):
    source = tmp_path / "clicks"
    source.mkdir()
    new = dict(checkpoint=tmp_path / "cp", output=tmp_path / "out")  # folders the run would create
    made = dict(checkpoint=tmp_path / "cp2", output=tmp_path / "out2")  # folders made before it
    for folder in made.values():
        folder.mkdir()
    for folders in (new, made):
        with pytest.raises(SqlextError, match=r"\[STREAM_SOURCE_EMPTY\]"):
            run_available_now(spark, FILTER, sources={"clicks": str(source)},
                              **{k: str(v) for k, v in folders.items()})
    assert not new["checkpoint"].exists() and not new["output"].exists()
    assert not (made["checkpoint"] / STATEMENT_FILE).exists() and not (made["output"] / OUTPUT_FILE).exists()
    # a first run that fails while it runs (two changes of one key share a version)
    clicks(source, "part-1.parquet", [(1, "ann", "2026-11-22 09:03:00", 1), (1, "ann", "2026-11-22 09:04:00", 1)])
    with pytest.raises(SqlextError, match=r"\[AMBIGUOUS_ORDER\]"):
        run_available_now(spark, FILTER, sources={"clicks": str(source)}, **{k: str(v) for k, v in new.items()})
    assert not new["checkpoint"].exists() and not new["output"].exists()


def test_sqlext_stream_says_what_each_run_read_and_wrote(spark, tmp_path, capsys):
    from sqlext.cli import main

    source = tmp_path / "clicks"
    clicks(source, "part-1.parquet", [(1, "ann", "2026-11-22 09:00:00", 1), (2, "bob", "2026-11-22 09:04:00", 1)])
    query = tmp_path / "clicks.sql"
    query.write_text(FILTER + ";\n")
    argv = ["stream", str(query), "--source", f"clicks={source}", "--checkpoint", str(tmp_path / "cp"),
            "--output", str(tmp_path / "out")]
    assert main(argv) == 0
    assert "read 1 file, 2 rows; wrote 1 file, 1 row;" in capsys.readouterr().out
    assert main(argv) == 0  # nothing new: said so, with the counts
    assert "nothing new: read 0 files, 0 rows; wrote 0 files, 0 rows;" in capsys.readouterr().out
    assert main([*argv, "--full-refresh"]) == 0  # from scratch: says what it deletes, counts the whole history
    out = capsys.readouterr().out
    assert f"-- full refresh: deleting the checkpoint file:{tmp_path / 'cp'} and the output folder " \
           f"file:{tmp_path / 'out'}; the run starts from scratch\n" in out, out
    assert "read 1 file, 2 rows; wrote 1 file, 1 row;" in out, out


def test_an_interval_column_reads_in_pandas_as_the_docs_say(spark, tmp_path):
    """docs/incremental.md: Spark writes an interval as microseconds; pandas reads them as a
    number, which pd.to_timedelta(unit="us") turns into the duration, and the cast the page
    gives writes seconds."""
    folder = tmp_path / "gaps"
    spark.sql("SELECT TIMESTAMP '2026-11-22 09:04:00' - TIMESTAMP '2026-11-22 09:00:00' AS gap, "
              "CAST(CAST(TIMESTAMP '2026-11-22 09:04:00' - TIMESTAMP '2026-11-22 09:00:00' AS INTERVAL SECOND) "
              "AS BIGINT) AS gap_seconds").write.parquet(str(folder))
    frame = pd.read_parquet(folder)
    assert frame["gap"].tolist() == [240000000]
    assert pd.to_timedelta(frame["gap"], unit="us").tolist() == [pd.Timedelta(minutes=4)]
    assert frame["gap_seconds"].tolist() == [240]


def test_json_files_are_read_in_the_declared_columns(spark, tmp_path):
    """JSON holds no column types (Spark would infer BIGINT for any number): with a declared
    schema, the files are read in its types, not refused as a schema change."""
    source = tmp_path / "accounts"
    source.mkdir()
    (source / "a.json").write_text('{"id": 1, "v": 5, "_change_type": "insert", "_commit_version": 1}\n'
                                   '{"id": 2, "v": -1, "_change_type": "insert", "_commit_version": 1}\n')
    sql = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(accounts)), key => 'id', "
           "predicate => 'v >= 0')")
    options = dict(sources={"accounts": str(source)}, source_format="json", checkpoint=str(tmp_path / "cp"),
                   output=str(tmp_path / "out"),
                   schemas={"accounts": "v INT, id INT, _change_type STRING, _commit_version BIGINT"})
    run_available_now(spark, sql, **options)
    out = spark.read.parquet(str(tmp_path / "out"))
    assert [(f.name, f.dataType.simpleString()) for f in out.schema.fields][:2] == [("v", "int"), ("id", "int")]
    assert [(r.id, r.v, r._change_type) for r in out.collect()] == [(1, 5, "insert")]


FK = ("SELECT * FROM FK_JOIN(left => TABLE(STREAM(orders)), right => TABLE(STREAM(customers)), "
      "left_key => 'id', foreign_key => 'fk', right_key => 'rid')")


def test_a_json_topic_joins_a_parquet_folder_each_in_its_own_format(spark, tmp_path, capsys):
    """A format per source (``source_format={"orders": "json"}``, ``--source-format NAME=FORMAT``):
    the runs' rows, concatenated, are the batch statement's over both folders."""
    import json

    import sqlext
    from rows import multiset
    from sqlext.cli import main

    orders, customers, out = tmp_path / "orders", tmp_path / "customers", tmp_path / "out"
    orders.mkdir()
    customers.mkdir()

    def land(version, order_rows, customer_rows):
        (orders / f"part-{version}.json").write_text("".join(
            json.dumps({"id": i, "fk": fk, "_change_type": kind, "_commit_version": version}) + "\n"
            for i, fk, kind in order_rows))
        pd.DataFrame([(r, name, kind, version) for r, name, kind in customer_rows],
                     columns=["rid", "name", "_change_type", "_commit_version"]).to_parquet(
            customers / f"part-{version}.parquet")

    land(1, [(1, 7, "insert"), (2, 8, "insert")], [(7, "Ada", "insert"), (8, "Bo", "insert")])
    options = dict(checkpoint=str(tmp_path / "cp"), output=str(out),
                   sources={"orders": str(orders), "customers": str(customers)})
    run_available_now(spark, FK, source_format={"orders": "json"}, **options)
    # the command line: a format for every source, and another for one of them
    land(2, [(1, 8, "update_postimage")], [(8, "Bob", "update_postimage")])
    query = tmp_path / "fk.sql"
    query.write_text(FK + ";\n")
    argv = ["stream", str(query), "--checkpoint", options["checkpoint"], "--output", str(out),
            "--source", f"orders={orders}", "--source", f"customers={customers}"]
    assert main([*argv, "--source-format", "json", "--source-format", "customers=parquet"]) == 0, \
        capsys.readouterr().err
    assert "read 2 files" in capsys.readouterr().out
    spark.read.json(str(orders)).createOrReplaceTempView("orders_all")
    spark.read.parquet(str(customers)).createOrReplaceTempView("customers_all")
    try:
        batch = sqlext.sql(spark, FK.replace("STREAM(orders)", "orders_all").replace("STREAM(customers)",
                                                                                    "customers_all"))
        expected = [r.asDict() for r in batch.collect()]
    finally:
        spark.catalog.dropTempView("orders_all")
        spark.catalog.dropTempView("customers_all")
    got = [r.asDict() for r in spark.read.parquet(str(out)).collect()]
    assert multiset(got) == multiset(expected) and len(got) == 6
    # a format for a name no source has: said by name, nothing run
    assert main([*argv, "--source-format", "ordres=json"]) == 1
    said = capsys.readouterr().err
    assert "[UNKNOWN_SOURCE] sqlext stream: --source-format NAME=FORMAT (source_format=) names ordres" in said
    assert "the sources are customers, orders (did you mean orders?)" in said


def test_the_command_line_gives_a_format_for_every_source_and_one_per_name(tmp_path, capsys):
    import argparse

    from sqlext.cli.stream import add_parser, prepare
    from sqlext.streaming.sources import Sources

    query = tmp_path / "fk.sql"
    query.write_text(FK + ";\n")
    parser = argparse.ArgumentParser(prog="sqlext")
    add_parser(parser.add_subparsers(dest="command"))

    def source_format(*given):
        args = parser.parse_args(["stream", str(query), "--checkpoint", "cp", "--output", "out", "--source",
                                  "orders=o", "--source", "customers=c", *given])
        prepared = prepare(args)
        return prepared if isinstance(prepared, int) else prepared[1]["source_format"]

    assert source_format() == "parquet"
    assert source_format("--source-format", "json") == "json"
    assert source_format("--source-format", "json", "--source-format", "customers=parquet") == \
        {"orders": "json", "customers": "parquet"}
    assert source_format("--source-format", "orders=json") == {"orders": "json", "customers": "parquet"}
    capsys.readouterr()
    assert source_format("--source-format", "json", "--source-format", "csv") == 2
    assert "--source-format gives json and csv for every source" in capsys.readouterr().err
    assert source_format("--source-format", "orders=") == 2
    assert "--source-format 'orders=' is not NAME=FORMAT or FORMAT" in capsys.readouterr().err
    # what the run then refuses, before Spark reads anything
    with pytest.raises(SqlextError, match=r"^\[UNKNOWN_SOURCE\] .* names ordres, .*did you mean orders\?"):
        Sources(None, {"orders": "o", "customers": "c"}, {"ordres": "json"})
    with pytest.raises(SqlextError, match=r"^\[INVALID_ARGUMENT_TYPE\] .*source_format of orders must be"):
        Sources(None, {"orders": "o"}, {"orders": None})

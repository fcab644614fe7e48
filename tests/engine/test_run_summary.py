"""What ``sqlext stream`` says a run read and wrote (sqlext/streaming/summary.py): the rows of
JSON and CSV files as Spark's reader of the source counts their records (not Spark's
``numInputRows``, which counts a source once for every time a batch reads it), and with
``--every`` one plain line per micro-batch, each counting its own batch."""

from __future__ import annotations

import argparse
import json
import re
import threading
import time

from sqlext.streaming import run_available_now
from sqlext.streaming.summary import RunCounter

ACCOUNTS = "id BIGINT, balance BIGINT, _change_type STRING, _commit_version BIGINT"
FILTER = ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(accounts)), key => 'id', "
          "predicate => 'balance >= 0')")


def json_lines(path, records: list[dict], blank_lines: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "\n" * blank_lines)


def data_files(output) -> int:
    """The files a reader of the output reads (how many a run writes is its placement's: one on
    the driver, one a bucket on the executors)."""
    return len([f for f in output.iterdir() if f.is_file() and not f.name.startswith((".", "_"))])


def said(line: str, output) -> str:
    """``line``, its count of files written checked against the output and put as N."""
    match = re.search(r"wrote (\d+) files?,", line)
    assert match and int(match.group(1)) == data_files(output), (line, sorted(output.iterdir()))
    return line[:match.start()] + "wrote N files," + line[match.end():]


def inserts(ids, version: int = 1) -> list[dict]:
    return [{"id": i, "balance": i, "_change_type": "insert", "_commit_version": version} for i in ids]


def test_the_summary_counts_the_rows_of_json_and_csv_sources(spark, tmp_path):
    # JSON lines, a blank line among them (Spark reads no record there), two sources read twice
    # by FK_JOIN's batch (Spark's numInputRows says 16 for these 8 records)
    json_lines(tmp_path / "left" / "a.json", inserts(range(5)), blank_lines=1)
    json_lines(tmp_path / "right" / "b.json", [{"oid": i, "name": "x", "_change_type": "insert",
                                                "_commit_version": 1} for i in range(3)])
    options = dict(sources={"accounts": str(tmp_path / "left"), "owners": str(tmp_path / "right")},
                   source_format="json", checkpoint=str(tmp_path / "cp"), output=str(tmp_path / "out"),
                   schemas={"accounts": ACCOUNTS, "owners": "oid BIGINT, name STRING, _change_type STRING, "
                                                          "_commit_version BIGINT"})
    counter = RunCounter(spark, options["checkpoint"], options["output"])
    query = run_available_now(spark, "SELECT * FROM FK_JOIN(left => TABLE(STREAM(accounts)), right => "
                                     "TABLE(STREAM(owners)), left_key => 'id', right_key => 'oid', "
                                     "foreign_key => 'balance')", **options)
    assert said(counter.counts(query).describe(), tmp_path / "out") == "read 2 files, 8 rows; wrote N files, 3 rows"
    # CSV with a header line in each file
    csv = tmp_path / "csv"
    csv.mkdir()
    (csv / "a.csv").write_text("id,balance,_change_type,_commit_version\n1,10,insert,1\n2,20,insert,1\n")
    (csv / "b.csv").write_text("id,balance,_change_type,_commit_version\n3,30,insert,2\n")
    options = dict(sources={"accounts": str(csv)}, source_format="csv", schemas={"accounts": ACCOUNTS},
                   source_options={"accounts": {"header": "true"}}, checkpoint=str(tmp_path / "cp-csv"),
                   output=str(tmp_path / "out-csv"))
    counter = RunCounter(spark, options["checkpoint"], options["output"])
    query = run_available_now(spark, FILTER, **options)
    assert said(counter.counts(query).describe(), tmp_path / "out-csv") == "read 2 files, 3 rows; wrote N files, 3 rows"


def test_every_prints_one_line_per_micro_batch_counting_its_own_batch(spark, tmp_path, capsys):
    """``sqlext stream --every`` (its run function, in this process, as a log reads it: standard
    output not a terminal): a line for each batch, none while nothing arrives, no progress line."""
    from sqlext.cli.stream import _status, add_parser, prepare

    changes = tmp_path / "changes"
    json_lines(changes / "p1.json", inserts(range(3)))
    (tmp_path / "q.sql").write_text(FILTER.replace("accounts", "acc") + "\n")
    parser = argparse.ArgumentParser(prog="sqlext")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["stream", str(tmp_path / "q.sql"), "--source", f"acc={changes}", "--source-format",
                              "json", "--source-schema", f"acc={ACCOUNTS}", "--checkpoint", str(tmp_path / "cp"),
                              "--output", str(tmp_path / "out"), "--every", "1 second"])
    stopping, status = threading.Event(), []
    worker = threading.Thread(target=lambda: status.append(_status(spark, args, prepare(args), stopping)))
    printed = []

    def wait_for(text: str) -> None:
        deadline = time.monotonic() + 60
        while text not in "".join(printed) and worker.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
            printed.append(capsys.readouterr().out)
        assert text in "".join(printed), "".join(printed)

    worker.start()
    try:
        wait_for("-- batch 0")
        json_lines(changes / "p2.json", [{"id": 1, "balance": 5, "_change_type": "update_postimage",
                                          "_commit_version": 2}])
        wait_for("-- batch 1")
    finally:
        stopping.set()
        worker.join(120)
    captured = capsys.readouterr()
    lines = "".join(printed + [captured.out]).splitlines()
    assert lines[0].startswith("-- streaming every 1 second")
    batches = [re.sub(r" in \d+\.\d\d s:", " in T:", line) for line in lines[1:]]
    written = [int(re.search(r"wrote (\d+) files?,", line).group(1)) for line in batches]
    assert all(n >= 1 for n in written) and sum(written) == data_files(tmp_path / "out"), (batches, written)
    assert [re.sub(r"wrote \d+ files?,", "wrote N files,", line) for line in batches] == [
        "-- batch 0 in T: read 1 file, 3 rows; wrote N files, 3 rows",
        "-- batch 1 in T: read 1 file, 1 row; wrote N files, 2 rows"]  # the update: its pre- and post-image
    assert status == [0] and "\r" not in captured.err

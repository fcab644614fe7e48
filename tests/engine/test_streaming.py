"""Incremental runs of CHANGELOG_FILTER on Structured Streaming: the outputs of the runs,
concatenated, equal the batch output over the whole input, however the input is split into
increments; each change is forwarded by the run that sees it; late changes follow the
sequence_by rule or stop the run with a classed error and nothing written.

Every run is a real ``availableNow`` query over a folder of change files, with its state in
a checkpoint; each costs a few seconds, so the data stays small.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from profiles import examples

from feeds import NULL_V, compact, computed_on, rows_for, run_filter, schema_for
from landing import land, read_rows
from rows import added, multiset
from sqlext.errors import SqlextError
from sqlext.streaming import run_available_now, stream, streaming_frame
from kafka_3902 import CASES, SEQUENCED


def filter_sql(emit="changes", extra=""):
    return ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(changes)), key => 'id', "
            f"predicate => 'v >= 0', emit => '{emit}'{extra})")


class Feed:
    """A folder of change files, the runs' checkpoint and output folder: local paths to look at
    their files, named to sqlext and Spark in the form of ``storage`` (:meth:`uri`)."""

    def __init__(self, spark, shape, root: Path, storage):
        self.spark, self.shape, self.root, self.storage = spark, shape, root, storage
        self.source, self.output, self.checkpoint = root / "changes", root / "out", root / "checkpoint"
        self.seen: list[dict] = []
        self.path = "auto"  # where a run computes: the driver, Spark, or by size

    def add(self, events):
        # no events land as an empty file: an empty micro-batch, which changes nothing
        land(self.source, rows_for(self.shape, events), schema_for(self.shape))

    def uri(self, path: Path) -> str:
        return self.storage.uri(path)

    def options(self) -> dict:
        """The folders of an incremental run (checkpoint, output, sources)."""
        return dict(checkpoint=self.uri(self.checkpoint), output=self.uri(self.output),
                    sources={"changes": self.uri(self.source)})

    def cli_options(self) -> list[str]:
        """The same, as options of ``sqlext stream``."""
        return ["--checkpoint", self.uri(self.checkpoint), "--output", self.uri(self.output),
                "--source", f"changes={self.uri(self.source)}",
                "--conf", f"spark.sqlext.streaming.path={self.path}"]

    def output_frame(self):
        return self.spark.read.parquet(self.uri(self.output))

    def run(self, sql) -> list[dict]:
        """One incremental run; the rows it added to the output."""
        with computed_on(self.spark, self.path):
            run_available_now(self.spark, sql, **self.options())
        if (self.output / "_spark_metadata").exists():  # Spark's own sink: its log says which files count
            rows = [r.asDict() for r in self.output_frame().collect()]
        else:
            rows = read_rows(self.output)
        new, self.seen = added(rows, self.seen), rows
        return new


@pytest.fixture
def feed(spark, storage):
    roots = []

    def make(shape="cdf"):
        roots.append(Path(tempfile.mkdtemp(prefix="sqlext-stream-")))
        return Feed(spark, shape, roots[-1], storage)

    yield make
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


# events: (key, value-or-None), versions in order; split points cut the versions into runs
histories = st.lists(st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(-5, 9))),
                     min_size=1, max_size=14) \
    .map(lambda evs: [(version + 1, key, v) for version, (key, v) in enumerate(evs)])


@settings(max_examples=examples(5, 50), deadline=None, suppress_health_check=list(HealthCheck))
@given(events=histories, cuts=st.lists(st.integers(1, 14), max_size=4), shape=st.sampled_from(["cdf", "upsert"]),
       emit=st.sampled_from(["changes", "records"]), path=st.sampled_from(["driver", "spark"]))
def test_increments_concatenate_to_the_batch_output(spark, feed, events, cuts, shape, emit, path):
    last = len(events)
    bounds = sorted({min(c, last) for c in cuts} | {last})  # equal cuts: an empty increment
    bounds = [bounds[0]] + [b for b in bounds[1:]] + [last]  # one more run, whose one new file is empty
    current = feed(shape)
    current.path = path
    done, out = 0, []
    for bound in bounds:
        current.add([e for e in events if done < e[0] <= bound])
        out += current.run(filter_sql(emit))
        done = bound
    batch = run_filter("native", spark, shape, events, emit=emit)
    assert multiset(out) == multiset(batch)


@settings(max_examples=examples(5, 50), deadline=None, suppress_health_check=list(HealthCheck))
@given(events=histories, cuts=st.lists(st.integers(1, 14), max_size=3), shape=st.sampled_from(["cdf", "upsert"]),
       share=st.sampled_from([0.5, float("inf")]), path=st.sampled_from(["driver", "spark"]))
@example(events=[(1, 0, 0), (2, 0, None)], cuts=[1], shape="cdf", share=0.5, path="driver")  # the table empties
def test_emit_final_keeps_the_output_equal_to_the_batch_final_table(spark, tmp_path_factory, storage, events, cuts,
                                                                    shape, share, path):
    """A run of emit => 'final' rewrites its output folder as the final table each run: after every
    run it holds exactly the batch run's final table over the changes so far (the state
    compacted now and then, or kept as deltas)."""
    import sqlext.streaming.state as stream_state

    last = len(events)
    bounds = sorted({min(c, last) for c in cuts} | {last}) + [last]
    current = Feed(spark, shape, tmp_path_factory.mktemp("final"), storage)
    current.path = path
    done = 0
    default, stream_state.COMPACT_SHARE = stream_state.COMPACT_SHARE, share
    try:
        for bound in bounds:
            current.add([e for e in events if done < e[0] <= bound])
            current.run(filter_sql("final"))
            done = bound
            assert multiset(current.seen) == multiset(
                run_filter("native", spark, shape, [e for e in events if e[0] <= bound], emit="final")), bound
    finally:
        stream_state.COMPACT_SHARE = default


@pytest.mark.parametrize("path", ["driver", "spark"], ids=["driver", "executors"])
def test_each_change_is_forwarded_by_the_run_that_sees_it(spark, feed, path):
    """The case table of KAFKA-3902, every case on its own key, one version per run: each
    run forwards exactly the batch output's rows of its version."""
    events = [(version, index, *rest) for index, (case_events, *_) in enumerate(CASES.values())
              for version, _key, *rest in case_events]
    versions = sorted({e[0] for e in events})
    batch = compact(run_filter("native", spark, "cdf", events), "changes")
    current = feed("cdf")
    current.path = path
    for version in versions:
        current.add([e for e in events if e[0] == version])
        got = compact(current.run(filter_sql()), "changes")
        assert sorted(got, key=repr) == sorted([b for b in batch if b[2] == version], key=repr), version


@pytest.mark.parametrize("path", ["driver", "spark"], ids=["driver", "executors"])
def test_a_late_change_stops_the_run_and_writes_nothing(feed, path):
    current = feed("cdf")
    current.path = path
    current.add([(1, 1, 5), (2, 1, 7)])
    assert compact(current.run(filter_sql()), "changes") == [
        ("insert", 5, 1), ("update_preimage", 5, 2), ("update_postimage", 7, 2)]
    current.add([(2, 2, 3), (1, 1, 9)])  # version 1 of key 1 again: the earlier run applied 2
    with pytest.raises(SqlextError, match=r"\[LATE_CHANGE\].*id=1.*_commit_version = 1.*not above 2"):
        current.run(filter_sql())
    assert current.output_frame().count() == 3  # key 2 not written either


def test_with_sequence_by_a_late_stale_change_is_ignored(feed):
    current = feed("upsert")
    sequenced = filter_sql(extra=", sequence_by => 'ts'")
    current.add([(1, 1, 5, 10), (2, 1, 7, 20)])
    assert len(current.run(sequenced)) == 3
    current.add([(1, 1, 9, 15), (3, 2, 4, 1)])  # late for key 1 and older than its ts 20: ignored
    assert compact(current.run(sequenced), "changes") == [("insert", 4, 3)]


@pytest.mark.parametrize("case", list(SEQUENCED))
def test_sequence_by_cases_across_runs(spark, feed, case):
    events, changes, _records, _final = SEQUENCED[case]
    current = feed("cdf")
    out = []
    for event in events:
        current.add([event])
        out += current.run(filter_sql(extra=", sequence_by => 'ts'"))
    assert compact(out, "changes") == changes


def test_a_streaming_view_is_read_as_it_is(spark, tmp_path, storage):
    """streaming_frame, for any sink: the run writes the statement's rows into a folder of its
    checkpoint and the frame streams that folder, so a sink query (here foreachBatch, with a
    checkpoint of its own) gets each run's rows once."""
    current = Feed(spark, "cdf", tmp_path, storage)
    current.add([(1, 1, 5), (2, 2, -1), (3, 1, NULL_V)])
    schema = spark.read.parquet(current.uri(current.source)).schema
    spark.readStream.schema(schema).parquet(current.uri(current.source)).createOrReplaceTempView("stream_view_changes")
    sql = filter_sql().replace("STREAM(changes)", "STREAM(stream_view_changes)") \
        .replace("SELECT *", "SELECT id, v, _change_type")
    engine_checkpoint = current.uri(tmp_path / "engine-checkpoint")

    sunk: list[tuple] = []

    def sink_run():
        frame = streaming_frame(spark, sql, checkpoint=engine_checkpoint)
        assert frame.isStreaming and frame.columns == ["id", "v", "_change_type"]
        frame.writeStream.foreachBatch(lambda batch, _id: sunk.extend(tuple(r) for r in batch.collect())) \
            .option("checkpointLocation", current.uri(current.checkpoint)).trigger(availableNow=True).start() \
            .awaitTermination()
        return sorted(sunk)

    try:
        assert sink_run() == [(1, 5, "delete"), (1, 5, "insert")]
        current.add([(4, 2, 3), (5, 1, 6)])
        assert sink_run() == [(1, 5, "delete"), (1, 5, "insert"), (1, 6, "insert"), (2, 3, "insert")]
        assert (tmp_path / "engine-checkpoint" / "sqlext-output").is_dir()  # the engine's output, in its checkpoint
    finally:
        spark.catalog.dropTempView("stream_view_changes")


def test_streaming_frame_of_a_stateful_statement_needs_a_checkpoint_and_appends(spark, tmp_path, storage):
    """Without a checkpoint the state has nowhere to live; emit => 'final' is rewritten in place,
    which a stream cannot read: both are classed errors, before anything runs."""
    current = Feed(spark, "cdf", tmp_path, storage)
    current.add([(1, 1, 5)])
    sources = {"changes": current.uri(current.source)}
    with pytest.raises(SqlextError, match=r"\[UNSUPPORTED_STREAM\] streaming_frame: .*checkpoint=\.\.\."):
        streaming_frame(spark, filter_sql(), sources=sources)
    with pytest.raises(SqlextError, match=r"\[UNSUPPORTED_STREAM\] streaming_frame: emit => 'final'"):
        streaming_frame(spark, filter_sql("final"), sources=sources, checkpoint=current.uri(current.checkpoint))
    assert not current.checkpoint.exists()
    plain = streaming_frame(spark, "SELECT id, v FROM STREAM(changes) WHERE v >= 0", sources=sources)
    assert plain.isStreaming and plain.columns == ["id", "v"]  # no state: Spark's own stream, no checkpoint


def test_the_engine_choice_is_gone(tmp_path, capsys):
    """There is one engine, so there is no engine to choose: ``engine=`` is an unexpected
    keyword of the API, ``--engine`` an unrecognized option of the commands; nothing starts."""
    from sqlext.bench.incremental import bench_incremental
    from sqlext.cli import main

    with pytest.raises(TypeError, match="engine"):
        stream(None, filter_sql(), checkpoint=str(tmp_path / "checkpoint"), engine="tables")
    with pytest.raises(TypeError, match="engine"):
        bench_incremental(None, rows=100, runs=1, engines=("tables",))
    query = tmp_path / "filter.sql"
    query.write_text(filter_sql() + ";\n")
    for argv in (["stream", str(query), "--checkpoint", str(tmp_path / "c"), "--output", str(tmp_path / "o"),
                  "--engine", "tables"], ["bench", "incremental", "--engine", "tables"]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        assert "unrecognized arguments: --engine" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("sql, error", [
    ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(changes_table), key => 'id', predicate => 'v >= 0')",
     "UNSUPPORTED_STREAM"),
    ("WITH RECURSIVE r(id, n) AS (SELECT id, 0 FROM CHANGELOG_FILTER(input => TABLE(STREAM(changes)), key => 'id', "
     "predicate => 'v >= 0') UNION ALL SELECT id, n + 1 FROM r WHERE n < 3) SELECT * FROM r", "UNSUPPORTED_STREAM"),
    ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(changes)), key => 'nope', predicate => 'v >= 0')",
     "CHANGELOG_MISSING_COLUMN"),
    ("SELECT * FROM CHANGELOG_FILTER(input => TABLE(STREAM(changes)), key => 'id', predicate => 'v + 1')",
     "EXPRESSION_TYPE_MISMATCH"),
])
def test_what_cannot_run_incrementally_is_a_classed_error(spark, feed, sql, error):
    current = feed("cdf")
    current.add([(1, 1, 5)])
    spark.read.parquet(current.uri(current.source)).createOrReplaceTempView("changes_table")
    with pytest.raises(SqlextError, match=rf"\[{error}\]"):
        stream(spark, sql, **current.options())


def test_an_empty_source_folder_is_a_classed_error(spark, feed):
    current = feed("cdf")
    with pytest.raises(SqlextError, match=r"\[STREAM_SOURCE_EMPTY\]"):
        stream(spark, filter_sql(), **current.options())


def test_the_cli_runs_a_file_incrementally_and_reports_late_changes(spark, feed, tmp_path, capsys):
    from sqlext.cli import main

    current = feed("cdf")
    current.add([(1, 1, 5)])
    query = tmp_path / "filter `{x}`.sql"
    query.write_text(filter_sql() + ";\n")
    argv = ["stream", str(query), *current.cli_options()]
    assert main(argv) == 0
    assert "run complete" in capsys.readouterr().out
    assert [tuple(r) for r in current.output_frame().collect()] == [(1, "acct1", 5, 1, "insert", 1)]
    current.add([(1, 2, 1)])
    assert main(argv) == 0
    current.add([(1, 1, 8)])
    assert main(argv) == 1
    assert "[LATE_CHANGE]" in capsys.readouterr().err


def _batch_rows(spark, current, emit="changes"):
    """The batch output over every change file in the feed's folder."""
    import sqlext

    spark.read.parquet(current.uri(current.source)).createOrReplaceTempView("all_changes_so_far")
    sql = filter_sql(emit).replace("STREAM(changes)", "all_changes_so_far")
    return multiset(r.asDict() for r in sqlext.sql(spark, sql).collect())


def _output_rows(spark, current):
    return multiset(r.asDict() for r in current.output_frame().collect())


def _run_and_compare(spark, current) -> None:
    """One more run; then the whole output is the batch output over every change so far."""
    current.run(filter_sql())
    assert _output_rows(spark, current) == _batch_rows(spark, current)


def _many_events(first_version, keys, versions):
    return [(first_version + v, k, (k * 7 + v * 3) % 11 - 3 if (k + v) % 9 else None)
            for v in range(versions) for k in range(keys)]


@pytest.mark.storage("viewfs")
@pytest.mark.parametrize("path", ["driver", "spark"], ids=["driver", "executors"])
def test_a_run_killed_mid_batch_is_redone_exactly_once(spark, feed, tmp_path, storage, path):
    """SIGKILL the process while its micro-batch runs (offsets logged, no commit yet); the next
    run redoes it: every expected row exactly once, and the state carries on as if nothing
    had happened (a later increment gives the batch result too)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    current = feed("cdf")
    current.path = path
    current.add(_many_events(1, 4000, 6))
    query = tmp_path / "filter.sql"
    query.write_text(filter_sql())
    command = [sys.executable, "-m", "sqlext.cli", "stream", str(query), *current.cli_options()]
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                             env=storage.child_env())
    started = time.monotonic()
    while not (current.checkpoint / "offsets" / "0").exists():
        assert child.poll() is None, "the run ended before its first micro-batch was logged"
        assert time.monotonic() - started < 600
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    assert not (current.checkpoint / "commits" / "0").exists()  # killed inside the batch
    _run_and_compare(spark, current)
    current.add(_many_events(7, 4000, 2))
    _run_and_compare(spark, current)


@pytest.mark.storage("viewfs")
def test_a_crash_after_the_output_before_the_commit_writes_nothing_twice(spark, feed):
    """The state a crash leaves between the sink's write and the checkpoint's commit: the
    batch's output is in the sink's log, its commit is not. The next run redoes the batch;
    the sink keeps one copy and the state ends as without the crash."""
    current = feed("cdf")
    current.add(_many_events(1, 50, 3))
    current.run(filter_sql())
    current.add(_many_events(4, 50, 2))
    current.run(filter_sql())
    commits = sorted((current.checkpoint / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()
    (current.checkpoint / "commits" / f".{last.name}.crc").unlink(missing_ok=True)
    _run_and_compare(spark, current)
    current.add(_many_events(6, 50, 2))
    _run_and_compare(spark, current)


# ``sqlext stream`` that kills its own process group (itself and its JVM) with SIGKILL inside
# micro-batch 1 once its state is committed: its output files are written, the batch's function
# has not returned, and Spark has not recorded the batch
KILLED_AFTER_THE_STATE = """
import os, signal, sys
from sqlext.cli import main
from sqlext.streaming.state import KeyedState

commit = KeyedState.commit
def commit_then_die(self, pending):
    commit(self, pending)
    if pending and pending[0].batch_id == 1:
        os.killpg(os.getpgrp(), signal.SIGKILL)
KeyedState.commit = commit_then_die
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("path", ["driver", "spark"], ids=["driver", "executors"])
def test_readers_outside_spark_see_only_committed_output_and_the_redo_counts_its_files(spark, feed, tmp_path,
                                                                                        storage, path, capsys):
    """SIGKILL ``sqlext stream`` inside micro-batch 1 after its output is written and its state
    committed, before the batch commits. pyarrow and pandas, which read every Parquet file of a
    folder (not Spark's records of it), see the rows of batch 0 alone; the redo's summary
    counts the files and rows it committed, and the folder then holds the batch output once."""
    import re

    import pandas as pd
    import pyarrow.dataset as ds

    from sqlext.cli import main

    current = feed("cdf")
    current.path = path
    current.add(_many_events(1, 300, 2))
    first = current.run(filter_sql())
    current.add(_many_events(3, 300, 2))
    query = tmp_path / "filter.sql"
    query.write_text(filter_sql())
    storage.run_until_killed(KILLED_AFTER_THE_STATE, "stream", str(query), *current.cli_options())
    assert (current.checkpoint / "offsets" / "1").exists() and not (current.checkpoint / "commits" / "1").exists()
    committed = multiset(first)
    assert multiset(ds.dataset(str(current.output), format="parquet").to_table().to_pylist()) == committed
    seen_by_pandas = pd.read_parquet(current.output)[["id", "_change_type", "_commit_version"]]
    assert multiset(seen_by_pandas.itertuples(index=False, name=None)) == \
        multiset((r["id"], r["_change_type"], r["_commit_version"]) for r in first)

    options = ["--checkpoint", current.uri(current.checkpoint), "--output", current.uri(current.output),
               "--source", f"changes={current.uri(current.source)}"]
    capsys.readouterr()
    with computed_on(spark, path):
        assert main(["stream", str(query), *options]) == 0
    said = re.search(r"wrote (\d+) files?, (\d+) rows?", capsys.readouterr().out)
    expected = _batch_rows(spark, current)
    files = list(current.output.glob("batch-0000000001-*"))
    assert said is not None and files
    assert (int(said[1]), int(said[2])) == (len(files), sum(expected.values()) - len(first))
    assert multiset(ds.dataset(str(current.output), format="parquet").to_table().to_pylist()) == expected


def test_the_redo_of_a_batch_killed_while_moving_its_output_in_finishes_the_move(spark, tmp_path, storage):
    """A batch killed while its files were moved into the output folder (the move recorded, one
    file moved, one not): its redo finishes that move before it runs, and moves none of the rows
    it computes again. A batch killed before its move leaves nothing its redo keeps."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from sqlext.storage import resolve
    from sqlext.streaming.run import COMMITTING, BatchOutput

    out = resolve(spark, storage.uri(tmp_path / "out"))
    sink = BatchOutput(out, resolve(spark, storage.uri(tmp_path / "checkpoint")), "parquet")
    rows = pa.table({"id": pa.array([1, 2], pa.int64())})
    names = [f"batch-0000000003-part-0000{n}.parquet" for n in (0, 1)]
    for name in names:
        (sink.pending(3) / name).write_parquet(rows)
    (sink.pending(3) / COMMITTING).write_bytes(b"")
    (sink.pending(3) / names[0]).rename_to(out / names[0])  # killed after the first rename
    assert sorted(ds.dataset(str(tmp_path / "out"), format="parquet").to_table()["id"].to_pylist()) == [1, 2]

    sink.begin(spark, 3)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == names
    sink.write_arrow(pa.table({"id": pa.array([9], pa.int64())}), 3)  # the redo computes its rows again
    sink.commit(3)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == names
    assert sorted(ds.dataset(str(tmp_path / "out"), format="parquet").to_table()["id"].to_pylist()) == [1, 1, 2, 2]

    sink.write_arrow(pa.table({"id": pa.array([7], pa.int64())}), 4)  # batch 4, killed before its move
    sink.begin(spark, 4)
    sink.write_arrow(pa.table({"id": pa.array([8], pa.int64())}), 4)
    sink.commit(4)
    assert sorted(ds.dataset(str(tmp_path / "out"), format="parquet").to_table()["id"].to_pylist()) == [1, 1, 2, 2, 8]
    assert not any(p.name.startswith("_sqlext_pending") for p in (tmp_path / "out").iterdir())


def test_bench_incremental_checks_rows_and_reports(spark, capsys):
    from sqlext.bench.incremental import bench_incremental

    results = bench_incremental(spark, rows=4000, runs=1, percent=5)
    out = capsys.readouterr().out
    assert out.count("first incremental run") == 1 and out.count("ratio batch/incremental") == 1
    assert len(results["incremental"]) == len(results["batch"]) == 1
    assert results["rows"] > 0


def test_a_changed_input_schema_between_runs_is_a_classed_error(spark, feed):
    current = feed("cdf")
    current.add([(1, 1, 5)])
    current.run(filter_sql())
    spark.createDataFrame([(2, "acct2", 3, 2, "insert", 2, "extra")],
                          "id BIGINT, name STRING, v BIGINT, ts BIGINT, _change_type STRING, _commit_version BIGINT, "
                          "note STRING").write.mode("append").parquet(current.uri(current.source))
    with pytest.raises(SqlextError, match=r"\[STREAM_SCHEMA_CHANGED\].*note was added"):
        current.run(filter_sql())
    assert current.output_frame().count() == 1


def test_files_that_differ_only_in_required_columns_are_not_read_again_for_their_columns(spark, feed, monkeypatch):
    """Spark reads every column of a Parquet file as nullable: a later file whose columns are
    required (written from literals) has the columns the earlier runs recorded, so a run reads
    its footer only, not every file through Spark."""
    from pyspark.sql.types import _parse_datatype_string

    from sqlext.streaming.sources import Sources

    current = feed("cdf")
    current.add([(1, 1, 5)])
    assert len(current.run(filter_sql())) == 1
    schema = _parse_datatype_string(schema_for("cdf").replace("BIGINT", "BIGINT NOT NULL"))
    spark.createDataFrame(rows_for("cdf", [(2, 2, 7)]), schema).coalesce(1).write.mode("append") \
        .parquet(current.uri(current.source))
    inferred = []
    original = Sources._inferred
    monkeypatch.setattr(Sources, "_inferred", lambda self, *a: inferred.append(a) or original(self, *a))
    assert [(r["id"], r["v"]) for r in current.run(filter_sql())] == [(2, 7)]
    assert inferred == []


def _layers(current) -> set[tuple[str, ...]]:
    """The layers of each bucket of the state (the state itself where it has one bucket)."""
    rows = current.checkpoint / "sqlext-state" / "rows"
    buckets = sorted(p for p in rows.iterdir() if p.name.startswith("bucket-")) or [rows]
    return {tuple(sorted(p.name for p in bucket.iterdir() if p.name.startswith(("base-", "delta-"))))
            for bucket in buckets}


@pytest.mark.storage("viewfs")
@pytest.mark.parametrize("share", [0.0, float("inf")], ids=["compact-every-batch", "deltas-only"])
def test_state_layers_give_the_batch_output(spark, monkeypatch, storage, share):
    """A run keeps its state as a base and deltas: whether every batch writes a
    new base or none after the first does, each run's output is the batch output, a batch
    redone after a lost commit gives it too, and only the layers a replay can read are kept."""
    import sqlext.streaming.state as stream_state

    monkeypatch.setattr(stream_state, "COMPACT_SHARE", share)
    root = Path(tempfile.mkdtemp(prefix="sqlext-layers-"))
    try:
        current = Feed(spark, "upsert", root, storage)
        for first in (1, 3, 5, 7):
            current.add(_many_events(first, 40, 2))
            _run_and_compare(spark, current)
        if share == 0.0:
            assert _layers(current) == {("base-2", "base-3")}
        else:  # one cumulative delta a batch reads; the one before it for a replay
            assert _layers(current) == {("base-0", "delta-2", "delta-3")}
        last = current.checkpoint / "commits" / "3"
        last.unlink()
        (current.checkpoint / "commits" / ".3.crc").unlink(missing_ok=True)
        _run_and_compare(spark, current)  # batch 3 again, from the layers before it
        current.add([(9, 1, 4), (9, 2, None), (10, 1, -1)])
        _run_and_compare(spark, current)
    finally:
        shutil.rmtree(root, ignore_errors=True)

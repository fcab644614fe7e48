"""Incremental runs of FK_JOIN on Structured Streaming: the outputs of
the runs, concatenated, equal the batch output over the whole input however the input is
split into increments; KIP-213's event table fed one event per run gives each row of the
table in the run that sees its event; a late change stops the run with nothing written.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

from feeds import computed_on
from landing import land, read_rows
from rows import added, multiset
from sqlext.errors import SqlextError
from sqlext.streaming import run_available_now
from kip_213 import (
    LEFT_CDF, LEFT_UPSERT, RIGHT_CDF, RIGHT_UPSERT, SEED_EVENTS, SEED_EXPECTED, compact, event_lists, feed, fk_join,
)


def join_sql(join_type="inner", emit="changes", extra="", foreign_key="fk"):
    return ("SELECT * FROM FK_JOIN(left => TABLE(STREAM(orders)), right => TABLE(STREAM(customers)), "
            f"left_key => 'id', foreign_key => '{foreign_key}', right_key => 'rid', join_type => '{join_type}', "
            f"emit => '{emit}'{extra})")


class Feeds:
    """Two folders of change files (left: orders, right: customers), made from a whole list
    of events (version, side, key, row) and released an increment at a time. The test looks at
    the local paths; sqlext and Spark are given them in the form of ``storage`` (:meth:`uri`)."""

    def __init__(self, spark, shape: str, events, root: Path, storage):
        from pyspark.sql.types import _parse_datatype_string

        self.spark, self.root, self.storage = spark, root, storage
        self.schemas = {"orders": _parse_datatype_string(LEFT_CDF if shape == "cdf" else LEFT_UPSERT),
                        "customers": _parse_datatype_string(RIGHT_CDF if shape == "cdf" else RIGHT_UPSERT)}
        self.rows = {
            "orders": feed([(v, k, r) for v, side, k, r in events if side == "left"], shape, "id"),
            "customers": feed([(v, k, r) for v, side, k, r in events if side == "right"], shape, "rid"),
        }
        self.output, self.checkpoint = root / "out", root / "checkpoint"
        self.seen: list[dict] = []
        self.path = "auto"  # where a run computes: the driver, Spark, or by size
        for name, schema in self.schemas.items():  # both folders hold their columns from the start
            land(root / name, [], schema)

    def release(self, after, upto) -> None:
        for name, rows in self.rows.items():
            chosen = [r for r in rows if after < r["_commit_version"] <= upto]
            if chosen:
                land(self.root / name, chosen, self.schemas[name])

    def uri(self, path: Path) -> str:
        return self.storage.uri(path)

    def options(self) -> dict:
        """The folders of an incremental run: checkpoint, output and both sources."""
        return dict(checkpoint=self.uri(self.checkpoint), output=self.uri(self.output),
                    sources={name: self.uri(self.root / name) for name in ("orders", "customers")})

    def output_frame(self):
        return self.spark.read.parquet(self.uri(self.output))

    def run(self, sql) -> list[dict]:
        """One incremental run; the rows it added to the output."""
        with computed_on(self.spark, self.path):
            self.last_batch = run_available_now(self.spark, sql, **self.options()).last_batch
        rows = read_rows(self.output)
        new, self.seen = added(rows, self.seen), rows
        return new


@pytest.fixture
def feeds(spark, storage):
    roots = []

    def make(shape, events):
        roots.append(Path(tempfile.mkdtemp(prefix="sqlext-stream-fk-")))
        return Feeds(spark, shape, events, roots[-1], storage)

    yield make
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=examples(6, 60), deadline=None, suppress_health_check=list(HealthCheck))
@given(events=event_lists.filter(bool), cuts=st.lists(st.integers(0, 40), max_size=3),
       join_type=st.sampled_from(["inner", "left"]), shape=st.sampled_from(["cdf", "upsert"]),
       emit=st.sampled_from(["changes", "records"]), share=st.sampled_from([0.5, float("inf")]),
       path=st.sampled_from(["driver", "spark"]))
def test_increments_concatenate_to_the_batch_output(spark, feeds, events, cuts, join_type, shape, emit, share,
                                                    path):
    """Random interleavings of left and right changes (foreign key changes, NULL foreign keys,
    deletes, re-inserts, a left and a right change at one version), cut into increments at
    version boundaries (some increments empty, some touching one side only); the state
    compacted now and then, or kept as deltas throughout."""
    import sqlext.streaming.state as stream_state

    last = events[-1][0]
    bounds = sorted({min(c, last) for c in cuts} | {last}) + [last]
    current = feeds(shape, events)
    current.path = path
    done, out = -1, []
    default, stream_state.COMPACT_SHARE = stream_state.COMPACT_SHARE, share
    try:
        for bound in bounds:
            current.release(done, bound)
            out += current.run(join_sql(join_type, emit))
            done = bound
    finally:
        stream_state.COMPACT_SHARE = default
    assert multiset(out) == multiset(fk_join(spark, events, shape, join_type, emit))


@settings(max_examples=examples(5, 50), deadline=None, suppress_health_check=list(HealthCheck))
@given(events=event_lists.filter(bool), cuts=st.lists(st.integers(0, 40), max_size=3),
       join_type=st.sampled_from(["inner", "left"]), shape=st.sampled_from(["cdf", "upsert"]),
       path=st.sampled_from(["driver", "spark"]))
def test_emit_final_keeps_the_output_equal_to_the_batch_final_table(spark, feeds, events, cuts, join_type, shape,
                                                                    path):
    """The output folder is rewritten as the join's final table each run: after every run it
    holds exactly the batch FK_JOIN's final table over the changes so far."""
    last = events[-1][0]
    bounds = sorted({min(c, last) for c in cuts} | {last}) + [last]
    current = feeds(shape, events)
    current.path = path
    done = -1
    for bound in bounds:
        current.release(done, bound)
        current.run(join_sql(join_type, "final"))
        done = bound
        assert multiset(current.seen) == multiset(
            fk_join(spark, [e for e in events if e[0] <= bound], shape, join_type, "final")), bound


@pytest.mark.parametrize("join_type, emit", [("inner", "records"), ("left", "changes")])
def test_kip_213_event_table_one_event_per_run(feeds, join_type, emit):
    """Each run on the driver forwards exactly the event table's rows for the event it sees
    (the executors' runs of the same table, in 1, 3 and 8 buckets and both ways their tasks get
    their rows, are in test_fk_join_subscriptions.py)."""
    current = feeds("cdf", SEED_EVENTS)
    current.path = "driver"
    expected = SEED_EXPECTED[(join_type, emit)]
    for version, *_ in SEED_EVENTS:
        current.release(version - 1, version)
        got = compact(current.run(join_sql(join_type, emit)), emit)
        assert current.last_batch.placement == "driver"
        assert got == [r for r in expected if r[4] == version], version


def test_a_late_change_of_either_input_stops_the_run_and_writes_nothing(feeds):
    events = [(1, "right", 1, {"name": "foo"}), (2, "left", "k", {"fk": 1, "note": "n"}),
              (3, "right", 1, {"name": "bar"})]
    current = feeds("cdf", events)
    current.release(0, 2)
    assert len(current.run(join_sql())) == 1
    current.release(2, 3)
    current.rows = {"orders": [], "customers": [{"rid": 2, "name": "late", "_change_type": "insert",
                                                 "_commit_version": 2}]}
    current.release(0, 2)  # version 2 of a right key: the earlier run went up to version 2
    with pytest.raises(SqlextError, match=r"\[LATE_CHANGE\].*rid=2.*_commit_version = 2.*not above 2.*both inputs"):
        current.run(join_sql())
    assert current.output_frame().count() == 1


@pytest.mark.parametrize("sql, error", [
    # keys Spark compares only through an implicit cast: refused before any run, with the cast to write
    (join_sql(foreign_key="CAST(fk AS STRING)"), r"foreign key of type string.*rid of type bigint.*"
                                                 r"CAST\(CAST\(fk AS STRING\) AS BIGINT\)"),
])
def test_what_fk_join_cannot_run_incrementally_is_a_classed_error(feeds, sql, error):
    current = feeds("cdf", [(1, "left", "k", {"fk": 1, "note": "n"})])
    with pytest.raises(SqlextError, match=r"\[UNSUPPORTED_STREAM\].*" + error):
        run_available_now(current.spark, sql, **current.options())


@pytest.mark.storage("viewfs")
@pytest.mark.parametrize("path", ["driver", "spark"])
def test_a_batch_redone_after_a_lost_commit_writes_its_rows_once(spark, feeds, monkeypatch, path):
    """With the state kept as deltas (no compaction; on the executors, whose processes keep the
    default share, as they compact), a batch whose commit was lost is redone from the layers
    before it: the output holds each row once and later runs stay exact, wherever it runs."""
    import sqlext.streaming.state as stream_state

    monkeypatch.setattr(stream_state, "COMPACT_SHARE", float("inf"))
    events = [(1, "right", 1, {"name": "a"}), (2, "left", "k", {"fk": 1, "note": "n"}),
              (3, "left", "q", {"fk": 1, "note": "m"}), (4, "right", 1, {"name": "b"}),
              (5, "left", "k", {"fk": 2, "note": "n"}), (6, "right", 2, {"name": "c"}),
              (7, "left", "q", None), (8, "right", 1, None)]
    current = feeds("cdf", events)
    current.path = path
    for after, upto in ((0, 2), (2, 4), (4, 6)):
        current.release(after, upto)
        current.run(join_sql("left", "changes"))
    (current.checkpoint / "commits" / "2").unlink()
    (current.checkpoint / "commits" / ".2.crc").unlink(missing_ok=True)
    current.run(join_sql("left", "changes"))
    current.release(6, 8)
    current.run(join_sql("left", "changes"))
    written = [r.asDict() for r in current.output_frame().collect()]
    assert multiset(written) == multiset(fk_join(spark, events, "cdf", "left", "changes"))


SEQUENCED_LEFT = "id STRING, fk BIGINT, ts BIGINT, _change_type STRING, _commit_version BIGINT"
SEQUENCED_RIGHT = "rid BIGINT, name STRING, ts BIGINT, _change_type STRING, _commit_version BIGINT"


@st.composite
def sequenced_events(draw):
    """Changes of both inputs, one version each, whose ``ts`` runs out of order now and then
    (a change older than its key's row is stale and ignored): inserts, updates, deletes."""
    rows = {"left": [], "right": []}
    current = {"left": {}, "right": {}}
    for version in range(1, draw(st.integers(1, 16)) + 1):
        side = draw(st.sampled_from(["left", "right"]))
        key = draw(st.sampled_from(["a", "b", "c"]) if side == "left" else st.integers(1, 3))
        ts = draw(st.integers(0, 12))
        old = current[side].get(key)
        value = None if old is not None and draw(st.integers(0, 3)) == 0 else \
            draw(st.integers(1, 3)) if side == "left" else f"n{version}"
        columns = ("fk" if side == "left" else "name")
        key_column = "id" if side == "left" else "rid"
        if value is None:
            rows[side].append({key_column: key, columns: old, "ts": ts, "_change_type": "delete",
                               "_commit_version": version})
            current[side].pop(key)
        elif old is None:
            rows[side].append({key_column: key, columns: value, "ts": ts, "_change_type": "insert",
                               "_commit_version": version})
            current[side][key] = value
        else:
            rows[side].append({key_column: key, columns: old, "ts": ts, "_change_type": "update_preimage",
                               "_commit_version": version})
            rows[side].append({key_column: key, columns: value, "ts": ts, "_change_type": "update_postimage",
                               "_commit_version": version})
            current[side][key] = value
    return rows


@settings(max_examples=examples(6, 60), deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=sequenced_events(), cuts=st.lists(st.integers(1, 16), max_size=3),
       join_type=st.sampled_from(["inner", "left"]), emit=st.sampled_from(["changes", "records"]),
       path=st.sampled_from(["driver", "spark"]))
def test_sequence_by_increments_concatenate_to_the_batch_output(spark, tmp_path_factory, storage, rows, cuts,
                                                                 join_type, emit, path):
    """Versioned inputs (KIP-914): a change older by ``ts`` than its key's latest applied one is
    ignored, by the increments as by the batch function, wherever the runs are cut."""
    import sqlext

    root = tmp_path_factory.mktemp("sequenced")
    sql = ("SELECT * FROM FK_JOIN(left => TABLE(STREAM(orders)), right => TABLE(STREAM(customers)), "
           "left_key => 'id', foreign_key => 'fk', right_key => 'rid', sequence_by => 'ts', "
           f"join_type => '{join_type}', emit => '{emit}')")
    schemas = {"orders": SEQUENCED_LEFT, "customers": SEQUENCED_RIGHT}
    sides = {"orders": rows["left"], "customers": rows["right"]}
    last = max(r["_commit_version"] for side in sides.values() for r in side)
    bounds = sorted({min(c, last) for c in cuts} | {last})
    out, done = [], 0
    for bound in bounds:
        for name, side in sides.items():
            chosen = [r for r in side if done < r["_commit_version"] <= bound]
            land(root / name, chosen, schemas[name])
        with computed_on(spark, path):
            run_available_now(spark, sql, checkpoint=storage.uri(root / "cp"), output=storage.uri(root / "out"),
                              sources={name: storage.uri(root / name) for name in sides})
        done = bound
    out = read_rows(root / "out")
    for name, side in sides.items():
        spark.createDataFrame(side, schemas[name]).createOrReplaceTempView(name + "_all")
    try:
        batch = [r.asDict() for r in sqlext.sql(spark, sql.replace("STREAM(orders)", "orders_all")
                                               .replace("STREAM(customers)", "customers_all")).collect()]
    finally:
        for name in sides:
            spark.catalog.dropTempView(name + "_all")
    assert multiset(out) == multiset(batch)


def test_bench_incremental_fk_checks_rows_against_the_batch(spark, capsys):
    from sqlext.bench.incremental import bench_incremental

    results = bench_incremental(spark, rows=0, runs=1, percent=5, function="fk", left=3000, right=300)
    out = capsys.readouterr().out
    assert "FK_JOIN emit => 'changes': history" in out
    assert results["rows"] > 0 and len(results["incremental"]) == len(results["floor"]) == 1
    assert "floor: a streaming run per input" in out


def _many_fk_events(first_version, versions, left_keys=1500, right_keys=60):
    """Every left key changes (its foreign key moves now and then, or goes NULL) and every
    right key changes, at each version."""
    events = []
    for v in range(first_version, first_version + versions):
        events += [(v, "right", r, {"name": f"n{r}-{v}"} if (r + v) % 7 else None) for r in range(right_keys)]
        events += [(v, "left", f"k{k}", {"fk": None if (k + v) % 11 == 0 else (k * 3 + v) % right_keys,
                                          "note": f"v{v}"} if (k + v) % 13 else None)
                   for k in range(left_keys)]
    return events


# ``sqlext stream`` that kills its own process group (itself and its JVM) with SIGKILL inside
# micro-batch 1, once its output and the first of its two states (the left side's) are written
# and the second is not
KILLED_BETWEEN_THE_STATES = """
import os, signal, sys
from sqlext.cli import main
from sqlext.streaming.state import KeyedState

write = KeyedState.write
def write_then_die(self, view, changed, batch_id, *args, **kwargs):
    write(self, view, changed, batch_id, *args, **kwargs)
    if batch_id == 1:
        os.killpg(os.getpgrp(), signal.SIGKILL)
KeyedState.write = write_then_die
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.storage("viewfs")
def test_a_run_killed_mid_batch_is_redone_exactly_once(spark, feeds, storage):
    """SIGKILL the process inside its second micro-batch (offsets logged, one of its two state
    layers written but not committed, no output, no commit); the next run redoes it, and the
    output holds every row of the batch result exactly once."""
    events = _many_fk_events(1, 6)
    current = feeds("cdf", events)
    current.release(0, 3)
    current.run(join_sql("left", "changes"))
    current.release(3, 6)
    query = current.root / "fk.sql"
    query.write_text(join_sql("left", "changes"))
    options = current.options()
    storage.run_until_killed(KILLED_BETWEEN_THE_STATES, "stream", str(query),
                             "--checkpoint", options["checkpoint"], "--output", options["output"],
                             *[part for name, folder in options["sources"].items()
                               for part in ("--source", f"{name}={folder}")])
    assert (current.checkpoint / "offsets" / "1").exists() and not (current.checkpoint / "commits" / "1").exists()
    state = current.checkpoint / "sqlext-state"
    written = {side: any(p.name in ("_tmp-base-1", "_tmp-delta-1") for p in (state / side).rglob("*"))
               for side in ("left", "right")}
    committed = {side: any(p.name in ("base-1", "delta-1") for p in (state / side).rglob("*"))
                 for side in ("left", "right")}
    # the answer step, which keeps the right state, runs before the join step, which keeps the left
    assert written == {"left": False, "right": True} and committed == {"left": False, "right": False}, \
        (written, committed)
    current.run(join_sql("left", "changes"))
    written = [r.asDict() for r in current.output_frame().collect()]
    assert multiset(written) == multiset(fk_join(spark, events, "cdf", "left", "changes"))


def test_runs_read_their_files_without_spark_past_the_source_logs_compaction(spark, feeds):
    """A small run reads its batch's files itself, from Spark's records of the batch (the
    offset log and each file source's log, which Spark compacts every few batches: here every
    two): no Spark job, and the same rows as the batch FK_JOIN over five runs, the compacted
    entries included. A foreign key that is an expression leaves the reading to Spark, with
    the same rows."""
    from sqlext.streaming import jobs_of

    events = []
    for version in range(1, 6):
        events.append((2 * version - 1, "right", version % 3, {"name": f"n{version}"}))
        events.append((2 * version, "left", f"k{version % 4}", {"fk": version % 3, "note": f"v{version}"}))
    current = feeds("cdf", events)
    jobs = []
    spark.conf.set("spark.sql.streaming.fileSource.log.compactInterval", "2")
    try:
        for run in range(5):
            current.release(2 * run, 2 * run + 2)
            with computed_on(spark, "driver"):
                query = run_available_now(spark, join_sql("left", "changes"), **current.options())
            jobs.append(len(jobs_of(spark, query)))
    finally:
        spark.conf.unset("spark.sql.streaming.fileSource.log.compactInterval")
    assert len(list((current.checkpoint / "sources" / "0").glob("*.compact"))) >= 2
    assert jobs == [0] * 5
    written = [r.asDict() for r in current.output_frame().collect()]
    assert multiset(written) == multiset(fk_join(spark, events, "cdf", "left", "changes"))

    other = feeds("cdf", events)
    sql = join_sql("left", "changes").replace("foreign_key => 'fk'", "foreign_key => 'fk + 0'")
    for bound in (4, 10):
        other.release(bound - 6, bound)
        out = other.run(sql)
        assert out, bound
    written = [r.asDict() for r in other.output_frame().collect()]
    assert multiset(written) == multiset(fk_join(spark, events, "cdf", "left", "changes"))


def test_a_timestamp_order_recorded_on_one_path_is_compared_on_the_other(spark, tmp_path, storage):
    """The highest ordering value a run records is compared by the next run, which may compute
    on the other path (Spark's collect gives TIMESTAMPs as naive local datetimes, Arrow as aware
    ones): runs alternate between the paths, the output is the batch's, and a late change is
    still LATE_CHANGE."""
    from datetime import datetime, timedelta

    import sqlext

    sql = ("SELECT * FROM FK_JOIN(left => TABLE(STREAM(orders)), right => TABLE(STREAM(customers)), "
           "left_key => 'id', foreign_key => 'fk', right_key => 'rid', order_by => 'at', join_type => 'left')")
    schemas = {"orders": "id STRING, fk BIGINT, at TIMESTAMP", "customers": "rid BIGINT, name STRING, at TIMESTAMP"}
    start = datetime(2026, 3, 1, 8, 0)
    rows = {"orders": [], "customers": []}
    options = dict(checkpoint=storage.uri(tmp_path / "cp"), output=storage.uri(tmp_path / "out"),
                   sources={name: storage.uri(tmp_path / name) for name in schemas})
    for run, path in enumerate(["driver", "spark", "driver", "spark"]):
        at = start + timedelta(hours=run)
        new = {"customers": [(run % 2, f"c{run}", at)],
               "orders": [(f"o{run}", run % 2, at + timedelta(minutes=1)), ("o0", (run + 1) % 2, at + timedelta(minutes=2))]}
        for name, batch in new.items():
            spark.createDataFrame(batch, schemas[name]).coalesce(1).write.mode("append") \
                .parquet(storage.uri(tmp_path / name))
            rows[name] += batch
        with computed_on(spark, path):
            run_available_now(spark, sql, **options)
    for name in schemas:
        spark.createDataFrame(rows[name], schemas[name]).createOrReplaceTempView(name + "_all")
    batch = sqlext.sql(spark, sql.replace("STREAM(orders)", "orders_all").replace("STREAM(customers)", "customers_all"))
    written = [r.asDict() for r in spark.read.parquet(storage.uri(tmp_path / "out")).collect()]
    assert multiset(written) == multiset([r.asDict() for r in batch.collect()])
    late = [("o9", 1, start + timedelta(hours=3, minutes=2))]  # at the highest time processed
    spark.createDataFrame(late, schemas["orders"]).coalesce(1).write.mode("append") \
        .parquet(storage.uri(tmp_path / "orders"))
    for path in ("driver", "spark"):
        with computed_on(spark, path), pytest.raises(SqlextError, match=r"\[LATE_CHANGE\]"):
            run_available_now(spark, sql, **options)

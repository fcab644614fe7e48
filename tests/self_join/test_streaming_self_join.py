"""Incremental self-join of one stream within a time band (KIP-862): however the events are
split into runs, the runs' outputs, concatenated, are the batch self-join over all events; both
sides read one state, which keeps only the events the band can still pair; an event too late to
find its partners stops the run with a classed error and nothing written."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

import sqlext
from feeds import computed_on
from landing import land, read_rows
from rows import multiset
from sqlext.errors import SqlextError
from sqlext.storage import local
from sqlext.streaming.batch_parts import MAX_ROWS_SETTING
from sqlext.streaming.engine import BUCKETS_SETTING
from sqlext.streaming.state import KeyedState
from sqlext.streaming import jobs_of, run_available_now

BAND = ("SELECT a.id AS a_id, b.id AS b_id, a.k, b.v - a.v AS dv FROM STREAM(ev) AS a JOIN STREAM(ev) AS b "
        "ON a.k = b.k AND b.ts BETWEEN a.ts - 3 AND a.ts + 1 WHERE b.v >= 0")
SCHEMA = "id BIGINT, k INT, ts BIGINT, v INT"


class Events:
    """A folder of events, a checkpoint and an output folder under ``root``: local paths to look
    at their files, named to sqlext and Spark in the form of ``storage`` (:meth:`uri`)."""

    def __init__(self, spark, root, storage, schema=SCHEMA, path="auto"):
        self.spark, self.root, self.storage, self.schema, self.all = spark, root, storage, schema, []
        self.path = path  # where a run computes: the driver, Spark's executors, or by size

    def uri(self, name: str) -> str:
        return self.storage.uri(self.root / name)

    def land(self, rows) -> None:
        land(self.root / "ev", rows, self.schema)
        self.all += rows

    def run(self, sql):
        with computed_on(self.spark, self.path):
            return run_available_now(self.spark, sql, checkpoint=self.uri("cp"), output=self.uri("out"),
                                     sources={"ev": self.uri("ev")})

    def output_frame(self):
        return self.spark.read.parquet(self.uri("out"))

    def written(self):
        return multiset(read_rows(self.root / "out"))

    def batch(self, sql):
        self.spark.createDataFrame(self.all, self.schema).createOrReplaceTempView("ev_all")
        try:
            return multiset([r.asDict() for r in sqlext.sql(self.spark, sql.replace("STREAM(ev)", "ev_all")).collect()])
        finally:
            self.spark.catalog.dropTempView("ev_all")


@st.composite
def event_runs(draw):
    """Events whose time moves forward with jitter (never more than the band's width behind the
    newest time of an earlier run), cut into runs."""
    runs, ts, next_id = [], 0, 0
    for _ in range(draw(st.integers(1, 4))):
        run = []
        for _ in range(draw(st.integers(0, 8))):
            ts += draw(st.integers(0, 2))
            run.append((next_id, draw(st.integers(0, 2)), ts - draw(st.integers(0, 3)),
                        draw(st.one_of(st.none(), st.integers(-1, 3)))))
            next_id += 1
        runs.append(run)
    return runs


# a statement every part of which a run computes over Arrow data on the driver (BAND's
# subtraction leaves its pairing to Spark): the two pairings are tested apart
COLUMNS_ONLY = ("SELECT a.id AS a_id, b.id AS b_id, a.k, b.v, a.ts FROM STREAM(ev) AS a JOIN STREAM(ev) AS b "
                "ON a.k = b.k AND b.ts >= a.ts - 3 AND b.ts < a.ts + 2 AND a.v IS NOT NULL WHERE b.v <> 2")


@pytest.mark.parametrize("sql", [BAND, COLUMNS_ONLY], ids=["paired-in-spark", "paired-on-the-driver"])
@settings(max_examples=examples(6, 60), deadline=None, suppress_health_check=list(HealthCheck))
@given(runs=event_runs(), path=st.sampled_from(["driver", "spark"]))
def test_runs_concatenate_to_the_batch_self_join(spark, tmp_path_factory, storage, sql, runs, path):
    events = Events(spark, tmp_path_factory.mktemp("selfjoin"), storage, path=path)
    for run in runs:
        if run:
            events.land(run)
            events.run(sql)
    assert events.written() == (events.batch(sql) if events.all else multiset([]))


def _events_state(events: Events) -> KeyedState:
    return KeyedState(local(str(events.root / "cp" / "sqlext-state" / "events")), [])


def test_the_statements_above_take_the_pairings_they_are_meant_to_test(spark):
    from sqlext.language.dialect import parse_one
    from sqlext.streaming.operators.self_join import SelfJoinShape

    schema = spark.createDataFrame([], SCHEMA).schema
    assert SelfJoinShape(spark, parse_one(COLUMNS_ONLY), schema).arrow is not None
    assert SelfJoinShape(spark, parse_one(BAND), schema).arrow is None


def test_a_run_that_pairs_on_the_driver_starts_no_spark_job(spark, tmp_path, storage):
    events = Events(spark, tmp_path, storage, path="driver")
    for first in range(0, 90, 30):
        events.land([(i, i % 3, i, i % 5) for i in range(first, first + 30)])
        query = events.run(COLUMNS_ONLY)
    assert events.written() == events.batch(COLUMNS_ONLY)
    assert jobs_of(spark, query) == []


def test_awkward_names_pair_on_the_driver_as_in_batch(spark, tmp_path, storage):
    schema = "`id x` BIGINT, `k'q` INT, `t``s` BIGINT, `v{0}` STRING"
    sql = ("SELECT a.`id x` AS `a's id`, b.`id x` AS `b ``id``` , b.`v{0}` FROM STREAM(ev) AS `a a` "
           "JOIN STREAM(ev) AS b ON `a a`.`k'q` = b.`k'q` AND b.`t``s` BETWEEN `a a`.`t``s` - 2 AND `a a`.`t``s` "
           "WHERE b.`v{0}` <> 'x'")
    sql = sql.replace("a.`id x`", "`a a`.`id x`")
    events = Events(spark, tmp_path, storage, schema, "driver")
    for first in (0, 6, 12):
        events.land([(i, i % 2, i, "x" if i % 4 == 0 else f"v'{i}`") for i in range(first, first + 6)])
        query = events.run(sql)
    assert events.written() == events.batch(sql)
    assert sum(events.written().values()) > 6
    assert jobs_of(spark, query) == []  # paired on the driver


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_awkward_names_read_from_the_pairs_as_in_batch(spark, tmp_path, storage, path):
    """A statement Spark computes over the pairs found (arithmetic and a function in its select
    list, one item unaliased): each item named as Spark names it over the stream, every
    condition applied as written."""
    schema = "`id x` BIGINT, `k'q` INT, `t``s` BIGINT, `v{0}` STRING"
    sql = ("SELECT `a a`.`id x` AS `a's id`, b.`t``s` - `a a`.`t``s`, concat(b.`v{0}`, '}') AS `w ``{1}` "
           "FROM STREAM(ev) AS `a a` JOIN STREAM(ev) AS b ON `a a`.`k'q` = b.`k'q` "
           "AND b.`t``s` BETWEEN `a a`.`t``s` - 2 AND `a a`.`t``s` + 1 AND b.`id x` <> `a a`.`id x` "
           "WHERE b.`v{0}` <> 'x'")
    events = Events(spark, tmp_path, storage, schema, path)
    for first in (0, 6, 12):
        events.land([(i, i % 2, i, "x" if i % 4 == 0 else f"v'{i}`") for i in range(first, first + 6)])
        events.run(sql)
    assert events.written() == events.batch(sql)
    assert sum(events.written().values()) > 6
    assert _events_state(events).buckets == 2  # the engine's operator, its events by key


def test_a_self_join_the_operator_cannot_pair_runs_as_before(spark, tmp_path, storage):
    """A floating-point key (-0.0 equals 0.0 in Spark's join, not in Arrow's grouping) is paired
    by Spark with the statement's own SQL, in one bucket."""
    events = Events(spark, tmp_path, storage, "id BIGINT, k DOUBLE, ts BIGINT, v INT")
    sql = BAND
    for first in (0, 8, 16):
        events.land([(i, [0.0, -0.0, 1.5][i % 3], i, i % 3) for i in range(first, first + 8)])
        events.run(sql)
    assert events.written() == events.batch(sql)
    assert _events_state(events).buckets == 1


@pytest.mark.storage("plain")
@pytest.mark.parametrize("path", ["driver", "spark"])
def test_a_collated_key_pairs_as_its_collation_compares(spark, tmp_path, storage, path):
    """'Ab' and 'aB' are one key under UTF8_LCASE: such a stream pairs as Spark compares it (in
    Spark, with the statement's own SQL), not by the values' bytes."""
    sql = ("SELECT a.id AS a_id, b.id AS b_id, b.v - a.v AS dv FROM STREAM(ev) AS a JOIN STREAM(ev) AS b "
           "ON a.k = b.k AND b.ts BETWEEN a.ts - 3 AND a.ts + 1")
    events = Events(spark, tmp_path, storage, path=path)
    for first in (0, 10):
        spark.sql(f"SELECT id, CAST(IF(id % 2 = 0, 'Ab', 'aB') AS STRING COLLATE UTF8_LCASE) AS k, id DIV 2 AS ts, "
                  f"CAST(id % 3 AS INT) AS v FROM range({first}, {first + 10})").coalesce(1) \
            .write.mode("append").parquet(events.uri("ev"))
        events.run(sql)
    batch = sqlext.sql(spark, sql.replace("STREAM(ev)", f"parquet.`{events.uri('ev')}`")).collect()
    assert events.written() == multiset([r.asDict() for r in batch])
    assert any(r.a_id % 2 != r.b_id % 2 for r in batch)  # 'Ab' met 'aB'


def test_a_timestamp_without_time_zone_is_no_band_the_operator_pairs(spark):
    """The newest time a run records and the state's floor are instants: a band over a
    TIMESTAMP_NTZ (a wall-clock time) is left to the run that pairs in Spark."""
    from sqlext.language.dialect import parse_one
    from sqlext.streaming.operators.self_join import SelfJoinShape

    sql = COLUMNS_ONLY.replace("- 3", "- INTERVAL 3 MINUTES").replace("+ 2", "+ INTERVAL 2 MINUTES")
    for column, operator_pairs in (("TIMESTAMP", True), ("TIMESTAMP_NTZ", False)):
        schema = spark.createDataFrame([], f"id BIGINT, k INT, ts {column}, v INT").schema
        assert (SelfJoinShape(spark, parse_one(sql), schema).pairing is not None) == operator_pairs, column


def test_an_aggregate_sqlglot_does_not_know_as_one_is_refused_not_read_as_pairs(spark, tmp_path, storage):
    """``try_sum`` aggregates in Spark: a run's pairs cannot be its rows."""
    events = Events(spark, tmp_path, storage)
    events.land([(i, i % 3, i // 2, i % 4) for i in range(10)])
    with pytest.raises(SqlextError) as error:
        events.run("SELECT try_sum(b.v - a.v) AS s FROM STREAM(ev) AS a JOIN STREAM(ev) AS b "
                   "ON a.k = b.k AND b.ts BETWEEN a.ts - 3 AND a.ts + 1")
    assert error.value.error_class == "UNSUPPORTED_STREAM" and "COUNT, SUM, MIN, MAX" in str(error.value)


def test_one_state_keeps_only_what_the_band_can_still_pair(spark, tmp_path, storage):
    """After many runs the state holds the events of the last two band widths, once each (not
    once per side), each in the bucket of its key."""
    events = Events(spark, tmp_path, storage)
    for first in range(0, 200, 20):
        events.land([(i, i % 3, i, 1) for i in range(first, first + 20)])
        query = events.run(BAND)
    assert events.written() == events.batch(BAND)
    buckets = sorted((tmp_path / "cp" / "sqlext-state" / "events").glob("bucket-*"))
    assert len(buckets) == 2  # the session's cores
    kept = {}
    for bucket in buckets:
        newest = max(bucket.glob("base-*"), key=lambda p: int(p.name.split("-")[1]))
        kept[bucket.name] = [(r.id, r.k) for r in spark.read.parquet(storage.uri(newest)).select("id", "k").collect()]
    assert sorted(i for rows in kept.values() for i, _ in rows) == list(range(199 - 6, 200))  # ts >= newest - 2 * width (3)
    first, second = ({k for _, k in rows} for rows in kept.values())
    assert first and second and not first & second  # a key's events in one bucket
    assert len(jobs_of(spark, query)) <= 8


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_timestamps_and_interval_bands(spark, tmp_path, storage, path):
    schema = "id BIGINT, k INT, ts TIMESTAMP, v INT"
    sql = ("SELECT a.id AS a_id, b.id AS b_id FROM STREAM(ev) AS a JOIN STREAM(ev) AS b ON a.k = b.k "
           "AND b.ts BETWEEN a.ts - INTERVAL 10 MINUTES AND a.ts")
    start = datetime(2026, 1, 1, 12, 0)
    events = Events(spark, tmp_path, storage, schema, path)
    for first in (0, 4, 8):
        events.land([(i, i % 2, start + timedelta(minutes=4 * i), 0) for i in range(first, first + 4)])
        query = events.run(sql)
    assert events.written() == events.batch(sql)
    assert sum(events.written().values()) > 12
    if path == "driver":  # Spark's INT96 timestamps are read from the files, and paired, without a job
        assert jobs_of(spark, query) == []


@pytest.mark.parametrize("path", ["driver", "spark"])
def test_an_event_too_late_for_its_partners_stops_the_run_and_writes_nothing(spark, tmp_path, storage, path):
    events = Events(spark, tmp_path, storage, path=path)
    events.land([(i, 0, i, 0) for i in range(20)])
    events.run(BAND)
    before = events.written()
    events.land([(99, 0, 10, 0)])  # 9 behind the newest time 19; the band's width is 3
    with pytest.raises(SqlextError) as raised:
        events.run(BAND)
    assert raised.value.error_class == "LATE_CHANGE" and "ts" in str(raised.value)
    assert events.written() == before


AGGREGATE = ("SELECT a.k, COUNT(*) AS n, SUM(b.v) AS total, MIN(b.v) AS lo, MAX(b.v - a.v) + 1 AS spread, "
             "AVG(b.v) AS mean FROM STREAM(ev) AS a JOIN STREAM(ev) AS b "
             "ON a.k = b.k AND b.ts BETWEEN a.ts - 3 AND a.ts + 1 WHERE b.v >= 0 GROUP BY a.k")
PER_EVENT = ("SELECT a.id + 1 AS event, COUNT(b.v) AS partners, MAX(b.ts) FROM STREAM(ev) AS a "
             "JOIN STREAM(ev) AS b ON a.k = b.k AND b.ts BETWEEN a.ts - 3 AND a.ts GROUP BY event")
EVERYTHING = ("SELECT COUNT(*) AS pairs, SUM(a.v * b.v) AS product FROM STREAM(ev) AS a JOIN STREAM(ev) AS b "
              "ON a.k = b.k AND b.ts BETWEEN a.ts - 2 AND a.ts + 2")
BY_ORDINAL = ("SELECT a.k % 2 AS parity, MIN(b.ts - a.ts) AS earliest FROM STREAM(ev) AS a JOIN STREAM(ev) AS b "
              "ON a.k = b.k AND b.ts BETWEEN a.ts - 3 AND a.ts + 1 GROUP BY 1")


def folded(rows):
    """The table a change feed leaves: its inserts and postimages less its preimages."""
    table = multiset([])
    for row in sorted(rows, key=lambda r: (r["_commit_version"], r["_change_type"] != "update_preimage")):
        values = {k: v for k, v in row.items() if k not in ("_change_type", "_commit_version")}
        change = multiset([values])
        if row["_change_type"] == "update_preimage":
            assert not change - table, row  # a preimage is a row the table holds
            table -= change
        else:
            table += change
    return table


def _feed(events):
    return read_rows(events.root / "out")


@settings(max_examples=examples(5, 50), deadline=None, suppress_health_check=list(HealthCheck))
@given(runs=event_runs(), sql=st.sampled_from([AGGREGATE, PER_EVENT, EVERYTHING, BY_ORDINAL]),
       path=st.sampled_from(["driver", "spark"]))
def test_an_aggregate_over_the_self_join_is_the_batch_aggregate_as_a_change_feed(spark, tmp_path_factory, storage,
                                                                                 runs, sql, path):
    """The runs write the aggregate's change feed (each group the run changed: an insert, or its
    old and new rows), and the table it leaves is the batch statement's result; no update
    leaves a row as it was."""
    events = Events(spark, tmp_path_factory.mktemp("selfjoin-aggregate"), storage, path=path)
    for run in runs:
        if run:
            events.land(run)
            events.run(sql)
    feed = _feed(events)
    assert folded(feed) == (events.batch(sql) if events.all else multiset([]))
    by_run = {}
    for row in feed:
        by_run.setdefault((row["_commit_version"], row["_change_type"]), []).append(row)
    for (version, kind), rows in by_run.items():
        if kind == "update_preimage":
            posts = by_run[(version, "update_postimage")]
            strip = [{k: v for k, v in r.items() if k != "_change_type"} for r in rows]
            assert len(rows) == len(posts) and all(
                {k: v for k, v in p.items() if k != "_change_type"} not in strip for p in posts)


def test_an_aggregate_run_stays_within_its_job_budget_and_keeps_one_row_per_group(spark, tmp_path, storage):
    events = Events(spark, tmp_path, storage)
    for first in range(0, 90, 30):
        events.land([(i, i % 3, i, i % 5) for i in range(first, first + 30)])
        query = events.run(AGGREGATE)
    assert folded(_feed(events)) == events.batch(AGGREGATE)
    assert len(jobs_of(spark, query)) <= 8
    groups = KeyedState(local(str(tmp_path / "cp" / "sqlext-state" / "groups")), []).before(1 << 62)
    assert groups.rows().num_rows == 3 and groups.stored_rows() <= 6  # three groups, in a base and a delta


# an aggregate whose grouping values and arguments a run computes over Arrow data (AGGREGATE's
# arithmetic is projected by Spark): the two projections are tested apart
COLUMNS_AGGREGATE = ("SELECT b.k AS `k ``g`, COUNT(*) AS n, COUNT(b.v) AS `v's`, SUM(a.v) AS total, MAX(b.id) AS last, "
                     "AVG(b.ts) AS mean FROM STREAM(ev) AS a JOIN STREAM(ev) AS b "
                     "ON a.k = b.k AND b.ts BETWEEN a.ts - 3 AND a.ts + 1 WHERE b.v IS NOT NULL GROUP BY b.k")


def test_the_aggregates_above_take_the_operators_they_are_meant_to_test(spark):
    from sqlext.language.dialect import parse_one
    from sqlext.streaming.operators.self_join import SelfJoinShape

    schema = spark.createDataFrame([], SCHEMA).schema
    projected, in_spark = (SelfJoinShape(spark, parse_one(sql), schema) for sql in (COLUMNS_AGGREGATE, AGGREGATE))
    assert projected.pairing is not None and projected.projection is not None
    assert in_spark.pairing is not None and in_spark.projection is None
    # a MIN over floating-point values (NaN above every number in Spark) keeps the run of its own
    floating = SelfJoinShape(spark, parse_one(AGGREGATE.replace("MIN(b.v)", "MIN(b.v / 2)")), schema)
    assert floating.pairing is None


def test_an_aggregate_of_columns_on_the_driver_starts_no_spark_job(spark, tmp_path, storage):
    """Projected, aggregated and made a change feed over Arrow data: a run on the driver over
    a folder of Parquet files starts no Spark job, and the feed leaves the batch aggregate."""
    events = Events(spark, tmp_path, storage, path="driver")
    for first in range(0, 90, 30):
        events.land([(i, i % 3, i, i % 5) for i in range(first, first + 30)])
        query = events.run(COLUMNS_AGGREGATE)
    assert folded(_feed(events)) == events.batch(COLUMNS_AGGREGATE)
    assert jobs_of(spark, query) == []


def _groups_state(events: Events) -> KeyedState:
    return KeyedState(local(str(events.root / "cp" / "sqlext-state" / "groups")), [])


# each pairing and each projection of an aggregate: how a run's rows are made and sent on
EVERY_OPERATOR = pytest.mark.parametrize("sql", [BAND, COLUMNS_ONLY, AGGREGATE, COLUMNS_AGGREGATE], ids=[
    "paired-in-spark", "paired-on-the-driver", "aggregate-projected-by-spark", "aggregate-projected-in-arrow"])


def _result(events: Events, sql: str):
    """The table the runs' output leaves (an aggregate's change feed folded), as a multiset."""
    return folded(_feed(events)) if "GROUP BY" in sql else events.written()


@EVERY_OPERATOR
@settings(max_examples=examples(3, 40), deadline=None, suppress_health_check=list(HealthCheck))
@given(runs=event_runs().filter(lambda runs: len([r for r in runs if r]) >= 3), path=st.sampled_from(["driver", "spark"]))
def test_runs_between_rescales_give_the_batch_statement(spark, tmp_path_factory, storage, sql, runs, path):
    """Runs at 2 buckets, then 8, then 3: after every run the output is the batch statement over
    what has landed, and the states (the events', an aggregate's groups) are laid out in the
    last run's count."""
    events = Events(spark, tmp_path_factory.mktemp("rescaled"), storage, path=path)
    runs = [r for r in runs if r]
    try:
        for buckets, run in zip([2, 8, 3], [runs[0], runs[1], [e for r in runs[2:] for e in r]]):
            spark.conf.set(BUCKETS_SETTING, str(buckets))
            events.land(run)
            events.run(sql)
            assert _result(events, sql) == events.batch(sql), buckets
    finally:
        spark.conf.unset(BUCKETS_SETTING)
    assert _events_state(events).buckets == 3
    if "GROUP BY" in sql:
        assert _groups_state(events).buckets == 3


@EVERY_OPERATOR
@pytest.mark.parametrize("path", ["driver", "spark"])
def test_a_catch_up_over_the_bound_runs_in_parts(spark, tmp_path, storage, sql, path):
    """A run over many events with a bound of a few rows is applied in parts cut at times (a
    later part's events are never late for an earlier one's), each part's states committed
    before the next, and gives the batch statement."""
    events = Events(spark, tmp_path, storage, path=path)
    events.land([(i, i % 3, i, i % 4) for i in range(0, 12)])
    events.run(sql)
    events.land([(i, i % 3, i - i % 2, i % 4) for i in range(12, 60)])
    spark.conf.set(MAX_ROWS_SETTING, "10")
    try:
        query = events.run(sql)
    finally:
        spark.conf.unset(MAX_ROWS_SETTING)
    assert query.last_batch.parts > 1
    assert _result(events, sql) == events.batch(sql)


def test_an_aggregate_the_operator_cannot_compute_runs_as_before(spark, tmp_path, storage):
    """A MAX over floating-point values (NaN is the largest in Spark, none in Arrow) is
    aggregated by Spark in one bucket, as before."""
    sql = AGGREGATE.replace("MIN(b.v) AS lo", "MAX(b.v / 2) AS lo")
    events = Events(spark, tmp_path, storage)
    for first in (0, 8, 16):
        events.land([(i, i % 3, i, i % 3) for i in range(first, first + 8)])
        events.run(sql)
    assert folded(_feed(events)) == events.batch(sql)
    assert _events_state(events).buckets == 1


@pytest.mark.parametrize("sql, said", [
    (AGGREGATE + " HAVING COUNT(*) > 1", "HAVING"),
    (AGGREGATE.replace("COUNT(*) AS n", "COUNT(DISTINCT b.v) AS n"), "DISTINCT"),
    (AGGREGATE.replace("SUM(b.v)", "SUM(b.v / 2)"), "DOUBLE"),
    (AGGREGATE.replace("MIN(b.v) AS lo", "COLLECT_LIST(b.v) AS lo"), "COLLECT_LIST"),
    (AGGREGATE.replace("COUNT(*) AS n", "COUNT(*) FILTER (WHERE b.v > 1) AS n"), "FILTER"),
])
def test_what_an_aggregate_over_a_self_join_of_a_stream_cannot_run_is_a_classed_error(spark, tmp_path, storage, sql,
                                                                                      said):
    events = Events(spark, tmp_path, storage)
    events.land([(0, 0, 0, 0)])
    with pytest.raises(SqlextError) as raised:
        events.run(sql)
    assert raised.value.error_class == "UNSUPPORTED_STREAM" and said in str(raised.value)


@pytest.mark.parametrize("sql", [
    BAND.replace("AND b.ts BETWEEN a.ts - 3 AND a.ts + 1", ""),
    BAND.replace("AND b.ts BETWEEN a.ts - 3 AND a.ts + 1", "AND b.ts >= a.ts"),
    BAND.replace("JOIN STREAM(ev) AS b", "LEFT JOIN STREAM(ev) AS b"),
])
def test_what_a_self_join_of_a_stream_cannot_run_is_a_classed_error(spark, tmp_path, storage, sql):
    events = Events(spark, tmp_path, storage)
    events.land([(0, 0, 0, 0)])
    with pytest.raises(SqlextError) as raised:
        events.run(sql)
    assert raised.value.error_class == "UNSUPPORTED_STREAM"


def test_bench_incremental_selfjoin_aggregate_checks_rows_against_the_batch(spark, capsys):
    """The bench of an aggregate over the self-join: its change feed leaves one row per key, the
    batch aggregate's count (the bench stops otherwise)."""
    from sqlext.bench.incremental import bench_incremental

    results = bench_incremental(spark, rows=3000, runs=1, percent=5, function="selfjoin-aggregate")
    out = capsys.readouterr().out
    assert "an aggregate over a self-join of a stream: history" in out
    assert 0 < results["rows"] <= 1000 and len(results["incremental"]) == 1

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
from rows import multiset
from sqlext.errors import SqlextError
from sqlext.streaming import jobs_of, run_available_now

BAND = ("SELECT a.id AS a_id, b.id AS b_id, a.k, b.v - a.v AS dv FROM STREAM(ev) AS a JOIN STREAM(ev) AS b "
        "ON a.k = b.k AND b.ts BETWEEN a.ts - 3 AND a.ts + 1 WHERE b.v >= 0")
SCHEMA = "id BIGINT, k INT, ts BIGINT, v INT"


class Events:
    def __init__(self, spark, root, schema=SCHEMA):
        self.spark, self.root, self.schema, self.all = spark, root, schema, []

    def land(self, rows) -> None:
        self.spark.createDataFrame(rows, self.schema).coalesce(1).write.mode("append").parquet(str(self.root / "ev"))
        self.all += rows

    def run(self, sql):
        return run_available_now(self.spark, sql, checkpoint=str(self.root / "cp"), output=str(self.root / "out"),
                                 sources={"ev": str(self.root / "ev")})

    def written(self):
        out = self.root / "out"
        return multiset([r.asDict() for r in self.spark.read.parquet(str(out)).collect()]) \
            if any(out.glob("*.parquet")) else multiset([])

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


@settings(max_examples=examples(6, 60), deadline=None, suppress_health_check=list(HealthCheck))
@given(runs=event_runs())
def test_runs_concatenate_to_the_batch_self_join(spark, tmp_path_factory, runs):
    events = Events(spark, tmp_path_factory.mktemp("selfjoin"))
    for run in runs:
        if run:
            events.land(run)
            events.run(BAND)
    assert events.written() == (events.batch(BAND) if events.all else multiset([]))


def test_one_state_keeps_only_what_the_band_can_still_pair(spark, tmp_path):
    """After many runs the state holds the events of the last two band widths, once each (not
    once per side)."""
    events = Events(spark, tmp_path)
    for first in range(0, 200, 20):
        events.land([(i, i % 3, i, 1) for i in range(first, first + 20)])
        query = events.run(BAND)
    assert events.written() == events.batch(BAND)
    state = sorted(p for p in (tmp_path / "cp" / "sqlext-state" / "events").glob("base-*"))
    kept = spark.read.parquet(str(state[-1])).select("id").collect()
    assert sorted(r.id for r in kept) == list(range(199 - 6, 200))  # ts >= newest - 2 * width (3)
    assert len(jobs_of(spark, query)) <= 8


def test_timestamps_and_interval_bands(spark, tmp_path):
    schema = "id BIGINT, k INT, ts TIMESTAMP, v INT"
    sql = ("SELECT a.id AS a_id, b.id AS b_id FROM STREAM(ev) AS a JOIN STREAM(ev) AS b ON a.k = b.k "
           "AND b.ts BETWEEN a.ts - INTERVAL 10 MINUTES AND a.ts")
    start = datetime(2026, 1, 1, 12, 0)
    events = Events(spark, tmp_path, schema)
    for first in (0, 4, 8):
        events.land([(i, i % 2, start + timedelta(minutes=4 * i), 0) for i in range(first, first + 4)])
        events.run(sql)
    assert events.written() == events.batch(sql)
    assert sum(events.written().values()) > 12


def test_an_event_too_late_for_its_partners_stops_the_run_and_writes_nothing(spark, tmp_path):
    events = Events(spark, tmp_path)
    events.land([(i, 0, i, 0) for i in range(20)])
    events.run(BAND)
    before = events.written()
    events.land([(99, 0, 10, 0)])  # 9 behind the newest time 19; the band's width is 3
    with pytest.raises(SqlextError) as raised:
        events.run(BAND)
    assert raised.value.error_class == "LATE_CHANGE" and "ts" in str(raised.value)
    assert events.written() == before


@pytest.mark.parametrize("sql", [
    BAND.replace("SELECT a.id AS a_id, b.id AS b_id, a.k, b.v - a.v AS dv", "SELECT a.k, COUNT(*) AS n")
    + " GROUP BY a.k",
    BAND.replace("AND b.ts BETWEEN a.ts - 3 AND a.ts + 1", ""),
    BAND.replace("AND b.ts BETWEEN a.ts - 3 AND a.ts + 1", "AND b.ts >= a.ts"),
    BAND.replace("JOIN STREAM(ev) AS b", "LEFT JOIN STREAM(ev) AS b"),
])
def test_what_a_self_join_of_a_stream_cannot_run_is_a_classed_error(spark, tmp_path, sql):
    events = Events(spark, tmp_path)
    events.land([(0, 0, 0, 0)])
    with pytest.raises(SqlextError) as raised:
        events.run(sql)
    assert raised.value.error_class == "UNSUPPORTED_STREAM"

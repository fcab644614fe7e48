"""FK_JOIN's incremental run as KIP-213's subscription/response: a run's left changes ask for
the right rows they need (requests by foreign key), the right changes are taken in once, by the
bucket of their own key, and reach a left bucket only as the answers it needs. The runs are
still exact: KIP-213's event table on 1, 3 and 8 buckets, and random foreign-key moves meeting
changes of the right rows they leave and join (in one batch, across batches and across parts)
give the batch function's rows; the run's report shows that no task takes every right change;
a checkpoint without the subscriptions state gets it built from its left state.
"""

from __future__ import annotations

import shutil
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiles import examples

from kip_213 import L, R, SEED_EVENTS, SEED_EXPECTED, compact, fk_join
from rows import multiset
from sqlext.streaming.batch_parts import MAX_ROWS_SETTING
from sqlext.streaming.engine import BUCKETS_SETTING
from test_streaming_fk_join import feeds, join_sql  # noqa: F401 - the fixture

__all__ = ["feeds"]


@contextmanager
def settings_of(spark, **values):
    """Spark settings for the block (None: left unset)."""
    names = {"buckets": BUCKETS_SETTING, "max_rows": MAX_ROWS_SETTING}
    try:
        for name, value in values.items():
            if value is not None:
                spark.conf.set(names[name], str(value))
        yield
    finally:
        for name in values:
            spark.conf.unset(names[name])


@pytest.mark.parametrize("buckets, join_type, emit, foreign_key", [
    # each bucket count, and each join and emit both ways the rows reach the tasks: their files
    # read by the tasks themselves (a column as the foreign key), or the rows routed by Spark (an
    # expression); each case once (an 8-bucket run on two cores costs about 20 s)
    (1, "inner", "records", "fk"), (3, "left", "changes", "fk"), (8, "inner", "records", "coalesce(fk, fk)"),
    (8, "left", "changes", "coalesce(fk, fk)")])
def test_kip_213_event_table_on_the_executors_in_any_bucket_count(spark, feeds, buckets, join_type, emit,
                                                                   foreign_key):
    """Each run forwards exactly the event table's rows for the event it sees, on the executors,
    the state in 1, 3 or 8 buckets (the tasks reading their files, or, where the foreign key is
    an expression, Spark routing the rows)."""
    with settings_of(spark, buckets=buckets):
        current = feeds("cdf", SEED_EVENTS)
        current.path = "spark"
        expected = SEED_EXPECTED[(join_type, emit)]
        for version, *_ in SEED_EVENTS:
            current.release(version - 1, version)
            got = compact(current.run(join_sql(join_type, emit, foreign_key=foreign_key)), emit)
            assert current.last_batch.placement == "executors"
            assert got == [r for r in expected if r[4] == version], version
    subscriptions = current.checkpoint / "sqlext-state" / "subscriptions"
    assert subscriptions.is_dir(), "the subscriptions state is kept beside the left and right states"


def _moves(draw_moves):
    """Events: three right rows and three left rows, then each move a left key's foreign key
    changing (or the row going), with a change of the right row it leaves, of the one it joins,
    of both or of neither, before, after or at the version of the move."""
    events = [(1, "right", 1, R("x")), (2, "right", 2, R("x")), (3, "right", 3, R("x")),
              (4, "left", "a", L(1)), (5, "left", "b", L(2)), (6, "left", "c", L(1))]
    current = {"a": 1, "b": 2, "c": 1}
    version = 6
    for key, target, touched, when, name in draw_moves:
        old = current[key]
        version += 1
        right = [rid for rid, touch in ((old, touched in ("left", "both")), (target, touched in ("joined", "both")))
                 if touch and rid is not None]
        right = sorted(set(right))
        row = None if name == "-" else R(name)
        if when == "before":
            events += [(version, "right", rid, row) for rid in right]
            version += 1
        events.append((version, "left", key, None if target is None else L(target)))
        if when != "before":
            version += when == "after"
            events += [(version, "right", rid, row) for rid in right]
        current[key] = target
    return events


moves = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from([1, 2, 3, 4, None]),
                           st.sampled_from(["left", "joined", "both", "none"]),
                           st.sampled_from(["before", "after", "same"]), st.sampled_from(["y", "z", "-"])),
                 min_size=1, max_size=5).map(_moves)


@settings(max_examples=examples(4, 60), deadline=None, suppress_health_check=list(HealthCheck))
@given(events=moves, cuts=st.lists(st.integers(6, 30), max_size=2), buckets=st.sampled_from([1, 2, 3, 8]),
       join_type=st.sampled_from(["inner", "left"]), emit=st.sampled_from(["changes", "records"]),
       shape=st.sampled_from(["cdf", "upsert"]), max_rows=st.sampled_from([None, 3]),
       path=st.sampled_from(["spark", "spark", "driver"]))
def test_foreign_key_moves_meeting_their_right_rows_give_the_batch_output(spark, feeds, events, cuts, buckets,
                                                                            join_type, emit, shape, max_rows, path):
    """A left row's foreign key moving while the right row it leaves, or the one it joins,
    changes, in one batch or across batches, and (a bound of 3 rows) across the parts of a
    batch, on 1 to 8 buckets: the runs' rows are the batch function's."""
    last = events[-1][0]
    bounds = sorted({min(c, last) for c in cuts} | {last})
    with settings_of(spark, buckets=buckets, max_rows=max_rows):
        current = feeds(shape, events)
        current.path = path
        done, out = 0, []
        for bound in bounds:
            current.release(done, bound)
            out += current.run(join_sql(join_type, emit))
            done = bound
    assert multiset(out) == multiset(fk_join(spark, events, shape, join_type, emit))


def test_no_task_takes_every_right_change(spark, feeds):
    """8 buckets, 16 left rows subscribed to 2 of 40 right keys; a run of 40 right changes:
    the tasks take each right change in once (by its own key's bucket) and the answers, a
    right key's row and change once for each left bucket that subscribes to it, not the 40
    changes in each of the 8 buckets. A run of left changes alone takes each in twice (the
    subscribe and join stages) beside its requests and answers."""
    right_keys, buckets = 40, 8
    events = [(v, "right", v, R("x")) for v in range(1, right_keys + 1)]
    events += [(right_keys + i, "left", f"k{i}", L(1 + i % 2)) for i in range(1, 17)]
    first = events[-1][0]
    events += [(first + v, "right", v, R("y")) for v in range(1, right_keys + 1)]
    second = events[-1][0]
    events += [(second + i, "left", f"k{i}", L(3)) for i in range(1, 5)]
    with settings_of(spark, buckets=buckets):
        current = feeds("upsert", events)
        current.path = "spark"
        current.release(0, first)
        out = current.run(join_sql())
        current.release(first, second)
        out += current.run(join_sql())
        report = current.last_batch
        assert report.placement == "executors"
        assert report.changes == right_keys
        subscribed = 2  # right keys 1 and 2: each answered with its state row and its change
        assert right_keys <= report.taken <= right_keys + 2 * subscribed * buckets, report.taken
        assert report.taken_per_change < 2
        current.release(second, events[-1][0])
        out += current.run(join_sql())
        report = current.last_batch
        # 4 left changes, taken by the subscribe and the join stage; at most 2 requests each
        # (the old and the new foreign key) and an answer (the state row) for each
        assert report.changes == 4 and report.taken <= 4 * 2 + 4 * 2 * 2, report.taken
    assert multiset(out) == multiset(fk_join(spark, events, "upsert", "inner", "changes"))


def test_a_checkpoint_without_subscriptions_gets_them_from_its_left_state(spark, feeds):
    """A checkpoint an earlier sqlext wrote keeps no subscriptions: the next run builds them
    from the left state's present rows, and a right change then reaches its subscribers."""
    events = [(1, "right", 1, R("x")), (2, "right", 2, R("x")), (3, "left", "a", L(1)), (4, "left", "b", L(2)),
              (5, "left", "c", L(1)), (6, "left", "c", None), (7, "right", 1, R("y")), (8, "right", 2, R("y")),
              (9, "left", "a", L(2)), (10, "right", 2, R("z"))]
    with settings_of(spark, buckets=3):
        current = feeds("cdf", events)
        current.path = "spark"
        current.release(0, 6)
        out = current.run(join_sql("left", "changes"))
        state = current.checkpoint / "sqlext-state"
        shutil.rmtree(state / "subscriptions")  # as an earlier sqlext left it
        for record in state.glob("subscriptions-*"):
            record.unlink()
        current.release(6, 8)
        out += current.run(join_sql("left", "changes"))
        assert (state / "subscriptions").is_dir()
        current.release(8, 10)
        out += current.run(join_sql("left", "changes"))
    assert multiset(out) == multiset(fk_join(spark, events, "cdf", "left", "changes"))



def test_the_batch_bound_counts_each_right_change_once(spark, feeds):
    """8 buckets and a bound of as many rows as the batch holds: the batch runs in one part, a
    right change counted once, in the bucket it goes to, not once for each bucket."""
    events = [(v, "right", v, R("x")) for v in range(1, 11)]
    events += [(10 + i, "left", f"k{i}", L(1 + i % 10)) for i in range(1, 11)]
    with settings_of(spark, buckets=8, max_rows=20):
        current = feeds("upsert", events)
        current.path = "spark"
        current.release(0, 20)
        out = current.run(join_sql())
        assert current.last_batch.parts == 1
    assert multiset(out) == multiset(fk_join(spark, events, "upsert", "inner", "changes"))

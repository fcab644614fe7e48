"""A state laid out again in another number of buckets: the step that lets a state made on a
small machine use every core of a larger one (or give some back), without a new checkpoint and
without reading the history again.

A state's bucket count is recorded when its first run writes it (see
:meth:`~sqlext.streaming.engine.KeyedOperator.state_buckets`). When a run is asked for another
count (``spark.sqlext.streaming.stateBuckets``), its first batch rescales each of the
statement's states before it reads them, as a step of that batch:

1. the state's current rows, as the batch would read them, are written into a new generation's
   buckets (``generation-<g>/bucket-<n>/base-<batch - 1>``), each row in the bucket its key has
   among the new count: on the driver for a state its cache holds, else by a Spark job whose
   tasks each write the buckets Spark routed to them;
2. ``buckets-<g>.json`` is written, whole: from then on the state is the new generation;
3. the layers of the earlier layouts are deleted.

A run stopped before step 2 left only a generation nothing names: the next try deletes it and
starts again. A run stopped after it finds the state rescaled, and its batch reads the new
layout's bases as it would have read the old layout's layers. Either way the batch is then
redone on the same rows, so the outputs stay exact. (Flink's key groups solve the same problem
with a fixed maximum of small groups moved between tasks; a layout written once per rescale
keeps a small state in few files, and costs one pass over the state when the count changes.)
"""

from __future__ import annotations

import pyarrow as pa

from sqlext.errors import SqlextError
from sqlext.streaming.executors import BUCKET, bucket_column, by_bucket
from sqlext.streaming.layer_cache import CACHE_BYTES
from sqlext.streaming.state import LAYOUT_PREFIX, LAYOUT_SUFFIX, KeyedState
from sqlext.streaming.task_memory import task_memory


def rescale(spark, state: KeyedState, buckets: int, batch_id: int, on_driver: bool | None = None) -> bool:
    """Lay ``state`` out in ``buckets`` buckets before batch ``batch_id`` reads it (see the
    module's docstring); whether it was rescaled. ``on_driver``: where to move the rows (by
    default on the driver when its cache holds the state)."""
    buckets = max(1, int(buckets))
    if state.schema is None or state.buckets == buckets:
        return False
    generation = state.generation + 1
    new = state.laid_out(buckets, generation)
    new.home().delete()  # what a rescale stopped before its layout file left
    view = state.before(batch_id)
    if not view.empty:
        if on_driver is None:
            on_driver = view.stored_bytes() * 4 <= CACHE_BYTES
        if on_driver:
            _move_in_memory(view.rows(), new, batch_id - 1)
        else:
            _move_in_tasks(spark, view.frame(spark), new, batch_id - 1)
    (state.folder / f"{LAYOUT_PREFIX}{generation}{LAYOUT_SUFFIX}").write_json({"buckets": buckets})
    state.adopt(new)
    forget_earlier_layouts(state)
    return True


def forget_earlier_layouts(state: KeyedState) -> None:
    """Delete what the layouts before the state's current one kept: the layers of a first layout
    (beside the state's files, or in its ``bucket-<n>`` folders) and every generation but the
    current one (a generation a stopped rescale left is named by no file)."""
    if state.generation == 0:
        return
    current = state.home().name
    for entry in state.folder.entries():
        earlier = entry.name.startswith(("base-", "delta-", "bucket-")) or \
            (entry.name.startswith("generation-") and entry.name != current)
        if earlier:
            (state.folder / entry.name).delete()


def _move_in_memory(rows: pa.Table, new: KeyedState, base: int) -> None:
    owner = new.bucket_of(rows)
    for bucket in range(new.buckets):
        mine = rows.filter(pa.array(owner == bucket))
        if mine.num_rows:
            new.part(bucket).write_layer("base", base, mine).commit_layer()


def _move_in_tasks(spark, frame, new: KeyedState, base: int) -> None:
    """The rows of ``frame`` (the state's current rows) routed by Spark to their new buckets, and
    each bucket's base written by the task that holds it."""
    tagged = frame.withColumn(BUCKET, bucket_column(new.bucket_of, list(new.bucket_by)))
    written = tagged.repartition(new.buckets, BUCKET) \
        .mapInArrow(_WriteBuckets(new, base), "bucket INT, rows BIGINT").collect()
    moved = sum(r.rows for r in written)
    expected = frame.count()
    if moved != expected:  # never a state that lost rows: the layout file is not written
        raise SqlextError("INTERNAL_ERROR", function="sqlext stream",
                          reason=f"rescaling the state in {new.folder} moved {moved} of its {expected} rows "
                                 "(nothing was committed; the next run tries again)")


class _WriteBuckets:
    """A task's buckets of the new layout, each written whole as a base."""

    def __init__(self, new: KeyedState, base: int):
        self.new, self.base = new, base

    def __call__(self, batches):
        with task_memory():
            for bucket, mine in by_bucket(batches, self.new.arrow_schema):
                self.new.part(bucket).write_layer("base", self.base, mine).commit_layer()
                yield pa.RecordBatch.from_arrays([pa.array([bucket], pa.int32()), pa.array([mine.num_rows], pa.int64())],
                                                 names=["bucket", "rows"])

"""A micro-batch too large for one step, applied in parts: the batch bound.

A run takes what arrived since the last one as one of Spark's micro-batches; after downtime
that can be a week of changes, and a step over all of it would need memory in proportion. Where
a batch holds more rows than ``spark.sqlext.streaming.maxBatchRows`` (by default
:data:`ROWS_PER_BUCKET` a bucket of the states, so that each task's share stays about that
size; a row counts once for each task it goes to: once, for a row routed by its key, as
every change of an FK_JOIN is), the engine
applies it in parts, one after the other, each a step of its own with its output and state
committed before the next begins:

* the parts are cut at values of the ordering column, the same values for every input of the
  statement (the ordering runs across all of them: an FK_JOIN's left and right changes are
  applied in one order), so part ``k`` holds every change of every input whose ordering value
  lies in ``(bound[k-1], bound[k]]`` and applying the parts in turn is applying the batch: the
  rows of one ordering value are never split, and no input runs ahead of another;
* the cuts are Spark's approximate percentiles of the batch's ordering values (one job, run only
  for a batch over the bound), so parts hold about the bound each;
* the plan (:class:`Parts`: the cuts and the id of the first part) is recorded in the state
  folder before the first part runs, and how many parts are committed after each one; a run
  killed in the middle of a catch-up is redone by Spark with the same files, reads the plan and
  goes on with the first part not committed. Each part is a batch to the rest of the engine: its
  own id (``first + k``) names its state layers, records and output files, so the machinery that
  makes one batch exact (a replay reads what it read before, output files appear at commit)
  makes each part exact.

Ids: a batch that is not split is one part whose id is ``first``; ``first`` is the Spark batch id
until a batch is split, and from then on the id after the last part of the batch before (the
newest plan recorded says where the count stands). A checkpoint that never split a batch keeps
using Spark's batch ids.

A batch is not split, and runs whole as before, where its inputs do not share one ordering type
that Spark and Arrow order alike (whole numbers, dates, timestamps), or where an earlier attempt of it
committed its output whole (a plan is never changed under committed work).
"""

from __future__ import annotations

import math
import pickle
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from sqlext.errors import SqlextError
from sqlext.storage import Folder
from sqlext.streaming.settings import whole_number

MAX_ROWS_SETTING = "spark.sqlext.streaming.maxBatchRows"
TASK_MEMORY_SETTING = "spark.sqlext.streaming.taskMemory"
# the memory budget of an executor task's Python worker: an eighth of it keeps state layers
# between batches (CACHE_SHARE), and a part of a batch gives each task about a row per
# BYTES_PER_ROW of it (an FK_JOIN step takes about 0.6 GB a million changes a task holds, at
# its peak; with a quarter for layers and a row per 2 KB, workers peaked at 2.1-2.4 GB)
TASK_MEMORY = 2 * 1024 ** 3
BYTES_PER_ROW = 3072
CACHE_SHARE = 8
ROWS_PER_BUCKET = TASK_MEMORY // BYTES_PER_ROW
PLAN_PREFIX = "parts-"
# the Spark types whose values a part's bounds can be: an ordering Spark and Arrow compare alike
# (not floating point: Spark orders NaN above every number, where Arrow's comparisons are false)
SPLITTABLE = ("tinyint", "smallint", "int", "bigint", "date", "timestamp")
ORDER = "__sx_order"


@dataclass(frozen=True)
class Window:
    """The ordering values a part takes: above ``low`` (none: from the start) and up to ``high``
    included (none: to the end). The first part also takes the changes with no ordering value,
    so that the step meets them and refuses them (``[NULL_ORDER_VALUE]``) as a batch in one
    part does, rather than no part taking them."""

    low: object = None
    high: object = None

    @property
    def whole(self) -> bool:
        return self.low is None and self.high is None

    def arrow(self, column: str, kind: pa.DataType):
        """The window as an Arrow expression over ``column`` (of type ``kind``); None for the whole."""
        found = None
        for value, compare in ((self.low, pc.greater), (self.high, pc.less_equal)):
            if value is not None:
                term = compare(pc.field(column), pa.scalar(value, type=kind))
                found = term if found is None else found & term
        if found is not None and self.low is None:
            found = found | pc.field(column).is_null()
        return found

    def spark(self, column: str):
        """The window as a Spark column over ``column``; None for the whole."""
        from pyspark.sql import functions as F

        from sqlext.functions.arguments import quote

        found = None
        for value, compare in ((self.low, "__gt__"), (self.high, "__le__")):
            if value is not None:
                term = getattr(F.col(quote(column)), compare)(F.lit(value))
                found = term if found is None else found & term
        if found is not None and self.low is None:
            found = found | F.col(quote(column)).isNull()
        return found


@dataclass
class Parts:
    """How Spark's batch ``batch`` is applied: parts cut at ``bounds`` (a part's highest ordering
    value, each part but the last), the first with id ``first``; ``done`` parts committed."""

    batch: int
    first: int
    bounds: list = field(default_factory=list)
    done: int = 0

    @property
    def count(self) -> int:
        return len(self.bounds) + 1

    def window(self, number: int) -> Window:
        low = self.bounds[number - 1] if number > 0 else None
        high = self.bounds[number] if number < len(self.bounds) else None
        return Window(low, high)

    def pending(self) -> range:
        """The numbers of the parts still to run."""
        return range(self.done, self.count)

    # -- the record in the state folder

    def record(self, folder: Folder) -> None:
        """Record the plan (and how many parts are done): before the first part runs, and after
        each. The plans of batches before the newest earlier one go: no replay reads them."""
        plan = {"batch": self.batch, "first": self.first, "bounds": list(self.bounds), "done": self.done}
        (folder / f"{PLAN_PREFIX}{self.batch}").write_bytes(pickle.dumps(plan))
        earlier = [n for n in _planned(folder) if n < self.batch]
        for number in earlier[:-1]:
            (folder / f"{PLAN_PREFIX}{number}").delete()

    def finished(self, folder: Folder, number: int) -> None:
        """Part ``number`` is committed."""
        self.done = number + 1
        if self.count > 1:
            self.record(folder)


def recorded_parts(folder: Folder, batch: int) -> Parts | None:
    """The plan recorded for Spark's batch ``batch``: a replay of a batch that was split."""
    path = folder / f"{PLAN_PREFIX}{batch}"
    return Parts(**pickle.loads(path.read_bytes())) if path.exists() else None


def first_part(folder: Folder, batch: int) -> int:
    """The id of the first part of Spark's batch ``batch`` (see the module's docstring)."""
    earlier = [n for n in _planned(folder) if n < batch]
    if not earlier:
        return batch
    newest = recorded_parts(folder, earlier[-1])
    return newest.first + newest.count + (batch - newest.batch - 1)


def forget_parts(folder: Folder, batch: int) -> bool:
    """Forget the plan of a batch Spark forgets (it failed on its input), so that its next
    attempt plans anew; False where a part of it was committed, which then stays planned: its
    committed parts are in the output and the state, and a new plan over other files could not
    say which of their changes were applied."""
    parts = recorded_parts(folder, batch)
    if parts is not None and parts.done > 0:
        return False
    (folder / f"{PLAN_PREFIX}{batch}").delete()
    return True


def parts_committed(folder: Folder) -> bool:
    """Whether a part of a batch planned in the state folder ``folder`` is committed."""
    return any(recorded_parts(folder, n).done > 0 for n in _planned(folder))


def _planned(folder: Folder) -> list[int]:
    return sorted(int(e.name[len(PLAN_PREFIX):]) for e in folder.entries()
                  if not e.is_dir and e.name.startswith(PLAN_PREFIX) and e.name[len(PLAN_PREFIX):].isdigit())


def max_rows(spark, buckets: int) -> int:
    """The most rows of its inputs a part of a batch takes: ``spark.sqlext.streaming.maxBatchRows``,
    by default a row per :data:`BYTES_PER_ROW` of a task's memory (:func:`task_budget`) for
    each of the states' ``buckets``."""
    asked = whole_number(spark, MAX_ROWS_SETTING, "a whole number of rows, 1 or more", 5_000_000,
                         "a row per 3 KB of spark.sqlext.streaming.taskMemory for each bucket of the state",
                         underscores=True)
    return task_budget(spark) // BYTES_PER_ROW * max(1, buckets) if asked is None else asked


_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1024 ** 2, "mb": 1024 ** 2, "g": 1024 ** 3, "gb": 1024 ** 3,
          "t": 1024 ** 4, "tb": 1024 ** 4}


def worker_cache_bytes(spark) -> int:
    """The bytes of state layers an executor task's Python worker keeps between tasks."""
    return task_budget(spark) // CACHE_SHARE


def task_budget(spark) -> int:
    """The memory budget, in bytes, of an executor task's Python worker:
    ``spark.sqlext.streaming.taskMemory`` (bytes, or with a unit as Spark writes sizes: ``512m``,
    ``2g``), by default :data:`TASK_MEMORY`."""
    value = spark.conf.get(TASK_MEMORY_SETTING, "").strip().lower()
    if not value:
        return TASK_MEMORY
    number = value.rstrip("kmgtb")
    unit = value[len(number):]
    if not number.isdigit() or unit not in _UNITS or int(number) * _UNITS[unit] < 64 * 1024 ** 2:
        raise SqlextError("INVALID_SETTING", function="sqlext stream", setting=TASK_MEMORY_SETTING, value=repr(value),
                          expected="a size of 64m or more, in bytes or with a unit (512m, 2g)", example="2g",
                          default="2g")
    return int(number) * _UNITS[unit]


def splittable(kinds: list[str]) -> bool:
    """Whether inputs whose ordering columns have these Spark types (``simpleString``) can be cut
    at shared values: one type, ordered by value."""
    return len(set(kinds)) == 1 and kinds[0] in SPLITTABLE


def cuts(frames: list, count: int) -> list:
    """The values that cut ``frames`` (Spark frames of one column, :data:`ORDER`, the ordering
    values of each input's rows) into ``count`` parts of about equal rows: Spark's approximate
    percentiles, as Python values, each once, in order. Empty where the values cannot be cut
    (one value, or none)."""
    from pyspark.sql import functions as F

    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    wanted = [k / count for k in range(1, count)]
    accuracy = max(10_000, 20 * count)
    found = union.agg(F.percentile_approx(ORDER, wanted, accuracy).alias("cuts"),
                      F.max(ORDER).alias("top")).toArrow()
    values = found.column("cuts")[0].as_py() or []
    top = found.column("top")[0].as_py()
    # a cut at the highest value would leave the last part empty
    return sorted({v for v in values if v is not None and v != top})


@dataclass(frozen=True)
class Stream:
    """One stream a statement reads, as the bound sees it: its place among the query's sources
    (:func:`~sqlext.streaming.inputs.source_frame`), its ordering column and that column's Spark
    type (``simpleString``), the copies of a row the tasks hold (one, or one per bucket for a row
    every bucket sees), and its Parquet files in the batch (None where Spark reads it)."""

    index: int
    order: str
    kind: str
    copies: int
    files: list | None


def plan_parts(spark, batch, batch_id: int, folder: Folder, streams: list[Stream], buckets: int,
               committed_through) -> Parts:
    """How Spark's batch ``batch_id`` is applied: as the plan recorded in the state folder
    ``folder`` says, where an earlier attempt of it was split; else in one part, or, where it
    puts more rows in the tasks than the bound (:func:`max_rows` for the states' ``buckets``),
    cut at shared ordering values and recorded. ``committed_through()`` is the id of the last
    batch whose output is committed: a batch an earlier attempt committed whole stays whole."""
    from pyspark.sql import functions as F

    from sqlext.functions.arguments import quote
    from sqlext.streaming.inputs import source_frame

    recorded = recorded_parts(folder, batch_id)
    if recorded is not None:
        return recorded
    whole = Parts(batch_id, first_part(folder, batch_id))
    if not streams or not splittable([stream.kind for stream in streams]):
        return whole
    limit = max_rows(spark, buckets)
    rows = _rows(batch, streams, limit)
    if rows <= limit or committed_through() >= whole.first:
        return whole
    frames = [source_frame(batch, stream.index).select(F.col(quote(stream.order)).alias(ORDER))
              for stream in streams]
    bounds = cuts(frames, max(1, math.ceil(rows / limit)))
    if not bounds:
        return whole
    parts = Parts(batch_id, whole.first, bounds)
    parts.record(folder)
    return parts


def _rows(batch, streams: list[Stream], limit: int) -> int:
    """The rows the batch puts in the tasks (a row counted once for each copy the tasks hold):
    from the footers of its files, where every stream is a folder of Parquet files; else 0
    where Spark's estimate of its bytes is within ``limit`` (a row takes a byte at the least),
    and otherwise counted (one job)."""
    from pyspark.sql import functions as F

    from sqlext.streaming.inputs import INPUT, estimated_bytes

    if all(stream.files is not None for stream in streams):
        return sum(stream.copies * sum(f.parquet_rows() for f in stream.files) for stream in streams)
    size = estimated_bytes(batch)
    if size is not None and size <= limit:
        return 0
    counts = batch.agg(*[F.count(INPUT.format(stream.index)) for stream in streams]).first()
    return sum(stream.copies * int(count) for stream, count in zip(streams, counts))

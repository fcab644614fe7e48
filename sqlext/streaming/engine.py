"""How a keyed operator runs one micro-batch: its one step, placed on the driver or on the
executors by the engine.

An operator (:class:`KeyedOperator`) keeps keyed states (:class:`~sqlext.streaming.state.KeyedState`)
and has one step: (the increment as Arrow data, the views of its states) -> (the rows it
forwards, each state's changed rows, facts such as the highest ordering value seen). The step
does not know where it runs. The engine runs it

* on the driver, over the whole increment, when the increment is small (collecting it costs
  less than planning and scheduling Spark jobs) and the state fits the driver's memory;
* on the executors otherwise: the increment is routed to the buckets of the states (each row to
  the bucket of its key, or, for a row every bucket must see, such as a right change of an
  FK_JOIN, to all of them), and each bucket is a task that runs the same step over its rows
  and its bucket of the states, reads the layers it needs from the store itself (``pyarrow.fs``,
  cached in the Python worker between batches as on the driver), and writes its output rows
  and state layers without committing them. One Spark job runs the tasks; the driver then
  commits every task's layers and output at once, so a batch that fails anywhere (a late change
  in one bucket) writes nothing.

Where the operator can name the increment's files (folders of Parquet files, read through the
store), the tasks read them themselves, each keeping its bucket's rows: the job is one stage,
with no shuffle. Otherwise Spark routes the rows (``mapInArrow`` tags each with its bucket,
``groupBy(...).applyInArrow`` runs a task per bucket).

A first run over a large history (every state empty, an increment the driver does not take)
is recomputed instead: its output is the batch function over the increment, which Spark runs
natively, and the step only builds the states. Its output is the same (the batch result over the
changes so far is the contract); :data:`LAST_RUN` says how a run was computed.

``spark.sqlext.streaming.path`` forces ``driver`` or ``spark`` (the executors);
``spark.sqlext.streaming.driverBytes`` is the largest increment (Spark's estimate) the driver
takes. A state whose layers do not fit the driver's cache, or an increment larger than that,
goes to the executors, unless a store is read only through the driver's JVM
(:mod:`sqlext.storage`), where everything runs on the driver.
"""

from __future__ import annotations

import pickle
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from sqlext.catalog.arguments import quote
from sqlext.storage import Folder, _HadoopIO
from sqlext.streaming.run import (PATH_SETTING, STEPS, TableStateRun, check_columns, on_driver, spark_columns, step,
                                  write_arrow_files)
from sqlext.streaming.state import CACHE_BYTES, KeyedState, StateView

BUCKET = "__sx_bucket"
# how the last micro-batch ran: where ("driver" or "executors"), whether its output was recomputed
LAST_RUN: dict = {}
EVERY = -1  # a row every bucket's task must see
BUCKETS_SETTING = "spark.sqlext.streaming.stateBuckets"
PENDING = "_pending"


@dataclass
class Step:
    """What one step gives: the rows it forwards (the call's output columns), each state's new
    rows by state name, and facts the engine combines over the tasks (a maximum each)."""

    out: pa.Table | None
    deltas: dict[str, pa.Table]
    facts: dict = field(default_factory=dict)


class KeyedOperator(TableStateRun):
    """An incremental function over keyed states. A subclass sets :attr:`states` (by name) and
    :attr:`shared` (the states a task reads in every bucket, not only its own), and gives
    :meth:`increment`, :meth:`rows_of`, :meth:`route` and :meth:`step`."""

    states: dict[str, KeyedState]
    shared: frozenset = frozenset()
    # this batch's output comes from the batch function (a recompute): the step builds the states only
    state_only: bool = False

    # -- what a subclass gives

    def increment(self, batch):
        """The micro-batch's rows as a Spark frame of the columns the step reads."""
        return batch

    def increment_sources(self, batch_id: int):
        """The increment's files (picklable, read by :meth:`read_increment` on the driver or in a
        task), or None where Spark must read the increment (not a folder of Parquet files whose
        columns Arrow reads as Spark does)."""
        return None

    def read_increment(self, sources):
        """The increment in the operator's own form, read from :meth:`increment_sources`' files
        (which hold what Spark would read: :meth:`increment_sources` checked their columns)."""
        raise NotImplementedError

    def of_bucket(self, rows, bucket: int):
        """The rows of the operator's form that bucket ``bucket``'s task sees."""
        raise NotImplementedError

    def recompute(self, spark, batch, batch_id: int) -> None:
        """The batch's output from the batch function over the increment (a first run)."""
        raise NotImplementedError

    def rows_of(self, table: pa.Table):
        """The increment in the operator's own form, from Arrow data of :meth:`increment`'s columns."""
        return table

    def route_columns(self) -> list[str]:
        """The columns of :meth:`increment` that :meth:`route` reads."""
        raise NotImplementedError

    def route(self, table: pa.Table) -> np.ndarray:
        """Each row's bucket (of the states' buckets), or :data:`EVERY`, from the columns
        :meth:`route_columns` names."""
        raise NotImplementedError

    def step(self, rows, views: dict[str, StateView], batch_id: int) -> Step:
        raise NotImplementedError

    def begin(self, batch_id: int) -> None:
        """What a batch reads on the driver before its step runs anywhere (kept on ``self``)."""

    def finish(self, spark, batch_id: int, facts: dict, on_driver: bool) -> None:
        """What a batch does after its rows and states are written (the final table, records)."""

    # -- the engine

    @staticmethod
    def state_buckets(spark) -> int:
        """How many buckets a new state gets: ``spark.sqlext.streaming.stateBuckets``, by default
        Spark's default parallelism (the cores a run can use at once)."""
        value = spark.conf.get(BUCKETS_SETTING, "")
        return max(1, int(value) if value else int(spark.sparkContext.defaultParallelism))

    def __call__(self, batch, batch_id: int) -> None:
        spark = batch.sparkSession
        STEPS.clear()
        self.begin(batch_id)
        driver = self.on_driver(batch, batch_id)
        self.state_only = not driver and all(state.before(batch_id).empty for state in self.states.values())
        LAST_RUN.clear()
        LAST_RUN.update(batch=batch_id, placement="driver" if driver else "executors", recomputed=self.state_only)
        try:
            if self.state_only and self.emit != "final":
                with step("recompute the output"), adaptive(spark):
                    self.recompute(spark, batch, batch_id)
            if driver:
                facts = self._on_driver(spark, batch, batch_id)
            else:
                with step("on the executors"):
                    facts = self._on_executors(spark, batch, batch_id)
        finally:
            self.state_only = False
        self.finish(spark, batch_id, facts, driver)

    def on_driver(self, batch, batch_id: int) -> bool:
        """Where this batch runs (see the module's docstring)."""
        if not self._executors_can():
            return True
        if batch.sparkSession.conf.get(PATH_SETTING, "auto").lower() in ("driver", "spark"):
            return on_driver(batch)  # forced
        if not on_driver(batch):  # the increment is too large
            return False
        stored = sum(state.before(batch_id).stored_bytes() for state in self.states.values())
        return stored * 4 <= CACHE_BYTES

    def _executors_can(self) -> bool:
        """Whether the executors reach every folder the tasks write (not through the driver's JVM)."""
        folders = [self.output, self.state] + [s.folder for s in self.states.values()]
        return not any(isinstance(f.io, _HadoopIO) for f in folders)

    def _on_driver(self, spark, batch, batch_id: int) -> dict:
        with step("collect the increment"):
            sources = self.increment_sources(batch_id)
            rows = self.read_increment(sources) if sources is not None else \
                self.rows_of(self.increment(batch).toArrow())
        views = {name: state.before(batch_id) for name, state in self.states.items()}
        result = self.step(rows, views, batch_id)
        if result.out is not None:
            with step("write the output"):
                self.write_rows(spark, result.out, batch_id)
        with step("write the state"):
            for name, rows in result.deltas.items():
                self.states[name].write(views[name], rows, batch_id)
        return result.facts

    def _on_executors(self, spark, batch, batch_id: int) -> dict:
        from pyspark.sql.types import BinaryType, StructField, StructType

        buckets = next(iter(self.states.values())).buckets
        pending = self.state / f"{PENDING}-{batch_id}"
        pending.delete()
        summary_schema = StructType([StructField("summary", BinaryType())])
        sources = self.increment_sources(batch_id)
        if sources is not None:  # the tasks read the files themselves: one stage, no shuffle
            job = spark.range(0, buckets, 1, buckets).mapInArrow(_FileTasks(self, batch_id, pending, sources),
                                                                 summary_schema)
        else:  # Spark routes the rows to the buckets
            job = self._routed(spark, batch, batch_id, buckets, pending, summary_schema)
        done = [pickle.loads(row["summary"]) for row in job.collect()]
        for summary in done:  # the slowest task's time of each step
            for name, seconds in summary["steps"].items():
                STEPS["task: " + name] = max(STEPS.get("task: " + name, 0.0), seconds)
        facts: dict = {}
        for summary in done:
            for name, value in summary["facts"].items():
                if value is not None:
                    facts[name] = value if facts.get(name) is None else max(facts[name], value)
        if not self.state_only:
            with step("write the output"):
                self._commit_output(spark, pending, batch_id, [s["out"] for s in done if s["out"]])
        with step("write the state"):
            for summary in done:
                for name, layers in summary["pending"].items():
                    self.states[name].commit(layers)
        pending.delete()
        return facts

    def _routed(self, spark, batch, batch_id: int, buckets: int, pending: Folder, summary_schema):
        """The tasks over rows Spark routes: an Arrow function of the routing columns alone gives
        each row its bucket (:data:`EVERY` becomes one copy per bucket), the rows are shuffled by
        bucket, and each partition's task runs the buckets it holds."""
        from pyspark.sql import functions as F
        from pyspark.sql.functions import arrow_udf
        from pyspark.sql.types import IntegerType
        from pyspark.util import PythonEvalType

        from sqlext.streaming.run import arrow_schema

        frame = self.increment(batch)
        columns = self.route_columns()
        router = _Router(self, columns)
        bucket = arrow_udf(router, IntegerType(), PythonEvalType.SQL_SCALAR_ARROW_UDF)(
            *[F.col(quote(c)) for c in columns])
        everywhere = F.sequence(F.lit(0), F.lit(buckets - 1))
        tagged = frame.withColumn(BUCKET, F.explode(F.when(bucket == EVERY, everywhere).otherwise(F.array(bucket))))
        task = _RoutedTasks(self, batch_id, pending, arrow_schema(frame.schema))
        return tagged.repartition(buckets, BUCKET).mapInArrow(task, summary_schema)

    def _commit_output(self, spark, pending: Folder, batch_id: int, parts: list[str]) -> None:
        """The tasks' forwarded rows, through the statement, as the batch's output files."""
        if getattr(self, "emit", None) == "final":
            return
        if self.outer_is_all and self.output_format == "parquet":
            check_columns(self.checkpoint, self.output, spark_columns(self.output_arrow))
            write_arrow_files(self.output_arrow.empty_table(), self.output, batch_id)  # clears an earlier attempt
            for name in sorted(parts):
                (pending / name).rename_to(self.output / f"batch-{batch_id:010d}-{name}")
            return
        from sqlext.streaming.run import spark_schema

        frame = spark.read.schema(spark_schema(self.output_arrow)).parquet(pending.uri) if parts else \
            spark.createDataFrame([], spark_schema(self.output_arrow))
        self.write_statement(spark, frame, batch_id)


@contextmanager
def adaptive(spark):
    """Adaptive query execution for a batch query run inside a micro-batch: Structured Streaming
    turns it off in the session it hands ``foreachBatch``, and the batch function's joins over
    a whole history need it (skewed keys, a side small enough to broadcast)."""
    key = "spark.sql.adaptive.enabled"
    before = spark.conf.get(key, "false")
    spark.conf.set(key, "true")
    try:
        yield
    finally:
        spark.conf.set(key, before)


class _Router:
    """The Arrow function that gives each row of the increment its bucket, from its routing
    columns (Spark ships only those to Python)."""

    def __init__(self, operator: KeyedOperator, columns: list[str]):
        self.operator, self.columns = operator, columns

    def __call__(self, *arrays: pa.Array) -> pa.Array:
        table = pa.table(list(arrays), names=self.columns)
        return pa.array(self.operator.route(table).astype(np.int32), pa.int32())


def _run_bucket(op: KeyedOperator, batch_id: int, pending: Folder, bucket: int, rows, started: float) -> bytes:
    """One bucket's task: the operator's step over the bucket's rows and its bucket of the
    states; the forwarded rows and the state layers written, not committed. Returns what the
    driver needs to commit them."""
    import time

    views = {name: state.before(batch_id, only=None if name in op.shared else bucket)
             for name, state in op.states.items()}
    result = op.step(rows, views, batch_id)
    out = None
    if result.out is not None and result.out.num_rows:
        out = f"part-{bucket:05d}.parquet"
        (pending / out).write_parquet(result.out)
    written = {}
    for name, delta in result.deltas.items():
        view = views[name] if name not in op.shared else views[name].owned(bucket)
        written[name] = op.states[name].write(view, delta, batch_id, commit=False)
    STEPS["the task"] = time.perf_counter() - started
    return pickle.dumps({"bucket": bucket, "out": out, "pending": written, "facts": result.facts,
                         "steps": dict(STEPS)})


class _RoutedTasks:
    """The tasks over the rows Spark routed (``mapInArrow`` after the shuffle by bucket): each
    runs the buckets its partition holds."""

    def __init__(self, operator: KeyedOperator, batch_id: int, pending: Folder, schema: pa.Schema):
        self.operator, self.batch_id, self.pending, self.schema = operator, batch_id, pending, schema

    def __call__(self, batches):
        import time

        import pyarrow.compute as pc

        started = time.perf_counter()
        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches)
        for bucket in sorted(pc.unique(table[BUCKET]).to_pylist()):
            STEPS.clear()
            mine = table.filter(pc.equal(table[BUCKET], bucket)).drop_columns([BUCKET]).cast(self.schema)
            summary = _run_bucket(self.operator, self.batch_id, self.pending, int(bucket),
                                  self.operator.rows_of(mine), started)
            started = time.perf_counter()
            yield pa.RecordBatch.from_arrays([pa.array([summary], pa.binary())], names=["summary"])


class _FileTasks:
    """The tasks that read the increment's files themselves (``mapInArrow`` over the bucket
    numbers): each reads them once and runs the buckets it is given."""

    def __init__(self, operator: KeyedOperator, batch_id: int, pending: Folder, sources):
        self.operator, self.batch_id, self.pending, self.sources = operator, batch_id, pending, sources

    def __call__(self, batches):
        import time

        op = self.operator
        rows = None
        for batch in batches:
            for bucket in batch.column(0).to_pylist():
                started = time.perf_counter()
                STEPS.clear()
                if rows is None:
                    with step("read the increment"):
                        rows = op.read_increment(self.sources)
                mine = op.of_bucket(rows, int(bucket))
                summary = _run_bucket(op, self.batch_id, self.pending, int(bucket), mine, started)
                yield pa.RecordBatch.from_arrays([pa.array([summary], pa.binary())], names=["summary"])

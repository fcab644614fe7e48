"""Keyed operators and how one micro-batch runs them: each operator's one step, placed on the
driver or on the executors by the engine, and operators chained into a pipeline.

An operator (:class:`KeyedOperator`) keeps keyed states (:class:`~sqlext.streaming.state.KeyedState`)
and has one step: (its inputs' changes as Arrow data, the views of its states) -> (the change
rows it forwards, each state's changed rows, facts such as the highest ordering value seen).
Its inputs (:class:`Input`) are streams the statement reads (``TABLE(STREAM(name))``) or the
output of another operator (``TABLE(CHANGELOG_FILTER(...))``): deltas in and out have one shape,
sqlext's change rows, so operators chain. The step does not know where it runs. The engine
(:class:`Pipeline`, the ``foreachBatch`` function) runs every operator of the statement, leaves
first, each one's output feeding the next:

* on the driver, over whole increments, when the increment is small (collecting it costs less
  than planning and scheduling Spark jobs) and the states fit the driver's memory;
* on the executors otherwise: each operator's increment is routed to the buckets of its states
  (each row to the bucket of its key, or, for a row every bucket must see, to all of them; an
  FK_JOIN sends none so: it runs as three operators, KIP-213's subscribe, answer and join
  steps, whose requests and answers each go to one bucket), and each bucket is a task that
  runs the same step over its rows and its bucket of the states, reads the layers it needs
  from the store itself (``pyarrow.fs``, cached in the Python worker between batches as on the
  driver), and writes its output rows and state layers without committing them. One Spark job
  runs an operator's tasks. Where an operator's inputs are files (a folder of Parquet files,
  or the parts an upstream operator's tasks wrote) and its step needs no Spark to read them,
  the tasks read the files themselves: one stage, no shuffle. An upstream operator whose rows
  go to other buckets than their own (:attr:`KeyedOperator.split`) writes one file per bucket
  of its reader, and each reader's task reads only its own: an exchange without Spark's
  shuffle. A job whose tasks would take in no rows is not run. Otherwise Spark routes the rows
  (an Arrow function of the key columns tags each row's bucket, a shuffle by it, one
  ``mapInArrow`` task per partition: :mod:`sqlext.streaming.executors`).

Either way nothing is visible until the driver commits every operator's layers and the output
at the end of the batch, so a batch that fails anywhere (a late change in one bucket) writes
nothing. A first run over a long history is no different: the tasks run the steps over
the whole history, their states empty (no lookups), and write the output and the states in the
same pass, which costs about what the batch statement costs to compute and write the same
output; the run's report (:attr:`Pipeline.last`) says where a batch was computed.

``spark.sqlext.streaming.path`` forces ``driver`` or ``spark`` (the executors);
``spark.sqlext.streaming.driverBytes`` is the largest increment (Spark's estimate) the driver
takes. A state whose layers do not fit the driver's cache, or an increment larger than that,
goes to the executors, unless a store is read only through the driver's JVM
(:mod:`sqlext.storage`), where everything runs on the driver.
"""

from __future__ import annotations

import itertools
import pickle
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pyspark.sql.types import BinaryType, StructField, StructType
from sqlglot import exp

from sqlext.functions.changes import CHANGE_TYPE
from sqlext.storage import Folder, read_parquet
from sqlext.storage.backends import HadoopIO
from sqlext.streaming.batches import batch_files
from sqlext.streaming.batch_parts import (BYTES_PER_ROW, Parts, Stream, Window, plan_parts, task_budget,
                                          worker_cache_bytes)
from sqlext.streaming.inputs import source_frame
from sqlext.streaming.run import (PATH_SETTING, BatchReport, StatefulRun, check_columns, on_driver, record_in,
                                  recorded_in, spark_columns, spark_schema, step, timed)
from sqlext.streaming.rescale import rescale
from sqlext.streaming.settings import whole_number
from sqlext.streaming.source_files import readable_files
from sqlext.streaming.state import KeyedState, LayerWrites, StateView
from sqlext.streaming.executors import FileTasks, Stage, carried_input, routed
from sqlext.udfs.column_wise import net_changes

BUCKETS_SETTING = "spark.sqlext.streaming.stateBuckets"
PENDING = "_pending"
# an inner operator's forwarded rows are netted per key (see KeyedOperator.forwarded) from this
# many on: below it, few keys change twice and netting costs more than it saves (an increment
# whose keys change once is no smaller netted, and the readers' work does not shrink); a first
# run over a long history nets
NET_ROWS = 1_000_000


@dataclass
class Step:
    """What one step gives: the rows it forwards (the call's output columns), each state's new
    rows by state name, and facts the engine combines over the tasks (a maximum each)."""

    out: pa.Table | None
    deltas: dict[str, pa.Table]
    facts: dict = field(default_factory=dict)


@dataclass
class Input:
    """One table argument of an operator: a stream the statement reads (the ``source``-th, with
    its Parquet ``folder`` where it is one) or another operator's output (``upstream``), with
    the Arrow and Spark columns of its rows."""

    name: str
    schema: pa.Schema
    spark_schema: object
    source: int | None = None
    folder: Folder | None = None
    upstream: "KeyedOperator | None" = None
    repeats: bool = False  # a stream of Debezium's events, which a restarted connector sends again
    # an operator that takes in the same rows of this stream first, by the same bucket, and whose
    # tasks hand each bucket's share on (:attr:`KeyedOperator.hands`): on the executors a task
    # reads its bucket's file of them, not every file of the stream to keep its share
    handed_by: "KeyedOperator | None" = None


# a new state gets a bucket for each this many bytes of its sources' Parquet files
BUCKET_SOURCE_BYTES = 64 * 1024 * 1024


class KeyedOperator:
    """An incremental function over keyed states, in a statement. A subclass sets
    :attr:`states` (by name), :attr:`shared` (the states a task reads in every bucket, not only
    its own), :attr:`inputs`, :attr:`output_arrow` and :attr:`emit`, and gives the methods
    below. Its state lives in :attr:`folder`."""

    function: str
    emit: str
    states: dict[str, KeyedState]
    shared: frozenset = frozenset()
    inputs: dict[str, Input]
    output_arrow: pa.Schema
    output_key: list[str]  # the columns that name a row of the table its change rows describe
    order_by: str  # the ordering column of the rows it forwards
    # its reader needs only the net effect of each batch's changes (see :meth:`forwarded`)
    net: bool = False
    # the operators of the call's own that run before it, in order, and compute some of its
    # inputs from the statement's streams (an FK_JOIN's subscribe and answer stages)
    stages: tuple = ()
    # where a bucket's task writes its forwarded rows as one file per bucket of the reader (an
    # exchange: each reader's task reads its own files), the reader's bucket of each row:
    # ``split(out) -> np.ndarray``; None where a reader's tasks read every file
    split = None
    # the inputs whose rows a bucket's task writes, as it took them in, for a later operator of
    # the call that takes the same rows by the same bucket (an FK_JOIN's join step reads the left
    # changes its subscribe step took: :attr:`Input.handed_by`)
    hands: tuple = ()

    def __init__(self, folder: Folder, call: exp.Table):
        self.folder, self.call = folder, call

    # -- what a subclass gives

    def prepare(self, frames: dict):
        """The step's rows as a Spark frame, from a Spark frame of each input's rows."""
        raise NotImplementedError

    def rows_of(self, table: pa.Table):
        """The step's rows in the operator's own form, from Arrow data of :meth:`prepare`'s columns."""
        return table

    @property
    def arrow_ready(self) -> bool:
        """Whether :meth:`rows_from` needs no Spark (so a task can read its inputs' files)."""
        return False

    def rows_from(self, spark, tables: dict[str, pa.Table]):
        """The step's rows in the operator's own form, from Arrow data of each input's rows;
        ``spark`` is None where :attr:`arrow_ready`."""
        raise NotImplementedError

    def of_bucket(self, rows, bucket: int):
        """The rows of the operator's form that bucket ``bucket``'s task sees: by default (rows
        as one Arrow table) those :meth:`route` sends there."""
        return rows.filter(pa.array(self.route(rows) == bucket))

    def route_columns(self) -> list[str]:
        """The columns of :meth:`prepare`'s frame that :meth:`route` reads."""
        raise NotImplementedError

    def route(self, table: pa.Table) -> np.ndarray:
        """Each row's bucket (of the states' buckets), or :data:`~sqlext.streaming.executors.EVERY`, from the columns
        :meth:`route_columns` names."""
        raise NotImplementedError

    def step(self, rows, views: dict[str, StateView], batch_id: int) -> Step:
        raise NotImplementedError

    def taken(self, rows) -> dict[str, int]:
        """The rows of each input that ``rows`` (of the operator's form) hold: what a task took
        in, for the run's report (:attr:`~sqlext.streaming.run.BatchReport.taken`)."""
        from sqlext.streaming.executors import row_count

        name = next(iter(self.inputs)) if len(self.inputs) == 1 else "rows"
        return {name: row_count(rows)}

    def handed(self, rows, name: str) -> pa.Table:
        """The rows of input ``name`` that ``rows`` (of the operator's form) hold, in the input's
        columns: what a task hands on for :attr:`hands`."""
        raise NotImplementedError

    def input_order(self, name: str) -> str | None:
        """The column that orders the rows of input ``name`` (where it is a stream the statement
        reads, its ordering column); None where the operator does not say."""
        return None

    def routed_by(self, name: str) -> "tuple[KeyedState, list[str]] | None":
        """How :meth:`route` sends the rows of input ``name``: each to the bucket, in this
        state, of these columns of the input (in the order of the state's bucket columns); None
        where a row can go to every bucket, or the operator does not say."""
        return None

    def forwarded_by(self) -> "tuple[KeyedState, list[str]] | None":
        """Where the rows a bucket's step forwards come from: the state whose bucket computed
        them and the columns of the forwarded rows that name that bucket (in the order of the
        state's bucket columns); None where the operator does not say."""
        return None

    def begin(self, batch_id: int) -> None:
        """What a batch reads on the driver before the step runs anywhere (kept on ``self``)."""

    def finish(self, batch_id: int, facts: dict) -> None:
        """What a batch records once its rows and states are written."""

    def keep(self, name: str):
        """Which rows of state ``name`` a new base keeps (an Arrow expression; None: all)."""
        return None

    def final(self, spark, batch_id: int, on_driver: bool):
        """For ``emit => 'final'``: the table after this batch, as Arrow data or a Spark frame."""
        raise NotImplementedError

    # -- shared by every operator

    @property
    def final_arrow(self) -> pa.Schema:
        """The columns of :meth:`final`'s table (by default the call's output columns)."""
        return self.output_arrow

    def forwarded(self, out: pa.Table | None) -> pa.Table | None:
        """The rows a step forwards to its reader: all of them, or where the statement's output
        is a table (``emit => 'final'``, an aggregate) and this operator feeds another, each key's
        net change over the batch (:func:`~sqlext.udfs.column_wise.net_changes`). The reader's
        states and the table it gives depend only on that net change, and a first run over a
        long history then passes on the rows of the table rather than its whole history. A small
        batch (fewer than :data:`NET_ROWS` rows) forwards its rows as they are: the reader's
        result is the same either way, and few of its keys change twice."""
        if not self.net or out is None or CHANGE_TYPE not in out.column_names or out.num_rows < NET_ROWS:
            return out
        return net_changes(out, self.output_key, self.order_by)

    @property
    def buckets(self) -> int:
        return next(iter(self.states.values())).buckets

    @staticmethod
    def state_buckets(spark, source_bytes: int = 0, source_rows: int = 0) -> int:
        """How many buckets a new state gets: ``spark.sqlext.streaming.stateBuckets``, by default
        Spark's default parallelism (the cores a run can use at once), or more where the
        sources already hold more than :data:`BUCKET_SOURCE_BYTES` of Parquet a bucket, or more
        rows than a task's memory takes (the batch bound's rows for one bucket:
        :mod:`~sqlext.streaming.batch_parts`), so that a first run over a long history runs in
        one part, the task of each bucket holding a share that fits a Python worker's memory
        (in parts, every part would be a pass of the tasks over the whole history)."""
        asked = asked_buckets(spark)
        if asked is not None:
            return asked
        cores = int(spark.sparkContext.defaultParallelism)
        per_bucket = max(1, task_budget(spark) // BYTES_PER_ROW)
        return max(1, cores, -(-int(source_bytes) // BUCKET_SOURCE_BYTES), -(-int(source_rows) // per_bucket))

    def recorded(self, name: str, batch_id: int):
        """The value the last batch before ``batch_id`` recorded under ``name``; None before any."""
        return recorded_in(self.folder, name, batch_id)

    def record(self, name: str, batch_id: int, value) -> None:
        """Record ``value`` under ``name`` for this batch."""
        record_in(self.folder, name, batch_id, value)


def asked_buckets(spark) -> int | None:
    """The bucket count ``spark.sqlext.streaming.stateBuckets`` asks for; None where it is unset."""
    return whole_number(spark, BUCKETS_SETTING, "a whole number of buckets, 1 or more", 8,
                        "Spark's default parallelism for a new state, and the recorded count for one that exists")


class Pipeline(StatefulRun):
    """The ``foreachBatch`` function of a statement around a tree of keyed operators:
    ``operators`` leaves first, the last one the call the statement reads."""

    def __init__(self, operators: list[KeyedOperator], outer: exp.Expression, placeholder: str,
                 checkpoint: Folder, output: Folder, output_format: str):
        root = operators[-1]
        super().__init__(root.call, outer, placeholder, checkpoint, output, output_format, root.function, ())
        self.operators, self.root = operators, root
        for operator in operators[:-1]:  # an inner operator, where the statement gives a table
            operator.net = root.emit == "final"
        self.emit, self.output_arrow = root.emit, root.output_arrow
        self._spark_batch, self._files, self._window = None, {}, Window()
        self._part_sources: dict[int, int] = {}

    # -- one micro-batch

    def __call__(self, batch, batch_id: int) -> None:
        """The ``foreachBatch`` function: Spark's batch ``batch_id`` in parts where it holds more
        rows than the batch bound (:mod:`sqlext.streaming.batch_parts`), each part a step whose
        output and state are committed before the next; :attr:`last` says how it went."""
        spark = batch.sparkSession
        self.last = BatchReport(batch_id)
        with timed(self.last.steps):
            self._spark_batch, self._files = batch_id, {}
            parts = self._parts(spark, batch, batch_id)
            self.last.parts = parts.count
            for number in parts.pending():
                part, window = parts.first + number, parts.window(number)
                self.sink.around(spark, part, lambda: self.run(batch, part, window))
                parts.finished(self.state, number)

    def run(self, batch, batch_id: int, window: Window = Window()) -> None:
        """One part of a micro-batch (``batch_id`` its id): the inputs' changes in ``window``."""
        spark = batch.sparkSession
        self._rescale(spark, batch_id)
        self._window = window
        for operator in self.operators:
            operator.begin(batch_id)
        driver = self.on_driver(batch, batch_id)
        self.last.placement = "driver" if driver else "executors"
        self._part_sources = {}  # each stream's changes in this part (the operators reading it take them alike)
        if driver:
            facts = self._run_on_driver(spark, batch, batch_id)
        else:
            with step("on the executors"):
                facts = self._run_on_executors(spark, batch, batch_id)
        for source, rows in self._part_sources.items():
            self.last.sources[source] = self.last.sources.get(source, 0) + rows
        for operator in self.operators:
            operator.finish(batch_id, facts.get(id(operator), {}))
        if self.emit == "final":
            with step("write the final table"):
                final = self.root.final(spark, batch_id, driver)
                if isinstance(final, pa.Table):
                    self.write_rows(spark, final.cast(self.root.final_arrow), batch_id, whole=True)
                else:
                    self.write_statement(spark, final, batch_id, whole=True)

    def _parts(self, spark, batch, batch_id: int) -> Parts:
        """How Spark's batch ``batch_id`` is applied (:func:`~sqlext.streaming.batch_parts.plan_parts`)."""
        buckets = max([asked_buckets(spark) or 1] + [s.buckets for s in self._states()])
        with step("plan the batch's parts"):
            return plan_parts(spark, batch, batch_id, self.state, self._streams(), buckets,
                              lambda: self.sink.committed_through(spark))

    def _streams(self) -> list[Stream]:
        """The statement's streams (each once) as the batch bound sees them; empty where an
        operator does not name an input's ordering column. A row an operator sends to one bucket
        is held once; one it sends to every bucket (an input it does not route by a state's key)
        is held by every task: one copy a bucket. (An FK_JOIN routes each change to one bucket:
        its right changes go to the buckets of their own keys.)"""
        found = {}
        for operator in self.operators:
            for name, source in operator.inputs.items():
                if source.upstream is None:
                    order = operator.input_order(name)
                    if order is None:
                        return []
                    copies = 1 if operator.routed_by(name) is not None else operator.buckets
                    found[source.source] = Stream(source.source, order, source.spark_schema[order].dataType
                                                  .simpleString(), copies,
                                                  self._source_files(source, self._spark_batch))
        return [found[k] for k in sorted(found)]

    def _states(self) -> list[KeyedState]:
        """Every state of the statement's operators, each once (the stages of one call share some)."""
        found = {}
        for operator in self.operators:
            for state in operator.states.values():
                found.setdefault(id(state), state)
        return list(found.values())

    def _count_taken(self, operator: KeyedOperator, taken: list[dict], copies: bool) -> None:
        """Add the rows an operator's tasks (or its one step on the driver) took in to the
        report: all of them to :attr:`~sqlext.streaming.run.BatchReport.taken`, and the changes
        of each stream the statement reads, once, to ``changes`` (on the executors, a row sent
        to every bucket is taken in once a bucket: ``copies``)."""
        report = self.last
        for name in {name for found in taken for name in found}:
            rows = sum(found.get(name, 0) for found in taken)
            report.taken += rows
            source = operator.inputs.get(name)
            if source is not None and source.upstream is None:
                spread = operator.buckets if copies and operator.routed_by(name) is None else 1
                self._part_sources[source.source] = max(self._part_sources.get(source.source, 0), rows // spread)

    def _rescale(self, spark, batch_id: int) -> None:
        """The states laid out in the bucket count the run asks for
        (``spark.sqlext.streaming.stateBuckets``) where it is another than theirs, before the batch
        reads them (:mod:`sqlext.streaming.rescale`)."""
        asked = asked_buckets(spark)
        states = self._states()
        if asked is None or all(state.buckets == asked for state in states):
            return
        place = {"driver": True, "spark": False}.get(spark.conf.get(PATH_SETTING, "auto").lower())
        with step("rescale the state"):
            for state in states:
                rescale(spark, state, asked, batch_id, on_driver=place)

    def on_driver(self, batch, batch_id: int) -> bool:
        """Where this batch runs (see the module's docstring)."""
        if not self._executors_can():
            return True
        return on_driver(batch, state_bytes=lambda: sum(state.before(batch_id).stored_bytes()
                                                        for state in self._states()))

    def _executors_can(self) -> bool:
        """Whether the executors reach every folder the tasks read and write (not only through
        the driver's JVM)."""
        folders = [self.output, self.state] + [s.folder for s in self._states()]
        return not any(isinstance(f.io, HadoopIO) for f in folders)

    def _source_files(self, source: Input, batch_id: int) -> list | None:
        """A source's files in Spark's batch, where it is a folder of Parquet files whose columns
        Arrow reads as Spark does; None otherwise (Spark reads it). (``batch_id`` is a part's:
        the files are Spark's batch's.)"""
        if source.source not in self._files:
            files = None if source.folder is None else \
                batch_files(self.checkpoint, self._spark_batch, source.source, source.folder)
            self._files[source.source] = files if files is not None and readable_files(files, source.schema) \
                else None
        return self._files[source.source]

    # -- on the driver

    def _run_on_driver(self, spark, batch, batch_id: int) -> dict:
        """Each operator's step in the statement's order. A state's new layers are written
        while the next operators compute, and committed after the output
        (:class:`~sqlext.streaming.state.LayerWrites`)."""
        outputs: dict[int, pa.Table] = {}
        facts = {}
        with LayerWrites() as writes:
            for operator in self.operators:
                with step("collect the increment"):
                    rows = self._driver_rows(spark, batch, batch_id, operator, outputs)
                views = {name: state.before(batch_id) for name, state in operator.states.items()}
                self._count_taken(operator, [operator.taken(rows)], copies=False)
                result = operator.step(rows, views, batch_id)
                outputs[id(operator)] = operator.forwarded(result.out)
                facts[id(operator)] = result.facts
                for name, delta in result.deltas.items():
                    writes.write(operator.states[name], views[name], delta, batch_id, keep=operator.keep(name))
            out = outputs[id(self.root)]
            if out is not None:
                with step("write the output"):
                    self.write_rows(spark, out, batch_id)
            with step("write the state"):
                writes.commit()
        return facts

    def _driver_rows(self, spark, batch, batch_id: int, operator: KeyedOperator, outputs: dict):
        """An operator's rows on the driver: its sources' files read, or its inputs collected."""
        tables = {}
        for name, source in operator.inputs.items():
            if source.upstream is not None:
                tables[name] = outputs[id(source.upstream)]
            else:
                files = self._source_files(source, batch_id)
                tables[name] = None if files is None else \
                    read_parquet(files, source.schema, filter=self._where(operator, name))
        if all(t is not None for t in tables.values()) and operator.arrow_ready:
            return operator.rows_from(None, tables)
        if all(source.upstream is None for source in operator.inputs.values()):  # one Spark job
            frames = {name: self._stream_rows(batch, operator, name) for name in operator.inputs}
            return operator.rows_of(operator.prepare(frames).toArrow())
        for name, source in operator.inputs.items():
            if tables[name] is None:
                tables[name] = self._stream_rows(batch, operator, name).toArrow().cast(source.schema)
        return operator.rows_from(spark, tables)

    # -- on the executors

    def _run_on_executors(self, spark, batch, batch_id: int) -> dict:
        root = self.state / f"{PENDING}-{batch_id}"
        root.delete()
        summary_schema = StructType([StructField("summary", BinaryType())])
        cache = worker_cache_bytes(spark)
        parts: dict[int, list[Folder]] = {}
        handed: dict[int, list[Folder]] = {}  # the rows an operator's tasks handed on (KeyedOperator.hands)
        facts, pending = {}, []
        for chain in self._chains(root, batch_id):
            first = chain[0]
            if first.files is not None and self._idle(chain, parts):
                for stage in chain:  # no rows in: no rows out and no state written, so no job
                    parts[id(stage.operator)], facts[id(stage.operator)] = [], {}
                    handed[id(stage.operator)] = []
                continue
            if first.files is not None:  # tasks read the files, and run the chain's operators in turn
                for stage in chain:
                    stage.files.update({name: parts[id(source.upstream)]
                                        for name, source in stage.operator.inputs.items()
                                        if source.upstream is not None and name != stage.carried})
                    stage.files.update({name: handed[id(source.handed_by)]
                                        for name, source in stage.operator.inputs.items()
                                        if source.handed_by is not None and id(source.handed_by) in handed
                                        and name != stage.carried})
                job = spark.range(0, first.operator.buckets, 1, first.operator.buckets).mapInArrow(
                    FileTasks(chain, batch_id, cache), summary_schema)
            else:  # Spark routes the rows to the buckets
                operator = first.operator
                frames = {name: _read_frame(spark, parts[id(source.upstream)], source)
                          if source.upstream is not None else self._stream_rows(batch, operator, name)
                          for name, source in operator.inputs.items()}
                job = routed(operator, operator.prepare(frames), batch_id, first.pending, summary_schema, cache)
            done = [pickle.loads(row["summary"]) for row in job.collect()]
            steps = self.last.steps
            for summary in done:  # the slowest task's time of each step
                for name, seconds in summary["steps"].items():
                    steps["task: " + name] = max(steps.get("task: " + name, 0.0), seconds)
            for number, stage in enumerate(chain):
                operator, mine = stage.operator, [s for s in done if s.get("stage", 0) == number]
                parts[id(operator)] = [stage.pending / name for s in mine if s["out"]
                                       for name in ([s["out"]] if isinstance(s["out"], str) else s["out"])]
                if first.files is not None and operator.hands:
                    handed[id(operator)] = [stage.pending / name for s in mine for name in s.get("handed", [])]
                self._count_taken(operator, [s["taken"] for s in mine], copies=True)
                facts[id(operator)] = _combined([s["facts"] for s in mine])
                pending += [(operator.states[name], layers) for s in mine for name, layers in s["pending"].items()]
        if self.emit != "final":
            with step("write the output"):
                self._commit_output(spark, parts[id(self.root)], batch_id)
        with step("write the state"):
            for state, layers in pending:
                state.commit(layers)
        root.delete()
        return facts

    def _idle(self, chain: list["Stage"], parts: dict) -> bool:
        """Whether a chain's tasks would take in no rows: every file it reads holds none (by
        their footers), and the upstream operators it reads wrote none (an FK_JOIN's subscribe
        step in a run of right changes alone). Its step over no rows forwards and writes nothing."""
        for stage in chain:
            for name, source in stage.operator.inputs.items():
                if name == stage.carried:
                    continue
                files = parts[id(source.upstream)] if source.upstream is not None else stage.files.get(name)
                if files is None or any(f.parquet_rows() for f in files):
                    return False
        return True

    def _chains(self, root: Folder, batch_id: int) -> list[list["Stage"]]:
        """The operators in the statement's order, in runs that one Spark job computes: where an
        operator reads its input from the one before it, and bucket b's task of the one before
        forwards all the rows bucket b's task of this one needs of that input (both send a row
        to the bucket of the same key columns, as the same types, among as many buckets), the
        same task runs both, handing the rows over in memory: no files written and read back
        (unless another operator reads them too), no job of its own. Each operator of a run
        reads its other inputs' files itself; its tasks write under ``root``."""
        chains: list[list[Stage]] = []
        for number, operator in enumerate(self.operators):
            folder = root / str(number)
            files = self._task_files(operator, batch_id)
            last = chains[-1][-1] if chains else None
            carried = None if last is None or last.files is None or files is None \
                else carried_input(last.operator, operator)
            where = {name: self._where(operator, name) for name, source in operator.inputs.items()
                     if source.upstream is None}
            stage = Stage(operator, folder, files, carried, where=where)
            if carried is not None:
                # its rows go on in memory, and are written only for another reader (an
                # FK_JOIN's join step reads the left input its subscribe step was handed)
                last.kept = self._readers(last.operator) > 1
                chains[-1].append(stage)
            else:
                chains.append([stage])
        return chains

    def _stream_rows(self, batch, operator: KeyedOperator, name: str):
        """The rows of a stream the statement reads (input ``name`` of ``operator``) in the
        batch, those of the part's window (a Spark frame)."""
        frame = source_frame(batch, operator.inputs[name].source)
        where = None if self._window.whole else self._window.spark(operator.input_order(name))
        return frame if where is None else frame.where(where)

    def _where(self, operator: KeyedOperator, name: str):
        """The part's window over a stream's rows (input ``name`` of ``operator``), as an Arrow
        expression a reader of its files applies; None for a batch in one part."""
        if self._window.whole:
            return None
        column = operator.input_order(name)
        return self._window.arrow(column, operator.inputs[name].schema.field(column).type)

    def _readers(self, upstream: KeyedOperator) -> int:
        """How many inputs of the statement's operators read ``upstream``'s rows."""
        return sum(source.upstream is upstream for op in self.operators for source in op.inputs.values())

    def _task_files(self, operator: KeyedOperator, batch_id: int) -> dict | None:
        """The files of each source input of ``operator`` (an upstream operator's are filled in
        when it has run), where its tasks can read them all; None where Spark routes its rows."""
        if not operator.arrow_ready:
            return None
        files = {}
        for name, source in operator.inputs.items():
            if source.upstream is None:
                files[name] = self._source_files(source, batch_id)
                if files[name] is None:
                    return None
        return files

    def _commit_output(self, spark, parts: list[Folder], batch_id: int) -> None:
        """The root's forwarded rows (the tasks' parts), through the statement, as the batch's
        output files."""
        if self.outer_is_all and self.sink.file_format == "parquet":
            check_columns(self.checkpoint, self.output, spark_columns(self.output_arrow))
            self.sink.add_parts(parts, batch_id)
            return
        schema = spark_schema(self.output_arrow)
        frame = spark.read.schema(schema).parquet(*[p.uri for p in parts]) if parts else \
            spark.createDataFrame([], schema)
        self.write_statement(spark, frame, batch_id)


def _read_frame(spark, files: list, source: Input):
    """A Spark frame of Parquet files (an input's rows), in the input's columns."""
    if not files:
        return spark.createDataFrame([], source.spark_schema)
    return spark.read.schema(source.spark_schema).parquet(*[f.uri for f in files])




def _combined(facts: list[dict]) -> dict:
    """The tasks' facts combined: the largest value of each."""
    combined: dict = {}
    for found in facts:
        for name, value in found.items():
            if value is not None:
                combined[name] = value if combined.get(name) is None else max(combined[name], value)
    return combined


_views = itertools.count(1)


@contextmanager
def temporary_view(frame):
    """A name for ``frame`` while the block builds a query over it (a query analysed over a view
    keeps its plan when the view is dropped)."""
    name = f"__sx_view_{next(_views)}"
    frame.createOrReplaceTempView(name)
    try:
        yield name
    finally:
        frame.sparkSession.catalog.dropTempView(name)



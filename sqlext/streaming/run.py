"""What every ``foreachBatch`` function of an incremental run shares: the statement around the
function call, the increment as Arrow data, the choice of where a run computes, and the
output folder's files.

A run computes on the driver, over Arrow data, when its increment is small (the usual case:
collecting it and the state it meets costs less than planning and scheduling Spark jobs), and
as Spark plans on the executors when it is large (``spark.sqlext.streaming.driverBytes``, the
increment's estimated size). ``spark.sqlext.streaming.path`` forces ``driver`` or ``spark``.

Output files are named by batch id (``batch-<id>-*``, or ``base-<id>-*`` for a run that
rewrites the whole output). A batch writes them where no reader of the folder looks and they
appear when the batch commits (:class:`BatchOutput`), so the output never holds a row twice,
nor a row of a batch that did not commit.
"""

from __future__ import annotations

import pickle
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Sequence

import pyarrow as pa
from sqlglot import exp

from sqlext.language.dialect import to_sql
from sqlext.runner import run_statement
from sqlext.streaming.inputs import estimated_bytes
from sqlext.storage import Folder
from sqlext.errors import SqlextError
from sqlext.streaming.checkpoint import (FUNCTION, LAYOUT, LAYOUT_FILE, OUTPUT_COMMITTED, START_OVER, STATE_FOLDER,
                                         check_columns, committed_any, identity, output_columns)

PATH_SETTING = "spark.sqlext.streaming.path"
DRIVER_BYTES_SETTING = "spark.sqlext.streaming.driverBytes"
DRIVER_BYTES = 8 * 1024 * 1024


@dataclass
class BatchReport:
    """How one micro-batch of a run went: its id, where it computed (``driver`` or
    ``executors``, for a run of keyed operators), the seconds of each step, by step
    (``sqlext bench incremental`` shows them; a step of the tasks is the slowest task's), and
    how many parts it was applied in."""

    batch: int
    placement: str | None = None
    steps: dict[str, float] = field(default_factory=dict)
    parts: int = 1  # the parts the batch was applied in (see sqlext.streaming.batch_parts)
    taken: int = 0  # the rows every operator's tasks (or steps, on the driver) took in, summed
    sources: dict[int, int] = field(default_factory=dict)  # each stream's changes in the batch, by its place

    @property
    def changes(self) -> int:
        """The changes of the statement's streams the batch applied, each once."""
        return sum(self.sources.values())

    @property
    def taken_per_change(self) -> float | None:
        """The rows the tasks took in for each change applied (1 where each operator takes each
        change once; with an operator that sends a change to every bucket, up to the bucket
        count): what a run's work grows with beside its changes. None for a batch of no changes."""
        return self.taken / self.changes if self.changes else None


# the step times of the micro-batch, or the task, that this thread runs (see timed)
_TIMED: ContextVar[dict | None] = ContextVar("sqlext_step_times", default=None)


@contextmanager
def timed(steps: dict[str, float]):
    """The :func:`step` blocks inside this one add their seconds to ``steps``: a run sets it
    around a micro-batch, and a task around its bucket. The steps are deep inside the
    operators, which run on the driver and in the tasks alike, so they are not handed the
    report: they find it here."""
    token = _TIMED.set(steps)
    try:
        yield steps
    finally:
        _TIMED.reset(token)


@contextmanager
def step(name: str):
    """Time one step of a micro-batch into the step times of the block of :func:`timed` it is
    in (outside any, the time is not kept)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        steps = _TIMED.get()
        if steps is not None:
            steps[name] = steps.get(name, 0.0) + time.perf_counter() - started


@contextmanager
def adaptive(spark):
    """Adaptive query execution for a batch query run inside a micro-batch (Structured
    Streaming turns it off for the micro-batch's own plan, and the session ``foreachBatch``
    hands over keeps that): a join over a long history needs it (the number of partitions, a
    side small enough to broadcast, skewed keys)."""
    key = "spark.sql.adaptive.enabled"
    before = spark.conf.get(key, "false")
    spark.conf.set(key, "true")
    try:
        yield
    finally:
        spark.conf.set(key, before)


def on_driver(batch, limit: int | None = None, state_bytes=None) -> bool:
    """Whether this batch runs on the driver: forced by ``spark.sqlext.streaming.path``, else
    when Spark estimates the increment at no more than ``limit`` (by default
    ``spark.sqlext.streaming.driverBytes``) and the state (``state_bytes()``, its stored bytes,
    where given) is small enough for the driver's cache to hold it."""
    from sqlext.streaming.layer_cache import CACHE_BYTES

    spark = batch.sparkSession
    forced = spark.conf.get(PATH_SETTING, "auto").lower()
    if forced in ("driver", "spark"):
        return forced == "driver"
    if limit is None:
        limit = int(spark.conf.get(DRIVER_BYTES_SETTING, str(DRIVER_BYTES)))
    size = estimated_bytes(batch)
    if size is None:  # no estimate: take the path that scales
        return False
    return size <= limit and (state_bytes is None or state_bytes() * 4 <= CACHE_BYTES)


class StatefulRun:
    """What the ``foreachBatch`` function of a statement that keeps state holds: the statement
    around the call, the batch call over the batch's views, the state in the checkpoint, and
    the output. :class:`~sqlext.streaming.engine.Pipeline`, the recursion and the self-join are
    its kinds; :class:`FramesRun` is the run of a statement that keeps none."""

    def __init__(self, call: exp.Table, outer: exp.Expression, placeholder: str, checkpoint: Folder, output: Folder,
                 output_format: str, function: str, arguments: tuple[str, ...]):
        self.call, self.outer, self.placeholder = call, outer, placeholder
        self.checkpoint = checkpoint
        self.state = checkpoint / STATE_FOLDER
        if not (self.state / LAYOUT_FILE).exists():  # the layout this engine writes (see checkpoint.claim)
            (self.state / LAYOUT_FILE).write_bytes((LAYOUT + "\n").encode())
        self.output, self.output_format = output, output_format
        self.sink = batch_output(output, checkpoint, output_format)
        self.function, self.arguments = function, arguments
        self.last: BatchReport | None = None  # how the last micro-batch went

    def __call__(self, batch, batch_id: int) -> None:
        """The ``foreachBatch`` function: the batch (:meth:`run`), its output committed last;
        :attr:`last` says how it went."""
        self.last = BatchReport(batch_id)
        with timed(self.last.steps):
            self.sink.around(batch.sparkSession, batch_id, lambda: self.run(batch, batch_id))

    def run(self, batch, batch_id: int) -> None:
        """One micro-batch: its output written to :attr:`sink`, its state committed."""
        raise NotImplementedError

    @property
    def outer_is_all(self) -> bool:
        """Whether the statement only selects every column of the call (its rows are the call's)."""
        outer = self.outer
        if not isinstance(outer, exp.Select) or len(outer.expressions) != 1 \
                or not isinstance(outer.expressions[0], exp.Star):
            return False
        if any(value for key, value in outer.args.items() if key not in ("expressions", "from_", "from")):
            return False
        source = outer.args.get("from_") or outer.args.get("from")
        return source is not None and isinstance(source.this, exp.Table) and source.this.name == self.placeholder

    def write_rows(self, spark, rows: pa.Table, batch_id: int, whole: bool = False, carry: tuple[str, ...] = ()) -> None:
        """The call's rows of this batch (Arrow data in the call's output columns) through the
        statement, as the batch's output files. Rows the statement passes on as they are, into
        Parquet, are written straight from the driver; anything else runs the statement in Spark."""
        if self.outer_is_all and self.sink.file_format == "parquet":
            check_columns(self.checkpoint, self.output, spark_columns(rows.schema))
            self.sink.write_arrow(rows, batch_id, kind="base" if whole else "batch")
            return
        self.write_statement(spark, arrow_frame(spark, rows), batch_id, carry=carry, whole=whole)

    def write_statement(self, spark, forwarded, batch_id: int, carry: tuple[str, ...] = (),
                        whole: bool = False) -> None:
        """The statement around the call, over the rows the call forwarded in this batch (a
        Spark frame), written as the batch's output files; the columns ``carry`` names are kept
        in its rows (added to a select list without ``*``). ``whole``: the rows are the whole
        output (the final table), which replaces the earlier batches' files."""
        out_view = f"{self.placeholder}_{batch_id}"
        forwarded.createOrReplaceTempView(out_view)
        try:
            rows = run_statement(spark, to_sql(outer_over(self.outer, self.placeholder, out_view, carry)))
            check_columns(self.checkpoint, self.output, [(f.name, f.dataType.simpleString()) for f in rows.schema.fields])
            self.sink.write_frame(rows, batch_id, kind="base" if whole else "batch")
        finally:
            spark.catalog.dropTempView(out_view)

    def recorded(self, name: str, batch_id: int):
        """The value the last batch before ``batch_id`` recorded under ``name``; None before any."""
        return recorded_in(self.state, name, batch_id)

    def record(self, name: str, batch_id: int, value) -> None:
        """Record ``value`` under ``name`` for this batch."""
        record_in(self.state, name, batch_id, value)


class FramesRun:
    """The ``foreachBatch`` function of a statement that keeps no state, where Spark's own file
    sink does not write the output (a Delta table): each micro-batch's rows are the batch's
    output, written and committed as a keyed run's are (:class:`BatchOutput`)."""

    def __init__(self, checkpoint: Folder, output: Folder, output_format: str):
        self.checkpoint, self.output = checkpoint, output
        self.sink = batch_output(output, checkpoint, output_format)
        self.last: BatchReport | None = None  # how the last micro-batch went

    def __call__(self, batch, batch_id: int) -> None:
        def write():
            check_columns(self.checkpoint, self.output, [(f.name, f.dataType.simpleString())
                                                         for f in batch.schema.fields])
            self.sink.write_frame(batch, batch_id)

        self.last = BatchReport(batch_id)
        with timed(self.last.steps):
            self.sink.around(batch.sparkSession, batch_id, write)


def outer_over(outer: exp.Expression, name: str, view: str, carry: Sequence[str] = ()) -> exp.Expression:
    """The statement around a call (``outer``, where the table ``name`` stands for the call's
    rows) over the rows of ``view``; the columns ``carry`` names are kept in its rows (added to
    a select list without ``*``)."""
    outer = outer.copy()
    for table in [t for t in outer.find_all(exp.Table) if t.name == name]:
        table.set("this", exp.to_identifier(view))
        if not table.args.get("alias"):  # columns qualified by the name still resolve
            table.set("alias", exp.TableAlias(this=exp.to_identifier(name)))
        if carry and not any(isinstance(e, exp.Star) for e in outer.expressions):
            outer.select(*[exp.column(c, table=table.alias) for c in carry], copy=False)
    return outer


def recorded_in(folder: Folder, name: str, batch_id: int):
    """The value the last batch before ``batch_id`` recorded under ``name`` in ``folder`` (a
    file per batch, so a replayed batch reads what it read before); None before any."""
    found = sorted(n for n in _numbered(folder, name) if n < batch_id)
    return pickle.loads((folder / f"{name}-{found[-1]}").read_bytes()) if found else None


def record_in(folder: Folder, name: str, batch_id: int, value) -> None:
    """Record ``value`` under ``name`` for this batch; the records no replay reads go."""
    (folder / f"{name}-{batch_id}").write_bytes(pickle.dumps(value))
    for number in _numbered(folder, name):  # a replay of this batch reads the one before it
        if number < batch_id - 1:
            (folder / f"{name}-{number}").delete()


def _numbered(folder: Folder, name: str) -> list[int]:
    """The numbers ``n`` of the files ``<name>-<n>`` in ``folder``."""
    prefix = name + "-"
    return [int(e.name[len(prefix):]) for e in folder.entries()
            if not e.is_dir and e.name.startswith(prefix) and e.name[len(prefix):].isdigit()]


def instant(value):
    """A value read on either path as one kind of value: Spark's collect gives a TIMESTAMP as a
    naive local datetime, Arrow as an aware one in UTC; both become aware, in UTC (a value
    recorded by one path is compared with values the other reads)."""
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc)
    return value


def arrow_frame(spark, rows: pa.Table, schema=None):
    """A Spark frame of Arrow data on the driver. The rows go over as one record batch:
    PySpark 4.3 makes an empty frame of a table whose first two batches are empty."""
    return spark.createDataFrame(rows.combine_chunks(), schema=schema)


def spark_columns(schema: pa.Schema) -> list[tuple[str, str]]:
    from pyspark.sql.pandas.types import from_arrow_schema

    return [(f.name, f.dataType.simpleString()) for f in from_arrow_schema(schema).fields]


def spark_schema(schema: pa.Schema):
    """The Spark columns of Arrow ones."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


def arrow_schema(spark_schema) -> pa.Schema:
    """The Arrow form of Spark columns, as sqlext writes and reads them (timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema, timezone="UTC")


def output_file(name: str) -> tuple[str, int] | None:
    """What an output file written by a run is, by its name: (``base`` or ``batch``, batch id)."""
    parts = name.split("-")
    if len(parts) >= 3 and parts[0] in ("base", "batch") and parts[1].isdigit():
        return parts[0], int(parts[1])
    return None


def _output_files(folder: Folder) -> list[tuple[str, int, str]]:
    """The output's files written by runs: (``base`` or ``batch``, batch id, name)."""
    return [(*output_file(e.name), e.name) for e in folder.entries() if output_file(e.name) is not None]


def batch_files(folder: Folder, batch_id: int) -> list[str]:
    """The names of the files that hold a folder's rows before batch ``batch_id``: the newest
    ``base`` written by an earlier batch, and the ``batch`` files of the batches after it."""
    numbered = _output_files(folder)
    base = max((n for kind, n, _ in numbered if kind == "base" and n < batch_id), default=-1)
    return sorted(name for kind, n, name in numbered
                  if (kind == "base" and n == base) or (kind == "batch" and base < n < batch_id))


def forget_batch_files(folder: Folder, batch_id: int) -> None:
    """Delete the files older than the ones batch ``batch_id`` reads: once it runs, the batches
    before it are committed and will not be replayed."""
    numbered = _output_files(folder)
    keep = set(batch_files(folder, batch_id))
    oldest = min((n for _, n, name in numbered if name in keep), default=None)
    for _, n, name in numbered if oldest is not None else []:
        if name not in keep and n < oldest:
            (folder / name).delete()


# a batch's output files before it commits, in the output folder (readers skip names starting with '_')
OUTPUT_PENDING = "_sqlext_pending-"
# in a batch's pending folder: the batch commits, and moving its files into place is under way
COMMITTING = "_committing"


def batch_output(output: Folder, checkpoint: Folder, output_format: str) -> "BatchOutput":
    """The output of a run's batches: a folder of files of ``output_format``, or a Delta table."""
    if output_format == "delta":
        return DeltaBatchOutput(output, checkpoint)
    return BatchOutput(output, checkpoint, output_format)


class BatchOutput:
    """A run's output folder, whose files of a batch appear when the batch commits.

    Readers that do not know Spark's records of a folder (pandas, pyarrow, DuckDB, Polars) read
    every file whose name does not start with ``_`` or ``.``. A batch writes its files into
    ``_sqlext_pending-<batch>`` (:meth:`pending`), and :meth:`commit`, the last step of the
    batch (after its state is committed, so that what a reader sees never runs ahead of the
    state; Spark records the batch once the function returns), moves them into the folder: a
    rename each, the ``base`` of a final table first and then the older files deleted. A batch
    that fails, or is killed, before that leaves nothing a reader sees, and its redo writes its
    files again. The move is recorded first in the pending folder (:data:`COMMITTING`), so that
    the redo of a batch killed while moving finishes that move (:meth:`begin`), and last in the
    checkpoint (:data:`OUTPUT_COMMITTED`), so that the redo of a batch whose files were moved in
    (killed before Spark recorded it) moves none of its own: it computes the same rows again
    with its state, and drops them."""

    def __init__(self, folder: Folder, checkpoint: Folder, file_format: str):
        self.folder, self.checkpoint, self.file_format = folder, checkpoint, file_format

    def pending(self, batch_id: int) -> Folder:
        return self.folder / f"{OUTPUT_PENDING}{batch_id}"

    def around(self, spark, batch_id: int, work) -> None:
        """``work()``, the batch, with its output committed after it; a batch that fails leaves
        its pending files behind it no longer."""
        self.begin(spark, batch_id)
        try:
            work()
        except BaseException:
            self.abandon(batch_id)
            raise
        with step("commit the output"):
            self.commit(batch_id)

    def committed_through(self, spark) -> int:
        """The id of the last batch whose files were committed (-1: none)."""
        return int(((self.checkpoint / OUTPUT_COMMITTED).read_json() or {}).get("batch", -1))

    def begin(self, spark, batch_id: int) -> None:
        """Before the batch: what an earlier attempt of it left is finished (a move under way)
        or taken away (files written that never committed)."""
        pending = self.pending(batch_id)
        if (pending / COMMITTING).exists():
            self._move_in(pending, batch_id)
        else:
            pending.delete()

    def abandon(self, batch_id: int) -> None:
        try:
            self.pending(batch_id).delete()
        except Exception:  # noqa: BLE001 - the batch's own error is the one to report; the next attempt clears it
            pass

    # -- the batch's files

    def write_arrow(self, rows: pa.Table, batch_id: int, kind: str = "batch") -> None:
        """A batch's rows as one Parquet file ``<kind>-<id>-part-00000.parquet``, written straight
        from the driver. An empty ``base`` is still written: it replaces the whole table with no
        rows."""
        if rows.num_rows == 0 and kind != "base":
            return
        (self.pending(batch_id) / f"{kind}-{batch_id:010d}-part-00000.parquet").write_parquet(rows)

    def write_table(self, spark, rows: pa.Table, batch_id: int, schema=None) -> None:
        """A batch's rows made on the driver (Arrow data), written as they are where the output
        is Parquet, else by Spark's writer (in the Spark columns ``schema``, where given)."""
        if self.file_format == "parquet":
            self.write_arrow(rows, batch_id)
        else:
            self.write_frame(arrow_frame(spark, rows, schema), batch_id)

    def write_frame(self, frame, batch_id: int, kind: str = "batch") -> None:
        """A batch's rows (a Spark frame) as the files ``<kind>-<id>-*`` that Spark writes."""
        pending = self.pending(batch_id)
        written = pending / "_spark"
        frame.write.mode("overwrite").format(self.file_format).save(written.uri)
        for part in written.files(suffix=""):
            part.rename_to(pending / f"{kind}-{batch_id:010d}-{part.name}")
        written.delete()

    def add_parts(self, parts: list[Folder], batch_id: int) -> None:
        """Parquet files that tasks wrote (one per bucket) as the batch's files."""
        for part in sorted(parts, key=lambda p: p.name):
            part.rename_to(self.pending(batch_id) / f"batch-{batch_id:010d}-{part.name}")

    # -- the commit

    def commit(self, batch_id: int) -> None:
        """The batch's files moved into the folder (none again where an earlier attempt did)."""
        pending = self.pending(batch_id)
        last = (self.checkpoint / OUTPUT_COMMITTED).read_json() or {}
        if last.get("batch", -1) >= batch_id:
            pending.delete()
            return
        if not last and committed_any(self.checkpoint):  # files an earlier sqlext left in place for this batch
            own = (f"batch-{batch_id:010d}-", f"base-{batch_id:010d}-")
            for entry in self.folder.entries():
                if not entry.is_dir and entry.name.startswith(own):
                    (self.folder / entry.name).delete()
        names = {e.name for e in pending.entries() if not e.is_dir and not e.name.startswith(("_", "."))}
        if names:
            self._refuse_taken(names, batch_id)
            (pending / COMMITTING).write_bytes(b"")
        self._move_in(pending, batch_id)

    def _refuse_taken(self, names: set[str], batch_id: int) -> None:
        """Refuse to move a batch's file onto a file of the same name: that is a file of an earlier
        run (of another checkpoint: :func:`~sqlext.streaming.checkpoint.claim` refuses an output
        that holds one), and replacing it would lose its rows. Nothing is moved."""
        taken = self._taken(names)
        if taken:
            raise SqlextError("STREAM_OUTPUT_IN_USE", function=FUNCTION, output=self.folder,
                              why=f"already holds {', '.join(taken[:3])}, which no earlier batch of this checkpoint "
                                  f"committed, and batch {batch_id} would replace it with a file of the same name",
                              fix=f"Name a new output folder for this checkpoint, or {START_OVER}.")

    def _taken(self, names: set[str]) -> list[str]:
        """Those of ``names`` that are files of the folder already."""
        return sorted(e.name for e in self.folder.entries() if not e.is_dir and e.name in names)

    def _move_in(self, pending: Folder, batch_id: int) -> None:
        names = [e.name for e in pending.entries() if not e.is_dir and not e.name.startswith(("_", "."))]
        for name in sorted(names):
            (pending / name).rename_to(self.folder / name)
        if any(name.startswith("base-") for name in names):  # the final table: the older files go
            forget_batch_files(self.folder, batch_id + 1)
        (self.checkpoint / OUTPUT_COMMITTED).write_json({"batch": batch_id})
        pending.delete()


class DeltaBatchOutput(BatchOutput):
    """A run's output as a Delta table (:class:`sqlext.delta.DeltaOutput`): a batch's files are
    written as for a folder, moved into the table's folder, where a Delta reader does not see
    them, and added by one commit, which records the batch (an application transaction of the
    checkpoint), so a redo adds nothing a commit already added. ``emit => 'final'`` replaces
    the table's files in that one commit."""

    def __init__(self, folder: Folder, checkpoint: Folder):
        from sqlext.delta import DeltaOutput

        super().__init__(folder, checkpoint, "parquet")
        self.table = DeltaOutput(folder, FUNCTION)

    def committed_through(self, spark) -> int:
        self.table.locate(spark)
        done = self.table.committed(self.app_id)[1]
        return -1 if done is None else int(done)

    def begin(self, spark, batch_id: int) -> None:
        self.table.locate(spark)
        self.spark = spark
        self.pending(batch_id).delete()  # a commit is one step: an earlier attempt left nothing to finish

    def write_frame(self, frame, batch_id: int, kind: str = "batch") -> None:
        """As Spark writes them, with timestamps as Delta keeps them (microseconds, not INT96)."""
        conf = self.spark.conf
        key = "spark.sql.parquet.outputTimestampType"
        before = conf.get(key, None)
        conf.set(key, "TIMESTAMP_MICROS")
        try:
            super().write_frame(frame, batch_id, kind)
        finally:
            conf.unset(key) if before is None else conf.set(key, before)

    @property
    def app_id(self) -> str:
        """The checkpoint's application id in the table's log: the id Spark gave the checkpoint
        when it was made, so that a new checkpoint (starting over) is another application."""
        return f"sqlext-{identity(self.checkpoint) or self.checkpoint.uri}"

    def _taken(self, names: set[str]) -> list[str]:
        """Those of ``names`` that are files of the table (its log names them); a file of the
        folder that no commit added (a move whose commit was killed) is this batch's own."""
        taken = super()._taken(names)
        return sorted(set(taken) & set(self.table.files())) if taken else []

    def commit(self, batch_id: int) -> None:
        pending = self.pending(batch_id)
        made, done = self.table.committed(self.app_id)
        entries = [e for e in pending.entries() if not e.is_dir and not e.name.startswith(("_", "."))]
        columns = output_columns(self.checkpoint)
        if (done is not None and done >= batch_id) or columns is None:  # committed, or nothing was ever written
            pending.delete()
            return
        whole = any(e.name.startswith("base-") for e in entries)
        if made and not entries:  # no rows: no commit (the first batch makes the table, rows or none)
            pending.delete()
            return
        self._refuse_taken({e.name for e in entries}, batch_id)
        files = []
        for entry in sorted(entries, key=lambda e: e.name):
            (pending / entry.name).rename_to(self.folder / entry.name)
            files.append((entry.name, entry.size, entry.mtime_ns // 1_000_000,
                          (self.folder / entry.name).parquet_rows()))
        schema = pa.schema([f.with_nullable(True) for f in arrow_schema(columns)])
        self.table.commit(files, schema, self.app_id, batch_id, overwrite=whole)
        pending.delete()

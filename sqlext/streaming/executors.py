"""A batch's buckets as Spark tasks (each ``op``/``operator`` below a
:class:`~sqlext.streaming.engine.KeyedOperator`): the rows of a batch routed to the buckets of the
operators' states (:func:`routed`), each bucket's step run in a task of its own with its share
of the state (:class:`RoutedTasks`, or :class:`FileTasks` where the tasks read the batch's files
themselves), and what the tasks report back gathered on the driver."""

from __future__ import annotations

import pickle
import time
import warnings
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqlext.errors import SqlextError
from sqlext.functions.arguments import quote
from sqlext.storage import Folder, parquet_slices
from sqlext.streaming.run import step, timed, arrow_schema
from sqlext.streaming.layer_cache import LAYERS
from sqlext.streaming.state import KeyedState
from sqlext.streaming.task_memory import task_memory

BUCKET = "__sx_bucket"
EVERY = -1  # a row every bucket's task must see
TO_BUCKET = "-to-"  # in the name of a part an upstream task wrote for one bucket of its reader


def for_bucket(files: list, bucket: int) -> list:
    """The parts of ``files`` bucket ``bucket``'s task reads: those written for it (an
    operator that splits its output, :attr:`~sqlext.streaming.engine.KeyedOperator.split`) and
    those written for every bucket."""
    mine = f"{TO_BUCKET}{bucket:05d}.parquet"
    return [f for f in files if TO_BUCKET not in f.name or f.name.endswith(mine)]


def routed(operator, frame, batch_id: int, pending: Folder, summary_schema, cache_bytes: int):
    """The tasks over rows Spark routes: an Arrow function of the routing columns alone gives
    each row its bucket (:data:`EVERY` becomes one copy per bucket), the rows are shuffled by
    bucket, and each partition's task runs the buckets it holds."""
    from pyspark.sql import functions as F

    bucket = bucket_column(operator.route, operator.route_columns())
    everywhere = F.sequence(F.lit(0), F.lit(operator.buckets - 1))
    tagged = frame.withColumn(BUCKET, F.explode(F.when(bucket == EVERY, everywhere).otherwise(F.array(bucket))))
    task = RoutedTasks(operator, batch_id, pending, arrow_schema(frame.schema), cache_bytes)
    return tagged.repartition(operator.buckets, BUCKET).mapInArrow(task, summary_schema)


def bucket_column(buckets_of, columns: list[str]):
    """A Spark column: each row's bucket, computed in Python workers by ``buckets_of`` (an Arrow
    table of ``columns`` to a bucket per row) from those columns alone."""
    from pyspark.sql import functions as F
    from pyspark.sql.functions import arrow_udf
    from pyspark.sql.types import IntegerType
    from pyspark.util import PythonEvalType

    with warnings.catch_warnings():  # the kind is given: Spark would rather read it from type hints
        warnings.simplefilter("ignore", UserWarning)
        udf = arrow_udf(_Router(buckets_of, columns), IntegerType(), PythonEvalType.SQL_SCALAR_ARROW_UDF)
    return udf(*[F.col(quote(c)) for c in columns])


class _Router:
    """The Arrow function that gives each row its bucket from its routing columns (Spark ships
    only those to Python)."""

    def __init__(self, buckets_of, columns: list[str]):
        self.buckets_of, self.columns = buckets_of, columns

    def __call__(self, *arrays: pa.Array) -> pa.Array:
        table = pa.table(list(arrays), names=self.columns)
        return pa.array(self.buckets_of(table).astype(np.int32), pa.int32())


def by_bucket(batches, schema: pa.Schema):
    """A task's rows (Arrow batches with a :data:`BUCKET` column), a bucket at a time in bucket
    order: ``(bucket, rows)``, the rows without that column and as ``schema``."""
    batches = list(batches)
    if not batches:
        return
    table = pa.Table.from_batches(batches)
    for bucket in sorted(pc.unique(table[BUCKET]).to_pylist()):
        yield int(bucket), table.filter(pc.equal(table[BUCKET], bucket)).drop_columns([BUCKET]).cast(schema)


def carried_input(upstream, operator) -> str | None:
    """The input of ``operator`` that ``upstream``'s tasks can hand over in memory (see
    :meth:`Pipeline._chains`), or None."""
    names = [name for name, source in operator.inputs.items() if source.upstream is upstream]
    if len(names) != 1:
        return None
    theirs, ours = operator.routed_by(names[0]), upstream.forwarded_by()
    if theirs is None or ours is None:
        return None
    (state, columns), (upstream_state, upstream_columns) = theirs, ours

    def key_types(s: KeyedState):
        return [s.arrow_schema.field(k).type for k in s.bucket_by]

    same = columns == upstream_columns and state.buckets == upstream_state.buckets \
        and key_types(state) == key_types(upstream_state) \
        and all(c in upstream.output_arrow.names for c in columns)
    return names[0] if same else None


@dataclass
class Stage:
    """One operator in a Spark job's tasks: where its tasks put what they write, the files of
    each input they read (and, in a batch applied in parts, the part's rows of them: ``where``),
    the input they take in memory from the operator before (``carried``), and whether its
    forwarded rows are written (``kept``) or handed on."""

    operator: object  # the KeyedOperator
    pending: Folder
    files: dict | None
    carried: str | None = None
    kept: bool = True
    where: dict | None = None  # an input's rows its tasks take (an Arrow expression over its files' rows)


def _run_bucket(op, batch_id: int, pending: Folder, bucket: int, rows, started: float,
                steps: dict[str, float], kept: bool = True, hand: bool = False) -> tuple[dict, pa.Table | None]:
    """One bucket's task: the operator's step over the bucket's rows and its bucket of the
    states; the state layers written, not committed, and the forwarded rows written (or, not
    ``kept``, only returned for the next operator). Returns what the driver needs to commit them
    (with ``steps``, the task's step times), and the forwarded rows."""
    views = {name: state.before(batch_id, only=None if name in op.shared else bucket)
             for name, state in op.states.items()}
    taken = op.taken(rows)
    result = op.step(rows, views, batch_id)
    forwarded = op.forwarded(result.out)  # a key's rows are all in its bucket
    out = None
    if kept and forwarded is not None and forwarded.num_rows:
        if op.split is None:
            out = f"part-{bucket:05d}.parquet"
            (pending / out).write_parquet(forwarded)
        else:  # a file per bucket of the reader, each read by that bucket's task alone
            target = op.split(forwarded)
            out = []
            for reader in np.unique(target).tolist():
                name = f"part-{bucket:05d}{TO_BUCKET}{int(reader):05d}.parquet"
                (pending / name).write_parquet(forwarded.filter(pa.array(target == reader)))
                out.append(name)
    handed = []
    for name in op.hands if hand else ():  # the input's rows as taken in, for the later step of this bucket
        schema = op.inputs[name].schema
        table = op.handed(rows, name)
        if table.num_rows:
            handed.append(f"hand-{name}-{bucket:05d}{TO_BUCKET}{bucket:05d}.parquet")
            (pending / handed[-1]).write_parquet(
                pa.Table.from_arrays([table[f.name].cast(f.type) for f in schema], schema=schema))
    written = {}
    for name, delta in result.deltas.items():
        view = views[name] if name not in op.shared else views[name].owned(bucket)
        written[name] = op.states[name].write(view, delta, batch_id, keep=op.keep(name), commit=False)
    steps["the task"] = time.perf_counter() - started
    return {"bucket": bucket, "out": out, "pending": written, "facts": result.facts, "steps": dict(steps),
            "taken": taken, "handed": handed}, forwarded


def _summary_row(summary: dict) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([pickle.dumps(summary)], pa.binary())], names=["summary"])


class RoutedTasks:
    """The tasks over the rows Spark routed (``mapInArrow`` after the shuffle by bucket): each
    runs the buckets its partition holds. ``cache_bytes``: the state layers its Python worker
    keeps between tasks (a share of the task's memory budget)."""

    def __init__(self, operator, batch_id: int, pending: Folder, schema: pa.Schema, cache_bytes: int):
        self.operator, self.batch_id, self.pending, self.schema = operator, batch_id, pending, schema
        self.cache_bytes = cache_bytes

    def __call__(self, batches):
        LAYERS.keep_within(self.cache_bytes)
        with task_memory():
            started = time.perf_counter()
            for bucket, mine in by_bucket(batches, self.schema):
                with timed({}) as steps:
                    summary, _ = _run_bucket(self.operator, self.batch_id, self.pending, bucket,
                                             self.operator.rows_of(mine), started, steps)
                started = time.perf_counter()
                yield _summary_row(summary)


class FileTasks:
    """The tasks that read their operators' input files themselves (``mapInArrow`` over the
    bucket numbers): for each bucket it is given, a task runs the operators of its chain in
    turn (:meth:`Pipeline._chains`), each reading its files once and taking the rows the one
    before forwarded from memory."""

    def __init__(self, stages: list[Stage], batch_id: int, cache_bytes: int):
        self.stages, self.batch_id, self.cache_bytes = stages, batch_id, cache_bytes

    def __call__(self, batches):
        LAYERS.keep_within(self.cache_bytes)
        with task_memory():
            for batch in batches:
                for bucket in batch.column(0).to_pylist():
                    carried = None
                    for number, stage in enumerate(self.stages):
                        started = time.perf_counter()
                        with timed({}) as steps:
                            with step("read the increment"):
                                mine = self._rows_of_bucket(stage, int(bucket), carried)
                            summary, carried = _run_bucket(stage.operator, self.batch_id, stage.pending,
                                                           int(bucket), mine, started, steps, kept=stage.kept,
                                                           hand=True)
                        yield _summary_row({**summary, "stage": number})

    @staticmethod
    def _rows_of_bucket(stage: Stage, bucket: int, carried: pa.Table | None):
        """The rows bucket ``bucket`` sees, the files read a slice at a time (each slice turned
        into the operator's rows, the bucket's share kept), so that a task holds its share of
        a long history, not all of it; and the rows the operator before forwarded, all of them
        this bucket's."""
        op = stage.operator
        empty = {name: op.inputs[name].schema.empty_table() for name in op.inputs}
        parts = [op.of_bucket(op.rows_from(None, {**empty, name: chunk}), bucket)
                 for name, files in stage.files.items()
                 for chunk in parquet_slices(for_bucket(files, bucket), op.inputs[name].schema,
                                             where=(stage.where or {}).get(name))]
        if stage.carried is not None:
            schema = op.inputs[stage.carried].schema
            table = schema.empty_table() if carried is None else \
                pa.Table.from_arrays([carried[f.name].cast(f.type) for f in schema], schema=schema)
            rows = op.rows_from(None, {**empty, stage.carried: table})
            mine = op.of_bucket(rows, bucket)
            if row_count(mine) != row_count(rows):  # the chain's rule broken: never leave rows out
                raise SqlextError("INTERNAL_ERROR", function=op.function,
                                  reason=f"bucket {bucket}'s task was handed rows of another bucket by the function "
                                         "before it (nothing of the run was committed)")
            parts.append(mine)
        if not parts:
            return op.of_bucket(op.rows_from(None, empty), bucket)
        return concatenated(parts)


def row_count(rows) -> int:
    """The rows of an operator's form (an Arrow table, or a tuple of them)."""
    return sum(row_count(part) for part in rows) if isinstance(rows, tuple) else rows.num_rows



def concatenated(parts: list):
    """Rows of an operator's form (an Arrow table, or a tuple of them) put together."""
    if isinstance(parts[0], tuple):
        return tuple(concatenated([part[i] for part in parts]) for i in range(len(parts[0])))
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

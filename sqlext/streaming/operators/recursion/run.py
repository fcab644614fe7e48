"""The ``foreachBatch`` function of an incremental recursion: its state, and each batch's one
step (:mod:`sqlext.streaming.operators.recursion.steps`) placed on the driver or in Spark."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import BooleanType, LongType, StructField, StructType

from sqlext.functions.changes import CHANGE_TYPE
from sqlext.streaming.operators.recursion import steps
from sqlext.streaming.operators.recursion.columns import COUNT, FOUND, FUNCTION
from sqlext.streaming.operators.recursion.compiled import compiled
from sqlext.streaming.operators.recursion.driver import DriverPlace
from sqlext.streaming.operators.recursion.in_spark import SparkPlace
from sqlext.streaming.operators.recursion.shape import RecursionShape
from sqlext.streaming.run import StatefulRun, arrow_schema, on_driver, step
from sqlext.streaming.shapes import stream_order
from sqlext.streaming.source_files import batch_rows
from sqlext.streaming.state import KeyedState

# the largest increment (Spark's estimate) a graph walk takes on the driver
WALK_BYTES = 256 * 1024 * 1024


class RecursionRun(StatefulRun):
    """The ``foreachBatch`` function of one incremental recursion.

    The state is two :class:`~sqlext.streaming.state.KeyedState`, each keyed by whole rows:
    the edges (each with its count: inserts less deletes) and the rows found so far (each with
    whether it is still found, so that a row no longer reached is a delta, not a rewrite)."""

    def __init__(self, shape: RecursionShape, checkpoint: str, output: str, output_format: str, spark, edge_schema,
                 folder=None):
        """``folder``: the stream's Parquet folder, if it reads one (its batches' files are then
        read without Spark)."""
        super().__init__(None, shape.main, shape.name, checkpoint, output, output_format, FUNCTION, ())
        self.source_folder = folder
        self.shape = shape
        # the ordering column of the change rows (the stream's order_by, or its shape's default)
        order = stream_order(shape.stream.this)
        self.order_by = next((f.name for f in edge_schema.fields if f.name.lower() == order.lower()), order)
        self.edge_columns = [f.name for f in edge_schema.fields if f.name not in (CHANGE_TYPE, self.order_by)]
        fields = {f.name: f for f in edge_schema.fields}
        self.edges = KeyedState(self.state / "edges", self.edge_columns)
        self.edges.record_schema(StructType([fields[c] for c in self.edge_columns]
                                            + [StructField(COUNT, LongType(), True)]))
        self.row_schema, self.walk_plan = compiled(spark, shape, StructType([fields[c] for c in self.edge_columns]))
        self.columns = self.row_schema.names
        self.found = KeyedState(self.state / "result", self.columns)
        self.found.record_schema(StructType(list(self.row_schema.fields) + [StructField(FOUND, BooleanType(), True)]))
        self._views: list[str] = []

    def run(self, batch, batch_id: int) -> None:
        """The batch's step (edges that only arrive, or a change feed of edges) at the place
        :meth:`_walks_in_memory` picks."""
        self._views = []
        one_step = steps.changes if CHANGE_TYPE in batch.columns else steps.arrivals
        try:
            if self._walks_in_memory(batch, batch_id):
                one_step(self.shape, DriverPlace(self, batch, batch_id))
            else:
                with step("spark"):
                    one_step(self.shape, SparkPlace(self, batch, batch_id))
        finally:
            for name in self._views:
                batch.sparkSession.catalog.dropTempView(name)

    def _walks_in_memory(self, batch, batch_id: int) -> bool:
        """Whether this batch walks the graph on the driver, over Arrow data: where the step is
        a walk, the increment is at most :data:`WALK_BYTES` (Spark's estimate; a first run over
        a long history included: one walk over Arrow data costs less than Spark's recursion)
        and the state fits the driver's cache; else the recursion runs in Spark."""
        return self.walk_plan is not None and on_driver(batch, WALK_BYTES, state_bytes=lambda: (
            self.found.before(batch_id).stored_bytes() + self.edges.before(batch_id).stored_bytes()))

    def increment(self, batch, batch_id: int) -> pa.Table:
        """The batch's rows as Arrow data (read from the stream's files where it has them)."""
        return batch_rows(batch, batch_id, self.checkpoint, self.source_folder, arrow_schema(batch.schema))

    def view(self, frame, role: str) -> str:
        """A temporary view of ``frame`` for this batch's SQL, dropped when the batch ends."""
        name = f"__sx_rec_{role}_{len(self._views)}"
        frame.createOrReplaceTempView(name)
        self._views.append(name)
        return name

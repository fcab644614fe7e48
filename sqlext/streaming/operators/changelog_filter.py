"""Incremental CHANGELOG_FILTER, one micro-batch at a time (``foreachBatch``).

The state (:class:`~sqlext.streaming.state.KeyedState`, by the call's key) holds each key's
last applied change: its row, ordering value, whether it leaves a row and whether that row
passes the predicate. A micro-batch's step (:meth:`FilterOperator.step`, the same wherever
the engine runs it: :mod:`sqlext.streaming.engine`):

1. takes its changes (without ``update_preimage`` rows), each with the predicate's value
   computed by Spark, and the state of the keys they touch;
2. applies each key's changes from its state, as the batch function applies them from no
   row, column-wise (:func:`sqlext.udfs.changelog_filter.filter_increment`): a late change
   (ordering value not above the key's last) is dropped when ``sequence_by`` says it is stale,
   and otherwise stops the run with ``[LATE_CHANGE]``;
3. gives what the changes forward (written through the statement as the batch's output files,
   which a replay replaces) and the touched keys' new state.

``emit => 'final'`` rewrites the output as the whole filtered table (the state's passing rows).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
from sqlglot import exp

from sqlext.functions.arguments import quote
from sqlext.functions.changelog_filter import FUNCTION, PASS_COLUMN, FilterSpec, filter_spec, not_boolean
from sqlext.functions.changes import CHANGE_TYPE, PREIMAGE, check_order_type
from sqlext.streaming.arrow_sql import arrow_expression, evaluate
from sqlext.streaming.engine import Input, KeyedOperator, Step
from sqlext.streaming.run import arrow_schema, step, arrow_frame
from sqlext.streaming.state import KeyedState
from sqlext.udfs.changelog_filter import filter_increment

PRESENT = "__sx_present"
PASSED = "__sx_passed"


class FilterOperator(KeyedOperator):
    """One incremental CHANGELOG_FILTER: its state and its step."""

    function = FUNCTION

    def __init__(self, spec: FilterSpec, call: exp.Table, folder, source: Input, buckets: int = 1):
        super().__init__(folder, call)
        from pyspark.sql.types import BooleanType, StringType, StructField, StructType

        self.spec, self.emit = spec, spec.emit
        self.inputs = {"input": source}
        self.keyed = KeyedState(folder / "rows", spec.shape.key)
        fields = {f.name: f for f in source.spark_schema.fields}
        shape = spec.shape
        self.keyed.record_schema(StructType(
            [fields[c] for c in (*shape.data_columns, shape.order_by)]
            + [StructField(PASSED, BooleanType(), True), StructField(PRESENT, BooleanType(), True)]), buckets)
        self.states = {"rows": self.keyed}
        output = StructType([StructField(CHANGE_TYPE, StringType(), True) if c == CHANGE_TYPE else fields[c]
                             for c in spec.output_columns])
        self.output_arrow = arrow_schema(output)
        self.order_by = self.spec.shape.order_by
        self.output_key = list(shape.key)

        # the predicate over Arrow data where its result is Spark's by construction (no Spark job)
        self.predicate = arrow_expression(spec.predicate, source.schema, boolean=True)

    @classmethod
    def build(cls, spark, table: exp.Table, literals: dict, inputs: dict, folder, buckets: int, feed: bool):
        """The operator of a call, its arguments checked against its input's columns (Spark's
        analysis over no rows); ``feed``: its table feeds an aggregate, so it runs as its change feed."""
        source = spark.createDataFrame([], inputs["input"].spark_schema)
        spec = filter_spec(literals, source.columns)
        spec = replace(spec, shape=replace(spec.shape, repeats=inputs["input"].repeats))
        check_order_type(spec.shape, source.schema[spec.shape.order_by].dataType.simpleString())
        checked_predicate(source, spec)
        return cls(replace(spec, emit="changes") if feed else spec, table, folder, inputs["input"], buckets)

    def input_order(self, name: str) -> str | None:
        return self.spec.shape.order_by

    def prepare(self, frames: dict):
        """The changes without preimages, each with the predicate's value (computed by Spark)."""
        from pyspark.sql import functions as F

        changes = frames["input"]
        if self.spec.shape.has_change_type:
            changes = changes.where(F.col(CHANGE_TYPE).isNull() | (F.col(CHANGE_TYPE) != F.lit(PREIMAGE)))
        return changes.withColumn(PASS_COLUMN, F.coalesce(F.expr(self.spec.predicate), F.lit(False)))

    @property
    def arrow_ready(self) -> bool:
        return self.predicate is not None

    def rows_from(self, spark, tables: dict):
        """The changes without preimages with the predicate's value: computed over Arrow data
        where it can be (:mod:`sqlext.streaming.arrow_sql`), else by Spark (one job)."""
        import pyarrow.compute as pc

        rows = tables["input"]
        if self.predicate is None:
            return self.prepare({"input": arrow_frame(spark, rows)}).toArrow()
        if self.spec.shape.has_change_type:
            kinds = rows[CHANGE_TYPE]
            rows = rows.filter(pc.or_kleene(pc.is_null(kinds), pc.not_equal(kinds, PREIMAGE)))
        passes = evaluate(rows, {PASS_COLUMN: self.predicate})[PASS_COLUMN]
        return rows.append_column(PASS_COLUMN, pc.fill_null(passes, False))

    def route_columns(self) -> list[str]:
        return list(self.spec.shape.key)

    def route(self, table: pa.Table) -> np.ndarray:
        return self.keyed.bucket_of(table)

    def routed_by(self, name: str):
        return self.keyed, list(self.keyed.bucket_by)

    def forwarded_by(self):
        return self.keyed, list(self.keyed.bucket_by)  # a forwarded row keeps its key's columns

    def step(self, rows: pa.Table, views, batch_id: int) -> Step:
        """The changes applied to the touched keys' state: the rows they forward and the keys'
        new state rows."""
        spec, keys = self.spec, list(self.spec.shape.key)
        with step("look up the state"):
            touched = rows.select(keys).group_by(keys, use_threads=False).aggregate([]) \
                .cast(pa.schema([self.keyed.arrow_schema.field(k) for k in keys]))
            before = views["rows"].rows(keys=touched)
        with step("apply the changes"):
            out, state = filter_increment(spec, rows, before, PASSED, PRESENT)
        return Step(None if spec.emit == "final" else out.cast(self.output_arrow), {"rows": state})

    def final(self, spark, batch_id: int, on_driver: bool):
        """The whole filtered table after this batch: the state's passing rows (read on the
        driver, or by Spark where the batch ran on the executors)."""
        import pyarrow.compute as pc

        view = self.keyed.before(batch_id + 1)
        columns = list(self.spec.shape.data_columns)
        if on_driver:
            rows = view.rows()
            return rows.filter(pc.fill_null(rows[PASSED], False)).select(columns)
        from pyspark.sql import functions as F

        return view.frame(spark).where(F.col(PASSED)).select(*[F.col(quote(c)) for c in columns])


def checked_predicate(source, spec: FilterSpec):
    """The predicate as a column of ``source``; EXPRESSION_TYPE_MISMATCH unless it is boolean."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    predicate = F.expr(spec.predicate)
    actual = source.select(predicate.alias("p")).schema["p"].dataType
    if not isinstance(actual, BooleanType):
        raise not_boolean(spec.predicate, actual.simpleString())
    return predicate

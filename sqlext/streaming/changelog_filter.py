"""Incremental CHANGELOG_FILTER on the 'tables' engine, one micro-batch at a time
(``foreachBatch``).

The state (:class:`~sqlext.streaming.state.KeyedState`, by the call's key) holds each key's
last applied change: its row, ordering value, whether it leaves a row and whether that row
passes the predicate. A micro-batch:

1. takes its changes (without ``update_preimage`` rows), each with the predicate's value
   computed by Spark, and the state of the keys they touch;
2. applies each key's changes from its state, as the batch function applies them from no
   row: a late change (ordering value not above the key's last) is dropped when
   ``sequence_by`` says it is stale, and otherwise stops the run with ``[LATE_CHANGE]``;
3. writes what the changes forward through the statement as the batch's output files (a
   replay replaces them), then the touched keys' new state.

Small batches run on the driver over Arrow data with the function's reference logic
(:mod:`sqlext.udfs.changelog_filter`); large ones in Spark, where each touched key's state row
is put in front of its new changes as an insert and the batch function (the native rewrite)
runs over that, the replayed rows' own output dropped. ``emit => 'final'`` rewrites the
output as the whole filtered table (the state's passing rows).
"""

from __future__ import annotations

import pyarrow as pa
from sqlglot import exp

from sqlext.catalog.arguments import quote

from sqlext.catalog.changelog_filter import ARGUMENTS, FUNCTION, PASS_COLUMN, FilterSpec
from sqlext.catalog.changes import CHANGE_TYPE, DELETE, INSERT, PREIMAGE, SETS_VALUE, changes_by_key
from sqlext.streaming.run import LAST, STEPS, TableStateRun, arrow_schema, late_refusal, on_driver, step
from sqlext.streaming.state import KeyedState, key_match

PRESENT = "__sx_present"
PASSED = "__sx_passed"


class TableStateFilter(TableStateRun):
    """The ``foreachBatch`` function of one incremental CHANGELOG_FILTER."""

    def __init__(self, spec: FilterSpec, call: exp.Table, outer: exp.Expression, placeholder: str,
                 checkpoint: str, output: str, output_format: str, input_schema):
        super().__init__(call, outer, placeholder, checkpoint, output, output_format, FUNCTION, ARGUMENTS)
        from pyspark.sql.types import BooleanType, StringType, StructField, StructType

        self.spec, self.input_schema = spec, input_schema
        self.keyed = KeyedState(self.state / "rows", spec.shape.key)
        fields = {f.name: f for f in input_schema.fields}
        shape = spec.shape
        self.keyed.record_schema(StructType(
            [fields[c] for c in (*shape.data_columns, shape.order_by)]
            + [StructField(PASSED, BooleanType(), True), StructField(PRESENT, BooleanType(), True)]))
        output = StructType([StructField(CHANGE_TYPE, StringType(), True) if c == CHANGE_TYPE else fields[c]
                             for c in spec.output_columns])
        self.output_arrow = arrow_schema(output)

    def __call__(self, batch, batch_id: int) -> None:
        from pyspark.sql import functions as F

        shape = self.spec.shape
        changes = batch
        if shape.has_change_type:
            changes = changes.where(F.col(CHANGE_TYPE).isNull() | (F.col(CHANGE_TYPE) != F.lit(PREIMAGE)))
        changes = changes.withColumn(PASS_COLUMN, F.coalesce(F.expr(self.spec.predicate), F.lit(False)))
        view = self.keyed.before(batch_id)
        STEPS.clear()
        if on_driver(batch):
            self._on_driver(batch.sparkSession, changes, view, batch_id)
        else:
            with step("spark"):
                self._in_spark(batch.sparkSession, changes.drop(PASS_COLUMN), view, batch_id)

    # -- small batches: the reference logic over Arrow data on the driver

    def _on_driver(self, spark, changes, view, batch_id: int) -> None:
        from sqlext.udfs.changelog_filter import filter_increment

        spec, shape = self.spec, self.spec.shape
        keys = list(shape.key)
        with step("collect the increment"):
            rows = changes.toArrow()
        with step("look up the state"):
            touched = rows.select(keys).group_by(keys, use_threads=False).aggregate([]) \
                .cast(pa.schema([self.keyed.arrow_schema.field(k) for k in keys]))
            before = view.rows(keys=touched)
        with step("apply the changes"):
            result = filter_increment(spec, rows, before, PASSED, PRESENT)
            if result is None:  # sequence_by: key by key
                out, state = self._apply(rows, before)
            else:
                out, state = result
        if spec.emit != "final":
            with step("write the output"):
                self.write_rows(spark, out.cast(self.output_arrow), batch_id)
        with step("write the state"):
            self.keyed.write(view, state, batch_id)
        if spec.emit == "final":
            with step("write the final table"):
                self._write_final(spark, batch_id)

    def _apply(self, rows: pa.Table, before: pa.Table):
        """The increment applied key by key with the reference logic: its forwarded rows and
        the changed keys' new state rows (for ``sequence_by``, which drops stale changes)."""
        from sqlext.udfs.changelog_filter import apply_increment

        spec, shape = self.spec, self.spec.shape
        grouped = changes_by_key(shape, rows.to_pylist())
        prior = {tuple(row[k] for k in shape.key): row for row in before.to_pylist()}
        out: list[dict] = []
        state: list[dict] = []
        for key, key_changes in grouped.items():
            old_row = prior.get(key)
            old, passed, last = (None, False, None) if old_row is None else \
                ({c: old_row[c] for c in (*shape.data_columns, shape.order_by)}, old_row[PASSED],
                 old_row[shape.order_by])
            after = apply_increment(spec, key_changes, old, passed, last, out)
            if after is not None:
                row, passes = after
                state.append({**{c: row[c] for c in (*shape.data_columns, shape.order_by)},
                              PASSED: passes, PRESENT: _present(shape, row)})
        return (pa.Table.from_pylist(out, schema=self.output_arrow),
                pa.Table.from_pylist(state, schema=self.keyed.arrow_schema))

    def _write_final(self, spark, batch_id: int) -> None:
        """The whole filtered table after this batch: the state's passing rows."""
        import pyarrow.compute as pc

        rows = self.keyed.before(batch_id + 1).rows()
        rows = rows.filter(pc.fill_null(rows[PASSED], False)).select(list(self.spec.shape.data_columns))
        self.write_rows(spark, rows.cast(self.output_arrow), batch_id, whole=True)

    # -- large batches: the batch function over the touched keys' state and the new changes

    def _in_spark(self, spark, changes, view, batch_id: int) -> None:
        from pyspark.sql import functions as F

        shape, keys = self.spec.shape, list(self.spec.shape.key)
        synthetic = None
        if view.empty:
            feed = changes
        else:
            state = view.frame(spark)
            if self.spec.emit != "final":
                touched = F.broadcast(changes.select(*[F.col(quote(k)) for k in keys]).distinct())
                state = state.join(touched, key_match(state, touched, keys), "left_semi")
            old = state.localCheckpoint()
            synthetic = as_changes(old, shape, changes.columns)
            feed = synthetic.unionByName(self._in_order(changes, old)).localCheckpoint()
        with self.called(spark, {"input": feed}) as forwarded:
            if self.spec.emit == "final":
                self.write_statement(spark, forwarded, batch_id, whole=True)
            else:
                if synthetic is not None:
                    forwarded = forwarded.join(synthetic.select(*keys, shape.order_by),
                                               key_match(forwarded, synthetic, keys + [shape.order_by]), "left_anti")
                self.write_statement(spark, forwarded, batch_id)
        if synthetic is not None and self.spec.emit == "final":  # the state changes for the touched keys only
            touched = F.broadcast(changes.select(*[F.col(quote(k)) for k in keys]).distinct())
            feed = feed.join(touched, key_match(feed, touched, keys), "left_semi")
        self.keyed.write(view, self._last_changes(feed), batch_id)

    def _last_changes(self, feed):
        """Each touched key's last applied change (with ``sequence_by``, a stale change is not
        applied), with whether it leaves a row and passes: a window over the batch's rows only."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        shape, keys = self.spec.shape, list(self.spec.shape.key)
        if shape.sequence_by is not None:
            earlier = Window.partitionBy(*[F.col(quote(k)) for k in keys]).orderBy(F.col(shape.order_by)) \
                .rowsBetween(Window.unboundedPreceding, -1)
            newest = F.max(F.col(shape.sequence_by)).over(earlier)
            feed = feed.withColumn("__sx_newest", newest) \
                .where(F.col("__sx_newest").isNull() | (F.col(shape.sequence_by) >= F.col("__sx_newest"))) \
                .drop("__sx_newest")
        last = Window.partitionBy(*[F.col(quote(k)) for k in keys]).orderBy(F.col(shape.order_by).desc())
        present = present_column(shape)
        return feed.withColumn("__sx_rank", F.row_number().over(last)).where(F.col("__sx_rank") == 1) \
            .withColumn(PRESENT, present) \
            .withColumn(PASSED, present & F.coalesce(F.expr(self.spec.predicate), F.lit(False))) \
            .select(*[F.col(quote(c)) for c in (*shape.data_columns, shape.order_by)], PASSED, PRESENT)

    def _in_order(self, changes, old):
        """The new changes without the stale ones; a late change that is not stale stops the
        batch with ``[LATE_CHANGE]`` when the plan reaches it (Spark's ``raise_error``)."""
        from pyspark.sql import functions as F

        shape, keys = self.spec.shape, list(self.spec.shape.key)
        o = old.select(*[F.col(quote(k)).alias(f"__sx_k{i}") for i, k in enumerate(keys)],
                       F.col(shape.order_by).alias(LAST),
                       *([F.col(shape.sequence_by).alias("__sx_seq")] if shape.sequence_by else []))
        match = None
        for i, k in enumerate(keys):
            term = F.col(quote(k)).eqNullSafe(F.col(f"__sx_k{i}"))
            match = term if match is None else match & term
        joined = changes.join(F.broadcast(o), match, "left")
        late = F.col(LAST).isNotNull() & (F.col(shape.order_by) <= F.col(LAST))
        stale = F.lit(False)
        if shape.sequence_by:
            stale = late & F.col(shape.sequence_by).isNotNull() & (F.col(shape.sequence_by) < F.col("__sx_seq"))
        refuse = late_refusal(late & ~stale, FUNCTION, shape, changes.schema)
        return joined.where(refuse & ~stale).select(*[F.col(quote(c)) for c in changes.columns])


def _present(shape, row: dict) -> bool:
    """Whether a change leaves its key with a row."""
    if shape.has_change_type:
        return row[CHANGE_TYPE] in SETS_VALUE
    return any(row[c] is not None for c in shape.tombstone_columns)


def present_column(shape):
    """:func:`_present` as a Spark column."""
    from pyspark.sql import functions as F

    if shape.has_change_type:
        return F.col(CHANGE_TYPE).isin(*SETS_VALUE)
    present = F.lit(False)
    for column in shape.tombstone_columns:
        present = present | F.col(f"`{column}`").isNotNull()
    return present


def as_changes(state, shape, columns):
    """A state's rows as the changes that leave them, at their own ordering values: a present
    row as an insert. With ``sequence_by``, an absent row is replayed too (as a delete, or the
    tombstone an upsert log holds), so that a later change older than it is ignored as the
    batch function ignores it."""
    from pyspark.sql import functions as F

    rows = state if shape.sequence_by is not None else state.where(F.col(PRESENT))
    if shape.has_change_type:
        rows = rows.withColumn(CHANGE_TYPE, F.when(F.col(PRESENT), F.lit(INSERT)).otherwise(F.lit(DELETE)))
    return rows.select(*[F.col(quote(c)) for c in columns])

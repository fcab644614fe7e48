"""CHANGELOG_FILTER run incrementally on Spark Structured Streaming.

A batch run replays every key's changes from the first one ever recorded. An incremental run
keeps, per key, the row the key holds after the changes already processed (and whether it
passed the predicate) in Spark's state store, and replays only the new changes from there:
the rows it forwards are exactly those the batch run forwards for the same changes, so the
outputs of the runs, concatenated, are the batch output over the whole input.

Spark evaluates the predicate natively (a column of the input); Python sees each key's new
changes, through ``transformWithState`` grouped by the key (the state store's RocksDB
provider), and hands them to the same per-key logic as the batch reference
(:func:`sqlext.udfs.changelog_filter.apply_changes`).

A change whose ordering value is not above the last one a previous run applied to its key
cannot be applied in order any more: with ``sequence_by`` it is ignored when its sequence
value is not above the key's latest one (the versioned-table rule); otherwise the micro-batch
fails with ``[LATE_CHANGE]`` and nothing of it is written.
"""

from __future__ import annotations

from typing import Iterator

from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BooleanType, StringType, StructField, StructType

from sqlext.catalog.changelog_filter import FUNCTION, PASS_COLUMN, FilterSpec, check_incremental, not_boolean
from sqlext.catalog.changes import CHANGE_TYPE, PREIMAGE, changes_by_key, check_order_type
from sqlext.udfs.changelog_filter import apply_increment

PASSED = "__sx_passed"  # in the state: whether the key's row passed the predicate
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def filter_stream(source, spec: FilterSpec):
    """The incremental CHANGELOG_FILTER over the streaming DataFrame ``source`` (change rows
    with the columns ``spec`` was checked against): a streaming DataFrame in append mode."""
    check_incremental(spec)
    shape = spec.shape
    check_order_type(shape, source.schema[shape.order_by].dataType.simpleString())
    predicate = checked_predicate(source, spec)
    rows = source
    if shape.has_change_type:  # preimages carry nothing the filter needs
        rows = rows.where(F.col(CHANGE_TYPE).isNull() | (F.col(CHANGE_TYPE) != F.lit(PREIMAGE)))
    rows = rows.withColumn(PASS_COLUMN, F.coalesce(predicate, F.lit(False)))
    by_name = {field.name: field for field in source.schema.fields}
    state = StructType([by_name[c] for c in shape.data_columns]
                       + [by_name[shape.order_by], StructField(PASSED, BooleanType())])
    output = StructType([StructField(CHANGE_TYPE, StringType()) if c == CHANGE_TYPE else by_name[c]
                         for c in spec.output_columns])
    processor = ChangelogFilterProcessor(spec, state.json(), list(spec.output_columns))
    return rows.groupBy(*[F.col(k) for k in shape.key]).transformWithState(
        processor, output, outputMode="Append", timeMode="None")


def checked_predicate(source, spec: FilterSpec):
    """The predicate as a column of ``source``; EXPRESSION_TYPE_MISMATCH unless it is boolean."""
    predicate = F.expr(spec.predicate)
    actual = source.select(predicate.alias("p")).schema["p"].dataType
    if not isinstance(actual, BooleanType):
        raise not_boolean(spec.predicate, actual.simpleString())
    return predicate


class ChangelogFilterProcessor(StatefulProcessor):
    """Per key: the state is the key's row after the applied changes, its ordering value and
    whether it passed; each micro-batch applies the key's new changes from there."""

    def __init__(self, spec: FilterSpec, state_json: str, output_columns: list[str]):
        self.spec = spec
        self.state_json = state_json
        self.output_columns = output_columns

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.last = handle.getValueState("last", StructType.fromJson(_json(self.state_json)))

    def handleInputRows(self, key, rows, timerValues=None) -> Iterator[Row]:
        spec, shape = self.spec, self.spec.shape
        changes = next(iter(changes_by_key(shape, [row.asDict() for row in rows]).values()), [])
        old, passed, last_order = None, False, None
        if self.last.exists():
            values = self.last.get()
            old = dict(zip(shape.data_columns, values))
            last_order, passed = values[len(shape.data_columns)], values[len(shape.data_columns) + 1]
        out: list[dict] = []
        after = apply_increment(spec, changes, old, passed, last_order, out)
        if after is None:
            return
        old, passed = after
        self.last.update(tuple(old[c] for c in shape.data_columns) + (old[shape.order_by], passed))
        for row in out:
            yield Row(**{c: row[c] for c in self.output_columns})

    def close(self) -> None:
        pass


def _json(text: str):
    import json

    return json.loads(text)

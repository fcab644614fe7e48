"""Incremental FK_JOIN, one micro-batch at a time.

Both inputs arrive in one stream (each row in the column of its side, the left rows with their
foreign key computed). The state is KIP-213's two stores, each a
:class:`~sqlext.streaming.state.KeyedState`: the left rows by left key, each with its foreign
key (looked up by foreign key, the left state is the subscription store), and the right rows by
right key. Each holds the key's last applied change, present or not. A micro-batch's step
(:meth:`FkJoinOperator.step`, the same wherever the engine runs it:
:mod:`sqlext.streaming.engine`):

1. finds the rows its changes can meet: the left rows of the changed left keys and of the left
   keys subscribed to a changed right key, and the right rows of every foreign key those left
   rows (old or new) point at and of the changed right keys: one probe of each state;
2. computes what the new changes forward over those rows, column-wise over Arrow data
   (:func:`sqlext.udfs.fk_join.join_increment`: for ``changes``, each affected left key's
   result row before and after each version that touches it; for ``records``, each change's
   records from the rows as of its moment; with ``sequence_by``, stale changes left out first);
3. gives the forwarded rows (written through the statement as the batch's output files, which a
   replay replaces) and the changed keys' last rows in both states; the engine records the
   highest ordering value processed.

On the executors each task owns a bucket of left keys: it gets the left changes of its keys and
every right change, reads its bucket of the left state and the right state wherever the foreign
keys point, and writes its bucket of both states (the right rows of the keys that hash to it).

One order runs across both inputs, and a change of either input can meet any row of the other,
so every new change must be above the highest ordering value an earlier run processed; one
that is not stops the run with ``[LATE_CHANGE]`` and nothing written, unless ``sequence_by``
says it is stale (older than its key's row), in which case it is ignored as the batch
function ignores it. ``emit => 'final'`` rewrites the output as the join of the two states'
present rows.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from sqlext.errors import SqlextError
from sqlext.functions.arguments import quote
from sqlext.functions.changes import CHANGE_TYPE, check_order_type
from sqlext.functions.fk_join import FUNCTION, FkJoinSpec, fk_join_spec
from sqlext.language.dialect import INTEGRAL, parse_one
from sqlext.streaming.engine import Input, KeyedOperator, Step
from sqlext.streaming.executors import EVERY
from sqlext.streaming.operators.changelog_filter import PRESENT
from sqlext.streaming.run import arrow_schema, instant, step
from sqlext.streaming.state import KeyedState
from sqlext.udfs.fk_join import join_increment

LEFT, RIGHT = "__sx_left", "__sx_right"
FOREIGN_KEY = "__sx_fk"


def one_stream(left, right, foreign_key: str):
    """Both inputs' streams as one: a row holds its change in the column of its side, and a
    left row its foreign key. (Few calls into Spark: each costs an analysis of the plan, paid by
    every run.)"""
    from pyspark.sql import functions as F

    everything = F.expr("struct(*)")
    left_part = left.select(everything.alias(LEFT), F.lit(None).cast(right.schema).alias(RIGHT),
                            F.expr(foreign_key).alias(FOREIGN_KEY))
    fk_type = left_part.schema[FOREIGN_KEY].dataType
    return left_part.union(right.select(F.lit(None).cast(left.schema).alias(LEFT), everything.alias(RIGHT),
                                        F.lit(None).cast(fk_type).alias(FOREIGN_KEY)))


class FkJoinOperator(KeyedOperator):
    """One incremental FK_JOIN: its two states and its step."""

    function = FUNCTION
    shared = frozenset({"right"})  # a task reads the right rows wherever its foreign keys point

    def __init__(self, spec: FkJoinSpec, call: exp.Table, folder, left: Input, right: Input, foreign_field,
                 buckets: int = 1):
        """``foreign_field``: the Spark column the foreign key expression gives over the left rows."""
        super().__init__(folder, call)
        from pyspark.sql.types import BooleanType, StringType, StructField, StructType

        self.spec, self.emit = spec, spec.emit
        self.inputs = {"left": left, "right": right}
        self.foreign_column = _plain_column(spec.foreign_key, left.schema.names)
        self.foreign_type = arrow_schema(StructType([foreign_field])).field(0).type
        left_fields = {f.name: f for f in left.spark_schema.fields}
        right_fields = {f.name: f for f in right.spark_schema.fields}
        present = StructField(PRESENT, BooleanType(), True)
        self.left = KeyedState(folder / "left", spec.left.key)
        self.left.record_schema(StructType(
            [left_fields[c] for c in (*spec.left.data_columns, spec.left.order_by)]
            + [StructField(FOREIGN_KEY, foreign_field.dataType, True), present]), buckets)
        self.right = KeyedState(folder / "right", spec.right.key)
        self.right.record_schema(StructType(
            [right_fields[c] for c in (*spec.right.data_columns, spec.right.order_by)] + [present]),
            self.left.buckets)
        self.states = {"left": self.left, "right": self.right}
        names = spec.right_names
        output = [left_fields[c] for c in spec.left.data_columns]
        output += [StructField(names[c], right_fields[c].dataType, True) for c in spec.right.data_columns]
        if spec.emit != "final":
            output += [StructField(CHANGE_TYPE, StringType(), True), left_fields[spec.left.order_by]]
        self.output_arrow = arrow_schema(StructType(output))
        self.order_by = self.spec.left.order_by
        self.output_key = list(spec.left.key)
        self.highest = None

    @classmethod
    def build(cls, spark, table: exp.Table, literals: dict, inputs: dict, folder, buckets: int, feed: bool):
        """The operator of a call, its arguments checked against its inputs' columns (Spark's
        analysis over no rows); ``feed``: its table feeds an aggregate, so it runs as its change feed."""
        from pyspark.sql import functions as F

        empty = {name: spark.createDataFrame([], source.spark_schema) for name, source in inputs.items()}
        spec = fk_join_spec(literals, empty["left"].columns, empty["right"].columns)
        spec = replace(spec, left=replace(spec.left, repeats=inputs["left"].repeats),
                       right=replace(spec.right, repeats=inputs["right"].repeats))
        for side, shape in (("left", spec.left), ("right", spec.right)):
            check_order_type(shape, empty[side].schema[shape.order_by].dataType.simpleString())
        foreign_field = empty["left"].select(F.expr(spec.foreign_key).alias(FOREIGN_KEY)).schema.fields[0]
        _check_key_types(spec, foreign_field.dataType, empty["right"].schema[spec.right_key].dataType)
        return cls(replace(spec, emit="changes") if feed else spec, table, folder, inputs["left"], inputs["right"],
                   foreign_field, buckets)

    def input_order(self, name: str) -> str | None:
        return {"left": self.spec.left.order_by, "right": self.spec.right.order_by}.get(name)

    def begin(self, batch_id: int) -> None:
        self.highest = instant(self.recorded("highest", batch_id))  # the highest ordering value processed

    def finish(self, batch_id: int, facts: dict) -> None:
        newest = facts.get("newest")
        self.record("highest", batch_id, max([v for v in (self.highest, newest) if v is not None], default=None))

    # -- the increment

    def prepare(self, frames: dict):
        """Both inputs' changes as one frame (see :func:`one_stream`), the foreign key computed."""
        return one_stream(frames["left"], frames["right"], self.spec.foreign_key)

    def rows_of(self, table: pa.Table):
        return _side(table, LEFT, extra=FOREIGN_KEY), _side(table, RIGHT)

    @property
    def arrow_ready(self) -> bool:
        return self.foreign_column is not None  # the foreign key is a column: no Spark to compute it

    def rows_from(self, spark, tables: dict):
        left, right = tables["left"], tables["right"]
        if self.foreign_column is not None:
            foreign_key = left[self.foreign_column].cast(self.foreign_type, safe=False)
        else:  # an expression: Spark computes it
            from pyspark.sql import functions as F

            from sqlext.streaming.run import arrow_frame

            foreign_key = arrow_frame(spark, left).select(F.expr(self.spec.foreign_key).alias(FOREIGN_KEY)) \
                .toArrow()[FOREIGN_KEY].cast(self.foreign_type)
        return left.append_column(FOREIGN_KEY, foreign_key), right

    def of_bucket(self, rows, bucket: int):
        """A task's rows: the left changes of its keys, and every right change."""
        left, right = rows
        return left.filter(pa.array(self.left.bucket_of(left) == bucket)), right

    def route_columns(self) -> list[str]:
        return [LEFT]

    def route(self, table: pa.Table) -> np.ndarray:
        """A left change goes to the bucket of its key; a right change to every bucket (any
        left row may point at it)."""
        is_left = np.asarray(pc.is_valid(table[LEFT]), dtype=bool)
        owner = np.full(table.num_rows, EVERY, dtype=np.int64)
        if is_left.any():
            left = table.filter(pa.array(is_left))[LEFT].combine_chunks()
            keys = pa.table([left.field(k) for k in self.spec.left.key], names=list(self.spec.left.key))
            owner[is_left] = self.left.bucket_of(keys)
        return owner

    def routed_by(self, name: str):
        return (self.left, list(self.left.bucket_by)) if name == "left" else None

    def forwarded_by(self):
        return self.left, list(self.left.bucket_by)  # a result row keeps its left key's columns

    # -- the step

    def step(self, rows, views, batch_id: int) -> Step:
        """The changes of both inputs over the state rows they meet: the rows they forward and
        the changed keys' last rows in both states."""
        spec = self.spec
        left_rows, right_rows = rows
        newest = _highest_of(left_rows, spec.left.order_by, right_rows, spec.right.order_by)
        with step("look up the state"):
            met_left, met_right = self._met(views["left"], views["right"], left_rows, right_rows)
        with step("join the changes"):
            out, left_last, right_last = join_increment(spec, FOREIGN_KEY, PRESENT, left_rows, right_rows, met_left,
                                                        met_right, self.highest, self.output_arrow)
        return Step(None if spec.emit == "final" else out, {"left": left_last, "right": right_last},
                    {"newest": instant(newest)})

    def _met(self, left_view, right_view, left_rows: pa.Table, right_rows: pa.Table):
        """The state rows the increment's changes can meet: the left rows of the changed left
        keys and of those subscribed to a changed right key; the right rows of every foreign key
        those rows and the new ones point at, and of the changed right keys."""
        spec = self.spec
        keys = list(spec.left.key)
        changed_left = left_rows.select(keys).group_by(keys, use_threads=False).aggregate([]) \
            .cast(pa.schema([self.left.arrow_schema.field(k) for k in keys]))
        changed_right = pc.unique(right_rows[spec.right_key].combine_chunks()) \
            .cast(self.right.arrow_schema.field(spec.right_key).type)
        met_left = _unique(pa.concat_tables([left_view.rows(keys=changed_left),
                                             left_view.rows(column=FOREIGN_KEY, values=changed_right)]), keys)
        foreign_keys = [c.combine_chunks().cast(changed_right.type, safe=False)
                        for c in (met_left[FOREIGN_KEY], left_rows[FOREIGN_KEY])]
        pointed = pc.unique(pa.concat_arrays(foreign_keys + [changed_right]).drop_null())
        return met_left, right_view.rows(column=spec.right_key, values=pointed)

    # -- the final table

    def final(self, spark, batch_id: int, on_driver: bool):
        """The join of the two states' present rows after this batch: the final result table
        (joined by Spark, on the driver's placement too)."""
        from pyspark.sql import functions as F

        spec = self.spec
        left = self.left.before(batch_id + 1).frame(spark).where(F.col(PRESENT)).alias("l")
        right = self.right.before(batch_id + 1).frame(spark).where(F.col(PRESENT)).alias("r")
        how = "left" if spec.join_type == "left" else "inner"
        joined = left.join(right, F.col("l." + FOREIGN_KEY) == F.col("r." + quote(spec.right_key)), how)
        names = spec.right_names
        table = joined.select(*[F.col("l." + quote(c)).alias(c) for c in spec.left.data_columns],
                              *[F.col("r." + quote(c)).alias(names[c]) for c in spec.right.data_columns])
        return table


def _key_kind(data_type) -> str:
    """How a key type compares: integers with integers, text with text; any other type only
    with itself."""
    name = data_type.simpleString()
    if name in INTEGRAL:
        return "integer"
    if name == "string" or name.startswith(("varchar", "char")):
        return "string"
    return name


def _check_key_types(spec, foreign, right) -> None:
    """An incremental run matches foreign keys with right keys by value, as they are: types
    that Spark would compare only through an implicit cast (a string foreign key and an integer
    key) are refused before any run, with the cast that makes them one type."""
    if _key_kind(foreign) == _key_kind(right):
        return
    raise SqlextError(
        "UNSUPPORTED_STREAM", function=FUNCTION,
        what=f"a foreign key of type {foreign.simpleString()} against the right key "
             f"{spec.right_key} of type {right.simpleString()}",
        reason="an incremental run matches foreign keys with right keys as they are, and these compare only "
               "through a cast Spark would add in a batch query",
        fix=f"Cast the foreign key to the right key's type in the call, for example foreign_key => "
            f"'CAST({spec.foreign_key} AS {right.simpleString().upper()})'.")


def _plain_column(expression: str, columns) -> str | None:
    """The column an expression names, if it is just a column of ``columns`` (resolved as
    Spark resolves names, ignoring case)."""
    try:
        tree = parse_one(expression)
    except Exception:  # noqa: BLE001 - sqlglot fails in several ways on text it cannot read
        return None
    if not isinstance(tree, exp.Column) or tree.table:
        return None
    matches = [c for c in columns if c == tree.name] or [c for c in columns if c.lower() == tree.name.lower()]
    return matches[0] if len(matches) == 1 else None


def _side(rows: pa.Table, column: str, extra: str | None = None) -> pa.Table:
    """One input's rows of the batch, as a flat table (with ``extra`` beside its columns)."""
    chosen = rows.filter(pc.is_valid(rows[column]))
    struct = chosen[column].combine_chunks()
    names = [struct.type.field(i).name for i in range(struct.type.num_fields)]
    table = pa.table(struct.flatten(), names=names) if chosen.num_rows else \
        pa.schema([struct.type.field(i) for i in range(struct.type.num_fields)]).empty_table()
    if extra is not None:
        table = table.append_column(extra, chosen[extra])
    return table


def _highest_of(left: pa.Table, left_order: str, right: pa.Table, right_order: str):
    values = [pc.max(t[c]).as_py() for t, c in ((left, left_order), (right, right_order)) if t.num_rows]
    values = [v for v in values if v is not None]
    return max(values) if values else None


def _unique(rows: pa.Table, keys) -> pa.Table:
    """One row per key (rows found twice are equal)."""
    if rows.num_rows == 0:
        return rows
    indices = rows.append_column("__sx_row", pa.array(np.arange(rows.num_rows, dtype=np.int64))) \
        .group_by(list(keys), use_threads=False).aggregate([("__sx_row", "min")])["__sx_row_min"]
    return rows.take(indices)

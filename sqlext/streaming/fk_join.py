"""Incremental FK_JOIN with its state in tables (the 'tables' engine), one micro-batch at a
time, every step a native Spark plan.

Both inputs arrive in one stream (each row in the column of its side). The state is each
left key's last change (with its foreign key computed) and each right key's last change, kept
as layers like CHANGELOG_FILTER's (a base and deltas, see :mod:`sqlext.streaming.tables`). The
left state, looked up by foreign key, is KIP-213's subscription store. A micro-batch:

1. finds the rows the new changes can meet: the left rows of the changed left keys and the
   left rows subscribed to a changed right key; the right rows of the changed right keys and
   of every foreign key those left rows (old or new) point at;
2. puts those rows, as inserts at their own ordering values, in front of the new changes and
   runs the batch FK_JOIN (the native rewrite) over that. Replaying each key's last row
   rebuilds exactly the join's state for those keys, so what the new changes forward is what
   the batch run over the whole history forwards for them; the rows the replayed inserts
   forward (at ordering values an earlier run processed) are dropped;
3. writes the statement's rows as the batch's output files (a replay replaces them) and
   the changed keys' last rows as the batch's state deltas.

One order runs across both inputs, and a change of either input can meet any row of the
other, so every new change must be above the highest ordering value an earlier run
processed; one that is not stops the run with ``[LATE_CHANGE]`` and nothing written.
"""

from __future__ import annotations

from sqlglot import exp

from sqlext.catalog.arguments import quote
from sqlext.catalog.fk_join import ARGUMENTS, FUNCTION, FkJoinSpec
from sqlext.streaming.tables import (
    LAST, PRESENT, Before, Layers, TableStateRun, as_inserts, key_match, last_changes, newest_layer, refuse_late,
    state_schema, without_preimages,
)

LEFT, RIGHT = "__sx_left", "__sx_right"
FOREIGN_KEY = "__sx_fk"


def one_stream(left, right):
    """Both inputs' streams as one: a row holds its change in the column of its side."""
    from pyspark.sql import functions as F

    return left.select(F.struct(*[F.col(quote(c)) for c in left.columns]).alias(LEFT),
                       F.lit(None).cast(right.schema).alias(RIGHT)) \
        .unionByName(right.select(F.lit(None).cast(left.schema).alias(LEFT),
                                  F.struct(*[F.col(quote(c)) for c in right.columns]).alias(RIGHT)))


class TableStateFkJoin(TableStateRun):
    """The ``foreachBatch`` function of one incremental FK_JOIN."""

    def __init__(self, spec: FkJoinSpec, call: exp.Table, outer: exp.Expression, placeholder: str,
                 checkpoint: str, output: str, output_format: str):
        super().__init__(call, outer, placeholder, checkpoint, output, output_format, FUNCTION, ARGUMENTS)
        self.spec = spec
        self.left_layers, self.right_layers = Layers(self.state / "left"), Layers(self.state / "right")

    def __call__(self, batch, batch_id: int) -> None:
        from pyspark.sql import functions as F

        spark, spec = batch.sparkSession, self.spec
        left_shape, right_shape = spec.left, spec.right
        new_left = without_preimages(batch.where(F.col(LEFT).isNotNull()).select(f"{LEFT}.*"), left_shape)
        new_right = without_preimages(batch.where(F.col(RIGHT).isNotNull()).select(f"{RIGHT}.*"), right_shape)
        left_before, right_before = self.left_layers.before(batch_id), self.right_layers.before(batch_id)
        foreign_key = F.expr(spec.foreign_key)
        if left_before.base is None:
            feed_left, feed_right, highest = new_left, new_right, None
        else:
            left_state = left_before.read(spark, self._left_schema(new_left))
            right_state = right_before.read(spark, state_schema(right_shape, new_right.schema))
            highest = self._highest(batch_id, left_state, right_state)
            if spec.emit == "final":  # every key's row: the whole table after this batch
                old_left = newest_layer(left_state, list(left_shape.key), left_before).where(F.col(PRESENT))
                old_right = newest_layer(right_state, [spec.right_key], right_before).where(F.col(PRESENT))
            else:
                old_left, old_right = self._met_rows(left_state, right_state, left_before, right_before,
                                                     new_left, new_right, foreign_key)
            feed_left = as_inserts(old_left, left_shape, new_left.columns) \
                .unionByName(self._in_order(new_left, left_shape, highest)).localCheckpoint()
            feed_right = as_inserts(old_right, right_shape, new_right.columns) \
                .unionByName(self._in_order(new_right, right_shape, highest)).localCheckpoint()
        with self.called(spark, {"left": feed_left, "right": feed_right}) as forwarded:
            if spec.emit == "final":
                self.write_statement(spark, forwarded, batch_id, whole=True)
            else:
                if highest is not None:  # what the replayed rows forward was forwarded by earlier runs
                    forwarded = forwarded.where(F.col(left_shape.order_by) > F.lit(highest))
                self.write_statement(spark, forwarded, batch_id)
        self.left_layers.write(spark, left_before,
                               last_changes(new_left.withColumn(FOREIGN_KEY, foreign_key), left_shape, FOREIGN_KEY),
                               list(left_shape.key), batch_id)
        self.right_layers.write(spark, right_before, last_changes(new_right, right_shape), list(right_shape.key),
                                batch_id)
        self._record_highest(batch, batch_id, highest)

    def _highest(self, batch_id: int, left_state, right_state):
        """The highest ordering value the batches before ``batch_id`` processed: recorded by
        the last of them (a file per batch, so a replayed batch reads what it read before), or,
        in a checkpoint without such a file, the highest in the state."""
        import pickle

        from pyspark.sql import functions as F

        recorded = sorted((int(p.name.split("-")[1]), p) for p in self.state.glob("highest-*")
                          if p.name.split("-")[1].isdigit() and int(p.name.split("-")[1]) < batch_id)
        if recorded:
            return pickle.loads(recorded[-1][1].read_bytes())
        return left_state.select(F.max(self.spec.left.order_by).alias("m")) \
            .unionByName(right_state.select(F.max(self.spec.right.order_by).alias("m"))) \
            .agg(F.max("m")).first()[0]

    def _record_highest(self, batch, batch_id: int, highest) -> None:
        """Record the highest ordering value processed up to this batch (see ``_highest``)."""
        import os
        import pickle

        from pyspark.sql import functions as F

        spec = self.spec
        values = batch.agg(F.max(F.col(LEFT)[spec.left.order_by]), F.max(F.col(RIGHT)[spec.right.order_by])).first()
        highest = max([v for v in (highest, *values) if v is not None], default=None)
        temporary = self.state / f"_highest-{batch_id}"
        temporary.write_bytes(pickle.dumps(highest))
        os.replace(temporary, self.state / f"highest-{batch_id}")

    def _left_schema(self, new_left):
        from pyspark.sql import functions as F
        from pyspark.sql.types import StructField

        fk_type = new_left.select(F.expr(self.spec.foreign_key).alias(FOREIGN_KEY)).schema[FOREIGN_KEY].dataType
        return state_schema(self.spec.left, new_left.schema, StructField(FOREIGN_KEY, fk_type, True))

    def _met_rows(self, left_state, right_state, left_before: Before, right_before: Before, new_left, new_right,
                  foreign_key):
        """The last rows (present or not) of the left keys the new changes can meet (changed
        keys, and keys subscribed to a changed right key) and of the right keys those left
        rows and the new left rows point at, or that changed; materialised."""
        from pyspark.sql import functions as F

        left_keys, right_key = list(self.spec.left.key), self.spec.right_key
        changed_left = F.broadcast(new_left.select(*left_keys).distinct())
        changed_right = F.broadcast(new_right.select(F.col(right_key).alias(FOREIGN_KEY)).distinct())

        def met(rows):
            by_key = rows.join(changed_left, key_match(rows, changed_left, left_keys), "left_semi")
            by_fk = rows.join(changed_right, rows[FOREIGN_KEY] == changed_right[FOREIGN_KEY], "left_semi")
            return by_key.unionByName(by_fk)

        # a key met through a foreign key of an older layer may point elsewhere now: take every
        # layer's row of the keys met in any layer (few: materialised, so the state is scanned
        # twice in all), choose each key's newest, and meet again
        candidates = F.broadcast(met(left_state).select(*left_keys).distinct().localCheckpoint())
        rows = left_state.join(candidates, key_match(left_state, candidates, left_keys), "left_semi").localCheckpoint()
        current = newest_layer(rows, left_keys, left_before).where(F.col(PRESENT))
        old_left = met(current).dropDuplicates(left_keys).localCheckpoint()
        pointed = F.broadcast(
            old_left.select(FOREIGN_KEY).unionByName(new_left.select(foreign_key.alias(FOREIGN_KEY)))
            .unionByName(changed_right).where(F.col(FOREIGN_KEY).isNotNull()).distinct())
        rows = right_state.join(pointed, right_state[right_key] == pointed[FOREIGN_KEY], "left_semi")
        old_right = newest_layer(rows, [right_key], right_before).where(F.col(PRESENT))
        return old_left, old_right.localCheckpoint()

    def _in_order(self, changes, shape, highest):
        """The new changes of one input; one at or below ``highest`` stops the batch with
        ``[LATE_CHANGE]``."""
        from pyspark.sql import functions as F

        checked = changes.withColumn(LAST, F.lit(highest))
        late = F.col(shape.order_by) <= F.col(LAST)
        return checked.where(refuse_late(late, FUNCTION, shape, checked.schema, across_inputs=True)) \
            .select(*changes.columns)

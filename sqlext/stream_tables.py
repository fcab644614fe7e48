"""Incremental CHANGELOG_FILTER with its state in tables, one micro-batch at a time
(``foreachBatch``), every step a native Spark plan.

The state is a table of each key's last change (its row, ordering value and whether the row
is present), written as one snapshot per micro-batch in ``<checkpoint>/sqlext-state/<batch>``.
A micro-batch:

1. reads the snapshot of the batch before it, for the keys the batch touches;
2. refuses a late change (ordering value not above the key's last one) as the state-store
   engine does, or drops it when ``sequence_by`` says it is stale;
3. puts each touched key's last row in front of its new changes, as an insert at its own
   ordering value, runs the batch CHANGELOG_FILTER (the native rewrite) over that, and keeps
   what the new changes forward: exactly the rows the batch run over the whole feed forwards
   for them;
4. writes those rows into the output folder as files named by the batch id, replacing any
   files of the same batch (a replayed batch writes the same rows again, never twice);
5. writes the new snapshot (the key's last applied change: with ``sequence_by`` a stale
   change is not applied); snapshots before the previous one are deleted.

Spark commits the batch in the checkpoint after the function returns, so a crash at any
point replays the batch from the same snapshot. The cost of a batch follows the batch and the
number of keys (one scan and one write of the snapshot), not the length of the history.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

from sqlglot import exp

from sqlext.catalog.changelog_filter import FUNCTION, FilterSpec
from sqlext.catalog.changes import CHANGE_TYPE, INSERT, PREIMAGE, SETS_VALUE
from sqlext.errors import SqlextError
from sqlext.rewrites.dialect import to_sql

PRESENT = "__sx_present"
_views = itertools.count(1)


class TableStateFilter:
    """The ``foreachBatch`` function of one incremental CHANGELOG_FILTER."""

    def __init__(self, spark, spec: FilterSpec, call: exp.Table, outer: exp.Expression, placeholder: str,
                 checkpoint: str, output: str, output_format: str):
        self.spark, self.spec = spark, spec
        self.call, self.outer, self.placeholder = call, outer, placeholder
        self.state = Path(checkpoint) / "sqlext-state"
        self.output, self.output_format = Path(output), output_format

    def __call__(self, batch, batch_id: int) -> None:
        from pyspark.sql import functions as F

        from sqlext.runner import run_statement

        spark, shape = batch.sparkSession, self.spec.shape  # the query's own session: its views
        keys = list(shape.key)
        changes = batch
        if shape.has_change_type:
            changes = changes.where(F.col(CHANGE_TYPE).isNull() | (F.col(CHANGE_TYPE) != F.lit(PREIMAGE)))
        changes = changes.localCheckpoint()
        self.session = spark
        prior = self._snapshot_before(batch_id)
        touched = changes.select(*keys).distinct()
        old = None
        if prior is not None:
            old = prior.join(touched, _key_match(prior, touched, keys), "left_semi").localCheckpoint()
            changes = self._in_order(changes, old)
        columns = list(changes.columns)
        synthetic = None
        if old is not None:
            present = old.where(F.col(PRESENT))
            if shape.has_change_type:
                present = present.withColumn(CHANGE_TYPE, F.lit(INSERT))
            synthetic = present.select(*columns)
        feed = changes if synthetic is None else synthetic.unionByName(changes)
        view = f"__sx_batch_feed_{next(_views)}"
        feed.createOrReplaceTempView(view)
        try:
            forwarded = run_statement(spark, to_sql(self._call_over(view)))
            if synthetic is not None:
                forwarded = forwarded.join(synthetic.select(*keys, shape.order_by),
                                           _key_match(forwarded, synthetic, keys + [shape.order_by]), "left_anti")
            out_view = f"{self.placeholder}_{batch_id}"
            forwarded.createOrReplaceTempView(out_view)
            outer = self.outer.copy()
            for table in outer.find_all(exp.Table):
                if table.name == self.placeholder:
                    table.set("this", exp.to_identifier(out_view))
            self._write_output(run_statement(spark, to_sql(outer)), batch_id)
            spark.catalog.dropTempView(out_view)
        finally:
            spark.catalog.dropTempView(view)
        self._write_snapshot(prior, feed, touched, batch_id)

    # -- the state

    def _snapshot_before(self, batch_id: int):
        done = sorted(int(p.name) for p in self.state.glob("*")
                      if p.name.isdigit() and int(p.name) < batch_id and (p / "_SUCCESS").exists())
        return self.session.read.parquet(str(self.state / str(done[-1]))) if done else None

    def _write_snapshot(self, prior, feed, touched, batch_id: int) -> None:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        shape, keys = self.spec.shape, list(self.spec.shape.key)
        if shape.has_change_type:
            present = F.col(CHANGE_TYPE).isin(*SETS_VALUE)
        else:
            present = F.lit(False)
            for column in shape.tombstone_columns:
                present = present | F.col(column).isNotNull()
        if shape.sequence_by is not None:  # the last change applied: a stale one is not
            before = Window.partitionBy(*[F.col(k) for k in keys]).orderBy(F.col(shape.order_by)) \
                .rowsBetween(Window.unboundedPreceding, -1)
            newest = F.max(F.col(shape.sequence_by)).over(before)
            feed = feed.withColumn("__sx_newest", newest) \
                .where(F.col("__sx_newest").isNull() | (F.col(shape.sequence_by) >= F.col("__sx_newest"))) \
                .drop("__sx_newest")
        last = Window.partitionBy(*[F.col(k) for k in keys]).orderBy(F.col(shape.order_by).desc())
        latest = feed.withColumn(PRESENT, present).withColumn("__sx_rank", F.row_number().over(last)) \
            .where(F.col("__sx_rank") == 1).select(*shape.data_columns, shape.order_by, PRESENT)
        snapshot = latest if prior is None else \
            prior.join(touched, _key_match(prior, touched, keys), "left_anti").unionByName(latest)
        target = self.state / str(batch_id)
        snapshot.write.mode("overwrite").parquet(str(target))
        for old in self.state.glob("*"):  # the one before stays: a replay of this batch reads it
            if old.name.isdigit() and int(old.name) < batch_id - 1:
                shutil.rmtree(old, ignore_errors=True)

    def _in_order(self, changes, old):
        """The new changes without the stale ones; a late change that is not stale stops the
        batch with ``[LATE_CHANGE]``."""
        from pyspark.sql import functions as F

        shape, keys = self.spec.shape, list(self.spec.shape.key)
        o = old.select(*[F.col(k).alias(f"__sx_k{i}") for i, k in enumerate(keys)],
                       F.col(shape.order_by).alias("__sx_last"),
                       *([F.col(shape.sequence_by).alias("__sx_seq")] if shape.sequence_by else []))
        match = None
        for i, k in enumerate(keys):
            term = F.col(k).eqNullSafe(F.col(f"__sx_k{i}"))
            match = term if match is None else match & term
        joined = changes.join(o, match, "left")
        late = F.col("__sx_last").isNotNull() & (F.col(shape.order_by) <= F.col("__sx_last"))
        stale = F.lit(False)
        if shape.sequence_by:
            stale = late & F.col(shape.sequence_by).isNotNull() & (F.col(shape.sequence_by) < F.col("__sx_seq"))
        bad = joined.where(late & ~stale).limit(1).collect()
        if bad:
            row = bad[0].asDict()
            raise SqlextError("LATE_CHANGE", function=FUNCTION, key=shape.key_text(row), order_by=shape.order_by,
                              value=repr(row[shape.order_by]), last=repr(row["__sx_last"]))
        return joined.where(~stale).select(*changes.columns)

    # -- the output

    def _call_over(self, view: str) -> exp.Expression:
        call = self.call.copy()
        for argument in call.find_all(exp.Table):
            if isinstance(argument.this, exp.Anonymous) and argument.this.name.upper() == "STREAM":
                argument.replace(exp.Table(this=exp.to_identifier(view)))
                break
        call.set("alias", None)
        return exp.select("*").from_(call)

    def _write_output(self, frame, batch_id: int) -> None:
        """The batch's rows as files ``batch-<id>-*`` in the output folder, replacing any
        files a previous attempt of the same batch left."""
        prefix = f"batch-{batch_id:010d}-"
        temporary = self.output / f"_sx_tmp-{batch_id}"
        frame.write.mode("overwrite").format(self.output_format).save(str(temporary))
        self.output.mkdir(parents=True, exist_ok=True)
        for stale in self.output.glob(prefix + "*"):
            stale.unlink()
        for part in sorted(temporary.glob("part-*")):
            part.rename(self.output / (prefix + part.name))
        shutil.rmtree(temporary, ignore_errors=True)


def _key_match(left, right, keys):
    """Equal (NULL equal to NULL) on every column of ``keys``."""
    match = None
    for k in keys:
        term = left[k].eqNullSafe(right[k])
        match = term if match is None else match & term
    return match

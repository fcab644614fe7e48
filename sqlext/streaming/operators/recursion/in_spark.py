"""One batch of an incremental recursion through Spark: the operations of the steps
(:mod:`sqlext.streaming.operators.recursion.steps`) as Spark frames over the state's layers, each
recursion one ``WITH RECURSIVE`` query (the batch recursion's paths: the graph walk where it
fits). Rows are lazy frames until an operation that reads them more than once materialises
them (``localCheckpoint``), once: a step's parts are matched and unioned before their distinct
rows are computed, so Spark narrows them first."""

from __future__ import annotations

from contextlib import nullcontext
from functools import reduce

from pyspark.sql import functions as F
from sqlglot import exp

from sqlext.functions.arguments import quote
from sqlext.functions.changes import CHANGE_TYPE, CHANGE_TYPES, DELETE, INSERT, SETS_VALUE
from sqlext.language.dialect import to_sql
from sqlext.runner import run_statement
from sqlext.streaming.operators.recursion.columns import BEFORE, COUNT, FOUND
from sqlext.streaming.operators.recursion.shape import over, refuse_absent, refuse_unknown
from sqlext.streaming.run import step

# rows to take away from what was found are matched against it by broadcasting them, up to this many
BROADCAST_ROWS = 2_000_000


class SparkPlace:
    """The steps' operations for one batch of ``run`` through Spark (see
    :class:`~sqlext.streaming.operators.recursion.steps.Place`). Rows are Spark frames, None for no
    rows where that is known without a job; the edges are frames over the state's layers.

    The state is written once the output is: the output, the rows found, then the edges."""

    def __init__(self, run, batch, batch_id: int):
        self.run, self.batch, self.batch_id = run, batch, batch_id
        self.spark, self.shape = batch.sparkSession, run.shape
        self.columns, self.edge_columns = run.columns, run.edge_columns
        self.edges_view, self.found_view = run.edges.before(batch_id), run.found.before(batch_id)
        self.found_empty = self.found_view.empty
        # the rows found so far (before this batch); None when none
        self.found = None if self.found_empty else \
            self.found_view.frame(self.spark).where(F.col(FOUND)).select(*self._row_columns())
        self.old = None if self.edges_view.empty else self.edges_view.frame(self.spark)  # with counts
        self.before = self.now = None  # views of the edges present before the batch, and after it
        self.edges_now = None  # the edges present after it, as a frame
        self.changed = None  # the edges' rows this batch writes
        self.order = [c for c in batch.columns if c == run.order_by]
        self._kept = (None, None)  # (the rows taken, the rows found less them)
        self._few = (None, None)  # (suspects, whether they are few enough to broadcast)
        self._delta = None  # the change of the rows found, written at commit
        self._materialised = []  # frames already distinct and materialised

    def _row_columns(self):
        return [F.col(quote(c)) for c in self.columns]

    def _edges(self, frame):
        return frame.select(*[F.col(quote(c)) for c in self.edge_columns])

    # -- the batch's edges and the state of the edges

    def new_edges(self):
        return self._edges(self.batch).distinct().localCheckpoint()

    def fresh(self, new_edges):
        old = None if self.old is None else self._edges(self.old.where(F.col(COUNT) > 0))
        self.before = None if old is None else self.run.view(old, "old_edges")
        self.now = self.run.view(new_edges if old is None else old.unionByName(new_edges), "edges")
        fresh = new_edges if old is None else _match(new_edges, old, "left_anti").localCheckpoint()
        self.changed = fresh.withColumn(COUNT, F.lit(1).cast("bigint"))
        return fresh

    def net_changes(self):
        batch, run = self.batch, self.run
        unknown = ~F.col(CHANGE_TYPE).isin(*CHANGE_TYPES) | F.col(CHANGE_TYPE).isNull()
        summary = batch.agg(F.max(F.col(quote(run.order_by)) if self.order else F.lit(None)), F.max(unknown)).first()
        if summary[1]:
            refuse_unknown(batch.where(unknown).first().asDict(), run.order_by, self.shape)
        sign = F.when(F.col(CHANGE_TYPE).isin(*SETS_VALUE), F.lit(1)).otherwise(F.lit(-1))
        net = batch.groupBy(*[F.col(quote(c)) for c in self.edge_columns]) \
            .agg(F.sum(sign).cast("bigint").alias(COUNT)).where(F.col(COUNT) != 0).localCheckpoint()
        return net, summary[0]

    def counted(self, net):
        columns, old = [F.col(quote(c)) for c in self.edge_columns], self.old
        touched = net.withColumn(BEFORE, F.lit(0).cast("bigint"))
        if old is not None:
            touched = touched.unionByName(_match(old, F.broadcast(net.select(*columns)), "left_semi")
                                          .withColumn(BEFORE, F.col(COUNT)).withColumn(COUNT, F.lit(0).cast("bigint")))
        touched = touched.groupBy(*columns).agg(F.sum(BEFORE).alias(BEFORE), F.sum(COUNT).alias(COUNT)) \
            .localCheckpoint()
        after = F.col(BEFORE) + F.col(COUNT)
        goes = (F.col(BEFORE) > 0) & (after <= 0)
        absent, any_removed = touched.agg(F.min(after) < 0, F.max(goes)).first()
        if absent:
            edge = touched.where(after < 0).first()
            refuse_absent({c: edge[c] for c in self.edge_columns}, edge[BEFORE] + edge[COUNT], self.shape)
        added = touched.where((F.col(BEFORE) <= 0) & (after > 0)).select(*columns)
        removed = touched.where(goes).select(*columns) if any_removed else None
        self.changed = touched.select(*columns, after.alias(COUNT))  # the touched edges' totals
        now = self.changed if old is None else \
            _match(old, self.changed.select(*columns), "left_anti").unionByName(self.changed)
        self.edges_now = now.where(F.col(COUNT) > 0).select(*columns)
        self.now = self.run.view(self.edges_now, "edges_now")
        if any_removed:
            self.before = self.run.view(old.where(F.col(COUNT) > 0).select(*columns), "old_edges")
        return added, removed

    # -- the recursion's rows

    def anchor(self, edges):
        shape = self.shape
        return run_statement(self.spark, to_sql(over(shape.anchor, shape.name, self.run.view(edges, "anchor_edges"))))

    def step(self, rows, edges):
        if rows is None:
            return None
        shape = self.shape
        return run_statement(self.spark, to_sql(over(shape.step, shape.name, self.run.view(edges, "step_edges"),
                                                     self.run.view(rows, "found"))))

    def rows(self, parts):
        """Lazy (see :meth:`_distinct`), under the recursion's column names and types."""
        rows = None
        for part in parts:
            if part is None:
                continue
            part = part.toDF(*self.columns).select(
                *[F.col(quote(f.name)).cast(f.dataType) for f in self.run.row_schema.fields])
            rows = part if rows is None else rows.unionByName(part)
        if rows is None:
            return self.spark.createDataFrame([], self.run.row_schema)
        return rows

    def _distinct(self, rows):
        """``rows``' distinct rows, materialised (once: rows it materialised before are kept)."""
        if any(rows is done for done in self._materialised):
            return rows
        rows = rows.distinct().localCheckpoint()
        self._materialised.append(rows)
        return rows

    def reach(self, seeds, before: bool = False):
        """One ``WITH RECURSIVE`` query from the seeds (computed once: the output and the state
        both read it; over a long history, the recursion is most of a run's work)."""
        shape, seeds = self.shape, self._distinct(seeds)
        step = over(shape.step, shape.name, self.before if before else self.now)
        anchor = exp.select("*").from_(exp.Table(this=exp.to_identifier(self.run.view(seeds, "seeds"))))
        cte = exp.CTE(this=exp.union(anchor, step, distinct=True),
                      alias=exp.TableAlias(this=exp.to_identifier(shape.name),
                                           columns=[exp.to_identifier(n) for n in seeds.columns]))
        statement = exp.select("*").from_(exp.Table(this=exp.to_identifier(shape.name)))
        statement.set("with_", exp.With(expressions=[cte], recursive=True))
        reached = run_statement(self.spark, to_sql(statement)).localCheckpoint()
        self._materialised.append(reached)  # under UNION each row once
        return reached

    def minus(self, rows, taken):
        if rows is self.found:
            return self._less(taken)
        return _without(rows, taken)

    def among(self, rows, wanted):
        return _match(rows, wanted, "left_semi")

    def empty(self, rows) -> bool:
        return rows is None or rows.isEmpty()

    # -- the rows found so far

    def found_meeting(self, edges):
        """Every row found so far: the step's join finds those an edge meets."""
        return self.found

    def minus_found(self, rows, but=None):
        rows = _minus(self._distinct(rows), self.found if but is None else self._less(but))
        self._materialised.append(rows)
        return rows

    def kept_near(self, suspects, pairs):
        return self._narrow(self._less(suspects), suspects, pairs)

    def edges_near(self, suspects, pairs):
        return self._narrow(self.edges_now, suspects, pairs)

    def _less(self, taken):
        """The rows found so far less the rows ``taken``, materialised once."""
        if self._kept[0] is not taken:
            self._kept = (taken, _without(self.found, taken))
        return self._kept[1]

    def _narrow(self, frame, suspects, pairs):
        """``frame`` narrowed to the rows that can produce a suspect: where ``pairs`` say the step
        copies a column into its row as it is, a row it produces holds that value (the rest is
        left whole)."""
        names = suspects.columns
        present = {c.lower(): c for c in frame.columns}
        pairs = [(i, present[c.lower()]) for i, c in pairs if c.lower() in present]
        if not pairs:
            return frame
        wanted = suspects.select(*[F.col(quote(names[i])).alias(f"__sx_w{j}") for j, (i, _) in enumerate(pairs)]) \
            .distinct()
        if self._few[0] is not suspects:
            self._few = (suspects, suspects.count() <= BROADCAST_ROWS)
        wanted = F.broadcast(wanted) if self._few[1] else wanted
        same = reduce(lambda a, b: a & b,
                      [frame[quote(c)].eqNullSafe(wanted[f"__sx_w{j}"]) for j, (_, c) in enumerate(pairs)])
        return frame.join(wanted, same, "left_semi")

    # -- the batch's writes: the output, then the rows found, then the edges, at commit

    def writing(self):
        return nullcontext()

    def write_edges(self) -> None:
        """Written at :meth:`commit`, after the rows found."""

    def write_new(self, rows) -> None:
        """Written where the batch has seeds."""
        if rows is not None:
            with step("write the output"):
                self.run.write_statement(self.spark, rows, self.batch_id)
            self._delta = rows.withColumn(FOUND, F.lit(True))

    def write_changes(self, gone, inserted, version) -> None:
        """Written where some rows were taken away or reached (none of them, maybe)."""
        output, delta = [], []
        if gone is not None:
            output.append(gone.withColumn(CHANGE_TYPE, F.lit(DELETE)))
            delta.append(gone.withColumn(FOUND, F.lit(False)))
        if inserted is not None:
            output.append(inserted.withColumn(CHANGE_TYPE, F.lit(INSERT)))
            delta.append(inserted.withColumn(FOUND, F.lit(True)))
        if output:
            rows = reduce(lambda a, b: a.unionByName(b), output)
            if self.order:
                rows = rows.withColumn(self.run.order_by,
                                       F.lit(version).cast(self.batch.schema[self.run.order_by].dataType))
            with step("write the output"):
                self.run.write_statement(self.spark, rows, self.batch_id, carry=(CHANGE_TYPE, *self.order))
            self._delta = reduce(lambda a, b: a.unionByName(b), delta)

    def commit(self) -> None:
        if self._delta is not None:
            self.run.found.write(self.found_view, self._delta, self.batch_id)
        self.run.edges.write(self.edges_view, self.changed, self.batch_id)


def _same(rows, other):
    """Equal (NULL equal to NULL) on every column of ``other`` (``rows`` has them too), with
    ``other``'s columns renamed apart."""
    theirs = other.toDF(*[f"__sx_o{i}" for i in range(len(other.columns))])
    return theirs, reduce(lambda a, b: a & b, [rows[quote(c)].eqNullSafe(F.col(f"__sx_o{i}"))
                                               for i, c in enumerate(other.columns)])


def _match(rows, other, how: str):
    """``rows`` that have (``left_semi``) or lack (``left_anti``) an equal row in ``other``."""
    theirs, same = _same(rows, other)
    return rows.join(theirs, same, how)


def _without(rows, taken, few: bool = False):
    """The distinct ``rows`` less the rows ``taken`` (broadcast when ``few`` or counted as
    few), materialised."""
    taken = taken.localCheckpoint()
    if not few and taken.count() > BROADCAST_ROWS:
        return rows.subtract(taken).localCheckpoint()
    theirs, same = _same(rows, taken)
    return rows.join(F.broadcast(theirs), same, "left_anti").localCheckpoint()


def _minus(rows, found):
    """The distinct, materialised ``rows`` that are not among the rows ``found`` so far,
    materialised. Few rows (the usual increment) are broadcast and matched against one scan of
    ``found``; many are compared with ``EXCEPT``, which shuffles both."""
    if found is None:
        return rows
    if rows.count() > BROADCAST_ROWS:
        return rows.subtract(found).localCheckpoint()
    return _without(rows, _match(found, F.broadcast(rows), "left_semi"), few=True)

"""One batch of an incremental recursion on the driver, over Arrow data: the operations of the
steps (:mod:`sqlext.streaming.operators.recursion.steps`) as the graph walk of the batch recursion
(:mod:`sqlext.udfs.recursive_expand`) over the edges present, kept in memory between batches
(:mod:`sqlext.streaming.operators.recursion.present`). Only the rows the batch's edges reach are read
from the state: the rows found so far are looked up by column, never read whole."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from sqlext.functions.changes import CHANGE_TYPE, CHANGE_TYPES, DELETE, INSERT, SETS_VALUE
from sqlext.language.dialect import to_sql
from sqlext.runner import run_statement
from sqlext.streaming.operators.recursion.arrow_rows import counts_of, distinct, exclude_rows, marked, matching, narrowed
from sqlext.streaming.operators.recursion.columns import COUNT, FOUND
from sqlext.streaming.operators.recursion.present import keep, present_before
from sqlext.streaming.operators.recursion.shape import over, picked, refuse_absent, refuse_unknown
from sqlext.streaming.run import arrow_frame, step
from sqlext.streaming.state import LayerWrites
from sqlext.udfs.recursive_expand import EdgeIndex, walk
from sqlext.udfs.recursive_expand import step as walk_step


class DriverPlace:
    """The steps' operations for one batch of ``run`` over Arrow data on the driver (see
    :class:`~sqlext.streaming.operators.recursion.steps.Place`). Rows are Arrow tables; the edges
    present are the graph walk's index (:class:`~sqlext.streaming.operators.recursion.present.Present`).

    The state's layers are written beside the rest (:class:`~sqlext.streaming.state.LayerWrites`)
    and committed together after the output."""

    def __init__(self, run, batch, batch_id: int):
        self.run, self.batch, self.batch_id = run, batch, batch_id
        self.spark, self.plan, self.shape = batch.sparkSession, run.walk_plan, run.shape
        self.columns, self.edge_columns = run.columns, run.edge_columns
        self.edges_view, self.found_view = run.edges.before(batch_id), run.found.before(batch_id)
        self.found_empty = self.found_view.empty
        self.writes = None
        self.before = self.now = None  # the edges present before the batch, and after it
        self._edges_now = None  # the edges present after it, as rows
        self.changed = None  # the edges' rows this batch writes
        self.order_type = None

    # -- the batch's edges and the state of the edges

    def new_edges(self) -> pa.Table:
        return distinct(self.run.increment(self.batch, self.batch_id).select(self.edge_columns)) \
            .cast(self._edge_schema)

    def fresh(self, new_edges: pa.Table) -> pa.Table:
        self.before = self._present()
        fresh = exclude_rows(new_edges, self.before.among(new_edges), self.edge_columns)
        self.changed = fresh.append_column(COUNT, pa.repeat(pa.scalar(1, pa.int64()), fresh.num_rows))
        self.now = self.before.changed(self.changed, new=True)
        return fresh

    def net_changes(self):
        rows = self.run.increment(self.batch, self.batch_id)
        order_by, columns = self.run.order_by, self.edge_columns
        version = None
        if order_by in rows.column_names:
            version, self.order_type = pc.max(rows[order_by]).as_py(), rows.schema.field(order_by).type
        kinds = rows[CHANGE_TYPE]
        unknown = pc.invert(pc.fill_null(pc.is_in(kinds, value_set=pa.array(list(CHANGE_TYPES))), False))
        if pc.any(unknown).as_py():
            refuse_unknown(rows.filter(unknown).slice(0, 1).to_pylist()[0], order_by, self.shape)
        sign = pc.if_else(pc.is_in(kinds, value_set=pa.array(list(SETS_VALUE))), 1, -1).cast(pa.int64())
        net = rows.select(columns).append_column(COUNT, sign).group_by(columns, use_threads=False) \
            .aggregate([(COUNT, "sum")]).rename_columns(columns + [COUNT])
        return net.filter(pc.not_equal(net[COUNT], 0)), version

    def counted(self, net: pa.Table):
        columns = self.edge_columns
        self.before = self._present()
        net = net.cast(pa.schema(list(self._edge_schema) + [pa.field(COUNT, pa.int64())]))
        before = counts_of(net, self.before.among(net.select(columns)), columns)
        after = pc.add(before, net[COUNT])
        if pc.any(pc.less(after, 0)).as_py():
            first = pc.index(pc.less(after, 0), True).as_py()
            bad = net.slice(first, 1).to_pylist()[0]
            refuse_absent({k: bad[k] for k in columns}, after[first].as_py(), self.shape)
        self.changed = net.select(columns).append_column(COUNT, after)
        added = net.filter(pc.and_(pc.less_equal(before, 0), pc.greater(after, 0))).select(columns)
        removed = net.filter(pc.and_(pc.greater(before, 0), pc.less_equal(after, 0))).select(columns)
        self.now = self.before.changed(self.changed)
        if not self.found_empty:
            self.found_view.load()  # looked up several times by the step: read once
        return added, removed

    @property
    def _edge_schema(self) -> pa.Schema:
        """The edge columns' Arrow types, as the state keeps them."""
        schema = self.run.edges.arrow_schema
        return pa.schema([schema.field(c) for c in self.edge_columns])

    def _present(self):
        return present_before(self.run.edges, self.edges_view, self.edge_columns, self.plan.key_e)

    # -- the recursion's rows

    def anchor(self, edges: pa.Table) -> pa.Table:
        """An anchor that only picks columns of the edge and constants is computed on Arrow
        data; any other runs as one Spark query over the edges."""
        shape, run = self.shape, self.run
        if shape.constant_anchor:
            return self._cast(run_statement(self.spark, to_sql(shape.anchor)).toArrow())
        if edges.num_rows == 0:
            return self._none()
        items = picked(shape.anchor, edges.column_names)
        if items is not None:
            schema = run.found.arrow_schema
            arrays = [edges[value].cast(schema.field(i).type) if kind == "column"
                      else pa.array([value] * edges.num_rows).cast(schema.field(i).type)
                      for i, (kind, value) in enumerate(items)]
            return pa.table(arrays, names=self.columns)
        view = run.view(arrow_frame(self.spark, edges), "anchor_edges")
        return self._cast(run_statement(self.spark, to_sql(over(shape.anchor, shape.name, view))).toArrow())

    def step(self, rows: pa.Table, edges: pa.Table):
        if rows.num_rows == 0 or edges.num_rows == 0:
            return None
        return self._cast(walk_step(rows, EdgeIndex.build(edges, self.plan.key_e), self.plan))

    def rows(self, parts) -> pa.Table:
        """The parts as one table; a row may be there twice (the walk, and the lookups, take each
        row once)."""
        parts = [p for p in parts if p is not None]
        return pa.concat_tables(parts) if parts else self._none()

    def reach(self, seeds: pa.Table, before: bool = False) -> pa.Table:
        if seeds.num_rows == 0:
            return seeds
        # under UNION the walk yields each row once (its levels keep only rows not met before)
        levels = list(walk(seeds, (self.before if before else self.now).index, self.plan))
        return pa.concat_tables([self._cast(t) for t in levels]) if levels else self._none()

    def minus(self, rows: pa.Table, taken: pa.Table) -> pa.Table:
        return exclude_rows(rows, taken, self.columns)

    def among(self, rows: pa.Table, wanted: pa.Table) -> pa.Table:
        return distinct(matching(rows, wanted, self.columns))

    def empty(self, rows) -> bool:
        return rows is None or rows.num_rows == 0

    # -- the rows found so far

    def found_meeting(self, edges: pa.Table) -> pa.Table:
        """Looked up by the column of the recursion the step joins on, for the edges' values."""
        return self._found_rows(self.plan.key_r, edges[self.plan.key_e])

    def minus_found(self, rows: pa.Table, but=None) -> pa.Table:
        """Matched whole, looked up by the first column."""
        if self.found_empty or rows.num_rows == 0:
            return rows
        found = self._found_rows(self.columns[0], rows[self.columns[0]])
        if but is not None:
            found = exclude_rows(found, but, self.columns)
        return exclude_rows(rows, found, self.columns)

    def kept_near(self, suspects: pa.Table, pairs) -> pa.Table:
        """Looked up by the first copied column, where the step copies one."""
        if pairs:
            i, column = pairs[0]
            kept = self._found_rows(column, suspects[self.columns[i]])
        else:
            kept = self._found_rows(None, None)
        return narrowed(exclude_rows(kept, suspects, self.columns), suspects, pairs, self.columns)

    def edges_near(self, suspects: pa.Table, pairs) -> pa.Table:
        if self._edges_now is None:
            self._edges_now = self.now.edges()
        return narrowed(self._edges_now, suspects, pairs, self.columns)

    def _found_rows(self, column: str | None, values) -> pa.Table:
        """The rows found so far whose ``column`` is among ``values`` (every row found where
        ``column`` is None)."""
        view = self.found_view
        if view.empty:
            return self._none()
        if column is None:
            rows = view.rows()
        else:
            rows = view.rows(column=column, values=pc.unique(values.combine_chunks()
                                                             if hasattr(values, "combine_chunks") else values))
        return rows.filter(pc.fill_null(rows[FOUND], False)).select(self.columns)

    def _cast(self, table: pa.Table) -> pa.Table:
        """Rows under the recursion's column names and Arrow types."""
        schema = self.run.found.arrow_schema
        return pa.table([c.cast(schema.field(i).type) for i, c in enumerate(table.columns)], names=self.columns)

    def _none(self) -> pa.Table:
        return self.run.found.arrow_schema.empty_table().select(self.columns)

    # -- the batch's writes

    def writing(self):
        self.writes = LayerWrites(threads=2)
        return self.writes

    def write_edges(self) -> None:
        self.writes.write(self.run.edges, self.edges_view, self.changed, self.batch_id)

    def write_new(self, rows) -> None:
        """Written whatever the batch found, none included."""
        rows = self._none() if rows is None else rows
        self.writes.write(self.run.found, self.found_view, marked(rows, FOUND, True), self.batch_id)
        with step("write the output"):
            self.run.write_rows(self.spark, rows, self.batch_id)

    def write_changes(self, gone, inserted, version) -> None:
        """Written where some row changed."""
        gone = self._none() if gone is None else gone
        inserted = self._none() if inserted is None else inserted
        if gone.num_rows or inserted.num_rows:
            self.writes.write(self.run.found, self.found_view,
                              pa.concat_tables([marked(gone, FOUND, False), marked(inserted, FOUND, True)]),
                              self.batch_id)
        with step("write the output"):
            out = pa.concat_tables([marked(gone, CHANGE_TYPE, DELETE), marked(inserted, CHANGE_TYPE, INSERT)])
            order_by = self.run.order_by
            if self.order_type is not None:
                out = out.append_column(order_by, pa.repeat(pa.scalar(version, self.order_type), out.num_rows))
            if out.num_rows:
                self.run.write_rows(self.spark, out, self.batch_id,
                                    carry=tuple(c for c in (CHANGE_TYPE, order_by) if c in out.column_names))

    def commit(self) -> None:
        self.writes.commit(self.run.found, self.run.edges)
        keep(self.run.edges, self.now, self.batch_id)

"""Incremental recursion over a growing edge set, one micro-batch at a time (``foreachBatch``).

A statement of the shape

    WITH RECURSIVE r(cols) AS (
      <anchor: constants, or a projection/filter of STREAM(edges)>
      UNION
      <step: r joined with STREAM(edges), inner joins and filters only>)
    SELECT ... FROM r [WHERE ...]

keeps two things in ``<checkpoint>/sqlext-state``: every edge seen (``edges/``) and every row
of ``r`` found so far (``result/``), each as files named by the batch that added them. A
micro-batch of new edges ``dE`` finds the new rows of ``r`` semi-naively, from the delta:

1. the seeds: the anchor over ``dE`` (a constant anchor as it is) and the step over the rows
   found so far joined with ``dE``, less the rows found so far;
2. the recursion from those seeds over all edges (old and new), run as any ``WITH RECURSIVE``
   is (the graph walk where it fits), less the rows found so far: the batch's new rows.

With distinct rows (``UNION``) and a step that is a join of one row of ``r`` with one edge,
this is exactly what the batch recursion over all edges adds to the batch recursion over the
old ones: a row is new only if some derivation of it uses a new edge, and the first new edge
on that derivation is met in step 1. So the outputs of the runs, concatenated, equal the
batch result. ``UNION ALL`` is refused: it counts derivations, which this state does not keep.

A stream with ``_change_type`` is a change feed of edges, which may also take edges away (see
``RecursionRun._changes``): the state then counts each edge's inserts less its deletes,
a batch that removes edges deletes and re-derives what they reached (DRed), and the output is
the change feed of ``r``'s rows.

Each folder holds a ``base`` (written by a batch that rewrote the whole state) and the
``batch`` files after it. A batch reads only the files of earlier batches and replaces its
own, so a replayed batch writes the same rows and state again.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from sqlglot import exp

from sqlext.functions.arguments import quote
from sqlext.functions.changes import CHANGE_TYPE, CHANGE_TYPES, DELETE, INSERT, SETS_VALUE
from sqlext.errors import SqlextError
from sqlext.language.dialect import is_stream as _is_stream
from sqlext.language.dialect import to_sql
from sqlext.runner import run_statement
from sqlext.streaming.recent import Recent
from sqlext.streaming.run import StatefulRun, arrow_frame, on_driver, step
from sqlext.streaming.keyed_rows import exclude
from sqlext.streaming.state import KeyedState, LayerWrites

FUNCTION = "sqlext stream"
# an edge's count in the state (inserts less deletes), and before the batch
COUNT, BEFORE = "__sx_n", "__sx_before"
# whether a row of the recursion is found (a row no longer reached is kept as not found)
FOUND = "__sx_found"
# the largest increment (Spark's estimate) a graph walk takes on the driver
WALK_BYTES = 256 * 1024 * 1024
# rows to take away from what was found are matched against it by broadcasting them, up to this many
BROADCAST_ROWS = 2_000_000


def _unsupported(what: str, reason: str, fix: str) -> SqlextError:
    return SqlextError("UNSUPPORTED_STREAM", function=FUNCTION, what=what, reason=reason, fix=fix)


def _stream_name(table: exp.Table) -> str:
    return to_sql(table.this)


def _only_rows(query: exp.Select, part: str) -> None:
    """A part of the statement that maps each row to rows: no aggregate, window, DISTINCT,
    GROUP BY, HAVING, ORDER BY, LIMIT or subquery."""
    clauses = [k for k in ("group", "having", "order", "limit", "offset", "distinct", "qualify") if query.args.get(k)]
    nested = [n for n in query.find_all(exp.Subquery, exp.Exists)] + \
        [n for n in query.find_all(exp.Select) if n is not query]
    if clauses or nested or any(query.find_all(exp.AggFunc)) or any(query.find_all(exp.Window)):
        raise _unsupported(f"the recursion's {part}",
                           "only row-by-row SQL (projections, filters, inner joins) runs incrementally; this part "
                           "aggregates, sorts, limits, removes duplicates or holds a subquery",
                           "Run the recursion as a batch query (sqlext.sql), or move that part to a query over "
                           "the incremental run's output.")


class RecursionShape:
    """The parts of an incremental recursion statement (see the module's docstring), checked."""

    def __init__(self, tree: exp.Expression):
        with_ = tree.args.get("with_") if isinstance(tree, exp.Select) else None
        if with_ is None or not with_.args.get("recursive") or len(with_.expressions) != 1:
            raise _unsupported("this statement", "an incremental recursion is one WITH RECURSIVE holding one "
                               "recursive query, read by a SELECT", "Write WITH RECURSIVE r AS (...) SELECT ... FROM r.")
        cte = with_.expressions[0]
        self.name = cte.alias_or_name
        body = cte.this
        if isinstance(body, exp.Union) and not body.args.get("distinct"):
            raise _unsupported("a recursion with UNION ALL", "UNION ALL counts every derivation of a row, which "
                               "an incremental run does not keep", "Use UNION (distinct rows); for trees and "
                               "forests the rows are the same.")
        if not isinstance(body, exp.Union) or not isinstance(body.this, exp.Select) \
                or not isinstance(body.expression, exp.Select) or cte.args.get("key"):
            raise _unsupported("this recursion", "an incremental recursion is <anchor> UNION <step>, without "
                               "USING KEY", "Write WITH RECURSIVE r AS (SELECT ... UNION SELECT ... FROM r JOIN ...).")
        alias = cte.args.get("alias")
        self.columns = [c.name for c in alias.columns] if alias is not None and alias.columns else None
        self.anchor, self.step = body.this, body.expression
        self.main = tree.copy()
        self.main.set("with_", None)
        streams = [t for t in tree.find_all(exp.Table) if _is_stream(t)]
        names = {_stream_name(t) for t in streams}
        if len(names) != 1:
            raise _unsupported("this recursion", f"it reads {len(names)} streams; an incremental recursion reads "
                               "one stream of edges", "Read the edges as STREAM(edges) in the anchor and the step.")
        self.stream = streams[0]
        self._check()

    def copied(self) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
        """The step's output columns that copy a column of the recursion, and those that copy
        a column of the edge, as it is: (position, column) pairs."""
        if any(isinstance(e, exp.Star) or isinstance(e, exp.Column) and isinstance(e.this, exp.Star)
               for e in self.step.expressions):
            return [], []
        tables = self._tables(self.step)
        recursion = next(t for t in tables if not _is_stream(t))
        stream = next(t for t in tables if _is_stream(t))
        from_recursion, from_edges = [], []
        for i, expression in enumerate(self.step.expressions):
            column = expression.this if isinstance(expression, exp.Alias) else expression
            if not isinstance(column, exp.Column) or not column.table:
                continue
            if column.table.lower() == recursion.alias_or_name.lower():
                from_recursion.append((i, column.name))
            elif stream.alias and column.table.lower() == stream.alias.lower():
                from_edges.append((i, column.name))
        return from_recursion, from_edges

    def anchor_copied(self) -> list[tuple[int, str]]:
        """The anchor's output columns that copy a column of the edge as it is."""
        if self.constant_anchor or any(isinstance(e, exp.Star) or isinstance(e, exp.Column) and
                                       isinstance(e.this, exp.Star) for e in self.anchor.expressions):
            return []
        copied = []
        for i, expression in enumerate(self.anchor.expressions):
            column = expression.this if isinstance(expression, exp.Alias) else expression
            if isinstance(column, exp.Column):
                copied.append((i, column.name))
        return copied

    def _tables(self, query: exp.Expression) -> list[exp.Table]:
        return [t for t in query.find_all(exp.Table)]

    def _check(self) -> None:
        _only_rows(self.anchor, "anchor")
        _only_rows(self.step, "step")
        _only_rows(self.main, "outer query")
        anchor = self._tables(self.anchor)
        self.constant_anchor = not anchor
        if len(anchor) > 1 or (anchor and not _is_stream(anchor[0])) or self.anchor.args.get("joins"):
            raise _unsupported("the recursion's anchor", "it may read nothing or the stream of edges, once",
                               "Write SELECT ... FROM STREAM(edges) [WHERE ...], or an anchor of constants.")
        step = self._tables(self.step)
        if sorted(_is_stream(t) for t in step) != [False, True] or \
                sum(1 for t in step if not _is_stream(t) and t.name == self.name) != 1:
            raise _unsupported("the recursion's step", f"it must join {self.name} with the stream of edges, each "
                               "read once, and read no other table",
                               f"Write SELECT ... FROM {self.name} JOIN STREAM(edges) AS e ON ...")
        for join in self.step.args.get("joins") or []:
            if join.side or join.kind not in ("", "INNER", "CROSS") or join.args.get("using"):
                raise _unsupported("the recursion's step", f"it uses a {(join.side + ' ' + join.kind).strip()} join; "
                                   "only inner joins run incrementally", "Use an inner join with ON.")
        main = self._tables(self.main)
        if len(main) != 1 or main[0].name != self.name or self.main.args.get("joins"):
            raise _unsupported("the outer query", f"it must read {self.name} alone",
                               f"Write SELECT ... FROM {self.name} [WHERE ...].")


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
        from pyspark.sql.types import BooleanType, LongType, StructField, StructType

        self.shape = shape
        # the ordering column of the change rows (the stream's order_by, or its shape's default)
        from sqlext.streaming.shapes import stream_order

        order = stream_order(shape.stream.this)
        self.order_by = next((f.name for f in edge_schema.fields if f.name.lower() == order.lower()), order)
        self.edge_columns = [f.name for f in edge_schema.fields if f.name not in (CHANGE_TYPE, self.order_by)]
        fields = {f.name: f for f in edge_schema.fields}
        self.edges = KeyedState(self.state / "edges", self.edge_columns)
        self.edges.record_schema(StructType([fields[c] for c in self.edge_columns]
                                            + [StructField(COUNT, LongType(), True)]))
        self.row_schema, self.walk_plan = _compiled(spark, shape, StructType([fields[c] for c in self.edge_columns]))
        self.columns = self.row_schema.names
        self.found = KeyedState(self.state / "result", self.columns)
        self.found.record_schema(StructType(list(self.row_schema.fields) + [StructField(FOUND, BooleanType(), True)]))

    def run(self, batch, batch_id: int) -> None:
        self._views: list[str] = []
        try:
            walks = self._walks_on_driver(batch, batch_id)
            if CHANGE_TYPE in batch.columns and walks:
                self._changes_on_driver(batch, batch_id)
            elif CHANGE_TYPE in batch.columns:
                with step("spark"):
                    self._changes(batch, batch_id)
            elif walks:
                self._arrivals_on_driver(batch, batch_id)
            else:
                with step("spark"):
                    self._arrivals(batch, batch_id)
        finally:
            for name in self._views:
                batch.sparkSession.catalog.dropTempView(name)

    def _increment(self, batch, batch_id: int) -> pa.Table:
        from sqlext.streaming.run import arrow_schema
        from sqlext.streaming.source_files import batch_rows

        return batch_rows(batch, batch_id, self.checkpoint, self.source_folder, arrow_schema(batch.schema))

    def _walks_on_driver(self, batch, batch_id: int) -> bool:
        """Whether this batch walks the graph on the driver, over Arrow data: where the step is
        a walk, the increment is at most :data:`WALK_BYTES` (Spark's estimate; a first run over
        a long history included: one walk over Arrow data costs less than Spark's recursion)
        and the state fits the driver's cache; else the recursion runs in Spark."""
        return self.walk_plan is not None and on_driver(batch, WALK_BYTES, state_bytes=lambda: (
            self.found.before(batch_id).stored_bytes() + self.edges.before(batch_id).stored_bytes()))

    def _view(self, frame, role: str) -> str:
        name = f"__sx_rec_{role}_{len(self._views)}"
        frame.createOrReplaceTempView(name)
        self._views.append(name)
        return name

    # -- the state, read

    def _found_frame(self, spark, view):
        """The rows found so far (before this batch) as a Spark frame; None when none."""
        from pyspark.sql import functions as F

        if view.empty:
            return None
        return view.frame(spark).where(F.col(FOUND)).select(*[F.col(quote(c)) for c in self.columns])

    def _edges_frame(self, spark, view):
        """The edges present before this batch, each with its count, as a Spark frame; None when none."""
        from pyspark.sql import functions as F

        return None if view.empty else view.frame(spark).where(F.col(COUNT) > 0)

    # -- edges that only arrive, on the driver

    def _arrivals_on_driver(self, batch, batch_id: int) -> None:
        """Edges that only arrive, over Arrow data: the seeds (the anchor over the new edges,
        and the rows found so far that a new edge meets, taken one step), then the graph walk
        from them over all edges, less what was found before.

        The state's two layers are written beside the rest (pyarrow's Parquet writer lets go of
        Python's lock): the edges' while the graph is walked, the rows found while the output
        is written; both are committed once the output is written, before the batch returns
        (and Spark records it). A batch stopped before that has committed nothing of its own,
        and one stopped between the two commits is replayed over the layers of the batches
        before it, as any replay is."""
        from sqlext.udfs.recursive_expand import EdgeIndex
        from sqlext.udfs.recursive_expand import step as walk_step
        from sqlext.udfs.recursive_expand import walk

        spark, plan = batch.sparkSession, self.walk_plan
        edges_view, found_view = self.edges.before(batch_id), self.found.before(batch_id)
        with step("collect the increment"):
            new_edges = _distinct(self._increment(batch, batch_id).select(self.edge_columns)) \
                .cast(self._edge_schema)
        with step("look up the state"):
            present = self._present(edges_view)
            fresh = _exclude_rows(new_edges, present.among(new_edges), self.edge_columns)
            counted = fresh.append_column(COUNT, pa.repeat(pa.scalar(1, pa.int64()), fresh.num_rows))
            met = self._found_rows(found_view, plan.key_r, fresh[plan.key_e])
        with LayerWrites(threads=2) as writes:
            writes.write(self.edges, edges_view, counted, batch_id)
            with step("walk"):
                anchor = self._cast(_anchor_over(spark, self, fresh))
                stepped = walk_step(met, EdgeIndex.build(fresh, plan.key_e), plan) if met.num_rows else None
                # a seed twice is walked once: under UNION the walk's first level keeps each row once
                seeds = pa.concat_tables([anchor] + ([self._cast(stepped)] if stepped is not None else []))
                seeds = self._minus_found(found_view, seeds)  # a row found before was walked from before
                now = present.changed(counted, new=True)
                levels = list(walk(seeds, now.index, plan)) if seeds.num_rows else []
                # under UNION the walk yields each row once (its levels keep only rows not met before)
                new = self._minus_found(found_view, pa.concat_tables([self._cast(t) for t in levels])) \
                    if levels else seeds
            writes.write(self.found, found_view, _with(new, FOUND, True), batch_id)
            with step("write the output"):
                self.write_rows(spark, new, batch_id)
            with step("write the state"):
                writes.commit(self.found, self.edges)
                self._keep(now, batch_id)

    @property
    def _edge_schema(self) -> pa.Schema:
        """The edge columns' Arrow types, as the state keeps them."""
        schema = self.edges.arrow_schema
        return pa.schema([schema.field(c) for c in self.edge_columns])

    def _present(self, view) -> "_Present":
        """The edges present before this batch (see :class:`_Present`): kept in memory from the
        batch that wrote the layers the view reads, in this process; else read from them."""
        kept = _PRESENT.get(self.edges.folder.uri)
        if kept is not None and not view.empty and kept[0] == _identity(view):
            return kept[1]
        columns = self.edge_columns
        rows = view.rows().select(columns + [COUNT]) if not view.empty else self.edges.arrow_schema.empty_table()
        import pyarrow.compute as pc

        return _Present.of(rows.filter(pc.greater(rows[COUNT], 0)), columns, self.walk_plan.key_e)

    def _keep(self, present: "_Present", batch_id: int) -> None:
        """Keep ``present``, the edges after this batch, for the next batch, under the identity
        of the layers this batch has just written (a later batch reads them; a replay of this
        one reads the layers before them, and finds nothing kept for those)."""
        from sqlext.streaming.layer_cache import CACHE_BYTES

        uri = self.edges.folder.uri
        identity = _identity(self.edges.before(batch_id + 1)) if present.nbytes * 4 <= CACHE_BYTES else None
        if identity is None:
            _PRESENT.forget(uri)
        else:
            _PRESENT.put(uri, (identity, present))

    def _cast(self, table: pa.Table) -> pa.Table:
        """Rows under the recursion's column names and Arrow types."""
        schema = self.found.arrow_schema
        return pa.table([c.cast(schema.field(i).type) for i, c in enumerate(table.columns)],
                        names=self.columns)

    def _found_rows(self, view, column: str, values) -> pa.Table:
        """The rows found so far whose ``column`` is among ``values`` (Arrow)."""
        import pyarrow.compute as pc

        if view.empty:
            return self.found.arrow_schema.empty_table().select(self.columns)
        if column is None:  # every row found
            rows = view.rows()
        else:
            rows = view.rows(column=column, values=pc.unique(values.combine_chunks()
                                                             if hasattr(values, "combine_chunks") else values))
        return rows.filter(pc.fill_null(rows[FOUND], False)).select(self.columns)

    def _minus_found(self, view, rows: pa.Table) -> pa.Table:
        """``rows`` less the rows found so far (matched whole; looked up by the first column)."""
        if view.empty or rows.num_rows == 0:
            return rows
        found = self._found_rows(view, self.columns[0], rows[self.columns[0]])
        return _exclude_rows(rows, found, self.columns)

    # -- a change feed of edges, on the driver

    def _changes_on_driver(self, batch, batch_id: int) -> None:
        """Edges inserted and deleted, over Arrow data: the counts of the touched edges, then
        delete and re-derive (see :meth:`_changes`), each recursion a graph walk. Only the
        rows the removed and added edges reach are read from the state: the rows found so far
        are looked up by column, never read whole."""
        import pyarrow.compute as pc

        from sqlext.udfs.recursive_expand import EdgeIndex
        from sqlext.udfs.recursive_expand import step as walk_step
        from sqlext.udfs.recursive_expand import walk

        spark, plan, columns = batch.sparkSession, self.walk_plan, self.edge_columns
        edges_view, found_view = self.edges.before(batch_id), self.found.before(batch_id)
        with step("collect the increment"):
            rows = self._increment(batch, batch_id)
            order_by = self.order_by
            version = pc.max(rows[order_by]).as_py() if order_by in rows.column_names else None
            kinds = rows[CHANGE_TYPE]
            unknown = pc.invert(pc.fill_null(pc.is_in(kinds, value_set=pa.array(list(CHANGE_TYPES))), False))
            if pc.any(unknown).as_py():
                _refuse_unknown(rows.filter(unknown).slice(0, 1).to_pylist()[0], order_by, self.shape)
            sign = pc.if_else(pc.is_in(kinds, value_set=pa.array(list(SETS_VALUE))), 1, -1).cast(pa.int64())
            net = rows.select(columns).append_column(COUNT, sign).group_by(columns, use_threads=False) \
                .aggregate([(COUNT, "sum")]).rename_columns(columns + [COUNT])
            net = net.filter(pc.not_equal(net[COUNT], 0))
        with step("look up the state"):
            present = self._present(edges_view)
            net = net.cast(pa.schema(list(self._edge_schema) + [pa.field(COUNT, pa.int64())]))
            before = _counts_of(net, present.among(net.select(columns)), columns)
            after = pc.add(before, net[COUNT])
            if pc.any(pc.less(after, 0)).as_py():
                first = pc.index(pc.less(after, 0), True).as_py()
                bad = net.slice(first, 1).to_pylist()[0]
                raise SqlextError("DELETE_OF_ABSENT_ROW", function=FUNCTION, name=to_sql(self.shape.stream.this),
                                  row="(" + ", ".join(f"{k}={bad[k]!r}" for k in columns) + ")",
                                  excess=-after[first].as_py())
            counts = net.select(columns).append_column(COUNT, after)
            added = net.filter(pc.and_(pc.less_equal(before, 0), pc.greater(after, 0))).select(columns)
            removed = net.filter(pc.and_(pc.greater(before, 0), pc.less_equal(after, 0))).select(columns)
            now = present.changed(counts)
            edges_now = now.edges()
        # the state's layers are written beside the rest and committed after the output, as
        # _arrivals_on_driver writes them
        with LayerWrites(threads=2) as writes:
            writes.write(self.edges, edges_view, counts, batch_id)
            with step("walk"):
                if not found_view.empty:
                    found_view.load()  # looked up several times below: read once
                index_now = now.index
                gone = self.found.arrow_schema.empty_table().select(self.columns)
                if removed.num_rows and not found_view.empty:
                    suspects = self._suspects(spark, found_view, removed, present.index)
                    again = self._still_derived(spark, found_view, suspects, edges_now)
                    gone = suspects
                else:
                    suspects, again = gone, gone
                seeds = [again, self._cast(_anchor_over(spark, self, added))]
                if added.num_rows and not found_view.empty:
                    met = _exclude_rows(self._found_rows(found_view, plan.key_r, added[plan.key_e]), suspects,
                                        self.columns)
                    if met.num_rows:
                        seeds.append(self._cast(walk_step(met, EdgeIndex.build(added, plan.key_e), plan)))
                # a seed twice is walked once: under UNION the walk's first level keeps each row once
                seeds = self._minus_kept(found_view, pa.concat_tables(seeds), suspects)
                levels = list(walk(seeds, index_now, plan)) if seeds.num_rows else []
                # under UNION the walk yields each row once
                reached = self._minus_kept(found_view, pa.concat_tables([self._cast(t) for t in levels]),
                                           suspects) if levels else seeds
                inserted = _exclude_rows(reached, suspects, self.columns)
                gone = _exclude_rows(gone, reached, self.columns)
            if gone.num_rows or inserted.num_rows:
                writes.write(self.found, found_view,
                             pa.concat_tables([_with(gone, FOUND, False), _with(inserted, FOUND, True)]), batch_id)
            with step("write the output"):
                out = pa.concat_tables([_with(gone, CHANGE_TYPE, DELETE), _with(inserted, CHANGE_TYPE, INSERT)])
                if order_by in rows.column_names:
                    out = out.append_column(order_by, pa.repeat(
                        pa.scalar(version, rows.schema.field(order_by).type), out.num_rows))
                if out.num_rows:
                    self.write_rows(spark, out, batch_id, carry=tuple(c for c in (CHANGE_TYPE, order_by)
                                                                      if c in out.column_names))
            with step("write the state"):
                writes.commit(self.found, self.edges)
                self._keep(now, batch_id)

    def _suspects(self, spark, found_view, removed: pa.Table, old_index) -> pa.Table:
        """Every row found so far that some derivation through a removed edge reaches: the
        anchor over those edges and the rows found met by one, taken one step, then the walk
        from them over the edges before the batch."""
        from sqlext.udfs.recursive_expand import EdgeIndex
        from sqlext.udfs.recursive_expand import step as walk_step
        from sqlext.udfs.recursive_expand import walk

        plan = self.walk_plan
        seeds = []
        if not self.shape.constant_anchor:  # a constant anchor's rows need no edge
            seeds.append(self._cast(_anchor_over(spark, self, removed)))
        met = self._found_rows(found_view, plan.key_r, removed[plan.key_e])
        if met.num_rows:
            seeds.append(self._cast(walk_step(met, EdgeIndex.build(removed, plan.key_e), plan)))
        seeds = _distinct(pa.concat_tables(seeds)) if seeds else self.found.arrow_schema.empty_table().select(self.columns)
        if not seeds.num_rows:
            return seeds
        return _distinct(pa.concat_tables([self._cast(t) for t in walk(seeds, old_index, plan)]))

    def _still_derived(self, spark, found_view, suspects: pa.Table, edges_now: pa.Table) -> pa.Table:
        """The suspects that the anchor over the present edges, or one step from a row found
        that is not a suspect, still derives. Where the anchor or the step copies a column as
        it is, only the edges and rows holding a suspect's value there are read."""
        from sqlext.udfs.recursive_expand import EdgeIndex
        from sqlext.udfs.recursive_expand import step as walk_step

        plan = self.walk_plan
        derived = []
        if not self.shape.constant_anchor:
            near = _narrowed(edges_now, suspects, self.shape.anchor_copied(), self.columns)
            derived.append(self._cast(_anchor_over(spark, self, near)))
        from_recursion, from_edges = self.shape.copied()
        if from_recursion:
            i, column = from_recursion[0]
            kept = self._found_rows(found_view, column, suspects[self.columns[i]])
        else:
            kept = self._found_rows(found_view, None, None)
        kept = _narrowed(_exclude_rows(kept, suspects, self.columns), suspects, from_recursion, self.columns)
        edges = _narrowed(edges_now, suspects, from_edges, self.columns)
        if kept.num_rows and edges.num_rows:
            derived.append(self._cast(walk_step(kept, EdgeIndex.build(edges, plan.key_e), plan)))
        if not derived:
            return suspects.slice(0, 0)
        from sqlext.streaming.keyed_rows import restrict

        return _distinct(restrict(pa.concat_tables(derived), suspects, self.columns))

    def _minus_kept(self, found_view, rows: pa.Table, suspects: pa.Table) -> pa.Table:
        """``rows`` less the rows found so far that are not suspects."""
        if found_view.empty or rows.num_rows == 0:
            return rows
        found = self._found_rows(found_view, self.columns[0], rows[self.columns[0]])
        return _exclude_rows(rows, _exclude_rows(found, suspects, self.columns), self.columns)

    # -- edges that only arrive, in Spark

    def _arrivals(self, batch, batch_id: int) -> None:
        """Edges that only arrive: the batch's new rows of the recursion, and its edges, are
        added to the state."""
        from pyspark.sql import functions as F

        spark = batch.sparkSession
        edges_view, found_view = self.edges.before(batch_id), self.found.before(batch_id)
        with step("read the new edges"):
            new_edges = batch.select(*[F.col(quote(c)) for c in self.edge_columns]).distinct().localCheckpoint()
        old = self._edges_frame(spark, edges_view)
        old_edges = None if old is None else old.select(*[F.col(quote(c)) for c in self.edge_columns])
        all_edges = new_edges if old_edges is None else old_edges.unionByName(new_edges)
        found = self._found_frame(spark, found_view)
        with step("the recursion"):
            new = self._reached(spark, new_edges, all_edges, found)
        if new is not None:
            with step("write the output"):
                self.write_statement(spark, new, batch_id)
            with step("write the state"):
                self.found.write(found_view, new.withColumn(FOUND, F.lit(True)), batch_id)
        fresh = new_edges if old_edges is None else _match(new_edges, old_edges, "left_anti")
        with step("write the state"):
            self.edges.write(edges_view, fresh.withColumn(COUNT, F.lit(1).cast("bigint")), batch_id)

    def _reached(self, spark, new_edges, all_edges, found, extra_seeds=()):
        """The rows of the recursion over ``all_edges`` that are not in ``found`` (the
        recursion over the other edges, ``new_edges`` excluded) and that a derivation through
        one of ``new_edges`` or from ``extra_seeds`` reaches, materialised; None when none.

        The seeds are the anchor over the new edges (a constant anchor again each batch: what
        was found of it is taken away) and the rows found so far met by a new edge, less the
        rows found so far; the recursion runs from them over all edges."""
        shape = self.shape
        new_view, all_view = self._view(new_edges, "new_edges"), self._view(all_edges, "edges")
        parts = [run_statement(spark, to_sql(_over(shape.anchor, shape.name, new_view)))]
        if found is not None:
            parts.append(run_statement(spark, to_sql(_over(shape.step, shape.name, new_view,
                                                           self._view(found, "found")))))
        seeds = _minus(self._rows(parts + list(extra_seeds), found).distinct(), found)
        if seeds.isEmpty():
            return None
        # computed once: the output and the state both read it (over a long history, the
        # recursion is most of a run's work)
        return _minus(self._recursion(spark, seeds, seeds.columns, all_view), found).localCheckpoint()

    def _rows(self, parts, found=None):
        """Frames of the recursion's rows under its column names and types, as one frame."""
        from pyspark.sql import functions as F

        rows = None
        for part in parts:
            part = part.toDF(*self.columns).select(
                *[F.col(quote(f.name)).cast(f.dataType) for f in self.row_schema.fields])
            rows = part if rows is None else rows.unionByName(part)
        return rows

    def _changes(self, batch, batch_id: int) -> None:
        """Edges inserted and deleted (``_change_type``). An edge is present while its inserts
        (``insert``, ``update_postimage``) outnumber its deletes (``delete``,
        ``update_preimage``). The batch's output is the change of the recursion's rows:
        ``insert`` for a row now reached, ``delete`` for a row no longer reached.

        A batch that removes edges deletes and re-derives (DRed): it takes away every row found
        so far that some derivation through a removed edge reaches (found by a recursion from
        those edges over the old edges), keeps those of them that the remaining rows and
        present edges still derive, and adds what the added edges reach. Only what the removed
        edges reach is recomputed, and the state changes by those rows alone: the rows no longer
        found are written as such into the delta, the rows found so far are not rewritten."""
        from pyspark.sql import functions as F

        spark = batch.sparkSession
        order = [c for c in batch.columns if c == self.order_by]
        columns = self.edge_columns
        unknown = ~F.col(CHANGE_TYPE).isin(*CHANGE_TYPES) | F.col(CHANGE_TYPE).isNull()
        summary = batch.agg(F.max(F.col(quote(self.order_by)) if order else F.lit(None)), F.max(unknown)).first()
        version = summary[0]
        if summary[1]:
            _refuse_unknown(batch.where(unknown).first().asDict(), self.order_by, self.shape)
        sign = F.when(F.col(CHANGE_TYPE).isin(*SETS_VALUE), F.lit(1)).otherwise(F.lit(-1))
        net = batch.groupBy(*[F.col(quote(c)) for c in columns]).agg(F.sum(sign).cast("bigint").alias(COUNT)) \
            .where(F.col(COUNT) != 0).localCheckpoint()
        edges_view, found_view = self.edges.before(batch_id), self.found.before(batch_id)
        old = None if edges_view.empty else edges_view.frame(spark)
        touched = net.withColumn(BEFORE, F.lit(0).cast("bigint"))
        if old is not None:
            picked = F.broadcast(net.select(*[F.col(quote(c)) for c in columns]))
            touched = touched.unionByName(
                _match(old, picked, "left_semi").withColumn(BEFORE, F.col(COUNT)).withColumn(COUNT, F.lit(0).cast("bigint")))
        touched = touched.groupBy(*[F.col(quote(c)) for c in columns]) \
            .agg(F.sum(BEFORE).alias(BEFORE), F.sum(COUNT).alias(COUNT)).localCheckpoint()
        after = F.col(BEFORE) + F.col(COUNT)
        goes = (F.col(BEFORE) > 0) & (after <= 0)
        absent, any_removed = touched.agg(F.min(after) < 0, F.max(goes)).first()
        if absent:
            _refuse_absent(touched.where(after < 0).first(), BEFORE, self.shape)
        added = touched.where((F.col(BEFORE) <= 0) & (after > 0)).select(*[F.col(quote(c)) for c in columns])
        removed = touched.where(goes).select(*[F.col(quote(c)) for c in columns])
        counts = touched.select(*[F.col(quote(c)) for c in columns], after.alias(COUNT))  # the touched edges' totals
        now = counts if old is None else _match(old, counts.select(*[F.col(quote(c)) for c in columns]),
                                                "left_anti").unionByName(counts)
        edges_now = now.where(F.col(COUNT) > 0).select(*[F.col(quote(c)) for c in columns])
        found = self._found_frame(spark, found_view)
        if found is None or not any_removed:
            new, gone = self._reached(spark, added, edges_now, found), None
        else:
            edges_before = old.where(F.col(COUNT) > 0).select(*[F.col(quote(c)) for c in columns])
            gone, new = self._rederive(spark, found, removed, added, edges_before, edges_now)
        output, delta = [], []
        if gone is not None:
            output.append(gone.withColumn(CHANGE_TYPE, F.lit(DELETE)))
            delta.append(gone.withColumn(FOUND, F.lit(False)))
        if new is not None:
            output.append(new.withColumn(CHANGE_TYPE, F.lit(INSERT)))
            delta.append(new.withColumn(FOUND, F.lit(True)))
        if output:
            rows = output[0] if len(output) == 1 else output[0].unionByName(output[1])
            if order:
                rows = rows.withColumn(self.order_by, F.lit(version).cast(batch.schema[self.order_by].dataType))
            self.write_statement(spark, rows, batch_id, carry=(CHANGE_TYPE, *order))
            self.found.write(found_view, delta[0] if len(delta) == 1 else delta[0].unionByName(delta[1]), batch_id)
        self.edges.write(edges_view, counts, batch_id)

    def _rederive(self, spark, found, removed, added, edges_before, edges_now):
        """Delete and re-derive: ``(gone, inserted)``: the rows no longer reached, and the rows
        newly reached (None when none)."""
        shape = self.shape
        # every row a derivation through a removed edge reaches: the anchor over those edges
        # and the rows found so far met by one, then the recursion from them over the old edges
        removed_view = self._view(removed, "removed")
        parts = [run_statement(spark, to_sql(_over(shape.step, shape.name, removed_view, self._view(found, "found"))))]
        if not shape.constant_anchor:  # a constant anchor's rows need no edge
            parts.append(run_statement(spark, to_sql(_over(shape.anchor, shape.name, removed_view))))
        suspects = self._rows(parts, found).distinct().localCheckpoint()
        suspects = self._recursion(spark, suspects, suspects.columns, self._view(edges_before, "old_edges")) \
            .localCheckpoint()
        kept = _without(found, suspects)
        # the suspects that the kept rows and the present edges still derive, found like the
        # rows that new edges reach: seeds the anchor over every present edge and the kept rows
        # met by a present edge (each narrowed to what can produce a suspect)
        now_view = self._view(edges_now, "edges_now")
        anchor = run_statement(spark, to_sql(_over(shape.anchor, shape.name, now_view)))
        kept_near, edges_near = self._near(kept, edges_now, suspects)
        step = run_statement(spark, to_sql(_over(shape.step, shape.name, self._view(edges_near, "edges_near"),
                                                 self._view(kept_near, "kept_near"))))
        again = _match(self._rows([anchor, step], found), suspects, "left_semi")
        reached = self._reached(spark, added, edges_now, kept, extra_seeds=[again])
        if reached is None:
            return suspects, None  # materialised above
        inserted = _without(reached, suspects).localCheckpoint()
        return _without(suspects, reached).localCheckpoint(), (None if inserted.isEmpty() else inserted)

    def _near(self, kept, edges, suspects):
        """``kept`` and ``edges`` narrowed to the rows that can produce a suspect: where the
        step copies a column of the recursion or of the edge into its row as it is, a row it
        produces holds that value (the rest is left whole)."""
        from functools import reduce

        from pyspark.sql import functions as F

        names = suspects.columns
        small = suspects.count() <= BROADCAST_ROWS

        def narrow(frame, pairs):
            present = {c.lower(): c for c in frame.columns}
            pairs = [(i, present[c.lower()]) for i, c in pairs if c.lower() in present]
            if not pairs:
                return frame
            wanted = suspects.select(*[F.col(quote(names[i])).alias(f"__sx_w{j}") for j, (i, _) in enumerate(pairs)]) \
                .distinct()
            wanted = F.broadcast(wanted) if small else wanted
            same = reduce(lambda a, b: a & b,
                          [frame[quote(c)].eqNullSafe(wanted[f"__sx_w{j}"]) for j, (_, c) in enumerate(pairs)])
            return frame.join(wanted, same, "left_semi")

        from_recursion, from_edges = self.shape.copied()
        return narrow(kept, from_recursion), narrow(edges, from_edges)

    def _recursion(self, spark, seeds, names: list[str], all_edges: str):
        """Every row the recursion reaches from ``seeds`` over all edges (``seeds`` included)."""
        shape = self.shape
        seeds_view = self._view(seeds, "seeds")
        step = _over(shape.step, shape.name, all_edges)
        anchor = exp.select("*").from_(exp.Table(this=exp.to_identifier(seeds_view)))
        cte = exp.CTE(this=exp.union(anchor, step, distinct=True),
                      alias=exp.TableAlias(this=exp.to_identifier(shape.name),
                                           columns=[exp.to_identifier(n) for n in names]))
        statement = exp.select("*").from_(exp.Table(this=exp.to_identifier(shape.name)))
        statement.set("with_", exp.With(expressions=[cte], recursive=True))
        return run_statement(spark, to_sql(statement))


# the present edges of recent edge states, by the state's folder: (the identity of the layers
# they stand for, the edges); see RecursionRun._present
_PRESENT = Recent(4)


def _identity(view) -> tuple:
    """The layers a view of a state reads, as they are on storage now: each bucket's base and
    delta by batch, with their files' names, sizes and times (a layer written again, by a
    replayed batch, has other files)."""
    return tuple((part.bucket, part.base, part.delta) + tuple(part.path_of(b).identity()
                                                              for b in (part.base, part.delta) if b is not None)
                 for part in view.parts())


class _Present:
    """The edges present (counted above 0) at some batch, each with its count: those with a
    join key as the graph walk's index over it (sorted by the key), and those without one,
    which the walk never follows, as they are. A batch's changes give a new one (this one is
    left as it is): the touched edges are found through the index, and the index is merged
    with the added edges rather than built again."""

    def __init__(self, index, loose: pa.Table, columns: list[str], key: str):
        self.index, self.loose, self.columns, self.key = index, loose, columns, key

    @classmethod
    def of(cls, rows: pa.Table, columns: list[str], key: str) -> "_Present":
        """Of the present edges ``rows`` (the edge columns and the count)."""
        import pyarrow.compute as pc

        from sqlext.udfs.recursive_expand import EdgeIndex

        valid = pc.is_valid(rows[key])
        return cls(EdgeIndex.build(rows.filter(valid), key), rows.filter(pc.invert(valid)), columns, key)

    @property
    def nbytes(self) -> int:
        return self.index.nbytes + self.loose.nbytes

    def edges(self) -> pa.Table:
        """The present edges (their columns only)."""
        return pa.concat_tables([self.index.table.select(self.columns), self.loose.select(self.columns)])

    def _near(self, rows: pa.Table) -> tuple[np.ndarray, pa.Table]:
        """The positions in the index's table of the edges whose key is one of ``rows``', and
        the edges without a key where ``rows`` has one without."""
        import pyarrow.compute as pc

        keys = rows[self.key]
        values = pc.drop_null(keys).to_numpy(zero_copy_only=False) if keys.null_count < len(keys) \
            else np.zeros(0, np.int64)
        loose = self.loose if keys.null_count and self.loose.num_rows else self.loose.slice(0, 0)
        return self.index.rows_with(values), loose

    def among(self, rows: pa.Table) -> pa.Table:
        """The present edges (with their counts) equal to some row of ``rows`` (edge columns;
        NULL equal to NULL)."""
        from sqlext.streaming.keyed_rows import restrict

        if rows.num_rows == 0 or (self.index.table.num_rows == 0 and self.loose.num_rows == 0):
            return self.loose.slice(0, 0)  # nothing to meet (a first run): no search of every row
        positions, loose = self._near(rows)
        near = pa.concat_tables([self.index.table.take(pa.array(positions, pa.int64())), loose])
        return restrict(near, rows, self.columns)

    def changed(self, counts: pa.Table, new: bool = False) -> "_Present":
        """The edges after ``counts``: each touched edge (edge columns, and its count after
        the batch; one row per edge) with its new count, present while it is above 0. ``new``:
        none of them is present yet."""
        import pyarrow.compute as pc

        from sqlext.streaming.keyed_rows import exclude, restrict

        drop, loose = None, self.loose
        if not new and counts.num_rows:
            positions, _ = self._near(counts)
            near = self.index.table.select(self.columns).take(pa.array(positions, pa.int64())) \
                .append_column("__sx_at", pa.array(positions, pa.int64()))
            drop = restrict(near, counts, self.columns)["__sx_at"].to_numpy()
            if loose.num_rows:
                loose = exclude(loose, counts, self.columns)
        kept = counts.filter(pc.greater(counts[COUNT], 0)).select(self.columns + [COUNT]) \
            .cast(self.index.table.schema)
        valid = pc.is_valid(kept[self.key])
        loose = pa.concat_tables([loose, kept.filter(pc.invert(valid))])
        return _Present(self.index.changed(self.key, drop, kept.filter(valid)), loose, self.columns, self.key)


# the recursion's columns and compiled walk, by statement, edge columns and session (see _compiled)
_COMPILED = Recent(16)


def _compiled(spark, shape: RecursionShape, edges):
    """The recursion's columns (:func:`_row_schema`) and its step compiled for the graph walk
    (:func:`_walk_plan`). Each is Spark's analysis of the statement over the edges' columns,
    which gives the same answer every run of the statement: a process keeps it for the runs
    after the first (each run starts a new query), by the anchor's and step's text, the
    columns, the edge columns and the settings the analysis reads, in the session that
    analysed it."""
    from sqlext.functions.recursive_expand import DEFAULT_ROW_LIMIT, ROW_LIMIT_CONF

    key = (to_sql(shape.anchor), to_sql(shape.step), tuple(shape.columns or ()), edges.json(),
           spark.conf.get(ROW_LIMIT_CONF, str(DEFAULT_ROW_LIMIT)), spark.conf.get("spark.sql.ansi.enabled"))
    kept = _COMPILED.get(key)
    if kept is not None and kept[0] is spark:
        return kept[1], kept[2]
    rows = _row_schema(spark, shape, edges)
    plan = _walk_plan(spark, shape, rows, edges)
    _COMPILED.put(key, (spark, rows, plan))
    return rows, plan


def _row_schema(spark, shape: RecursionShape, edges):
    """The recursion's columns and types: the anchor's (the step's rows are cast to them), read
    from Spark's analysis of the anchor over the stream's columns (nothing runs)."""
    from pyspark.sql.types import StructField, StructType

    view = f"__sx_rec_schema_{id(shape)}"
    spark.createDataFrame([], edges).createOrReplaceTempView(view)
    try:
        anchor = run_statement(spark, to_sql(_over(shape.anchor, shape.name, view))).schema
    finally:
        spark.catalog.dropTempView(view)
    names = shape.columns or anchor.names
    return StructType([StructField(name, field.dataType, True) for name, field in zip(names, anchor.fields)])


def _walk_plan(spark, shape: RecursionShape, rows, edges):
    """The step compiled for the graph walk over Arrow data (the batch recursion's walk path),
    or None where the step is not a walk (it then runs in Spark)."""
    from sqlext.functions.recursive_expand import DEFAULT_ROW_LIMIT, ROW_LIMIT_CONF, RecursiveSpec
    from sqlext.udfs.recursive_plan import _NoWalk, compile_walk

    view = f"__sx_rec_edges_{id(shape)}"
    spark.createDataFrame([], edges).createOrReplaceTempView(view)
    try:
        spec = RecursiveSpec(name=shape.name, columns=rows.names, anchor_sql="",
                             step_sql=to_sql(_over(shape.step, shape.name, view)), distinct=True, max_level=10_000,
                             row_limit=int(spark.conf.get(ROW_LIMIT_CONF, str(DEFAULT_ROW_LIMIT))))
        plan, source, _ = compile_walk(spark, spec, spark.createDataFrame([], rows), lambda sql: sql)
    except (_NoWalk, SqlextError):
        return None
    finally:
        spark.catalog.dropTempView(view)
    if source is None:  # a step that reads the recursion alone: nothing to walk over edges
        return None
    from pyspark.sql.pandas.types import to_arrow_type

    plan.types = [to_arrow_type(f.dataType) for f in rows.fields]
    return plan


def _anchor_over(spark, run: "RecursionRun", edges: pa.Table) -> pa.Table:
    """The anchor over some edges (Arrow data); a constant anchor's rows whatever the edges.
    An anchor that only picks columns of the edge and constants is computed on Arrow data;
    any other runs as one Spark query."""
    shape = run.shape
    if shape.constant_anchor:
        return run_statement(spark, to_sql(shape.anchor)).toArrow()
    if edges.num_rows == 0:
        return run.found.arrow_schema.empty_table().select(run.columns)
    picked = _picked(shape.anchor, edges.column_names)
    if picked is not None:
        schema = run.found.arrow_schema
        arrays = [edges[value].cast(schema.field(i).type) if kind == "column"
                  else pa.array([value] * edges.num_rows).cast(schema.field(i).type)
                  for i, (kind, value) in enumerate(picked)]
        return pa.table(arrays, names=run.columns)
    view = run._view(arrow_frame(spark, edges), "anchor_edges")
    return run_statement(spark, to_sql(_over(shape.anchor, shape.name, view))).toArrow()


def _picked(anchor: exp.Select, columns: list[str]):
    """The anchor as ("column", name) and ("constant", value) items, where it is only that: no
    WHERE, every output a column of the edge or a number or string literal; else None."""
    if any(anchor.args.get(k) for k in ("where", "joins", "group", "having", "qualify", "distinct")):
        return None
    present = {c.lower(): c for c in columns}
    picked = []
    for expression in anchor.expressions:
        node = expression.this if isinstance(expression, exp.Alias) else expression
        if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star) and node.name.lower() in present:
            picked.append(("column", present[node.name.lower()]))
        elif isinstance(node, exp.Literal) and node.is_string:
            picked.append(("constant", node.this))
        elif isinstance(node, exp.Literal) and node.this.lstrip("-").isdigit():
            picked.append(("constant", int(node.this)))
        else:
            return None
    return picked


def _counts_of(net: pa.Table, every: pa.Table, columns) -> pa.Array:
    """Each edge of ``net``'s count in ``every`` (0 where it has none)."""
    from sqlext.streaming.keyed_rows import restrict

    if every.num_rows == 0 or net.num_rows == 0:
        return pa.array([0] * net.num_rows, pa.int64())
    known = {tuple(r[c] for c in columns): r[COUNT] for r in restrict(every, net, list(columns)).to_pylist()}
    return pa.array([known.get(tuple(r[c] for c in columns), 0) for r in net.select(list(columns)).to_pylist()],
                    pa.int64())


def _narrowed(rows: pa.Table, wanted: pa.Table, pairs, wanted_columns) -> pa.Table:
    """``rows`` whose columns named in ``pairs`` ((position in ``wanted``, column of ``rows``))
    hold the values of some row of ``wanted`` there; all of ``rows`` where no pair applies."""
    from sqlext.streaming.keyed_rows import restrict

    present = {c.lower(): c for c in rows.column_names}
    pairs = [(i, present[c.lower()]) for i, c in pairs if c.lower() in present]
    if not pairs or rows.num_rows == 0:
        return rows
    keys = wanted.select([wanted_columns[i] for i, _ in pairs])
    keys = pa.table([keys.column(j).cast(rows.schema.field(c).type) for j, (_, c) in enumerate(pairs)],
                    names=[c for _, c in pairs])
    return restrict(rows, keys, [c for _, c in pairs])


def _with(rows: pa.Table, column: str, value) -> pa.Table:
    kind = pa.bool_() if isinstance(value, bool) else pa.string()
    return rows.append_column(column, pa.repeat(pa.scalar(value, kind), rows.num_rows))


def _distinct(table: pa.Table) -> pa.Table:
    """The table's distinct rows: of integer columns (the usual ids), packed one number a row
    and sorted; else grouped by every column."""
    from sqlext.udfs.recursive_expand import distinct_rows

    if table.num_rows < 2:
        return table
    packed = distinct_rows(table)
    if packed is not None:
        return packed
    return table.group_by(table.column_names, use_threads=False).aggregate([]).select(table.column_names)


def _exclude_rows(rows: pa.Table, taken: pa.Table, columns) -> pa.Table:
    """The rows of ``rows`` equal (NULL equal to NULL) to no row of ``taken``."""
    return exclude(rows, taken.select(list(columns)).cast(rows.select(list(columns)).schema), list(columns))


def _refuse_absent(edge, before: str, shape: RecursionShape) -> None:
    """An edge deleted more often than inserted is a classed error naming it."""
    if edge is not None:
        values = {k: v for k, v in edge.asDict().items() if k not in (COUNT, before)}
        inserts_less_deletes = edge[before] + edge[COUNT]
        raise SqlextError("DELETE_OF_ABSENT_ROW", function=FUNCTION, name=to_sql(shape.stream.this),
                          row="(" + ", ".join(f"{k}={v!r}" for k, v in values.items()) + ")",
                          excess=-inserts_less_deletes)


def _refuse_unknown(bad: dict, order_by: str, shape: RecursionShape) -> None:
    """A change type outside the four is a classed error naming the edge; an update of a
    Debezium feed that lacks the edge it replaces says so."""
    from sqlext.functions.input_formats import UPDATE_WITHOUT_BEFORE

    edge = ", ".join(f"{k}={v!r}" for k, v in bad.items() if k not in (CHANGE_TYPE, order_by))
    if bad[CHANGE_TYPE] == UPDATE_WITHOUT_BEFORE:
        raise _unsupported(f"{to_sql(shape.stream.this)}, whose update at {order_by} = {bad.get(order_by)!r} has no "
                           "before row", "an edge has no key, so an update must say which edge it replaces",
                           "Make Debezium send the row before each update (in Postgres, ALTER TABLE ... REPLICA "
                           "IDENTITY FULL), or write the update as a delete and a create.")
    raise SqlextError("UNKNOWN_CHANGE_TYPE", function=FUNCTION, key=f"({edge})", value=repr(bad[CHANGE_TYPE]))


def _over(query: exp.Select, name: str, stream_view: str, result_view: str | None = None) -> exp.Select:
    """``query`` reading ``stream_view`` for the stream and, given ``result_view``, that view for
    the recursion ``name`` (under the recursion's name, so its column references still hold)."""
    query = query.copy()
    for table in list(query.find_all(exp.Table)):
        stream = _is_stream(table)
        if stream or (result_view and table.name == name):
            replacement = exp.Table(this=exp.to_identifier(stream_view if stream else result_view))
            if table.args.get("alias"):
                replacement.set("alias", table.args["alias"].copy())
            elif not stream:
                replacement.set("alias", exp.TableAlias(this=exp.to_identifier(name)))
            table.replace(replacement)
    return query


def _same(rows, other):
    """Equal (NULL equal to NULL) on every column of ``other`` (``rows`` has them too), with
    ``other``'s columns renamed apart."""
    from functools import reduce

    from pyspark.sql import functions as F

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
    from pyspark.sql import functions as F

    taken = taken.localCheckpoint()
    if not few and taken.count() > BROADCAST_ROWS:
        return rows.subtract(taken).localCheckpoint()
    theirs, same = _same(rows, taken)
    return rows.join(F.broadcast(theirs), same, "left_anti").localCheckpoint()


def _minus(rows, found):
    """The distinct ``rows`` that are not among the rows ``found`` so far, materialised. Few
    rows (the usual increment) are broadcast and matched against one scan of ``found``; many
    are compared with ``EXCEPT``, which shuffles both."""
    from pyspark.sql import functions as F

    rows = rows.localCheckpoint()
    if found is None:
        return rows
    if rows.count() > BROADCAST_ROWS:
        return rows.subtract(found).localCheckpoint()
    return _without(rows, _match(found, F.broadcast(rows), "left_semi"), few=True)

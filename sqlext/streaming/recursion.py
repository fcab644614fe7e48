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
``TableStateRecursion._changes``): the state then counts each edge's inserts less its deletes,
a batch that removes edges deletes and re-derives what they reached (DRed), and the output is
the change feed of ``r``'s rows.

Each folder holds a ``base`` (written by a batch that rewrote the whole state) and the
``batch`` files after it. A batch reads only the files of earlier batches and replaces its
own, so a replayed batch writes the same rows and state again.
"""

from __future__ import annotations

from sqlglot import exp

from sqlext.catalog.arguments import quote
from sqlext.catalog.changes import CHANGE_TYPE, CHANGE_TYPES, DEFAULT_ORDER_BY, DELETE, INSERT, SETS_VALUE
from sqlext.errors import SqlextError
from sqlext.rewrites.dialect import is_stream as _is_stream
from sqlext.rewrites.dialect import to_sql
from sqlext.runner import run_statement
from sqlext.streaming.run import TableStateRun, forget_batch_files, read_batch_files, write_batch_files

FUNCTION = "sqlext stream"
# an edge's count in the state (inserts less deletes), and before the batch
COUNT, BEFORE = "__sx_n", "__sx_before"
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


class TableStateRecursion(TableStateRun):
    """The ``foreachBatch`` function of one incremental recursion."""

    def __init__(self, shape: RecursionShape, checkpoint: str, output: str, output_format: str):
        super().__init__(None, shape.main, shape.name, checkpoint, output, output_format, FUNCTION, ())
        self.shape = shape
        self.edges_folder, self.result_folder = self.state / "edges", self.state / "result"
        self.changes_folder = self.state / "changes"

    def __call__(self, batch, batch_id: int) -> None:
        self._views: list[str] = []
        try:
            if CHANGE_TYPE in batch.columns:
                self._changes(batch, batch_id)
            else:
                self._arrivals(batch, batch_id)
        finally:
            for name in self._views:
                batch.sparkSession.catalog.dropTempView(name)

    def _view(self, frame, role: str) -> str:
        name = f"__sx_rec_{role}_{len(self._views)}"
        frame.createOrReplaceTempView(name)
        self._views.append(name)
        return name

    def _arrivals(self, batch, batch_id: int) -> None:
        """Edges that only arrive: the batch's new rows of the recursion, and its edges, are
        appended to the state."""
        spark = batch.sparkSession
        old = read_batch_files(spark, self.edges_folder, batch_id, batch.schema)
        all_edges = batch if old is None else old.unionByName(batch)
        found = read_batch_files(spark, self.result_folder, batch_id)
        new = self._reached(spark, batch, all_edges, found)
        if new is not None:
            write_batch_files(new, self.result_folder, batch_id, "parquet")
        write_batch_files(batch, self.edges_folder, batch_id, "parquet")
        written = read_batch_files(spark, self.result_folder, batch_id, only=True)
        if written is not None:
            self.write_statement(spark, written, batch_id)

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
        return _minus(self._recursion(spark, seeds, seeds.columns, all_view), found)

    def _rows(self, parts, found):
        """Frames of the recursion's rows under its column names and types (those of the rows
        found so far, else of the first frame), as one frame."""
        from pyspark.sql import functions as F

        names = self.shape.columns or parts[0].columns
        types = [f.dataType for f in (found if found is not None else parts[0]).schema.fields]
        rows = None
        for part in parts:
            part = part.toDF(*names).select(*[F.col(quote(n)).cast(t) for n, t in zip(names, types)])
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
        edges reach is recomputed; the rows found so far are rewritten as a new base."""
        from pyspark.sql import functions as F

        spark = batch.sparkSession
        order = [c for c in batch.columns if c == DEFAULT_ORDER_BY]
        columns = [c for c in batch.columns if c not in (CHANGE_TYPE, DEFAULT_ORDER_BY)]
        unknown = ~F.col(CHANGE_TYPE).isin(*CHANGE_TYPES) | F.col(CHANGE_TYPE).isNull()
        summary = batch.agg(F.max(F.col(DEFAULT_ORDER_BY) if order else F.lit(None)), F.max(unknown)).first()
        version = summary[0]
        if summary[1]:
            _refuse_unknown(batch.where(unknown).first())
        sign = F.when(F.col(CHANGE_TYPE).isin(*SETS_VALUE), F.lit(1)).otherwise(F.lit(-1))
        net = batch.groupBy(*[F.col(quote(c)) for c in columns]).agg(F.sum(sign).cast("bigint").alias(COUNT)) \
            .where(F.col(COUNT) != 0).localCheckpoint()
        old = read_batch_files(spark, self.edges_folder, batch_id, net.schema)
        touched = net.withColumn(BEFORE, F.lit(0).cast("bigint"))
        if old is not None:
            picked = F.broadcast(net.select(*[F.col(quote(c)) for c in columns]))
            touched = touched.unionByName(
                _match(old, picked, "left_semi").withColumn(BEFORE, F.col(COUNT)).withColumn(COUNT, F.lit(0).cast("bigint")))
        touched = touched.groupBy(*[F.col(quote(c)) for c in columns]) \
            .agg(F.sum(BEFORE).alias(BEFORE), F.sum(COUNT).alias(COUNT)).localCheckpoint()
        after = F.col(BEFORE) + F.col(COUNT)
        goes = (F.col(BEFORE) > 0) & (after <= 0)
        absent, lowered, any_removed = touched.agg(F.min(after) < 0, F.min(COUNT) < 0, F.max(goes)).first()
        if absent:
            _refuse_absent(touched.where(after < 0).first(), BEFORE, self.shape)
        added = touched.where((F.col(BEFORE) <= 0) & (after > 0)).select(*[F.col(quote(c)) for c in columns])
        removed = touched.where(goes).select(*[F.col(quote(c)) for c in columns])
        if lowered:  # counts fall: the present edges are recounted into a new base
            counts = net if old is None else old.unionByName(net)
            counts = counts.groupBy(*[F.col(quote(c)) for c in columns]).agg(F.sum(COUNT).alias(COUNT)) \
                .where(F.col(COUNT) > 0).localCheckpoint()
            present = counts
        else:
            present = net if old is None else old.unionByName(net)
        edges_now = present.select(*[F.col(quote(c)) for c in columns])
        found = read_batch_files(spark, self.result_folder, batch_id)
        if found is None or not any_removed:
            new = self._reached(spark, added, edges_now, found)
            gone = None
            if new is not None:
                write_batch_files(new, self.result_folder, batch_id, "parquet")
        else:
            edges_before = old.select(*[F.col(quote(c)) for c in columns])
            gone, new, everything = self._rederive(spark, found, removed, added, edges_before, edges_now)
            write_batch_files(everything, self.result_folder, batch_id, "parquet", kind="base")
        if lowered:
            write_batch_files(counts, self.edges_folder, batch_id, "parquet", kind="base")
        else:
            write_batch_files(net, self.edges_folder, batch_id, "parquet")
        output = []
        if gone is not None:
            output.append(gone.withColumn(CHANGE_TYPE, F.lit(DELETE)))
        if new is not None:
            output.append(new.withColumn(CHANGE_TYPE, F.lit(INSERT)))
        if output:
            rows = output[0] if len(output) == 1 else output[0].unionByName(output[1])
            if order:
                rows = rows.withColumn(DEFAULT_ORDER_BY, F.lit(version).cast(batch.schema[DEFAULT_ORDER_BY].dataType))
            write_batch_files(rows, self.changes_folder, batch_id, "parquet")
        forget_batch_files(self.edges_folder, batch_id)
        forget_batch_files(self.result_folder, batch_id)
        written = read_batch_files(spark, self.changes_folder, batch_id, only=True)
        if written is not None:
            self.write_statement(spark, written, batch_id, carry=(CHANGE_TYPE, *order))

    def _rederive(self, spark, found, removed, added, edges_before, edges_now):
        """Delete and re-derive: ``(gone, inserted, after)``: the rows no longer reached, the
        rows newly reached (None when none), and every row reached after the batch."""
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
            return suspects, None, kept
        inserted = _without(reached, suspects)
        return _without(suspects, reached), (None if inserted.isEmpty() else inserted), kept.unionByName(reached)

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


def _refuse_absent(edge, before: str, shape: RecursionShape) -> None:
    """An edge deleted more often than inserted is a classed error naming it."""
    if edge is not None:
        values = {k: v for k, v in edge.asDict().items() if k not in (COUNT, before)}
        inserts_less_deletes = edge[before] + edge[COUNT]
        raise SqlextError("DELETE_OF_ABSENT_ROW", function=FUNCTION, name=to_sql(shape.stream.this),
                          row="(" + ", ".join(f"{k}={v!r}" for k, v in values.items()) + ")",
                          excess=-inserts_less_deletes)


def _refuse_unknown(bad) -> None:
    """A change type outside the four is a classed error naming the edge."""
    edge = ", ".join(f"{k}={v!r}" for k, v in bad.asDict().items() if k not in (CHANGE_TYPE, DEFAULT_ORDER_BY))
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

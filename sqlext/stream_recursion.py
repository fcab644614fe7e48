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
batch result. Edges only arrive (a stream with change types, which could delete edges, is
refused), and ``UNION ALL`` is refused: it counts derivations, which this state does not keep.

A batch reads only the files of earlier batches and replaces its own, so a replayed batch
writes the same rows and state again.
"""

from __future__ import annotations

from sqlglot import exp

from sqlext.catalog.changes import CHANGE_TYPE
from sqlext.errors import SqlextError
from sqlext.rewrites.dialect import is_stream as _is_stream
from sqlext.rewrites.dialect import to_sql
from sqlext.stream_tables import TableStateRun, read_batch_files, write_batch_files

FUNCTION = "sqlext stream"
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

    def _tables(self, query: exp.Expression) -> list[exp.Table]:
        return [t for t in query.find_all(exp.Table)]

    def _check(self) -> None:
        _only_rows(self.anchor, "anchor")
        _only_rows(self.step, "step")
        _only_rows(self.main, "outer query")
        anchor = self._tables(self.anchor)
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

    def __call__(self, batch, batch_id: int) -> None:
        from pyspark.sql import functions as F

        from sqlext.runner import run_statement

        spark = batch.sparkSession
        if CHANGE_TYPE in batch.columns:
            raise _unsupported("a recursion over a change feed", f"the stream has a {CHANGE_TYPE} column, and an "
                               "incremental recursion takes edges that only arrive (never deleted or changed)",
                               "Read a stream of edge rows, or run the recursion as a batch query.")
        shape, views = self.shape, []
        edges_folder, result_folder = self.state / "edges", self.state / "result"

        def view(frame, role: str) -> str:
            name = f"__sx_rec_{role}_{batch_id}"
            frame.createOrReplaceTempView(name)
            views.append(name)
            return name

        def over(query: exp.Select, stream_view: str, result_view: str | None = None) -> str:
            return to_sql(_over(query, shape.name, stream_view, result_view))

        try:
            new_edges = view(batch, "new_edges")
            old = read_batch_files(spark, edges_folder, lambda i: i < batch_id, batch.schema)
            all_edges = view(batch if old is None else old.unionByName(batch), "edges")
            found = read_batch_files(spark, result_folder, lambda i: i < batch_id)
            # the anchor over the new edges (a constant anchor again each batch: what earlier
            # batches found of it is taken away below), and the rows found so far met by new edges
            anchor = run_statement(spark, over(shape.anchor, new_edges))
            names = shape.columns or anchor.columns
            parts = [anchor]
            if found is not None:
                parts.append(run_statement(spark, over(shape.step, new_edges, view(found, "found"))))
            types = [f.dataType for f in (found if found is not None else anchor).schema.fields]
            seeds = None
            for part in parts:
                part = part.toDF(*names).select(*[F.col(n).cast(t) for n, t in zip(names, types)])
                seeds = part if seeds is None else seeds.unionByName(part)
            seeds = _minus(seeds.distinct(), found)
            if not seeds.isEmpty():
                new = _minus(self._recursion(spark, seeds, names, all_edges, view), found)
                write_batch_files(new, result_folder, batch_id, "parquet")
            write_batch_files(batch, edges_folder, batch_id, "parquet")
            written = read_batch_files(spark, result_folder, lambda i: i == batch_id)
            if written is not None:
                self.write_statement(spark, written, batch_id)
        finally:
            for name in views:
                spark.catalog.dropTempView(name)

    def _recursion(self, spark, seeds, names: list[str], all_edges: str, view):
        """Every row the recursion reaches from ``seeds`` over all edges (``seeds`` included)."""
        from sqlext.runner import run_statement

        shape = self.shape
        seeds_view = view(seeds, "seeds")
        step = _over(shape.step, shape.name, all_edges)
        anchor = exp.select("*").from_(exp.Table(this=exp.to_identifier(seeds_view)))
        cte = exp.CTE(this=exp.union(anchor, step, distinct=True),
                      alias=exp.TableAlias(this=exp.to_identifier(shape.name),
                                           columns=[exp.to_identifier(n) for n in names]))
        statement = exp.select("*").from_(exp.Table(this=exp.to_identifier(shape.name)))
        statement.set("with_", exp.With(expressions=[cte], recursive=True))
        return run_statement(spark, to_sql(statement))


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


def _minus(rows, found):
    """The distinct ``rows`` that are not among the rows ``found`` so far, materialised. Few
    rows (the usual increment) are broadcast and matched against one scan of ``found``; many
    are compared with ``EXCEPT``, which shuffles both."""
    from functools import reduce

    from pyspark.sql import functions as F

    rows = rows.localCheckpoint()
    if found is None:
        return rows
    if rows.count() > BROADCAST_ROWS:
        return rows.subtract(found).localCheckpoint()
    names = rows.columns
    ours = rows.toDF(*[f"__sx_r{i}" for i in range(len(names))])
    theirs = found.toDF(*[f"__sx_f{i}" for i in range(len(names))])
    same = reduce(lambda a, b: a & b, [F.col(f"__sx_f{i}").eqNullSafe(F.col(f"__sx_r{i}")) for i in range(len(names))])
    seen = theirs.join(F.broadcast(ours), same, "left_semi").toDF(*names)
    return rows.subtract(seen).localCheckpoint()

"""Incremental self-join of one stream within a time band (KIP-862), with one state for both sides.

A statement of the shape

    SELECT ... FROM STREAM(ev) AS a JOIN STREAM(ev) AS b
      ON a.k = b.k AND b.ts BETWEEN a.ts - <lower> AND a.ts + <upper> [AND ...] [WHERE ...]

pairs the events of one append-only stream. The batch result over the whole stream is every
pair; a run adds the pairs that hold at least one new event. With ``N`` the run's new events
and ``S`` the events of earlier runs, those are the pairs of ``N`` (as ``a``) with ``S`` and
``N`` (as ``b``), and of ``S`` (as ``a``) with ``N`` (as ``b``): the statement run twice, each
time with its two sides read from the named parts, so every condition of the statement holds
as written and each pair comes once.

Spark's own stream-stream join keeps the rows of each side in a state of its own: the same
events twice. Here both sides read one :class:`~sqlext.streaming.state.KeyedState` of events
(each under the batch and position it arrived at). An event can pair only with events whose
time is within the band's width ``W`` of its own, so the state keeps the events of the last
``W`` plus the allowed lateness (``W`` too) before the newest time seen; an older one is
dropped. A new event older than the newest time of earlier runs by more than the lateness could
miss partners already dropped, so it stops the run with ``[LATE_CHANGE]``, nothing written.
"""

from __future__ import annotations

from datetime import timedelta

from sqlglot import exp

from sqlext.catalog.arguments import quote
from sqlext.errors import SqlextError
from sqlext.rewrites.dialect import is_stream, to_sql
from sqlext.streaming.run import STEPS, TableStateRun, step
from sqlext.streaming.sources import stream_names
from sqlext.streaming.state import KeyedState

FUNCTION = "sqlext stream"
BATCH, ROW = "__sx_batch", "__sx_row"


def _unsupported(what: str, reason: str, fix: str) -> SqlextError:
    return SqlextError("UNSUPPORTED_STREAM", function=FUNCTION, what=what, reason=reason, fix=fix)


def is_self_join(tree: exp.Expression) -> bool:
    """Whether the statement joins one stream with itself: two ``STREAM(...)`` reads of one
    source, and no table function."""
    streams = [t for t in tree.find_all(exp.Table) if is_stream(t)]
    return len(streams) == 2 and stream_names(streams[0].this) == stream_names(streams[1].this)


class SelfJoinShape:
    """The parts of an incremental self-join statement (see the module's docstring), checked
    against the stream's columns with Spark's analysis (nothing runs)."""

    def __init__(self, spark, tree: exp.Expression, schema):
        from sqlext.rewrites.self_joins import match_self_join
        from sqlext.session import SparkRelations

        if not isinstance(tree, exp.Select) or tree.args.get("with_"):
            raise _unsupported("this self-join", "it is not one SELECT", "Write SELECT ... FROM STREAM(ev) AS a "
                               "JOIN STREAM(ev) AS b ON a.k = b.k AND b.ts BETWEEN a.ts - ... AND a.ts + ...")
        clauses = [k for k in ("group", "having", "order", "limit", "offset", "distinct", "qualify") if tree.args.get(k)]
        if clauses or any(tree.find_all(exp.AggFunc)) or any(tree.find_all(exp.Window)) \
                or any(s is not tree for s in tree.find_all(exp.Select)):
            raise _unsupported("an aggregate, window, DISTINCT, ORDER BY, LIMIT or subquery over a self-join of a "
                               "stream", "a run adds pairs; it cannot change rows an earlier run wrote",
                               "Select the pairs incrementally (row by row), and aggregate the output folder in a "
                               "batch query, or run the whole statement as a batch query (sqlext.sql).")
        joins = tree.args.get("joins") or []
        items = [tree.args["from_"].this] + [j.this for j in joins] if tree.args.get("from_") else []
        if len(items) != 2 or not all(is_stream(i) for i in items):
            raise _unsupported("this self-join", "an incremental self-join reads the stream twice and nothing else",
                               "Write FROM STREAM(ev) AS a JOIN STREAM(ev) AS b ON ...")
        self.tree = tree
        self.left_alias, self.right_alias = items[0].alias_or_name, items[1].alias_or_name
        view = f"__sx_self_{id(self)}"
        spark.createDataFrame([], schema).createOrReplaceTempView(view)
        try:
            named = self.over(view, view)
            join = match_self_join(named, SparkRelations(spark))
        finally:
            spark.catalog.dropTempView(view)
        if isinstance(join, str):
            raise _unsupported("this self-join", join, "Join the stream with itself on equal keys and a band: "
                               "ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL 5 MINUTES AND a.ts")
        band = join.band
        if band is None or band.lower is None or band.upper is None:
            raise _unsupported("this self-join", "it has no band with both ends on one time column, so every "
                               "event could pair with every later one and the state would keep them all",
                               "Bound both sides: b.ts BETWEEN a.ts - INTERVAL ... AND a.ts + INTERVAL ...")
        self.column = band.column
        self.kind = band.lower.offset.kind or band.upper.offset.kind
        self.width = max(abs(band.lower.offset.value), abs(band.upper.offset.value))

    def over(self, left_view: str, right_view: str) -> exp.Select:
        """The statement with its first side read from ``left_view`` and its second from
        ``right_view`` (each keeping its alias, so the conditions hold as written)."""
        tree = self.tree.copy()
        items = [tree.args["from_"].this, tree.args["joins"][0].this]
        for item, view in zip(items, (left_view, right_view)):
            replacement = exp.Table(this=exp.to_identifier(view),
                                    alias=exp.TableAlias(this=exp.to_identifier(item.alias_or_name)))
            item.replace(replacement)
        return tree

    def distance(self, value):
        """``value`` times the band's width, in the time column's units."""
        if self.kind == "interval":
            return timedelta(microseconds=int(self.width) * value)
        width = self.width * value
        return int(width) if width == int(width) else float(width)


class TableStateSelfJoin(TableStateRun):
    """The ``foreachBatch`` function of one incremental self-join."""

    def __init__(self, shape: SelfJoinShape, placeholder: str, checkpoint: str, output: str, output_format: str,
                 schema):
        super().__init__(None, shape.tree, placeholder, checkpoint, output, output_format, FUNCTION, ())
        from pyspark.sql.types import LongType, StructField, StructType

        self.shape = shape
        self.columns = schema.names
        self.events = KeyedState(self.state / "events", [BATCH, ROW], share=0.0)  # compacted each run
        self.events.record_schema(StructType(list(schema.fields) + [StructField(BATCH, LongType(), False),
                                                                   StructField(ROW, LongType(), False)]))

    def __call__(self, batch, batch_id: int) -> None:
        from pyspark.sql import functions as F

        spark, shape = batch.sparkSession, self.shape
        STEPS.clear()
        view = self.events.before(batch_id)
        newest = self.recorded("newest", batch_id)  # the newest time an earlier run saw
        new = batch
        with step("check the increment"):
            highest, lowest = new.agg(F.max(F.col(quote(shape.column))), F.min(F.col(quote(shape.column)))).first()
            if newest is not None and lowest is not None and lowest < newest - shape.distance(1):
                self._refuse_late(new, newest)
        views = []
        try:
            with step("pair the events"):
                old = None
                if not view.empty and newest is not None:
                    kept = newest - shape.distance(2)
                    old = view.frame(spark).where(F.col(quote(shape.column)) >= F.lit(kept)) \
                        .select(*[F.col(quote(c)) for c in self.columns])
                names = {}
                for role, frame in (("new", new), ("old", old), ("all", new if old is None else new.unionByName(old))):
                    if frame is not None:
                        names[role] = f"__sx_pairs_{role}_{batch_id}"
                        frame.createOrReplaceTempView(names[role])
                        views.append(names[role])
                statement = shape.over(names["new"], names["all"])
                if "old" in names:
                    statement = exp.union(statement, shape.over(names["old"], names["new"]), distinct=False)
                pairs = spark.sql(to_sql(exp.select("*").from_(exp.Subquery(this=statement, alias="p"))))
                self.write_statement(spark, pairs, batch_id)
        finally:
            for name in views:
                spark.catalog.dropTempView(name)
        with step("write the state"):
            top = max([v for v in (newest, highest) if v is not None], default=None)
            rows = new.select(*[F.col(quote(c)) for c in self.columns], F.lit(batch_id).cast("bigint").alias(BATCH),
                              F.monotonically_increasing_id().alias(ROW))
            keep = None if top is None else F.col(quote(shape.column)) >= F.lit(top - shape.distance(2))
            self.events.write(view, rows, batch_id, keep=keep)
            self.record("newest", batch_id, top)

    def write_statement(self, spark, forwarded, batch_id: int, carry=(), whole: bool = False) -> None:
        """The pairs are the statement's rows already: they are written as they are."""
        from sqlext.streaming.checkpoint import check_columns
        from sqlext.streaming.run import write_batch_files

        check_columns(self.checkpoint, str(self.output), [(f.name, f.dataType.simpleString())
                                                          for f in forwarded.schema.fields])
        write_batch_files(forwarded, self.output, batch_id, self.output_format)

    def _refuse_late(self, new, newest) -> None:
        """A new event older than the newest time of earlier runs by more than the band's
        width could pair with events the state no longer holds: ``[LATE_CHANGE]``."""
        from pyspark.sql import functions as F

        shape = self.shape
        limit = newest - shape.distance(1)
        late = new.where(F.col(quote(shape.column)) < F.lit(limit)).limit(1).collect()
        if late:
            raise SqlextError(
                "LATE_CHANGE", function=FUNCTION, key="(an event of the self-join)", order_by=shape.column,
                value=repr(late[0][shape.column]), last=repr(limit),
                earlier=f"the newest {shape.column} an earlier run saw less the band's width",
                fix="Land events in time order (within the band's width), or run the statement as a batch query.")

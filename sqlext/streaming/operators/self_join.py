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

The events are kept by their join keys, so an event and every partner it can have are in one
bucket: the self-join is one of the engine's keyed operators (:class:`SelfJoinOperator`),
placed on the driver or the executors as any other, rescaled, and cut into parts at the band's
times. Its step finds the pairs over Arrow data (:class:`BandPairs`); the statement's rows are
made there too where all of it computes over Arrow data as Spark computes it
(:class:`ArrowPairs`), else Spark runs the statement over the pairs found
(:meth:`SelfJoinShape.over_pairs`). An aggregate over the pairs is a second keyed operator
(:class:`~sqlext.streaming.operators.self_join_aggregate.SelfJoinAggregateOperator`), to which
the step forwards each pair's grouping values and arguments. A statement whose keys or band
the step does not pair, or an aggregate whose partials Arrow does not compute as Spark does (a
MIN or MAX over floating-point values), keeps the run of its own (:class:`SelfJoinRun`): one
bucket, the pairs made in Spark.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType
from sqlglot import exp

from sqlext.functions.arguments import quote
from sqlext.functions.changes import CHANGE_TYPE, DEFAULT_ORDER_BY
from sqlext.errors import SqlextError
from sqlext.language.dialect import is_stream, to_sql
from sqlext.analysis.self_join_match import match_self_join
from sqlext.runner import run_statement
from sqlext.session import SparkRelations
from sqlext.streaming.arrow_sql import arrow_expression, evaluate
from sqlext.streaming.checkpoint import check_columns
from sqlext.streaming.engine import Input, KeyedOperator, Step
from sqlext.streaming.run import (StatefulRun, adaptive, arrow_frame, arrow_schema, instant, on_driver, spark_columns,
                                  step)
from sqlext.streaming.operators.self_join_aggregate import TAG, GroupedPairs, is_grouped
from sqlext.streaming.shapes import stream_names
from sqlext.streaming.source_files import batch_rows
from sqlext.streaming.state import KeyedState
from sqlext.udfs.column_wise import codes, pairs_within, take

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
        if not isinstance(tree, exp.Select) or tree.args.get("with_"):
            raise _unsupported("this self-join", "it is not one SELECT", "Write SELECT ... FROM STREAM(ev) AS a "
                               "JOIN STREAM(ev) AS b ON a.k = b.k AND b.ts BETWEEN a.ts - ... AND a.ts + ...")
        clauses = [k for k in ("order", "limit", "offset", "distinct", "qualify") if tree.args.get(k)]
        if clauses or any(tree.find_all(exp.Window)) or any(s is not tree for s in tree.find_all(exp.Select)):
            raise _unsupported("a window, DISTINCT, ORDER BY, LIMIT or subquery over a self-join of a stream",
                               "a run adds pairs, or adds them to the groups of an aggregate; it cannot change rows "
                               "an earlier run wrote otherwise",
                               "Select the pairs (or aggregate them with GROUP BY) incrementally, and order or limit "
                               "the output folder in a batch query, or run the whole statement as a batch query "
                               "(sqlext.sql).")
        joins = tree.args.get("joins") or []
        items = [tree.args["from_"].this] + [j.this for j in joins] if tree.args.get("from_") else []
        if len(items) != 2 or not all(is_stream(i) for i in items):
            raise _unsupported("this self-join", "an incremental self-join reads the stream twice and nothing else",
                               "Write FROM STREAM(ev) AS a JOIN STREAM(ev) AS b ON ...")
        self.tree = tree
        self.left_alias, self.right_alias = items[0].alias_or_name, items[1].alias_or_name
        view = f"__sx_self_{id(self)}"
        spark.createDataFrame([], schema).createOrReplaceTempView(view)
        self.grouped = None
        try:
            named = self.over(view, view)
            join = match_self_join(named, SparkRelations(spark))
            if is_grouped(tree) and not isinstance(join, str):
                self._analyse_grouped(spark, named)
            elif not isinstance(join, str):
                pairs = spark.sql(to_sql(named))
                if _aggregates(pairs):  # an aggregate function sqlglot does not know as one (try_sum, every, ...)
                    raise _unsupported("an aggregate over a self-join of a stream other than COUNT, SUM, MIN, MAX "
                                       "and AVG", "a run adds pairs, or adds them to the groups of those aggregates",
                                       "Aggregate with COUNT, SUM, MIN, MAX or AVG, or run the whole statement as a "
                                       "batch query (sqlext.sql).")
                self.output = pairs.schema  # the pairs' columns, as Spark gives them
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
        # a collated string compares as its collation says (UTF8_LCASE: 'Ab' = 'aB'), which Arrow's
        # comparisons and the pairs' plain columns do not: such a stream pairs in Spark, as written
        collated = " collate " in schema.simpleString().lower()
        self.arrow = None if self.grouped is not None or collated else ArrowPairs.of(join, arrow_schema(schema), self)
        # how the engine's operator pairs this statement's events (None: the run of its own
        # below does): its rows made over Arrow data, or the pairs its keys and band allow,
        # which the statement then reads (:meth:`over_pairs`)
        self.pairing = self.arrow
        self.projection = None  # an aggregate's grouping values and arguments over the pairs, in Arrow
        if self.arrow is None and not collated:
            self.pairing = BandPairs.of(join, arrow_schema(schema))
            if self.pairing is not None and self.grouped is None and self.over_pairs("__sx_pairs") is None:
                self.pairing = None
            if self.pairing is not None and self.grouped is not None:
                if self.projection_over_pairs("__sx_pairs") is None \
                        or not self.grouped.arrow_partials(arrow_schema(self.projected)):
                    self.pairing = None
                else:
                    self.projection = _projection(self.pairing, join, self.grouped.pairs(self.tree),
                                                  arrow_schema(self.projected))

    def _analyse_grouped(self, spark, named: exp.Select) -> None:
        """The aggregate's parts and their columns, from Spark's analysis of the statement over
        an empty view (nothing runs)."""
        grouped = GroupedPairs(self.tree, spark.sql(to_sql(named)).columns)
        pairs = grouped.pairs(named)
        self.projected = spark.sql(to_sql(pairs)).schema  # each pair's grouping values and arguments
        grouped.check_types(self.projected)
        self.accumulators = spark.sql(to_sql(grouped.partials(pairs))).schema
        view = f"__sx_groups_{id(self)}"
        spark.createDataFrame([], StructType(list(self.accumulators.fields) + [StructField(TAG, BooleanType())])) \
            .createOrReplaceTempView(view)
        try:
            finals = spark.sql(to_sql(grouped.final_rows(self.tree, view))).schema
        finally:
            spark.catalog.dropTempView(view)
        output = StructType([finals[n] for n in grouped.output_names]
                            + [StructField(CHANGE_TYPE, StringType()), StructField(DEFAULT_ORDER_BY, LongType())])
        self.output_arrow = arrow_schema(output)
        self.grouped = grouped

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

    def over_pairs(self, name: str) -> exp.Select | None:
        """The statement over the table ``name`` of the pairs :class:`BandPairs` finds (a row
        a pair, each side's columns under its own names): every condition of its ON and WHERE
        clauses, and its select list, as written, each column of a side read from that side's
        column of the pair, each item named as Spark names it over the stream. None where a
        part of it does not read so (a column without its side, ``*``, a clause besides the
        select list, the join and WHERE)."""
        return self._over_pairs(self.tree, [f.name for f in self.output.fields], name)

    def projection_over_pairs(self, name: str) -> exp.Select | None:
        """For an aggregate: each pair's grouping values and aggregates' arguments (the columns
        of :attr:`projected`) over the table ``name`` of the pairs, as :meth:`over_pairs` reads
        a statement; None where a part of it does not read so."""
        return self._over_pairs(self.grouped.pairs(self.tree), self.projected.names, name)

    def _over_pairs(self, tree: exp.Select, names: list[str], name: str) -> exp.Select | None:
        pairing, pair = self.pairing, "__sx_pair"
        if any(value for key, value in tree.args.items() if key not in ("expressions", "from_", "joins", "where")):
            return None
        join = tree.args["joins"][0]
        if join.args.get("using") or join.side or join.kind not in ("", "INNER"):
            return None
        conditions = [join.args.get("on"), (tree.args.get("where") or exp.Where()).this]
        try:
            items = [exp.alias_(pairing.pair_column(item.unalias(), pair), field, quoted=True)
                     for item, field in zip(tree.expressions, names)]
            where = [pairing.pair_column(c, pair) for c in conditions if c is not None]
        except _NotArrow:
            return None
        statement = exp.select(*items).from_(exp.Table(this=exp.to_identifier(name), alias=exp.TableAlias(
            this=exp.to_identifier(pair))))
        for condition in where:
            statement = statement.where(exp.paren(condition, copy=False), copy=False)
        return statement

    def distance(self, value):
        """``value`` times the band's width, in the time column's units."""
        if self.kind == "interval":
            return timedelta(microseconds=int(self.width) * value)
        width = self.width * value
        return int(width) if width == int(width) else float(width)


class _NotArrow(Exception):
    """A part of the statement that :class:`BandPairs` or :class:`ArrowPairs` does not compute
    as Spark does."""


class BandPairs:
    """The pairs of events a self-join's equal keys and band allow, found over Arrow data.

    The events (a run's and the kept earlier ones) get one integer code per key; the band's
    column is an integer (an integer column, or a timestamp's microseconds), so the partners of
    an event are the events of its code whose value lies within the band around its own: a
    binary search in the events sorted once by code and value
    (:func:`~sqlext.udfs.column_wise.pairs_within`). Only keys whose equality Arrow decides as
    Spark does (integers, text, booleans, dates, timestamps: not floating point, where NaN and
    -0.0 compare otherwise) and a band on an integer or timestamp column are taken (:meth:`of`).
    A pair's columns are the first side's under ``__sx_l<i>`` and the second's under
    ``__sx_r<i>`` (``i`` the column's place in the stream), so that the statement's conditions
    and select list read them by one name each (:meth:`pair_column`)."""

    def __init__(self, join, schema: pa.Schema):
        self.schema = schema
        self.sides = {join.left: "l", join.right: "r"}
        self.pair_schema = pa.schema([pa.field(f"__sx_{side}{i}", f.type) for side in ("l", "r")
                                      for i, f in enumerate(schema)])
        band = join.band
        if not band.exact:
            raise _NotArrow("a strict band edge on a continuous column")
        self.band = self._position(band.column)
        band_type = schema.field(self.band).type
        # a TIMESTAMP (an instant, in UTC), not a TIMESTAMP_NTZ: the newest time a run records and
        # the state's floor are instants
        if pa.types.is_timestamp(band_type) and band_type.unit == "us" and band_type.tz is not None \
                and band.lower.offset.kind != "number" and band.upper.offset.kind != "number":
            self.bounds = (-(1 << 63), (1 << 63) - 1)
        elif pa.types.is_integer(band_type) and band.lower.offset.kind != "interval" \
                and band.upper.offset.kind != "interval":
            self.bounds = (-(1 << (band_type.bit_width - 1)), (1 << (band_type.bit_width - 1)) - 1) \
                if pa.types.is_signed_integer(band_type) else (0, (1 << band_type.bit_width) - 1)
        else:
            raise _NotArrow(f"a band on {band_type}")
        self.lower, self.upper = int(band.lower.offset.value), int(band.upper.offset.value)
        if self.lower != band.lower.offset.value or self.upper != band.upper.offset.value:
            raise _NotArrow("a fractional band")
        if band.lower.offset.kind == "interval" and max(abs(self.lower), abs(self.upper)) >= 86_400_000_000:
            raise _NotArrow("a band of a day or more (a day is a calendar day in the session's time zone)")
        self.keys = []
        for column, null_safe in join.keys:
            position = self._position(column)
            key_type = schema.field(position).type
            if not (pa.types.is_integer(key_type) or pa.types.is_string(key_type) or pa.types.is_boolean(key_type)
                    or pa.types.is_date32(key_type) or pa.types.is_timestamp(key_type)):
                raise _NotArrow(f"a key of type {key_type}")  # floats: NaN and -0.0 compare as Spark's
            self.keys.append((position, null_safe))
        if not self.keys:
            raise _NotArrow("no equal keys")

    def _position(self, name: str) -> int:
        names = self.schema.names
        found = [i for i, n in enumerate(names) if n == name] or \
            [i for i, n in enumerate(names) if n.lower() == name.lower()]
        if len(found) != 1:
            raise _NotArrow(name)
        return found[0]

    @property
    def key_columns(self) -> list[str]:
        """The stream's columns the keys compare, in the order the statement gives them."""
        return [self.schema.names[position] for position, _ in self.keys]

    def pair_column(self, node: exp.Expression, table: str | None = None) -> exp.Expression:
        """``node`` (a condition or a select item) over a pair's columns: each column of a side
        renamed to that side's name of it (qualified by ``table`` where given)."""
        def rename(n):
            if not isinstance(n, exp.Column):
                return n
            side = self.sides.get(n.table.lower()) if n.table else None
            if side is None or isinstance(n.this, exp.Star) or n.args.get("db"):
                raise _NotArrow(to_sql(n))
            return exp.column(f"__sx_{side}{self._position(n.name)}", table=table)
        if any(isinstance(n, exp.Star) for n in node.find_all(exp.Star)):
            raise _NotArrow(to_sql(node))
        return node.copy().transform(rename)

    @classmethod
    def of(cls, join, schema: pa.Schema, *more) -> "BandPairs | None":
        """This statement's pairing over Arrow data, or None where a part of it is not
        computed here as Spark computes it."""
        try:
            return cls(join, schema, *more)
        except _NotArrow:
            return None

    def found(self, new: pa.Table, old: pa.Table | None) -> pa.Table | None:
        """The pairs of the ``new`` events (as the first side) with every event, and of the
        ``old`` ones with the new (as the second side), in :attr:`pair_schema`: each pair
        once. None where the band's arithmetic would overflow the column's type (Spark raises
        there)."""
        events = new if old is None else pa.concat_tables([new, old.cast(new.schema)])
        arrays = [events.column(i) for i in range(events.num_columns)]
        valid = pc.is_valid(arrays[self.band])
        for position, null_safe in self.keys:
            if not null_safe:
                valid = pc.and_(valid, pc.is_valid(arrays[position]))
        valid = np.asarray(valid, dtype=bool)
        code = codes([arrays[p] for p, _ in self.keys])
        values = np.asarray(pc.fill_null(arrays[self.band].cast(pa.int64()), 0), dtype=np.int64)
        chosen = values[valid]
        if len(chosen) and (int(chosen.min()) + min(self.lower, 0) < self.bounds[0]
                            or int(chosen.max()) + max(self.upper, 0) > self.bounds[1]):
            return None
        everyone = np.flatnonzero(valid)
        fresh = everyone[everyone < new.num_rows]
        earlier = everyone[everyone >= new.num_rows]
        left, right = [], []
        for first, second in ((fresh, everyone), (earlier, fresh)):
            found = pairs_within(code[first], values[first] + self.lower - 1, values[first] + self.upper,
                                 code[second], values[second])
            left.append(first[found[0]])
            right.append(second[found[1]])
        left, right = np.concatenate(left), np.concatenate(right)
        return pa.Table.from_arrays(take(events, left).columns + take(events, right).columns,
                                    schema=self.pair_schema)


class ArrowPairs(BandPairs):
    """A run's rows made over Arrow data, without a Spark job: the pairs :class:`BandPairs`
    finds, then the statement's other conditions and its select list over them through
    :mod:`~sqlext.streaming.arrow_sql`. Only a statement all of whose parts compute here as
    Spark computes them is taken (:meth:`of`)."""

    def __init__(self, join, schema: pa.Schema, shape: "SelfJoinShape"):
        super().__init__(join, schema)
        self.output = arrow_schema(shape.output)
        self.columns, self.condition = _over_pair_columns(self, join, shape.tree, self.output)

    def rows(self, pairs: pa.Table) -> pa.Table:
        """The statement's rows over ``pairs`` (of :meth:`found`)."""
        return evaluate(pairs, self.columns, where=self.condition).cast(self.output)


def _over_pair_columns(pairing: BandPairs, join, tree: exp.Select, output: pa.Schema):
    """A statement's select list (named as ``output``, of its types) and its conditions
    besides the keys and the band, all of them, as Arrow expressions over the pairs
    ``pairing`` finds: ``(columns by name, condition or None)``; raises :class:`_NotArrow`
    where a part of it does not compute so as Spark computes it."""
    condition = None
    for part in join.left_only + join.right_only + join.rest:
        translated = arrow_expression(pairing.pair_column(part), pairing.pair_schema, boolean=True)
        if translated is None:
            raise _NotArrow(to_sql(part))
        condition = translated if condition is None else condition & translated
    columns = {}
    for item, field in zip(tree.expressions, output):
        inner = item.this if isinstance(item, exp.Alias) else item
        translated = None if isinstance(inner, exp.Star) else arrow_expression(pairing.pair_column(inner),
                                                                               pairing.pair_schema)
        if translated is None or field.name in columns:
            raise _NotArrow(to_sql(item))
        columns[field.name] = translated
    if len(columns) != len(output):
        raise _NotArrow("the select list")
    given = evaluate(pairing.pair_schema.empty_table(), columns).schema
    if [f.type for f in given] != [f.type for f in output]:
        raise _NotArrow("a select list whose types Spark gives otherwise")
    return columns, condition


def _projection(pairing: BandPairs, join, pairs: exp.Select, projected: pa.Schema):
    """An aggregate's projection of each pair (``pairs``: the statement selecting its grouping
    values and arguments, of columns ``projected``) over Arrow data: ``(columns, condition)``,
    or None where a part of it does not compute so as Spark computes it."""
    try:
        return _over_pair_columns(pairing, join, pairs, projected)
    except _NotArrow:
        return None


class SelfJoinOperator(KeyedOperator):
    """The incremental self-join as one of the engine's keyed operators: its one state holds
    the events by their keys (:attr:`BandPairs.key_columns`), so that an event and every
    partner it can have are in one bucket, and its step pairs a bucket's new events with the
    bucket's kept ones (see the module's docstring). Its rows are the statement's own where the
    whole statement computes over Arrow data (:class:`ArrowPairs`), and otherwise the pairs the
    keys and band allow, which the statement around it reads (:meth:`SelfJoinShape.over_pairs`)."""

    function = FUNCTION
    emit = "changes"

    def __init__(self, shape: SelfJoinShape, folder, events: Input, buckets: int):
        super().__init__(folder, None)
        self.shape, self.pairing = shape, shape.pairing
        keys = self.pairing.key_columns
        self.events = KeyedState(folder / "events", [*keys, BATCH, ROW], share=0.0, bucket_by=keys)  # compacted each run
        self.events.record_schema(StructType(list(events.spark_schema.fields)
                                             + [StructField(BATCH, LongType(), False),
                                                StructField(ROW, LongType(), False)]), buckets)
        self.states = {"events": self.events}
        self.inputs = {"events": events}
        self.columns = events.schema.names
        if shape.grouped is not None:  # an aggregate's operator reads the pairs (projected, where they compute so)
            self.output_arrow = arrow_schema(shape.projected) if shape.projection is not None \
                else self.pairing.pair_schema
        else:
            self.output_arrow = shape.arrow.output if shape.arrow is not None else self.pairing.pair_schema
        self.output_key = []  # its rows are pairs, not change rows: nothing nets them
        self.order_by = shape.column
        self.newest = self._floor = None

    def outer(self, placeholder: str) -> exp.Select:
        """The statement around the operator's rows (in the table ``placeholder``)."""
        if self.shape.arrow is not None:
            return exp.select("*").from_(exp.Table(this=exp.to_identifier(placeholder)))
        return self.shape.over_pairs(placeholder)

    def input_order(self, name: str) -> str | None:
        return self.shape.column  # a batch's parts are cut at times: a later part's events are never late

    def begin(self, batch_id: int) -> None:
        self.newest = instant(self.recorded("newest", batch_id))  # the newest time an earlier run saw

    def finish(self, batch_id: int, facts: dict) -> None:
        self.record("newest", batch_id, _latest(self.newest, facts.get("newest")))

    def keep(self, name: str):
        """The events the band can still pair after this step (see :func:`_state_floor`)."""
        if self._floor is None:
            return None
        return pc.field(self.shape.column) >= pa.scalar(self._floor, self.events.arrow_schema.field(
            self.shape.column).type)

    def prepare(self, frames: dict):
        return frames["events"]

    def rows_of(self, table: pa.Table):
        return table

    @property
    def arrow_ready(self) -> bool:
        return True

    def rows_from(self, spark, tables: dict):
        return tables["events"]

    def route_columns(self) -> list[str]:
        return list(self.pairing.key_columns)

    def route(self, table: pa.Table) -> np.ndarray:
        return self.events.bucket_of(table)

    def routed_by(self, name: str):
        return self.events, list(self.pairing.key_columns)

    def step(self, rows, views, batch_id: int) -> Step:
        """The bucket's new events paired with each other and with its kept ones; the new
        events kept, those the band can no longer pair dropped."""
        shape = self.shape
        with step("check the increment"):
            times = rows[shape.column]
            lowest, highest = (instant(v.as_py()) for v in pc.min_max(times).values()) if rows.num_rows \
                else (None, None)
            _refuse_late(shape, self.newest, lowest, lambda limit: _first_below_in_rows(rows, shape.column, limit))
        earlier = None
        if self.newest is not None and not views["events"].empty:
            with step("look up the state"):
                earlier = _kept_events(shape, views["events"], self.newest).select(self.columns)
        with step("pair the events"):
            pairs = self.pairing.found(rows, earlier)
            if pairs is None:
                raise _unsupported(f"a band over {shape.column} values this close to the limits of its type",
                                   "the band's arithmetic overflows the column's type there (Spark refuses the "
                                   "batch statement too)", f"Cast {shape.column} to a wider type in the statement.")
            out = pairs if shape.arrow is None else shape.arrow.rows(pairs)
            if shape.projection is not None:  # an aggregate's grouping values and arguments of each pair
                columns, condition = shape.projection
                out = evaluate(pairs, columns, where=condition).cast(self.output_arrow)
        numbered = rows.append_column(BATCH, pa.array(np.full(rows.num_rows, batch_id, dtype=np.int64))) \
            .append_column(ROW, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
        # a batch's rows numbered apart within the step's rows: a bucket's on the executors (the
        # events of one key are all in one), all of them on the driver
        self._floor = _state_floor(shape, self.newest, highest)
        return Step(out, {"events": numbered}, {"newest": highest})


class SelfJoinRun(StatefulRun):
    """The ``foreachBatch`` function of one incremental self-join."""

    def __init__(self, shape: SelfJoinShape, placeholder: str, checkpoint: str, output: str, output_format: str,
                 schema, folder: str | None = None):
        super().__init__(None, shape.tree, placeholder, checkpoint, output, output_format, FUNCTION, ())
        self.shape = shape
        self.columns = schema.names
        self.source_schema, self.source_arrow = schema, arrow_schema(schema)
        self.folder = folder  # the stream's Parquet folder, for reading a small batch without Spark
        self.events = KeyedState(self.state / "events", [BATCH, ROW], share=0.0)  # compacted each run
        self.events.record_schema(StructType(list(schema.fields) + [StructField(BATCH, LongType(), False),
                                                                   StructField(ROW, LongType(), False)]))
        if shape.grouped is not None:  # an aggregate's groups, by their grouping values
            self.groups = KeyedState(self.state / "groups", shape.grouped.group_names)
            self.groups.record_schema(shape.accumulators)
            self._groups_with_tag = StructType(list(shape.accumulators.fields) + [StructField(TAG, BooleanType())])

    def run(self, batch, batch_id: int) -> None:
        spark, shape = batch.sparkSession, self.shape
        view = self.events.before(batch_id)
        newest = instant(self.recorded("newest", batch_id))  # the newest time an earlier run saw
        # the earliest time of the earlier events the band can still pair (None: there are none)
        kept = None if newest is None or view.empty else newest - shape.distance(2)
        if on_driver(batch):  # the events as Arrow data on the driver; Spark only pairs them
            with step("check the increment"):
                rows = batch_rows(batch, batch_id, self.checkpoint, self.folder, self.source_arrow)
                times = rows[shape.column]
                lowest, highest = (instant(v.as_py()) for v in pc.min_max(times).values()) if rows.num_rows \
                    else (None, None)
                _refuse_late(shape, newest, lowest, lambda limit: _first_below_in_rows(rows, shape.column, limit))
            new = batch  # Spark pairs the events from the batch's own files (a long first run too)
            old = None
            if kept is not None:
                old = arrow_frame(spark, _kept_events(shape, view, newest).select(self.columns), self.source_schema)
            numbered = rows.append_column(BATCH, pa.array([batch_id] * rows.num_rows, pa.int64())) \
                .append_column(ROW, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
            floor = _state_floor(shape, newest, highest)
            events = numbered, None if floor is None else pc.field(shape.column) >= pa.scalar(floor, times.type)
        else:
            new = batch
            with step("check the increment"):
                highest, lowest = (instant(v) for v in new.agg(F.max(F.col(quote(shape.column))),
                                                                F.min(F.col(quote(shape.column)))).first())
                _refuse_late(shape, newest, lowest, lambda limit: _first_below_in_frame(new, shape.column, limit))
            old = None
            if kept is not None:
                old = view.frame(spark).where(F.col(quote(shape.column)) >= F.lit(kept)) \
                    .select(*[F.col(quote(c)) for c in self.columns])
            floor = _state_floor(shape, newest, highest)
            events = (new.select(*[F.col(quote(c)) for c in self.columns], F.lit(batch_id).cast("bigint").alias(BATCH),
                                 F.monotonically_increasing_id().alias(ROW)),
                      None if floor is None else F.col(quote(shape.column)) >= F.lit(floor))
        self._pair(spark, new, old, batch_id)
        with step("write the state"):
            rows, keep = events
            self.events.write(view, rows, batch_id, keep=keep)
            self.record("newest", batch_id, _latest(newest, highest))

    def _pair(self, spark, new, old, batch_id: int) -> None:
        """The pairs of the new events with every event (as ``a``) and of the earlier ones with
        the new (as ``a``): written as the statement's rows, or added to its groups."""
        shape = self.shape
        views = []
        try:
            with step("pair the events"), adaptive(spark):
                names = {}
                for role, frame in (("new", new), ("old", old), ("all", None if old is None else new.unionByName(old))):
                    if frame is not None:
                        names[role] = f"__sx_pairs_{role}_{batch_id}"
                        frame.createOrReplaceTempView(names[role])
                        views.append(names[role])
                # with no earlier events (a first run) the new events pair with themselves: the
                # batch statement over them, which sqlext's rules run in one pass over a band
                parts = [(names["new"], names["all"]), (names["old"], names["new"])] if "old" in names \
                    else [(names["new"], names["new"])]
                if shape.grouped is None:
                    statement = _union_all([shape.over(*part) for part in parts])
                    pairs = run_statement(spark, to_sql(exp.select("*").from_(exp.Subquery(this=statement, alias="p"))))
                    self.write_statement(spark, pairs, batch_id)
                else:
                    statement = _union_all([shape.grouped.pairs(shape.over(*part)) for part in parts])
                    partials = run_statement(spark, to_sql(shape.grouped.partials(statement))).toArrow()
        finally:
            for name in views:
                spark.catalog.dropTempView(name)
        if shape.grouped is not None:
            self._aggregate(spark, partials, batch_id)

    def _aggregate(self, spark, partials, batch_id: int) -> None:
        """Add the run's partial aggregates to its groups' accumulators and write the groups'
        changes (:mod:`sqlext.streaming.operators.self_join_aggregate`)."""
        grouped = self.shape.grouped
        view = self.groups.before(batch_id)
        with step("look up the groups"):
            before = view.rows(keys=partials.select(grouped.group_names).cast(
                pa.schema([self.groups.arrow_schema.field(n) for n in grouped.group_names])))
            after = grouped.merge(before, partials, self.groups.arrow_schema)
        with step("write the output"):
            rows = pa.concat_tables([before.append_column(TAG, pa.array([False] * before.num_rows, pa.bool_())),
                                     after.append_column(TAG, pa.array([True] * after.num_rows, pa.bool_()))])
            name = f"__sx_groups_{batch_id}"
            arrow_frame(spark, rows, self._groups_with_tag).createOrReplaceTempView(name)
            try:
                finals = spark.sql(to_sql(grouped.final_rows(self.shape.tree, name))).toArrow()
            finally:
                spark.catalog.dropTempView(name)
            out = grouped.changes(finals, batch_id, self.shape.output_arrow)
            check_columns(self.checkpoint, self.output, spark_columns(out.schema))
            self.sink.write_table(spark, out, batch_id)
        with step("write the groups"):
            self.groups.write(view, after, batch_id)

    def write_statement(self, spark, forwarded, batch_id: int, carry=(), whole: bool = False) -> None:
        """The pairs are the statement's rows already: they are written as they are."""
        check_columns(self.checkpoint, self.output, [(f.name, f.dataType.simpleString())
                                                          for f in forwarded.schema.fields])
        self.sink.write_frame(forwarded, batch_id)


def _aggregates(frame) -> bool:
    """Whether Spark's analysis of ``frame`` aggregates (a plan of Spark's own sessions; one
    whose plan cannot be read is taken as sqlglot reads it)."""
    import json

    try:
        nodes = json.loads(frame._jdf.queryExecution().analyzed().toJSON())
    except Exception:  # noqa: BLE001 - a session without the JVM's plan (Spark Connect)
        return False
    return any(node.get("class", "").endswith(".Aggregate") for node in nodes)


def _refuse_late(shape: SelfJoinShape, newest, lowest, first_below) -> None:
    """A new event older than the newest time of earlier runs by more than the band's width
    could pair with events the state no longer holds: ``[LATE_CHANGE]``. ``lowest`` is the
    run's earliest time; ``first_below(limit)`` finds the time of a late event where the run's
    events are (Arrow data, or Spark's batch), None where there is none. One check for every
    place a run pairs, so they refuse the same runs."""
    if newest is None or lowest is None:
        return
    limit = newest - shape.distance(1)
    if lowest < limit:
        late = first_below(limit)
        if late is not None:
            column = shape.column
            raise SqlextError(
                "LATE_CHANGE", function=FUNCTION, key="(an event of the self-join)", order_by=column,
                value=repr(late), last=repr(limit),
                earlier=f"the newest {column} an earlier run saw less the band's width",
                fix="Land events in time order (within the band's width), or run the statement as a batch query.")


def _kept_events(shape: SelfJoinShape, view, newest) -> pa.Table:
    """The earlier events of a state's ``view`` the band can still pair with a run's events,
    ``newest`` the newest time an earlier run saw (a run's events are no older than it less the
    band's width, or the run is refused)."""
    events = view.rows()
    kept = newest - shape.distance(2)
    return events.filter(pc.greater_equal(events[shape.column], pa.scalar(kept, events.schema.field(shape.column).type)))


def _state_floor(shape: SelfJoinShape, newest, highest):
    """The earliest time the state keeps after a run: the band's width and the allowed
    lateness before the newest time seen, by earlier runs or this one (``highest``); None where
    no time was seen yet."""
    top = _latest(newest, highest)
    return None if top is None else top - shape.distance(2)


def _first_below_in_rows(rows: pa.Table, column: str, limit):
    """The ``column`` of the first of ``rows`` (Arrow data) whose ``column`` is below ``limit``."""
    times = rows[column]
    return rows.filter(pc.less(times, pa.scalar(limit, times.type))).slice(0, 1).to_pylist()[0][column]


def _first_below_in_frame(frame, column: str, limit):
    """The ``column`` of a row of ``frame`` (a Spark frame) whose ``column`` is below ``limit``;
    None where there is none."""
    late = frame.where(F.col(quote(column)) < F.lit(limit)).limit(1).collect()
    return late[0][column] if late else None


def _union_all(statements: list[exp.Expression]) -> exp.Expression:
    union = statements[0]
    for statement in statements[1:]:
        union = exp.union(union, statement, distinct=False)
    return union


def _latest(*values):
    return max([v for v in values if v is not None], default=None)

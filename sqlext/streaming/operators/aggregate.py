"""A GROUP BY over a function's final table, maintained by deltas.

A statement of the shape

    SELECT g..., COUNT(*), SUM(x), AVG(x), MIN(x), MAX(x), COUNT(DISTINCT x), ...
    FROM <CHANGELOG_FILTER or FK_JOIN, or a chain of them>(..., emit => 'final') [WHERE ...]
    GROUP BY g... [HAVING ...]

reads the function's table. Incrementally, the function runs as its change feed instead, and
each change reaches the aggregate as Kafka Streams' table aggregation sees it: the new row is
added (the adder: an ``insert``, an ``update_postimage``) and the old one taken away (the
subtractor: a ``delete``, an ``update_preimage``), after the ``WHERE``, to the group the row
falls in. Each group keeps, in a :class:`~sqlext.streaming.state.KeyedState` by its grouping
values, its count of rows and, per aggregate, what adds up: a count of non-NULL values, or a
sum with the count of values it holds (a sum over no value is NULL). ``MIN``, ``MAX`` and
``COUNT(DISTINCT ...)`` cannot take a value away from a single number, so each keeps the group's
values with their counts (a state keyed by the group and the value, kept in the group's
bucket). A run touches only the groups its changes reach. A group whose count falls to zero
is gone from the result, and ``HAVING`` is applied to each group's row as it stands.

The output is the aggregate's table after each run (the statement's select list over the
groups, as the batch statement gives it). ``SUM`` and ``AVG`` take integral values: sums of
floating-point or decimal values added and taken away in another order differ from one sum in
their last digits (``[UNSUPPORTED_STREAM]`` says what to do).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from sqlext.errors import SqlextError
from sqlext.functions.arguments import quote
from sqlext.functions.changes import CHANGE_TYPE, DELETE, PREIMAGE
from sqlext.language.dialect import to_sql, TableArgument
from sqlext.language.sqltree import helper
from sqlext.streaming.arrow_sql import arrow_expression, evaluate
from sqlext.streaming.engine import Input, KeyedOperator, Step, temporary_view
from sqlext.streaming.operators.self_join_aggregate import grouped_expression, matching_rows
from sqlext.streaming.run import arrow_schema, arrow_frame, spark_schema, step
from sqlext.streaming.state import KeyedState
from sqlext.udfs.column_wise import codes, take, together

FUNCTION = "sqlext stream"
COUNT = helper("n")  # a group's rows, or a value's count
SIGN = helper("sign")  # +1 for a row the change adds, -1 for one it takes away
VALUED = ("min", "max", "distinct")  # the aggregates that keep a group's values


def _unsupported(what: str, reason: str, fix: str) -> SqlextError:
    return SqlextError("UNSUPPORTED_STREAM", function=FUNCTION, what=what, reason=reason, fix=fix)


def is_aggregate(tree: exp.Expression) -> bool:
    """Whether the statement around a call aggregates (a GROUP BY, or aggregates in its select list)."""
    return isinstance(tree, exp.Select) and (bool(tree.args.get("group")) or any(
        isinstance(n, exp.AggFunc) for item in tree.expressions for n in item.find_all(exp.AggFunc)))


class Aggregate:
    """One aggregate of the statement: its kind, the helper column of its argument, and its
    final value over the group's accumulators."""

    def __init__(self, node: exp.Expression, index: int):
        self.node, self.index = node, index
        argument = node.this
        if isinstance(node, exp.Count) and isinstance(argument, exp.Star):
            self.kind, argument = "rows", None
        elif isinstance(node, exp.Count) and isinstance(argument, exp.Distinct):
            if len(argument.expressions) != 1:
                raise _unsupported(f"{node.sql(dialect='spark')} over a change feed's table",
                                   "it counts distinct combinations of several columns",
                                   "Count one expression: COUNT(DISTINCT x).")
            self.kind, argument = "distinct", argument.expressions[0]
        else:
            self.kind = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min",
                         exp.Max: "max"}.get(type(node))
        if self.kind is None or isinstance(node.parent, exp.Filter) or (node.expressions and self.kind != "rows"):
            raise _unsupported(f"the aggregate {node.sql(dialect='spark')} over a change feed's table",
                               "a run adds each new row to its group and takes each old one away; this aggregate "
                               "has no such form", "Use COUNT, COUNT(DISTINCT x), SUM, AVG, MIN or MAX without "
                               "FILTER (a condition goes in the argument: SUM(IF(cond, x, NULL))).")
        self.argument = None if argument is None else argument.copy()
        self.column = helper(f"x{index}")

    def columns(self) -> list[str]:
        """The group state's accumulator columns of this aggregate."""
        j = self.index
        return {"rows": [], "count": [helper(f"c{j}")], "sum": [helper(f"s{j}"), helper(f"k{j}")],
                "avg": [helper(f"s{j}"), helper(f"k{j}")]}.get(self.kind, [])

    def final(self) -> exp.Expression:
        """Its value over the accumulators (and, for a valued one, over its values' summary)."""
        j = self.index

        def column(name):
            return exp.column(exp.to_identifier(name))

        def empty(count):
            return exp.EQ(this=column(count), expression=exp.Literal.number(0))

        if self.kind == "rows":
            return column(COUNT)
        if self.kind == "count":
            return column(helper(f"c{j}"))
        if self.kind == "sum":
            return exp.If(this=empty(helper(f"k{j}")), true=exp.Null(), false=column(helper(f"s{j}")))
        if self.kind == "avg":
            return exp.If(this=empty(helper(f"k{j}")), true=exp.Null(),
                          false=exp.Div(this=exp.Cast(this=column(helper(f"s{j}")), to=exp.DataType.build("double")),
                                        expression=column(helper(f"k{j}"))))
        return column(helper(f"m{j}"))


class AggregateShape:
    """The parts of an aggregating statement over a call (see the module's docstring), checked
    and typed with Spark's analysis over empty rows (nothing runs)."""

    def __init__(self, spark, tree: exp.Select, placeholder: str, feed_schema, table_schema):
        """``feed_schema``: the Spark columns of the call's change feed; ``table_schema``: of its
        final table (what the statement reads)."""
        clauses = [k for k in ("order", "limit", "offset", "distinct", "qualify", "joins", "with_") if tree.args.get(k)]
        nested = [s for s in tree.find_all(exp.Select) if s is not tree] + list(tree.find_all(exp.Window)) + \
            [a for a in tree.find_all(TableArgument)]
        source = tree.args.get("from_")
        if clauses or nested or source is None or not isinstance(source.this, exp.Table) \
                or source.this.name != placeholder:
            raise _unsupported("this aggregate over a change feed's table",
                               "an incremental aggregate reads the call alone, with no join, window, subquery, "
                               "DISTINCT, ORDER BY or LIMIT", "Aggregate the call's table with WHERE, GROUP BY and "
                               "HAVING, and order or limit the output in a batch query over the output folder.")
        self.tree, self.placeholder = tree, placeholder
        self.alias = source.this.alias_or_name
        group = tree.args.get("group")
        self.grouped = group is not None  # without GROUP BY, one row however many rows there are
        self.groups = [grouped_expression(e, tree) for e in group.expressions] if group else [exp.Literal.number(0)]
        self.group_names = [helper(f"g{i}") for i in range(len(self.groups))]
        self.aggregates: list[Aggregate] = []
        having = tree.args.get("having")
        for part in list(tree.expressions) + ([having] if having is not None else []):
            for node in part.find_all(exp.AggFunc):
                if not any(node == a.node for a in self.aggregates):
                    self.aggregates.append(Aggregate(node, len(self.aggregates)))
        view = helper("aggregate_input")
        spark.createDataFrame([], table_schema).createOrReplaceTempView(view)
        try:
            self.output_schema = spark.sql(to_sql(self._over(tree.copy(), view))).schema
            self.output_names = self.output_schema.names
        finally:
            spark.catalog.dropTempView(view)
        view = helper("aggregate_feed")
        spark.createDataFrame([], feed_schema).createOrReplaceTempView(view)
        try:
            self.projected_schema = spark.sql(to_sql(self.projection(view))).schema
        finally:
            spark.catalog.dropTempView(view)
        from pyspark.sql.types import IntegralType

        for aggregate in self.aggregates:
            if aggregate.kind in ("sum", "avg") and \
                    not isinstance(self.projected_schema[aggregate.column].dataType, IntegralType):
                kind = self.projected_schema[aggregate.column].dataType.simpleString().upper()
                raise _unsupported(f"{aggregate.node.sql(dialect='spark')} over a change feed's table",
                                   f"it adds {kind} values, whose sums, taken away and added again in another "
                                   "order, differ from one sum in their last digits or their type",
                                   "Sum integral values (CAST(... AS BIGINT) of a scaled value), or run the "
                                   "statement as a batch query (sqlext.sql).")

    def _over(self, tree: exp.Select, view: str) -> exp.Select:
        tree.args["from_"].this.replace(exp.Table(this=exp.to_identifier(view),
                                                  alias=exp.TableAlias(this=exp.to_identifier(self.alias))))
        return tree

    def projection(self, view: str) -> exp.Select:
        """Per change of the feed in ``view``: its grouping values, its aggregates' arguments and
        its sign, for the rows the WHERE keeps."""
        kind = exp.column(exp.to_identifier(CHANGE_TYPE), table=exp.to_identifier(self.alias))
        sign = exp.Case(ifs=[exp.If(this=exp.In(this=kind, expressions=[exp.Literal.string(DELETE),
                                                                          exp.Literal.string(PREIMAGE)]),
                                    true=exp.Literal.number(-1))], default=exp.Literal.number(1))
        items = [exp.alias_(g.copy(), n) for g, n in zip(self.groups, self.group_names)]
        items += [exp.alias_(a.argument.copy(), a.column) for a in self.aggregates if a.argument is not None]
        items.append(exp.alias_(exp.Cast(this=sign, to=exp.DataType.build("bigint")), SIGN))
        select = exp.select(*items).from_(exp.Table(this=exp.to_identifier(view),
                                                    alias=exp.TableAlias(this=exp.to_identifier(self.alias))))
        where = self.tree.args.get("where")
        return select.where(where.this.copy()) if where is not None else select

    def final(self, view: str) -> exp.Select:
        """The statement's select list over a view of every group's accumulators (the groups
        whose count is above zero, and HAVING), named as the batch statement names it."""
        def replace(node):
            for aggregate in self.aggregates:
                if node == aggregate.node:
                    return aggregate.final()
            for group, name in zip(self.groups, self.group_names):
                if node == group and not isinstance(node, exp.Literal):
                    return exp.column(exp.to_identifier(name))
            return node

        def over(body):
            replaced = body.copy().transform(replace)
            stray = [c for c in replaced.find_all(exp.Column) if not c.name.startswith(helper(""))]
            if stray:
                raise _unsupported(f"the column {stray[0].sql(dialect='spark')} in an aggregate over a change "
                                   "feed's table", "a grouped statement selects grouping expressions and aggregates",
                                   "Select each column as the GROUP BY writes it, or aggregate it.")
            return replaced

        items = [exp.alias_(over(item.this if isinstance(item, exp.Alias) else item), name, quoted=True)
                 for item, name in zip(self.tree.expressions, self.output_names)]
        conditions = [exp.GT(this=exp.column(exp.to_identifier(COUNT)), expression=exp.Literal.number(0))] \
            if self.grouped else []
        having = self.tree.args.get("having")
        if having is not None:
            conditions.append(exp.paren(over(having.this)))
        select = exp.select(*items).from_(exp.Table(this=exp.to_identifier(view)))
        return select.where(exp.and_(*conditions)) if conditions else select


class AggregateOperator(KeyedOperator):
    """The incremental GROUP BY over a call's change feed: its states and its step."""

    function = "GROUP BY"
    emit = "final"

    def __init__(self, shape: AggregateShape, call: exp.Table, folder, upstream: KeyedOperator, buckets: int = 1):
        super().__init__(folder, call)
        from pyspark.sql.types import LongType, StructField, StructType

        self.shape = shape
        self.inputs = {"input": Input("input", upstream.output_arrow, spark_schema(upstream.output_arrow),
                                      upstream=upstream)}
        fields = {f.name: f for f in shape.projected_schema.fields}
        groups = [fields[n] for n in shape.group_names]
        columns = [StructField(COUNT, LongType())]
        for aggregate in shape.aggregates:
            columns += [StructField(c, LongType()) for c in aggregate.columns()]
        self.groups = KeyedState(folder / "groups", shape.group_names)
        self.fresh = self.groups.schema is None  # no run kept these groups yet
        self.groups.record_schema(StructType(groups + columns), buckets)
        self.states = {"groups": self.groups}
        for aggregate in shape.aggregates:
            if aggregate.kind in VALUED:
                value = StructField(helper(f"v{aggregate.index}"), fields[aggregate.column].dataType)
                state = KeyedState(folder / f"values-{aggregate.index}", shape.group_names + [value.name],
                                   bucket_by=shape.group_names)
                state.record_schema(StructType(groups + [value, StructField(COUNT, LongType())]), self.groups.buckets)
                self.states[f"values-{aggregate.index}"] = state
        self.output_arrow = arrow_schema(StructType(list(shape.projected_schema.fields)))
        self.projection, self.where = self._over_arrow(upstream.output_arrow)
        self.table_arrow = arrow_schema(shape.output_schema)
        self.accumulators_schema = self._accumulators_schema()
        self.table_items = self._table_arrow()

    @property
    def final_arrow(self) -> pa.Schema:
        return self.table_arrow

    def _table_arrow(self):
        """The statement's select list and its condition (a group's count above zero, HAVING)
        as Arrow expressions over the groups' accumulators and summaries (see
        :meth:`_accumulators`), where each is Spark's by construction; None where one is not."""
        select = self.shape.final(helper("groups"))
        schema = self.accumulators_schema
        items = [arrow_expression(item.this if isinstance(item, exp.Alias) else item, schema)
                 for item in select.expressions]
        where = select.args.get("where")
        condition = None if where is None else arrow_expression(where.this, schema, boolean=True)
        if any(item is None for item in items) or (where is not None and condition is None):
            return None
        return items, condition

    def _accumulators_schema(self) -> pa.Schema:
        """The columns of :meth:`_accumulators`: the groups' state, then each valued aggregate's summary."""
        fields = list(self.groups.arrow_schema)
        for aggregate in self.shape.aggregates:
            if aggregate.kind in VALUED:
                value = self.states[f"values-{aggregate.index}"].arrow_schema.field(helper(f"v{aggregate.index}"))
                kind = pa.int64() if aggregate.kind == "distinct" else value.type
                fields.append(pa.field(helper(f"m{aggregate.index}"), kind))
        return pa.schema(fields)

    def _accumulators(self, batch_id: int) -> pa.Table:
        """Every group's accumulators after this batch (the groups whose count is above zero;
        without GROUP BY, the one group, counts of zero where it has no row), each valued
        aggregate's summary of the group's values beside them (its MIN, MAX or number of
        distinct values), read on the driver."""
        names = self.shape.group_names
        groups = self.groups.before(batch_id + 1).rows()
        groups = groups.filter(pc.greater(groups[COUNT], 0))
        if not self.shape.grouped and groups.num_rows == 0:
            # the one row of an aggregate over no rows: counts and sums of zero (a sum over no
            # value is NULL by its count of values)
            groups = pa.table({f.name: pa.array([0], f.type) for f in self.groups.arrow_schema},
                              schema=self.groups.arrow_schema)
        columns = list(groups.columns)
        for aggregate in self.shape.aggregates:
            if aggregate.kind not in VALUED:
                continue
            j = aggregate.index
            values = self.states[f"values-{j}"].before(batch_id + 1).rows()
            values = values.filter(pc.greater(values[COUNT], 0))
            function = {"min": "min", "max": "max", "distinct": "count"}[aggregate.kind]
            summary = values.group_by(names, use_threads=False).aggregate([(helper(f"v{j}"), function)])
            found = matching_rows(summary, groups, names, codes, together)
            value = take(summary.select([summary.column_names[-1]]), found).column(0)
            columns.append(pc.fill_null(value, 0) if aggregate.kind == "distinct" else value)
        schema = self.accumulators_schema
        return pa.Table.from_arrays([c.cast(f.type) for c, f in zip(columns, schema)], schema=schema)

    def _over_arrow(self, schema: pa.Schema):
        """The projection (grouping values, arguments) and the WHERE as Arrow expressions over
        the feed, where each is Spark's by construction (:mod:`sqlext.streaming.arrow_sql`);
        (None, None) where one is not."""
        shape, alias = self.shape, self.shape.alias
        items = list(zip(shape.group_names, shape.groups))
        items += [(a.column, a.argument) for a in shape.aggregates if a.argument is not None]
        projection = {}
        for name, node in items:
            projection[name] = arrow_expression(node, schema, alias)
            if projection[name] is None:
                return None, None
        where = self.shape.tree.args.get("where")
        condition = None if where is None else arrow_expression(where.this, schema, alias, boolean=True)
        if where is not None and condition is None:
            return None, None
        return projection, condition

    @property
    def arrow_ready(self) -> bool:
        return self.projection is not None

    def keep(self, name: str):
        return pc.field(COUNT) != 0  # a group or value whose count fell to zero is dropped on compaction

    # -- the increment

    def prepare(self, frames: dict):
        feed = frames["input"]
        with temporary_view(feed) as view:
            return feed.sparkSession.sql(to_sql(self.shape.projection(view)))

    def rows_from(self, spark, tables: dict):
        """The projected changes: over Arrow data where :attr:`arrow_ready`, else by Spark."""
        rows = tables["input"]
        if self.projection is None:
            return self.prepare({"input": arrow_frame(spark, rows)}).toArrow()
        if self.where is not None:
            rows = rows.filter(pc.fill_null(evaluate(rows, {"w": self.where})["w"], False))
        taken = pc.is_in(rows[CHANGE_TYPE], value_set=pa.array([DELETE, PREIMAGE]))
        sign = pc.if_else(pc.fill_null(taken, False), -1, 1).cast(pa.int64())
        projected = evaluate(rows, self.projection)
        schema = self.output_arrow
        columns = [projected[n].cast(schema.field(n).type) if projected[n].type != schema.field(n).type
                   else projected[n] for n in self.projection] + [sign]
        names = list(self.projection) + [SIGN]
        return pa.Table.from_arrays(columns, names=names)

    def route_columns(self) -> list[str]:
        return list(self.shape.group_names)

    def route(self, table: pa.Table) -> np.ndarray:
        return self.groups.bucket_of(table)

    # -- the step

    def step(self, rows: pa.Table, views, batch_id: int) -> Step:
        """Each change added to or taken away from its group: the touched groups' new
        accumulators, and each valued aggregate's touched values with their new counts."""
        names = self.shape.group_names
        sign = rows[SIGN].cast(pa.int64())
        sums = {COUNT: sign}
        for aggregate in self.shape.aggregates:
            if aggregate.kind in ("count", "sum", "avg"):
                present = pc.is_valid(rows[aggregate.column])
                counted = pc.if_else(present, sign, 0)
                if aggregate.kind == "count":
                    sums[helper(f"c{aggregate.index}")] = counted
                else:
                    value = pc.fill_null(rows[aggregate.column].cast(pa.int64()), 0)
                    sums[helper(f"s{aggregate.index}")] = pc.multiply_checked(value, sign)
                    sums[helper(f"k{aggregate.index}")] = counted
        with step("add and take away"):
            changes = pa.table([rows[n] for n in names] + list(sums.values()), names=names + list(sums))
            delta = changes.group_by(names, use_threads=False).aggregate([(c, "sum") for c in sums]) \
                .rename_columns(names + list(sums))
            deltas = {"groups": self._added(views["groups"], delta, names, list(sums))}
            for aggregate in self.shape.aggregates:
                if aggregate.kind in VALUED:
                    value = helper(f"v{aggregate.index}")
                    present = rows.filter(pc.is_valid(rows[aggregate.column]))
                    values = pa.table([present[n] for n in names] + [present[aggregate.column], present[SIGN]],
                                      names=names + [value, COUNT])
                    values = values.group_by(names + [value], use_threads=False).aggregate([(COUNT, "sum")]) \
                        .rename_columns(names + [value, COUNT])
                    name = f"values-{aggregate.index}"
                    deltas[name] = self._added(views[name], values, names + [value], [COUNT])
        return Step(None, deltas)

    def _added(self, view, delta: pa.Table, keys: list[str], counts: list[str]) -> pa.Table:
        """The state rows of ``delta``'s keys with ``delta``'s counts added to what they held."""
        schema = view.state.arrow_schema
        delta = delta.cast(pa.schema([schema.field(k) for k in keys] + [schema.field(c) for c in counts]))
        before = view.rows(keys=delta.select(keys))
        found = matching_rows(before, delta, keys, codes, together)
        old = take(before.select(counts), found)
        columns = {k: delta[k] for k in keys}
        for count in counts:
            columns[count] = pc.add_checked(pc.fill_null(old[count], 0), delta[count])
        return pa.Table.from_arrays([columns[f.name].cast(f.type) for f in schema], schema=schema)

    # -- the table

    def final(self, spark, batch_id: int, on_driver: bool):
        """The aggregate's table after this batch: each group's accumulators (with its valued
        aggregates summarised from its values) through the statement's select list, over Arrow
        data on the driver where the select list translates exactly, else by Spark."""
        from pyspark.sql import functions as F

        if on_driver and self.table_items is not None:
            from sqlext.streaming.arrow_sql import evaluate

            items, condition = self.table_items
            rows = self._accumulators(batch_id)
            if condition is not None:
                rows = rows.filter(pc.fill_null(evaluate(rows, {"c": condition})["c"], False))
            named = {f"c{i}": item for i, item in enumerate(items)}
            table = evaluate(rows, named) if rows.num_rows else \
                pa.table({n: pa.nulls(0, f.type) for n, f in zip(named, self.final_arrow)})
            return pa.Table.from_arrays([table[n].cast(f.type) for n, f in zip(named, self.final_arrow)],
                                        schema=self.final_arrow)

        names = self.shape.group_names
        groups = self.groups.before(batch_id + 1).frame(spark).where(F.col(COUNT) > 0)
        for aggregate in self.shape.aggregates:
            if aggregate.kind not in VALUED:
                continue
            j = aggregate.index
            value = F.col(quote(helper(f"v{j}")))
            summary = {"min": F.min(value), "max": F.max(value), "distinct": F.count(value)}[aggregate.kind]
            values = self.states[f"values-{j}"].before(batch_id + 1).frame(spark).where(F.col(COUNT) > 0) \
                .groupBy(*[F.col(quote(n)) for n in names]).agg(summary.alias(helper(f"m{j}")))
            if aggregate.kind == "distinct":
                values = values.withColumn(helper(f"m{j}"), F.col(quote(helper(f"m{j}"))).cast("bigint"))
            renamed = values.select(*[F.col(quote(n)).alias(n + "_v") for n in names], helper(f"m{j}"))
            match = None
            for n in names:
                term = groups[quote(n)].eqNullSafe(renamed[quote(n + "_v")])
                match = term if match is None else match & term
            groups = groups.join(renamed, match, "left").drop(*[n + "_v" for n in names])
            if aggregate.kind == "distinct":
                groups = groups.withColumn(helper(f"m{j}"), F.coalesce(F.col(quote(helper(f"m{j}"))), F.lit(0)))
        if not self.shape.grouped:  # the one row of an aggregate over no rows: counts of zero
            one = spark.range(1).select(F.lit(0).cast(groups.schema[names[0]].dataType).alias(names[0]))
            counted = [c for c in groups.columns if c == COUNT or c.startswith((helper("c"), helper("k"), helper("s")))]
            counted += [helper(f"m{a.index}") for a in self.shape.aggregates if a.kind == "distinct"]
            groups = one.join(groups, names[0], "left").fillna(0, subset=counted)
        with temporary_view(groups) as view:
            return spark.sql(to_sql(self.shape.final(view)))

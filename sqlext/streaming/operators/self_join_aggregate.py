"""An aggregate over the incremental self-join of one stream (KIP-862's self-join feeding an
aggregation), such as

    SELECT a.k, COUNT(*) AS pairs, SUM(b.v) AS total FROM STREAM(ev) AS a JOIN STREAM(ev) AS b
      ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL 1 MINUTE AND a.ts GROUP BY a.k

The pairs a run adds (:mod:`sqlext.streaming.operators.self_join`) only ever add to the groups they fall
in: the pairs of earlier runs stay, whatever the event state has dropped since. So each group
keeps accumulators in a :class:`~sqlext.streaming.state.KeyedState` by its grouping values (a
sum, a count, a minimum or maximum per aggregate; an average as its sum and count), a run
aggregates its new pairs per group, adds those partials to the accumulators of the groups they
meet, and writes the aggregate's change feed: for each group the run changed, an ``insert`` for
a new group, or its old row and its new one as ``update_preimage`` and ``update_postimage`` (a
group whose row stays as it was writes nothing), with ``_commit_version`` the run's batch id.
The newest row of each group in the output is the batch query's row for it.

The groups' state is bucketed by the grouping values, and the aggregate is one of the engine's
keyed operators (:class:`SelfJoinAggregateOperator`), after the self-join's: placed, rescaled
and cut into parts as any other. The run of its own over one bucket
(:class:`~sqlext.streaming.operators.self_join.SelfJoinRun`) keeps the statements the operators
do not take.

``SUM`` and ``AVG`` take integral values (sums of partial sums of floating-point or decimal
values differ from one sum in their last digits or their type), ``DISTINCT`` aggregates, ``HAVING``
and anything over the aggregate's rows are refused: ``[UNSUPPORTED_STREAM]`` says what to do.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from sqlext.errors import SqlextError
from sqlext.functions.changes import CHANGE_TYPE, DEFAULT_ORDER_BY, INSERT, POSTIMAGE, PREIMAGE
from sqlext.language.dialect import to_sql
from sqlext.language.sqltree import helper
from sqlext.streaming.arrow_sql import arrow_expression, evaluate
from sqlext.streaming.engine import Input, KeyedOperator, Step
from sqlext.streaming.run import arrow_frame, arrow_schema, spark_schema, step
from sqlext.streaming.state import KeyedState
from sqlext.udfs.column_wise import codes, differ, take, together

FUNCTION = "sqlext stream"
AGGREGATES = {exp.Sum: "sum", exp.Count: "count", exp.Min: "min", exp.Max: "max", exp.Avg: "avg"}
TAG = helper("new")  # in the rows whose finals are computed: the accumulators after this run
VERSION = helper("version")  # beside them: the run's batch id, the change feed's _commit_version


def _unsupported(what: str, reason: str, fix: str) -> SqlextError:
    return SqlextError("UNSUPPORTED_STREAM", function=FUNCTION, what=what, reason=reason, fix=fix)


def is_grouped(tree: exp.Select) -> bool:
    """Whether the statement aggregates (a GROUP BY, or aggregates in its select list)."""
    return bool(tree.args.get("group")) or any(isinstance(n, exp.AggFunc) for s in tree.expressions
                                               for n in s.find_all(exp.AggFunc))


def _column(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name))


class Accumulator:
    """One column a group keeps: its name, how a partial joins it (``sum``: NULL meets a value
    as nothing does; ``count``: added; ``min``, ``max``) and the partial aggregate over the pairs."""

    def __init__(self, name: str, kind: str, partial: exp.Expression, argument: str | None):
        self.name, self.kind, self.partial = name, kind, partial
        self.argument = argument  # the pairs' column it aggregates (None: COUNT(*))


class GroupedPairs:
    """An aggregating self-join statement split for incremental runs: what each run computes
    over its pairs (the grouping values and the arguments of the aggregates), the partials per
    group, and the statement's select list over the accumulators."""

    def __init__(self, tree: exp.Select, output_names: list[str]):
        if tree.args.get("having"):
            raise _unsupported("HAVING over a self-join of a stream",
                               "a group's row would enter and leave the result as its aggregates grow",
                               "Filter the aggregate's output in a batch query over the output folder.")
        self.output_names = output_names
        for name in (CHANGE_TYPE, DEFAULT_ORDER_BY):
            if name in output_names:
                raise _unsupported(f"an aggregate whose output has a column {name}",
                                   "the aggregate's change feed adds that column itself",
                                   f"Name the statement's column otherwise than {name}.")
        group = tree.args.get("group")
        self.groups = [grouped_expression(e, tree) for e in group.expressions] if group else [exp.Literal.number(0)]
        self.group_names = [helper(f"g{i}") for i in range(len(self.groups))]
        self.arguments: list[exp.Expression] = []
        self.aggregates: list[exp.Expression] = []
        self.finals: list[exp.Expression] = []
        self.accumulators: list[Accumulator] = []
        self.summed: dict[str, exp.Expression] = {}  # the arguments SUM and AVG add up, and their aggregate
        for item in tree.expressions:
            for node in item.find_all(exp.AggFunc):
                if not any(node == seen for seen in self.aggregates):
                    self._aggregate(node)

    def _aggregate(self, node: exp.Expression) -> None:
        kind = AGGREGATES.get(type(node))
        if kind is None or isinstance(node.this, exp.Distinct) or len(node.expressions or []) > 0 \
                or isinstance(node.parent, exp.Filter):
            raise _unsupported(f"the aggregate {node.sql(dialect='spark')} over a self-join of a stream",
                               "a run adds partial aggregates to each group's; this one has none that adds up",
                               "Use COUNT, SUM, MIN, MAX or AVG without DISTINCT or FILTER (a condition goes in "
                               "the argument: SUM(IF(cond, v, NULL))), or run the statement as a batch query "
                               "(sqlext.sql).")
        j = len(self.aggregates)
        self.aggregates.append(node)
        argument = None
        if not isinstance(node.this, exp.Star):
            argument = _column(helper(f"x{j}"))
            self.arguments.append(exp.alias_(node.this.copy(), argument.name))

        def accumulator(letter: str, accumulated: str, function) -> exp.Column:
            name = helper(f"{letter}{j}")
            partial = function(this=argument.copy() if argument is not None else exp.Star())
            self.accumulators.append(Accumulator(name, accumulated, exp.alias_(partial, name),
                                                 None if argument is None else argument.name))
            return _column(name)

        if kind in ("sum", "avg"):
            self.summed[argument.name] = node
        if kind == "sum":
            final = accumulator("s", "sum", exp.Sum)
        elif kind == "count":
            final = accumulator("c", "count", exp.Count)
        elif kind in ("min", "max"):
            final = accumulator("m", kind, exp.Min if kind == "min" else exp.Max)
        else:  # the average as its sum and count
            total, count = accumulator("s", "sum", exp.Sum), accumulator("c", "count", exp.Count)
            final = exp.If(this=exp.EQ(this=count.copy(), expression=exp.Literal.number(0)), true=exp.Null(),
                           false=exp.Div(this=exp.Cast(this=total, to=exp.DataType.build("double")),
                                         expression=count))
        self.finals.append(final)

    def check_types(self, pairs_schema) -> None:
        """SUM and AVG over integral values only: partial sums of floating-point or decimal values
        add up to other last digits (or another type) than one sum does."""
        from pyspark.sql.types import IntegralType

        for name, aggregate in self.summed.items():
            if not isinstance(pairs_schema[name].dataType, IntegralType):
                raise _unsupported(f"{aggregate.sql(dialect='spark')} over a self-join of a stream",
                                   f"it adds {pairs_schema[name].dataType.simpleString().upper()} values, whose sums of "
                                   "partial sums differ from one sum in their last digits or their type",
                                   "Sum integral values (CAST(... AS BIGINT) of a scaled value), or run the statement "
                                   "as a batch query (sqlext.sql).")

    # -- the queries

    def pairs(self, statement: exp.Select) -> exp.Select:
        """The statement over one part of the pairs, selecting the grouping values and the
        aggregates' arguments instead (no grouping: the parts are aggregated together)."""
        statement = statement.copy()
        statement.set("group", None)
        statement.set("expressions", [exp.alias_(g.copy(), n) for g, n in zip(self.groups, self.group_names)]
                      + [a.copy() for a in self.arguments])
        return statement

    def partials(self, pairs: exp.Expression) -> exp.Select:
        """Per group, the partial aggregates over ``pairs`` (the parts, one query)."""
        keys = [_column(n) for n in self.group_names]
        return exp.select(*keys, *[a.partial.copy() for a in self.accumulators]) \
            .from_(exp.Subquery(this=pairs, alias=exp.TableAlias(this=exp.to_identifier(helper("pairs"))))) \
            .group_by(*[k.copy() for k in keys])

    def final_rows(self, tree: exp.Select, view: str, extra=()) -> exp.Select:
        """The statement's select list over a view of accumulators (a row per group and state),
        each output column named as the batch statement names it, with the grouping values, the
        tag and the columns ``extra`` names beside."""
        items = []
        for item, name in zip(tree.expressions, self.output_names):
            body = item.this if isinstance(item, exp.Alias) else item
            items.append(exp.alias_(self._over_accumulators(body), name, quoted=True))
        return exp.select(*items, *[_column(n) for n in (*self.group_names, TAG, *extra)]) \
            .from_(exp.Table(this=exp.to_identifier(view)))

    def change_feed(self, tree: exp.Select, view: str) -> exp.Expression:
        """The aggregate's change feed as one statement over a view of the groups a run touched
        (each group's accumulators before the run, tag false, and after it, tag true, with the
        run's :data:`VERSION`): an insert for a new group, its old row and its new one for a
        changed group, nothing for a group whose row stays (values equal as ``<=>`` compares)."""
        finals, new, old = helper("finals"), "__sx_n", "__sx_o"

        def at(alias: str, name: str) -> exp.Column:
            return exp.column(exp.to_identifier(name, quoted=True), table=exp.to_identifier(alias))

        def source(alias: str) -> exp.Table:
            return exp.Table(this=exp.to_identifier(finals), alias=exp.TableAlias(this=exp.to_identifier(alias)))

        on = exp.and_(exp.Not(this=at(old, TAG)),
                      *[exp.NullSafeEQ(this=at(new, g), expression=at(old, g)) for g in self.group_names])
        same = exp.and_(*[exp.NullSafeEQ(this=at(new, c), expression=at(old, c)) for c in self.output_names])
        kind = exp.Case(ifs=[exp.If(this=exp.Is(this=at(old, TAG), expression=exp.Null()),
                                    true=exp.Literal.string(INSERT))], default=exp.Literal.string(POSTIMAGE))

        def feed(side: str, change: exp.Expression, join: str, where: exp.Expression) -> exp.Select:
            return exp.select(*[at(side, c) for c in self.output_names], exp.alias_(change, CHANGE_TYPE),
                              exp.alias_(at(new, VERSION), DEFAULT_ORDER_BY)) \
                .from_(source(new)).join(source(old), on=on.copy(), join_type=join) \
                .where(exp.and_(at(new, TAG), where))

        posts = feed(new, kind, "left", exp.paren(exp.or_(exp.Is(this=at(old, TAG), expression=exp.Null()),
                                                         exp.Not(this=exp.paren(same.copy())))))
        pres = feed(old, exp.Literal.string(PREIMAGE), "inner", exp.Not(this=exp.paren(same.copy())))
        statement = exp.union(posts, pres, distinct=False)
        return statement.with_(finals, as_=self.final_rows(tree, view, extra=(VERSION,)))

    def arrow_partials(self, pairs_schema) -> bool:
        """Whether :meth:`partials_of` gives Spark's partials over pairs of these columns: a
        MIN or MAX compares Arrow's way as Spark's only for integers, text, booleans, dates and
        timestamps (not floating point, whose NaN Spark orders above every number)."""
        types = {f.name: f.type for f in pairs_schema}
        for accumulator in self.accumulators:
            if accumulator.kind in ("min", "max"):
                kind = types[accumulator.argument]
                if not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_boolean(kind)
                        or pa.types.is_date(kind) or pa.types.is_timestamp(kind)):
                    return False
        return True

    def partials_of(self, rows: pa.Table, schema: pa.Schema) -> pa.Table:
        """Per group of ``rows`` (pairs' grouping values and the aggregates' arguments), the
        partial aggregates :meth:`partials` gives, over Arrow data, in ``schema``. Sums are
        exact (added as 38-digit decimals: one beyond BIGINT fails, as Spark's sum does)."""
        columns, aggregations = {n: rows[n] for n in self.group_names}, []
        for accumulator in self.accumulators:
            argument = None if accumulator.argument is None else rows[accumulator.argument]
            if accumulator.kind == "sum":
                columns[accumulator.name], function = argument.cast(pa.decimal128(38, 0)), "sum"
            elif accumulator.kind == "count":
                columns[accumulator.name] = argument if argument is not None else \
                    pa.array(np.ones(rows.num_rows, dtype=np.int8))
                function = "count"
            else:
                columns[accumulator.name], function = argument, accumulator.kind
            aggregations.append((accumulator.name, function))
        table = pa.table(columns) if columns else pa.table({})
        grouped = table.group_by(self.group_names, use_threads=False).aggregate(aggregations)
        found = {**{n: grouped[n] for n in self.group_names},
                 **{a.name: grouped[f"{a.name}_{f}"] for a, (_, f) in zip(self.accumulators, aggregations)}}
        return pa.Table.from_arrays([found[f.name].cast(f.type) for f in schema], schema=schema)

    def _over_accumulators(self, body: exp.Expression) -> exp.Expression:
        def replace(node):
            for aggregate, final in zip(self.aggregates, self.finals):
                if node == aggregate:
                    return final.copy()
            for group, name in zip(self.groups, self.group_names):
                if node == group and not isinstance(node, exp.Literal):
                    return _column(name)
            return node

        replaced = body.copy().transform(replace)
        stray = [c for c in replaced.find_all(exp.Column) if not c.name.startswith(helper(""))]
        if stray:
            raise _unsupported(f"the column {stray[0].sql(dialect='spark')} in an aggregate over a self-join of a "
                               "stream", "a grouped statement selects grouping expressions and aggregates",
                               "Select each column as the GROUP BY writes it (a.k if it groups by a.k), or "
                               "aggregate it.")
        return replaced

    # -- the accumulators, on the driver

    def merge(self, before: pa.Table, partials: pa.Table, schema: pa.Schema) -> pa.Table:
        """The accumulators of the groups in ``partials`` after adding the partials to what
        ``before`` holds for them (a group ``before`` does not hold starts from its partials)."""
        found = matching_rows(before, partials, self.group_names, codes, together)
        old = take(before.select([a.name for a in self.accumulators]), found)
        columns = {n: partials[n] for n in self.group_names}
        for accumulator in self.accumulators:
            columns[accumulator.name] = _combined(accumulator.kind, old[accumulator.name],
                                                  partials[accumulator.name].cast(old[accumulator.name].type))
        return pa.Table.from_arrays([columns[f.name].cast(f.type) for f in schema], schema=schema)

    def changes(self, finals: pa.Table, batch_id: int, schema: pa.Schema) -> pa.Table:
        """The aggregate's change feed from the rows of the groups before (tag false) and after
        (tag true) this run: an insert for a new group, a preimage and postimage for a changed
        one, nothing for a group whose row stays."""
        new_mask = pc.fill_null(finals[TAG], False)
        old, new = finals.filter(pc.invert(new_mask)), finals.filter(new_mask)
        found = matching_rows(old, new, self.group_names, codes, together)
        prior = take(old, found)
        there = found >= 0
        changed = there & differ(prior, new, self.output_names)

        def image(rows: pa.Table, mask: np.ndarray, kind: str) -> pa.Table:
            chosen = rows.filter(pa.array(mask))
            arrays = [chosen[n] for n in self.output_names] + [
                pa.array([kind] * chosen.num_rows, pa.string()), pa.array([batch_id] * chosen.num_rows, pa.int64())]
            return pa.Table.from_arrays([a.cast(f.type) for a, f in zip(arrays, schema)], schema=schema)

        return pa.concat_tables([image(new, ~there, INSERT), image(prior, changed, PREIMAGE),
                                 image(new, changed, POSTIMAGE)])


def grouped_expression(expression: exp.Expression, tree: exp.Select) -> exp.Expression:
    """A GROUP BY item as the expression it groups by: an ordinal (``GROUP BY 1``) or a select
    alias (``GROUP BY kk``, as Spark allows) stands for the select item's expression."""
    items = tree.expressions
    if isinstance(expression, exp.Literal) and expression.is_int and 1 <= int(expression.this) <= len(items):
        item = items[int(expression.this) - 1]
        return (item.this if isinstance(item, exp.Alias) else item).copy()
    if isinstance(expression, exp.Column) and not expression.table:
        for item in items:
            if isinstance(item, exp.Alias) and item.alias == expression.name:
                return item.this.copy()
    return expression.copy()


def matching_rows(before: pa.Table, after: pa.Table, keys, codes, together) -> np.ndarray:
    """For each row of ``after``, the row of ``before`` with equal keys (NULL equal to NULL), or -1."""
    if after.num_rows == 0 or before.num_rows == 0:
        return np.full(after.num_rows, -1, np.int64)
    coded = codes([together(before[k], after[k]) for k in keys])
    mine, theirs = coded[:before.num_rows], coded[before.num_rows:]
    position = np.full(int(coded.max()) + 1, -1, np.int64)
    position[mine] = np.arange(before.num_rows)
    return position[theirs]


def _combined(kind: str, old, new):
    """An accumulator after a partial joins it (``old`` NULL where the group is new)."""
    if kind == "count":
        return pc.add_checked(pc.fill_null(old, 0), pc.fill_null(new, 0))
    if kind == "sum":  # a sum over no value is NULL, and adds nothing
        return pc.if_else(pc.is_null(old), new, pc.if_else(pc.is_null(new), old, pc.add_checked(old, new)))
    function = pc.min_element_wise if kind == "min" else pc.max_element_wise
    try:
        return function(old, new, skip_nulls=True)
    except pa.ArrowNotImplementedError:  # a type Arrow does not compare element-wise: value by value
        pick = min if kind == "min" else max
        values = [pick([v for v in pair if v is not None], default=None)
                  for pair in zip(old.to_pylist(), new.to_pylist())]
        return pa.array(values, new.type)


class SelfJoinAggregateOperator(KeyedOperator):
    """The aggregate over a self-join's pairs as one of the engine's keyed operators, after the
    self-join's (:class:`~sqlext.streaming.operators.self_join.SelfJoinOperator`): its state
    holds each group's accumulators by the group's values, and its step adds the partial
    aggregates of the pairs sent to its bucket to the accumulators of their groups. It forwards
    the touched groups' accumulators before and after (:data:`TAG`), with the run's
    :data:`VERSION`; the statement around it makes them the aggregate's change feed
    (:meth:`GroupedPairs.change_feed`).

    Its rows are the pairs' grouping values and arguments: the self-join's step computes them
    where they compute over Arrow data as Spark computes them (``shape.projection``), and
    otherwise forwards the pairs, which Spark projects (:meth:`prepare`) and sends on.

    Where the statement's select list computes over the accumulators in Arrow as Spark computes
    it (columns; an average as its sum over its count), the step gives the change feed itself
    (:meth:`GroupedPairs.changes`) and a run on the driver starts no Spark job for it; otherwise
    it forwards the touched groups' accumulators before and after, which the statement around
    it makes the change feed (:meth:`outer`)."""

    function = FUNCTION
    emit = "changes"

    def __init__(self, shape, folder, upstream: KeyedOperator, buckets: int):
        super().__init__(folder, None)
        from pyspark.sql.types import BooleanType, LongType, StructField, StructType

        self.shape, self.grouped = shape, shape.grouped
        self.groups = KeyedState(folder / "groups", self.grouped.group_names)
        self.groups.record_schema(shape.accumulators, buckets)
        self.states = {"groups": self.groups}
        self.inputs = {"pairs": Input("pairs", upstream.output_arrow, spark_schema(upstream.output_arrow),
                                      upstream=upstream)}
        self.projected = arrow_schema(shape.projected)
        self.output_arrow = arrow_schema(StructType(list(shape.accumulators.fields) + [
            StructField(TAG, BooleanType(), False), StructField(VERSION, LongType(), False)]))
        self.output_key, self.order_by = [], VERSION
        self.finals = self._finals_arrow()
        if self.finals is not None:
            self.output_arrow = shape.output_arrow  # the change feed, made in the step

    def _finals_arrow(self) -> dict | None:
        """The statement's select list over the accumulators (with the grouping values and the
        tag beside) as Arrow expressions, where each is Spark's by construction; None where one
        is not."""
        schema = pa.schema(list(arrow_schema(self.shape.accumulators)) + [pa.field(TAG, pa.bool_())])
        select = self.grouped.final_rows(self.shape.tree, helper("groups"))
        finals = {}
        for item in select.expressions:
            translated = arrow_expression(item.this if isinstance(item, exp.Alias) else item, schema)
            if translated is None:
                return None
            finals[item.alias_or_name] = translated
        given = evaluate(schema.empty_table(), finals).schema
        wanted = {f.name: f.type for f in self.shape.output_arrow}
        if any(f.name in wanted and f.type != wanted[f.name] for f in given):
            return None
        return finals

    def outer(self, placeholder: str) -> exp.Expression:
        """The statement around the operator's rows (in the table ``placeholder``)."""
        if self.finals is not None:
            return exp.select("*").from_(exp.Table(this=exp.to_identifier(placeholder)))
        return self.grouped.change_feed(self.shape.tree, placeholder)

    @property
    def arrow_ready(self) -> bool:
        return self.shape.projection is not None  # the self-join's step projects the pairs

    def prepare(self, frames: dict):
        """The pairs' grouping values and arguments, projected by Spark."""
        from sqlext.streaming.engine import temporary_view

        pairs = frames["pairs"]
        with temporary_view(pairs) as view:
            return pairs.sparkSession.sql(to_sql(self.shape.projection_over_pairs(view)))

    def rows_from(self, spark, tables: dict):
        rows = tables["pairs"]
        if self.arrow_ready:
            return rows
        return self.prepare({"pairs": arrow_frame(spark, rows)}).toArrow().cast(self.projected)

    def route_columns(self) -> list[str]:
        return list(self.grouped.group_names)

    def route(self, table: pa.Table) -> np.ndarray:
        return self.groups.bucket_of(table)

    def routed_by(self, name: str):
        return self.groups, list(self.grouped.group_names)

    def step(self, rows, views, batch_id: int) -> Step:
        """The bucket's pairs aggregated per group and added to the groups' accumulators."""
        grouped, schema = self.grouped, self.groups.arrow_schema
        with step("aggregate the pairs"):
            partials = grouped.partials_of(rows, schema)
        with step("look up the groups"):
            before = views["groups"].rows(keys=partials.select(grouped.group_names))
            after = grouped.merge(before, partials, schema)

        def tagged(table: pa.Table, new: bool) -> pa.Table:
            n = table.num_rows
            return table.append_column(TAG, pa.array(np.full(n, new))) \
                .append_column(VERSION, pa.array(np.full(n, batch_id, dtype=np.int64)))

        touched = pa.concat_tables([tagged(before.cast(schema), False), tagged(after, True)])
        if self.finals is None:
            return Step(touched.cast(self.output_arrow), {"groups": after})
        with step("the groups' changes"):
            out = grouped.changes(evaluate(touched, self.finals), batch_id, self.output_arrow)
        return Step(out, {"groups": after})

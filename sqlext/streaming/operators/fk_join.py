"""Incremental FK_JOIN, one micro-batch at a time, as KIP-213's subscription/response workflow.

The state is KIP-213's stores, each a :class:`~sqlext.streaming.state.KeyedState`: the left
rows by left key, each with its foreign key; the right rows by right key; and the
subscriptions, (foreign key, left key) pairs by foreign key, in the buckets of the right state
(a right key's subscribers live where its row lives). Each holds the key's last applied change,
present or not. A micro-batch runs as three operators of the engine
(:mod:`sqlext.streaming.engine`), chained as any operators are, each the same wherever it runs:

1. *subscribe* (:class:`FkSubscribe`, tasks by left key): the left changes and the left state
   rows of their keys give, for each changed left key, every foreign key it points at in the
   batch (its old one, each of its changes') and the one it points at after the batch: requests,
   each sent to the bucket of its foreign key (cast to the right key's type, so it hashes as the
   right state keeps that key);
2. *answer* (:class:`FkAnswer`, tasks by right key): the right changes of the bucket's keys
   (each sent to one bucket), checked as the join checks them, give the right state's new rows;
   the requests give the subscriptions' (the old pair dropped, the new one added). For each
   foreign key with a change or a request, every left bucket that holds a subscriber of a
   changed key, or a requester, gets one answer: the right state row and all the batch's
   changes of that key, once per bucket however many of its left rows subscribe;
3. *join* (:class:`FkJoinOperator`, tasks by left key, the call itself): the bucket's left
   changes, the answers sent to it and its left state rows (the changed keys', and those
   subscribed to an answered key) go through :func:`sqlext.udfs.fk_join.join_increment`, the
   computation the driver ran over the whole increment before (for ``changes``, each affected
   left key's result row before and after each version that touches it; for ``records``, each
   change's records from the rows as of its moment; with ``sequence_by``, stale changes left
   out first), which gives the forwarded rows and the left state's new rows.

``join_increment`` reads, for a left key, only its own rows and the rows and changes of the
right keys it points at, so the answers give it what the whole increment gave: the results are
the same rows. No task takes every right change: the rows the tasks take in are about the
changes once each, plus the requests (a few per changed left key) and the answers (a right
key's rows once per left bucket that needs them). On the driver the three run one after the
other over whole increments.

One order runs across both inputs, and a change of either input can meet any row of the other,
so every new change must be above the highest ordering value an earlier run processed; one
that is not stops the run with ``[LATE_CHANGE]`` and nothing written, unless ``sequence_by``
says it is stale (older than its key's row), in which case it is ignored as the batch
function ignores it. The answer stage checks every right change, so one that no left row
subscribes to is checked too. ``emit => 'final'`` rewrites the output as the join of the two
states' present rows.

A checkpoint of an earlier sqlext has no subscriptions: its first run builds them once, on the
driver, from the left state's present rows (which hold their foreign keys).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from sqlext.errors import SqlextError
from sqlext.functions.arguments import quote
from sqlext.functions.changes import CHANGE_TYPE, check_order_type
from sqlext.functions.fk_join import FUNCTION, FkJoinSpec, fk_join_spec
from sqlext.language.dialect import INTEGRAL, parse_one
from sqlext.streaming.engine import Input, KeyedOperator, Step
from sqlext.streaming.operators.changelog_filter import PRESENT
from sqlext.streaming.run import arrow_schema, instant, spark_schema, step
from sqlext.streaming.state import KeyedState
from sqlext.udfs.fk_join import checked_last, join_increment


LEFT, RIGHT = "__sx_left", "__sx_right"
FOREIGN_KEY = "__sx_fk"
REQUEST, ANSWER = "__sx_request", "__sx_answer"
TO, WAS, NOW = "__sx_to", "__sx_was", "__sx_now"  # an answer's left bucket; a request's old and new pair
STATE_ROW, CHANGE = "__sx_state_row", "__sx_change"  # an answer's right state row, or right change
SUBSCRIBED = "subscriptions"  # recorded once the subscriptions state exists (an earlier sqlext's has none)


def one_stream(frames: dict, extra: dict | None = None):
    """Several frames as one: a row holds its frame's row in the struct column named by the
    frame's key, the others NULL; ``extra``: columns (name -> Spark column over the rows of the
    frame named first) beside them. (Few calls into Spark: each costs an analysis of the plan,
    paid by every run.)"""
    from pyspark.sql import functions as F

    everything = F.expr("struct(*)")
    names = list(frames)
    first = frames[names[0]].select(*[everything.alias(n) if n == names[0] else
                                      F.lit(None).cast(frames[n].schema).alias(n) for n in names],
                                    *[column.alias(name) for name, column in (extra or {}).items()])
    union = first
    for name in names[1:]:
        union = union.union(frames[name].select(
            *[everything.alias(n) if n == name else F.lit(None).cast(frames[n].schema).alias(n) for n in names],
            *[F.lit(None).cast(first.schema[e].dataType).alias(e) for e in (extra or {})]))
    return union


class _Shared:
    """What the three operators of one call share in a batch: the highest ordering value an
    earlier run processed (read on the driver before the tasks run), and the newest one each
    stage saw (gathered on the driver after them: the join records their maximum)."""

    def __init__(self):
        self.highest, self.newest = None, []


class _Stage(KeyedOperator):
    """What the three stages of one FK_JOIN share: the spec, the states, the ordering record."""

    function = FUNCTION

    def __init__(self, spec: FkJoinSpec, call: exp.Table, folder, states: dict, shared: _Shared):
        super().__init__(folder, call)
        self.spec, self.emit, self.shared_batch = spec, "changes", shared
        self.left_state, self.right_state, self.subscriptions = states["left"], states["right"], states["subscriptions"]
        self.order_by = spec.left.order_by
        self.output_key = []

    def input_order(self, name: str) -> str | None:
        return {"left": self.spec.left.order_by, "right": self.spec.right.order_by}.get(name)

    @property
    def highest(self):
        return self.shared_batch.highest

    @property
    def right_key_type(self) -> pa.DataType:
        return self.right_state.arrow_schema.field(self.spec.right_key).type

    @property
    def left_key_schema(self) -> pa.Schema:
        return pa.schema([self.left_state.arrow_schema.field(k) for k in self.spec.left.key])

    @property
    def buckets(self) -> int:
        return self.left_state.buckets

    def finish(self, batch_id: int, facts: dict) -> None:
        self.shared_batch.newest.append(facts.get("newest"))


def _with_foreign_key(spark, left: pa.Table, stage) -> pa.Table:
    """The left changes with their foreign key (column :data:`FOREIGN_KEY`): the column, or the
    expression computed by Spark."""
    if stage.foreign_column is not None:
        foreign_key = left[stage.foreign_column].cast(stage.foreign_type, safe=False)
    else:
        from pyspark.sql import functions as F

        from sqlext.streaming.run import arrow_frame

        foreign_key = arrow_frame(spark, left).select(F.expr(stage.spec.foreign_key).alias(FOREIGN_KEY)) \
            .toArrow()[FOREIGN_KEY].cast(stage.foreign_type)
    return left.append_column(FOREIGN_KEY, foreign_key)


def _left_frame(frame, foreign_key: str):
    """A Spark frame of left changes as the join's stages read them: the row in :data:`LEFT`,
    its foreign key beside it."""
    from pyspark.sql import functions as F

    return frame.select(F.expr("struct(*)").alias(LEFT), F.expr(foreign_key).alias(FOREIGN_KEY))


class FkSubscribe(_Stage):
    """Stage 1, by left key: the requests of the changed left keys (see the module's docstring).
    It reads the left state and writes nothing."""

    def __init__(self, spec, call, folder, states, shared, left: Input, foreign_column, foreign_type):
        super().__init__(spec, call, folder, states, shared)
        self.inputs = {"left": left}
        self.states = {"left": self.left_state}
        self.foreign_column, self.foreign_type = foreign_column, foreign_type
        self.output_arrow = pa.schema([pa.field(FOREIGN_KEY, self.right_key_type), *self.left_key_schema,
                                       pa.field(TO, pa.int64()), pa.field(WAS, pa.bool_()),
                                       pa.field(NOW, pa.bool_())])

    def prepare(self, frames: dict):
        return _left_frame(frames["left"], self.spec.foreign_key)

    def rows_of(self, table: pa.Table):
        return _side(table, LEFT, extra=FOREIGN_KEY)

    @property
    def arrow_ready(self) -> bool:
        return self.foreign_column is not None

    def rows_from(self, spark, tables: dict):
        return _with_foreign_key(spark, tables["left"], self)

    def of_bucket(self, rows, bucket: int):
        return rows.filter(pa.array(self.left_state.bucket_of(rows) == bucket))

    def route_columns(self) -> list[str]:
        return [LEFT]

    def route(self, table: pa.Table) -> np.ndarray:
        return self.left_state.bucket_of(_side(table, LEFT))

    def routed_by(self, name: str):
        return self.left_state, list(self.left_state.bucket_by)

    def taken(self, rows) -> dict:
        return {"left": rows.num_rows}

    hands = ("left",)  # the join step of each bucket reads the left changes this step took in

    def handed(self, rows, name: str) -> pa.Table:
        return rows

    def step(self, rows, views, batch_id: int) -> Step:
        """Each changed left key's (foreign key, left key) pairs: the one it had (``WAS``), the
        one it has after the batch (``NOW``, computed as the join computes its last row), and
        every one its changes point at in between; each with the left key's bucket (``TO``)."""
        spec, keys = self.spec, list(self.spec.left.key)
        with step("look up the state"):
            changed = rows.select(keys).group_by(keys, use_threads=False).aggregate([]).cast(self.left_key_schema)
            before = views["left"].rows(keys=changed)
        _, after = checked_last(spec, "left", FOREIGN_KEY, PRESENT, rows, before, self.highest)

        def pairs(table, was: bool, now: bool, present: bool):
            if present:
                table = table.filter(pc.fill_null(table[PRESENT], False))
            table = table.filter(pc.is_valid(table[FOREIGN_KEY]))
            n = table.num_rows
            return pa.table([table[FOREIGN_KEY].cast(self.right_key_type, safe=False),
                             *[table[k].cast(self.left_key_schema.field(k).type) for k in keys],
                             pa.array(np.full(n, was)), pa.array(np.full(n, now))],
                            names=[FOREIGN_KEY, *keys, WAS, NOW])

        found = pa.concat_tables([pairs(before, True, False, True), pairs(after, False, True, True),
                                  pairs(rows, False, False, False)])
        found = found.group_by([FOREIGN_KEY, *keys], use_threads=False).aggregate([(WAS, "any"), (NOW, "any")])
        found = found.rename_columns([{f"{WAS}_any": WAS, f"{NOW}_any": NOW}.get(c, c) for c in found.column_names])
        to = pa.array(self.left_state.bucket_of(found, keys), pa.int64())
        out = pa.table([found[FOREIGN_KEY], *[found[k] for k in keys], to, found[WAS], found[NOW]],
                       schema=self.output_arrow)
        return Step(out, {}, {"newest": instant(_highest_of(rows, spec.left.order_by))})

    def split(self, out: pa.Table) -> np.ndarray:
        """The bucket of the answer stage each request goes to: its foreign key's, in the right state."""
        return self.right_state.bucket_of(out, [FOREIGN_KEY])


class FkAnswer(_Stage):
    """Stage 2, by right key: the right state's and the subscriptions' new rows, and the
    answers (see the module's docstring)."""

    def __init__(self, spec, call, folder, states, shared, right: Input, requests: Input):
        super().__init__(spec, call, folder, states, shared)
        self.inputs = {"right": right, "requests": requests}
        self.states = {"right": self.right_state, "subscriptions": self.subscriptions}
        self.output_arrow = pa.schema([pa.field(TO, pa.int64()),
                                       pa.field(STATE_ROW, pa.struct(list(self.right_state.arrow_schema))),
                                       pa.field(CHANGE, pa.struct(list(right.schema)))])

    def begin(self, batch_id: int) -> None:
        """The subscriptions of a checkpoint an earlier sqlext wrote (it kept none): built once,
        here on the driver, from the left state's present rows, as the layers of the batch before."""
        if self.recorded(SUBSCRIBED, batch_id) or batch_id == 0:
            return
        left = self.left_state.before(batch_id)
        if left.empty or not self.subscriptions.before(batch_id).empty:
            return
        rows = left.rows()
        rows = rows.filter(pc.and_(pc.fill_null(rows[PRESENT], False), pc.is_valid(rows[FOREIGN_KEY])))
        subscribed = pa.table([rows[FOREIGN_KEY].cast(self.right_key_type, safe=False),
                               *[rows[k] for k in self.spec.left.key], pa.array(np.ones(rows.num_rows, bool))],
                              names=[FOREIGN_KEY, *self.spec.left.key, PRESENT])
        self.subscriptions.write(self.subscriptions.before(batch_id - 1), subscribed, batch_id - 1)

    def finish(self, batch_id: int, facts: dict) -> None:
        super().finish(batch_id, facts)
        self.record(SUBSCRIBED, batch_id, True)

    def keep(self, name: str):
        return pc.field(PRESENT) if name == "subscriptions" else None  # a dropped pair goes on compaction

    def prepare(self, frames: dict):
        return one_stream({RIGHT: frames["right"], REQUEST: frames["requests"]})

    def rows_of(self, table: pa.Table):
        return _side(table, RIGHT), _side(table, REQUEST)

    @property
    def arrow_ready(self) -> bool:
        return True

    def rows_from(self, spark, tables: dict):
        return tables["right"], tables["requests"]

    def _buckets_of(self, right: pa.Table, requests: pa.Table):
        return self.right_state.bucket_of(right, [self.spec.right_key]), \
            self.right_state.bucket_of(requests, [FOREIGN_KEY])

    def of_bucket(self, rows, bucket: int):
        right, requests = rows
        mine_right, mine_requests = self._buckets_of(right, requests)
        return right.filter(pa.array(mine_right == bucket)), requests.filter(pa.array(mine_requests == bucket))

    def route_columns(self) -> list[str]:
        return [RIGHT, REQUEST]

    def route(self, table: pa.Table) -> np.ndarray:
        is_right = np.asarray(pc.is_valid(table[RIGHT]), dtype=bool)
        owner = np.zeros(table.num_rows, dtype=np.int64)
        right, requests = self._buckets_of(_side(table, RIGHT), _side(table, REQUEST))
        owner[is_right], owner[~is_right] = right, requests
        return owner

    def routed_by(self, name: str):
        return (self.right_state, [self.spec.right_key]) if name == "right" else None

    def taken(self, rows) -> dict:
        return {"right": rows[0].num_rows, "requests": rows[1].num_rows}

    def step(self, rows, views, batch_id: int) -> Step:
        spec, rk, keys = self.spec, self.spec.right_key, list(self.spec.left.key)
        right, requests = rows
        with step("look up the state"):
            changed = pc.unique(right[rk].combine_chunks()).cast(self.right_key_type, safe=False)
            before = views["right"].rows(column=rk, values=changed)
            subscribers = views["subscriptions"].rows(column=FOREIGN_KEY, values=changed)
        right_last, _ = checked_last(spec, "right", FOREIGN_KEY, PRESENT, right, before, self.highest)
        # where each answered key goes: the buckets of its subscribers (for a changed key) and of its requesters
        subscribers = subscribers.filter(pc.fill_null(subscribers[PRESENT], False))
        wanted = pa.concat_tables([
            pa.table([subscribers[FOREIGN_KEY], pa.array(self.left_state.bucket_of(subscribers, keys), pa.int64())],
                     names=[FOREIGN_KEY, TO]),
            pa.table([requests[FOREIGN_KEY].cast(self.right_key_type), requests[TO]], names=[FOREIGN_KEY, TO])])
        wanted = wanted.group_by([FOREIGN_KEY, TO], use_threads=False).aggregate([])
        with step("look up the state"):
            requested = pc.unique(requests[FOREIGN_KEY].combine_chunks()).cast(self.right_key_type)
            rows_of = _unique(pa.concat_tables([before, views["right"].rows(column=rk, values=requested)]), [rk])
        answers = [self._answer(wanted, rows_of, rk, STATE_ROW), self._answer(wanted, right, rk, CHANGE)]
        out = pa.concat_tables(answers)
        deltas = {"right": right_last, "subscriptions": self._subscription_changes(requests)}
        return Step(out, deltas, {"newest": instant(_highest_of(right, spec.right.order_by))})

    def _answer(self, wanted: pa.Table, rows: pa.Table, key: str, column: str) -> pa.Table:
        """The answer rows of ``rows`` (state rows or changes, by ``key``): each once for every
        bucket that wants its key, in ``column``."""
        index = "__sx_index"
        numbered = pa.table([rows[key].cast(self.right_key_type, safe=False),
                             pa.array(np.arange(rows.num_rows, dtype=np.int64))], names=[FOREIGN_KEY, index])
        met = wanted.join(numbered, keys=FOREIGN_KEY, join_type="inner", use_threads=False)
        taken = rows.take(met[index])
        struct_type = self.output_arrow.field(column).type
        values = pa.StructArray.from_arrays([taken[f.name].combine_chunks().cast(f.type) for f in struct_type],
                                            fields=list(struct_type))
        empty = pa.nulls(met.num_rows, type=self.output_arrow.field(CHANGE if column == STATE_ROW else STATE_ROW).type)
        arrays = {TO: met[TO].combine_chunks(), column: values,
                  CHANGE if column == STATE_ROW else STATE_ROW: empty}
        return pa.table([arrays[f.name] for f in self.output_arrow], schema=self.output_arrow)

    def _subscription_changes(self, requests: pa.Table) -> pa.Table:
        """The subscriptions' new rows: a left key's old pair dropped, its new one added (a pair
        it keeps is no change)."""
        moved = requests.filter(pc.not_equal(requests[WAS], requests[NOW]))
        return pa.table([moved[FOREIGN_KEY], *[moved[k] for k in self.spec.left.key], moved[NOW]],
                        names=[FOREIGN_KEY, *self.spec.left.key, PRESENT])

    def split(self, out: pa.Table) -> np.ndarray:
        """The bucket of the join stage each answer goes to (:data:`TO`)."""
        return np.asarray(out[TO], dtype=np.int64)


class FkJoinOperator(_Stage):
    """One incremental FK_JOIN's last stage, the call the statement reads (see the module's
    docstring): its step joins a left bucket's changes with the answers sent to it."""

    def __init__(self, spec: FkJoinSpec, call: exp.Table, folder, left: Input, right: Input, foreign_field,
                 buckets: int = 1):
        """``foreign_field``: the Spark column the foreign key expression gives over the left rows."""
        from pyspark.sql.types import BooleanType, StringType, StructField, StructType

        present = StructField(PRESENT, BooleanType(), True)
        left_fields = {f.name: f for f in left.spark_schema.fields}
        right_fields = {f.name: f for f in right.spark_schema.fields}
        left_state = KeyedState(folder / "left", spec.left.key)
        left_state.record_schema(StructType(
            [left_fields[c] for c in (*spec.left.data_columns, spec.left.order_by)]
            + [StructField(FOREIGN_KEY, foreign_field.dataType, True), present]), buckets)
        right_state = KeyedState(folder / "right", spec.right.key)
        right_state.record_schema(StructType(
            [right_fields[c] for c in (*spec.right.data_columns, spec.right.order_by)] + [present]),
            left_state.buckets)
        subscriptions = KeyedState(folder / "subscriptions", [FOREIGN_KEY, *spec.left.key], bucket_by=[FOREIGN_KEY])
        subscriptions.record_schema(StructType(
            [StructField(FOREIGN_KEY, right_fields[spec.right_key].dataType, True)]
            + [left_fields[k] for k in spec.left.key] + [present]), left_state.buckets)
        states = {"left": left_state, "right": right_state, "subscriptions": subscriptions}
        shared = _Shared()
        super().__init__(spec, call, folder, states, shared)
        self.emit = spec.emit
        self.left, self.right = left_state, right_state
        self.foreign_column = _plain_column(spec.foreign_key, left.schema.names)
        self.foreign_type = arrow_schema(StructType([foreign_field])).field(0).type
        subscribe = FkSubscribe(spec, call, folder, states, shared, left, self.foreign_column, self.foreign_type)
        answer = FkAnswer(spec, call, folder, states, shared, right,
                          Input("requests", subscribe.output_arrow, spark_schema(subscribe.output_arrow),
                                upstream=subscribe))
        self.stages = [subscribe, answer]
        self.inputs = {"left": replace(left, handed_by=subscribe),
                       "answers": Input("answers", answer.output_arrow, spark_schema(answer.output_arrow),
                                        upstream=answer)}
        self.states = {"left": left_state}
        names = spec.right_names
        output = [left_fields[c] for c in spec.left.data_columns]
        output += [StructField(names[c], right_fields[c].dataType, True) for c in spec.right.data_columns]
        if spec.emit != "final":
            output += [StructField(CHANGE_TYPE, StringType(), True), left_fields[spec.left.order_by]]
        self.output_arrow = arrow_schema(StructType(output))
        self.output_key = list(spec.left.key)

    @classmethod
    def build(cls, spark, table: exp.Table, literals: dict, inputs: dict, folder, buckets: int, feed: bool):
        """The operator of a call, its arguments checked against its inputs' columns (Spark's
        analysis over no rows); ``feed``: its table feeds an aggregate, so it runs as its change feed."""
        from pyspark.sql import functions as F

        empty = {name: spark.createDataFrame([], source.spark_schema) for name, source in inputs.items()}
        spec = fk_join_spec(literals, empty["left"].columns, empty["right"].columns)
        spec = replace(spec, left=replace(spec.left, repeats=inputs["left"].repeats),
                       right=replace(spec.right, repeats=inputs["right"].repeats))
        for side, shape in (("left", spec.left), ("right", spec.right)):
            check_order_type(shape, empty[side].schema[shape.order_by].dataType.simpleString())
        foreign_field = empty["left"].select(F.expr(spec.foreign_key).alias(FOREIGN_KEY)).schema.fields[0]
        _check_key_types(spec, foreign_field.dataType, empty["right"].schema[spec.right_key].dataType)
        return cls(replace(spec, emit="changes") if feed else spec, table, folder, inputs["left"], inputs["right"],
                   foreign_field, buckets)

    def begin(self, batch_id: int) -> None:
        """The highest ordering value processed, for the three stages (every operator begins
        before any step runs anywhere)."""
        self.shared_batch.highest = instant(self.recorded("highest", batch_id))
        self.shared_batch.newest = []

    def finish(self, batch_id: int, facts: dict) -> None:
        super().finish(batch_id, facts)
        values = [v for v in (self.highest, *self.shared_batch.newest) if v is not None]
        self.record("highest", batch_id, max(values, default=None))

    # -- the increment

    def prepare(self, frames: dict):
        """The left changes (the foreign key computed) and the answers, as one frame."""
        return one_stream({LEFT: frames["left"], ANSWER: frames["answers"]},
                          {FOREIGN_KEY: _foreign_key_column(self.spec.foreign_key)})

    def rows_of(self, table: pa.Table):
        return _side(table, LEFT, extra=FOREIGN_KEY), _side(table, ANSWER)

    @property
    def arrow_ready(self) -> bool:
        return self.foreign_column is not None  # the foreign key is a column: no Spark to compute it

    def rows_from(self, spark, tables: dict):
        return _with_foreign_key(spark, tables["left"], self), tables["answers"]

    def of_bucket(self, rows, bucket: int):
        """A task's rows: the left changes of its keys, and the answers sent to it."""
        left, answers = rows
        return left.filter(pa.array(self.left.bucket_of(left) == bucket)), \
            answers.filter(pc.equal(answers[TO], bucket))

    def route_columns(self) -> list[str]:
        return [LEFT, ANSWER]

    def route(self, table: pa.Table) -> np.ndarray:
        """A left change goes to the bucket of its key; an answer to the bucket it names."""
        is_left = np.asarray(pc.is_valid(table[LEFT]), dtype=bool)
        owner = np.zeros(table.num_rows, dtype=np.int64)
        owner[is_left] = self.left.bucket_of(_side(table, LEFT))
        owner[~is_left] = np.asarray(_side(table, ANSWER)[TO], dtype=np.int64)
        return owner

    def routed_by(self, name: str):
        return (self.left, list(self.left.bucket_by)) if name == "left" else None

    def forwarded_by(self):
        return self.left, list(self.left.bucket_by)  # a result row keeps its left key's columns

    def taken(self, rows) -> dict:
        return {"left": rows[0].num_rows, "answers": rows[1].num_rows}

    # -- the step

    def step(self, rows, views, batch_id: int) -> Step:
        """The bucket's left changes and the answers sent to it over the left state rows they
        meet: the rows they forward and the changed keys' last left rows."""
        spec = self.spec
        left_rows, answers = rows
        answers = self._one_copy(answers)
        right_rows = _side(answers.filter(pc.is_valid(answers[CHANGE])), CHANGE)
        met_right = _side(answers.filter(pc.is_valid(answers[STATE_ROW])), STATE_ROW)
        with step("look up the state"):
            met_left = self._met(views["left"], left_rows, right_rows)
        with step("join the changes"):
            out, left_last, _ = join_increment(spec, FOREIGN_KEY, PRESENT, left_rows, right_rows, met_left,
                                               met_right, self.highest, self.output_arrow)
        return Step(None if spec.emit == "final" else out, {"left": left_last},
                    {"newest": instant(_highest_of(left_rows, spec.left.order_by))})

    def _one_copy(self, answers: pa.Table) -> pa.Table:
        """The answers, one copy of each right key's: a step that sees the answers of several
        buckets (on the driver, the whole increment's) keeps those sent to the lowest of them."""
        if answers.num_rows == 0 or len(pc.unique(answers[TO])) == 1:
            return answers
        rk = self.spec.right_key
        keys = pc.coalesce(pc.struct_field(answers[STATE_ROW], rk).cast(self.right_key_type),
                           pc.struct_field(answers[CHANGE], rk).cast(self.right_key_type))
        keyed = pa.table([keys, answers[TO]], names=[FOREIGN_KEY, TO])
        lowest = keyed.group_by([FOREIGN_KEY], use_threads=False).aggregate([(TO, "min")])
        chosen = pa.table([lowest[FOREIGN_KEY], lowest[f"{TO}_min"], pa.array(np.ones(lowest.num_rows, bool))],
                          names=[FOREIGN_KEY, TO, "__sx_kept"])
        numbered = keyed.append_column("__sx_row", pa.array(np.arange(keyed.num_rows, dtype=np.int64)))
        kept = numbered.join(chosen, keys=[FOREIGN_KEY, TO], join_type="inner", use_threads=False)["__sx_row"]
        return answers.take(pa.array(np.sort(kept.to_numpy())))

    def _met(self, left_view, left_rows: pa.Table, right_rows: pa.Table):
        """The left state rows the bucket's changes can meet: the changed left keys' and those
        subscribed to a changed right key (the answers' right rows are all the others need)."""
        keys = list(self.spec.left.key)
        changed_left = left_rows.select(keys).group_by(keys, use_threads=False).aggregate([]).cast(self.left_key_schema)
        changed_right = pc.unique(right_rows[self.spec.right_key].combine_chunks()).cast(self.right_key_type)
        return _unique(pa.concat_tables([left_view.rows(keys=changed_left),
                                         left_view.rows(column=FOREIGN_KEY, values=changed_right)]), keys)

    # -- the final table

    def final(self, spark, batch_id: int, on_driver: bool):
        """The join of the two states' present rows after this batch: the final result table
        (joined by Spark, on the driver's placement too)."""
        from pyspark.sql import functions as F

        spec = self.spec
        left = self.left.before(batch_id + 1).frame(spark).where(F.col(PRESENT)).alias("l")
        right = self.right.before(batch_id + 1).frame(spark).where(F.col(PRESENT)).alias("r")
        how = "left" if spec.join_type == "left" else "inner"
        joined = left.join(right, F.col("l." + FOREIGN_KEY) == F.col("r." + quote(spec.right_key)), how)
        names = spec.right_names
        table = joined.select(*[F.col("l." + quote(c)).alias(c) for c in spec.left.data_columns],
                              *[F.col("r." + quote(c)).alias(names[c]) for c in spec.right.data_columns])
        return table


def _foreign_key_column(expression: str):
    from pyspark.sql import functions as F

    return F.expr(expression)


def _key_kind(data_type) -> str:
    """How a key type compares: integers with integers, text with text; any other type only
    with itself."""
    name = data_type.simpleString()
    if name in INTEGRAL:
        return "integer"
    if name == "string" or name.startswith(("varchar", "char")):
        return "string"
    return name


def _check_key_types(spec, foreign, right) -> None:
    """An incremental run matches foreign keys with right keys by value, as they are: types
    that Spark would compare only through an implicit cast (a string foreign key and an integer
    key) are refused before any run, with the cast that makes them one type."""
    if _key_kind(foreign) == _key_kind(right):
        return
    raise SqlextError(
        "UNSUPPORTED_STREAM", function=FUNCTION,
        what=f"a foreign key of type {foreign.simpleString()} against the right key "
             f"{spec.right_key} of type {right.simpleString()}",
        reason="an incremental run matches foreign keys with right keys as they are, and these compare only "
               "through a cast Spark would add in a batch query",
        fix=f"Cast the foreign key to the right key's type in the call, for example foreign_key => "
            f"'CAST({spec.foreign_key} AS {right.simpleString().upper()})'.")


def _plain_column(expression: str, columns) -> str | None:
    """The column an expression names, if it is just a column of ``columns`` (resolved as
    Spark resolves names, ignoring case)."""
    try:
        tree = parse_one(expression)
    except Exception:  # noqa: BLE001 - sqlglot fails in several ways on text it cannot read
        return None
    if not isinstance(tree, exp.Column) or tree.table:
        return None
    matches = [c for c in columns if c == tree.name] or [c for c in columns if c.lower() == tree.name.lower()]
    return matches[0] if len(matches) == 1 else None


def _side(rows: pa.Table, column: str, extra: str | None = None) -> pa.Table:
    """One input's rows of the batch, as a flat table (with ``extra`` beside its columns)."""
    chosen = rows.filter(pc.is_valid(rows[column]))
    struct = chosen[column].combine_chunks()
    names = [struct.type.field(i).name for i in range(struct.type.num_fields)]
    table = pa.table(struct.flatten(), names=names) if chosen.num_rows else \
        pa.schema([struct.type.field(i) for i in range(struct.type.num_fields)]).empty_table()
    if extra is not None:
        table = table.append_column(extra, chosen[extra])
    return table


def _highest_of(rows: pa.Table, order: str):
    """The highest ordering value of some changes; None for none."""
    return pc.max(rows[order]).as_py() if rows.num_rows else None


def _unique(rows: pa.Table, keys) -> pa.Table:
    """One row per key (rows found twice are equal)."""
    if rows.num_rows == 0:
        return rows
    indices = rows.append_column("__sx_row", pa.array(np.arange(rows.num_rows, dtype=np.int64))) \
        .group_by(list(keys), use_threads=False).aggregate([("__sx_row", "min")])["__sx_row_min"]
    return rows.take(indices)

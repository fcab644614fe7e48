"""CHANGELOG_FILTER over Arrow data, column-wise: the one kernel of its incremental runs
(:func:`filter_increment`, which an incremental run runs on the driver or in each task), and the
handler Spark runs when the function is called by name without sqlext's rewrite (a plain
``spark.sql``; :func:`filter_batch`, the kernel from an empty state).

The function's semantics, arguments and output shape are described in
:mod:`sqlext.functions.changelog_filter`; the batch rule (``rewrites/changelog_filter.py``)
is what ``sqlext.sql`` runs. The tests hold the kernel to a plain per-key replay.
"""

from __future__ import annotations

import datetime
import decimal
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.udtf import AnalyzeResult

from sqlext.errors import SqlextError
from sqlext.functions.arguments import bind_arguments, quote
from sqlext.functions.changelog_filter import (
    ARGUMENTS, FUNCTION, PASS_COLUMN, REQUIRED, FilterSpec, filter_spec, not_boolean,
)
from sqlext.functions.changes import (
    CHANGE_TYPE, DELETE, INSERT, POSTIMAGE, PREIMAGE, UPSERT, check_arguments, check_order_type, late_change,
)
from sqlext.udfs.column_wise import (
    check_rows, codes, differ, leaves_row, ranks, replaced_deletes, without_preimages, without_repeats,
)


def _sql_type(value: Any) -> str:
    """The SQL type of a value a predicate gave, for the message (``str`` is STRING)."""
    for python, sql in ((str, "STRING"), (int, "a number"), (float, "DOUBLE"), (decimal.Decimal, "DECIMAL"),
                        (bytes, "BINARY"), (datetime.datetime, "TIMESTAMP"), (datetime.date, "DATE")):
        if isinstance(value, python):
            return sql
    return type(value).__name__


def filter_batch(spec: FilterSpec, rows: pa.Table) -> pa.Table:
    """The filter over a whole input, column-wise: every key's changes applied from no row
    (:func:`filter_increment` from an empty state). ``rows`` holds the input's columns and the
    predicate's value in ``PASS_COLUMN``; returns the output rows (``spec.output_columns``);
    for ``emit => 'final'`` the last row of each key that passes."""
    shape = spec.shape
    columns = [*shape.data_columns, shape.order_by]
    empty = pa.schema([rows.schema.field(c) for c in columns] + [("__sx_was_passed", pa.bool_()),
                                                                ("__sx_was_present", pa.bool_())]).empty_table()
    out, state = filter_increment(spec, without_preimages(shape, rows), empty, "__sx_was_passed", "__sx_was_present")
    if spec.emit != "final":
        return out
    return state.filter(state["__sx_was_passed"]).select(list(shape.data_columns)).cast(_output_schema(spec, rows.schema))


def filter_increment(spec: FilterSpec, changes: pa.Table, state: pa.Table, passed: str, present: str):
    """An increment's forwarded rows and new state, computed over whole columns (no step per
    key or row): each key's changes applied in order from the row an earlier run left for it.

    ``changes`` holds the increment's rows without preimages, each with the predicate's value
    in ``PASS_COLUMN``; ``state`` the touched keys' rows as an earlier run left them (data
    columns, ordering value, whether the row ``passed`` and is ``present``). Returns the
    forwarded rows (``spec.output_columns``) and the changed keys' new state rows.

    The data errors are the change-row rules': an unknown change type, a NULL ordering value,
    two changes of a key at one ordering value (but for a ``delete`` and an ``insert``, where the
    delete comes first and is left out, and for a change an input that repeats changes holds
    again: :func:`~sqlext.udfs.column_wise.without_repeats`), a NULL ``sequence_by`` value, and a change at
    or below the key's last ordering value (``[LATE_CHANGE]``), unless ``sequence_by`` says it
    is stale (older than the key's row), when it is dropped. With ``sequence_by`` a change older
    than a change before it (in the increment, or the key's row) is dropped, as a versioned
    table ignores it."""
    import pyarrow.compute as pc

    shape = spec.shape
    keys, data, order, sequence = list(shape.key), list(shape.data_columns), shape.order_by, shape.sequence_by
    check_rows(shape, changes)
    changes = without_repeats(shape, changes, state, present)
    is_present = leaves_row(shape, changes)
    passes = pc.and_(is_present, pc.fill_null(changes[PASS_COLUMN], False))
    rows = pa.concat_tables([
        state.select(data + [order]).append_column("__sx_passes", pc.fill_null(state[passed], False).cast(pa.bool_()))
        .append_column("__sx_present", pc.fill_null(state[present], False).cast(pa.bool_()))
        .append_column("__sx_prior", pa.array(np.ones(state.num_rows, dtype=bool))),
        changes.select(data + [order]).append_column("__sx_passes", passes).append_column("__sx_present", is_present)
        .append_column("__sx_prior", pa.array(np.zeros(changes.num_rows, dtype=bool))),
    ], promote_options="permissive")
    if rows.num_rows == 0:
        return (_output_schema(spec, changes.schema).empty_table(), _state_rows(rows, data + [order], passed, present))
    # each key's earlier row first, then its changes in order
    key_codes = codes([rows[k] for k in keys])
    order_ranks = ranks(rows[order])
    replaced = replaced_deletes(shape, changes, key_codes[state.num_rows:], order_ranks[state.num_rows:])
    if replaced.any():  # the earlier rows stay
        kept = np.r_[np.ones(state.num_rows, dtype=bool), ~replaced]
        rows, key_codes, order_ranks = rows.filter(pa.array(kept)), key_codes[kept], order_ranks[kept]
    prior = _numpy(rows["__sx_prior"])
    sort = np.lexsort((order_ranks, ~prior, key_codes))
    rows, key_codes, order_ranks, prior = rows.take(pa.array(sort)), key_codes[sort], order_ranks[sort], prior[sort]
    n = rows.num_rows
    first = np.r_[True, key_codes[1:] != key_codes[:-1]]  # the first row of each key
    group = np.cumsum(first) - 1
    new = ~prior
    after_new = ~first & ~np.r_[False, prior[:-1]]  # a change right after a change of its key
    tie = new & after_new & (order_ranks == np.r_[-1, order_ranks[:-1]])
    if tie.any():
        row = _row(rows, tie)
        raise SqlextError("AMBIGUOUS_ORDER", function=shape.function, key=shape.key_text(row), order_by=order,
                          value=repr(row[order]))
    has_prior = prior[first][group]
    prior_rank = np.where(has_prior, order_ranks[first][group], -1)  # the key's last ordering value, as a rank
    kept = new
    if sequence is not None:
        stamps = rows[sequence]
        missing = new & _numpy(pc.is_null(stamps))
        if missing.any():
            raise SqlextError("NULL_SEQUENCE_VALUE", function=shape.function, key=shape.key_text(_row(rows, missing)),
                              sequence_by=sequence)
        stamp = ranks(stamps)
        # a change older than one before it in the increment is stale
        kept = new & (stamp >= _running_max(np.where(new, stamp, -1), first, group))
    late = kept & has_prior & (order_ranks <= prior_rank)
    if sequence is not None:
        prior_stamp = np.where(has_prior, stamp[first][group], -1)
        late &= ~(stamp < prior_stamp)  # at or below the key's last ordering value, and stale: dropped
        candidates = kept & ~(has_prior & (order_ranks <= prior_rank))
        kept = candidates & (stamp >= np.maximum(prior_stamp, _running_max(np.where(candidates, stamp, -1), first,
                                                                           group)))
    if late.any():
        row = _row(rows, late)
        last = rows[order][int(np.nonzero(first & (group == group[late][0]))[0][0])].as_py()
        raise late_change(FUNCTION, shape.key_text(row), order, repr(row[order]), repr(last))
    chosen = np.nonzero(prior | kept)[0]
    if len(chosen) < n:
        rows, key_codes, prior = rows.take(pa.array(chosen)), key_codes[chosen], prior[chosen]
        n = len(chosen)
    first = np.r_[True, key_codes[1:] != key_codes[:-1]]
    previous = rows.take(pa.array(np.maximum(np.arange(n) - 1, 0)))
    new = ~prior
    old_passes = ~first & _numpy(previous["__sx_passes"])
    out = _forwarded(spec, rows, previous, pa.array(new), pa.array(old_passes), rows["__sx_passes"], changes.schema)
    # the changed keys' new state: their last row, where it is a change of this increment
    last = np.r_[key_codes[1:] != key_codes[:-1], True] & new
    return out, _state_rows(rows.filter(pa.array(last)), data + [order], passed, present)


def _numpy(column) -> np.ndarray:
    """A boolean Arrow column without NULLs as a numpy array."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return column.to_numpy(zero_copy_only=False).astype(bool)


def _row(rows: pa.Table, mask: np.ndarray) -> dict:
    """The first row where ``mask`` holds, for an error's message."""
    return rows.slice(int(np.argmax(mask)), 1).to_pylist()[0]


def _running_max(values: np.ndarray, first: np.ndarray, group: np.ndarray) -> np.ndarray:
    """For each row, the highest of ``values`` (ranks from 0, -1 for none) over the rows before
    it in its group (-1 for a group's first row); the groups are runs of rows (``first`` marks
    their starts, ``group`` numbers them)."""
    span = int(values.max(initial=0)) + 2
    lifted = values + group * span  # every group above all earlier ones, so one running max serves all
    highest = np.maximum.accumulate(lifted) - group * span
    return np.where(first, -1, np.r_[-1, highest[:-1]])


def _state_rows(kept: pa.Table, columns: list[str], passed: str, present: str) -> pa.Table:
    """State rows in the state's own column names, from the working rows kept for it."""
    return kept.select(columns).append_column(passed, kept["__sx_passes"]) \
        .append_column(present, kept["__sx_present"])


def _forwarded(spec: FilterSpec, rows: pa.Table, previous: pa.Table, new, old_passes, new_passes, schema) -> pa.Table:
    """The rows the increment's changes forward: for ``records`` each change as an upsert of its
    row where it passes, else a delete of its key; for ``changes`` what a reader of the filtered
    table sees (an insert where a key starts to pass, a delete where it stops, a preimage and a
    postimage where it passes before and after with other values)."""
    import pyarrow.compute as pc

    shape = spec.shape
    data, order = list(shape.data_columns), shape.order_by
    output = _output_schema(spec, schema)

    def image(table: pa.Table, mask, kind: str, order_from: pa.Table) -> pa.Table:
        chosen = table.filter(mask)
        arrays = [chosen[c] for c in data] + [pa.array([kind] * chosen.num_rows, pa.string()),
                                              order_from.filter(mask)[order]]
        return pa.Table.from_arrays(arrays, names=data + [CHANGE_TYPE, order]).cast(output)

    if spec.emit == "records":
        chosen = rows.filter(new)
        keep = new_passes.filter(new)
        arrays = [chosen[c] if c in shape.key else pc.if_else(keep, chosen[c], pa.nulls(chosen.num_rows, chosen[c].type))
                  for c in data]
        kinds = pc.if_else(keep, UPSERT, DELETE)
        return pa.Table.from_arrays(arrays + [kinds, chosen[order]], names=data + [CHANGE_TYPE, order]).cast(output)
    if spec.emit != "changes":
        return output.empty_table()
    differs = pa.array(differ(rows, previous, data))
    both = pc.and_(pc.and_(new, pc.and_(old_passes, new_passes)), differs)
    inserted = pc.and_(new, pc.and_(new_passes, pc.invert(old_passes)))
    deleted = pc.and_(new, pc.and_(old_passes, pc.invert(new_passes)))
    return pa.concat_tables([image(previous, both, PREIMAGE, rows), image(rows, both, POSTIMAGE, rows),
                             image(rows, inserted, INSERT, rows), image(previous, deleted, DELETE, rows)])


def _output_schema(spec: FilterSpec, input_schema: pa.Schema) -> pa.Schema:
    fields = []
    for name in spec.output_columns:
        if name == CHANGE_TYPE:
            fields.append(pa.field(CHANGE_TYPE, pa.string()))
        else:
            fields.append(input_schema.field(name))
    return pa.schema(fields)


class ChangelogFilterUDTF:
    """CHANGELOG_FILTER as a registered Python table function.

    ``analyze`` checks the call and asks Spark to partition the input by the key, order it,
    and evaluate the predicate natively (a selected column), so Python sees each key's
    changes together and never evaluates SQL itself. The handler only buffers one key's rows
    and hands them to :func:`filter_batch`.
    """

    def __init__(self, analyze_result=None):
        self._spec: FilterSpec | None = getattr(analyze_result, "spec", None)
        self._rows: list[dict] = []
        self._passes: list[Any] = []
        self._schema = getattr(analyze_result, "input_arrow_schema", None)

    @staticmethod
    def analyze(*positional, **named):
        from pyspark.sql.types import StringType, StructField, StructType
        from pyspark.sql.udtf import OrderingColumn, PartitioningColumn, SelectedColumn

        given = bind_arguments(FUNCTION, [(None, a) for a in positional] + list(named.items()), ARGUMENTS,
                               show=lambda argument: "an argument")
        check_arguments(FUNCTION, given, ARGUMENTS, REQUIRED)
        input = given.pop("input")
        arguments = {}
        for name, argument in given.items():
            if argument.isTable or not argument.isConstantExpression:
                raise SqlextError(
                    "INVALID_ARGUMENT_TYPE", function=FUNCTION, argument=name,
                    expected="a constant string", value="an expression or table",
                    fix=f"Write {name} => '...'.",
                )
            arguments[name] = argument.value
        if not input.isTable:
            raise SqlextError(
                "INVALID_ARGUMENT_TYPE", function=FUNCTION, argument="input",
                expected="a table argument", value="a scalar",
                fix="Write input => TABLE(my_changes).",
            )
        schema: StructType = input.dataType
        spec = filter_spec(arguments, schema.fieldNames())
        by_name = {f.name: f for f in schema.fields}
        check_order_type(spec.shape, by_name[spec.shape.order_by].dataType.simpleString())
        out_fields = [
            StructField(CHANGE_TYPE, StringType()) if c == CHANGE_TYPE else by_name[c]
            for c in spec.output_columns
        ]
        from pyspark.sql.pandas.types import to_arrow_schema

        result = _FilterAnalyzeResult(
            schema=StructType(out_fields),
            partitionBy=[PartitioningColumn(quote(k)) for k in spec.shape.key],
            orderBy=[OrderingColumn(quote(spec.shape.order_by))],
            select=[SelectedColumn(quote(c)) for c in schema.fieldNames()]
            + [SelectedColumn(spec.predicate, PASS_COLUMN)],
            spec=spec,
            input_arrow_schema=to_arrow_schema(_as_local_times(schema)),
        )
        return result

    def eval(self, input, *_positional, **_named):
        record = input.asDict(recursive=False)
        passed = record.pop(PASS_COLUMN)
        if passed is not None and not isinstance(passed, bool):
            raise not_boolean(self._spec.predicate, _sql_type(passed))
        self._passes.append(passed)
        self._rows.append(record)

    def terminate(self):
        if not self._rows:
            return
        table = pa.Table.from_pylist(self._rows, schema=self._schema) \
            .append_column(PASS_COLUMN, pa.array(self._passes, pa.bool_()))
        for row in filter_batch(self._spec, table).to_pylist():
            yield tuple(row.values())


def _as_local_times(schema):
    """``schema`` with TIMESTAMP columns as TIMESTAMP_NTZ, for the Arrow table the handler
    builds from the rows Spark hands it: their timestamps arrive as datetimes without a time
    zone (local time) and go back to Spark the same way, so Arrow keeps them as they are (it
    needs a zone for TIMESTAMP, which the handler does not know)."""
    from pyspark.sql.types import StructField, StructType, TimestampNTZType, TimestampType

    return StructType([StructField(f.name, TimestampNTZType(), f.nullable, f.metadata)
                       if isinstance(f.dataType, TimestampType) else f for f in schema.fields])


@dataclass
class _FilterAnalyzeResult(AnalyzeResult):
    """What analyze learned, handed by Spark to every handler instance."""

    spec: Any = None
    input_arrow_schema: Any = None

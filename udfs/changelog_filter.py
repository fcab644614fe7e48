"""CHANGELOG_FILTER as a registered table function: the reference logic over Arrow data and the
handler Spark runs when the function is called by name (without the native rewrite).

The function's semantics, arguments and output shape are described in
:mod:`sqlext.catalog.changelog_filter`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow as pa
from pyspark.sql.udtf import AnalyzeResult

from sqlext.errors import SqlextError
from sqlext.catalog.arguments import bind_arguments, quote
from sqlext.catalog.changelog_filter import (
    ARGUMENTS, FUNCTION, PASS_COLUMN, REQUIRED, FilterSpec, filter_spec, not_boolean,
)
from sqlext.catalog.changes import (
    CHANGE_TYPE, DELETE, INSERT, POSTIMAGE, PREIMAGE, UPSERT, changes_by_key, check_arguments,
    check_order_type, drop_stale, late_change,
)


def changelog_filter(spec: FilterSpec, rows: pa.Table, passes: Sequence[Any]) -> pa.Table:
    """The reference logic: apply the filter to a whole input, in plain Python over Arrow rows.

    ``passes[i]`` is the predicate's value for row ``i`` (NULL counts as not passing).
    Returns the output rows as an Arrow table with ``spec.output_columns``.
    """
    shape = spec.shape
    records = rows.to_pylist()
    for record, passed in zip(records, passes):
        if passed is not None and not isinstance(passed, bool):
            raise not_boolean(spec.predicate, _sql_type(passed))
        record[PASS_COLUMN] = bool(passed)
    out: list[dict] = []
    for changes in changes_by_key(shape, records).values():
        old, old_passes = apply_changes(spec, changes, None, False, out)
        if spec.emit == "final" and old_passes:
            out.append({c: old[c] for c in shape.data_columns})
    return pa.Table.from_pylist(out, schema=_output_schema(spec, rows.schema))


def _sql_type(value: Any) -> str:
    """The SQL type of a value a predicate gave, for the message (``str`` is STRING)."""
    import datetime
    import decimal

    for python, sql in ((str, "STRING"), (int, "a number"), (float, "DOUBLE"), (decimal.Decimal, "DECIMAL"),
                        (bytes, "BINARY"), (datetime.datetime, "TIMESTAMP"), (datetime.date, "DATE")):
        if isinstance(value, python):
            return sql
    return type(value).__name__


def apply_changes(spec: FilterSpec, changes, old: dict | None, old_passes: bool, out: list) -> tuple[dict | None, bool]:
    """One key's ordered changes, from the key's row before them (``old``, and whether it
    passed the predicate): appends what they forward to ``out`` and returns the key's row
    after them. The batch run starts every key from no row; an incremental run starts it
    from the row its state kept."""
    for change in changes:
        new_passes = change.present and change.row[PASS_COLUMN]
        out.extend(_forward(spec, change.row, old, old_passes, new_passes))
        old, old_passes = change.row, new_passes
    return old, old_passes


def apply_increment(spec: FilterSpec, changes, old: dict | None, old_passes: bool, last_order, out: list):
    """One key's new changes on top of what an earlier run left for it (its row, whether it
    passed, its last ordering value; all None/False for a new key): like
    :func:`apply_changes`, after refusing or dropping the late ones (:func:`in_order`).
    Returns the key's row and whether it passes after them, or None when no change applies."""
    shape = spec.shape
    if last_order is not None:
        changes = in_order(spec, changes, old, last_order)
        if shape.sequence_by is not None:
            changes = drop_stale(shape, changes, latest=old[shape.sequence_by])
    if not changes:
        return None
    return apply_changes(spec, changes, old, old_passes, out)


def in_order(spec: FilterSpec, changes, old: dict, last_order):
    """The changes an earlier run's state lets this run apply: those above the key's last
    ordering value. A late one is ignored when ``sequence_by`` says it is stale (older than
    the key's row), as the batch run ignores it; otherwise it is ``[LATE_CHANGE]``."""
    shape = spec.shape
    kept = []
    for change in changes:
        if change.order > last_order:
            kept.append(change)
        elif shape.sequence_by is not None and change.row[shape.sequence_by] is not None \
                and change.row[shape.sequence_by] < old[shape.sequence_by]:
            continue
        else:
            raise late_change(FUNCTION, shape.key_text(change.row), shape.order_by, repr(change.order),
                              repr(last_order))
    return kept


def filter_increment(spec: FilterSpec, changes: pa.Table, state: pa.Table, passed: str, present: str):
    """An increment's forwarded rows and new state, computed column-wise: the same rows as
    :func:`apply_increment` key by key, for inputs without ``sequence_by`` (None is returned
    for those, which take the per-key path).

    ``changes`` holds the increment's rows without preimages, each with the predicate's value
    in ``PASS_COLUMN``; ``state`` the touched keys' rows as an earlier run left them (data
    columns, ordering value, whether the row ``passed`` and is ``present``). Returns the
    forwarded rows (``spec.output_columns``) and the changed keys' new state rows."""
    import pyarrow.compute as pc

    from sqlext.udfs.column_wise import check_rows, leaves_row, same_value

    shape = spec.shape
    if shape.sequence_by is not None:
        return None
    keys, data, order = list(shape.key), list(shape.data_columns), shape.order_by
    check_rows(shape, changes)
    is_present = leaves_row(shape, changes)
    passes = pc.and_(is_present, pc.fill_null(changes[PASS_COLUMN], False))
    rows = pa.concat_tables([
        state.select(data + [order]).append_column("__sx_passes", pc.fill_null(state[passed], False).cast(pa.bool_()))
        .append_column("__sx_present", pc.fill_null(state[present], False).cast(pa.bool_()))
        .append_column("__sx_prior", pa.array([True] * state.num_rows, pa.bool_())),
        changes.select(data + [order]).append_column("__sx_passes", passes).append_column("__sx_present", is_present)
        .append_column("__sx_prior", pa.array([False] * changes.num_rows, pa.bool_())),
    ], promote_options="permissive")
    # each key's earlier row first, then its changes in order
    rows = rows.take(pc.sort_indices(rows, sort_keys=[(k, "ascending", "at_start") for k in keys]
                                     + [("__sx_prior", "descending", "at_start"), (order, "ascending", "at_start")]))
    n = rows.num_rows
    if n == 0:
        return (pa.Table.from_pylist([], schema=_output_schema(spec, changes.schema)),
                _state_rows(rows, data + [order], passed, present))
    before = pa.array(range(-1, n - 1), pa.int64())
    has_before = pa.array([False] + [True] * (n - 1), pa.bool_())
    previous = rows.take(pc.if_else(has_before, before, 0))
    same_key = has_before
    for k in keys:
        same_key = pc.and_(same_key, same_value(rows[k], previous[k]))
    new = pc.invert(rows["__sx_prior"])
    after_prior = pc.and_(pc.and_(new, same_key), previous["__sx_prior"])
    late = pc.and_(after_prior, pc.less_equal(rows[order], previous[order]))
    if pc.any(late).as_py():
        row = rows.filter(late).slice(0, 1).to_pylist()[0]
        last = previous.filter(late).slice(0, 1).to_pylist()[0][order]
        raise late_change(FUNCTION, shape.key_text(row), order, repr(row[order]), repr(last))
    tie = pc.and_(pc.and_(pc.and_(new, same_key), pc.invert(previous["__sx_prior"])),
                  pc.equal(rows[order], previous[order]))
    if pc.any(tie).as_py():
        row = rows.filter(tie).slice(0, 1).to_pylist()[0]
        raise SqlextError("AMBIGUOUS_ORDER", function=shape.function, key=shape.key_text(row), order_by=order,
                          value=repr(row[order]))
    old_passes = pc.and_(same_key, previous["__sx_passes"])
    new_passes = rows["__sx_passes"]
    out = _forwarded(spec, rows, previous, new, old_passes, new_passes, changes.schema)
    # the changed keys' new state: their last row, where it is a change of this increment
    has_after = pa.array([True] * (n - 1) + [False], pa.bool_())
    following = rows.take(pc.if_else(has_after, pa.array(range(1, n + 1), pa.int64()), 0))
    next_same = has_after
    for k in keys:
        next_same = pc.and_(next_same, same_value(rows[k], following[k]))
    last = pc.and_(pc.invert(next_same), new)
    return out, _state_rows(rows.filter(last), data + [order], passed, present)


def _state_rows(kept: pa.Table, columns: list[str], passed: str, present: str) -> pa.Table:
    """State rows in the state's own column names, from the working rows kept for it."""
    return kept.select(columns).append_column(passed, kept["__sx_passes"]) \
        .append_column(present, kept["__sx_present"])


def _forwarded(spec: FilterSpec, rows: pa.Table, previous: pa.Table, new, old_passes, new_passes, schema) -> pa.Table:
    """The rows the increment's changes forward (:func:`_forward`, column-wise)."""
    import pyarrow.compute as pc

    from sqlext.udfs.column_wise import differ

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


def _forward(spec: FilterSpec, new: dict, old: dict | None, old_passes: bool, new_passes: bool):
    shape = spec.shape
    order = new[shape.order_by]
    if spec.emit == "records":
        values = {c: (new[c] if new_passes or c in shape.key else None) for c in shape.data_columns}
        yield {**values, CHANGE_TYPE: UPSERT if new_passes else DELETE, shape.order_by: order}
        return
    if spec.emit != "changes":
        return

    def image(row: dict, kind: str) -> dict:
        return {**{c: row[c] for c in shape.data_columns}, CHANGE_TYPE: kind, shape.order_by: order}

    if old_passes and new_passes:
        if any(old[c] != new[c] for c in shape.data_columns):
            yield image(old, PREIMAGE)
            yield image(new, POSTIMAGE)
    elif new_passes:
        yield image(new, INSERT)
    elif old_passes:
        yield image(old, DELETE)


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
    and hands them to :func:`changelog_filter`.
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
        self._passes.append(record.pop(PASS_COLUMN))
        self._rows.append(record)

    def terminate(self):
        if not self._rows:
            return
        table = pa.Table.from_pylist(self._rows, schema=self._schema)
        result = changelog_filter(self._spec, table, self._passes)
        for row in result.to_pylist():
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

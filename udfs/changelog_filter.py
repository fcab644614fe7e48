"""CHANGELOG_FILTER: a table filter that forwards minimal old/new pairs (seed 003, KAFKA-3902).

Per key, in order, each change moves the key from an old row (or none) to a new row (or none).
With ``emit => 'changes'`` (Kafka's "send old values" on) the filter forwards, by the seed's
case table:

==================  ==================  =============================================
old row             new row             forwarded
==================  ==================  =============================================
none or filtered    none or filtered    nothing (3a, 3b, 3c2)
none or filtered    passes              ``insert`` of the new row (3a, 3c4)
passes              none or filtered    ``delete`` of the old row (3b, 3c3)
passes              passes              ``update_preimage``/``update_postimage`` (3c1),
                                        nothing if the two rows are equal
==================  ==================  =============================================

With ``emit => 'records'`` (old values off, case 2) every change is forwarded: an ``upsert`` of
the new row if it passes, otherwise a tombstone (``delete`` with NULL values), because a
downstream table cannot otherwise learn that the key left the filtered table.
``emit => 'final'`` is the filtered table after the last change.

This module holds the argument checks shared with the native rewrite
(:mod:`sqlext.rewrites.changelog_filter_to_sql`), the reference logic over Arrow data, and the
handler that Spark runs when CHANGELOG_FILTER is called as a registered table function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.udtf import AnalyzeResult

from sqlext.errors import SqlextError
from sqlext.udfs.changes import (
    CHANGE_TYPE, DELETE, EMIT_MODES, INSERT, POSTIMAGE, PREIMAGE, UPSERT, ChangeShape,
    change_shape, changes_by_key, check_arguments, check_option,
)
from sqlext.rewrites.sqltree import helper
from sqlext.rewrites.table_functions import quote
from sqlext.udfs.expressions import check_columns, parse_expression

FUNCTION = "CHANGELOG_FILTER"
ARGUMENTS = ("input", "key", "predicate", "order_by", "emit", "sequence_by")
REQUIRED = ("input", "key", "predicate")
PASS_COLUMN = helper("pass")


@dataclass(frozen=True)
class FilterSpec:
    shape: ChangeShape
    predicate: str  # normalised SQL text of the predicate
    emit: str

    @property
    def output_columns(self) -> tuple[str, ...]:
        shape = self.shape
        if self.emit == "final":
            return shape.data_columns
        return shape.data_columns + (CHANGE_TYPE, shape.order_by)


def filter_spec(arguments: Mapping[str, Any], columns: Sequence[str]) -> FilterSpec:
    """Check a call's arguments against the input's columns; raise a SqlextError on bad input.

    ``arguments`` maps argument names to their literal values (``input`` excluded).
    """
    check_arguments(FUNCTION, list(arguments) + ["input"], ARGUMENTS, REQUIRED)
    args = {k.lower(): v for k, v in arguments.items()}
    shape = change_shape(
        FUNCTION, "input", columns, args.get("key"), args.get("order_by"), args.get("sequence_by")
    )
    predicate = parse_expression(FUNCTION, "predicate", args.get("predicate"), "'balance >= 0'")
    check_columns(FUNCTION, "input", predicate, columns, "predicate")
    emit = check_option(FUNCTION, "emit", args.get("emit", "changes"), EMIT_MODES)
    from sqlext.rewrites.dialect import to_sql

    return FilterSpec(shape, to_sql(predicate), emit)


def not_boolean(spec_predicate: str, actual: str) -> SqlextError:
    return SqlextError(
        "EXPRESSION_TYPE_MISMATCH", function=FUNCTION, argument="predicate",
        value=repr(spec_predicate), actual=actual, expected="BOOLEAN",
        fix="Write a condition, for example 'balance >= 0' or 'status = ''open'''.",
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
            raise not_boolean(spec.predicate, type(passed).__name__)
        record[PASS_COLUMN] = bool(passed)
    out: list[dict] = []
    for changes in changes_by_key(shape, records).values():
        old, old_passes = None, False
        for change in changes:
            new_passes = change.present and change.row[PASS_COLUMN]
            out.extend(_forward(spec, change.row, old, old_passes, new_passes))
            old, old_passes = change.row, new_passes
        if spec.emit == "final" and old_passes:
            out.append({c: old[c] for c in shape.data_columns})
    return pa.Table.from_pylist(out, schema=_output_schema(spec, rows.schema))


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

        given = dict(zip(ARGUMENTS, positional))
        for name, argument in named.items():
            if name.lower() in given:
                raise SqlextError("DUPLICATE_ARGUMENT", function=FUNCTION, argument=name)
            given[name.lower()] = argument
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
            input_arrow_schema=to_arrow_schema(schema),
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


@dataclass
class _FilterAnalyzeResult(AnalyzeResult):
    """What analyze learned, handed by Spark to every handler instance."""

    spec: Any = None
    input_arrow_schema: Any = None

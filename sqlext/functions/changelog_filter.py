"""CHANGELOG_FILTER: a table filter that forwards minimal old/new pairs (KAFKA-3902).

Per key, in order, each change moves the key from an old row (or none) to a new row (or none).
With ``emit => 'changes'`` (Kafka's "send old values" on) the filter forwards, by KAFKA-3902's
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

This module is the function's entry in the catalogue: its arguments, their checks and the
shape of its output, shared by the native rewrite (:mod:`sqlext.rewrites.changelog_filter`)
and the registered table function (:mod:`sqlext.udfs.changelog_filter`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from sqlglot import exp

from sqlext.functions.changes import (
    CHANGE_TYPE, EMIT_MODES, ChangeShape, change_shape, check_arguments, check_option,
)
from sqlext.functions.definition import Function
from sqlext.functions.expressions import check_columns, parse_expression
from sqlext.functions.input_formats import check_read
from sqlext.errors import SqlextError, sql_value
from sqlext.language.dialect import to_sql
from sqlext.language.sqltree import helper

FUNCTION = "CHANGELOG_FILTER"
ARGUMENTS = ("input", "key", "predicate", "order_by", "emit", "sequence_by", "format")
REQUIRED = ("input", "key", "predicate")
TABLES = ("input",)  # the arguments that take a table
PASS_COLUMN = helper("pass")

DEFINITION = Function(
    FUNCTION, "a change feed filtered to the minimal old/new pairs (KAFKA-3902)", ARGUMENTS, TABLES, keys=("key",),
    needs=(("input", ("key", "order_by", "sequence_by")),),
    why="filtering its input change feed to the new versions turns the update of a key seen in an earlier run "
        "into an insert, and loses its delete",
    rule="sqlext.rewrites.changelog_filter:changelog_filter_to_sql",
    operator="sqlext.streaming.operators.changelog_filter:FilterOperator",
    table_function="sqlext.udfs.changelog_filter:ChangelogFilterUDTF")


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
    check_read(FUNCTION, args)
    shape = change_shape(
        FUNCTION, "input", columns, args.get("key"), args.get("order_by"), args.get("sequence_by")
    )
    predicate = parse_expression(FUNCTION, "predicate", args.get("predicate"), "'balance >= 0'")
    if isinstance(predicate.unnest(), exp.Literal):  # a constant string or number is no condition
        raise not_boolean(args.get("predicate"), "STRING" if predicate.unnest().is_string else "a number")
    check_columns(FUNCTION, "input", predicate, columns, "predicate")
    emit = check_option(FUNCTION, "emit", args.get("emit", "changes"), EMIT_MODES)

    return FilterSpec(shape, to_sql(predicate), emit)


def not_boolean(spec_predicate: str, actual: str) -> SqlextError:
    return SqlextError(
        "EXPRESSION_TYPE_MISMATCH", function=FUNCTION, argument="predicate",
        value=sql_value(spec_predicate), actual=actual, expected="BOOLEAN",
        fix="Write a condition, for example 'balance >= 0' or 'status = ''open'''.",
    )

"""FK_JOIN: the foreign-key table-table join of KIP-213 (seeds 000 and 002).

The left table's rows find their right row through a foreign key computed from the left row;
the result is keyed by the left key. This module checks a call's arguments (shared by the
native expansion in :mod:`sqlext.rewrites.fk_join`) and names the output columns.

Semantics, for a sequential replay in ``order_by`` order (at equal ordering values the right
input's change is applied first, as a referenced table is written before the rows that
refer to it):

``records`` forwards what Kafka Streams' subscription/response workflow forwards:

* a left change to a row with a foreign key subscribes it at the right key: with a right row
  the joined row is forwarded; without one, a left join forwards the left row padded with
  NULLs, and an inner join forwards a tombstone if the key had a row before (KIP-213's
  ``PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE``, including its deliberate redundant tombstones)
  and nothing for a new key (``PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE``);
* a left row with a NULL foreign key: a left join forwards it padded with NULLs; an inner
  join treats it as absent (a tombstone if the key had a row before);
* a left delete of a present row forwards a tombstone, joined or not;
* a right change (anything but the delete of an absent key) re-forwards every left row
  subscribed to that right key at that moment (KIP-213's prefix scan).

``changes`` is the minimal change feed of the result table; ``final`` the result table after
the last change, which equals a plain join of the final left and right tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from sqlext.errors import SqlextError, sql_value
from sqlext.functions.changes import CHANGE_TYPE, EMIT_MODES, ChangeShape, change_shape, check_arguments, check_option
from sqlext.functions.definition import Function
from sqlext.functions.expressions import check_columns, parse_expression
from sqlext.functions.input_formats import check_read
from sqlext.language.dialect import is_numeric, to_sql

FUNCTION = "FK_JOIN"
ARGUMENTS = ("left", "right", "left_key", "foreign_key", "right_key", "join_type", "order_by", "emit",
             "sequence_by", "format")
REQUIRED = ("left", "right", "left_key", "foreign_key", "right_key")
TABLES = ("left", "right")  # the arguments that take a table
JOIN_TYPES = ("inner", "left")
RIGHT_SUFFIX = "_right"

DEFINITION = Function(
    FUNCTION, "the foreign-key join of two change feeds (KIP-213)", ARGUMENTS, TABLES,
    keys=("left_key", "foreign_key", "right_key"),
    needs=(("left", ("left_key", "foreign_key", "order_by", "sequence_by")),
           ("right", ("right_key", "order_by", "sequence_by"))),
    why="filtering its input change feeds to the new versions turns the update of a key seen in an earlier run "
        "into an insert, and joins new rows only to new rows",
    rule="sqlext.rewrites.fk_join:fk_join_to_sql",
    operator="sqlext.streaming.operators.fk_join:FkJoinOperator")


@dataclass(frozen=True)
class FkJoinSpec:
    left: ChangeShape
    right: ChangeShape
    foreign_key: str  # normalised SQL of the foreign key expression over the left row
    join_type: str
    emit: str

    @property
    def right_key(self) -> str:
        return self.right.key[0]

    @property
    def right_names(self) -> dict[str, str]:
        """Output name of each right data column (``_right`` added on a clash with the left)."""
        taken = {c.lower() for c in self.left.data_columns}
        names = {}
        for column in self.right.data_columns:
            name = column
            while name.lower() in taken:
                name += RIGHT_SUFFIX
            taken.add(name.lower())
            names[column] = name
        return names

    @property
    def data_columns(self) -> tuple[str, ...]:
        return self.left.data_columns + tuple(self.right_names.values())

    @property
    def output_columns(self) -> tuple[str, ...]:
        if self.emit == "final":
            return self.data_columns
        return self.data_columns + (CHANGE_TYPE, self.left.order_by)


def fk_join_spec(arguments: Mapping[str, Any], left_columns: Sequence[str],
                 right_columns: Sequence[str]) -> FkJoinSpec:
    """Check a call's arguments against both inputs' columns (``left``/``right`` excluded)."""
    check_arguments(FUNCTION, list(arguments) + ["left", "right"], ARGUMENTS, REQUIRED)
    args = {k.lower(): v for k, v in arguments.items()}
    check_read(FUNCTION, args)
    order_by, sequence_by = args.get("order_by"), args.get("sequence_by")
    left = change_shape(FUNCTION, "left", left_columns, args.get("left_key"), order_by, sequence_by,
                        key_argument="left_key")
    right = change_shape(FUNCTION, "right", right_columns, args.get("right_key"), order_by, sequence_by,
                         key_argument="right_key")
    if len(right.key) != 1:
        raise SqlextError(
            "INVALID_ARGUMENT_TYPE", function=FUNCTION, argument="right_key", expected="one column",
            value=sql_value(args.get("right_key")),
            fix="Name the right table's key column; combine several into one expression on both sides.",
        )
    foreign_key = parse_expression(FUNCTION, "foreign_key", args.get("foreign_key"), "'customer_id'")
    check_columns(FUNCTION, "left", foreign_key, left_columns, "foreign_key")
    join_type = check_option(FUNCTION, "join_type", args.get("join_type", "inner"), JOIN_TYPES)
    emit = check_option(FUNCTION, "emit", args.get("emit", "changes"), EMIT_MODES)

    return FkJoinSpec(left, right, to_sql(foreign_key), join_type, emit)


def check_foreign_key_type(spec: FkJoinSpec, fk_type: str | None, key_type: str | None) -> None:
    """The foreign key must compare with the right key without a lossy cast."""
    if fk_type is None or key_type is None:
        return
    fk_t, key_t = fk_type.lower(), key_type.lower()

    def family(t: str) -> str:
        if is_numeric(t):
            return "numeric"
        if t.startswith("string") or t.startswith("varchar") or t.startswith("char"):
            return "string"
        return t

    if fk_t == "void":
        return
    if family(fk_t) != family(key_t):
        raise SqlextError(
            "EXPRESSION_TYPE_MISMATCH", function=FUNCTION, argument="foreign_key",
            value=sql_value(spec.foreign_key), actual=fk_type.upper(),
            expected=f"the type of right_key {spec.right_key!r} ({key_type.upper()})",
            fix=f"Cast it in the expression, for example 'CAST(... AS {key_type.upper()})'.",
        )

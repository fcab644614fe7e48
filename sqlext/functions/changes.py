"""The change-row vocabulary shared by every table function (the README's "Change rows").

An input is either a change feed (it has ``_change_type``) or a plain upsert log (it has not).
Both are reduced to the same thing: per key, in ordering-column order, a sequence of *changes*,
each of which either sets the key's current row (``present``) or removes it.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from sqlext.errors import SqlextError, sql_value
from sqlext.language.sqltree import read_identifier_list

CHANGE_TYPE = "_change_type"
DEFAULT_ORDER_BY = "_commit_version"

INSERT = "insert"
PREIMAGE = "update_preimage"
POSTIMAGE = "update_postimage"
DELETE = "delete"
CHANGE_TYPES = (INSERT, PREIMAGE, POSTIMAGE, DELETE)
SETS_VALUE = (INSERT, POSTIMAGE)

# record stream vocabulary (emit => 'records')
UPSERT = "upsert"

EMIT_MODES = ("changes", "records", "final")

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$|^`(?:[^`]|``)+`$")


def quoted_list(values: Iterable[str]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def split_columns(function: str, argument: str, text: Any) -> list[str]:
    """``'a'`` or ``'a, b'`` -> column names, checked to be plain identifiers; a name in
    backticks may hold any character (a backtick written twice, as Spark quotes it).

    >>> split_columns("F", "key", "id, `k {x}`, `it's ``q```")
    ['id', 'k {x}', "it's `q`"]
    """
    if not isinstance(text, str) or not text.strip():
        raise SqlextError(
            "INVALID_ARGUMENT_TYPE", function=function, argument=argument,
            expected="a string naming one column or several separated by commas",
            value=sql_value(text), fix=f"Write {argument} => 'id' or {argument} => 'id, region'.",
        )
    not_names = SqlextError(
        "INVALID_ARGUMENT_TYPE", function=function, argument=argument,
        expected="column names", value=sql_value(text),
        fix="Name columns only (quote unusual names with backticks); use an expression "
        "argument where the function has one.",
    )
    try:
        names = read_identifier_list(text)
    except Exception:  # noqa: BLE001 - sqlglot's tokenizer refuses the text (an open quote)
        raise not_names from None
    for name, part in zip(names, _parts(text)):
        if not _IDENTIFIER.match(part):
            raise not_names
    if not names or len(names) != len(_parts(text)):
        raise not_names
    return names


def _parts(text: str) -> list[str]:
    """The list's items as written: plain names, or names in backticks (commas inside
    backticks belong to the name)."""
    parts, current, quoted = [], "", False
    for char in text:
        if char == "`":
            quoted = not quoted
        if char == "," and not quoted:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    return parts


def resolve_column(function: str, side: str, columns: Sequence[str], name: str, fix: str) -> str:
    """The input's spelling of ``name`` (Spark resolves column names case-insensitively)."""
    for column in columns:
        if column == name:
            return column
    matches = [c for c in columns if c.lower() == name.lower()]
    if len(matches) == 1:
        return matches[0]
    raise SqlextError(
        "CHANGELOG_MISSING_COLUMN", function=function, side=side, column=name,
        columns=list(columns), fix=fix,
    )


def check_option(function: str, argument: str, value: Any, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value.lower() not in allowed:
        raise SqlextError(
            "INVALID_OPTION_VALUE", function=function, argument=argument,
            value=sql_value(value), allowed=quoted_list(allowed),
        )
    return value.lower()


def check_arguments(function: str, given: Iterable[str], allowed: Sequence[str], required: Sequence[str]):
    given = list(given)
    lowered = [g.lower() for g in given]
    for name in given:
        if name.lower() not in allowed:
            raise SqlextError(
                "UNKNOWN_ARGUMENT", function=function, argument=name, allowed=", ".join(allowed)
            )
        if lowered.count(name.lower()) > 1:
            raise SqlextError("DUPLICATE_ARGUMENT", function=function, argument=name)
    for name in required:
        if name not in lowered:
            raise SqlextError(
                "MISSING_ARGUMENT", function=function, argument=name,
                example=_EXAMPLES.get(name, "'...'"),
            )


_EXAMPLES = {
    "input": "TABLE(my_changes)",
    "left": "TABLE(orders_changes)",
    "right": "TABLE(customers_changes)",
    "key": "'id'",
    "left_key": "'order_id'",
    "right_key": "'id'",
    "foreign_key": "'customer_id'",
    "predicate": "'balance >= 0'",
}


@dataclass(frozen=True)
class ChangeShape:
    """How one input encodes changes: which columns are key, data, value and ordering."""

    function: str
    side: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    order_by: str
    sequence_by: str | None
    # the input may hold a change again, identical (a Debezium connector that restarts sends the
    # events since its last recorded position again): a change equal to one of its key at its
    # ordering value is that change, read once
    repeats: bool = False

    @property
    def has_change_type(self) -> bool:
        return CHANGE_TYPE in self.columns

    @property
    def data_columns(self) -> tuple[str, ...]:
        """Every column but the change columns (``_change_type`` and the ordering column)."""
        return tuple(c for c in self.columns if c not in (CHANGE_TYPE, self.order_by))

    @property
    def value_columns(self) -> tuple[str, ...]:
        return tuple(c for c in self.data_columns if c not in self.key)

    @property
    def tombstone_columns(self) -> tuple[str, ...]:
        """In an upsert log, a row whose columns here are all NULL is a tombstone. The
        sequence_by column is left out so that a tombstone can carry its own timestamp."""
        return tuple(c for c in self.value_columns if c != self.sequence_by)

    def key_text(self, row: Mapping[str, Any]) -> str:
        return ", ".join(f"{k}={row.get(k)!r}" for k in self.key)


def change_shape(function: str, side: str, columns: Sequence[str], key: Any, order_by: Any,
                 sequence_by: Any, key_argument: str = "key") -> ChangeShape:
    columns = tuple(columns)
    keys = tuple(
        resolve_column(function, side, columns, k, f"Name the key columns with {key_argument} => '...'.")
        for k in split_columns(function, key_argument, key)
    )
    order_name = DEFAULT_ORDER_BY if order_by is None else split_columns(function, "order_by", order_by)
    if isinstance(order_name, list):
        if len(order_name) != 1:
            raise SqlextError(
                "INVALID_ARGUMENT_TYPE", function=function, argument="order_by",
                expected="one column", value=sql_value(order_by), fix="Name a single ordering column.",
            )
        order_name = order_name[0]
    order = resolve_column(
        function, side, columns, order_name, "Name the ordering column with order_by => '...'."
    )
    if order in keys:
        raise SqlextError(
            "INVALID_ARGUMENT_TYPE", function=function, argument="order_by",
            expected="a column that is not part of the key", value=sql_value(order),
            fix="Order changes by a version or time column.",
        )
    sequence = None
    if sequence_by is not None:
        names = split_columns(function, "sequence_by", sequence_by)
        if len(names) != 1:
            raise SqlextError(
                "INVALID_ARGUMENT_TYPE", function=function, argument="sequence_by",
                expected="one column", value=sql_value(sequence_by), fix="Name a single timestamp column.",
            )
        sequence = resolve_column(
            function, side, columns, names[0], "Name a column the input has with sequence_by => '...'."
        )
    return ChangeShape(function, side, columns, keys, order, sequence)


TEXT_TYPES = ("string", "varchar", "char")


def check_order_type(shape: ChangeShape, data_type: str | None) -> None:
    """An ordering column must sort as its values do: one of a text type sorts '10' before
    '9', and changes would be applied out of order without any error. ``data_type`` is the
    column's type as Spark writes it (None: unknown here).

    >>> shape = ChangeShape("F", "input", ("id", "v"), ("id",), "v", None)
    >>> check_order_type(shape, "bigint"); check_order_type(shape, "timestamp")
    >>> check_order_type(shape, "varchar(8)")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    sqlext.errors.SqlextError: [ORDER_BY_TEXT] F: the ordering column v of input has type VARCHAR(8), ...
    """
    if data_type is not None and data_type.lower().split("(")[0] in TEXT_TYPES:
        raise SqlextError("ORDER_BY_TEXT", function=shape.function, side=shape.side, order_by=shape.order_by,
                          actual=data_type.upper())


@dataclass
class Change:
    """One change of one key, in the form every function's reference logic reads."""

    row: dict
    order: Any
    present: bool


def changes_by_key(shape: ChangeShape, rows: Sequence[Mapping[str, Any]]) -> dict[tuple, list[Change]]:
    """Group an input's rows into ordered changes per key, checking the input as we go.

    Raises the data errors of the change-row rules: unknown change types, NULL ordering values
    and ordering ties within a key. ``update_preimage`` rows carry no information and are
    dropped, and so is the ``delete`` of a key that has exactly a ``delete`` and an ``insert``
    at one ordering value (:func:`without_replaced_delete`); with ``sequence_by`` a change older
    than the key's latest applied one is dropped.
    """
    grouped: dict[tuple, list[Change]] = {}
    for row in rows:
        row = dict(row)
        key = tuple(row[k] for k in shape.key)
        if shape.has_change_type:
            kind = row[CHANGE_TYPE]
            if kind not in CHANGE_TYPES:
                raise SqlextError(
                    "UNKNOWN_CHANGE_TYPE", function=shape.function, key=shape.key_text(row),
                    value=sql_value(kind),
                )
            if kind == PREIMAGE:
                continue
            present = kind in SETS_VALUE
        else:
            present = any(row[c] is not None for c in shape.tombstone_columns)
        order = row[shape.order_by]
        if order is None:
            raise SqlextError(
                "NULL_ORDER_VALUE", function=shape.function, key=shape.key_text(row),
                order_by=shape.order_by,
            )
        grouped.setdefault(key, []).append(Change(row, order, present))

    for key, changes in grouped.items():
        changes.sort(key=lambda c: c.order)
        if shape.has_change_type:
            changes[:] = without_replaced_delete(changes)
        for before, after in zip(changes, changes[1:]):
            if before.order == after.order:
                raise SqlextError(
                    "AMBIGUOUS_ORDER", function=shape.function, key=shape.key_text(after.row),
                    order_by=shape.order_by, value=sql_value(after.order),
                )
        if shape.sequence_by is not None:
            grouped[key] = drop_stale(shape, changes)
    return grouped


def without_replaced_delete(changes: list[Change]) -> list[Change]:
    """One key's changes in order, without the ``delete`` of each ordering value at which the
    key has exactly a ``delete`` and an ``insert``, in either order: a commit that removed the
    key's row and added it again, changed, as Delta writes a commit without change data files.
    Delta's protocol puts a commit's removed rows before its added ones, so the insert is the
    key's change at that value; the delete, as a preimage, says nothing the key's previous change
    does not. Two changes at one value of any other kinds are left for the tie check.

    >>> rows = [Change({CHANGE_TYPE: kind}, order, kind == INSERT)
    ...         for kind, order in [(INSERT, 1), (INSERT, 2), (DELETE, 2), (DELETE, 3), (DELETE, 3)]]
    >>> [(c.row[CHANGE_TYPE], c.order) for c in without_replaced_delete(rows)]
    [('insert', 1), ('insert', 2), ('delete', 3), ('delete', 3)]
    """
    kept = []
    for _order, group in itertools.groupby(changes, key=lambda c: c.order):
        group = list(group)
        if sorted(c.row[CHANGE_TYPE] for c in group) == [DELETE, INSERT]:
            group = [c for c in group if c.row[CHANGE_TYPE] == INSERT]
        kept += group
    return kept


def drop_stale(shape: ChangeShape, changes: list[Change], latest: Any = None) -> list[Change]:
    """Versioned-table semantics: ignore a change older (by sequence_by) than the latest applied
    (``latest``: the sequence value of the last change applied before these, if any)."""
    kept = []
    for change in changes:
        stamp = change.row[shape.sequence_by]
        if stamp is None:
            raise SqlextError(
                "NULL_SEQUENCE_VALUE", function=shape.function, key=shape.key_text(change.row),
                sequence_by=shape.sequence_by,
            )
        if latest is not None and stamp < latest:
            continue
        latest = stamp
        kept.append(change)
    return kept


def late_change(function: str, key: str, order_by: str, value: str, last: str,
                across_inputs: bool = False) -> SqlextError:
    """``[LATE_CHANGE]``: an incremental run met a change at or below what an earlier run
    processed. CHANGELOG_FILTER compares per key (and can drop stale changes by
    ``sequence_by``); FK_JOIN compares with the highest ordering value of both inputs, since
    a change of either input can meet every row of the other."""
    if across_inputs:
        earlier = f"the highest {order_by} an earlier run processed (one order runs across both inputs)"
        fix = f"Give late changes a higher {order_by}."
    else:
        earlier = "which an earlier run already processed for that key"
        fix = f"Give late changes a higher {order_by}, or name a sequence_by column so that stale changes are ignored."
    return SqlextError("LATE_CHANGE", function=function, key=key, order_by=order_by, value=value, last=last,
                       earlier=earlier, fix=fix)

"""How a folder source's columns may change between runs of one checkpoint (schema evolution),
chosen per source.

A run's state was built from its sources' columns; output readers know the output's. What a
later file may change is the user's choice, per source:

- ``fail`` (the default): any change stops the run (``[STREAM_SCHEMA_CHANGED]``), naming the
  column and the file. A new column in an output, a column read at a wider type, are decisions
  for whoever reads the output; sqlext does not take them silently.
- ``add_columns``: a new column is read; rows of files written before it read NULL there (as
  Spark's ``mergeSchema`` reads such a folder), and the state and the output gain the column.
- ``widen_types``: a column's type may widen where every value of the old type is a value of
  the new one: a wider integer (``TINYINT`` < ``SMALLINT`` < ``INT`` < ``BIGINT``), ``FLOAT`` to
  ``DOUBLE``, a ``DECIMAL`` of more digits at the same scale. Older files are read at the wider
  type; the state and the output widen with it.
- ``evolve``: both.

A dropped column is never accepted: its rows would read NULL where a value was. Nor is a
change inside a nested type. The columns a call needs (keys, order and change-type columns)
are read like any other: a file without them is refused whatever the mode.

Columns are compared as Spark's type strings (``DataType.simpleString``), as the checkpoint
records them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from sqlext.errors import SqlextError

FUNCTION = "sqlext stream"
FAIL, ADD_COLUMNS, WIDEN_TYPES, EVOLVE = "fail", "add_columns", "widen_types", "evolve"
MODES = (FAIL, ADD_COLUMNS, WIDEN_TYPES, EVOLVE)
_INTEGERS = ("tinyint", "smallint", "int", "bigint")
_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")


def adds(mode: str) -> bool:
    return mode in (ADD_COLUMNS, EVOLVE)


def widens(mode: str) -> bool:
    return mode in (WIDEN_TYPES, EVOLVE)


def check_modes(modes: Mapping[str, str]) -> None:
    """Each source's mode is one sqlext knows."""
    for name, mode in modes.items():
        if mode not in MODES:
            raise SqlextError("INVALID_ARGUMENT_TYPE", function=FUNCTION, argument=f"the schema evolution of {name}",
                              expected=" or ".join(repr(m) for m in MODES), value=repr(mode),
                              fix="fail (the default) refuses a changed column; add_columns reads new columns, "
                                  "widen_types wider types, evolve both.")


def is_widening(before: str, after: str) -> bool:
    """Whether every value of type ``before`` is a value of type ``after`` (Spark's type
    strings), and Spark's Parquet reader reads a file of ``before`` as ``after``.

    >>> [is_widening("int", t) for t in ("bigint", "smallint", "double", "decimal(20,0)")]
    [True, False, False, False]
    >>> is_widening("float", "double"), is_widening("decimal(5,2)", "decimal(10,2)"), is_widening("decimal(5,2)", "decimal(10,3)")
    (True, True, False)
    """
    if before in _INTEGERS and after in _INTEGERS:
        return _INTEGERS.index(before) < _INTEGERS.index(after)
    if (before, after) == ("float", "double"):
        return True
    old, new = _DECIMAL.match(before), _DECIMAL.match(after)
    return bool(old and new and old.group(2) == new.group(2) and int(old.group(1)) < int(new.group(1)))


def wider(before: str, after: str) -> str | None:
    """The wider of two types where one widens to the other (the same type: itself); else None."""
    if before == after or is_widening(after, before):
        return before
    return after if is_widening(before, after) else None


def changes(before: Sequence[Sequence[str]], after: Sequence[Sequence[str]], mode: str) -> list[str]:
    """What in the columns ``after`` (name, type) the mode does not accept against ``before``,
    as words for a message; empty where the change (if any) is accepted."""
    old = {n: t for n, t in before}
    new = {n: t for n, t in after}
    refused = [f"{n} was added ({t})" for n, t in new.items() if n not in old and not adds(mode)]
    refused += [f"{n} was dropped" for n in old if n not in new]
    for n, t in new.items():
        if n in old and old[n] != t and not (widens(mode) and is_widening(old[n], t)):
            refused.append(f"{n} changed from {old[n]} to {t}")
    return refused


def _merged(before: Sequence[Sequence[str]], after: Sequence[Sequence[str]]) -> list[tuple[str, str]] | None:
    """``after``'s columns (name, type) in its order, each at the wider type of the two, then
    those only ``before`` holds (a column a forgotten run accepted: its rows read NULL); None
    where a column's types do not widen to one."""
    old, new = dict(before), dict(after)
    columns = []
    for name, kind in after:
        kind = wider(old[name], kind) if name in old else kind
        if kind is None:
            return None
        columns.append((name, kind))
    return columns + [(n, t) for n, t in before if n not in new]


def grown(before: Sequence[Sequence[str]], after: Sequence[Sequence[str]]) -> list[tuple[str, str]] | None:
    """The columns (name, type) of an output that held ``before`` once a run gives ``after``,
    where the two differ by schema evolution (:func:`_merged`). None where a column's types do
    not widen to one, or only the order differs.

    >>> grown([("id", "bigint"), ("v", "int")], [("id", "bigint"), ("c", "string"), ("v", "bigint")])
    [('id', 'bigint'), ('c', 'string'), ('v', 'bigint')]
    >>> grown([("id", "bigint"), ("v", "bigint"), ("c", "string")], [("id", "bigint"), ("v", "int")])
    [('id', 'bigint'), ('v', 'bigint'), ('c', 'string')]
    >>> grown([("id", "bigint"), ("v", "int")], [("v", "int"), ("id", "bigint")]) is None
    True
    """
    return None if dict(before) == dict(after) else _merged(before, after)


def merged_fields(before, after):
    """The columns of a state that held ``before`` (Spark fields) once its input evolved to give
    ``after``, as :func:`_merged` merges them; a column keeps its field (and whether it may be
    NULL) where its type stays, and is nullable where it is new or widened. None where the two
    disagree in a way no evolution explains (a narrowing, another type)."""
    from pyspark.sql.types import StructField

    def pairs(fields):
        return [(f.name, f.dataType.simpleString()) for f in fields]

    columns = _merged(pairs(before), pairs(after))
    if columns is None:
        return None
    old, new = {f.name: f for f in before}, {f.name: f for f in after}
    return [old[name] if name in old and old[name].dataType.simpleString() == kind
            else StructField(name, new[name].dataType, True) for name, kind in columns]


def merged_footers(files) -> dict:
    """The columns of Parquet files (pairs of a name and an Arrow schema) read together at the
    wider type of each column, as a Spark schema's JSON: what Spark's ``mergeSchema`` gives,
    where it refuses a widening (an ``INT`` column in one file, ``BIGINT`` in another). Raises
    ``ValueError`` naming the column and two files where its types do not widen to one."""
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    fields: dict[str, tuple[StructField, str]] = {}
    for name, schema in files:
        for field in schema:
            kind = from_arrow_type(field.type)
            seen = fields.get(field.name.lower())
            if seen is None:
                fields[field.name.lower()] = (StructField(field.name, kind, True), name)
                continue
            widest = wider(seen[0].dataType.simpleString(), kind.simpleString())
            if widest is None:
                raise ValueError(f"its files disagree on the type of {field.name}: {kind.simpleString()} in {name}, "
                                 f"{seen[0].dataType.simpleString()} in {seen[1]}, which does not widen to it")
            if widest != seen[0].dataType.simpleString():
                fields[field.name.lower()] = (StructField(seen[0].name, kind, True), name)
    return StructType([field for field, _ in fields.values()]).jsonValue()

"""Input shapes (``format => ...``): how each change-data shape becomes sqlext's change rows.

Every function reads change rows in one shape, Delta's change data feed (see
docs/change-rows.md). ``format =>`` names the shape its table inputs are in, and this module is
the one place that maps each shape to those change rows, as a query (a sqlglot tree) over the
input:

* ``'delta'`` (the default): the input already is change rows; nothing is added.
* ``'debezium'``: a Debezium envelope (``before``, ``after``, ``op``, ``ts_ms``, ``source``) as
  Spark reads it from JSON or Parquet files, or from a Kafka value parsed with ``from_json``.
  ``c`` (create) and ``r`` (snapshot read) give the ``after`` row as an ``insert``, ``u`` the
  ``before`` row as an ``update_preimage`` (where the envelope has it) and the ``after`` row as
  an ``update_postimage``, ``d`` the ``before`` row as a ``delete``; a Kafka tombstone (which
  follows a delete and only lets compaction drop the key: a record whose value is null, so that
  its ``op``, ``before`` and ``after`` are NULL and no field but the envelope's holds a value,
  :func:`debezium_tombstone`) is skipped. Any other record without an ``op`` is no event
  (a plain row landed in a topic's folder, another connector's format), and a truncate
  (``op`` ``t``) names no key to apply it to: both stop the query with
  ``[NOT_A_CHANGE_EVENT]``, as does an ``op`` Debezium does not write.
  The data columns are the fields of ``after``; the rest of the envelope is left out. The order
  is any (nested) column of the envelope, ``order_by => 'source.lsn'``; by default
  ``source.lsn`` where the envelope has it (Postgres: the log's own order), else the call is
  refused (MySQL's position is two columns and ``ts_ms`` is a wall clock that ties). In the
  change rows the ordering column is named by its path with dots as underscores
  (``source_lsn``).
* ``'iceberg'``: Iceberg's changelog view: the table's columns, ``_change_type`` in upper case
  (``INSERT``, ``DELETE``, ``UPDATE_BEFORE``, ``UPDATE_AFTER``), ``_change_ordinal`` (the default
  order) and ``_commit_snapshot_id`` (an id, not an order: left out).

An Iceberg change type no shape knows (in lower case) is kept as the ``_change_type``, so the
change-row checks report it as ``UNKNOWN_CHANGE_TYPE``.

Rows without a key (a recursion's edges, ``keyless=True``) need the row an update replaces: a
Debezium ``u`` whose ``before`` is NULL (Postgres without ``REPLICA IDENTITY FULL``) then gives
a row of change type :data:`UPDATE_WITHOUT_BEFORE`, which the reader refuses.

>>> from sqlext.language.dialect import to_sql
>>> from sqlext.language.sqltree import table
>>> fields = {"after": ["id", "v"], "before": ["id", "v"], "source": ["lsn", "db"]}
>>> rows = change_rows("F", "input", "debezium", table("env"), ["before", "after", "op", "source"],
...                    fields.get, None)
>>> rows.order_by, rows.columns
('source_lsn', ('id', 'v', '_change_type', 'source_lsn'))
>>> to_sql(rows.query)[:100]
"SELECT CASE WHEN __sx_env.`op` = 'd' OR __sx_images.__sx_before THEN __sx_env.`before`.`id` ELSE __s"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, MutableMapping, Sequence

from sqlglot import exp

from sqlext.functions.changes import (
    CHANGE_TYPE, DEFAULT_ORDER_BY, DELETE, INSERT, POSTIMAGE, PREIMAGE, check_option, resolve_column,
    split_columns,
)
from sqlext.errors import SqlextError, sql_value
from sqlext.functions.arguments import SqlValue, raise_error
from sqlext.language.sqltree import alias, case, col, helper, ident, string

ARGUMENT = "format"
DELTA, DEBEZIUM, ICEBERG = "delta", "debezium", "iceberg"
FORMATS = (DELTA, DEBEZIUM, ICEBERG)

# Debezium's envelope
BEFORE, AFTER, OP, SOURCE = "before", "after", "op", "source"
DEBEZIUM_TYPES = {"c": INSERT, "r": INSERT, "u": POSTIMAGE, "d": DELETE}
TRUNCATE = "t"
# the top-level fields of Debezium's envelope: a tombstone may carry them, but no other field
ENVELOPE_FIELDS = (BEFORE, AFTER, OP, SOURCE, "ts_ms", "ts_us", "ts_ns", "transaction")
# the fields Kafka Connect's JSON converter with schemas wraps each event in
PAYLOAD = "payload"
CONNECT_WRAPPER = ("schema", PAYLOAD)
# what is wrong with a record of a topic that is no event, in a message's words
NO_OP = ("has no op and is no tombstone (a record whose value is null: no field, or an envelope whose op, "
         "before and after are null), so it is no Debezium event")
NO_EVENT_FIX = ("Read rows that are not Debezium events without format => 'debezium' (a folder of change rows is "
                "read as it is), or move them out of the topic's folder.")
UNKNOWN_OP = "which is no operation Debezium writes (c, r, u and d are changes, t a truncate)"
TRUNCATE_PROBLEM = ("is a truncate (op = 't'), which empties the table without naming the keys it removes: sqlext "
                    "applies changes key by key, and cannot apply it")
TRUNCATE_FIX = ("To go on, start over from a snapshot of the table taken after the truncate (a new checkpoint and "
                "output over the topic's events from that snapshot on); or, where the rows the truncate removed "
                "are taken out of the output otherwise, read the topic through a view without it (WHERE op <> 't').")
DEBEZIUM_ORDER = ("source", "lsn")
# the change type of the row before a keyless update whose envelope lacks it (see the module's docstring)
UPDATE_WITHOUT_BEFORE = "update without before"

# Iceberg's changelog view
ICEBERG_ORDER = "_change_ordinal"
ICEBERG_SNAPSHOT = "_commit_snapshot_id"
ICEBERG_TYPES = {"INSERT": INSERT, "DELETE": DELETE, "UPDATE_BEFORE": PREIMAGE, "UPDATE_AFTER": POSTIMAGE}

_ENVELOPE = helper("env")  # the input, as the query over it names it
# the rows each envelope gives: one, or two for an update (the row before first)
_IMAGES, _IS_BEFORE = helper("images"), helper("before")


def take_format(function: str, literals: MutableMapping[str, Any]) -> str:
    """The call's ``format`` (``'delta'`` when absent), taken out of ``literals`` so that what
    reads the change rows sees a call over change rows; an unknown value is
    ``INVALID_OPTION_VALUE``."""
    value = DELTA
    for name in [n for n in literals if n.lower() == ARGUMENT]:
        value = literals.pop(name)
    return check_option(function, ARGUMENT, value, FORMATS)


def check_read(function: str, literals: MutableMapping[str, Any]) -> None:
    """For code that reads a call's inputs as they are (the registered table functions): only
    change rows, i.e. no ``format`` but ``'delta'``."""
    shape = take_format(function, dict(literals))
    literals.pop(ARGUMENT, None)
    if shape != DELTA:
        raise SqlextError(
            "UNSUPPORTED_STATEMENT", function=function,
            reason=f"format => '{shape}' needs the input's columns, which are not known where the call runs as a "
                   "registered table function",
            fix="Run the statement through sqlext (sqlext.sql, sqlext run), which reads the input's columns")


def option_clash(function: str, side: str, stream: str, option: str, value: Any, stream_value: Any) -> SqlextError:
    """The call gives ``option => value`` (``format``, ``order_by``) and its ``side`` input
    ``stream`` (``STREAM(...)`` as written) gives another: which one holds is not known."""
    return SqlextError(
        "INVALID_ARGUMENT_TYPE", function=function, argument=option,
        expected=f"the {option} the {side} input's STREAM(...) gives, where both give one",
        value=f"{sql_value(value)}, and {stream} gives {sql_value(stream_value)}",
        fix=f"Give {option} once: on STREAM(...) (each input in a shape of its own), or on the call (every input "
            "in that shape).")


def order_clash(function: str, orders: Sequence[tuple[str, str, str]]) -> SqlextError:
    """The inputs of a call (``(side, as written, the name of its ordering column)``) give
    change rows whose ordering columns are named differently, and the call names none."""
    return SqlextError(
        "INVALID_ARGUMENT_TYPE", function=function, argument="order_by",
        expected="given where the inputs' ordering columns differ (one order runs across both inputs)",
        value="nothing, and the inputs are ordered by " + ", ".join(f"{order} ({side}: {text})"
                                                                    for side, text, order in orders),
        fix="Read both inputs in one shape (the same format => ... on each STREAM), or map one in a view so that "
            "both name their ordering column alike, and name it with order_by => '...'.")


@dataclass(frozen=True)
class ChangeRows:
    """An input in sqlext's change rows: ``query`` over the input, its ``columns``, and the name
    its ordering column has there (to pass on as ``order_by``)."""

    query: exp.Select
    columns: tuple[str, ...]
    order_by: str


def change_rows(function: str, side: str, shape: str, source: exp.Expression, columns: Sequence[str],
                fields: Callable[[str], Sequence[str] | None], order_by: Any, keyless: bool = False,
                types: Callable[[str], str | None] | None = None, once: bool = False) -> ChangeRows | None:
    """The change rows of an input in ``shape`` (None for ``'delta'``: it is change rows).

    ``source`` is the input as a FROM item, ``columns`` its columns, ``fields(column)`` the
    field names of a struct column (None where the column is no struct), ``types(column)`` a
    column's Spark type (``struct<id:bigint,...>``; None where unknown), ``order_by`` the call's
    argument as written (None: the shape's default). ``keyless``: the rows have no key, so an
    update without the row it replaces is marked (:data:`UPDATE_WITHOUT_BEFORE`). ``once``: the
    input is read whole (no stream), so the events a Debezium connector sent again (the same
    event twice: the same change rows) are read once, as an incremental run reads them."""
    if shape == DEBEZIUM:
        return _debezium(function, side, source, list(columns), fields, order_by, keyless, types, once)
    if shape == ICEBERG:
        return _iceberg(function, side, source, list(columns), order_by)
    return None


def connect_payload(shape: str, columns: Sequence[str], fields: Callable[[str], Sequence[str] | None]) -> str | None:
    """The column holding the Debezium envelope where the input is in Kafka Connect's JSON form
    with schemas (each event ``{"schema": ..., "payload": {"before": ..., "op": ...}}``, what a
    JSON converter with ``schemas.enable`` writes): ``payload``; None for any other input."""
    names = {c.lower(): c for c in columns}
    if shape != DEBEZIUM or OP in names or PAYLOAD not in names:
        return None
    return names[PAYLOAD] if any(f.lower() == OP for f in fields(names[PAYLOAD]) or []) else None


def payload_rows(source: exp.Expression, payload: str) -> exp.Select:
    """``SELECT payload.* FROM source``: the envelopes of Kafka Connect's JSON form."""
    return exp.select(exp.Column(this=exp.Star(), table=exp.to_identifier(payload, quoted=True))) \
        .from_(_envelope(source, helper("connect")))


def _envelope(source: exp.Expression, name: str = _ENVELOPE) -> exp.Expression:
    """``source AS __sx_env`` (a copy), so that an envelope column is never read as a table name."""
    source = source.copy()
    if isinstance(source, exp.Select):
        source = exp.Subquery(this=source)
    source.set("alias", exp.TableAlias(this=exp.to_identifier(name)))
    return source


def _path(parts: Sequence[str]) -> exp.Expression:
    """The envelope's (nested) column ``parts``: ``__sx_env.a.b``."""
    node: exp.Expression = col(parts[0], _ENVELOPE)
    for part in parts[1:]:
        node = exp.Dot(this=node, expression=ident(part))
    return node


def _debezium(function, side, source, columns, fields, order_by, keyless=False, types=None,
              once=False) -> ChangeRows:
    fix = "Read the Debezium envelope as Spark reads it: before, after, op and source."
    before, after, op = (resolve_column(function, side, columns, name, fix) for name in (BEFORE, AFTER, OP))
    data = fields(after)
    if not data:
        raise SqlextError(
            "INVALID_ARGUMENT_TYPE", function=function, argument=f"{side} (format => 'debezium')",
            expected="a Debezium envelope whose after column is a struct of the row's columns",
            value=f"a column {after} that is no struct", fix=fix)
    order = _debezium_order(function, side, columns, fields, order_by)
    name = "_".join(order)
    _check_clash(function, side, name, order, data)
    # an update gives two rows, the one before (where the envelope has it) and the one after:
    # each envelope is read once per value of the generated column, TRUE for the row before
    updated = exp.EQ(this=col(op, _ENVELOPE), expression=string("u"))
    if not keyless:
        updated = exp.and_(updated, exp.not_(col(before, _ENVELOPE).is_(exp.null())))
    images = exp.Lateral(this=exp.Explode(this=case([(updated, exp.Array(expressions=[exp.true(), exp.false()]))],
                                                     exp.Array(expressions=[exp.false()]))),
                         view=True, alias=exp.TableAlias(this=exp.to_identifier(_IMAGES),
                                                         columns=[exp.to_identifier(_IS_BEFORE)]))
    is_before = exp.column(_IS_BEFORE, _IMAGES)
    takes_before = exp.or_(exp.EQ(this=col(op, _ENVELOPE), expression=string("d")), is_before.copy())
    row_before = _row_before(before, after, fields, types)
    values = [alias(case([(takes_before.copy(), row_before(f))], _path([after, f])), f) for f in data]
    kind = exp.Case(this=col(op, _ENVELOPE), ifs=[exp.If(this=string(code), true=string(kind))
                                                  for code, kind in DEBEZIUM_TYPES.items()],
                    default=_no_event(function, side, op))
    preimage = string(PREIMAGE)
    if keyless:
        preimage = case([(col(before, _ENVELOPE).is_(exp.null()), string(UPDATE_WITHOUT_BEFORE))], preimage)
    kind = case([(is_before.copy(), preimage)], kind)
    query = exp.select(*values, alias(kind, CHANGE_TYPE), alias(_path(order), name)) \
        .from_(_envelope(source)).where(exp.not_(exp.paren(debezium_tombstone(columns, _ENVELOPE))))
    query.set("laterals", [images])
    if once and "map<" not in (types(after) if types is not None else "").lower():  # Spark compares no maps
        query = query.distinct()
    return ChangeRows(query, (*data, CHANGE_TYPE, name), name)


def debezium_tombstone(columns: Sequence[str], table: str | None = None) -> exp.Expression:
    """Whether a record of a topic read as Debezium envelopes (``columns``, the top-level ones)
    is a Kafka tombstone: its value is null, as Spark reads it a record whose ``op``, ``before``
    and ``after`` are NULL and whose fields outside the envelope (:data:`ENVELOPE_FIELDS`) are
    too. (Kafka Connect's sinks write a tombstone as a ``null`` line, or as a row of NULLs.)

    >>> from sqlext.language.dialect import to_sql
    >>> to_sql(debezium_tombstone(["before", "after", "op", "source", "id"]))
    '`before` IS NULL AND `after` IS NULL AND `op` IS NULL AND `id` IS NULL'
    """
    return exp.and_(*[col(c, table).is_(exp.null()) for c in tombstone_columns(columns)])


def tombstone_columns(columns: Sequence[str]) -> list[str]:
    """The columns that are NULL in a tombstone (:func:`debezium_tombstone`)."""
    return [c for c in columns if c.lower() in (BEFORE, AFTER, OP) or c.lower() not in ENVELOPE_FIELDS]


def _no_event(function: str, side: str, op: str) -> exp.Expression:
    """The refusal of a row of a topic that no change can be read from: no ``op`` (and no
    tombstone, which the query leaves out), a truncate, an ``op`` Debezium does not write."""
    value = col(op, _ENVELOPE)
    record = SqlValue(exp.Substring(this=exp.Anonymous(this="to_json", expressions=[
        exp.Anonymous(this="struct", expressions=[exp.Column(this=exp.Star(), table=ident(_ENVELOPE))])]),
        start=exp.Literal.number(1), length=exp.Literal.number(300)))

    place = side if "format =>" in side else \
        f"its {side}{'' if side == 'input' else ' input'} (format => '{DEBEZIUM}')"

    def refused(problem, fix: str) -> exp.Expression:
        return raise_error("NOT_A_CHANGE_EVENT", function, side=place, problem=problem, record=record, fix=fix)

    unknown = SqlValue(exp.Concat(expressions=[string("has op = '"), value.copy(), string(f"', {UNKNOWN_OP}")]))
    return case([(value.copy().is_(exp.null()), refused(NO_OP, NO_EVENT_FIX)),
                 (exp.EQ(this=value.copy(), expression=string(TRUNCATE)), refused(TRUNCATE_PROBLEM, TRUNCATE_FIX))],
                refused(unknown, "Leave such events out in a view (WHERE op IN ('c', 'r', 'u', 'd')) if they "
                                 "carry no change of the table's rows."))


def _row_before(before: str, after: str, fields, types) -> Callable[[str], exp.Expression]:
    """How a field of the row before a change is read. Where ``before`` is no struct but
    ``after`` is one, the envelopes read so far held no row before (a snapshot: every ``op`` is
    ``r`` or ``c``, and JSON's reader, meeting only nulls, took ``before`` for text): its text is
    read as a row of ``after``'s type, so NULL stays NULL and a row that arrives later (as JSON
    text, the column being text) is read in full; text that is no such row stops the query."""
    if fields(before) is not None or types is None or not (types(after) or "").lower().startswith("struct<"):
        return lambda name: _path([before, name])
    options = exp.Anonymous(this="map", expressions=[string("mode"), string("FAILFAST")])
    parsed = exp.Anonymous(this="from_json", expressions=[col(before, _ENVELOPE), string(types(after)), options])
    return lambda name: exp.Dot(this=exp.paren(parsed.copy(), copy=False), expression=ident(name))


def order_column(shape: str, order_by: Any) -> str:
    """The name the ordering column has in the change rows of ``shape``, for ``order_by`` as
    written (None: the shape's default; Delta's is ``_commit_version``). The mapping itself
    (:func:`change_rows`) checks that the input has it."""
    if shape == DEBEZIUM:
        return "_".join(_dotted("format", order_by) if order_by is not None else DEBEZIUM_ORDER)
    if order_by is None:
        return ICEBERG_ORDER if shape == ICEBERG else DEFAULT_ORDER_BY
    return split_columns("format", "order_by", order_by)[0]


def _debezium_order(function, side, columns, fields, order_by) -> list[str]:
    """The envelope path of the ordering column: ``order_by`` (a dotted path), else ``source.lsn``."""
    if order_by is None:
        source = next((c for c in columns if c.lower() == SOURCE), None)
        inside = list(fields(source) or []) if source is not None else []
        lsn = next((f for f in inside if f.lower() == DEBEZIUM_ORDER[1]), None)
        if lsn is not None:
            return [source, lsn]
        candidates = [f"{source}.{f}" for f in inside if f.lower() not in ("db", "table", "schema", "name",
                                                                            "connector", "version")]
        candidates += [c for c in columns if c.lower() == "ts_ms"]
        raise SqlextError(
            "ORDER_BY_REQUIRED", function=function, side=side, format=DEBEZIUM,
            reason="its source has no lsn (Postgres's log position, the default order)",
            candidates=", ".join(repr(c) for c in candidates) or "none",
            fix="MySQL's position is two columns (source.file, source.pos): combine them into one number in a "
                "view. ts_ms is a wall clock whose ties are errors")
    parts = _dotted(function, order_by)
    found = resolve_column(function, side, columns, parts[0], "Name a column of the envelope with order_by => "
                                                               "'source.lsn'.")
    path, known = [found], fields
    for part in parts[1:]:
        inside = list(known(path[-1]) or []) if len(path) == 1 else None
        if inside is None:  # deeper than one struct: Spark resolves it (and reports a missing field)
            path.append(part)
            continue
        path.append(resolve_column(function, f"{side}'s {path[-1]}", inside, part,
                                   "Name a field of the envelope with order_by => 'source.lsn'."))
    return path


def _dotted(function: str, text: Any) -> list[str]:
    """``'source.lsn'`` -> ``['source', 'lsn']``: a path of names, each quoted with backticks
    where it needs to be."""
    parts, current, quoted, i = [], "", False, 0
    if not isinstance(text, str):
        split_columns(function, "order_by", text)  # reports it
    while i < len(text):
        char = text[i]
        if char == "`" and quoted and text[i + 1:i + 2] == "`":
            current += "``"
            i += 2
            continue
        if char == "`":
            quoted = not quoted
        if char == "." and not quoted:
            parts.append(current)
            current = ""
        else:
            current += char
        i += 1
    parts.append(current)
    names = []
    for part in parts:
        found = split_columns(function, "order_by", part)
        if len(found) != 1:
            raise SqlextError(
                "INVALID_ARGUMENT_TYPE", function=function, argument="order_by",
                expected="one column of the input, or a field of one ('source.lsn')", value=sql_value(text),
                fix="Name a single ordering column.")
        names += found
    return names


def _check_clash(function: str, side: str, name: str, order: Sequence[str], data: Sequence[str]) -> None:
    if name.lower() in [c.lower() for c in (*data, CHANGE_TYPE)]:
        raise SqlextError("ORDER_COLUMN_CLASH", function=function, side=side, path=".".join(order), name=name)


def _iceberg(function, side, source, columns, order_by) -> ChangeRows:
    fix = "Read Iceberg's changelog view (create_changelog_view), which has _change_type and _change_ordinal."
    kind_column = resolve_column(function, side, columns, CHANGE_TYPE, fix)
    if order_by is None:
        order = resolve_column(function, side, columns, ICEBERG_ORDER, fix)
    else:
        names = split_columns(function, "order_by", order_by)
        if len(names) != 1:
            raise SqlextError(
                "INVALID_ARGUMENT_TYPE", function=function, argument="order_by", expected="one column",
                value=sql_value(order_by), fix="Name a single ordering column.")
        order = resolve_column(function, side, columns, names[0], "Name the ordering column with order_by => '...'.")
    if order.lower() == ICEBERG_SNAPSHOT:
        raise SqlextError(
            "INVALID_ARGUMENT_TYPE", function=function, argument="order_by",
            expected="a column whose values follow the order of the changes", value=sql_value(order),
            fix=f"Snapshot ids are random; order by {ICEBERG_ORDER} (the default).")
    dropped = {kind_column.lower(), ICEBERG_SNAPSHOT, ICEBERG_ORDER}
    data = [c for c in columns if c.lower() not in dropped or c == order]
    kind = exp.Case(this=col(kind_column), ifs=[exp.If(this=string(code), true=string(kind))
                                                for code, kind in ICEBERG_TYPES.items()],
                    default=col(kind_column))
    query = exp.select(*[col(c) for c in data], alias(kind, CHANGE_TYPE)).from_(_envelope(source))
    return ChangeRows(query, (*data, CHANGE_TYPE), order)

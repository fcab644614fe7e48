"""Bind: a statement of an incremental run read once, before anything runs. It is parsed
(:func:`one_statement`), then bound (:func:`bind`): its kind decided (:data:`KINDS`: Spark's own
streaming query, a recursion, a self-join, or keyed calls), the calls over streams ordered by
their ordering column (:func:`order_by_streams`), and what cannot run incrementally refused by
name (:func:`refuse_shape`, :func:`refuse_table_input`, :func:`refuse_recursion`). The plan
(:mod:`sqlext.streaming.plan`) builds from what :func:`bind` returns alone, one builder a kind."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from sqlext.errors import SqlextError
from sqlext.functions import catalogue
from sqlext.functions.arguments import find_calls, set_literal
from sqlext.functions.changes import CHANGE_TYPE, split_columns
from sqlext.functions.expressions import parse_expression, referenced_columns
from sqlext.functions.input_formats import option_clash, order_clash, order_column, take_format
from sqlext.language.dialect import parse_one, stream_options, to_sql, is_stream as _is_stream, parse, stream_argument
from sqlext.language.sqltree import identifier_list
from sqlext.streaming.registry import keyed_call
from sqlext.streaming.shapes import stream_order, stream_shape

FUNCTION = "sqlext stream"


def one_statement(sql: str) -> exp.Expression:
    """The one statement of an incremental run, parsed; a text holding several, or none, or
    one that does not parse, is a classed error."""
    try:
        statements = [s for s in parse(sql) if s is not None]
    except Exception as error:  # noqa: BLE001 - sqlglot's parse and token errors
        raise SqlextError("UNSUPPORTED_STATEMENT", function=FUNCTION,
                          reason=f"the statement does not parse: {str(error).splitlines()[0][:200]}",
                          fix="Fix the SQL; `sqlext explain FILE.sql --no-spark` shows how sqlext reads it") from None
    if len(statements) != 1:
        raise SqlextError("UNSUPPORTED_STATEMENT", function=FUNCTION,
                          reason=f"an incremental run takes one statement; the text holds {len(statements)}",
                          fix="Run each statement over STREAM(...) with its own checkpoint and output, and "
                              "the others as batch queries")
    return statements[0]


def reads_no_stream() -> SqlextError:
    return SqlextError("UNSUPPORTED_STREAM", function=FUNCTION, what="this statement",
                       reason="it reads no STREAM(...) source, so there are no new changes to run over",
                       fix="Read the changes with STREAM(name), e.g. FROM STREAM(my_changes), or run it as a "
                           "batch query (sqlext.sql, sqlext run).")


def reads_streams(sql: str) -> bool:
    """Whether ``sql`` reads a ``STREAM(...)`` source (text that does not parse reads none)."""
    try:
        tree = parse_one(sql)
    except Exception:  # noqa: BLE001 - sqlglot fails in several ways on text it cannot read
        return False
    return any(_is_stream(t) for t in tree.find_all(exp.Table))


# what a statement of an incremental run can be: one that keeps no state (Spark's own streaming
# query), a recursion over a stream of edges, a self-join of one stream, or calls of keyed
# functions (one, or a chain of them) with SQL around them
KINDS = ("stateless", "recursion", "self-join", "calls")


@dataclass(frozen=True)
class Bound:
    """A statement of an incremental run as :func:`bind` read it, every refusal already made:
    its kind (one of :data:`KINDS`), the statement (a copy: binding writes the calls'
    ordering columns into it), its ``STREAM(...)`` reads in the order of the text, and for
    keyed calls the outermost one (the call whose rows the statement reads)."""

    kind: str
    tree: exp.Expression
    streams: tuple
    root: exp.Table | None = None


def bind(tree: exp.Expression) -> Bound:
    """The statement bound (see :class:`Bound`); what cannot run incrementally is refused here,
    before anything is read or written."""
    tree = tree.copy()
    calls = [t for t in tree.find_all(exp.Table) if keyed_call(t) is not None]
    for call in calls:  # a call's own arguments first: what is wrong in one is named before the statement's shape
        keyed_call(call).read(call)
    streams = tuple(t for t in tree.find_all(exp.Table) if _is_stream(t))
    if stateless(tree):
        return Bound("stateless", tree, streams)
    if is_recursion(tree) and streams and not calls:
        return Bound("recursion", tree, streams)
    refuse_recursion(tree)
    from sqlext.streaming.operators.self_join import is_self_join

    if not calls and is_self_join(tree):
        return Bound("self-join", tree, streams)
    root = refuse_shape(calls, list(streams))
    order_by_streams(root)
    return Bound("calls", tree, streams, root)


def stateless(tree: exp.Expression) -> bool:
    """Whether the statement keeps no state between runs: it calls no function that does, and is
    no recursion or self-join of a stream. Spark runs such a statement as its own streaming query."""
    from sqlext.streaming.operators.self_join import is_self_join

    return not any(keyed_call(t) is not None for t in tree.find_all(exp.Table)) and not is_recursion(tree) \
        and not is_self_join(tree)


def is_recursion(tree: exp.Expression) -> bool:
    """Whether the statement is a recursion: a ``WITH RECURSIVE``, or a call of a function that a
    rule writes from one."""
    return any(w.args.get("recursive") for w in tree.find_all(exp.With)) or any(
        find_calls(tree, f.name) for f in catalogue.functions() if f.written_by_rule)


def refuse_recursion(tree: exp.Expression) -> None:
    """A recursion over a stream runs incrementally only on its own
    (:mod:`sqlext.streaming.operators.recursion`); anywhere else it would see each micro-batch's rows alone."""
    if is_recursion(tree) and any(_is_stream(t) for t in tree.find_all(exp.Table)):
        raise SqlextError(
            "UNSUPPORTED_STREAM", function=FUNCTION, what="a recursion here",
            reason="a recursion runs incrementally only as a statement of its own (it would "
                   "see each micro-batch's rows alone)",
            fix="Run WITH RECURSIVE over STREAM(edges) as its own statement, or as a batch "
                "query (sqlext.sql).")


def order_by_streams(tree: exp.Expression) -> None:
    """Each call in ``tree`` that reads ``TABLE(STREAM(x, format => ...))`` (or a STREAM with
    its own ``order_by``) reads the change rows the stream gives
    (:func:`sqlext.streaming.sources.as_change_rows`), so where the call names no ``order_by``
    it is given their ordering column (``source_lsn``, ``_change_ordinal``, or the STREAM's
    ``order_by`` as the change rows name it): the default the call has with ``format`` given to
    it. Its inputs (streams, and inner calls' change rows) must then name their ordering
    columns alike. Where the call gives ``format`` too, the two must be the same: the call's
    ``format`` then maps the input, as without the STREAM's (which is left out, its
    ``order_by`` going to the call)."""
    # inner calls first: an outer call reads their change rows, ordered as they are
    for table in reversed([t for t in tree.find_all(exp.Table, bfs=False) if keyed_call(t) is not None]):
        keyed = keyed_call(table)
        call = keyed.read(table)
        given = take_format(keyed.name, dict(call.literals)) if "format" in call.literals else None
        order_by = call.literals.get("order_by")
        orders, shaped = [], False
        for name in keyed.tables:
            argument = call.tables.get(name)
            inner = argument.this if argument is not None else None
            if inner is not None and _is_stream(inner):
                stream, options = inner.this, stream_options(inner.this)
                if options and given is not None:
                    if "format" in options and stream_shape(stream) != given:
                        raise option_clash(keyed.name, name, to_sql(stream), "format", given, options["format"])
                    moved = options.get("order_by")
                    if moved is not None and order_by is not None and moved != order_by:
                        raise option_clash(keyed.name, name, to_sql(stream), "order_by", order_by, moved)
                    if moved is not None:
                        order_by = moved
                        set_literal(table, keyed.arguments, "order_by", moved)
                    stream.set("expressions", [stream_argument(stream)])
                    continue
                shaped = shaped or bool(options)
                orders.append((name, to_sql(stream), stream_order(stream)))
            elif inner is not None and keyed_call(inner) is not None:
                upstream = keyed_call(inner).read(inner)
                shape = take_format(upstream.function, dict(upstream.literals))
                orders.append((name, f"the change rows of {keyed_call(inner).name}",
                               order_column(shape, upstream.literals.get("order_by"))))
        if not shaped or given is not None or order_by is not None:
            continue
        if len({order.lower() for _, _, order in orders}) > 1:
            raise order_clash(keyed.name, orders)
        set_literal(table, keyed.arguments, "order_by", identifier_list([orders[0][2]]))


# what each argument that names columns a row must hold a value for makes of them, in a message
ROLES = {"key": "key", "left_key": "key", "right_key": "key", "foreign_key": "foreign key",
         "order_by": "ordering column", "sequence_by": "sequence column"}


def stream_reader(call: exp.Anonymous):
    """The keyed call that reads ``STREAM(...)`` as one of its table arguments: its FROM item,
    its function, the argument's name and its arguments as read; None for a stream no call
    reads so (a recursion's, a self-join's, one in a plain SELECT)."""
    stream = call.parent
    table = stream.find_ancestor(exp.Table) if isinstance(stream, exp.Table) else None
    while table is not None and keyed_call(table) is None:
        table = table.find_ancestor(exp.Table)
    if table is None:
        return None
    keyed = keyed_call(table)
    read = keyed.read(table)
    name = next((n for n, argument in read.tables.items() if argument.this is stream), None)
    return None if name is None else (table, keyed, name, read)


def read_shape(call: exp.Anonymous) -> str:
    """The shape the rows of ``STREAM(...)`` are in: the stream's ``format``, else that of the
    call reading it (which maps its inputs itself)."""
    shape = stream_shape(call)
    reader = stream_reader(call) if shape == "delta" else None
    if reader is not None and "format" in reader[3].literals:
        return take_format(reader[1].name, dict(reader[3].literals))
    return shape


def stream_needs(call: exp.Anonymous, columns) -> dict[str, str]:
    """The columns of ``STREAM(...)`` every row must hold a value for (the name as the source
    has it -> what the statement reads it as): the keys, foreign key, ordering and sequence
    columns the call reading it names, the change type. Empty for a stream no keyed call reads.
    A JSON record without such a field is a bad record, not a change with a NULL there."""
    reader = stream_reader(call)
    if reader is None:
        return {}
    _, keyed, name, read = reader
    wanted: dict[str, str] = {}
    for argument in dict(keyed.needs).get(name, ()):
        text = read.literals.get(argument)
        if text is not None:
            for column in _columns_named(keyed.name, argument, text):
                wanted.setdefault(column.lower(), ROLES[argument])
    if "order_by" not in read.literals:
        wanted.setdefault(stream_order(call).lower(), ROLES["order_by"])
    wanted.setdefault(CHANGE_TYPE, "change type")
    return {c: wanted[c.lower()] for c in columns if c.lower() in wanted}


def _columns_named(function: str, argument: str, text) -> list[str]:
    """The columns an argument names: a list of names, or those an expression reads."""
    try:
        return split_columns(function, argument, text)
    except SqlextError:
        try:
            return referenced_columns(parse_expression(function, argument, text, "'id'"))
        except SqlextError:
            return []  # the call's own checks refuse it


def refuse_table_input(function: str, name: str, argument) -> None:
    """A table argument that is neither a stream nor another call: read whole each run."""
    source = to_sql(argument.this) if argument is not None and isinstance(argument.this, exp.Table) else "my_changes"
    if len(catalogue.function(function).tables) == 2:
        raise SqlextError(
            "UNSUPPORTED_STREAM", function=FUNCTION, what=f"an {function} whose {name} input is a table",
            reason=f"its {name} input {source} is read whole, not as a stream; an incremental {function} reads both "
                   "inputs as streams, because a change of either meets rows of the other",
            fix=f"Write {name} => TABLE(STREAM({source})), with a change feed of {source} as that stream.")
    raise SqlextError("UNSUPPORTED_STREAM", function=FUNCTION, what=f"a {function} over a table",
                      reason="a streaming statement reads its inputs as streams",
                      fix=f"Write {name} => TABLE(STREAM({source})).")


def refuse_shape(calls: list, streams: list) -> exp.Table:
    """What a run of keyed operators runs: one call of a keyed function (CHANGELOG_FILTER, FK_JOIN), whose table
    arguments are streams or other such calls (a pipeline), and no stream outside it; anything
    else is refused, saying what is missing or extra. Returns the outermost call."""
    if not streams:
        raise reads_no_stream()
    roots = [c for c in calls if not any(a in calls for a in _ancestors(c))]
    if len(roots) != 1:
        names = " or ".join(f.name for f in catalogue.keyed())
        raise SqlextError(
            "UNSUPPORTED_STREAM", function=FUNCTION, what="this statement",
            reason=f"it holds {len(roots)} separate calls of {names}; an incremental run keeps "
                   "the state of one call and of the calls it reads through its table arguments (or runs one WITH "
                   "RECURSIVE over a stream of edges)",
            fix="Feed one call into the other (left => TABLE(CHANGELOG_FILTER(...))), or run each call over "
                "STREAM(...) as its own statement, with its own checkpoint and output.")
    root = roots[0]
    outside = [to_sql(t) for t in streams if root not in _ancestors(t)]
    if outside:
        raise SqlextError(
            "UNSUPPORTED_STREAM", function=FUNCTION, what="this statement",
            reason=f"it reads {', '.join(outside)} outside the {root.this.name.upper()} call; the rows around the "
                   "call are read whole each run",
            fix="Read that source as a table (without STREAM), or in its own incremental statement.")
    return root


def _ancestors(node: exp.Expression) -> list:
    found, current = [], node.find_ancestor(exp.Table)
    while current is not None:
        found.append(current)
        current = current.find_ancestor(exp.Table)
    return found


def replace_table(table: exp.Table, view: str) -> None:
    replacement = exp.Table(this=exp.to_identifier(view))
    if table.args.get("alias"):
        replacement.set("alias", table.args["alias"].copy())
    table.replace(replacement)



"""Rule: run a linear recursive CTE as ``RECURSIVE_EXPAND`` instead of Spark's native recursion.

A recursive CTE ``r(cols) AS (anchor UNION [ALL] step)`` whose step reads ``r`` once (joined
with other relations, filtered, projected) is *linear*: every row of level ``k + 1`` is
derived from exactly one row of level ``k``. Its result is therefore the union of the levels
``L0 = anchor``, ``Lk+1 = step(Lk)`` (semi-naive evaluation), which is what Spark's native
recursion computes level by level too. The rule replaces the CTE's body with a visible call::

    SELECT * FROM RECURSIVE_EXPAND(name => 'r', columns => 'c1, c2',
      anchor => TABLE(<anchor>), step => '<step, reading r>',
      distinct => FALSE, max_level => 10000)

which :func:`sqlext.runner.run_statement` evaluates on the session (a graph walk in one pass over a
collected edge set where it can, level by level otherwise) and replaces by a temporary view; the rest of
the statement is untouched and reads that view under the CTE's name. ``UNION`` (distinct)
drops every row seen before, including the anchor's, so it ends on cyclic data; ``USING KEY
(k)`` keeps one row per key (DuckDB's keyed recursion).

KIP-857's termination rules are checked here, before anything runs: a step that returns
its input unchanged (``SELECT * FROM r``) can never stop, and under ``UNION ALL`` a step with
no join, filter, limit or generator cannot end any record's recursion either; both are
refused with ``[RECURSION_NON_TERMINATING]``. Recursion of any other shape (the step reads
``r`` twice or inside a subquery, aggregates, windows, several steps) is left for Spark.

>>> from sqlext.language.dialect import parse_one, to_sql
>>> tree = parse_one("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT * FROM r")
>>> to_sql(recursive_cte_to_expand(tree))
"WITH r AS (SELECT * FROM RECURSIVE_EXPAND(name => 'r', columns => 'n', anchor => TABLE(SELECT 1), step => 'SELECT n + 1 FROM r WHERE n < 3', distinct => FALSE, max_level => 10000)) SELECT * FROM r"
"""

from __future__ import annotations

from sqlglot import exp

from sqlext.language.dialect import TableArgument, to_sql
from sqlext.analysis.notes import Notes
from sqlext.language.sqltree import identifier_list
from sqlext.errors import SqlextError

RULE = "recursive_cte_to_expand"
FUNCTION = "RECURSIVE_EXPAND"

# Levels allowed when the query names no MAX RECURSION LEVEL (Spark's own default is 100).
DEFAULT_MAX_LEVEL = 10_000

# Functions that turn one row into zero or more (flatMap-like): they can end a recursion.
_GENERATORS = {"explode", "explode_outer", "posexplode", "posexplode_outer", "inline", "inline_outer",
               "stack", "json_tuple"}


def recursive_cte_to_expand(expression: exp.Expression, notes: Notes | None = None) -> exp.Expression:
    notes = notes if notes is not None else Notes()
    for with_ in list(expression.find_all(exp.With)):
        if not with_.args.get("recursive") or with_.root() is not expression:
            continue  # not recursive, or inside a recursion already expanded (its text is in the call)
        expanded = False
        for cte in with_.expressions:
            name = cte.alias_or_name
            if not _reads(cte.this, name):
                continue
            why = _unsupported(cte, name) or _in_view(with_) or _in_recursion(with_)
            if why:
                notes.skip(RULE, f"recursive CTE {name}: {why}; Spark runs it natively")
                continue
            body: exp.Union = cte.this
            anchor, step = body.this, body.expression
            keyed = bool(cte.args.get("key_expressions"))
            columns = [c.name for c in cte.args["alias"].args.get("columns") or []] or anchor.named_selects
            _check_key(cte, name, columns)
            try:
                _check_terminates(name, step, columns, distinct=bool(body.args.get("distinct")) or keyed)
            except SqlextError:
                if not _read_under_limit(with_, name):
                    raise
                notes.skip(RULE, f"recursive CTE {name}: its step cannot end by itself, but the query "
                                 "reads it under a LIMIT, which Spark's native recursion stops at; "
                                 "Spark runs it natively")
                continue
            cte.set("this", _expand_call(cte, anchor, step, bool(body.args.get("distinct"))))
            cte.set("max_recursion_level", None)
            cte.set("key_expressions", None)
            cte.args["alias"].set("columns", None)
            expanded = True
            kind = "UNION" if body.args.get("distinct") else "UNION ALL"
            notes.fire(RULE, f"recursive CTE {name} ({kind}{', USING KEY' if keyed else ''}) runs as "
                             f"{FUNCTION}: semi-naive iteration, read through a temporary view")
        if expanded and not any(_reads(c.this, c.alias_or_name) for c in with_.expressions):
            with_.set("recursive", None)
    return expression


def _in_view(with_: exp.With) -> str | None:
    """A view must see its tables as they are when it is read, so a recursion inside
    CREATE VIEW cannot be computed once, when the view is created."""
    create = with_.find_ancestor(exp.Create)
    if create is not None and (create.kind or "").upper() == "VIEW":
        return "it is part of a view, which must recompute it each time it is read"
    return None


def _in_recursion(with_: exp.With) -> str | None:
    """A recursion written inside the anchor or step of another one that Spark runs natively
    may read that recursion's current level, which exists only inside Spark's iteration: it
    cannot be computed once, before the statement, so it stays with the outer one."""
    outer = with_.find_ancestor(exp.CTE)
    while outer is not None:
        outer_with = outer.parent
        if isinstance(outer_with, exp.With) and outer_with.args.get("recursive") \
                and _reads(outer.this, outer.alias_or_name):
            return (f"it is written inside the recursive CTE {outer.alias_or_name}, whose levels it may "
                    f"read, so it runs with {outer.alias_or_name}")
        outer = outer.find_ancestor(exp.CTE)
    return None


def _read_under_limit(with_: exp.With, name: str) -> bool:
    """Whether the query after ``with_`` reads ``name`` only as ``SELECT ... FROM name ... LIMIT n``."""
    query = with_.parent
    if not isinstance(query, exp.Select) or not query.args.get("limit"):
        return False
    return _is_ref(query.args["from_"].this, name) if query.args.get("from_") else False


def _check_key(cte: exp.CTE, name: str, columns: list[str]) -> None:
    keys = [k.name for k in cte.args.get("key_expressions") or []]
    known = {c.lower() for c in columns}
    missing = [k for k in keys if k.lower() not in known]
    if missing and columns:
        raise SqlextError(
            "UNSUPPORTED_STATEMENT", function=FUNCTION,
            reason=f"USING KEY ({', '.join(keys)}) of {name} names {', '.join(missing)}, which is not "
                   f"one of its columns ({', '.join(columns)})",
            fix="Name key columns from the CTE's column list.")


def _reads(query: exp.Expression, name: str) -> bool:
    return any(_is_ref(t, name) for t in query.find_all(exp.Table))


def _is_ref(table: exp.Table, name: str) -> bool:
    return isinstance(table.this, exp.Identifier) and not table.db and table.name.lower() == name.lower()


def _unsupported(cte: exp.CTE, name: str) -> str | None:
    body = cte.this
    if not isinstance(body, exp.Union) or body.args.get("by_name"):
        return "its body is not 'anchor UNION [ALL] step'"
    if any(body.args.get(k) for k in ("limit", "offset", "order", "with_")):
        return "the recursion has a LIMIT, OFFSET or ORDER BY of its own"
    anchor, step = body.this, body.expression
    if _reads(anchor, name):
        return "the anchor (or a second step) reads the CTE itself"
    if not isinstance(step, exp.Select):
        return "the step is not a single SELECT"
    if any(step.args.get(k) for k in ("with_", "group", "having", "qualify", "limit", "offset", "order",
                                       "windows", "distribute", "sort", "cluster", "laterals", "into")):
        return "the step has a clause sqlext does not iterate (WITH, GROUP BY, LIMIT, ORDER BY, LATERAL VIEW)"
    if step.find(exp.AggFunc) or step.find(exp.Window):
        return "the step aggregates or uses a window function"
    refs = [t for t in step.find_all(exp.Table) if _is_ref(t, name)]
    if len(refs) != 1:
        return f"the step reads {name} {len(refs)} times (only linear recursion is expanded)"
    ref = refs[0]
    top_level = [step.args["from_"].this] if step.args.get("from_") else []
    top_level += [j.this for j in step.args.get("joins") or []]
    if not any(ref is t for t in top_level):
        return f"the step reads {name} inside a subquery"
    for table in step.find_all(exp.Table):
        if table.db and table.db.lower() == "recurring" and not cte.args.get("key_expressions"):
            return "recurring.<name> is only meaningful with USING KEY"
    if any(isinstance(s, exp.Star) for s in step.selects) and len(step.selects) != 1:
        return "the step mixes * with other columns"
    return None


def _check_terminates(name: str, step: exp.Select, columns: list[str], distinct: bool) -> None:
    """KIP-857's termination rule: refuse a step that cannot shrink its input.

    Under ``UNION ALL`` a step must hold an operator that can end a row's recursion: a
    ``WHERE``, a generator, or a join that drops rows of the CTE (an inner or semi join with a
    condition; an anti join keeping the CTE's rows). A cross join only multiplies rows, and an
    outer join keeps the rows of its preserved side whatever the CTE holds, so neither counts.
    Under ``UNION`` or ``USING KEY`` a row that comes again adds nothing, so a step that
    returns its input unchanged ends after one level and is accepted; anything else there is
    bounded at run time (the level and row limits).
    """
    if distinct:
        return
    if step.args.get("where") or _has_generator(step):
        return
    if any(_join_can_drop_rows(join, name, _cte_alias(step, name)) for join in step.args.get("joins") or []):
        return
    joins = step.args.get("joins") or []
    if not joins and _is_identity(step.selects, columns):
        reason = "it returns its input unchanged, so every level equals the one before"
    elif joins:
        reason = ("its joins cannot drop a row of the CTE (a cross join multiplies rows; an outer "
                  "join keeps its preserved side's rows whatever the CTE holds)")
    else:
        reason = "it has no join, filter, limit or generator that can end a record's recursion"
    raise SqlextError(
        "RECURSION_NON_TERMINATING", function=FUNCTION, name=name, step=to_sql(step), reason=reason,
        fix="Add a WHERE condition (such as depth < 10) or an inner join that runs out of matches, "
            "or use UNION instead of UNION ALL",
    )


def _has_generator(step: exp.Select) -> bool:
    return any(isinstance(f, exp.Explode) or (isinstance(f, exp.Func) and f.sql_name().lower() in _GENERATORS)
               for f in step.find_all(exp.Func))


def _is_identity(selects: list[exp.Expression], columns: list[str]) -> bool:
    if len(selects) == 1 and isinstance(selects[0], exp.Star):
        return True
    if len(selects) == 1 and isinstance(selects[0], exp.Column) and isinstance(selects[0].this, exp.Star):
        return True
    if len(selects) != len(columns):
        return False
    for select, column in zip(selects, columns):
        inner = select.this if isinstance(select, exp.Alias) else select
        if not isinstance(inner, exp.Column) or inner.name.lower() != column.lower():
            return False
    return True


def _cte_alias(step: exp.Select, name: str) -> str:
    """The name the step reads the CTE under (its alias, or its own name)."""
    for table in step.find_all(exp.Table):
        if _is_ref(table, name):
            return table.alias_or_name.lower()
    return name.lower()


def _join_can_drop_rows(join: exp.Join, name: str, alias: str) -> bool:
    """Whether this join can leave a row of the CTE without any output row."""
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    on = join.args.get("on")
    trivially_true = isinstance(on, exp.Boolean) and on.this  # sqlglot reads a bare JOIN as ON TRUE
    has_condition = bool((on is not None and not trivially_true) or join.args.get("using"))
    if side in ("LEFT", "RIGHT", "FULL") and kind not in ("SEMI", "ANTI"):
        return False  # outer joins keep every row of their preserved side
    if kind not in ("SEMI", "ANTI") and _filters_each_row(join.this, alias):
        return True  # a correlated LATERAL subquery: no rows for a CTE row its filter rejects
    if kind == "CROSS" or not has_condition:
        return False
    if kind == "ANTI":
        return not _is_ref(join.this, name)  # r ANTI JOIN x drops r's matched rows
    return True  # inner and semi joins with a condition


def _filters_each_row(item: exp.Expression, alias: str) -> bool:
    """Whether ``item`` is ``LATERAL (SELECT ... WHERE <reads alias.col>)``: a subquery run once
    per row of the CTE whose filter reads that row, so it returns no row at all for the rows it
    rejects (as an inner join's condition does). An aggregate without GROUP BY returns one row
    whatever it filters, so it does not count."""
    if not isinstance(item, exp.Lateral) or item.args.get("view") or not isinstance(item.this, exp.Subquery):
        return False
    query = item.this.unnest()
    if not isinstance(query, exp.Select) or not query.args.get("where"):
        return False
    if not query.args.get("group") and any(f.find_ancestor(exp.Select) is query for f in query.find_all(exp.AggFunc)):
        return False
    return any(c.table.lower() == alias for c in query.args["where"].find_all(exp.Column))


def _expand_call(cte: exp.CTE, anchor: exp.Expression, step: exp.Select, distinct: bool) -> exp.Select:
    name = cte.alias_or_name
    columns = [c.name for c in cte.args["alias"].args.get("columns") or []]
    level = cte.args.get("max_recursion_level")
    keys = [k.name for k in cte.args.get("key_expressions") or []]
    args: list[exp.Expression] = [
        _kwarg("name", exp.Literal.string(name)),
        _kwarg("columns", exp.Literal.string(identifier_list(columns))),
        _kwarg("anchor", TableArgument(this=anchor.copy())),
        _kwarg("step", exp.Literal.string(to_sql(step))),
        _kwarg("distinct", exp.Boolean(this=distinct)),
        _kwarg("max_level", level.copy() if level is not None else exp.Literal.number(DEFAULT_MAX_LEVEL)),
    ]
    if keys:
        args.append(_kwarg("key", exp.Literal.string(identifier_list(keys))))
    call = exp.Anonymous(this=FUNCTION, expressions=args)
    return exp.select("*").from_(exp.Table(this=call))


def _kwarg(name: str, value: exp.Expression) -> exp.Kwarg:
    return exp.Kwarg(this=exp.var(name), expression=value)

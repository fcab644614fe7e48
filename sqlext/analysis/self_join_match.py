"""Recognising an inner join of one relation with itself, for the self-join rules and the engine.

Both rules (:mod:`sqlext.rewrites.self_join_aggregate_to_window`, :mod:`sqlext.rewrites.band_self_join_to_window`)
and the incremental self-join (:mod:`sqlext.streaming.operators.self_join`) start from the same
reading of a ``SELECT``: two FROM items that are the same relation (the
same table, view or CTE: :mod:`sqlext.rewrites.merge_duplicate_sources` has already turned identical
subqueries into one CTE), joined on equal key columns, optionally within a band of one
ordering column::

    FROM t a JOIN t b ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL 10 MINUTES AND a.ts + INTERVAL 5 MINUTES

For an inner join the ON and WHERE conditions are one conjunction, so both are read. Each
conjunct is sorted into: key equalities (``a.k = b.k``, ``a.k <=> b.k``), bounds of ``b.ts``
relative to ``a.ts`` (``b.ts <= a.ts + c``, ``BETWEEN``, either side written first), conditions
on one side only, and the rest. The band (:mod:`sqlext.analysis.self_join_band`) becomes a
window frame over ``PARTITION BY keys ORDER BY ts``: ``RANGE BETWEEN <lower> AND <upper>`` holds
exactly the rows ``b`` with ``a.ts + lower <= b.ts <= a.ts + upper`` for the current row ``a``.

What a window does not do and a join does is dropping NULL keys and NULL times (``=`` and
``<=`` are never true on NULL); :meth:`SelfJoin.not_null_condition` adds that back.

>>> from sqlext.language.dialect import parse_one
>>> from sqlext.analysis.relations import MappingRelations
>>> q = parse_one("SELECT a.id, b.id FROM e a JOIN e b ON a.k = b.k AND b.ts BETWEEN a.ts - 5 AND a.ts + 2")
>>> join = match_self_join(q, MappingRelations({"e": {"id": "int", "k": "int", "ts": "int"}}))
>>> join.keys, join.band.frame_sql()
([('k', False)], 'RANGE BETWEEN 5 PRECEDING AND 2 FOLLOWING')
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from sqlext.language.dialect import conjuncts, to_sql
from sqlext.language.sqltree import and_ as and_tree, col, over
from sqlext.analysis.relations import Relations, Scope, standalone_query
from sqlext.analysis.self_join_band import Band, Bound, band_bounds, tightest_band

# Spark functions whose value changes from one evaluation to the next: a rewrite that changes
# how often or in which order they run changes the rows.
NON_DETERMINISTIC = {
    "rand", "randn", "random", "uuid", "shuffle", "monotonically_increasing_id", "spark_partition_id",
    "input_file_name", "input_file_block_start", "input_file_block_length", "randstr", "uniform",
    "try_reflect", "reflect", "java_method",
}


@dataclass
class SelfJoin:
    """An inner join of ``source`` with itself, read off one SELECT."""

    select: exp.Select
    left: str  # alias of the side the window's current row stands for
    right: str  # alias of the side the window frame collects
    source: exp.Table  # the relation, without its alias
    columns: list[str]
    query: str  # SELECT * FROM source, with the CTEs it needs, for type questions
    keys: list[tuple[str, bool]]  # (column, null-safe)
    band: Band | None
    left_only: list[exp.Expression] = field(default_factory=list)
    right_only: list[exp.Expression] = field(default_factory=list)
    rest: list[exp.Expression] = field(default_factory=list)  # relate both sides otherwise
    left_item: exp.Table | None = None  # the FROM items of the pair, as written
    right_item: exp.Table | None = None
    # conditions naming a relation of the chain other than the pair (empty for the pair alone)
    outside: list[exp.Expression] = field(default_factory=list)
    # every condition on the pair alone (keys, band, one side, the rest), wherever written
    pair_conditions: list[exp.Expression] = field(default_factory=list)
    # the chain's later self-joins (``b/c``), left as written
    other_pairs: list[str] = field(default_factory=list)

    def others_note(self) -> str:
        """What a note adds about the chain's other self-joins ('' when there are none)."""
        if not self.other_pairs:
            return ""
        many = len(self.other_pairs) > 1
        return (f"; the chain's later self-join{'s' if many else ''} {', '.join(self.other_pairs)} "
                f"{'are' if many else 'is'} left as written (Kafka's optimizer rewrites the first one only)")

    @property
    def in_chain(self) -> bool:
        """The pair is two of more than two FROM items."""
        return len(self.select.args.get("joins") or []) > 1

    def names_right(self, conditions: list[exp.Expression]) -> exp.Expression | None:
        """The first condition that reads a column of the right side."""
        for condition in conditions:
            if any(c.table.lower() == self.right for c in condition.find_all(exp.Column)):
                return condition
        return None

    def column_trees(self) -> list[exp.Column]:
        """The relation's columns, quoted, in order: the inner query's projection."""
        return [col(c) for c in self.columns]

    def partition_sql(self) -> str:
        return ", ".join(to_sql(col(k)) for k in self.keys_names)

    @property
    def keys_names(self) -> list[str]:
        return [k for k, _ in self.keys]

    def window(self, function: exp.Expression) -> exp.Window:
        """``function OVER (PARTITION BY keys [ORDER BY band column frame])``."""
        if self.band is None:
            return over(function, self.keys_names, None)
        return over(function, self.keys_names, self.band.column, self.band.frame())

    def window_sql(self) -> str:
        """The window's specification as text, for notes."""
        return to_sql(self.window(exp.Star()))[len("* OVER "):]

    def not_null_condition(self) -> exp.Expression:
        """Rows a join on these conditions can never pair: NULL in a key compared with ``=``
        or in the band's column."""
        columns = [k for k, null_safe in self.keys if not null_safe]
        if self.band is not None and self.band.column not in columns:
            columns.append(self.band.column)
        return and_tree(*[exp.not_(col(c).is_(exp.null())) for c in columns])

    def source_tree(self) -> exp.Table:
        return self.source.copy()

    def source_sql(self) -> str:
        return to_sql(self.source)


def match_self_join(select: exp.Select, relations: Relations | None) -> SelfJoin | str:
    """The self-join read off ``select``, or the reason it is not one a rule may touch.

    The FROM clause is either the pair alone (``FROM t a JOIN t b ON ...``) or a flat chain of
    inner joins holding such a pair (``FROM t a JOIN t b ON ... JOIN d ON ...``, the shape
    Kafka's optimizer also rewrites inside a chain, KIP-862); of several pairs (``t a JOIN t b
    ON ... JOIN t c ON ...``) the first, as Kafka's optimizer does. In a chain, the conditions
    that name a relation other than the pair are kept apart (:attr:`SelfJoin.outside`): the
    rules leave them where they are and rewrite only the pair.
    """
    joins = select.args.get("joins") or []
    if not joins:
        return "no join"
    if select.args.get("laterals"):
        return "the query already has a LATERAL VIEW"
    for join in joins:
        if join.args.get("side") or (join.args.get("kind") or "").upper() not in ("", "INNER", "CROSS"):
            kind = " ".join(filter(None, [join.args.get("side"), join.args.get("kind")])).upper()
            where = "" if len(joins) == 1 else " in the chain of joins"
            return f"{kind} JOIN{where} keeps unmatched rows, which a window over one relation does not produce"
        if join.args.get("using") or join.args.get("method"):
            return "the join uses USING or a join method"
    if select.args.get("from_") is None:
        return "the join has no FROM clause before it"
    items = [select.args["from_"].this] + [j.this for j in joins]
    chain = len(items) > 2
    if chain:
        found = _chain_pair(select, items)
        if isinstance(found, str):
            return found
        left, right, others = found
    else:
        others = []
        left, right = items
        if not isinstance(left, exp.Table) or not isinstance(right, exp.Table):
            return "the two sides are not the same relation (different subqueries)"
        if _is_function(left) or _is_function(right):
            return "a side is a table function"
        if _unaliased(left) != _unaliased(right):
            return f"the two sides read different relations ({to_sql(_unaliased(left))}, {to_sql(_unaliased(right))})"
    a, b = left.alias_or_name.lower(), right.alias_or_name.lower()
    if a == b:
        return "the two sides have the same name"
    if has_non_deterministic(select):
        return "the query calls a non-deterministic function"
    if select.find(exp.Hint) is not None:
        return "the query has hints naming the join's sides"
    if relations is None:
        return "the relation's columns are unknown here"
    source = _unaliased(left)
    query = standalone_query(left)
    columns = relations.columns(query, _resolve(left))
    if not columns:
        return f"the columns of {to_sql(source)} are unknown here"

    conditions = [j.args.get("on") for j in joins] + [select.args.get("where")]
    terms = [c for node in conditions for c in conjuncts(node)]
    if chain:
        aliases = {item.alias_or_name.lower() for item in items}
        ambiguous = _ambiguous_column(select, {c.lower() for c in columns})
        if ambiguous is not None:
            return (f"the column {to_sql(ambiguous)} has no relation's alias and both sides of the "
                    f"self-join have a column of that name")
    sides, outside = {}, []
    for conjunct in terms:
        if chain:
            touched = _chain_sides(conjunct, aliases)
            if touched is None:
                return f"the condition {to_sql(conjunct)} names a relation that is not in the chain of joins"
            if not touched <= {a, b}:
                outside.append(conjunct)
                continue
        else:
            touched = _sides(conjunct, a, b)
            if touched is None:
                return f"the condition {to_sql(conjunct)} names a column without its side's alias"
        sides[id(conjunct)] = touched
    terms = [c for c in terms if id(c) in sides]
    if chain and not terms:
        return "the chain of joins has no condition on the self-join's pair"

    keys, candidates, left_only, right_only = [], [], [], []
    for conjunct in terms:
        touched = sides[id(conjunct)]
        key = _key_equality(conjunct, a, b)
        if key is not None and key[0] not in [k for k, _ in keys]:
            keys.append(key)
        elif touched == {a, b}:
            candidates.append(conjunct)
        elif touched == {b}:
            right_only.append(conjunct)
        else:
            left_only.append(conjunct)
    if not keys:
        return "the two sides are not joined on equal key columns"

    bounds: dict[str, list[tuple[str, Bound]]] = {}
    rest = []
    for conjunct in candidates:
        found = band_bounds(conjunct, a, b)
        if found is None:
            rest.append(conjunct)
            continue
        for column, direction, bound in found:
            bounds.setdefault(column, []).append((direction, bound))
    band = None
    if bounds:
        column = max(bounds, key=lambda c: len({d for d, _ in bounds[c]}))
        column_type = relations.expression_type(query, to_sql(col(column)))
        band = tightest_band(column, (column_type or "").lower() or None, bounds.pop(column))
        if isinstance(band, str):
            return band
        rest.extend(bound.conjunct for pairs in bounds.values() for _, bound in pairs)
    return SelfJoin(
        select, a, b, source, list(columns), query, keys, band,
        left_only=left_only, right_only=right_only, rest=_unique(rest),
        left_item=left, right_item=right, outside=outside, pair_conditions=terms, other_pairs=others,
    )


def _is_function(item: exp.Expression) -> bool:
    return isinstance(item, exp.Table) and isinstance(item.this, (exp.Anonymous, exp.Func))


def _chain_pair(select: exp.Select, items: list[exp.Expression]) -> tuple[exp.Table, exp.Table, list[str]] | str:
    """The first pair of FROM items of a chain that read the same relation and are joined on
    an equal key column, earlier item first, and the other such pairs (named ``a/b``); or why
    there is none.

    Kafka's optimizer (KIP-862) rewrites a join whose two inputs are one source; in a chain
    ``a.join(b).join(c)`` of one stream that is the first join alone, since the second joins
    the first one's result with the source. Read left to right, the first self-join of a flat
    chain is the pair whose join comes first; the others stay joins, as written."""
    names = []
    for item in items:
        if not isinstance(item, (exp.Table, exp.Subquery)) or _is_function(item):
            return f"{to_sql(item)} in the chain of joins is not a table or a subquery"
        if item.args.get("pivots") or (isinstance(item, exp.Subquery) and not item.alias):
            return f"{to_sql(item)} in the chain of joins has a PIVOT or no alias"
        names.append(item.alias_or_name.lower())
    if len(set(names)) != len(names):
        return "two relations of the chain of joins have the same name"
    parts = [*select.expressions, *(j.args.get("on") for j in select.args.get("joins") or [])]
    parts += [select.args.get(k) for k in ("where", "group", "having", "order", "qualify")]
    for part in filter(None, parts):
        nested = part.find(exp.Query)
        if nested is not None:
            return f"the subquery {to_sql(nested)} inside the chain of joins' statement is left as written"
    conditions = [j.args.get("on") for j in select.args.get("joins") or []] + [select.args.get("where")]
    terms = [c for node in conditions for c in conjuncts(node)]
    tables = [item for item in items if isinstance(item, exp.Table)]
    same = [(x, y) for i, x in enumerate(tables) for y in tables[i + 1:] if _unaliased(x) == _unaliased(y)]
    if not same:
        return "no two relations of the chain of joins are the same relation"
    pairs = [
        (x, y) for x, y in same
        if any(_key_equality(c, x.alias_or_name.lower(), y.alias_or_name.lower()) for c in terms)
    ]
    if not pairs:
        return "the two sides are not joined on equal key columns"
    # the first self-join of the chain, read left to right: the pair its earliest join closes
    position = {id(item): i for i, item in enumerate(items)}
    pairs.sort(key=lambda pair: (position[id(pair[1])], position[id(pair[0])]))
    first, *others = pairs
    return first[0], first[1], [f"{x.alias_or_name}/{y.alias_or_name}" for x, y in others]


def _chain_sides(node: exp.Expression, aliases: set[str]) -> set[str] | None:
    """The relations of the chain ``node`` names; an unqualified column (one the pair does not
    have, see :func:`_ambiguous_column`) stands for another relation ('?'). None when a
    qualifier is not a relation of the chain (an outer query's or a subquery's)."""
    touched = set()
    for column in node.find_all(exp.Column):
        if isinstance(column.this, exp.Star):
            continue
        qualifier = column.table.lower()
        if not qualifier:
            touched.add("?")
        elif column.args.get("db") or qualifier not in aliases:
            return None
        else:
            touched.add(qualifier)
    return touched


def _ambiguous_column(select: exp.Select, pair_columns: set[str]) -> exp.Column | None:
    """An unqualified column of ``select`` (not a projection's alias) named like a column of the
    pair: it cannot be told which relation it reads."""
    named = {p.alias.lower() for p in select.expressions if isinstance(p, exp.Alias)}
    for column in select.find_all(exp.Column):
        if column.table or isinstance(column.this, exp.Star) or column.find_ancestor(exp.Select) is not select:
            continue
        if column.name.lower() in pair_columns and column.name.lower() not in named:
            return column
    return None


def _key_equality(conjunct: exp.Expression, a: str, b: str) -> tuple[str, bool] | None:
    if not isinstance(conjunct, (exp.EQ, exp.NullSafeEQ)):
        return None
    left, right = conjunct.this.unnest(), conjunct.expression.unnest()
    if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
        return None
    if left.name != right.name or {left.table.lower(), right.table.lower()} != {a, b}:
        return None
    return left.name, isinstance(conjunct, exp.NullSafeEQ)


def _sides(node: exp.Expression, a: str, b: str) -> set[str] | None:
    touched = set()
    for column in node.find_all(exp.Column):
        if isinstance(column.this, exp.Star):
            continue
        qualifier = column.table.lower()
        if qualifier not in (a, b):
            return None
        touched.add(qualifier)
    return touched


def _unaliased(table: exp.Table) -> exp.Table:
    copy = table.copy()
    copy.set("alias", None)
    for key in ("joins", "laterals", "pivots"):
        copy.set(key, None)
    return copy


def _resolve(table: exp.Table) -> exp.Expression:
    """The CTE's query when ``table`` names a CTE in scope (not its own, in a recursive
    one), else the table itself."""
    if table.db:
        return _unaliased(table)
    cte = Scope.at(table).find(table.name)
    if cte is not None and not any(node is table for node in cte.walk()):
        return cte.this
    return _unaliased(table)


def has_non_deterministic(node: exp.Expression) -> bool:
    for func in node.find_all(exp.Func):
        name = (func.name if isinstance(func, exp.Anonymous) else func.sql_name()).lower()
        if name in NON_DETERMINISTIC or isinstance(func, (exp.Rand, exp.Randn)):
            return True
    return False


def _unique(items: list[exp.Expression]) -> list[exp.Expression]:
    out: list[exp.Expression] = []
    for item in items:
        if not any(item is x for x in out):
            out.append(item)
    return out

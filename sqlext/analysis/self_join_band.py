"""The band of a self-join: how far the right side's ordering column may lie from the left
side's (``a.ts + lower <= b.ts <= a.ts + upper``), read off the join's comparisons, and the
window frame that holds exactly those rows (``RANGE BETWEEN <lower> AND <upper>`` over
``PARTITION BY keys ORDER BY ts``). Offsets are numbers or day-time intervals; a strict bound
becomes an inclusive frame edge where the column's type allows.

>>> from sqlext.language.dialect import parse_one
>>> band_bounds(parse_one("b.ts BETWEEN a.ts - 5 AND a.ts + 2"), "a", "b")[0][:2]
('ts', 'lower')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from sqlglot import exp

from sqlext.language.dialect import FRACTIONAL, INTEGRAL

TIMESTAMPS = {"timestamp", "timestamp_ntz", "timestamp_ltz"}

_MICROS = {
    "microsecond": 1, "millisecond": 1000, "second": 10**6, "minute": 60 * 10**6,
    "hour": 3600 * 10**6, "day": 86400 * 10**6, "week": 7 * 86400 * 10**6,
}


@dataclass(frozen=True)
class Offset:
    """A constant distance: ``kind`` is 'number' (value a Decimal) or 'interval' (microseconds);
    zero has kind None and is comparable with both."""

    kind: str | None
    value: Decimal | int

    def __add__(self, other: "Offset") -> "Offset":
        kind = _common_kind(self, other)
        return Offset(kind, self.value + other.value)

    def __neg__(self) -> "Offset":
        return Offset(self.kind, -self.value)

    def sql(self) -> str:
        magnitude = abs(self.value)
        if self.kind == "interval":
            # always in seconds: Spark wants both edges of a frame of one interval type
            seconds = Decimal(magnitude) / Decimal(10**6)
            return f"INTERVAL '{seconds.normalize():f}' SECOND"
        return f"{magnitude:f}" if isinstance(magnitude, Decimal) else str(magnitude)

    def tree(self) -> exp.Expression:
        """The distance's magnitude as a frame edge: a number, or an interval in seconds."""
        magnitude = abs(self.value)
        if self.kind == "interval":
            seconds = Decimal(magnitude) / Decimal(10**6)
            return exp.Interval(this=exp.Literal.string(f"{seconds.normalize():f}"), unit=exp.var("SECOND"))
        return exp.Literal.number(f"{magnitude:f}" if isinstance(magnitude, Decimal) else str(magnitude))


ZERO = Offset(None, 0)


class NotComparable(ValueError):
    pass


def _common_kind(a: Offset, b: Offset) -> str | None:
    if a.kind and b.kind and a.kind != b.kind:
        raise NotComparable(f"{a.kind} and {b.kind}")
    return a.kind or b.kind


@dataclass
class Bound:
    offset: Offset
    strict: bool
    conjunct: exp.Expression


@dataclass
class Band:
    """``a.column + lower <= b.column <= a.column + upper`` (None: unbounded on that side)."""

    column: str
    column_type: str | None
    lower: Bound | None = None
    upper: Bound | None = None
    exact: bool = True  # the frame holds exactly the band's rows (no edge is strict)
    conjuncts_used: list[exp.Expression] = field(default_factory=list)

    def frame_sql(self) -> str:
        return f"RANGE BETWEEN {_frame_bound(self.lower, 'PRECEDING')} AND {_frame_bound(self.upper, 'FOLLOWING')}"

    def frame(self) -> exp.WindowSpec:
        """The frame as a tree: ``RANGE BETWEEN <lower> AND <upper>``."""
        start, start_side = _frame_edge(self.lower, "PRECEDING")
        end, end_side = _frame_edge(self.upper, "FOLLOWING")
        return exp.WindowSpec(kind="RANGE", start=start, start_side=start_side, end=end, end_side=end_side)


def _frame_edge(bound: Bound | None, unbounded: str) -> tuple[exp.Expression | str, str | None]:
    if bound is None:
        return "UNBOUNDED", unbounded
    if bound.offset.value == 0:
        return "CURRENT ROW", None
    return bound.offset.tree(), "PRECEDING" if bound.offset.value < 0 else "FOLLOWING"


def _frame_bound(bound: Bound | None, unbounded: str) -> str:
    if bound is None:
        return f"UNBOUNDED {unbounded}"
    if bound.offset.value == 0:
        return "CURRENT ROW"
    return f"{bound.offset.sql()} {'PRECEDING' if bound.offset.value < 0 else 'FOLLOWING'}"


def tightest_band(column: str, column_type: str | None, pairs: list[tuple[str, Bound]]) -> Band | str:
    """The tightest lower and upper bound of ``column``, as inclusive frame edges."""
    if column_type is None:
        return f"the type of the band column {column!r} is unknown here"
    band = Band(column, column_type)
    for direction, bound in pairs:
        inclusive = _inclusive(bound, column_type, direction == "lower")
        if inclusive is None:
            return f"the band on {column!r} has an offset its type ({column_type}) cannot take"
        band.conjuncts_used.append(bound.conjunct)
        current = getattr(band, direction)
        if current is not None:
            try:
                _common_kind(inclusive.offset, current.offset)
            except NotComparable as error:
                return f"the band on {column!r} mixes offsets that cannot be compared ({error})"
            sign = 1 if direction == "lower" else -1
            if sign * inclusive.offset.value < sign * current.offset.value or (
                inclusive.offset.value == current.offset.value and not inclusive.strict
            ):
                continue
        setattr(band, direction, inclusive)
    band.exact = not any(b.strict for b in (band.lower, band.upper) if b is not None)
    if band.lower and band.upper:
        try:
            _common_kind(band.lower.offset, band.upper.offset)
        except NotComparable as error:
            return f"the band on {column!r} mixes offsets that cannot be compared ({error})"
        if band.lower.offset.value > band.upper.offset.value:
            return f"the band on {column!r} is empty (its lower bound is above its upper bound)"
    return band


def _inclusive(bound: Bound, column_type: str, lower: bool) -> Bound | None:
    """The bound as an inclusive frame edge for ``column_type``, or None when the type cannot
    take the offset. A strict bound on a discrete type moves by one step and becomes exact;
    on a continuous type it stays strict (the frame then holds the edge too)."""
    kind = bound.offset.kind
    base = column_type.split("(")[0]
    if base in INTEGRAL or base == "date":
        if kind == "interval" or bound.offset.value != int(bound.offset.value):
            return None
        step, value = Offset("number", 1), Offset(kind, int(bound.offset.value))
    elif base in TIMESTAMPS:
        if kind == "number":
            return None
        step, value = Offset("interval", 1), bound.offset
    elif base in FRACTIONAL or base == "decimal":
        if kind == "interval":
            return None
        step, value = None, bound.offset
    else:  # strings and other ordered types: only "b.x <= a.x" style bounds
        if bound.offset.value != 0:
            return None
        step, value = None, bound.offset
    if not bound.strict:
        return Bound(value, False, bound.conjunct)
    if step is None:
        return Bound(value, True, bound.conjunct)
    return Bound(value + (step if lower else -step), False, bound.conjunct)


def band_bounds(conjunct: exp.Expression, a: str, b: str) -> list[tuple[str, str, Bound]] | None:
    """``(column, 'lower'|'upper', bound)`` for a comparison of one column across the sides."""
    if isinstance(conjunct, exp.Between):
        low = band_bounds(exp.GTE(this=conjunct.this, expression=conjunct.args["low"]), a, b)
        high = band_bounds(exp.LTE(this=conjunct.this, expression=conjunct.args["high"]), a, b)
        if low is None or high is None:
            return None
        return [(c, d, Bound(x.offset, x.strict, conjunct)) for c, d, x in low + high]
    ops = {exp.LTE: ("upper", False), exp.LT: ("upper", True), exp.GTE: ("lower", False),
           exp.GT: ("lower", True), exp.EQ: ("both", False)}
    if type(conjunct) not in ops:
        return None
    direction, strict = ops[type(conjunct)]
    left, right = _offset_column(conjunct.this), _offset_column(conjunct.expression)
    if left is None or right is None:
        return None
    (lq, lc, lo), (rq, rc, ro) = left, right
    if lc != rc or {lq, rq} != {a, b}:
        return None
    try:
        if lq == b:  # b.c + lo OP a.c + ro  =>  b.c OP a.c + (ro - lo)
            offset = ro + -lo
        else:  # a.c + lo OP b.c + ro  =>  b.c OP' a.c + (lo - ro)
            offset = lo + -ro
            direction = {"upper": "lower", "lower": "upper", "both": "both"}[direction]
    except NotComparable:
        return None
    return [(lc, d, Bound(offset, strict, conjunct))
            for d in (["lower", "upper"] if direction == "both" else [direction])]


def _offset_column(node: exp.Expression) -> tuple[str, str, Offset] | None:
    """``q.c``, ``q.c + k``, ``q.c - k``, ``k + q.c`` as (q, c, offset)."""
    node = node.unnest()
    if isinstance(node, exp.Column) and node.table:
        return node.table.lower(), node.name, ZERO
    if isinstance(node, (exp.Add, exp.Sub)):
        this, other = node.this.unnest(), node.expression.unnest()
        if isinstance(node, exp.Add) and not isinstance(this, exp.Column):
            this, other = other, this
        if not (isinstance(this, exp.Column) and this.table):
            return None
        offset = constant_offset(other)
        if offset is None:
            return None
        return this.table.lower(), this.name, -offset if isinstance(node, exp.Sub) else offset
    return None


def constant_offset(node: exp.Expression) -> Offset | None:
    """A number or a day-time interval literal (``INTERVAL 10 MINUTES``, ``INTERVAL '1.5' SECOND``)."""
    node = node.unnest()
    if isinstance(node, exp.Neg):
        inner = constant_offset(node.this)
        return -inner if inner is not None else None
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return Offset("number", Decimal(node.this))
        except ArithmeticError:
            return None
    if isinstance(node, exp.Interval) and isinstance(node.this, exp.Literal) and node.unit is not None:
        unit = node.unit.name.lower().rstrip("s")
        if unit not in _MICROS:
            return None
        try:
            amount = Decimal(node.this.this)
        except ArithmeticError:
            return None
        micros = amount * _MICROS[unit]
        if micros != int(micros):
            return None
        return Offset("interval", int(micros))
    return None

"""Results as readable text tables (the CLI's output)."""

from __future__ import annotations

from typing import Any, Sequence

from sqlext.errors import counted


def format_value(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def format_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], truncated: bool = False) -> str:
    cells = [[format_value(v) for v in row] for row in rows]
    widths = [len(c) for c in columns]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"

    out = [rule, line(list(columns)), rule]
    out.extend(line(row) for row in cells)
    out.append(rule)
    count = counted(len(rows), "row")
    out.append(f"({count} shown; more not shown)" if truncated else f"({count})")
    return "\n".join(out)

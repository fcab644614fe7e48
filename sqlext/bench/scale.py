"""``sqlext bench scale``: each function at growing input sizes, with time and memory.

    sqlext bench scale --sizes 100000,1000000,10000000 --runs 1 --plot docs/scale.svg

For every size it generates the input (as the other benchmarks do, written once as
Parquet), runs the function, and samples, every 50 ms while it runs, the resident memory of
this Python process (the driver: sqlext never collects rows into it) and of the JVM (in
local mode the JVM is driver and executors at once, so it grows with Spark's buffers, up to
its heap). It prints one line per function and size and draws the table as an SVG chart.
The functions: CHANGELOG_FILTER and FK_JOIN (``changes``) over change feeds of that many
rows, the band self-join over that many events, and the ancestors of a random forest of
that many nodes (``WITH RECURSIVE``; about ln(n) ancestor rows per node).
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sqlext.bench.changes import FILTER_SQLEXT, FK_SQLEXT, make_changes, make_fk_inputs
from sqlext.bench.common import Sampler, jvm_pid


@dataclass
class Point:
    function: str
    size: int
    seconds: float
    driver_mb: float  # peak resident memory of the Python driver during the run
    jvm_mb: float  # peak resident memory of the JVM during the run


def _measure(spark, name: str, size: int, frame_factory, runs: int) -> Point:
    frame_factory().write.format("noop").mode("overwrite").save()  # warm-up
    seconds, driver, jvm = [], 0.0, 0.0
    for _ in range(runs):
        # from the text to the last row: rewriting, and any work sqlext does before Spark runs
        # the statement (a recursion's levels), count too
        with Sampler((os.getpid(), jvm_pid(spark))) as sampler:
            started = time.perf_counter()
            frame_factory().write.format("noop").mode("overwrite").save()
            seconds.append(time.perf_counter() - started)
        driver, jvm = max(driver, sampler.peaks[0]), max(jvm, sampler.peaks[1])
    point = Point(name, size, statistics.median(seconds), driver, jvm)
    print(f"  {name:<10} {size:>12,} rows  {point.seconds:8.2f} s   driver {point.driver_mb:7.0f} MB   "
          f"JVM {point.jvm_mb:7.0f} MB", flush=True)
    return point


BAND = """
SELECT a.id, b.id AS other FROM {table} a JOIN {table} b
  ON a.user_id = b.user_id AND b.ts BETWEEN a.ts - INTERVAL 10 MINUTES AND a.ts + INTERVAL 10 MINUTES
"""


def bench_scale(spark, sizes: list[int], runs: int, plot: Path | None) -> list[Point]:
    import sqlext
    from sqlext.bench.recursion import FOREST, make_inputs
    from sqlext.bench.selfjoin import make_events

    points = []
    for size in sizes:
        directory = tempfile.mkdtemp(prefix="sqlext-scale-")
        try:
            make_changes(spark, size, f"{directory}/changes")
            points.append(_measure(spark, "filter", size, lambda: sqlext.sql(spark, FILTER_SQLEXT), runs))
            make_fk_inputs(spark, size, max(1, size // 10), f"{directory}/fk")
            points.append(_measure(spark, "fk_join", size,
                                   lambda: sqlext.sql(spark, FK_SQLEXT.format(emit="changes")), runs))
            make_events(spark, size, 10, 0, f"{directory}/events", "scale_events")
            points.append(_measure(spark, "self_join", size,
                                   lambda: sqlext.sql(spark, BAND.format(table="scale_events")), runs))
            make_inputs(spark, size, 2, f"{directory}/recursion")  # a forest of `size` nodes
            points.append(_measure(spark, "recursion", size, lambda: sqlext.sql(spark, FOREST), runs))
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    if plot is not None:
        plot.parent.mkdir(parents=True, exist_ok=True)
        plot.write_text(svg_chart(points))
        print(f"chart written to {plot}")
    return points


COLOURS = {"filter": "#1b6ca8", "fk_join": "#c0392b", "self_join": "#27ae60", "recursion": "#8e44ad"}


def svg_chart(points: list[Point]) -> str:
    """Two log-log panels (time; driver and JVM memory) against input size, as SVG text."""
    width, height, pad = 420, 300, 50
    sizes = sorted({p.size for p in points})
    functions = sorted({p.function for p in points})

    def panel(x0: int, title: str, series: dict[str, list[tuple[int, float]]], unit: str) -> list[str]:
        values = [v for line in series.values() for _, v in line if v > 0]
        low, high = math.log10(min(values)), math.log10(max(values))
        if high - low < 1:
            low, high = low - 0.5, high + 0.5
        xs = [math.log10(s) for s in sizes]
        xlow, xhigh = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1

        def at(size, value):
            x = x0 + pad + (math.log10(size) - xlow) / (xhigh - xlow) * (width - 2 * pad)
            y = height - pad - (math.log10(value) - low) / (high - low) * (height - 2 * pad)
            return x, y

        out = [f'<text x="{x0 + width / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
               f'<rect x="{x0 + pad}" y="{pad}" width="{width - 2 * pad}" height="{height - 2 * pad}" '
               f'fill="none" stroke="#888"/>']
        for size in sizes:
            x, _ = at(size, 10 ** low)
            out.append(f'<text x="{x:.1f}" y="{height - pad + 16}" text-anchor="middle" font-size="10">'
                       f'{size:,}</text>')
        for exponent in range(math.ceil(low), math.floor(high) + 1):
            _, y = at(sizes[0], 10 ** exponent)
            out.append(f'<text x="{x0 + pad - 4}" y="{y + 3:.1f}" text-anchor="end" font-size="10">'
                       f'{10 ** exponent:g} {unit}</text>')
        for name, line in series.items():
            colour = COLOURS.get(name.split(" ")[0], "#555")
            dash = ' stroke-dasharray="4 3"' if name.endswith("JVM") else ""
            coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in (at(s, v) for s, v in line if v > 0))
            out.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        return out

    times = {f: [(p.size, p.seconds) for p in points if p.function == f] for f in functions}
    memory = {}
    for f in functions:
        memory[f"{f} driver"] = [(p.size, p.driver_mb) for p in points if p.function == f]
        memory[f"{f} JVM"] = [(p.size, p.jvm_mb) for p in points if p.function == f]
    body = panel(0, "time per run (s) against input rows", times, "s")
    body += panel(width, "peak memory (MB): driver solid, JVM dashed", memory, "MB")
    legend = [f'<text x="{pad + 120 * i}" y="{height + 14}" font-size="11" fill="{COLOURS.get(f, "#555")}">'
              f'■ {f}</text>' for i, f in enumerate(functions)]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * width}" height="{height + 24}" '
            f'font-family="sans-serif">\n' + "\n".join(body + legend) + "\n</svg>\n")

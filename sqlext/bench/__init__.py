"""Benchmarks (``sqlext bench ...``): each runs sqlext and the native Spark formulation of the
same work in one session, checks that both give the same rows, and reports median times and
their ratio.

    sqlext bench filter --rows 10000000 --runs 3          (changes.py)
    sqlext bench fk --left 5000000 --right 500000 --runs 3 (changes.py)
    sqlext bench selfjoin --rows 1000000 --runs 3         (selfjoin.py)
    sqlext bench recursion --nodes 1000000 --runs 3       (recursion.py)
    sqlext bench scale --sizes 100000,1000000 --runs 1    (scale.py)
    sqlext bench incremental --rows 10000000 --runs 3     (incremental.py)
"""

from __future__ import annotations


def run_benchmark(what: str, rows: int, runs: int, left: int = 0, right: int = 0,
                  native_runs: int | None = None, native_limit: float = 900.0) -> int:
    from sqlext.bench.changes import bench_filter, bench_fk
    from sqlext.session import local_session

    spark = local_session("sqlext-bench")
    if what == "filter":
        bench_filter(spark, rows, runs)
    elif what == "fk":
        bench_fk(spark, left, right, runs)
    elif what == "selfjoin":
        from sqlext.bench.selfjoin import bench_selfjoin

        bench_selfjoin(spark, rows, runs, native_runs, native_limit)
    return 0

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

"""sqlglot rules that turn sqlext SQL into plain Spark SQL.

``sqlext.rewrites.pipeline`` holds the ordered list of rules and the entry point; every other
module is one rule, a function the pipeline lists (``tests/test_layers.py`` checks both). What
the rules share lies below them, where the incremental engine reads it too: the reading of
relations, scopes and self-joins and the notes in ``sqlext.analysis``, the checked change
stream every function's expansion starts from in ``sqlext.functions.change_stream``, the
dialect they parse and print with in ``sqlext.language``.
"""

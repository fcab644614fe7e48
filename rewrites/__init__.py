"""sqlglot rules that turn sqlext SQL into plain Spark SQL.

``sqlext.rewrites.pipeline`` holds the ordered list of rules and the entry point; every other
module defines one rule, a function the pipeline lists (``tests/test_layers.py`` checks that).
What the rules share lies below them, where the incremental engine can read it too: relations,
scopes, the reading of a self-join and the notes in ``sqlext.analysis``; the checked change
stream the FK_JOIN and CHANGELOG_FILTER expansions start from in
``sqlext.functions.change_stream``; the dialect they parse and print with in ``sqlext.language``.
"""

"""sqlglot rules that turn sqlext SQL into plain Spark SQL.

``sqlext.rewrites.pipeline`` holds the ordered list of rules and the entry point; ``sqlext.rewrites.dialect``
the Spark dialect extension; every other module is one rule or a helper rules share.
"""

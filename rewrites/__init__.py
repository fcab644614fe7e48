"""sqlglot rules that turn sqlext SQL into plain Spark SQL.

``sqlext.rewrites.pipeline`` holds the ordered list of rules and the entry point; every other
module is one rule or a helper rules share. The dialect they parse and print with is
``sqlext.language``, below them.
"""

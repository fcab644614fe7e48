"""The SQL sqlext reads and writes, below every other part of it: the Spark dialect extended
with sqlext's syntax (``dialect``: parsing and printing) and the builders of the SQL trees that
rules and the engine generate (``sqltree``). Nothing here knows a function or Spark.
"""

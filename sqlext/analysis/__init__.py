"""What the rules and the incremental engine read off a statement, below both of them: what is
known about the relations it reads and the CTEs visible where (``relations``), the reading of a
join of one relation with itself (``self_join_match``, its band and window frame in
``self_join_band``, and the edits to the ``SELECT`` around a matched pair in
``self_join_edits``), and the notes a rule leaves about what it did (``notes``).

It sits here rather than with the rules because the engine reads a statement the same way:
an incremental self-join (:mod:`sqlext.streaming.operators.self_join`) is recognised by the
same match the batch rules rewrite, so the two never disagree on what a self-join is, and the
engine needs nothing from ``sqlext.rewrites``. Nothing here knows Spark: a question about a
relation's columns or types goes to a :class:`~sqlext.analysis.relations.Relations` object.
"""

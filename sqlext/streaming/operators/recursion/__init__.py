"""Incremental recursion over a growing edge set, one micro-batch at a time (``foreachBatch``).

A statement of the shape

    WITH RECURSIVE r(cols) AS (
      <anchor: constants, or a projection/filter of STREAM(edges)>
      UNION
      <step: r joined with STREAM(edges), inner joins and filters only>)
    SELECT ... FROM r [WHERE ...]

keeps two things in ``<checkpoint>/sqlext-state``: every edge seen (``edges/``) and every row
of ``r`` found so far (``result/``), each as files named by the batch that added them. A
micro-batch of new edges ``dE`` finds the new rows of ``r`` semi-naively, from the delta:

1. the seeds: the anchor over ``dE`` (a constant anchor as it is) and the step over the rows
   found so far joined with ``dE``, less the rows found so far;
2. the recursion from those seeds over all edges (old and new), run as any ``WITH RECURSIVE``
   is (the graph walk where it fits), less the rows found so far: the batch's new rows.

With distinct rows (``UNION``) and a step that is a join of one row of ``r`` with one edge,
this is exactly what the batch recursion over all edges adds to the batch recursion over the
old ones: a row is new only if some derivation of it uses a new edge, and the first new edge
on that derivation is met in step 1. So the outputs of the runs, concatenated, equal the
batch result. ``UNION ALL`` is refused: it counts derivations, which this state does not keep.

A stream with ``_change_type`` is a change feed of edges, which may also take edges away
(see :func:`~sqlext.streaming.operators.recursion.steps.changes`): the state then counts each edge's
inserts less its deletes, a batch that removes edges deletes and re-derives what they reached
(DRed), and the output is the change feed of ``r``'s rows.

Each folder holds a ``base`` (written by a batch that rewrote the whole state) and the
``batch`` files after it. A batch reads only the files of earlier batches and replaces its
own, so a replayed batch writes the same rows and state again.

The package: the statement's shape and refusals (:mod:`.shape`), what Spark's analysis of it
gives (:mod:`.compiled`), the run (:mod:`.run`) and its two steps, each written once
(:mod:`.steps`), over the two places a batch runs: the driver, over Arrow data
(:mod:`.driver`; the edges it keeps in memory: :mod:`.present`; rows as Arrow data:
:mod:`.arrow_rows`), and Spark (:mod:`.in_spark`).
"""

from sqlext.streaming.operators.recursion.compiled import compiled
from sqlext.streaming.operators.recursion.run import RecursionRun
from sqlext.streaming.operators.recursion.shape import RecursionShape

__all__ = ["RecursionRun", "RecursionShape", "compiled"]

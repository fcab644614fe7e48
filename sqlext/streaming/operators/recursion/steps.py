"""The two steps of an incremental recursion, each written once: edges that only arrive, and a
change feed whose edges may also be deleted. A step does not know where it runs: it is
written over a place (:class:`Place`), the operations that differ by where the rows are, and
the run (:class:`~sqlext.streaming.operators.recursion.run.RecursionRun`) gives it the driver's, over
Arrow data (:class:`~sqlext.streaming.operators.recursion.driver.DriverPlace`), or Spark's
(:class:`~sqlext.streaming.operators.recursion.in_spark.SparkPlace`).

Rows are the recursion's rows under its column names and types, in the place's own form (an
Arrow table, a Spark frame); ``None`` stands for no rows where a place finds that cheaper to
say than an empty table."""

from __future__ import annotations

from typing import Protocol

from sqlext.streaming.operators.recursion.shape import RecursionShape
from sqlext.streaming.run import step


class Place(Protocol):
    """The operations of one batch's step that differ by where it runs."""

    found_empty: bool  # whether no row was found before this batch

    # -- the batch's edges and the state of the edges
    def new_edges(self):
        """The distinct edges of an increment of edges that only arrive."""

    def fresh(self, new_edges):
        """Of ``new_edges``, those not present before this batch; they are the edges this batch
        adds to the state (:meth:`write_edges`), each counted once."""

    def net_changes(self):
        """A change feed's increment as ``(net, version)``: each touched edge with its inserts
        less deletes in the batch (0 left out), and the highest ordering value. A change type
        outside the four is refused."""

    def counted(self, net):
        """``(added, removed)``: the edges that ``net`` makes present and those it makes absent
        (None: none); the touched edges' counts are what this batch writes
        (:meth:`write_edges`). An edge deleted more often than inserted is refused."""

    # -- the recursion's rows
    def anchor(self, edges):
        """The anchor over ``edges`` (a constant anchor's rows whatever the edges)."""

    def step(self, rows, edges):
        """The recursion's step from ``rows`` over ``edges``, once."""

    def rows(self, parts):
        """``parts`` (rows, or None) as one set of the recursion's rows."""

    def reach(self, seeds, before: bool = False):
        """Every row the recursion reaches from ``seeds`` (each of them included; none from no
        seeds) over the edges present after this batch, or ``before`` it; each row once."""

    def minus(self, rows, taken):
        """``rows`` less the rows ``taken``."""

    def among(self, rows, wanted):
        """The rows of ``rows`` equal to some row of ``wanted``."""

    def empty(self, rows) -> bool:
        """Whether there are no ``rows``."""

    # -- the rows found so far (before this batch)
    def found_meeting(self, edges):
        """The rows found so far that the step may take over one of ``edges``."""

    def minus_found(self, rows, but=None):
        """``rows`` less the rows found so far, those among ``but`` excepted."""

    def kept_near(self, suspects, pairs):
        """The rows found so far, suspects excepted, that can produce a suspect in one step:
        where ``pairs`` ((position in a suspect, column of the recursion)) say the step copies a
        column of the recursion into its row as it is, those holding a suspect's value there."""

    def edges_near(self, suspects, pairs):
        """The edges present after this batch that can produce a suspect: where ``pairs``
        ((position in a suspect, column of the edge)) say a column is copied as it is, those
        holding a suspect's value there."""

    # -- the batch's writes: nothing is visible before commit
    def writing(self):
        """A context in which the state's writes run (on the driver, beside the rest)."""

    def write_edges(self) -> None:
        """The edges' state changed by this batch (see :meth:`fresh`, :meth:`counted`)."""

    def write_new(self, rows) -> None:
        """The rows newly found by edges that only arrive (None: none): the output and the
        rows found."""

    def write_changes(self, gone, inserted, version) -> None:
        """The rows no longer found and those newly found (None: none) as the output's change
        rows (with the batch's ``version``), and as the change of the rows found."""

    def commit(self) -> None:
        """The state's layers written by this batch, made the state."""


def arrivals(shape: RecursionShape, at: Place) -> None:
    """Edges that only arrive: the seeds (the anchor over the new edges, and the rows found
    so far that a new edge meets, taken one step), less what was found before, then the
    recursion from them over all edges, less what was found before: the batch's new rows.

    The state's two layers are written beside the rest where the place can (pyarrow's Parquet
    writer lets go of Python's lock): the edges' while the graph is walked, the rows found
    while the output is written; both are committed once the output is written, before the
    batch returns (and Spark records it). A batch stopped before that has committed nothing of
    its own, and one stopped between the two commits is replayed over the layers of the
    batches before it, as any replay is."""
    with step("collect the increment"):
        new_edges = at.new_edges()
    with step("look up the state"):
        fresh = at.fresh(new_edges)
        met = None if at.found_empty else at.found_meeting(fresh)
    with at.writing():
        at.write_edges()
        with step("walk"):
            # a seed twice is walked once: under UNION the first level keeps each row once
            seeds = at.minus_found(at.rows([at.anchor(fresh), None if met is None else at.step(met, fresh)]))
            # a row found before was reached from before: taken away again after the walk
            new = None if at.empty(seeds) else at.minus_found(at.reach(seeds))
        at.write_new(new)
        with step("write the state"):
            at.commit()


def changes(shape: RecursionShape, at: Place) -> None:
    """Edges inserted and deleted (``_change_type``). An edge is present while its inserts
    (``insert``, ``update_postimage``) outnumber its deletes (``delete``,
    ``update_preimage``). The batch's output is the change of the recursion's rows:
    ``insert`` for a row now reached, ``delete`` for a row no longer reached.

    A batch that removes edges deletes and re-derives (DRed): it takes away every row found
    so far that some derivation through a removed edge reaches (the suspects: found by a
    recursion from those edges over the old edges), keeps those of them that the remaining
    rows and present edges still derive, and adds what the added edges reach. Only what the
    removed edges reach is recomputed, and the state changes by those rows alone: the rows no
    longer found are written as such into the delta, the rows found so far are not
    rewritten. The state's layers are written as :func:`arrivals` writes them."""
    with step("collect the increment"):
        net, version = at.net_changes()
    with step("look up the state"):
        added, removed = at.counted(net)
    with at.writing():
        at.write_edges()
        with step("walk"):
            suspects = again = None
            if not at.found_empty and not at.empty(removed):
                suspects = _suspects(shape, at, removed)
                again = _still_derived(shape, at, suspects)
            met = None
            if not at.found_empty:
                met = at.found_meeting(added)
                met = met if suspects is None else at.minus(met, suspects)
            # a seed twice is walked once: under UNION the first level keeps each row once
            seeds = at.minus_found(at.rows([again, at.anchor(added), None if met is None else at.step(met, added)]),
                                   but=suspects)
            reached = None if at.empty(seeds) else at.minus_found(at.reach(seeds), but=suspects)
            if suspects is None:
                gone, inserted = None, reached
            elif reached is None:
                gone, inserted = suspects, None
            else:
                gone, inserted = at.minus(suspects, reached), at.minus(reached, suspects)
        at.write_changes(gone, inserted, version)
        with step("write the state"):
            at.commit()


def _suspects(shape: RecursionShape, at: Place, removed):
    """Every row found so far that some derivation through a removed edge reaches: the anchor
    over those edges (a constant anchor's rows need no edge) and the rows found met by one,
    taken one step, then the recursion from them over the edges before the batch."""
    parts = [at.step(at.found_meeting(removed), removed)]
    if not shape.constant_anchor:
        parts.append(at.anchor(removed))
    return at.reach(at.rows(parts), before=True)


def _still_derived(shape: RecursionShape, at: Place, suspects):
    """The suspects that the anchor over the present edges, or one step from a row found that
    is not a suspect, still derives. Where the anchor or the step copies a column as it is,
    only the edges and rows holding a suspect's value there are read."""
    derived = []
    if not shape.constant_anchor:
        derived.append(at.anchor(at.edges_near(suspects, shape.anchor_copied())))
    from_recursion, from_edges = shape.copied()
    derived.append(at.step(at.kept_near(suspects, from_recursion), at.edges_near(suspects, from_edges)))
    return at.among(at.rows(derived), suspects)

"""The streams a statement reads, as the one stream its query reads: each source's rows in a
column of their own (:func:`inputs_stream`), and a micro-batch's rows of one source taken back
out of it (:func:`source_frame`)."""

from __future__ import annotations

INPUT = "__sx_in{}"  # the column of the query's stream holding the rows of its i-th source


def inputs_stream(streams: list):
    """The streams a statement reads as one stream: the rows of the ``i``-th in a struct column
    :data:`INPUT` ``.format(i)``, NULL in the others. (One union: each call into Spark costs an
    analysis of the plan, paid by every run.)"""
    from pyspark.sql import functions as F

    everything = F.expr("struct(*)")
    parts = []
    for i, stream in enumerate(streams):
        columns = [everything.alias(INPUT.format(j)) if j == i else
                   F.lit(None).cast(other.schema).alias(INPUT.format(j)) for j, other in enumerate(streams)]
        parts.append(stream.select(*columns))
    union = parts[0]
    for part in parts[1:]:
        union = union.union(part)
    return union


def source_frame(batch, index: int):
    """The rows of the ``index``-th source in a micro-batch of :func:`inputs_stream`."""
    from pyspark.sql import functions as F

    column = INPUT.format(index)
    return batch.where(F.col(column).isNotNull()).select(f"{column}.*")


def estimated_bytes(batch) -> int | None:
    """Spark's estimate of a batch's bytes (for files, their size); None where it gives none."""
    try:
        return int(str(batch._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
    except Exception:  # noqa: BLE001 - a plan without statistics
        return None

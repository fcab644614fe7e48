"""What Spark's analysis of an incremental recursion gives, kept between its runs: the
recursion's columns and types, and its step compiled for the graph walk over Arrow data."""

from __future__ import annotations

from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import StructField, StructType

from sqlext.errors import SqlextError
from sqlext.functions.recursive_expand import DEFAULT_ROW_LIMIT, ROW_LIMIT_CONF, RecursiveSpec
from sqlext.language.dialect import to_sql
from sqlext.runner import run_statement
from sqlext.streaming.recent import Recent
from sqlext.streaming.operators.recursion.shape import RecursionShape, over
from sqlext.recursion.walk import NoWalk, compile_walk

# the recursion's columns and compiled walk, by statement, edge columns and session (see compiled)
_COMPILED = Recent(16)


def compiled(spark, shape: RecursionShape, edges):
    """The recursion's columns (:func:`_row_schema`) and its step compiled for the graph walk
    (:func:`_walk_plan`). Each is Spark's analysis of the statement over the edges' columns,
    which gives the same answer every run of the statement: a process keeps it for the runs
    after the first (each run starts a new query), by the anchor's and step's text, the
    columns, the edge columns and the settings the analysis reads, in the session that
    analysed it."""
    key = (to_sql(shape.anchor), to_sql(shape.step), tuple(shape.columns or ()), edges.json(),
           spark.conf.get(ROW_LIMIT_CONF, str(DEFAULT_ROW_LIMIT)), spark.conf.get("spark.sql.ansi.enabled"))
    kept = _COMPILED.get(key)
    if kept is not None and kept[0] is spark:
        return kept[1], kept[2]
    rows = _row_schema(spark, shape, edges)
    plan = _walk_plan(spark, shape, rows, edges)
    _COMPILED.put(key, (spark, rows, plan))
    return rows, plan


def _row_schema(spark, shape: RecursionShape, edges):
    """The recursion's columns and types: the anchor's (the step's rows are cast to them), read
    from Spark's analysis of the anchor over the stream's columns (nothing runs)."""
    view = f"__sx_rec_schema_{id(shape)}"
    spark.createDataFrame([], edges).createOrReplaceTempView(view)
    try:
        anchor = run_statement(spark, to_sql(over(shape.anchor, shape.name, view))).schema
    finally:
        spark.catalog.dropTempView(view)
    names = shape.columns or anchor.names
    return StructType([StructField(name, field.dataType, True) for name, field in zip(names, anchor.fields)])


def _walk_plan(spark, shape: RecursionShape, rows, edges):
    """The step compiled for the graph walk over Arrow data (the batch recursion's walk path),
    or None where the step is not a walk (it then runs in Spark)."""
    view = f"__sx_rec_edges_{id(shape)}"
    spark.createDataFrame([], edges).createOrReplaceTempView(view)
    try:
        spec = RecursiveSpec(name=shape.name, columns=rows.names, anchor_sql="",
                             step_sql=to_sql(over(shape.step, shape.name, view)), distinct=True, max_level=10_000,
                             row_limit=int(spark.conf.get(ROW_LIMIT_CONF, str(DEFAULT_ROW_LIMIT))))
        plan, source, _ = compile_walk(spark, spec, spark.createDataFrame([], rows), lambda sql: sql)
    except (NoWalk, SqlextError):
        return None
    finally:
        spark.catalog.dropTempView(view)
    if source is None:  # a step that reads the recursion alone: nothing to walk over edges
        return None
    plan.types = [to_arrow_type(f.dataType) for f in rows.fields]
    return plan

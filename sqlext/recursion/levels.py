"""The level path of the batch recursion (``RECURSIVE_EXPAND``): semi-naive iteration driven
from the driver, one Spark query per level over the previous level (checkpointed, so the plan
does not grow), or Spark's own recursion where it runs the shape; the path every recursion can
take (see :mod:`sqlext.udfs.recursive_expand`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from pyspark.errors import PySparkException
from pyspark.sql import Window
from pyspark.sql import functions as F
from sqlglot import exp
from sqlglot.errors import ParseError

from sqlext.errors import SqlextError
from sqlext.functions.recursive_expand import (FUNCTION, RecursiveSpec, level_limit_error, repeats_error,
                                               row_limit_error)
from sqlext.language.dialect import SparkExt, parse_one, to_sql
from sqlext.language.sqltree import fresh, helper

# The level path collapses its union of levels into one checkpoint every this many levels.
COLLAPSE_EVERY = 32


@dataclass
class Levels:
    """How the level path will run a recursion (``why``, in words) and the call that runs it."""

    why: str
    run: Callable[[], object]


OWN_LOOP = "sqlext's loop runs one Spark query per level, each level checkpointed"


def plan_levels(spark, spec: RecursiveSpec, anchor, scoped) -> Levels:
    """Semi-naive iteration, level by level.

    A ``UNION ALL`` recursion that Spark's own recursion accepts runs there, with sqlext's
    level and row limits (Spark iterates in one plan, with no query to plan per level);
    ``UNION``, ``USING KEY`` and the shapes Spark refuses run in sqlext's own loop, one Spark
    query per level. Deciding which runs only Spark's analysis of the native statement."""

    def own_loop():
        return _own_levels(spark, spec, anchor, scoped)

    if spec.distinct or spec.key:
        kind = "USING KEY" if spec.key else "UNION (distinct)"
        return Levels(f"{kind}, which Spark's own recursion does not run: {OWN_LOOP}", own_loop)
    native = _native_frame(spark, spec, anchor, scoped)
    if isinstance(native, str):
        return Levels(f"Spark's own recursion refuses this step ({native}): {OWN_LOOP}", own_loop)

    def native_then_own_loop():
        frame = _run_native(native, spec)
        return frame if frame is not None else own_loop()

    return Levels("UNION ALL in a shape Spark's own recursion accepts: Spark iterates the levels in one "
                  "plan, with sqlext's level and row limits", native_then_own_loop)


def run_levels(spark, spec: RecursiveSpec, anchor, scoped):
    """The recursion run level by level (see :func:`plan_levels`)."""
    return plan_levels(spark, spec, anchor, scoped).run()


def _own_levels(spark, spec: RecursiveSpec, anchor, scoped):
    """sqlext's own loop: one Spark query per level over the previous level."""
    working_view, union_view = fresh("rec_working_"), fresh("rec_union_")
    step_sql = substitute_step(spec.step_sql, spec.name, working_view, union_view)
    schema = anchor.schema

    def conform(frame):
        if len(frame.columns) != len(schema.fields):
            raise SqlextError(
                "UNSUPPORTED_STATEMENT", function=FUNCTION,
                reason=f"the step of {spec.name} returns {len(frame.columns)} columns, the anchor "
                       f"{len(schema.fields)}", fix="Make anchor and step return the same columns.")
        renamed = frame.toDF(*[helper(f"c{i}") for i in range(len(schema.fields))])
        return renamed.select([F.col(helper(f"c{i}")).cast(f.dataType).alias(f.name)
                               for i, f in enumerate(schema.fields)])

    step_text = scoped(step_sql)  # the same text every level: read the views anew

    def run_step(working, union=None):
        working.createOrReplaceTempView(working_view)
        if union is not None:
            union.createOrReplaceTempView(union_view)
        return conform(spark.sql(step_text))

    try:
        if spec.key:
            return _levels_keyed(spec, anchor, run_step)
        return _levels(spec, anchor, run_step)
    finally:
        spark.catalog.dropTempView(working_view)
        spark.catalog.dropTempView(union_view)


def _native_frame(spark, spec: RecursiveSpec, anchor, scoped):
    """The recursion as Spark's native ``WITH RECURSIVE`` (analysed, not run), or the error
    class with which Spark refuses its shape.

    The step's values are cast to the anchor's types, as the other paths cast them (Spark
    refuses a step of another type). Any failure to plan the statement (Spark raises some of
    them as a bare ``Py4JJavaError``, not as a ``PySparkException``) hands the recursion to
    sqlext's own loop, which reports whatever is wrong in it with the user's own text."""
    step = cast_projections(parse_one(spec.step_sql), anchor.schema)
    union = exp.Union(this=parse_one(spec.anchor_sql), expression=step, distinct=False)
    alias = exp.TableAlias(this=exp.to_identifier(spec.name),
                           columns=[exp.to_identifier(c) for c in spec.columns])
    cte = exp.CTE(this=union, alias=alias)
    cte.set("max_recursion_level", exp.Literal.number(spec.max_level))
    query = exp.select("*").from_(exp.to_identifier(spec.name))
    query.set("with_", exp.With(expressions=[cte], recursive=True))
    try:
        frame = spark.sql(scoped(to_sql(query)))
    except Exception as error:  # noqa: BLE001 - a shape Spark's recursion refuses: sqlext's own loop runs it
        return _error_class(error)
    if [f.dataType for f in frame.schema.fields] != [f.dataType for f in anchor.schema.fields]:
        return "its column types differ from the anchor's"
    return frame


def _error_class(error: BaseException) -> str:
    """The class Spark gave an error (``UNRESOLVED_COLUMN``), from the error itself: PySpark's
    condition, or the first bracketed word of the JVM exception's own message."""
    condition = getattr(error, "getCondition", None)
    if callable(condition) and condition():
        return condition()
    java = getattr(error, "java_exception", None)
    try:
        message = java.getMessage() if java is not None else ""
    except Exception:  # noqa: BLE001 - the JVM is gone: no class to read
        message = ""
    found = re.match(r"\s*\[([A-Z][A-Z0-9_.]*)\]", message or "")
    return found.group(1) if found else type(error).__name__


def _run_native(frame, spec: RecursiveSpec):
    """Run Spark's native recursion with sqlext's limits; None when it fails without an error
    class (sqlext's own loop runs it then)."""
    limits = {"spark.sql.cteRecursionRowLimit": str(spec.row_limit)}
    try:
        return _cut(frame, limits, measure=False)[0]
    except Exception as error:  # noqa: BLE001 - a Spark error (PySpark's or py4j's), mapped below
        error_class = _error_class(error)
        if error_class == "RECURSION_LEVEL_LIMIT_EXCEEDED":
            raise level_limit_error(spec.name, spec.max_level, spec.max_level) from None
        if error_class == "RECURSION_ROW_LIMIT_EXCEEDED":
            raise row_limit_error(spec.name, spec.max_level, spec.row_limit) from None
        if isinstance(error, PySparkException):
            raise  # a classed error of the statement itself (an overflow): the user's to see
        return None  # Spark's recursion failed without an error class: sqlext's own loop runs it


def cast_projections(step, schema):
    """``step`` (a parsed SELECT) with each column cast to the type of the schema's field in
    its position; ``step`` unchanged when that cannot be written (a ``*``, another number of
    columns, a type sqlglot does not read back).

    >>> from pyspark.sql.types import IntegerType, StructField, StructType
    >>> from sqlext.language.dialect import parse_one, to_sql
    >>> to_sql(cast_projections(parse_one("SELECT n + 1L AS m FROM r"), StructType([StructField("n", IntegerType())])))
    'SELECT CAST(n + CAST(1 AS BIGINT) AS INT) AS m FROM r'
    """
    projections = step.expressions if isinstance(step, exp.Select) else []
    if len(projections) != len(schema.fields) or any(p.is_star for p in projections):
        return step
    types = []
    for field in schema.fields:
        text = field.dataType.simpleString()
        try:
            to = exp.DataType.build(text, dialect=SparkExt)
        except (ParseError, ValueError):
            return step
        # only a type that reads back as written (a field name with a space, a collation: not)
        if "".join(to.sql(dialect=SparkExt).split()).lower() != "".join(text.split()).lower():
            return step
        types.append(to)
    step = step.copy()
    for projection, to in zip(step.expressions, types):
        target = projection if not isinstance(projection, exp.Alias) else projection.this
        target.replace(exp.Cast(this=target.copy(), to=to))
    return step


def _levels(spec: RecursiveSpec, anchor, run_step):
    level, (rows, digest) = _cut(anchor.distinct() if spec.distinct else anchor)
    seen = level if spec.distinct else None
    repeats_possible = not spec.distinct and not _nondeterministic(spec.step_sql)
    done, pending = None, []
    total = 0
    k = 0
    while rows:
        if k >= spec.max_level:
            raise level_limit_error(spec.name, k, spec.max_level)
        total += rows
        if total > spec.row_limit:
            raise row_limit_error(spec.name, k, spec.row_limit)
        pending.append(level)
        if len(pending) >= COLLAPSE_EVERY:
            done = _cut(union_all([done] + pending if done is not None else pending), measure=False)[0]
            pending = []
        produced = run_step(level)
        if spec.distinct:
            produced = produced.distinct().subtract(seen)
        previous, previous_size = level, (rows, digest)
        level, (rows, digest) = _cut(produced)
        k += 1
        if repeats_possible and rows and (rows, digest) == previous_size and _same_rows(level, previous):
            # a deterministic step maps equal levels to equal levels: this one repeats forever
            raise repeats_error(spec.name, k)
        if spec.distinct and rows:
            seen = _cut(seen.union(level), measure=False)[0]
    parts = ([done] if done is not None else []) + pending
    if not parts:
        return anchor.limit(0)
    return _cut(union_all(parts), measure=False)[0]


def _levels_keyed(spec: RecursiveSpec, anchor, run_step):
    names = anchor.columns
    lowered = [c.lower() for c in names]
    key = [names[lowered.index(k.lower())] for k in spec.key]
    union, (rows, _) = _cut(_one_per_key(anchor, key))
    working = union
    parallelism = anchor.sparkSession.sparkContext.defaultParallelism
    k = 0
    while rows:
        if k >= spec.max_level:
            raise level_limit_error(spec.name, k, spec.max_level)
        produced = _one_per_key(run_step(working, union), key)
        working, (rows, _) = _cut(_anti_join(produced, union, names))
        if rows:
            merged = _anti_join(union, working, key).unionByName(working)
            # keep the union's partitions few, or every level adds tasks to the next
            union, (size, _) = _cut(merged.coalesce(max(parallelism, 1)))
            if size > spec.row_limit:
                raise row_limit_error(spec.name, k, spec.row_limit)
        k += 1
    return union


def _anti_join(left, right, columns: list[str]):
    """Rows of ``left`` with no row of ``right`` equal (NULL-safe) on ``columns``."""
    renamed = right.select([F.col(_quote(c)).alias(f"__sx_r{i}") for i, c in enumerate(columns)])
    condition = None
    for i, c in enumerate(columns):
        term = left[_quote(c)].eqNullSafe(renamed[f"__sx_r{i}"])
        condition = term if condition is None else condition & term
    return left.join(renamed, on=condition, how="left_anti")


def _one_per_key(frame, key: list[str]):
    order = [F.col(_quote(c)).asc_nulls_first() for c in frame.columns]
    window = Window.partitionBy(*[F.col(_quote(k)) for k in key]).orderBy(*order)
    return frame.withColumn("__sx_rank", F.row_number().over(window)) \
        .where("__sx_rank = 1").drop("__sx_rank")


def _quote(name: str) -> str:
    """A column name as ``F.col`` and ``frame[...]`` read it (they parse dots and backticks);
    only for the DataFrame API: generated SQL quotes names as sqlglot identifiers."""
    return "`" + name.replace("`", "``") + "`"


def _cut(frame, settings: dict | None = None, measure: bool = True):
    """Materialise ``frame`` and cut its lineage, so that level k's plan does not hold level
    k-1's; returns the new frame and (its row count, an order-free checksum of its rows), or
    (None, None) without ``measure`` (a job saved where the caller needs neither).

    The columns are re-aliased on top of the checkpoint: a checkpoint keeps the attribute ids
    of the plan it came from, which trips Spark's analyzer when the step joins it with a
    relation that plan also read. Constraint propagation is off while the checkpoint is made,
    so that it carries no constraints over attributes of that plan (Spark fails to map them
    when such checkpoints are unioned)."""
    spark = frame.sparkSession
    settings = {"spark.sql.constraintPropagation.enabled": "false", **(settings or {})}
    before = {k: spark.conf.get(k) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        checkpointed = frame.localCheckpoint()
    finally:
        for k, v in before.items():
            spark.conf.set(k, v)
    cut = checkpointed.select([F.col(_quote(c)).alias(c) for c in checkpointed.columns])
    if not measure:
        return cut, (None, None)
    columns = [F.col(_quote(c)) for c in cut.columns]
    digest = F.xxhash64(*columns) if columns else F.lit(0)
    count, total = cut.agg(F.count(F.lit(1)), F.sum(digest.cast("decimal(38,0)"))).first()
    return cut, (count, total)


def _same_rows(a, b) -> bool:
    return a.exceptAll(b).isEmpty() and b.exceptAll(a).isEmpty()


def _nondeterministic(step_sql: str) -> bool:
    return any(isinstance(f, exp.Rand) or f.sql_name().lower() in _NONDETERMINISTIC
               for f in parse_one(step_sql).find_all(exp.Func))


_NONDETERMINISTIC = {"rand", "randn", "random", "uuid", "shuffle", "monotonically_increasing_id",
                     "spark_partition_id", "uniform", "randstr", "current_timestamp", "now"}


def union_all(frames):
    """The frames' rows, one frame (by column name)."""
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def reads_recurring(table, name: str) -> bool:
    """Whether ``table`` is ``recurring.<name>``: the keyed recursion's result so far, which
    exists only while the recursion runs (it is no relation of the catalogue)."""
    return (isinstance(table, exp.Table) and isinstance(table.this, exp.Identifier)
            and (table.db or "").lower() == "recurring" and not table.args.get("catalog")
            and table.name.lower() == name.lower())


def substitute_step(step_sql: str, name: str, working_view: str, union_view: str) -> str:
    """The step reading ``working_view`` where it read ``name`` (keeping the alias as written,
    its column list included, or ``name`` itself, so qualified and renamed columns still
    resolve) and ``union_view`` for ``recurring.name``.

    >>> substitute_step("SELECT zzz + 1 FROM t AS t1(zzz) WHERE zzz < 3", "t", "w", "u")
    'SELECT zzz + 1 FROM w AS t1(zzz) WHERE zzz < 3'
    """
    tree = parse_one(step_sql)
    for table in list(tree.find_all(exp.Table)):
        reads_result = reads_recurring(table, name)
        if not reads_result and not (isinstance(table.this, exp.Identifier) and not table.db
                                     and table.name.lower() == name.lower()):
            continue
        alias = table.args.get("alias")
        if alias is None or alias.this is None:
            alias = exp.TableAlias(this=exp.to_identifier(table.alias or name),
                                   columns=alias.args.get("columns") if alias is not None else None)
        replacement = exp.Table(this=exp.to_identifier(union_view if reads_result else working_view),
                                alias=alias.copy())
        table.replace(replacement)
    return to_sql(tree)

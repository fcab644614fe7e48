"""The sqlext adapter: dbt-spark's adapter with sqlext's connections; incremental models that
read ``STREAM(...)`` run as sqlext's incremental runs, and the others are kept away from
sqlext's functions, whose results over new rows alone would be wrong."""

from __future__ import annotations

from typing import List

from dbt.adapters.base import available
from dbt.adapters.spark.impl import SparkAdapter
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.sqlext.connections import SqlextConnectionManager

FUNCTION = "sqlext dbt"

# Why an incremental run of a model over a recursion would be wrong, for the error (the keyed
# functions say it themselves: sqlext.streaming.registry)
_RECURSION_WHY = "a recursion over only the new rows misses every path through the rows of earlier runs"


def _why(function: str) -> str:
    from sqlext.streaming.registry import KEYED

    return KEYED[function].why if function in KEYED else _RECURSION_WHY


def stateful_functions(sql: str) -> List[str]:
    """The sqlext functions ``sql`` calls whose result depends on all earlier input:
    CHANGELOG_FILTER, FK_JOIN, and recursion (WITH RECURSIVE or RECURSIVE_EXPAND, named
    ``WITH RECURSIVE``). Text that does not parse calls none of them as far as sqlext can
    tell (sqlext does not rewrite it either)."""
    from sqlglot import exp

    from sqlext.functions.arguments import find_calls
    from sqlext.functions.recursive_expand import FUNCTION as RECURSIVE_EXPAND
    from sqlext.rewrites.dialect import parse
    from sqlext.streaming.registry import KEYED

    try:
        trees = parse(sql)
    except Exception:  # noqa: BLE001 - sqlglot fails in several ways on text it cannot read
        return []
    found = set()
    for tree in trees:
        if tree is None:
            continue
        for function in KEYED:
            if find_calls(tree, function):
                found.add(function)
        if find_calls(tree, RECURSIVE_EXPAND) or any(w.args.get("recursive") for w in tree.find_all(exp.With)):
            found.add("WITH RECURSIVE")
    return sorted(found)


def _seed_text(value) -> str | None:
    """A CSV value as agate read it, written as the text Spark casts to the column's type."""
    import datetime
    import decimal

    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, datetime.datetime):
        return value.isoformat(sep=" ")
    return str(value)


class SqlextAdapter(SparkAdapter):
    ConnectionManager = SqlextConnectionManager  # type: ignore[assignment]

    @available
    def sqlext_load_seed_rows(self, table: str, agate_table, types: List[str]) -> str:
        """Append a seed's rows to ``table``: every value as text, cast by Spark to its column's
        type (``types``, as dbt-spark's INSERT casts it), through one DataFrame, so that no
        value is pasted into SQL text. Returns the text dbt keeps as the seed's compiled SQL."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import StringType, StructField, StructType

        from dbt.adapters.sqlext.session import as_dbt_errors, spark_session

        spark = spark_session(self.config.credentials.server_side_parameters)
        names = [f"c{i}" for i in range(len(types))]
        rows = [[_seed_text(value) for value in row] for row in agate_table.rows]
        with as_dbt_errors():
            frame = spark.createDataFrame(rows, StructType([StructField(n, StringType()) for n in names]))
            frame.select(*[F.col(n).cast(t) for n, t in zip(names, types)]).write.insertInto(table)
        return f"-- {len(rows)} rows appended to {table} by sqlext (one DataFrame, values cast to {', '.join(types)})"

    @available
    def sqlext_reads_streams(self, sql: str) -> bool:
        """Whether a model's SQL reads a ``STREAM(...)`` source, and so runs incrementally."""
        from sqlext.streaming import reads_streams

        return reads_streams(sql)

    @available
    def sqlext_run_stream(self, table: str, sql: str, full_refresh: bool) -> str:
        """One incremental run of a model that reads ``STREAM(...)`` into its table (see
        :func:`sqlext.streaming.run_into_table`); the text dbt shows for it. A run whose
        upstream incremental model was rebuilt since its last run is refused by the run itself
        (``[STREAM_SOURCE_REBUILT]``: :func:`sqlext.streaming.checkpoint.check_source_build`)."""
        from dbt.adapters.sqlext.session import as_dbt_errors, spark_session
        from sqlext.streaming import run_into_table

        spark = spark_session(self.config.credentials.server_side_parameters)
        with as_dbt_errors():
            run_into_table(spark, sql, table, full_refresh=full_refresh)
        return "OK (incremental run)" if not full_refresh else "OK (full refresh)"

    @available
    def sqlext_check_incremental_run(self, model_name: str, sql: str) -> str:
        """Raise if an incremental run of ``model_name`` would call a sqlext function whose
        result depends on all earlier input (see :func:`stateful_functions`); else return ''.

        sqlext runs these functions incrementally only through ``sqlext.stream``; a dbt model
        that filters its input to new rows (``is_incremental()``) and then calls one of them
        would compute a wrong result without any error, so it is refused instead.
        """
        from sqlext.errors import SqlextError

        functions = stateful_functions(sql)
        if not functions:
            return ""
        error = SqlextError(
            "INCREMENTAL_MODEL_UNSUPPORTED", function=FUNCTION, model=model_name,
            functions=", ".join(functions), reason="; ".join(_why(f) for f in functions),
        )
        raise DbtRuntimeError(str(error))

"""The sqlext adapter: dbt-spark's adapter with sqlext's connections; incremental models that
read ``STREAM(...)`` run as sqlext's incremental runs, and the others are kept away from
sqlext's functions, whose results over new rows alone would be wrong."""

from __future__ import annotations

from typing import Dict, List

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

    from sqlext.catalog.arguments import find_calls
    from sqlext.catalog.recursive_expand import FUNCTION as RECURSIVE_EXPAND
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


# In an incremental model's table folder: the build of each sqlext incremental table the
# model's runs read with STREAM(...) (its checkpoint's id), as of the model's last run
SOURCES_READ = "_sqlext_dbt_sources_read.json"


def _builds_read(spark, sql: str) -> Dict[str, str]:
    """For each table ``sql`` reads with ``STREAM(...)`` that sqlext's incremental runs write
    (an upstream incremental model: its folder holds their checkpoint), its name -> the id of
    that checkpoint, which a full refresh (or any rebuild of the table) replaces."""
    from sqlglot import exp

    from sqlext.errors import SqlextError
    from sqlext.rewrites.dialect import is_stream, parse_one
    from sqlext.storage import resolve
    from sqlext.streaming import CHECKPOINT_FOLDER, _table_folder, _table_name
    from sqlext.streaming.sources import stream_names

    builds = {}
    for table in parse_one(sql).find_all(exp.Table):
        if not is_stream(table):
            continue
        name = stream_names(table.this)[0]
        try:
            if not spark.catalog.tableExists(name):
                continue
            folder = resolve(spark, _table_folder(spark, _table_name(name), True))
            metadata = (folder / CHECKPOINT_FOLDER / "metadata").read_json()
        except SqlextError:  # not a table with a folder (a view, a table of another source)
            continue
        if metadata and metadata.get("id"):
            builds[name] = metadata["id"]
    return builds


def _model_folder(spark, table: str):
    from sqlext.storage import resolve
    from sqlext.streaming import _table_folder, _table_name

    return resolve(spark, _table_folder(spark, _table_name(table), True))


def _check_no_source_rebuilt(spark, table: str, model_name: str, builds: Dict[str, str]) -> None:
    """Refuse an incremental run of a model whose upstream incremental model was rebuilt (a
    full refresh) since the model's last run. The rebuilt table's files are named as its
    first runs' files were (by the run's batch number, from 0 again), so the model's stream
    would take them for files it already read: it would skip the upstream's changes, without
    an error, until the upstream's runs passed the number it had read."""
    from sqlext.errors import SqlextError

    if not spark.catalog.tableExists(table):
        return
    read = (_model_folder(spark, table) / SOURCES_READ).read_json() or {}
    rebuilt = sorted(name for name, build in read.items() if builds.get(name) != build)
    if rebuilt:
        raise SqlextError(
            "STREAM_SOURCE_REBUILT", function=FUNCTION, what=f"model {model_name} ({table})",
            rebuilt=", ".join(rebuilt),
            fix=f"Rebuild this model and the models that read it from the whole history: dbt build "
                f"--full-refresh --select {model_name}+ (or refresh an upstream together with its readers: "
                f"--select <upstream>+). Nothing was read or written.")


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
    def sqlext_run_stream(self, table: str, sql: str, full_refresh: bool, model_name: str | None = None) -> str:
        """One incremental run of a model that reads ``STREAM(...)`` into its table (see
        :func:`sqlext.streaming.run_into_table`); the text dbt shows for it. An incremental run
        whose upstream incremental model was rebuilt since its last run is refused (see
        :func:`_check_no_source_rebuilt`); each run records the builds it read."""
        from dbt.adapters.sqlext.session import as_dbt_errors, spark_session
        from sqlext.streaming import run_into_table

        spark = spark_session(self.config.credentials.server_side_parameters)
        with as_dbt_errors():
            builds = _builds_read(spark, sql)
            if not full_refresh:
                _check_no_source_rebuilt(spark, table, model_name or table, builds)
            run_into_table(spark, sql, table, full_refresh=full_refresh)
            (_model_folder(spark, table) / SOURCES_READ).write_json(builds)
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

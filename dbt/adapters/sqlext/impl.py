"""The sqlext adapter: dbt-spark's adapter with sqlext's connections; incremental models that
read ``STREAM(...)`` run as sqlext's incremental runs, and the others are kept away from
sqlext's functions, whose results over new rows alone would be wrong."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping

from dbt.adapters.base import available
from dbt.adapters.spark.impl import SparkAdapter
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.sqlext.connections import SqlextConnectionManager

FUNCTION = "sqlext dbt"

def _why(name: str) -> str:
    """Why an incremental run of a model over the function shown as ``name`` would be wrong."""
    from sqlext.functions import catalogue

    return next(f.why for f in catalogue.stateful() if f.shown_as == name)


def stateful_functions(sql: str) -> List[str]:
    """The sqlext functions ``sql`` calls whose result depends on all earlier input (the
    catalogue's stateful functions: CHANGELOG_FILTER, FK_JOIN, and recursion, WITH RECURSIVE or
    RECURSIVE_EXPAND, named ``WITH RECURSIVE``). Text that does not parse calls none of them as
    far as sqlext can tell (sqlext does not rewrite it either)."""
    from sqlglot import exp

    from sqlext.functions import catalogue
    from sqlext.functions.arguments import find_calls
    from sqlext.language.dialect import parse

    try:
        trees = parse(sql)
    except Exception:  # noqa: BLE001 - sqlglot fails in several ways on text it cannot read
        return []
    found = set()
    for tree in trees:
        if tree is None:
            continue
        for function in catalogue.stateful():
            if find_calls(tree, function.name) or (
                    function.called_as == "WITH RECURSIVE"
                    and any(w.args.get("recursive") for w in tree.find_all(exp.With))):
                found.add(function.shown_as)
    return sorted(found)


# A model's config that names the folders of change files its STREAM(name) sources read, and
# how each is read: {name: {"path": ..., "format": ..., ...}}
SOURCES_CONFIG = "sqlext_sources"
# the settings of one folder, as sqlext.stream names them; path alone is required
SOURCE_KEYS = ("path", "format", "schema", "options", "bad_records", "schema_evolution")
_EXAMPLE = "{'customers': {'path': '/data/customers', 'format': 'json'}}"


def source_settings(config: Any) -> Dict[str, Any]:
    """The keyword arguments of :func:`sqlext.streaming.run_into_table` for a model's
    ``sqlext_sources`` config (None: none): each name ``STREAM(name)`` may read, mapped to its
    folder's ``path`` (a URI or a path, as ``sources=`` takes it), ``format`` (of its files;
    Parquet by default), ``schema`` (its columns, DDL), ``options`` (Spark's reader options) and
    ``bad_records`` (``'fail'`` or ``'quarantine'``) and ``schema_evolution`` (``'fail'``,
    ``'add_columns'``, ``'widen_types'`` or ``'evolve'``). A config that is not of that shape is a
    classed error naming what is wrong.

    Each folder is read in its own format (``sqlext stream --source-format NAME=FORMAT``), so a
    model joins a JSON topic to a folder of Parquet files."""
    from difflib import get_close_matches

    from sqlext.errors import SqlextError

    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise SqlextError("INVALID_ARGUMENT_TYPE", function=FUNCTION, argument=SOURCES_CONFIG,
                          expected="a mapping of each name STREAM(name) reads to its folder's settings, such as "
                                   + _EXAMPLE,
                          value=_shown(config),
                          fix=f"Give {SOURCES_CONFIG} as a mapping (a dict in config(), a mapping in dbt_project.yml).")
    folders, formats, schemas, options, bad_records, evolution = {}, {}, {}, {}, {}, {}
    for name, given in config.items():
        where = f"the settings of {name!r} in {SOURCES_CONFIG}"
        if not isinstance(name, str) or not name.strip():
            raise SqlextError("INVALID_ARGUMENT_TYPE", function=FUNCTION, argument=f"a name in {SOURCES_CONFIG}",
                              expected="the name a STREAM(name) of the model reads", value=_shown(name),
                              fix=f"Key each folder's settings by that name: {_EXAMPLE}.")
        if not isinstance(given, Mapping):
            raise SqlextError("INVALID_ARGUMENT_TYPE", function=FUNCTION, argument=where,
                              expected=f"a mapping with the keys {', '.join(SOURCE_KEYS)}", value=_shown(given),
                              fix=f"Give the folder as {{'path': {given!r}}}." if isinstance(given, str)
                              else f"Write them as {_EXAMPLE}.")
        for key in given:
            if key not in SOURCE_KEYS:
                near = get_close_matches(str(key), SOURCE_KEYS, n=1)
                raise SqlextError("INVALID_ARGUMENT_TYPE", function=FUNCTION, argument=where,
                                  expected=f"a mapping with the keys {', '.join(SOURCE_KEYS)}",
                                  value=f"the key {_shown(key)}",
                                  fix=f"Did you mean {near[0]!r}?" if near else "Remove it.")
        path = given.get("path")
        if not isinstance(path, str) or not path.strip():
            raise SqlextError("INVALID_ARGUMENT_TYPE", function=FUNCTION,
                              argument=f"the path of {name!r} in {SOURCES_CONFIG}",
                              expected="the folder of its change files (a path, or a URI such as s3a://bucket/topic)",
                              value="nothing" if path is None else _shown(path),
                              fix=f"Add 'path': '/data/{name}' to {where}.")
        folders[name] = path
        for key, into in (("format", formats), ("schema", schemas), ("bad_records", bad_records),
                          ("schema_evolution", evolution)):
            if key in given:
                if not isinstance(given[key], str):
                    raise SqlextError("INVALID_ARGUMENT_TYPE", function=FUNCTION,
                                      argument=f"the {key} of {name!r} in {SOURCES_CONFIG}", expected="text",
                                      value=_shown(given[key]), fix=_TEXT_FIX[key])
                into[name] = given[key]
        if "options" in given:
            if not isinstance(given["options"], Mapping):
                raise SqlextError("INVALID_ARGUMENT_TYPE", function=FUNCTION,
                                  argument=f"the options of {name!r} in {SOURCES_CONFIG}",
                                  expected="a mapping of Spark's reader options", value=_shown(given["options"]),
                                  fix="Write them as {'header': 'true', 'delimiter': ';'}.")
            options[name] = {str(k): _option_text(v) for k, v in given["options"].items()}
    source_format = {name: formats.get(name, "parquet").lower() for name in folders}
    return dict(sources=folders, source_format=source_format, schemas=schemas, source_options=options,
                bad_records=bad_records, schema_evolution=evolution)


_TEXT_FIX = {
    "format": "Name the files' format as Spark's reader does: 'parquet', 'json', 'csv', ...",
    "schema": "Write the columns as DDL: 'id BIGINT, name STRING'.",
    "bad_records": "Write 'fail' (the default) or 'quarantine'.",
    "schema_evolution": "Write 'fail' (the default), 'add_columns', 'widen_types' or 'evolve'.",
}


def _option_text(value: Any) -> str:
    """A reader option's value as Spark takes it: YAML's true is 'true', not Python's 'True'."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


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
        from sqlext.errors import counted

        spark = spark_session(self.config.credentials.server_side_parameters)
        names = [f"c{i}" for i in range(len(types))]
        rows = [[_seed_text(value) for value in row] for row in agate_table.rows]
        with as_dbt_errors():
            frame = spark.createDataFrame(rows, StructType([StructField(n, StringType()) for n in names]))
            frame.select(*[F.col(n).cast(t) for n, t in zip(names, types)]).write.insertInto(table)
        return f"-- {counted(len(rows), 'row')} appended to {table} by sqlext (one DataFrame, values cast to " \
               f"{', '.join(types)})"

    @available
    def sqlext_reads_streams(self, sql: str) -> bool:
        """Whether a model's SQL reads a ``STREAM(...)`` source, and so runs incrementally."""
        from sqlext.streaming import reads_streams

        return reads_streams(sql)

    @available
    def sqlext_run_stream(self, table: str, sql: str, full_refresh: bool, sources: Any = None) -> str:
        """One incremental run of a model that reads ``STREAM(...)`` into its table (see
        :func:`sqlext.streaming.run_into_table`); the text dbt shows for it, which counts the
        bad records the run quarantined. ``sources`` is the model's ``sqlext_sources`` config:
        the folders of change files it reads by name, and how (:func:`source_settings`). A run
        whose upstream incremental model was rebuilt since its last run is refused by the run
        itself (``[STREAM_SOURCE_REBUILT]``: :func:`sqlext.streaming.checkpoint.check_source_build`)."""
        from dbt.adapters.sqlext.session import as_dbt_errors, spark_session
        from sqlext.errors import counted
        from sqlext.streaming import run_into_table

        with as_dbt_errors():
            settings = source_settings(sources)
            spark = spark_session(self.config.credentials.server_side_parameters)
            quarantined = run_into_table(spark, sql, table, full_refresh=full_refresh, **settings)
        said = "incremental run" if not full_refresh else "full refresh"
        if quarantined:
            said += f"; quarantined {counted(quarantined, 'bad record')}"
        return f"OK ({said})"

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

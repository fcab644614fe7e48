"""Incremental runs into a catalog table (what dbt's incremental models run): the table's
folder holds the run's checkpoint too (:data:`CHECKPOINT_FOLDER`), its columns are the
statement's (:func:`sqlext.streaming.plan.result_schema`), and a column a source gained is added
to it."""

from __future__ import annotations

from typing import Mapping

from sqlglot import exp

from sqlext.errors import SqlextError, surfaced
from sqlext.language.dialect import to_sql
from sqlext.session import ensure_installed
from sqlext.storage import resolve
from sqlext.streaming.bad_records import Quarantine
from sqlext.streaming.bind import FUNCTION, one_statement
from sqlext.streaming.checkpoint import START_OVER_DBT, clear_for_full_refresh
from sqlext.streaming.plan import result_schema
from sqlext.streaming.query import run_available_now
from sqlext.streaming.sources import Sources, table_folder, table_name
from sqlext.streaming.summary import committed_batches

CHECKPOINT_FOLDER = "_sqlext_checkpoint"


@surfaced("sqlext.streaming.run_into_table")
def run_into_table(spark, sql: str, table: str, *, full_refresh: bool = False,
                   sources: Mapping[str, str] | None = None, source_format: str | Mapping[str, str] = "parquet",
                   schemas: Mapping[str, str] | None = None,
                   source_options: Mapping[str, Mapping[str, str]] | None = None,
                   bad_records: Mapping[str, str] | None = None, schema_evolution: Mapping[str, str] | None = None):
    """One incremental run of ``sql`` (which reads ``STREAM(...)`` tables or folders) into the
    catalog table ``table``: the rows of the changes that arrived since the last run are
    appended. Returns the number of bad records the run set aside in the quarantine (0 where
    it met none, or none of its folders asks for one).

    The table is a Parquet table over a folder that also holds the run's checkpoint (in
    ``_sqlext_checkpoint``, which Spark's file readers skip), so the output and the state
    that produced them stay together: dropping the folder starts over. A new table's folder is
    ``<its database's location>/<name>``. ``full_refresh`` drops the table and its folder first,
    so the run processes the whole history again. A table that exists without such a
    checkpoint (written by something else), or whose columns differ from the statement's, is
    refused: ``full_refresh`` rebuilds it.

    ``sources``, ``source_format``, ``schemas``, ``source_options``, ``bad_records`` and
    ``schema_evolution`` are :func:`stream`'s: folders of change files read by name, their
    files' format (one for all, or one per name), columns, reader options, what happens to a
    record that cannot be read, and how a source's columns may change. A quarantined record goes to
    ``_sqlext_checkpoint/quarantine`` in the table's folder. A column a source gained is added
    to the table once the run wrote its rows (``ALTER TABLE ... ADD COLUMNS``); a wider type is
    refused, as Spark does not change the type of a column of a table of files."""
    ensure_installed(spark)
    target = table_name(table)
    name = to_sql(target)
    settings = dict(sources=sources, source_format=source_format, schemas=schemas, source_options=source_options,
                    bad_records=bad_records, schema_evolution=schema_evolution)
    # the settings, and the names the statement reads, are checked before anything is dropped or read
    folders = Sources(spark, sources, source_format, schemas, None, source_options, bad_records, schema_evolution)
    folders.check_used(one_statement(sql), "sources= (a dbt model's sqlext_sources)")
    exists = spark.catalog.tableExists(name)
    folder = resolve(spark, table_folder(spark, target, exists))
    if full_refresh:
        if exists:
            spark.sql(to_sql(exp.Drop(tables=[target.copy()], kind="TABLE", exists=True)))
            exists = False
        clear_for_full_refresh(folder / CHECKPOINT_FOLDER, folder, runs_only=False)  # the table's, dropped
    schema = result_schema(spark, sql, folders)
    if exists:
        if not (folder / CHECKPOINT_FOLDER).is_dir():
            raise SqlextError("STREAM_TABLE_NOT_INCREMENTAL", function=FUNCTION, table=name, folder=folder.uri)
        have = [(f.name, f.dataType.simpleString()) for f in spark.table(name).schema.fields]
        want = [(f.name, f.dataType.simpleString()) for f in schema.fields]
        added = _added_columns(have, want)
        if added is None:
            raise SqlextError("STREAM_TABLE_COLUMNS_DIFFER", function=FUNCTION, table=name,
                              have=_columns(have), want=_columns(want))
    checkpoint = folder / CHECKPOINT_FOLDER
    committed = committed_batches(checkpoint)
    run_available_now(spark, sql, checkpoint=checkpoint.uri, output=folder.uri, start_over=START_OVER_DBT, **settings)
    if not exists:
        spark.catalog.createTable(name, path=folder.uri, source="parquet", schema=schema)
    elif added:  # a source's columns grew, as its schema evolution allowed (the run checked)
        spark.sql(to_sql(exp.Alter(this=target.copy(), kind="TABLE", actions=[exp.Schema(expressions=[
            exp.ColumnDef(this=exp.to_identifier(f.name, quoted=True), kind=exp.DataType.build(f.dataType.simpleString(),
                                                                                             dialect="spark"))
            for f in schema.fields if f.name in added])])))
    spark.catalog.refreshTable(name)
    # counted as sqlext stream's summary counts them: the records of the batches this run committed
    return Quarantine(checkpoint).count(sorted(committed_batches(checkpoint) - committed))


def _added_columns(have: list, want: list) -> list[str] | None:
    """The columns a table of ``have`` (name, type) gains to hold rows of ``want``: none where
    they hold the same columns (in any order: a table of files is read by name, and a column it
    gained is at its end); those ``want`` adds where it only adds (a source's schema evolution);
    None where a column would change type, or go, which a table of files cannot do.

    >>> _added_columns([("id", "bigint")], [("id", "bigint"), ("c", "string")])
    ['c']
    >>> _added_columns([("id", "bigint"), ("c", "string")], [("c", "string"), ("id", "bigint")])
    []
    >>> _added_columns([("id", "int")], [("id", "bigint")]) is None
    True
    """
    wanted = dict(want)
    if any(wanted.get(name) != kind for name, kind in have):
        return None
    return [name for name, _ in want if name not in dict(have)]


def _columns(columns) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in columns)
